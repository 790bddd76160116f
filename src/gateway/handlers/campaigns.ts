// Campaigns (routes ours, Stripe-style): POST /v1/campaigns (idempotent), GET list (filter status)
// and one, PATCH (If-Match), DELETE, and the status commands activate, pause, end (transitions in
// domain/campaigns.ts; others 409 invalid_state; a campaign past ends_at cannot be activated and is
// ended by the scheduler's sweep, jobs/catalog-ends.ts). Rules (and challenges) join a campaign through
// their campaign_id; its rules fire only while it is active and inside its schedule, only for
// customers in its audience segment, and never award beyond its budgets (see docs/architecture.md).
import { z } from 'zod';
import type { Campaign, CampaignCatalog, CampaignPatch } from '../../catalog/campaigns.js';
import { campaignStatuses } from '../../domain/campaigns.js';
import { ApiError } from '../../errors/api-error.js';
import { limits } from '../../limits.js';
import { etagHeader, expectedVersion } from '../etag.js';
import { pageQuerySchema, pageRequest, toPage } from '../pagination.js';
import { type AnyRoute, type AuthSpec, environmentIdOf, type RequestContext, route } from '../route.js';
import { iso } from '../wire.js';
import { campaignSchema, pageOf } from '../wire-schemas.js';

export interface CampaignDeps {
  campaigns: CampaignCatalog;
  /** spent is projected: reads drain the local projector first (read-your-writes on this node). */
  drainProjector(): Promise<void>;
  /** The environment's clock (a test environment's test clock): activate refuses a campaign past ends_at. */
  now(environmentId: string): number | Promise<number>;
  /**
   * Resolves once every event command of the environment sent before the call (on any node) is in
   * the read tables (cluster/counters-barrier.ts); rejects when that cannot be shown in time. A
   * PATCH adding a cap passes it first: the cap starts from everything already awarded (429 when it fails).
   */
  eventsSettled(environmentId: string): Promise<void>;
}

const budget = z.strictObject({
  currency: z.string().min(1).max(64),
  amount: z
    .number()
    .int()
    .min(0)
    .refine((n) => Number.isSafeInteger(n), 'amount: a safe integer in minor units.')
    .describe('Cap on what the campaign rules award in this currency, in total across all customers.'),
});
const budgets = z.array(budget).max(32);
const timestamp = z.iso.datetime({ offset: true }).nullable();

const createBody = z.strictObject({
  name: z.string().min(1).max(limits.nameCharsMax),
  description: z.string().max(1000).nullable().default(null),
  audience_segment: z.string().min(1).max(64).nullable().default(null).describe('A segment name: only its customers are eligible.'),
  starts_at: timestamp.default(null),
  ends_at: timestamp.default(null),
  budgets: budgets.default([]),
});
const patchBody = z
  .strictObject({
    name: z.string().min(1).max(limits.nameCharsMax).optional(),
    description: z.string().max(1000).nullable().optional(),
    audience_segment: z.string().min(1).max(64).nullable().optional(),
    starts_at: timestamp.optional(),
    ends_at: timestamp.optional(),
    budgets: budgets.optional().describe('Replaces the list; an amount below what is already reserved is 409 invalid_state.'),
  })
  .refine((b) => Object.keys(b).length > 0, 'Name at least one field to change.');
const listQuery = pageQuerySchema.extend({ status: z.enum(campaignStatuses).optional() });
const emptyBody = z.strictObject({});

const readAuth: AuthSpec = { kind: 'credential', scopes: ['programs:read'], allow: ['secret', 'pat', 'session'] };
const writeAuth: AuthSpec = { kind: 'credential', scopes: ['programs:write'], allow: ['secret', 'pat', 'session'] };

const msOf = (v: string | null): number | null => (v === null ? null : Date.parse(v));

export function campaignWire(c: Campaign) {
  return {
    id: c.id,
    name: c.name,
    description: c.description,
    status: c.status,
    audience_segment: c.audienceSegment,
    starts_at: c.startsAtMs === null ? null : iso(c.startsAtMs),
    ends_at: c.endsAtMs === null ? null : iso(c.endsAtMs),
    budgets: c.budgets.map((b) => ({ currency: b.currency, amount: b.amount, spent: b.spent, reserved: b.reserved })),
    spent: c.spent.map((s) => ({ currency: s.currency, amount: s.amount })),
    version: c.version,
    created_at: iso(c.createdAtMs),
    updated_at: iso(c.updatedAtMs),
  };
}

function reply(c: Campaign, status = 200) {
  return { status, body: campaignWire(c), headers: etagHeader(c.version) };
}

