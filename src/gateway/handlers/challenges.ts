// Challenges (spec 2.8, 4.5): the catalog (POST idempotent, list with status filter, GET, PATCH
// with If-Match, DELETE of drafts and ended challenges), enrollments and progress (applied by the
// customer's actor; lists read from projected tables), and two audited operator actions: revoke one
// contribution from the current period, and reevaluate a customer against the current target.
// Customers are named by service id (cust_...) or external id.
import { z } from 'zod';
import type { Engine } from '../../actors/engine.js';
import type { CallResult, ReplyView } from '../../actors/partition.js';
import type { ChallengeCatalog, ChallengeRecord } from '../../catalog/challenges.js';
import type { CurrencyCatalog } from '../../catalog/currencies.js';
import { tierProgramOf } from '../../catalog/rules-context.js';
import { type ChallengeContext, compileChallenge } from '../../domain/challenge-effects.js';
import {
  conditionSchema,
  eventNameSchema,
  fixedPointsAwardSchema,
  itemGrantSchema,
  rewardIssueSchema,
  ruleBounds,
  tierEvaluateSchema,
} from '../../domain/rules/index.js';
import { documentAs } from '../../util/doc-schema.js';
import {
  challengeLimits,
  challengeStatuses,
  type Command as ChallengeCommand,
  type ChallengeProgress,
  contributionKeyPattern,
  enrollmentModes,
} from '../../domain/challenges.js';
import { periodKey, periodKinds } from '../../domain/periods.js';
import type { TierProgram } from '../../domain/tiers.js';
import { ApiError } from '../../errors/api-error.js';
import { limits } from '../../limits.js';
import type { AuditLog } from '../../persistence/sql/audit-log.js';
import type { ChallengeReadModel, ProgressRow } from '../../persistence/sql/challenge-read-model.js';
import type { Principal } from '../../tenancy/types.js';
import { etagHeader, expectedVersion } from '../etag.js';
import { cursorInt, cursorInt4Max, pageQuerySchema, pageRequest, toPage } from '../pagination.js';
import { type AnyRoute, type AuthSpec, environmentIdOf, type RequestContext, route } from '../route.js';
import { customerTarget, iso, unwrap } from '../wire.js';
import type { CampaignGate } from '../../domain/campaigns.js';
import type { Effect } from '../../domain/rule-effects.js';
import type { SegmentDef } from '../../domain/segments.js';
import { effectWire } from './events.js';
import { namesOneOf } from '../validation.js';
import { challengeSchema, enrollmentSchema, pageOf, progressRevokedSchema, progressSchema, reevaluationSchema } from '../wire-schemas.js';

const timestamp = z.iso.datetime({ offset: true });
const status = z.enum(challengeStatuses as [string, ...string[]]);

/**
 * completion_actions as validateChallengeDefinition accepts them (documentation): rule actions
 * with a fixed points.award amount and no challenge.progress, at most as many as a rule has.
 */
const completionActionsDoc = z
  .array(
    z
      .discriminatedUnion('type', [fixedPointsAwardSchema, itemGrantSchema, tierEvaluateSchema, rewardIssueSchema])
      .meta({ id: 'ChallengeCompletionAction', description: 'A rule action run at completion: points.award takes a fixed amount; no challenge.progress.' }),
  )
  .max(Math.min(challengeLimits.completionActionsMax, ruleBounds.actionsMax));

// Shapes only: qualifying.conditions and completion_actions are checked by the rules schema (the
// domain names the wire path of each problem, e.g. qualifying.conditions.all[0].op); OpenAPI
// shows what that check accepts (documentAs).
const qualifying = z.strictObject({
  event: documentAs(z.string(), eventNameSchema).describe('The event name that counts.'),
  conditions: documentAs(z.unknown(), conditionSchema.nullable())
    .optional()
    .describe('A condition of the rule language (RuleCondition), as a service.rule/v2 rule has; null or absent: every such event counts.'),
});

