// POST /rules/{id}/simulate as a pure function: trace a plan against an event and a snapshot of
// the customer, changing nothing. The input is plain data (sets as arrays, limit counts as rows)
// so it can cross a worker-thread boundary; simulateRule builds the lookups and calls traceRule.
// A shared limit (scope without a customer path) shows the store's taken count, reserving
// nothing, and passes while taken < max. A campaign's capped awards meet the budget left (read,
// not leased): one that does not fit is left out of the plan, as the engine skips it. Plan and
// outcome are about the traced definition whatever the rule's status or its campaign's state;
// those are reported beside them (notLive).
import { type BudgetGrant, budgetKey, type CampaignGate, campaignInactiveReason } from '../campaigns.js';
import { type ResolvedAction, type RulePlan, withAudienceSegment } from './compile.js';
import {
  budgetExhaustedDetail,
  type EvalInput,
  isSharedScope,
  limitKey,
  type RuleTrace,
  type SharedLimitAnswer,
  scopeKey,
  type TraceStep,
  traceRule,
} from './evaluate.js';

export interface SimulationInput {
  event: { name: string; properties: Record<string, unknown>; trust: string };
  customer: {
    attributes: Record<string, unknown>;
    counters: Record<string, number | undefined>;
    readyCounters: string[];
    segments: string[];
    tiers: Record<string, string>;
    externalId: string | null;
  };
  limitCounts: { limitId: string; scopeKey: string; count: number }[];
  /** Shared limits: how many firings the store counts per (limit id, scope key); absent rows are 0. */
  sharedCounts?: { limitId: string; scopeKey: string; taken: number }[];
}

/**
 * The (limit id, scope key) of each shared limit of the plan for this event: what simulate reads
 * from the shared limits store (scope keys of shared limits read the event only).
 */
export function sharedScopeKeys(plan: RulePlan, event: EvalInput['event']): { limitId: string; scopeKey: string }[] {
  const input: EvalInput = { event, customer: noCustomer, limitCounts: () => 0 };
  const out: { limitId: string; scopeKey: string }[] = [];
  for (const l of plan.limits) {
    if (!isSharedScope(l.scope)) continue;
    const key = scopeKey(l.scope, input);
    // A missing scope value skips the rule (limit_scope_missing): there is no count to read.
    if (key !== null) out.push({ limitId: l.id, scopeKey: key });
  }
  return out;
}

const noCustomer: EvalInput['customer'] = { attributes: {}, counters: {}, countersReady: new Set(), segments: [], tiers: {}, externalId: null };

/** What a reservation would answer now, without reserving: granted while taken < max. */
function sharedAnswers(plan: RulePlan, rows: NonNullable<SimulationInput['sharedCounts']>, event: EvalInput['event']): Record<string, SharedLimitAnswer> {
  const taken = new Map<string, number>();
  for (const r of rows) taken.set(`${r.limitId}\u0000${r.scopeKey}`, r.taken);
  const out: Record<string, SharedLimitAnswer> = {};
  for (const k of sharedScopeKeys(plan, event)) {
    const n = taken.get(`${k.limitId}\u0000${k.scopeKey}`) ?? 0;
    const max = plan.limits.find((l) => l.id === k.limitId)?.max ?? 0;
    out[limitKey(plan.ruleId, k.limitId, k.scopeKey)] = { granted: n < max, taken: n };
  }
  return out;
}

/**
 * The simulate answer. `simulated` is always true (a dry run: nothing was journaled); `plan`
 * lists the actions the traced definition would apply (empty when it would skip); `trace` carries
 * the outcome (fired, or the skip reason) and every check with expected and actual values.
 * `notLive` says why an event sent now would not run this definition (the rule's status, a draft
 * not yet published, its campaign not running); empty when it would. It is information only:
 * plan and outcome are about the definition, so a draft rule of a campaign not yet running can be
 * tried before anything goes live.
 */
export interface SimulationResult {
  simulated: true;
  plan: ResolvedAction[];
  trace: RuleTrace;
  notLive: NotLive[];
}

export const notLiveReasons = ['rule_not_published', 'rule_paused', 'rule_archived', 'draft_not_published', 'campaign_inactive'] as const;
export type NotLiveReason = (typeof notLiveReasons)[number];

export interface NotLive {
  reason: NotLiveReason;
  detail: string;
  /** The field to look at: `status`, `draft_definition` or `campaign_id`. */
  param: string;
}

/**
 * The rule whose definition is traced: its status, whether the traced definition is the
 * unpublished draft, and the active version's number (null when it has none).
 */
export interface SimulatedRule {
  status: 'draft' | 'published' | 'paused' | 'archived';
  tracedDraft: boolean;
  activeVersion: number | null;
}

/** Why an event now would not run the traced definition, from the rule's side (campaign aside). */
export function ruleNotLive(rule: SimulatedRule): NotLive[] {
  const out: NotLive[] = [];
  switch (rule.status) {
    case 'draft':
      out.push({ reason: 'rule_not_published', detail: 'The rule is a draft: events run it once it is published.', param: 'status' });
      return out;
    case 'archived':
      out.push({ reason: 'rule_archived', detail: 'The rule is archived: events never run it again.', param: 'status' });
      return out;
    case 'paused':
      out.push({ reason: 'rule_paused', detail: 'The rule is paused: events run its active version once it is resumed.', param: 'status' });
      break;
    case 'published':
      break;
  }
  if (rule.tracedDraft) {
    const active = rule.activeVersion === null ? 'no version' : `version ${rule.activeVersion}`;
    out.push({ reason: 'draft_not_published', detail: `This is the unpublished draft: events run ${active} until it is published.`, param: 'draft_definition' });
  }
  return out;
}

