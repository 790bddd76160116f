// Rewards and issuances (spec 2.7, 3, 4.6): the reward catalogue (POST/GET/PATCH with If-Match,
// DELETE archives) and reward issuances. Issuing takes one unit of stock in PostgreSQL BEFORE the
// customer's step (RewardCatalog.reserve, one guarded UPDATE), then the customer's actor journals
// the issuance under the reserved id; a refusal by the actor gives the unit back. Redeem spends the
// price in the actor's step (409 insufficient_balance keeps it issued); cancel gives the unit back
// after the journal acknowledged it. Reads come from the reward_issuances read table.
import { z } from 'zod';
import type { Engine } from '../../actors/engine.js';
import type { CallResult, } from '../../actors/partition.js';
import type { CurrencyCatalog } from '../../catalog/currencies.js';
import type { RewardCatalog, RewardRecord, RewardStatus } from '../../catalog/rewards.js';
import { tierProgramOf } from '../../catalog/rules-context.js';
import { ledgerLimits } from '../../domain/ledger.js';
import { expiryAfterPattern, type Issuance, issuanceIdPrefix, type RewardCommand } from '../../domain/rewards.js';
import type { TierProgram } from '../../domain/tiers.js';
import { ApiError } from '../../errors/api-error.js';
import { newId } from '../../ids.js';
import { limits } from '../../limits.js';
import type { IssuanceRow } from '../../persistence/sql/read-model.js';
import { etagHeader, expectedVersion } from '../etag.js';
import { pageQuerySchema, pageRequest, toPage } from '../pagination.js';
import { type AnyRoute, type AuthSpec, environmentIdOf, type RequestContext, route } from '../route.js';
import { customerTarget, iso, unwrap } from '../wire.js';
import { namesOneOf } from '../validation.js';
import { pageOf, rewardIssuanceSchema, rewardSchema } from '../wire-schemas.js';

const expiryAfter = z
  .string()
  .max(16)
  // Checked by the catalog (its own message); documented here.
  .meta({ pattern: expiryAfterPattern.source })
  .nullable()
  .describe('How long an issuance stays valid: "<n>d" (days) or "<n>h" (hours); null never expires.');
const cost = z.number().int().min(0).max(ledgerLimits.amountMinorMax).describe('Price in minor units of `currency`, spent at redeem.');
const availability = z.number().int().min(0).max(2_000_000_000).describe('Units that may be issued in total (cancel gives one back).');

const createBody = z.strictObject({
  name: z.string().min(1).max(limits.nameCharsMax),
  cost,
  currency: z.string().min(1).max(64).describe('A currency key of the environment.'),
  availability,
  expiry_after: expiryAfter.default(null),
});

// A body naming nothing to change is refused like the other catalog PATCHes (no version bump, so a
// held ETag stays valid). null is a change for the nullable fields.
const patchFields = ['name', 'cost', 'availability', 'expiry_after', 'status'] as const;
const patchBody = z
  .strictObject({
    name: z.string().min(1).max(limits.nameCharsMax).optional(),
    cost: cost.optional(),
    availability: availability.optional(),
    expiry_after: expiryAfter.optional(),
    status: z.enum(['active', 'archived']).optional(),
  })
  .refine(...namesOneOf(patchFields));

const listQuery = pageQuerySchema.extend({ status: z.enum(['active', 'archived']).optional() });

const issueBody = z.strictObject({
  reward_id: z.string().min(1).max(64),
  customer_id: z.string().min(1).max(limits.externalIdCharsMax).describe("The customer's service id (cust_...) or external id."),
});

const cancelBody = z.strictObject({ reason: z.string().min(1).max(ledgerLimits.reasonCharsMax).optional() });

const issuanceListQuery = pageQuerySchema.extend({
  status: z.enum(['issued', 'redeemed', 'cancelled', 'expired']).optional(),
  customer_id: z.string().min(1).max(limits.externalIdCharsMax).optional().describe("Only this customer's issuances (service id or external id)."),
});

export interface RewardDeps {
  engine: Engine;
  now(environmentId: string): number | Promise<number>;
  rewards: RewardCatalog;
  currencies: CurrencyCatalog;
  tiers: { all(environmentId: string): Promise<TierProgram[]> };
  readModel: {
    /** As of `atMs`: one past expires_at reads expired before the sweep records it (ReadModel.listIssuances). */
    listIssuances(
      environmentId: string,
      q: { limit: number; after: string | null; status: string | null; customerId: string | null; atMs: number },
    ): Promise<IssuanceRow[]>;
    getIssuance(environmentId: string, id: string, atMs: number): Promise<IssuanceRow | null>;
  };
  drainProjector(): Promise<void>;
}