const fields = {
  name: z.string().min(1).max(challengeLimits.nameCharsMax),
  qualifying,
  target: z.number().int().min(1),
  period: z.enum(periodKinds as [string, ...string[]]).describe('none, daily, weekly or monthly (in the environment time zone).'),
  contribution_key: z
    .string()
    .min(1)
    .max(challengeLimits.contributionKeyCharsMax)
    .meta({ pattern: contributionKeyPattern.source })
    .nullable()
    .describe('A path (event.id, event.name, event.properties.<name> or customer.attributes.<name>), e.g. event.properties.match_id: each distinct value counts once; null: every event counts.'),
  enrollment: z.enum(enrollmentModes as [string, ...string[]]),
  repeatable: z.boolean(),
  completion_actions: documentAs(z.array(z.unknown()).max(challengeLimits.completionActionsMax), completionActionsDoc).describe(
    'Rule actions: points.award {currency, amount}, item.grant {item, quantity}, reward.issue {reward_id}, tier.evaluate {program?}.',
  ),
  campaign_id: z.string().min(1).max(64).nullable(),
  starts_at: timestamp.nullable(),
  ends_at: timestamp.nullable(),
  status,
};

const createBody = z.strictObject({
  name: fields.name,
  qualifying: fields.qualifying,
  target: fields.target,
  period: fields.period.default('none'),
  contribution_key: fields.contribution_key.default(null),
  enrollment: fields.enrollment.default('automatic'),
  repeatable: fields.repeatable.default(false),
  completion_actions: fields.completion_actions.default([]),
  campaign_id: fields.campaign_id.default(null),
  starts_at: fields.starts_at.default(null),
  ends_at: fields.ends_at.default(null),
  status: z.enum(['draft', 'active']).default('draft').describe('A challenge starts as draft (default) or active.'),
});

// A body naming nothing to change is refused like the other catalog PATCHes (no version bump, so a
// held ETag stays valid). null is a change for the nullable fields.
const patchFields = ['name', 'qualifying', 'target', 'period', 'contribution_key', 'enrollment', 'repeatable', 'completion_actions', 'campaign_id', 'starts_at', 'ends_at', 'status'] as const;
const patchBody = z
  .strictObject({
    name: fields.name.optional(),
    qualifying: fields.qualifying.optional(),
    target: fields.target.optional(),
    period: fields.period.optional(),
    contribution_key: fields.contribution_key.optional(),
    enrollment: fields.enrollment.optional(),
    repeatable: fields.repeatable.optional(),
    completion_actions: fields.completion_actions.optional(),
    campaign_id: fields.campaign_id.optional(),
    starts_at: fields.starts_at.optional(),
    ends_at: fields.ends_at.optional(),
    status: status.optional().describe('draft -> active | ended; active <-> paused; active | paused -> ended.'),
  })
  .refine(...namesOneOf(patchFields));

const listQuery = pageQuerySchema.extend({ status: status.optional() });
const progressQuery = pageQuerySchema.extend({
  customer_id: z.string().min(1).max(limits.externalIdCharsMax).optional(),
  status: z.enum(['active', 'completed']).optional(),
});

const customerId = z.string().min(1).max(limits.externalIdCharsMax).describe("The customer's service id (cust_...) or external id.");
// Optional in the schema so that a missing reason is audit_reason_required (403), not a shape error.
const reason = z.string().max(500).optional().describe('Required: why (recorded in the audit entry); missing or blank is 403 audit_reason_required.');
const enrollBody = z.strictObject({ customer_id: customerId });
const revokeBody = z.strictObject({ customer_id: customerId, contribution: z.string().min(1).max(challengeLimits.contributionCharsMax), reason });
const reevaluateBody = z.strictObject({ customer_id: customerId, reason });

export interface ChallengeDeps {
  challenges: ChallengeCatalog;
  engine: Engine;
  now(environmentId: string): number | Promise<number>;
  currencies: Pick<CurrencyCatalog, 'all'>;
  tiers: { all(environmentId: string): Promise<TierProgram[]> };
  readModel: ChallengeReadModel;
  audit: AuditLog;
  drainProjector(): Promise<void>;
  /** campaign_id must name a campaign of the environment (404 resource_not_found otherwise). */
  campaignExists?: (environmentId: string, id: string) => Promise<boolean>;
  /** The environment's campaigns: a reevaluated completion never awards a capped currency (no budget grant). */
  campaignGates?: (environmentId: string) => Promise<Readonly<Record<string, CampaignGate>>>;
  /** The environment's segments (a campaign challenge's audience, for reevaluate). */
  segments?: (environmentId: string) => Promise<SegmentDef[]>;
  /**
   * Called with the effects of a journaled command (after the ack), as events do: the rewards a
   * reevaluation's completion requested are delivered at once (RewardDueWork.afterEvent).
   */
  afterCommand?(environmentId: string, customerId: string, effects: readonly Effect[]): void;
}

