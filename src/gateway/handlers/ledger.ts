// Currencies and the ledger: POST/GET /v1/currencies, POST /v1/ledger_entries (manual adjustment
// with a reason; negative amounts spend earliest expiry first under the currency's policy), and
// GET /v1/customers/{id}/ledger_entries (newest first). Balances appear in the customer's state
// view and /balances. The customer's actor applies every movement; these handlers only load the
// currency configs it needs, then hand it the command.
import { z } from 'zod';
import type { Engine } from '../../actors/engine.js';
import type { Currency, CurrencyCatalog } from '../../catalog/currencies.js';
import { tierProgramOf } from '../../catalog/rules-context.js';
import { ledgerLimits } from '../../domain/ledger.js';
import type { TierProgram } from '../../domain/tiers.js';
import { ApiError } from '../../errors/api-error.js';
import { limits } from '../../limits.js';
import type { LedgerRow } from '../../persistence/sql/read-model.js';
import { cursorEpochMsMax, cursorInt, pageQuerySchema, pageRequest, toPage } from '../pagination.js';
import { type AnyRoute, environmentIdOf, type RequestContext, route } from '../route.js';
import { balanceWire, customerTarget, iso, ledgerEntryWire, namingCustomer, unwrap } from '../wire.js';
import { currencySchema, ledgerEntryCreatedSchema, ledgerEntrySchema, pageOf } from '../wire-schemas.js';

const currencyBody = z.strictObject({
  key: z
    .string()
    .min(1)
    .max(64)
    .regex(/^[a-z][a-z0-9_]*$/, 'Use snake_case, e.g. coins.'),
  name: z.string().min(1).max(limits.nameCharsMax),
  negative_balance: z.enum(['forbid', 'allow']).default('forbid'),
  expiry_days: z.number().int().min(1).max(ledgerLimits.expiryDaysMax).nullable().default(null),
});

const amount = z
  .number()
  .int()
  .refine((n) => n !== 0 && Math.abs(n) <= ledgerLimits.amountMinorMax, 'A non-zero integer amount in minor units.')
  // The refine is not representable in JSON Schema: its bounds are documented here.
  .meta({ minimum: -ledgerLimits.amountMinorMax, maximum: ledgerLimits.amountMinorMax, not: { const: 0 } })
  .describe('Minor units, non-zero: positive credits, negative debits.');

const entryBody = z.strictObject({
  customer_id: z.string().min(1).max(limits.externalIdCharsMax).describe("The customer's service id (cust_...) or external id."),
  currency: z.string().min(1).max(64),
  amount,
  reason: z.string().min(1).max(ledgerLimits.reasonCharsMax),
  expires_at: z.iso.datetime({ offset: true }).nullable().optional(),
  confirm_after: z.iso.datetime({ offset: true }).optional(),
});

export interface LedgerDeps {
  engine: Engine;
  now(environmentId: string): number | Promise<number>;
  currencies: CurrencyCatalog;
  tiers: { all(environmentId: string): Promise<TierProgram[]> };
  readModel: {
    listLedgerEntries(
      environmentId: string,
      customerIds: string | readonly string[],
      q: { limit: number; before: { createdAtMs: number; id: string } | null },
    ): Promise<LedgerRow[]>;
  };
  drainProjector(): Promise<void>;
}



function currencyWire(c: Currency) {
  return {
    id: c.id,
    key: c.key,
    name: c.name,
    negative_balance: c.negativeBalance,
    expiry_days: c.expiryDays,
    version: c.version,
    created_at: iso(c.createdAtMs),
    updated_at: iso(c.updatedAtMs),
  };
}

