// Applying published rules to one recorded event, inside the customer's step: evaluate each plan
// whose trigger is the event (priority order), and turn what fires into facts in the SAME journal
// entry as the event: `rule.fired` (limit counts) and ledger entries for points.award. Returns the
// effects a sync answer reports. Pure: plans and currency configs were loaded before the step.
// Actions whose mechanics are not in the engine yet are reported as skipped, never half-applied.
import { type BudgetGrant, budgetKey, type CampaignFact, type CampaignGate, campaignInactiveReason, consumeGrant } from './campaigns.js';
import * as ledger from './ledger.js';
import { evaluatePlan, type EvalInput, type RulePlan } from './rules/index.js';
import { type SegmentDef, segmentNames } from './segments.js';
import { evaluateTier, type TierFact, type TierProgram, type TiersState } from './tiers.js';

export interface RulesContext {
  plans: readonly RulePlan[];
  currencies: readonly ledger.CurrencyConfig[];
  /** Tier programs on the lifetime_earned and balance bases are evaluated after credits. */
  tierPrograms: readonly TierProgram[];
  /** The environment's segments: `customer.segments` = static memberships + dynamic matches. */
  segments?: readonly SegmentDef[];
  /** Campaigns by id: a plan with a campaignId runs only while its campaign is live. */
  campaigns?: Readonly<Record<string, CampaignGate>>;
  /** Per command (never cached): what this command may award of each capped campaign currency. */
  budget?: BudgetGrant;
}

export type RuleFact = { kind: 'rule.fired'; ruleId: string; versionNumber: number; limitKeys: string[]; atMs: number };
const allPrograms: ReadonlySet<string> = new Set(['*']);

export type Effect =
  | { type: 'rule.fired'; ruleId: string; version: number }
  | { type: 'points.awarded'; ruleId: string; currency: string; amount: number; entryId: string; campaignId?: string }
  | { type: 'rule.skipped'; ruleId: string; reason: string; detail: string }
  | { type: 'action.skipped'; ruleId: string; action: string; reason: string }
  | { type: 'tier.changed'; programId: string; level: string; previousLevel: string; direction: 'up' | 'down' };

export interface RuleSubject {
  externalId: string | null;
  attributes: Record<string, unknown>;
  ledger: ledger.LedgerState;
  ruleLimits: Record<string, number>;
  tiers: TiersState;
  /** Ids of the static segments the customer is a member of. */
  segmentIds?: readonly string[];
}

/**
 * Re-places the customer in every tier program fed by one of `currencies` (or named in `only`),
 * from the ledger as it will be after this step. Rolling-window programs need earnings by date,
 * which the ledger state does not keep yet: they are not evaluated here.
 */
export function tierFacts(
  programs: readonly TierProgram[],
  currencies: ReadonlySet<string>,
  only: ReadonlySet<string> | null,
  book: ledger.LedgerState,
  tiers: TiersState,
  ctx: { nowMs: number },
): { facts: TierFact[]; effects: Effect[] } {
  const facts: TierFact[] = [];
  const effects: Effect[] = [];
  for (const program of programs) {
    if (program.basis === 'earned_rolling_days') continue;
    if (!currencies.has(program.currency) && !(only?.has(program.key) || only?.has(program.id))) continue;
    const b = ledger.balanceOf(book, program.currency, ctx.nowMs);
    const r = evaluateTier(program, tiers[program.id] ?? null, { lifetimeEarned: b.lifetimeEarned, balance: b.available }, ctx);
    for (const f of r.facts) {
      facts.push(f);
      if (f.kind === 'tier.changed') {
        effects.push({ type: 'tier.changed', programId: f.programId, level: f.level, previousLevel: f.previousLevel, direction: f.direction });
      }
    }
  }
  return { facts, effects };
}

const noCounters: Record<string, number | undefined> = {};
const noneReady = (): boolean => false;
const noTiers: Record<string, string> = {};
const noSegments: readonly string[] = [];
const noGrant: BudgetGrant = {};

export function limitKey(ruleId: string, limitId: string, scopeKey: string): string {
  return `${ruleId}|${limitId}|${scopeKey}`;
}

/**
 * The facts and effects of the rules for one event. `subject` is the customer as it is before the
 * event's rule facts; it is not modified (ledger decisions run on a copy when several awards touch
 * the ledger in one event).
 */
