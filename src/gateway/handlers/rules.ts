// Rules (spec 2.5, 3, 4.4): create (idempotent), list, get, PATCH (If-Match), publish (compiled in
// the worker pool into an immutable numbered version), pause, resume, archive, versions, rollback
// and simulate (a dry run that changes nothing: the rule record's plan is compiled once in the pool,
// the trace runs on the request thread). Definitions are checked with
// validateRule: 422 rule_invalid lists every problem in details, param naming the first one.
// Publish and rollback also refuse (same 422) a definition naming a currency, reward, challenge,
// tier program (or a level of one), segment or counter the environment lacks; drafts (create,
// PATCH) may name them before they exist.
import { z } from 'zod';
import { definitionReferenceProblems, type ReferenceSources } from '../../catalog/rule-references.js';
import type { ReferenceCheck, Rule, RuleCatalog, RuleVersion } from '../../catalog/rules.js';
import { ruleStatuses } from '../../catalog/rules.js';
import type { BudgetGrant, CampaignGate } from '../../domain/campaigns.js';
import type { ResolvedAction, RuleCompilation, RuleMeta, RulePlan } from '../../domain/rules/compile.js';
import type { RuleTrace } from '../../domain/rules/evaluate.js';
import { type RuleProblem, ruleDefinitionSchema, validateRule } from '../../domain/rules/schema.js';
import { budgetKeysOf, type NotLive, type SimulatedCampaign, sharedScopeKeys, simulateRule } from '../../domain/rules/simulate.js';
import type { SharedLimits } from '../../persistence/ports.js';
import { trustLevels } from '../../domain/rules/trust.js';
import { ApiError } from '../../errors/api-error.js';
import { limits } from '../../limits.js';
import { documentAs } from '../../util/doc-schema.js';
import type { WorkerPool } from '../../workers/pool.js';
import { etagHeader, expectedVersion } from '../etag.js';
import { pageQuerySchema, pageRequest, toPage } from '../pagination.js';
import { type AnyRoute, type AuthSpec, environmentIdOf, type RequestContext, route } from '../route.js';
import { SimulationPlans, tracedDefinition } from '../simulation-plans.js';
import { emptySubject, type SimulatedEvent, type SimulationSubject } from '../simulation-subject.js';
import { iso } from '../wire.js';
import { pageOf, ruleSchema, ruleSimulationSchema, ruleVersionSchema } from '../wire-schemas.js';

export interface RulesDeps {
  rules: RuleCatalog;
  pool: WorkerPool;
  /** campaign_id must name a campaign of the environment (404 resource_not_found otherwise). */
  campaignExists?: (environmentId: string, id: string) => Promise<boolean>;
  /** The customer a simulation with customer_id traces against; absent: an empty customer. */
  subject?: (environmentId: string, customerRef: string, ruleId: string, event: SimulatedEvent) => Promise<SimulationSubject>;
  /**
   * The environment's campaigns as events meet them, and its clock: a campaign rule's simulation
   * checks its audience and whether it runs now. Absent: campaigns are not simulated.
   */
  campaigns?: {
    gates(environmentId: string): Promise<Readonly<Record<string, CampaignGate>>>;
    nowMs(environmentId: string): number | Promise<number>;
    /** What an event could still be granted per budget key, leasing nothing; absent: budgets are not simulated. */
    budgetLeft?(environmentId: string, keys: readonly string[]): Promise<BudgetGrant>;
  };
  /** Shared limits' taken counts (simulate reads them, reserving nothing); absent: counted as 0. */
  sharedLimits?: Pick<SharedLimits, 'counts'>;
  /** The catalogs publish and rollback check a definition's references against; absent: not checked. */
  references?: ReferenceSources;
}