async function checkCampaign(deps: ChallengeDeps, env: string, id: string | null | undefined): Promise<void> {
  if (id == null || deps.campaignExists === undefined) return;
  if (!(await deps.campaignExists(env, id))) throw new ApiError('resource_not_found', { message: `No campaign ${id}.`, param: 'campaign_id' });
}

export function challengeWire(c: ChallengeRecord) {
  return {
    id: c.id,
    name: c.name,
    qualifying: c.qualifying,
    target: c.target,
    period: c.period,
    contribution_key: c.contributionKey,
    enrollment: c.enrollment,
    repeatable: c.repeatable,
    completion_actions: c.completionActions,
    campaign_id: c.campaignId,
    starts_at: iso(c.startsAtMs),
    ends_at: iso(c.endsAtMs),
    status: c.status,
    version: c.version,
    created_at: iso(c.createdAtMs),
    updated_at: iso(c.updatedAtMs),
  };
}

/**
 * A progress record (spec 2.8). `contributions`: the distinct contribution_key values counted in the
 * period (and cycle), in the order counted, revoked ones removed; always [] for a challenge without
 * contribution_key, which stores no values (every qualifying event counts once).
 */
function progressWire(p: ProgressRow) {
  return {
    challenge_id: p.challengeId,
    customer_id: p.customerId,
    period_key: p.periodKey,
    cycle: p.cycle,
    count: p.count,
    target: p.target,
    status: p.status,
    contributions: [...p.contributions],
    completed_at: iso(p.completedAtMs),
    updated_at: iso(p.updatedAtMs),
  };
}

function actorProgressWire(p: ChallengeProgress, customer: string) {
  return progressWire({ ...p, customerId: customer });
}

const readAuth: AuthSpec = { kind: 'credential', scopes: ['programs:read'], allow: ['secret', 'pat', 'session'] };
const writeAuth: AuthSpec = { kind: 'credential', scopes: ['programs:write'], allow: ['secret', 'pat', 'session'] };


const ms = (v: string | null | undefined) => (v === undefined ? undefined : v === null ? null : Date.parse(v));

type ChallengeReplyView = Extract<ReplyView, { kind: 'challenge' }>;

/** Audited operator actions need a reason (spec part 7: audit_reason_required). */
function auditReason(value: string | undefined): string {
  const why = value?.trim() ?? '';
  if (why.length === 0) throw new ApiError('audit_reason_required', { param: 'reason', message: 'This action is audited: give a reason.' });
  return why;
}