export function rewardWire(r: RewardRecord) {
  return {
    id: r.id,
    name: r.name,
    cost: r.cost,
    currency: r.currency,
    availability: r.availability,
    issued: r.issued,
    expiry_after: r.expiryAfter,
    status: r.status,
    version: r.version,
    created_at: iso(r.createdAtMs),
    updated_at: iso(r.updatedAtMs),
  };
}

type IssuanceFields = Pick<IssuanceRow, 'id' | 'rewardId' | 'status' | 'sourceType' | 'sourceId' | 'costEntryId' | 'expiresAtMs' | 'redeemedAtMs' | 'cancelledAtMs' | 'version' | 'createdAtMs'>;

export function issuanceWire(i: IssuanceFields, customerId: string) {
  return {
    id: i.id,
    reward_id: i.rewardId,
    customer_id: customerId,
    status: i.status,
    source_type: i.sourceType,
    source_id: i.sourceId,
    cost_entry_id: i.costEntryId,
    expires_at: iso(i.expiresAtMs),
    redeemed_at: iso(i.redeemedAtMs),
    cancelled_at: iso(i.cancelledAtMs),
    version: i.version,
    created_at: iso(i.createdAtMs),
  };
}


/** Decisions of the actor that certainly wrote nothing: the reserved unit can go back at once. */
const refusedCodes = new Set(['resource_not_found', 'reward_unavailable', 'validation_failed']);

const catalogRead: AuthSpec = { kind: 'credential', scopes: ['programs:read'], allow: ['secret', 'pat', 'session'] };
const catalogWrite: AuthSpec = { kind: 'credential', scopes: ['programs:write'], allow: ['secret', 'pat', 'session'] };
const issuanceRead: AuthSpec = { kind: 'credential', scopes: ['ledger:read'], allow: ['secret', 'pat', 'session'] };
const issuanceWrite: AuthSpec = { kind: 'credential', scopes: ['ledger:write'], allow: ['secret', 'pat', 'session'] };