// validateRule checks the definition (422 rule_invalid naming every bad path); OpenAPI shows its schema.
const definitionField = documentAs(
  z.custom<unknown>((v) => v !== undefined && v !== null, 'A rule definition document is required.'),
  ruleDefinitionSchema,
);
const nameField = z.string().min(1).max(limits.nameCharsMax);
const priorityField = z.number().int().min(-1_000_000).max(1_000_000);
const campaignField = z.string().min(1).max(255).nullable();

const createBody = z.strictObject({
  name: nameField,
  definition: definitionField,
  priority: priorityField.default(0),
  campaign_id: campaignField.default(null),
});

const patchBody = z
  .strictObject({
    name: nameField.optional(),
    definition: definitionField.optional(),
    priority: priorityField.optional(),
    campaign_id: campaignField.optional(),
  })
  .refine((b) => Object.keys(b).length > 0, 'Name at least one of name, definition, priority, campaign_id.');

const listQuery = pageQuerySchema.extend({
  status: z.enum(ruleStatuses).optional(),
  campaign_id: z.string().min(1).max(255).optional(),
});

const rollbackBody = z.strictObject({ number: z.number().int().min(1) });

const simulateBody = z.strictObject({
  event: z.strictObject({
    name: z.string().min(1).max(limits.eventNameCharsMax),
    properties: z.record(z.string(), z.unknown()).default({}),
    /** Trust level the simulated event carries (default merchant_asserted, as a secret-key event). */
    trust: z.enum(trustLevels).default('merchant_asserted'),
  }),
  customer_id: z.string().min(1).max(limits.externalIdCharsMax).optional(),
});

const emptyBody = z.strictObject({});

const readAuth: AuthSpec = { kind: 'credential', scopes: ['programs:read'], allow: ['secret', 'pat', 'session'] };
const writeAuth: AuthSpec = { kind: 'credential', scopes: ['programs:write'], allow: ['secret', 'pat', 'session'] };


/**
 * A problem's path as a request field: the definition travels in the `definition` field, so
 * `limits[0].scope[0]` is `definition.limits[0].scope[0]` (publish, rollback and simulate name
 * the rule's stored definition the same way).
 */
function definitionParam(path: string): string {
  return path === '' || path === 'definition' ? 'definition' : `definition.${path}`;
}

function ruleInvalid(problems: RuleProblem[]): ApiError {
  const params = problems.map((p) => definitionParam(p.path));
  return new ApiError('rule_invalid', {
    message: `The rule definition is not valid: ${problems.map((p, i) => `${params[i]}: ${p.message}`).join('; ')}`,
    param: params[0] ?? 'definition',
    details: problems.map((p, i) => ({ param: params[i], message: p.message })),
  });
}

/** Validates on the request thread (cheap) so create and PATCH answer every problem at once. */
function checkDefinition(definition: unknown): void {
  const v = validateRule(definition);
  if (!v.ok) throw ruleInvalid(v.problems);
}

export function ruleWire(r: Rule) {
  return {
    id: r.id,
    name: r.name,
    campaign_id: r.campaignId,
    status: r.status,
    priority: r.priority,
    active_version:
      r.activeVersion === null
        ? null
        : { id: r.activeVersion.id, number: r.activeVersion.number, definition: r.activeVersion.definition, created_at: iso(r.activeVersion.createdAtMs) },
    draft_definition: r.draftDefinition,
    version: r.version,
    created_at: iso(r.createdAtMs),
    updated_at: iso(r.updatedAtMs),
  };
}

function versionWire(v: RuleVersion) {
  return { id: v.id, rule_id: v.ruleId, number: v.number, definition: v.definition, created_by: v.createdBy, created_at: iso(v.createdAtMs) };
}

function actionWire(a: ResolvedAction) {
  switch (a.type) {
    case 'reward.issue':
      return { type: a.type, reward_id: a.rewardId };
    case 'challenge.progress':
      return { type: a.type, challenge_id: a.challengeId };
    default:
      return a;
  }
}

