// Counter definitions (spec 2.9, 4.7): POST /v1/counter_definitions (idempotent), GET list and one,
// DELETE (409 resource_in_use while a non-archived rule or a challenge not ended reads it) and
// POST .../backfill, which counts the history and marks the counter ready: 200 with the ready
// definition when done inline, 202 with status backfilling when it runs as a job (a later GET
// shows ready). No rename: a definition has no PATCH.
import { z } from 'zod';
import type { CounterCatalog, CounterRecord } from '../../catalog/counters.js';
import { counterLimits, counterPeriods } from '../../domain/counters.js';
import { conditionTreeDoc, PathSource } from '../../domain/rules/index.js';
import { ApiError } from '../../errors/api-error.js';
import type { CounterBackfill } from '../../jobs/counter-backfill.js';
import { limits } from '../../limits.js';
import { documentAs } from '../../util/doc-schema.js';
import { etagHeader, expectedVersion } from '../etag.js';
import { pageQuerySchema, pageRequest, toPage } from '../pagination.js';
import { type AnyRoute, type AuthSpec, environmentIdOf, type RequestContext, route } from '../route.js';
import { iso } from '../wire.js';
import { counterDefinitionSchema, pageOf } from '../wire-schemas.js';
import { eventNamePattern } from './events.js';

// Shapes only: the window and the filter are checked by the domain so errors name the wire path.
// OpenAPI shows what those checks accept (validateWindow, compileCounterFilter).
const windowDoc = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('lifetime') }),
  z.strictObject({ kind: z.literal('rolling_days'), days: z.int().min(1).max(counterLimits.rollingDaysMax) }),
  z.strictObject({ kind: z.literal('period'), period: z.enum(counterPeriods as [string, ...string[]]) }),
]);
const filterDoc = conditionTreeDoc('CounterFilter', [PathSource.eventProperty], 'The rule condition language over event.properties.<name> only.');

const createBody = z.strictObject({
  name: z
    .string()
    .min(1)
    .max(64)
    .regex(/^[a-z][a-z0-9_]*$/, 'Use snake_case, e.g. purchases_7d.'),
  event: z.string().min(1).max(limits.eventNameCharsMax).regex(eventNamePattern, 'Use dotted snake_case, e.g. level.completed.'),
  window: documentAs(
    z.union([
      z.strictObject({ kind: z.literal('lifetime') }),
      z.strictObject({ kind: z.literal('rolling_days'), days: z.number() }),
      z.strictObject({ kind: z.literal('period'), period: z.string() }),
    ]),
    windowDoc,
  ).describe('{kind: "lifetime"}, {kind: "rolling_days", days: 1..365} or {kind: "period", period: "day" | "week" | "month"}.'),
  filter: documentAs(z.unknown(), filterDoc.nullable())
    .optional()
    .describe('A condition in the rule language over event.properties.<name> (e.g. {path, op, value}); null or absent: every event counts.'),
});

export interface CounterDeps {
  counters: CounterCatalog;
  backfill: CounterBackfill;
  /**
   * True when a new definition can be ready at once: after the barrier (every event sent without
   * it is in the read tables), the environment has no event. False too when the barrier fails.
   */
  provenEmpty(environmentId: string): Promise<boolean>;
}

export function counterWire(c: CounterRecord) {
  return {
    id: c.id,
    name: c.name,
    event: c.event,
    window: c.window,
    filter: c.filter ?? null,
    status: c.status,
    version: c.version,
    created_at: iso(c.createdAtMs),
    updated_at: iso(c.updatedAtMs),
  };
}

const readAuth: AuthSpec = { kind: 'credential', scopes: ['programs:read'], allow: ['secret', 'pat', 'session'] };
const writeAuth: AuthSpec = { kind: 'credential', scopes: ['programs:write'], allow: ['secret', 'pat', 'session'] };

export function counterRoutes(deps: CounterDeps): AnyRoute[] {
  return [
    route({
      method: 'POST',
      path: '/v1/counter_definitions',
      summary: 'Define a historical counter (backfilling when the environment already has events, else ready)',
      tag: 'Counters',
      auth: writeAuth,
      body: createBody,
      idempotent: true,
      responses: { 201: { description: 'The counter definition (status backfilling or ready).', schema: counterDefinitionSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof createBody>>) => {
        const env = environmentIdOf(ctx.principal);
        const b = ctx.body;
        const c = await deps.counters.create(env, { name: b.name, event: b.event, window: b.window, filter: b.filter }, () => deps.provenEmpty(env), ctx.callId);
        return { status: 201, body: counterWire(c), headers: etagHeader(c.version) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/counter_definitions',
      summary: 'List counter definitions',
      tag: 'Counters',
      auth: readAuth,
      query: pageQuerySchema,
      responses: { 200: { description: 'A page of counter definitions.', schema: pageOf(counterDefinitionSchema) } },
      handler: async (ctx: RequestContext<unknown, z.infer<typeof pageQuerySchema>>) => {
        const page = pageRequest(ctx);
        const rows = await deps.counters.list(environmentIdOf(ctx.principal), { limit: page.limit + 1, after: page.after?.[0] ?? null });
        return { status: 200, body: toPage(rows, page, (r) => [r.id], counterWire) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/counter_definitions/:id',
      summary: 'Read a counter definition',
      tag: 'Counters',
      auth: readAuth,
      responses: { 200: { description: 'The counter definition.', schema: counterDefinitionSchema, etag: true } },
      handler: async (ctx: RequestContext) => {
        const c = await deps.counters.get(environmentIdOf(ctx.principal), ctx.params.id ?? '');
        return { status: 200, body: counterWire(c), headers: etagHeader(c.version) };
      },
    }),
    route({
      method: 'DELETE',
      path: '/v1/counter_definitions/:id',
      summary: 'Delete a counter definition (409 resource_in_use while a non-archived rule or a challenge not ended reads it)',
      tag: 'Counters',
      auth: writeAuth,
      ifMatch: true,
      responses: { 204: { description: 'Deleted.' } },
      handler: async (ctx: RequestContext) => {
        await deps.counters.delete(environmentIdOf(ctx.principal), ctx.params.id ?? '', expectedVersion(ctx.headers));
        return { status: 204 };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/counter_definitions/:id/backfill',
      summary: 'Count the history and mark the counter ready (inline: 200 ready; as a job: 202 backfilling)',
      tag: 'Counters',
      auth: writeAuth,
      idempotent: 'optional',
      responses: {
        200: { description: 'The ready counter definition.', schema: counterDefinitionSchema, etag: true },
        202: { description: 'The backfill runs as a job; the definition is still backfilling.', schema: counterDefinitionSchema, etag: true },
      },
      handler: async (ctx: RequestContext) => {
        const env = ctx.principal.environment;
        if (env === null) throw new ApiError('environment_required');
        const r = await deps.backfill.run(env.id, ctx.params.id ?? '', env.timezone);
        return { status: r.done ? 200 : 202, body: counterWire(r.record), headers: etagHeader(r.record.version) };
      },
    }),
  ];
}