export function campaignRoutes(deps: CampaignDeps): AnyRoute[] {
  const { campaigns } = deps;
  const command = (op: 'activate' | 'pause' | 'end', summary: string) =>
    route({
      method: 'POST',
      path: `/v1/campaigns/:id/${op}`,
      summary,
      tag: 'Campaigns',
      auth: writeAuth,
      idempotent: 'optional',
      body: emptyBody,
      ifMatch: true,
      responses: { 200: { description: 'The campaign.', schema: campaignSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof emptyBody>>) => {
        const env = environmentIdOf(ctx.principal);
        const nowMs = op === 'activate' ? await deps.now(env) : undefined;
        return reply(await campaigns.transition(env, ctx.params.id ?? '', expectedVersion(ctx.headers), op, nowMs));
      },
    });
  return [
    route({
      method: 'POST',
      path: '/v1/campaigns',
      summary: 'Create a campaign in draft (audience segment, schedule, budgets per currency)',
      tag: 'Campaigns',
      auth: writeAuth,
      body: createBody,
      idempotent: true,
      responses: { 201: { description: 'The campaign.', schema: campaignSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof createBody>>) => {
        const b = ctx.body;
        const c = await campaigns.create(environmentIdOf(ctx.principal), {
          name: b.name,
          description: b.description,
          audienceSegment: b.audience_segment,
          startsAtMs: msOf(b.starts_at),
          endsAtMs: msOf(b.ends_at),
          budgets: b.budgets,
        }, ctx.callId);
        return reply(c, 201);
      },
    }),
    route({
      method: 'GET',
      path: '/v1/campaigns',
      summary: 'List campaigns (filter: status)',
      tag: 'Campaigns',
      auth: readAuth,
      query: listQuery,
      responses: { 200: { description: 'A page of campaigns.', schema: pageOf(campaignSchema) } },
      handler: async (ctx: RequestContext<unknown, z.infer<typeof listQuery>>) => {
        const page = pageRequest(ctx);
        await deps.drainProjector();
        const rows = await campaigns.list(environmentIdOf(ctx.principal), {
          limit: page.limit + 1,
          after: page.after?.[0] ?? null,
          status: ctx.query.status ?? null,
        });
        return { status: 200, body: toPage(rows, page, (r) => [r.id], campaignWire) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/campaigns/:id',
      summary: 'Read a campaign with its budgets and spent amounts (ETag = version)',
      tag: 'Campaigns',
      auth: readAuth,
      responses: { 200: { description: 'The campaign.', schema: campaignSchema, etag: true } },
      handler: async (ctx: RequestContext) => {
        await deps.drainProjector();
        return reply(await campaigns.get(environmentIdOf(ctx.principal), ctx.params.id ?? ''));
      },
    }),
    route({
      method: 'PATCH',
      path: '/v1/campaigns/:id',
      summary: 'Edit a campaign (If-Match): name, description, audience_segment, schedule, budgets; ended campaigns refuse',
      tag: 'Campaigns',
      auth: writeAuth,
      body: patchBody,
      ifMatch: true,
      responses: { 200: { description: 'The campaign.', schema: campaignSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof patchBody>>) => {
        const b = ctx.body;
        const patch: CampaignPatch = {};
        if (b.name !== undefined) patch.name = b.name;
        if (b.description !== undefined) patch.description = b.description;
        if (b.audience_segment !== undefined) patch.audienceSegment = b.audience_segment;
        if (b.starts_at !== undefined) patch.startsAtMs = msOf(b.starts_at);
        if (b.ends_at !== undefined) patch.endsAtMs = msOf(b.ends_at);
        if (b.budgets !== undefined) patch.budgets = b.budgets;
        const env = environmentIdOf(ctx.principal);
        const eventsSettled = () =>
          deps.eventsSettled(env).catch(() => {
            throw new ApiError('rate_limited', {
              message: 'Awards made before this new budget may still be on their way into the read tables; retry.',
              retryAfterSeconds: 1,
            });
          });
        return reply(await campaigns.update(env, ctx.params.id ?? '', expectedVersion(ctx.headers), patch, eventsSettled));
      },
    }),
    route({
      method: 'DELETE',
      path: '/v1/campaigns/:id',
      summary: 'Delete a campaign (not while active: 409 invalid_state; not while a non-archived rule names it: 409 resource_in_use)',
      tag: 'Campaigns',
      auth: writeAuth,
      ifMatch: true,
      responses: { 204: { description: 'Deleted.' } },
      handler: async (ctx: RequestContext) => {
        await campaigns.delete(environmentIdOf(ctx.principal), ctx.params.id ?? '', expectedVersion(ctx.headers));
        return { status: 204 };
      },
    }),
    command('activate', 'Activate a draft or paused campaign (its rules fire inside its schedule; 409 invalid_state once its ends_at has passed)'),
    command('pause', 'Pause an active campaign'),
    command('end', 'End a draft, active or paused campaign (ended is final: no edit, no transition)'),
  ];
}