function traceWire(t: RuleTrace, traced: { draft: boolean; version: number | null }, notLive: readonly NotLive[]) {
  const o = t.outcome;
  return {
    // Which definition was traced, and whether an event now would run it (plan and outcome are
    // about the definition whatever the rule's status or its campaign's state).
    definition: traced,
    live: notLive.length === 0,
    not_live: notLive.map((n) => ({ reason: n.reason, detail: n.detail, param: n.param })),
    outcome: o.fired
      ? { fired: true, actions: o.actions.map(actionWire), limit_keys: o.limitKeys.map((k) => ({ limit_id: k.limitId, scope_key: k.scopeKey })) }
      : { fired: false, reason: o.reason, detail: o.detail, param: o.param },
    steps: t.steps.map((s) => {
      const step: Record<string, unknown> = {
        check: s.check,
        at: s.at,
        path: s.path,
        op: s.op,
        expected: s.expected,
        actual: s.actual,
        found: s.found,
        pass: s.pass,
      };
      if (s.limitId !== undefined) step.limit_id = s.limitId;
      if (s.scopeKey !== undefined) step.scope_key = s.scopeKey;
      if (s.shared === true) step.shared = true;
      return step;
    }),
  };
}

function reply(rule: Rule, status = 200) {
  return { status, body: ruleWire(rule), headers: etagHeader(rule.version) };
}