export function toEvalInput(s: SimulationInput): EvalInput {
  const ready = new Set(s.customer.readyCounters);
  const counts = new Map<string, number>();
  for (const r of s.limitCounts) counts.set(`${r.limitId}\u0000${r.scopeKey}`, r.count);
  return {
    event: s.event,
    customer: {
      attributes: s.customer.attributes,
      counters: s.customer.counters,
      countersReady: ready,
      segments: s.customer.segments,
      tiers: s.customer.tiers,
      externalId: s.customer.externalId,
    },
    limitCounts: (limitId, scopeKey) => counts.get(`${limitId}\u0000${scopeKey}`) ?? 0,
  };
}

/**
 * The campaign a rule belongs to, as events meet it: `gate` undefined when the campaign no longer
 * exists. Its audience is checked with the rule's segment checks (segment_not_matched); whether it
 * is running at `nowMs` is a `campaign` step after the trigger and, when it is not, a notLive
 * entry (campaign_inactive, the reason an event would be skipped with), not the outcome.
 */
export interface SimulatedCampaign {
  id: string;
  gate: CampaignGate | undefined;
  nowMs: number;
  /**
   * What an event could still be granted per budget key of the plan's capped awards (budgetKeysOf),
   * read without leasing; absent: budgets are not simulated.
   */
  budgetLeft?: Readonly<BudgetGrant>;
}

/** The budget keys (campaign, currency) of the plan's awards in currencies its campaign caps. */
export function budgetKeysOf(plan: RulePlan, gate: CampaignGate | undefined): string[] {
  if (gate === undefined || gate.capped.length === 0) return [];
  const keys = new Set<string>();
  for (const a of plan.actions) {
    if ((a.type === 'points.award' || a.type === 'points.award_from') && gate.capped.includes(a.currency)) keys.add(budgetKey(gate.id, a.currency));
  }
  return [...keys];
}

/**
 * The budget step of a firing in a campaign that caps a currency: one `budget` step per capped
 * award, in action order (expected: the amount; actual: what is left after the awards before it),
 * as the engine consumes the event's grant. An award that does not fit leaves the plan; when none
 * of the actions is left, the outcome is budget_exhausted (the engine reports rule.skipped and does
 * not count the firing). The budget left is read, not leased: another event may take it first, and
 * another rule of the same event draws on the same grant.
 */
function withBudget(result: SimulationResult, gate: CampaignGate, budgetLeft: Readonly<BudgetGrant>): SimulationResult {
  const outcome = result.trace.outcome;
  if (!outcome.fired || gate.capped.length === 0) return result;
  const left: BudgetGrant = { ...budgetLeft };
  const plan: ResolvedAction[] = [];
  const short: { currency: string; amount: number }[] = [];
  const steps = [...result.trace.steps];
  let firstShort: string | null = null;
  outcome.actions.forEach((a, i) => {
    if (a.type !== 'points.award' || !gate.capped.includes(a.currency)) {
      plan.push(a);
      return;
    }
    const k = budgetKey(gate.id, a.currency);
    const have = left[k] ?? 0;
    const fits = have >= a.amount;
    steps.push({ check: 'budget', at: `actions[${i}]`, path: null, op: 'gte', expected: a.amount, actual: have, found: true, pass: fits });
    if (fits) {
      left[k] = have - a.amount;
      plan.push(a);
    } else {
      short.push({ currency: a.currency, amount: a.amount });
      firstShort ??= `actions[${i}]`;
    }
  });
  if (plan.length > 0 || short.length === 0) return { simulated: true, plan, trace: { outcome, steps }, notLive: result.notLive };
  return {
    simulated: true,
    plan,
    trace: { outcome: { fired: false, reason: 'budget_exhausted', detail: budgetExhaustedDetail(gate.id, short), param: firstShort }, steps },
    notLive: result.notLive,
  };
}

export function simulateRule(plan: RulePlan, input: SimulationInput | EvalInput, campaign?: SimulatedCampaign, rule?: SimulatedRule): SimulationResult {
  let evalInput: EvalInput;
  if (typeof input.limitCounts === 'function') evalInput = input as EvalInput;
  else {
    const s = input as SimulationInput;
    evalInput = toEvalInput(s);
    evalInput.sharedLimits = sharedAnswers(plan, s.sharedCounts ?? [], s.event);
  }
  const notLive = rule === undefined ? [] : ruleNotLive(rule);
  if (campaign === undefined) {
    const trace = traceRule(plan, evalInput);
    return { simulated: true, plan: trace.outcome.fired ? [...trace.outcome.actions] : [], trace, notLive };
  }
  const traced = traceRule(withAudienceSegment(plan, campaign.gate?.audienceSegment ?? null), evalInput);
  const inactive = campaignInactiveReason(campaign.gate, campaign.nowMs);
  const running: TraceStep = {
    check: 'campaign',
    at: 'campaign_id',
    path: null,
    op: 'running',
    expected: campaign.id,
    actual: inactive ?? 'running',
    found: campaign.gate !== undefined,
    pass: inactive === null,
  };
  // Where the engine checks it: right after the trigger, before anything else.
  const trace: RuleTrace = { outcome: traced.outcome, steps: [traced.steps[0]!, running, ...traced.steps.slice(1)] };
  if (inactive !== null) notLive.push({ reason: 'campaign_inactive', detail: inactive, param: 'campaign_id' });
  const result: SimulationResult = { simulated: true, plan: trace.outcome.fired ? [...trace.outcome.actions] : [], trace, notLive };
  return campaign.gate === undefined || campaign.budgetLeft === undefined ? result : withBudget(result, campaign.gate, campaign.budgetLeft);
}
