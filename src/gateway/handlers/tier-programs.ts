// Tier programs: POST /v1/tier_programs (idempotent), GET list and one (id or key, ETag = version),
// PATCH with If-Match. Removing a held level without reassign_to, or changing the basis (or a rolling
// basis's rolling_days) without reevaluate: true, is 409 resource_in_use. Holders are counted in
// the projected customer_tiers table (deleted and merged customers hold nothing); with reassign_to
// they are moved before the answer. The move is stored with the edit: one that could not finish
// answers 500 and is finished by a repeat of the PATCH or by the scheduler (catalog/tier-programs.ts).
import { z } from 'zod';
import type { CurrencyCatalog } from '../../catalog/currencies.js';
import type { TierProgramCatalog, TierProgramRecord } from '../../catalog/tier-programs.js';
import { levelKeyPattern, tierBases, tierLimits } from '../../domain/tiers.js';
import { limits } from '../../limits.js';
import { etagHeader, expectedVersion } from '../etag.js';
import { pageQuerySchema, pageRequest, toPage } from '../pagination.js';
import { type AnyRoute, type AuthSpec, environmentIdOf, type RequestContext, route } from '../route.js';
import { iso } from '../wire.js';
import { namesOneOf } from '../validation.js';
import { pageOf, tierProgramSchema } from '../wire-schemas.js';

// Shapes only: ranges, ordering and level keys are checked by validateTierProgram so that the
// error names the wire path (levels[1].threshold) with the domain's message.
// The .meta() bounds are validateTierProgram's, for OpenAPI only.
const level = z.strictObject({
  key: z.string().meta({ minLength: 1, maxLength: tierLimits.levelKeyCharsMax, pattern: levelKeyPattern.source }),
  title: z.string().meta({ minLength: 1, maxLength: tierLimits.levelTitleCharsMax }),
  threshold: z.number().meta({ type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER, description: 'Currency minor units; the first level 0, then ascending strictly.' }),
});
const levels = z
  .array(level)
  .max(1000)
  .meta({ minItems: 1, maxItems: tierLimits.levelsMax, description: 'Levels by ascending threshold, the first at 0; keys unique.' });
const basis = z.enum(tierBases as [string, ...string[]]);
const downgradeCheck = z
  .strictObject({ every_days: z.number().meta({ type: 'integer', minimum: 1, maximum: tierLimits.downgradeEveryDaysMax }) })
  .nullable();
const rollingDays = z
  .number()
  .meta({ type: 'integer', minimum: 1, maximum: tierLimits.rollingDaysMax, description: 'Required when basis is earned_rolling_days, else absent or null.' })
  .nullable();

const createBody = z.strictObject({
  key: z
    .string()
    .min(1)
    .max(64)
    .regex(/^[a-z][a-z0-9_]*$/, 'Use snake_case, e.g. status.'),
  name: z.string().min(1).max(limits.nameCharsMax),
  currency: z.string().min(1).max(64),
  basis,
  rolling_days: rollingDays.optional(),
  levels,
  downgrade_check: downgradeCheck.optional(),
});

// reassign_to and reevaluate are options of an edit, not changes: a body with only them (or
// empty) changes nothing and is refused like the other catalog PATCHes (no version bump).
const patchFields = ['name', 'basis', 'rolling_days', 'levels', 'downgrade_check'] as const;
const patchBody = z
  .strictObject({
    name: z.string().min(1).max(limits.nameCharsMax).optional(),
    basis: basis.optional(),
    rolling_days: rollingDays.optional(),
    levels: levels.optional(),
    downgrade_check: downgradeCheck.optional(),
    reassign_to: z.string().min(1).max(64).nullable().optional(),
    reevaluate: z.boolean().optional(),
  })
  .refine(...namesOneOf(patchFields));

export interface TierProgramDeps {
  tiers: TierProgramCatalog;
  /** Currency keys are checked by the catalog; kept here so the routes list names its inputs. */
  currencies: CurrencyCatalog;
}


type Basis = TierProgramRecord['basis'];