export function challengeRoutes(deps: ChallengeDeps): AnyRoute[] {
  /** Everything a challenge command needs, loaded before the actor step. */
  async function context(env: string): Promise<ChallengeContext> {
    const [all, programs, timeZone, campaigns, segments] = await Promise.all([
      deps.currencies.all(env),
      deps.tiers.all(env),
      deps.challenges.timeZone(env),
      deps.campaignGates?.(env),
      deps.segments?.(env),
    ]);
    return {
      challenges: [],
      timeZone,
      currencies: all.map((c) => ({ key: c.key, negativeBalance: c.negativeBalance, expiryDays: c.expiryDays })),
      tierPrograms: programs.map(tierProgramOf),
      campaigns,
      segments,
    };
  }

  /**
   * Runs a challenge command on the customer's actor. The engine and the actor name a customer they
   * do not hold (unknown, deleted, malformed id) as `id`; here `id` is the challenge in the path, so
   * that answer names customer_id, the field that holds the customer.
   */
  async function run(env: string, customer: string, challenge: ChallengeRecord, command: ChallengeCommand, callId?: string): Promise<ChallengeReplyView> {
    const call = {
      env,
      target: customerTarget(customer),
      command: { kind: 'challenge.run', command, challenge: compileChallenge(challenge, challenge.version), context: await context(env) },
      nowMs: await deps.now(env),
      // The request's under an Idempotency-Key: a run again is answered what the first applied.
      callId,
    } as const;
    let result: CallResult;
    try {
      result = await deps.engine.execute(call);
    } catch (err) {
      if (err instanceof ApiError && err.code === 'resource_not_found' && err.param === 'id') {
        throw new ApiError('resource_not_found', { message: err.message, param: 'customer_id' });
      }
      throw err;
    }
    if (result.ok === false && result.code === 'resource_not_found' && result.param === 'id') result = { ...result, param: 'customer_id' };
    const reply = unwrap(result);
    if (reply.kind !== 'challenge') throw new ApiError('internal_error');
    if (reply.effects.length > 0) deps.afterCommand?.(env, reply.customerId, reply.effects);
    return reply;
  }

  /**
   * A list filter's customer (service id or external id) -> the id its records are under: a
   * merged customer's survivor; a reference that names no live customer filters by itself (a
   * deleted customer's id then lists its records, as the unfiltered list does; an unknown one lists
   * nothing, as the other lists' filters do).
   */
  async function filterCustomer(env: string, ref: string): Promise<string> {
    const result = await deps.engine.execute({ env, target: customerTarget(ref), command: { kind: 'customer.view' }, nowMs: await deps.now(env) });
    if (result.ok === true && result.reply.kind === 'customer') return result.reply.customer.id;
    if (result.ok === false && result.code !== 'resource_not_found') unwrap(result);
    return ref;
  }

  async function audit(env: string, p: Principal, action: string, challengeId: string, customer: string, why: string, details: Record<string, unknown>) {
    return deps.audit.record(env, {
      actorCredentialId: p.credentialId,
      actorKind: p.kind,
      action,
      targetType: 'challenge',
      targetId: challengeId,
      customerId: customer,
      reason: why,
      details,
    });
  }

  return [
    route({
      method: 'POST',
      path: '/v1/challenges',
      summary: 'Define a challenge (qualifying event and conditions, target, period, contribution_key, enrollment, completion_actions)',
      tag: 'Challenges',
      auth: writeAuth,
      body: createBody,
      idempotent: true,
      responses: { 201: { description: 'The challenge.', schema: challengeSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof createBody>>) => {
        const b = ctx.body;
        await checkCampaign(deps, environmentIdOf(ctx.principal), b.campaign_id);
        const c = await deps.challenges.create(environmentIdOf(ctx.principal), {
          name: b.name,
          qualifying: b.qualifying,
          target: b.target,
          period: b.period as ChallengeRecord['period'],
          contributionKey: b.contribution_key,
          enrollment: b.enrollment as ChallengeRecord['enrollment'],
          repeatable: b.repeatable,
          completionActions: b.completion_actions,
          campaignId: b.campaign_id,
          startsAtMs: ms(b.starts_at) ?? null,
          endsAtMs: ms(b.ends_at) ?? null,
          status: b.status,
        }, ctx.callId);
        return { status: 201, body: challengeWire(c), headers: etagHeader(c.version) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/challenges',
      summary: 'List challenges (optionally by status)',
      tag: 'Challenges',
      auth: readAuth,
      query: listQuery,
      responses: { 200: { description: 'A page of challenges.', schema: pageOf(challengeSchema) } },
      handler: async (ctx: RequestContext<unknown, z.infer<typeof listQuery>>) => {
        const page = pageRequest(ctx);
        const rows = await deps.challenges.list(environmentIdOf(ctx.principal), {
          status: (ctx.query.status ?? null) as ChallengeRecord['status'] | null,
          limit: page.limit + 1,
          after: page.after?.[0] ?? null,
        });
        return { status: 200, body: toPage(rows, page, (r) => [r.id], challengeWire) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/challenges/:id',
      summary: 'Read a challenge',
      tag: 'Challenges',
      auth: readAuth,
      responses: { 200: { description: 'The challenge.', schema: challengeSchema, etag: true } },
      handler: async (ctx: RequestContext) => {
        const c = await deps.challenges.get(environmentIdOf(ctx.principal), ctx.params.id ?? '');
        return { status: 200, body: challengeWire(c), headers: etagHeader(c.version) };
      },
    }),
    route({
      method: 'PATCH',
      path: '/v1/challenges/:id',
      summary: 'Edit a challenge or change its status (If-Match); an ended challenge takes no edits',
      tag: 'Challenges',
      auth: writeAuth,
      body: patchBody,
      ifMatch: true,
      responses: { 200: { description: 'The challenge.', schema: challengeSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof patchBody>>) => {
        const b = ctx.body;
        await checkCampaign(deps, environmentIdOf(ctx.principal), b.campaign_id);
        const c = await deps.challenges.update(
          environmentIdOf(ctx.principal),
          ctx.params.id ?? '',
          {
            name: b.name,
            qualifying: b.qualifying,
            target: b.target,
            period: b.period as ChallengeRecord['period'] | undefined,
            contributionKey: b.contribution_key,
            enrollment: b.enrollment as ChallengeRecord['enrollment'] | undefined,
            repeatable: b.repeatable,
            completionActions: b.completion_actions,
            campaignId: b.campaign_id,
            startsAtMs: ms(b.starts_at),
            endsAtMs: ms(b.ends_at),
            status: b.status as ChallengeRecord['status'] | undefined,
          },
          expectedVersion(ctx.headers),
        );
        return { status: 200, body: challengeWire(c), headers: etagHeader(c.version) };
      },
    }),
    route({
      method: 'DELETE',
      path: '/v1/challenges/:id',
      summary: 'Delete a draft or ended challenge (active or paused: end it first; 409 resource_in_use while a non-archived rule progresses it)',
      tag: 'Challenges',
      auth: writeAuth,
      ifMatch: true,
      responses: { 204: { description: 'Deleted.' } },
      handler: async (ctx: RequestContext) => {
        await deps.challenges.delete(environmentIdOf(ctx.principal), ctx.params.id ?? '', expectedVersion(ctx.headers));
        return { status: 204 };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/challenges/:id/enrollments',
      summary: 'Customers enrolled in a challenge',
      tag: 'Challenges',
      auth: readAuth,
      query: pageQuerySchema,
      responses: { 200: { description: 'A page of enrollments.', schema: pageOf(enrollmentSchema) } },
      handler: async (ctx: RequestContext<unknown, z.infer<typeof pageQuerySchema>>) => {
        const env = environmentIdOf(ctx.principal);
        const c = await deps.challenges.get(env, ctx.params.id ?? '');
        const page = pageRequest(ctx);
        await deps.drainProjector();
        const rows = await deps.readModel.listEnrollments(env, c.id, { after: page.after?.[0] ?? null, limit: page.limit + 1 });
        return {
          status: 200,
          body: toPage(rows, page, (r) => [r.customerId], (r) => ({ challenge_id: r.challengeId, customer_id: r.customerId, enrolled_at: iso(r.enrolledAtMs) })),
        };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/challenges/:id/enrollments',
      summary: 'Enroll a customer (explicit challenges count only enrolled customers); enrolling twice answers the enrollment',
      tag: 'Challenges',
      auth: writeAuth,
      idempotent: 'optional',
      body: enrollBody,
      responses: {
        201: { description: 'The enrollment.', schema: enrollmentSchema },
        200: { description: 'Already enrolled: the enrollment.', schema: enrollmentSchema },
      },
      handler: async (ctx: RequestContext<z.infer<typeof enrollBody>>) => {
        const env = environmentIdOf(ctx.principal);
        const c = await deps.challenges.get(env, ctx.params.id ?? '');
        const r = await run(env, ctx.body.customer_id, c, { kind: 'challenge.enroll', challenge: c }, ctx.callId);
        if (r.reply.kind !== 'enrollment') throw new ApiError('internal_error');
        return {
          status: r.reply.created ? 201 : 200,
          body: { challenge_id: c.id, customer_id: r.customerId, enrolled_at: iso(r.reply.enrollment.enrolledAtMs) },
        };
      },
    }),
    route({
      method: 'DELETE',
      path: '/v1/challenges/:id/enrollments/:customer_id',
      summary: "Remove a customer's enrollment (progress already made is kept)",
      tag: 'Challenges',
      auth: writeAuth,
      responses: { 204: { description: 'Unenrolled.' } },
      handler: async (ctx: RequestContext) => {
        const env = environmentIdOf(ctx.principal);
        const c = await deps.challenges.get(env, ctx.params.id ?? '');
        await run(env, ctx.params.customer_id ?? '', c, { kind: 'challenge.unenroll', challengeId: c.id });
        return { status: 204 };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/challenges/:id/progress',
      summary: 'Progress records of a challenge (one per customer, period and cycle), optionally for one customer or status',
      tag: 'Challenges',
      auth: readAuth,
      query: progressQuery,
      responses: {
        200: {
          description: 'A page of progress records (one per customer, period and cycle).',
          schema: pageOf(progressSchema),
        },
      },
      handler: async (ctx: RequestContext<unknown, z.infer<typeof progressQuery>>) => {
        const env = environmentIdOf(ctx.principal);
        const c = await deps.challenges.get(env, ctx.params.id ?? '');
        const q = ctx.query;
        const page = pageRequest(ctx);
        let after: [string, string, number] | null = null;
        if (page.after !== null) {
          const [cust, period, cycle] = page.after;
          if (cust === undefined || period === undefined) throw new ApiError('invalid_cursor', { param: 'cursor' });
          after = [cust, period, cursorInt(cycle, 0, cursorInt4Max)];
        }
        const customer = q.customer_id === undefined ? null : await filterCustomer(env, q.customer_id);
        await deps.drainProjector();
        const rows = await deps.readModel.listProgress(env, c.id, { customerId: customer, status: q.status ?? null, after, limit: page.limit + 1 });
        return { status: 200, body: toPage(rows, page, (r) => [r.customerId, r.periodKey, String(r.cycle)], progressWire) };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/challenges/:id/progress/revoke',
      summary: "Audited: remove one contribution from the customer's current progress (a completed period stays completed)",
      tag: 'Challenges',
      auth: writeAuth,
      idempotent: 'optional',
      body: revokeBody,
      responses: { 200: { description: 'The progress record after the revoke, with audit_entry_id.', schema: progressRevokedSchema } },
      handler: async (ctx: RequestContext<z.infer<typeof revokeBody>>) => {
        const env = environmentIdOf(ctx.principal);
        const c = await deps.challenges.get(env, ctx.params.id ?? '');
        const b = ctx.body;
        const why = auditReason(b.reason);
        // Only the current period's record: an earlier period's progress is history.
        const current = periodKey(c.period, await deps.now(env), await deps.challenges.timeZone(env));
        const r = await run(env, b.customer_id, c, { kind: 'challenge.revoke', challenge: c, contribution: b.contribution, periodKey: current }, ctx.callId);
        if (r.reply.kind !== 'progress') throw new ApiError('internal_error');
        const auditId = await audit(env, ctx.principal, 'challenge.progress.revoke', c.id, r.customerId, why, {
          contribution: b.contribution,
          period_key: r.reply.progress.periodKey,
          count: r.reply.progress.count,
        });
        return { status: 200, body: { ...actorProgressWire(r.reply.progress, r.customerId), audit_entry_id: auditId } };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/challenges/:id/reevaluate',
      summary: "Audited: re-check the customer's current progress against the current target and complete it if reached",
      tag: 'Challenges',
      auth: writeAuth,
      idempotent: 'optional',
      body: reevaluateBody,
      responses: { 200: { description: 'What the reevaluation did (completed: completions made, 0 or 1), with audit_entry_id.', schema: reevaluationSchema } },
      handler: async (ctx: RequestContext<z.infer<typeof reevaluateBody>>) => {
        const env = environmentIdOf(ctx.principal);
        const c = await deps.challenges.get(env, ctx.params.id ?? '');
        const b = ctx.body;
        const why = auditReason(b.reason);
        const timeZone = await deps.challenges.timeZone(env);
        const r = await run(env, b.customer_id, c, { kind: 'challenge.reevaluate', challenge: c, timeZone });
        if (r.reply.kind !== 'reevaluated') throw new ApiError('internal_error');
        // Spec 2.8: {completed: integer, effects}: how many completions this reevaluation made (0 or 1 for one customer).
        const completed = r.reply.completed;
        const auditId = await audit(env, ctx.principal, 'challenge.reevaluate', c.id, r.customerId, why, {
          completed,
          reason: r.reply.reason,
        });
        return {
          status: 200,
          body: {
            completed,
            reason: r.reply.reason,
            effects: r.effects.map(effectWire),
            progress: r.reply.progress === null ? null : actorProgressWire(r.reply.progress, r.customerId),
            audit_entry_id: auditId,
          },
          // Without progress the answer does not show its customer: named for the erasure.
          customerIds: [r.customerId],
        };
      },
    }),
  ];
}