export function applyRules(
  rules: RulesContext,
  event: { name: string; properties: Record<string, unknown>; trust: string },
  subject: RuleSubject,
  ctx: ledger.LedgerCtx,
): { facts: Array<RuleFact | ledger.LedgerFact | TierFact | CampaignFact>; effects: Effect[] } {
  const facts: Array<RuleFact | ledger.LedgerFact | TierFact | CampaignFact> = [];
  const credited = new Set<string>();
  let evaluate: Set<string> | null = null;
  const effects: Effect[] = [];
  let book = subject.ledger;
  let bookIsCopy = false;
  let ruleIdNow = '';
  const segmentDefs = rules.segments;
  let segments: readonly string[] | null = segmentDefs === undefined || segmentDefs.length === 0 ? noSegments : null;
  const input: EvalInput = {
    event,
    customer: {
      attributes: subject.attributes,
      counters: noCounters,
      countersReady: noneReady,
      // Resolved on first read: events whose rules never test customer.segments pay nothing.
      get segments(): readonly string[] {
        segments ??= segmentNames(segmentDefs ?? [], subject.segmentIds ?? noSegments, subject.attributes);
        return segments;
      },
      tiers: noTiers,
      externalId: subject.externalId,
    },
    limitCounts: (limitId, scopeKey) => subject.ruleLimits[limitKey(ruleIdNow, limitId, scopeKey)] ?? 0,
  };
  // The step's private copy of the command's budget grant (consumed award by award).
  let grant: BudgetGrant | null = null;
  for (const plan of rules.plans) {
    if (plan.event !== event.name) continue;
    ruleIdNow = plan.ruleId;
    const campaign = plan.campaignId != null ? rules.campaigns?.[plan.campaignId] : undefined;
    if (plan.campaignId != null) {
      const inactive = campaignInactiveReason(campaign, ctx.nowMs);
      if (inactive !== null) {
        effects.push({ type: 'rule.skipped', ruleId: plan.ruleId, reason: 'campaign_inactive', detail: inactive });
        continue;
      }
    }
    const outcome = evaluatePlan(plan, input);
    if (!outcome.fired) {
      effects.push({ type: 'rule.skipped', ruleId: plan.ruleId, reason: outcome.reason, detail: outcome.detail });
      continue;
    }
    facts.push({
      kind: 'rule.fired',
      ruleId: plan.ruleId,
      versionNumber: plan.versionNumber,
      limitKeys: outcome.limitKeys.map((k) => limitKey(plan.ruleId, k.limitId, k.scopeKey)),
      atMs: ctx.nowMs,
    });
    effects.push({ type: 'rule.fired', ruleId: plan.ruleId, version: plan.versionNumber });
    for (const action of outcome.actions) {
      if (action.type === 'tier.evaluate') {
        evaluate ??= new Set();
        for (const k of action.program === null ? allPrograms : [action.program]) evaluate.add(k);
        continue;
      }
      if (action.type !== 'points.award') {
        effects.push({ type: 'action.skipped', ruleId: plan.ruleId, action: action.type, reason: 'action_not_available' });
        continue;
      }
      // A capped campaign currency: the award must fit in this command's grant.
      const cappedKey = campaign?.capped.includes(action.currency) ? budgetKey(campaign.id, action.currency) : null;
      if (cappedKey !== null) {
        grant ??= { ...(rules.budget ?? noGrant) };
        if (!consumeGrant(grant, cappedKey, action.amount)) {
          effects.push({ type: 'action.skipped', ruleId: plan.ruleId, action: action.type, reason: 'budget_exhausted' });
          continue;
        }
      }
      const d = ledger.decide(
        book,
        {
          kind: 'ledger.award',
          currency: action.currency,
          amount: action.amount,
          reason: `rule ${plan.ruleId} v${plan.versionNumber}`,
          sourceType: 'rule_execution',
          sourceId: plan.ruleId,
        },
        rules.currencies,
        ctx,
      );
      if (!d.ok) {
        // Not awarded: the grant keeps the amount for later awards of this event.
        if (cappedKey !== null && grant !== null) grant[cappedKey] = (grant[cappedKey] ?? 0) + action.amount;
        effects.push({ type: 'action.skipped', ruleId: plan.ruleId, action: action.type, reason: d.code });
        continue;
      }
      // Later awards in this event must see this one: decide on a private copy of the ledger.
      if (!bookIsCopy) {
        book = structuredClone(book);
        bookIsCopy = true;
      }
      for (const f of d.facts) {
        book = ledger.evolve(book, f);
        facts.push(f);
      }
      credited.add(action.currency);
      if (campaign !== undefined) {
        facts.push({ kind: 'campaign.spent', campaignId: campaign.id, currency: action.currency, amount: action.amount, atMs: ctx.nowMs });
      }
      // A campaign award is always reported: the unused part of the grant is computed from these effects.
      if (d.reply.kind === 'ledger.entry' || campaign !== undefined) {
        const entryId = d.reply.kind === 'ledger.entry' ? d.reply.entry.id : '';
        const awarded: Effect = { type: 'points.awarded', ruleId: plan.ruleId, currency: action.currency, amount: action.amount, entryId };
        if (campaign !== undefined) awarded.campaignId = campaign.id;
        effects.push(awarded);
      }
    }
  }
  if (credited.size > 0 || evaluate !== null) {
    // tier.evaluate without a program re-places the customer in every program.
    const feeding = evaluate?.has('*') ? new Set(rules.tierPrograms.map((p) => p.currency)) : credited;
    const t = tierFacts(rules.tierPrograms, feeding, evaluate, book, subject.tiers, ctx);
    for (const f of t.facts) facts.push(f);
    for (const e of t.effects) effects.push(e);
  }
  return { facts, effects };
}