function checkOf(c: { every_days: number } | null | undefined): { everyDays: number } | null | undefined {
  return c === undefined ? undefined : c === null ? null : { everyDays: c.every_days };
}

export function tierProgramWire(p: TierProgramRecord) {
  return {
    id: p.id,
    key: p.key,
    name: p.name,
    currency: p.currency,
    basis: p.basis,
    rolling_days: p.rollingDays,
    levels: p.levels.map((l) => ({ key: l.key, title: l.title, threshold: l.threshold })),
    downgrade_check: p.downgradeCheck === null ? null : { every_days: p.downgradeCheck.everyDays },
    version: p.version,
    created_at: iso(p.createdAtMs),
    updated_at: iso(p.updatedAtMs),
  };
}

const readAuth: AuthSpec = { kind: 'credential', scopes: ['programs:read'], allow: ['secret', 'pat', 'session'] };
const writeAuth: AuthSpec = { kind: 'credential', scopes: ['programs:write'], allow: ['secret', 'pat', 'session'] };

export function tierProgramRoutes(deps: TierProgramDeps): AnyRoute[] {
  return [
    route({
      method: 'POST',
      path: '/v1/tier_programs',
      summary: 'Define a tier program (basis lifetime_earned, earned_rolling_days with rolling_days, or balance; levels ascend from 0)',
      tag: 'Tiers',
      auth: writeAuth,
      body: createBody,
      idempotent: true,
      responses: { 201: { description: 'The tier program.', schema: tierProgramSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof createBody>>) => {
        const b = ctx.body;
        const p = await deps.tiers.create(environmentIdOf(ctx.principal), {
          key: b.key,
          name: b.name,
          currency: b.currency,
          basis: b.basis as Basis,
          rollingDays: b.rolling_days ?? null,
          levels: b.levels,
          downgradeCheck: checkOf(b.downgrade_check) ?? null,
        }, ctx.callId);
        return { status: 201, body: tierProgramWire(p), headers: etagHeader(p.version) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/tier_programs',
      summary: 'List tier programs',
      tag: 'Tiers',
      auth: readAuth,
      query: pageQuerySchema,
      responses: { 200: { description: 'A page of tier programs.', schema: pageOf(tierProgramSchema) } },
      handler: async (ctx: RequestContext<unknown, z.infer<typeof pageQuerySchema>>) => {
        const page = pageRequest(ctx);
        const rows = await deps.tiers.list(environmentIdOf(ctx.principal), { limit: page.limit + 1, after: page.after?.[0] ?? null });
        return { status: 200, body: toPage(rows, page, (r) => [r.id], tierProgramWire) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/tier_programs/:id',
      summary: 'Read a tier program by id or key',
      tag: 'Tiers',
      auth: readAuth,
      responses: { 200: { description: 'The tier program.', schema: tierProgramSchema, etag: true } },
      handler: async (ctx: RequestContext) => {
        const p = await deps.tiers.get(environmentIdOf(ctx.principal), ctx.params.id ?? '');
        return { status: 200, body: tierProgramWire(p), headers: etagHeader(p.version) };
      },
    }),
    route({
      method: 'PATCH',
      path: '/v1/tier_programs/:id',
      summary: 'Edit a tier program (If-Match); basis changes need reevaluate: true, removing a held level needs reassign_to',
      tag: 'Tiers',
      auth: writeAuth,
      body: patchBody,
      ifMatch: true,
      responses: { 200: { description: 'The tier program.', schema: tierProgramSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof patchBody>>) => {
        const b = ctx.body;
        const p = await deps.tiers.update(
          environmentIdOf(ctx.principal),
          ctx.params.id ?? '',
          {
            name: b.name,
            basis: b.basis as Basis | undefined,
            rollingDays: b.rolling_days,
            levels: b.levels,
            downgradeCheck: checkOf(b.downgrade_check),
          },
          { expectedVersion: expectedVersion(ctx.headers), reassignTo: b.reassign_to ?? null, reevaluate: b.reevaluate === true },
        );
        return { status: 200, body: tierProgramWire(p), headers: etagHeader(p.version) };
      },
    }),
  ];
}