export function rewardRoutes(deps: RewardDeps): AnyRoute[] {
  /** The customer's service id, if it exists in this environment (else resource_not_found naming `param`). */
  async function customerIdOf(env: string, ref: string, nowMs: number, param: string): Promise<string> {
    const r = await deps.engine.execute({ env, target: customerTarget(ref), command: { kind: 'customer.view' }, nowMs });
    if (r.ok !== true || r.reply.kind !== 'customer' || r.reply.customer.environmentId !== env) {
      if (r.ok === false && r.code !== 'resource_not_found') unwrap(r);
      throw new ApiError('resource_not_found', { message: 'No customer with this id.', param });
    }
    return r.reply.customer.id;
  }

  /**
   * Runs a reward command on the customer holding issuance `id` (found through its reservation).
   * `callId`: the request's under an Idempotency-Key, so a run again is answered, not refused (invalid_state).
   */
  async function onIssuance(
    env: string,
    id: string,
    command: () => Promise<RewardCommand>,
    callId?: string,
  ): Promise<{ issuance: Issuance; customerId: string }> {
    const res = await deps.rewards.reservation(env, id);
    if (res === null) throw new ApiError('resource_not_found', { message: 'No reward issuance with this id.', param: 'id' });
    const [programs, cmd] = await Promise.all([deps.tiers.all(env), command()]);
    // The clock is read last, right before the step: the step judges expires_at by it, and a read
    // answering `expired` meanwhile (by its own later clock) must not be followed by a redeem or
    // cancel judged by an earlier time.
    const nowMs = await deps.now(env);
    const reply = unwrap(
      await deps.engine.execute({
        env,
        target: { by: 'id', id: res.customerId },
        command: { kind: 'reward.run', command: cmd, tierPrograms: programs.map(tierProgramOf) },
        nowMs,
        callId,
      }),
    );
    if (reply.kind !== 'reward' || reply.reply.kind !== 'reward.issuance') throw new ApiError('internal_error');
    // The customer that answered: after a merge, the survivor that holds the issuance now.
    return { issuance: reply.reply.issuance, customerId: reply.customerId };
  }

  return [
    route({
      method: 'POST',
      path: '/v1/rewards',
      summary: 'Define a reward (cost in minor units of a currency, availability = units that may be issued, expiry_after "<n>d"/"<n>h")',
      tag: 'Rewards',
      auth: catalogWrite,
      body: createBody,
      idempotent: true,
      responses: { 201: { description: 'The reward.', schema: rewardSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof createBody>>) => {
        const b = ctx.body;
        const r = await deps.rewards.create(environmentIdOf(ctx.principal), {
          name: b.name,
          cost: b.cost,
          currency: b.currency,
          availability: b.availability,
          expiryAfter: b.expiry_after,
        }, ctx.callId);
        return { status: 201, body: rewardWire(r), headers: etagHeader(r.version) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/rewards',
      summary: 'List rewards (optionally by status)',
      tag: 'Rewards',
      auth: catalogRead,
      query: listQuery,
      responses: { 200: { description: 'A page of rewards.', schema: pageOf(rewardSchema) } },
      handler: async (ctx: RequestContext<unknown, z.infer<typeof listQuery>>) => {
        const page = pageRequest(ctx);
        const rows = await deps.rewards.list(environmentIdOf(ctx.principal), {
          limit: page.limit + 1,
          after: page.after?.[0] ?? null,
          status: (ctx.query.status as RewardStatus | undefined) ?? null,
        });
        return { status: 200, body: toPage(rows, page, (r) => [r.id], rewardWire) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/rewards/:id',
      summary: 'Read a reward (issued = units issued or redeemed now)',
      tag: 'Rewards',
      auth: catalogRead,
      responses: { 200: { description: 'The reward.', schema: rewardSchema, etag: true } },
      handler: async (ctx: RequestContext) => {
        const r = await deps.rewards.get(environmentIdOf(ctx.principal), ctx.params.id ?? '');
        return { status: 200, body: rewardWire(r), headers: etagHeader(r.version) };
      },
    }),
    route({
      method: 'PATCH',
      path: '/v1/rewards/:id',
      summary: 'Edit a reward (If-Match); availability below the units issued now is 409 resource_in_use',
      tag: 'Rewards',
      auth: catalogWrite,
      body: patchBody,
      ifMatch: true,
      responses: { 200: { description: 'The reward.', schema: rewardSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof patchBody>>) => {
        const b = ctx.body;
        const r = await deps.rewards.update(
          environmentIdOf(ctx.principal),
          ctx.params.id ?? '',
          { name: b.name, cost: b.cost, availability: b.availability, expiryAfter: b.expiry_after, status: b.status },
          expectedVersion(ctx.headers),
        );
        return { status: 200, body: rewardWire(r), headers: etagHeader(r.version) };
      },
    }),
    route({
      method: 'DELETE',
      path: '/v1/rewards/:id',
      summary: 'Archive a reward: no new issuances; existing issuances keep referring to it and can still be redeemed or cancelled',
      tag: 'Rewards',
      auth: catalogWrite,
      ifMatch: true,
      responses: { 204: { description: 'Archived (empty body).' } },
      handler: async (ctx: RequestContext) => {
        await deps.rewards.archive(environmentIdOf(ctx.principal), ctx.params.id ?? '', expectedVersion(ctx.headers));
        return { status: 204 };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/reward_issuances',
      summary: 'Issue a reward to a customer (takes one unit; archived or none left: 409 reward_unavailable)',
      tag: 'Rewards',
      auth: issuanceWrite,
      body: issueBody,
      idempotent: true,
      responses: { 201: { description: 'The issuance.', schema: rewardIssuanceSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof issueBody>>) => {
        const env = environmentIdOf(ctx.principal);
        const b = ctx.body;
        const nowMs = await deps.now(env);
        const customerId = await customerIdOf(env, b.customer_id, nowMs, 'customer_id');
        const issuanceId = newId(issuanceIdPrefix, nowMs);
        const terms = await deps.rewards.reserve(env, b.reward_id, issuanceId, customerId);
        const result: CallResult = await deps.engine.execute({
          env,
          target: { by: 'id', id: customerId },
          command: {
            kind: 'reward.run',
            command: { kind: 'reward.issue', issuanceId, terms, sourceType: 'api', sourceId: ctx.principal.credentialId },
            tierPrograms: [],
          },
          nowMs,
          // A run again under the same Idempotency-Key is answered the first run's issuance.
          callId: ctx.callId,
        });
        // Any other failure (journal did not acknowledge, overload) leaves the reservation: the
        // outcome may be unknown, so the reconciler asks the actor later and releases only if it never issued.
        if (result.ok === false && refusedCodes.has(result.code)) await deps.rewards.release(env, issuanceId);
        const reply = unwrap(result);
        if (reply.kind !== 'reward' || reply.reply.kind !== 'reward.issuance') throw new ApiError('internal_error');
        if (reply.reply.issuance.id !== issuanceId) {
          // The first run issued (its answer was never stored): this run's unit goes back.
          await deps.rewards.release(env, issuanceId);
        } else {
          await deps.rewards.confirm(env, issuanceId).catch(() => {}); // the reconciler confirms it otherwise
        }
        return { status: 201, body: issuanceWire(reply.reply.issuance, customerId), headers: etagHeader(reply.reply.issuance.version) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/reward_issuances',
      summary: 'List reward issuances (by status as shown: one past expires_at is expired, also before the sweep; optionally of one customer)',
      tag: 'Rewards',
      auth: issuanceRead,
      query: issuanceListQuery,
      responses: { 200: { description: 'A page of issuances.', schema: pageOf(rewardIssuanceSchema) } },
      handler: async (ctx: RequestContext<unknown, z.infer<typeof issuanceListQuery>>) => {
        const env = environmentIdOf(ctx.principal);
        const page = pageRequest(ctx);
        let customerId: string | null = null;
        if (ctx.query.customer_id !== undefined) {
          try {
            customerId = await customerIdOf(env, ctx.query.customer_id, await deps.now(env), 'customer_id');
          } catch (err) {
            if (!(err instanceof ApiError) || err.code !== 'resource_not_found') throw err;
            // No live customer: the reference filters by itself, so a deleted customer's id lists
            // its issuances (as the unfiltered list does) and an unknown one lists nothing.
            customerId = ctx.query.customer_id;
          }
        }
        await deps.drainProjector();
        // As of the environment's clock read after the drain: past expires_at is expired, swept or not.
        const rows = await deps.readModel.listIssuances(env, {
          limit: page.limit + 1,
          after: page.after?.[0] ?? null,
          status: ctx.query.status ?? null,
          customerId,
          atMs: await deps.now(env),
        });
        return { status: 200, body: toPage(rows, page, (r) => [r.id], (r) => issuanceWire(r, r.customerId)) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/reward_issuances/:id',
      summary: 'Read a reward issuance',
      tag: 'Rewards',
      auth: issuanceRead,
      responses: { 200: { description: 'The issuance.', schema: rewardIssuanceSchema, etag: true } },
      handler: async (ctx: RequestContext) => {
        const env = environmentIdOf(ctx.principal);
        await deps.drainProjector();
        const r = await deps.readModel.getIssuance(env, ctx.params.id ?? '', await deps.now(env));
        if (r === null) throw new ApiError('resource_not_found', { message: 'No reward issuance with this id.', param: 'id' });
        return { status: 200, body: issuanceWire(r, r.customerId), headers: etagHeader(r.version) };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/reward_issuances/:id/redeem',
      summary: "Redeem an issued reward: spends its cost from the customer's balance in the same step (409 insufficient_balance keeps it issued)",
      tag: 'Rewards',
      auth: issuanceWrite,
      idempotent: 'optional',
      body: z.strictObject({}),
      responses: { 200: { description: 'The issuance, redeemed.', schema: rewardIssuanceSchema, etag: true } },
      handler: async (ctx: RequestContext) => {
        const env = environmentIdOf(ctx.principal);
        const id = ctx.params.id ?? '';
        const { issuance, customerId } = await onIssuance(env, id, async () => {
          const all = await deps.currencies.all(env);
          return {
            kind: 'reward.redeem',
            issuanceId: id,
            currencies: all.map((c) => ({ key: c.key, negativeBalance: c.negativeBalance, expiryDays: c.expiryDays })),
          };
        }, ctx.callId);
        return { status: 200, body: issuanceWire(issuance, customerId), headers: etagHeader(issuance.version) };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/reward_issuances/:id/cancel',
      summary: 'Cancel an issued reward (optional reason): gives its unit back to the reward; other states: 409 invalid_state',
      tag: 'Rewards',
      auth: issuanceWrite,
      idempotent: 'optional',
      body: cancelBody,
      responses: { 200: { description: 'The issuance, cancelled.', schema: rewardIssuanceSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof cancelBody>>) => {
        const env = environmentIdOf(ctx.principal);
        const id = ctx.params.id ?? '';
        const { issuance, customerId } = await onIssuance(env, id, async () => ({ kind: 'reward.cancel', issuanceId: id, reason: ctx.body.reason ?? null }), ctx.callId);
        // After the journal has the cancellation; a crash before this line is repaired by the reconciler.
        await deps.rewards.release(env, id);
        return { status: 200, body: issuanceWire(issuance, customerId), headers: etagHeader(issuance.version) };
      },
    }),
  ];
}