export function rulesRoutes(deps: RulesDeps): AnyRoute[] {
  const { rules, pool } = deps;

  const checkCampaign = async (env: string, id: string | null | undefined): Promise<void> => {
    if (id == null || deps.campaignExists === undefined) return;
    if (!(await deps.campaignExists(env, id))) throw new ApiError('resource_not_found', { message: `No campaign ${id}.`, param: 'campaign_id' });
  };

  const compilation = async (definition: unknown, meta: RuleMeta): Promise<RuleCompilation> => {
    const r = await pool.run({ kind: 'rule.compile', definition, meta });
    if (r.kind !== 'rule.compiled') throw new ApiError('internal_error');
    return r.ok ? { ok: true, plan: r.plan } : { ok: false, problems: r.problems };
  };

  const compile = async (definition: unknown, meta: RuleMeta): Promise<RulePlan> => {
    const c = await compilation(definition, meta);
    if (!c.ok) throw ruleInvalid(c.problems);
    return c.plan;
  };

  const referenceCheck = (env: string): ReferenceCheck | undefined => {
    const sources = deps.references;
    if (sources === undefined) return undefined;
    return { problems: (definition) => definitionReferenceProblems(sources, env, definition), refuse: ruleInvalid };
  };

  /** Simulate's plans, compiled once per rule record (see simulation-plans.ts). */
  const plans = new SimulationPlans(compilation);

  const command = (op: 'pause' | 'resume' | 'archive', summary: string) =>
    route({
      method: 'POST',
      path: `/v1/rules/:id/${op}`,
      summary,
      tag: 'Rules',
      auth: writeAuth,
      idempotent: 'optional',
      body: emptyBody,
      ifMatch: true,
      responses: { 200: { description: 'The rule.', schema: ruleSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof emptyBody>>) =>
        reply(await rules.transition(environmentIdOf(ctx.principal), ctx.params.id ?? '', expectedVersion(ctx.headers), op)),
    });

  return [
    route({
      method: 'POST',
      path: '/v1/rules',
      summary: 'Create a rule in draft (definition: a service.rule/v1 or v2 document; 422 rule_invalid lists every problem)',
      tag: 'Rules',
      auth: writeAuth,
      body: createBody,
      idempotent: true,
      responses: { 201: { description: 'The rule, in draft.', schema: ruleSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof createBody>>) => {
        const b = ctx.body;
        checkDefinition(b.definition);
        await checkCampaign(environmentIdOf(ctx.principal), b.campaign_id);
        const rule = await rules.create(
          environmentIdOf(ctx.principal),
          { name: b.name, definition: b.definition, priority: b.priority, campaignId: b.campaign_id },
          ctx.callId,
        );
        return reply(rule, 201);
      },
    }),
    route({
      method: 'GET',
      path: '/v1/rules',
      summary: 'List rules (filters: status, campaign_id)',
      tag: 'Rules',
      auth: readAuth,
      query: listQuery,
      responses: { 200: { description: 'A page of rules.', schema: pageOf(ruleSchema) } },
      handler: async (ctx: RequestContext<unknown, z.infer<typeof listQuery>>) => {
        const page = pageRequest(ctx);
        const rows = await rules.list(environmentIdOf(ctx.principal), {
          limit: page.limit + 1,
          after: page.after?.[0] ?? null,
          status: ctx.query.status ?? null,
          campaignId: ctx.query.campaign_id ?? null,
        });
        return { status: 200, body: toPage(rows, page, (r) => [r.id], ruleWire) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/rules/:id',
      summary: 'Get a rule (ETag: its version)',
      tag: 'Rules',
      auth: readAuth,
      responses: { 200: { description: 'The rule.', schema: ruleSchema, etag: true } },
      handler: async (ctx: RequestContext) => reply(await rules.get(environmentIdOf(ctx.principal), ctx.params.id ?? '')),
    }),
    route({
      method: 'PATCH',
      path: '/v1/rules/:id',
      summary: 'Edit name, priority, campaign_id or the draft definition (If-Match: the version read; archived rules refuse)',
      tag: 'Rules',
      auth: writeAuth,
      body: patchBody,
      ifMatch: true,
      responses: { 200: { description: 'The rule.', schema: ruleSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof patchBody>>) => {
        const b = ctx.body;
        if (b.definition !== undefined) checkDefinition(b.definition);
        await checkCampaign(environmentIdOf(ctx.principal), b.campaign_id);
        const expected = expectedVersion(ctx.headers);
        const patch: { name?: string; campaignId?: string | null; priority?: number; definition?: unknown } = {};
        if (b.name !== undefined) patch.name = b.name;
        if (b.campaign_id !== undefined) patch.campaignId = b.campaign_id;
        if (b.priority !== undefined) patch.priority = b.priority;
        if (b.definition !== undefined) patch.definition = b.definition;
        return reply(await rules.update(environmentIdOf(ctx.principal), ctx.params.id ?? '', expected, patch));
      },
    }),
    route({
      method: 'POST',
      path: '/v1/rules/:id/publish',
      summary:
        'Publish the draft: compile it in the worker pool into the next immutable version and make it active (a draft rule becomes published, a paused one stays paused until resumed; 422 rule_invalid also for a currency, reward, challenge, tier program or level, segment or counter the environment lacks)',
      tag: 'Rules',
      auth: writeAuth,
      idempotent: 'optional',
      body: emptyBody,
      ifMatch: true,
      responses: { 200: { description: 'The rule, published.', schema: ruleSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof emptyBody>>) => {
        const createdBy = ctx.principal.userId ?? ctx.principal.credentialId;
        const env = environmentIdOf(ctx.principal);
        return reply(await rules.publish(env, ctx.params.id ?? '', expectedVersion(ctx.headers), createdBy, compile, referenceCheck(env)));
      },
    }),
    command('pause', 'Pause a published rule'),
    command('resume', 'Resume a paused rule'),
    command('archive', 'Archive a rule (final)'),
    route({
      method: 'GET',
      path: '/v1/rules/:id/versions',
      summary: "A rule's published versions, newest first",
      tag: 'Rules',
      auth: readAuth,
      query: pageQuerySchema,
      responses: { 200: { description: 'A page of rule versions, newest first.', schema: pageOf(ruleVersionSchema) } },
      handler: async (ctx: RequestContext<unknown, z.infer<typeof pageQuerySchema>>) => {
        const page = pageRequest(ctx);
        let before: number | null = null;
        if (page.after !== null) {
          const [n] = page.after;
          if (n === undefined || !/^\d{1,9}$/.test(n)) throw new ApiError('invalid_cursor', { param: 'cursor' });
          before = Number(n);
        }
        const rows = await rules.versions(environmentIdOf(ctx.principal), ctx.params.id ?? '', { limit: page.limit + 1, before });
        return { status: 200, body: toPage(rows, page, (v) => [String(v.number)], versionWire) };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/rules/:id/rollback',
      summary: 'Make an earlier version (by number) the active one (its references are checked again, as at publish; the status is kept: a paused rule stays paused)',
      tag: 'Rules',
      auth: writeAuth,
      idempotent: 'optional',
      body: rollbackBody,
      ifMatch: true,
      responses: { 200: { description: 'The rule.', schema: ruleSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof rollbackBody>>) => {
        const env = environmentIdOf(ctx.principal);
        return reply(await rules.rollback(env, ctx.params.id ?? '', expectedVersion(ctx.headers), ctx.body.number, referenceCheck(env)));
      },
    }),
    route({
      method: 'POST',
      path: '/v1/rules/:id/simulate',
      summary:
        "Dry-run the draft (or the active version) against an event: {simulated, plan, trace}; plan and trace.outcome are about that definition whatever the rule's status or its campaign's state, which trace.live and trace.not_live report; changes nothing",
      tag: 'Rules',
      auth: writeAuth,
      body: simulateBody,
      responses: { 200: { description: 'The simulation: what firing would do (plan) and every check made (trace).', schema: ruleSimulationSchema } },
      handler: async (ctx: RequestContext<z.infer<typeof simulateBody>>) => {
        const env = environmentIdOf(ctx.principal);
        const rule = await rules.getCached(env, ctx.params.id ?? '');
        // Compiled in the pool on the first simulate of this record; every later one reuses it.
        const compiled = plans.of(rule);
        // The named customer as it is now (attributes, counters, segments, tiers, this rule's limit
        // counts), or an empty one without customer_id.
        const ref = ctx.body.customer_id;
        const subject =
          ref === undefined || deps.subject === undefined ? emptySubject : await deps.subject(env, ref, rule.id, ctx.body.event);
        const c = await compiled;
        if (!c.ok) throw ruleInvalid(c.problems);
        const campaignId = rule.campaignId;
        const campaign: SimulatedCampaign | undefined =
          campaignId === null || deps.campaigns === undefined
            ? undefined
            : { id: campaignId, gate: (await deps.campaigns.gates(env))[campaignId], nowMs: await deps.campaigns.nowMs(env) };
        // The budget left for the awards in currencies the campaign caps (read, nothing leased).
        const budgetKeys = campaign === undefined ? [] : budgetKeysOf(c.plan, campaign.gate);
        if (campaign !== undefined && budgetKeys.length > 0 && deps.campaigns?.budgetLeft !== undefined) {
          campaign.budgetLeft = await deps.campaigns.budgetLeft(env, budgetKeys);
        }
        const event = { name: ctx.body.event.name, properties: ctx.body.event.properties, trust: ctx.body.event.trust };
        // Limits shared by every customer: their taken counts now (nothing is reserved).
        const keys = deps.sharedLimits === undefined ? [] : sharedScopeKeys(c.plan, event);
        const taken = keys.length === 0 ? [] : await deps.sharedLimits!.counts(env, keys.map((k) => ({ ruleId: c.plan.ruleId, ...k })));
        // The trace is pure and short: it runs here, on the request thread.
        const r = simulateRule(
          c.plan,
          {
            event,
            customer: subject.customer,
            limitCounts: subject.limitCounts,
            sharedCounts: keys.map((k, i) => ({ ...k, taken: taken[i] ?? 0 })),
          },
          campaign,
          { status: rule.status, tracedDraft: rule.draftDefinition !== null, activeVersion: rule.activeVersion?.number ?? null },
        );
        return { status: 200, body: { simulated: true, plan: r.plan.map(actionWire), trace: traceWire(r.trace, tracedDefinition(rule), r.notLive) } };
      },
    }),
  ];
}