export function ledgerRoutes(deps: LedgerDeps): AnyRoute[] {
  return [
    route({
      method: 'POST',
      path: '/v1/currencies',
      summary: 'Define a currency (negative_balance: forbid (default) or allow; expiry_days: default lifetime of a credit)',
      tag: 'Ledger',
      auth: { kind: 'credential', scopes: ['programs:write'], allow: ['secret', 'pat', 'session'] },
      body: currencyBody,
      idempotent: true,
      responses: { 201: { description: 'The currency.', schema: currencySchema } },
      handler: async (ctx: RequestContext<z.infer<typeof currencyBody>>) => ({
        status: 201,
        body: currencyWire(await deps.currencies.create(environmentIdOf(ctx.principal), ctx.body, ctx.callId)),
      }),
    }),
    route({
      method: 'GET',
      path: '/v1/currencies',
      summary: 'List currencies',
      tag: 'Ledger',
      auth: { kind: 'credential', scopes: ['programs:read'], allow: ['secret', 'pat', 'session'] },
      query: pageQuerySchema,
      responses: { 200: { description: 'A page of currencies.', schema: pageOf(currencySchema) } },
      handler: async (ctx: RequestContext<unknown, z.infer<typeof pageQuerySchema>>) => {
        const page = pageRequest(ctx);
        const rows = await deps.currencies.list(environmentIdOf(ctx.principal), { limit: page.limit + 1, after: page.after?.[0] ?? null });
        return { status: 200, body: toPage(rows, page, (r) => [r.id], currencyWire) };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/ledger_entries',
      summary: "Adjust a customer's balance by hand (reason required); a negative amount spends earliest expiry first",
      tag: 'Ledger',
      auth: { kind: 'credential', scopes: ['ledger:write'], allow: ['secret', 'pat', 'session'] },
      body: entryBody,
      idempotent: true,
      responses: { 201: { description: 'The ledger entry, with the balance of its currency after it.', schema: ledgerEntryCreatedSchema } },
      handler: async (ctx: RequestContext<z.infer<typeof entryBody>>) => {
        const env = environmentIdOf(ctx.principal);
        const b = ctx.body;
        const [currencies, programs] = await Promise.all([deps.currencies.configs(env, [b.currency]), deps.tiers.all(env)]);
        const nowMs = await deps.now(env);
        // The body named the customer: an unknown one is a 404 naming customer_id.
        const reply = await namingCustomer('customer_id', async () =>
          unwrap(
            await deps.engine.execute({
              env,
              target: customerTarget(b.customer_id),
              command: {
                kind: 'ledger.run',
                currencies,
                tierPrograms: programs.map(tierProgramOf),
                command: {
                  kind: 'ledger.adjust',
                  currency: b.currency,
                  amount: b.amount,
                  reason: b.reason,
                  sourceType: 'manual_adjustment',
                  sourceId: ctx.principal.credentialId,
                  expiresAtMs: b.expires_at === undefined ? undefined : b.expires_at === null ? null : Date.parse(b.expires_at),
                  confirmAfterMs: b.confirm_after === undefined ? undefined : Date.parse(b.confirm_after),
                },
              },
              nowMs,
              // A run again under the same Idempotency-Key is answered this entry, not given another.
              callId: ctx.callId,
            }),
          ),
        );
        if (reply.kind !== 'ledger' || reply.reply.kind !== 'ledger.entry') throw new ApiError('internal_error');
        return {
          status: 201,
          body: { ...ledgerEntryWire(reply.reply.entry), balance: balanceWire(reply.reply.balance) },
          // The entry does not show its customer: named so that erasing the customer forgets this answer
          // (an owner on the previous version names none: answerCustomerIds keeps only ids).
          customerIds: typeof reply.customerId === 'string' ? [reply.customerId] : undefined,
        };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/customers/:id/ledger_entries',
      summary: "A customer's ledger entries, newest first",
      tag: 'Ledger',
      auth: { kind: 'credential', scopes: ['ledger:read'], allow: ['secret', 'pat', 'session'] },
      query: pageQuerySchema,
      responses: { 200: { description: 'A page of ledger entries, newest first.', schema: pageOf(ledgerEntrySchema) } },
      handler: async (ctx: RequestContext<unknown, z.infer<typeof pageQuerySchema>>) => {
        const env = environmentIdOf(ctx.principal);
        const id = ctx.params.id ?? '';
        // The customer must exist in this environment (404 otherwise, like every customer route).
        const view = unwrap(await deps.engine.execute({ env, target: customerTarget(id), command: { kind: 'customer.view' }, nowMs: await deps.now(env) }));
        if (view.kind !== 'customer') throw new ApiError('internal_error');
        const page = pageRequest(ctx);
        let before: { createdAtMs: number; id: string } | null = null;
        if (page.after !== null) {
          const [at, entryId] = page.after;
          if (entryId === undefined) throw new ApiError('invalid_cursor', { param: 'cursor' });
          before = { createdAtMs: cursorInt(at, 0, cursorEpochMsMax), id: entryId };
        }
        await deps.drainProjector();
        const rows = await deps.readModel.listLedgerEntries(env, view.customer.id, { limit: page.limit + 1, before });
        return {
          status: 200,
          body: toPage(rows, page, (r) => [String(r.createdAtMs), r.id], ledgerEntryWire),
        };
      },
    }),
  ];
}

