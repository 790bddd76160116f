// Applying published rules to one recorded event, inside the customer's step: evaluate each plan
// whose trigger is the event (priority order), and turn what fires into facts in the SAME journal
// entry as the event: `rule.fired` (limit counts) and ledger entries for points.award. Returns the
// effects a sync answer reports. Pure: plans and currency configs were loaded before the step.
// An action that cannot apply (full inventory, spent campaign budget, ledger refusal) is reported as skipped, never half-applied.
// A firing whose every action was an award the campaign budget could not cover applied nothing:
// it is `rule.skipped` budget_exhausted, with no `rule.fired` fact, so it counts against no limit
// (and a shared limit's slot is freed after the reply, as for any rule that did not fire).
import { type BudgetGrant, budgetKey, type CampaignFact, type CampaignGate, campaignInactiveReason, consumeGrant } from './campaigns.js';
import type { ChallengeEffect, ChallengeRuntime } from './challenge-effects.js';
import { evolveInventory, grant as grantItem, type InventoryFact, type InventoryState, inventoryFromPairs, inventoryPairs } from './inventory.js';
import * as ledger from './ledger.js';
import {
  boundLimitKey,
  budgetExhaustedDetail,
  evaluatePlan,
  type EvalInput,
  limitKey,
  type RulePlan,
  type SharedLimitAnswer,
  type SkipReason,
} from './rules/index.js';
import { type SegmentDef, segmentNames } from './segments.js';
import { evaluateTier, levelIndexFor, type TierFact, type TierMetrics, type TierProgram, type TiersState, tierValue } from './tiers.js';
import { type RewardFact, requested } from './rewards.js';

export interface RulesContext {
  plans: readonly RulePlan[];
  currencies: readonly ledger.CurrencyConfig[];
  /** Tier programs on the lifetime_earned and balance bases are evaluated after credits. */
  tierPrograms: readonly TierProgram[];
  /** Active challenges of the environment (challenge-effects.ts); absent: none. */
  challenges?: readonly ChallengeRuntime[];
  /** The environment's IANA time zone (challenge periods); absent: UTC. */
  timeZone?: string;
  /** The environment's segments: `customer.segments` = static memberships + dynamic matches. */
  segments?: readonly SegmentDef[];
  /** Campaigns by id: a plan with a campaignId runs only while its campaign is live. */
  campaigns?: Readonly<Record<string, CampaignGate>>;
  /**
   * The rule plans and challenge plans whose campaign caps a currency (computed once per context):
   * only events they trigger take a budget grant before the step; empty, no event pays anything.
   */
  cappedPlans?: readonly RulePlan[];
  /** Per command (never cached): what this command may award of each capped campaign currency. */
  budget?: BudgetGrant;
  /**
   * The published plans with a limit shared by every customer (computed once per context): only
   * events they trigger reserve slots before the step; empty, no event pays anything.
   */
  sharedPlans?: readonly RulePlan[];
  /** Per command (never cached): the shared limits store's answers by limitKey (plain data). */
  sharedLimits?: Readonly<Record<string, SharedLimitAnswer>>;
}

export type RuleFact = { kind: 'rule.fired'; ruleId: string; versionNumber: number; limitKeys: string[]; atMs: number };
const allPrograms: ReadonlySet<string> = new Set(['*']);

export type Effect =
  | { type: 'rule.fired'; ruleId: string; version: number }
  | { type: 'points.awarded'; ruleId: string; currency: string; amount: number; entryId: string; campaignId?: string }
  | { type: 'rule.skipped'; ruleId: string; reason: SkipReason; detail: string }
  | { type: 'action.skipped'; ruleId: string; action: string; reason: string }
  | { type: 'tier.changed'; programId: string; level: string; previousLevel: string; direction: 'up' | 'down' }
  /** A reward.issue action: the request is journaled (outbox); the service reserves the unit after the ack. */
  | { type: 'reward.issue_requested'; ruleId: string; rewardId: string; issuanceId: string }
  | { type: 'item.granted'; ruleId: string; item: string; quantity: number }
  | ChallengeEffect;

export interface RuleSubject {
  externalId: string | null;
  attributes: Record<string, unknown>;
  ledger: ledger.LedgerState;
  ruleLimits: Record<string, number>;
  tiers: TiersState;
  inventory: InventoryState;
  /** Ids of the static segments the customer is a member of. */
  segmentIds?: readonly string[];
}

/**
 * Re-places the customer in every tier program fed by one of `currencies` (or named in `only`),
 * from the ledger as it will be after this step. Rolling-window programs read the book's
 * earnings by day (ledger.earnedInDays) over their rolling_days.
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
    if (!currencies.has(program.currency) && !(only?.has(program.key) || only?.has(program.id))) continue;
    const r = evaluateTier(program, tiers[program.id] ?? null, tierMetrics(program, book, ctx.nowMs), ctx);
    for (const f of r.facts) {
      facts.push(f);
      if (f.kind === 'tier.changed') {
        effects.push({ type: 'tier.changed', programId: f.programId, level: f.level, previousLevel: f.previousLevel, direction: f.direction });
      }
    }
  }
  return { facts, effects };
}

/** The metrics a program places by, from the ledger at nowMs. */
export function tierMetrics(program: TierProgram, book: ledger.LedgerState, nowMs: number): TierMetrics {
  const b = ledger.balanceOf(book, program.currency, nowMs);
  const m: TierMetrics = { lifetimeEarned: b.lifetimeEarned, balance: b.available };
  if (program.basis === 'earned_rolling_days') m.earnedRolling = ledger.earnedInDays(book, program.currency, program.rollingDays ?? 0, nowMs);
  return m;
}

/**
 * Tier programs whose downgrade check is due at nowMs for this customer, re-evaluated (the
 * scheduler's tier.run_due). Rolling programs are how a customer loses a level as earnings age out.
 */
export function dueTierFacts(programs: readonly TierProgram[], book: ledger.LedgerState, tiers: TiersState, ctx: { nowMs: number }): TierFact[] {
  const facts: TierFact[] = [];
  for (const program of programs) {
    const held = tiers[program.id];
    if (held === undefined || held.nextDowngradeCheckMs === null || held.nextDowngradeCheckMs > ctx.nowMs) continue;
    for (const f of evaluateTier(program, held, tierMetrics(program, book, ctx.nowMs), ctx).facts) facts.push(f);
  }
  return facts;
}

/** Counter values (by name) and readiness the rules read; none when the environment has no counters. */
export interface RuleCounters {
  values: Record<string, number | undefined>;
  ready: (name: string) => boolean;
}

const noCounters: Record<string, number | undefined> = {};
const noneReady = (): boolean => false;
const noTiers: Readonly<Record<string, string>> = {};

/**
 * The level a customer never placed in `program` qualifies for now: the program's metric read
 * from the ledger at nowMs, as a placement would compute it (the first level, threshold 0, at
 * worst). Null only for a program without levels.
 */
export function qualifiedLevel(program: TierProgram, book: ledger.LedgerState, nowMs: number): string | null {
  if (program.levels.length === 0) return null;
  const value = tierValue(program, tierMetrics(program, book, nowMs), nowMs);
  return program.levels[levelIndexFor(program, value)]!.key;
}

/**
 * The customer's level per tier program KEY (what `customer.tiers.<program key>` reads): the
 * level held, or, in a program the customer was never placed in (placement happens on a credit
 * in its currency or a tier.evaluate), `unplaced(program)`: the level it qualifies for now.
 */
export function levelsByProgramKey<P extends { id: string; key: string }>(
  programs: readonly P[],
  tiers: Readonly<Record<string, { level: string }>>,
  unplaced?: (program: P) => string | null,
): Readonly<Record<string, string>> {
  let out: Record<string, string> | null = null;
  for (const p of programs) {
    const held = Object.hasOwn(tiers, p.id) ? tiers[p.id]!.level : (unplaced?.(p) ?? null);
    if (held === null) continue;
    out ??= Object.create(null) as Record<string, string>;
    out[p.key] = held;
  }
  return out ?? noTiers;
}
const noSegments: readonly string[] = [];
const noGrant: BudgetGrant = {};

export { boundLimitKey, limitKey };

/**
 * Limit counts with every key as evaluation reads it now (boundLimitKey): the same object when no
 * key changes. For counts from a snapshot written before long scope values were hashed.
 */
export function boundLimitCounts(counts: Record<string, number>): Record<string, number> {
  let out: Record<string, number> | null = null;
  for (const k of Object.keys(counts)) {
    if (boundLimitKey(k) === k) continue;
    out = {};
    break;
  }
  if (out === null) return counts;
  for (const [k, n] of Object.entries(counts)) {
    const b = boundLimitKey(k);
    out[b] = (out[b] ?? 0) + n;
  }
  return out;
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
  counters: RuleCounters | null = null,
): {
  facts: Array<RuleFact | ledger.LedgerFact | TierFact | RewardFact | InventoryFact | CampaignFact>;
  effects: Effect[];
  /** challenge.progress actions of the rules that fired (applied by challenge-effects.ts). */
  challengeProgress: Array<{ challengeId: string; ruleId: string }>;
  /** What is left of the command's budget grant after the rules' awards (for challenge completions). */
  budgetLeft: BudgetGrant | undefined;
} {
  const facts: Array<RuleFact | ledger.LedgerFact | TierFact | RewardFact | InventoryFact | CampaignFact> = [];
  const challengeProgress: Array<{ challengeId: string; ruleId: string }> = [];
  // Later grants in this event must see earlier ones: grant on a private copy once one is made.
  let inventory = subject.inventory;
  let inventoryIsCopy = false;
  const credited = new Set<string>();
  let evaluate: Set<string> | null = null;
  const effects: Effect[] = [];
  let book = subject.ledger;
  let bookIsCopy = false;
  let ruleIdNow = '';
  const segmentDefs = rules.segments;
  let segments: readonly string[] | null = segmentDefs === undefined || segmentDefs.length === 0 ? noSegments : null;
  let tierLevels: Readonly<Record<string, string>> | null = null;
  const input: EvalInput = {
    event,
    customer: {
      attributes: subject.attributes,
      counters: counters?.values ?? noCounters,
      countersReady: counters?.ready ?? noneReady,
      // Resolved on first read: events whose rules never test customer.segments pay nothing.
      get segments(): readonly string[] {
        segments ??= segmentNames(segmentDefs ?? [], subject.segmentIds ?? noSegments, subject.attributes);
        return segments;
      },
      // `customer.tiers.<program key>`: resolved on first read, like segments (from the ledger
      // as the event found it, for a program the customer was never placed in).
      get tiers(): Readonly<Record<string, string>> {
        tierLevels ??= levelsByProgramKey(rules.tierPrograms, subject.tiers, (p) => qualifiedLevel(p, subject.ledger, ctx.nowMs));
        return tierLevels;
      },
      externalId: subject.externalId,
    },
    limitCounts: (limitId, scopeKey) => subject.ruleLimits[limitKey(ruleIdNow, limitId, scopeKey)] ?? 0,
    sharedLimits: rules.sharedLimits,
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
    // Taken back below when every action turns out to be an award the budget cannot cover.
    const factsAt = facts.length;
    const effectsAt = effects.length;
    let short: { currency: string; amount: number }[] | null = null;
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
      if (action.type === 'reward.issue') {
        // Stock is shared across customers: the step records the request, never the unit.
        const f = requested(action.rewardId, plan.ruleId, ctx);
        facts.push(f);
        if (f.kind === 'reward.issue_requested') {
          effects.push({ type: 'reward.issue_requested', ruleId: plan.ruleId, rewardId: action.rewardId, issuanceId: f.issuance.id });
        }
        continue;
      }
      if (action.type === 'challenge.progress') {
        challengeProgress.push({ challengeId: action.challengeId, ruleId: plan.ruleId });
        continue;
      }
      if (action.type === 'item.grant') {
        const g = grantItem(inventory, action.item, action.quantity, plan.ruleId, ctx);
        if (!g.ok) {
          effects.push({ type: 'action.skipped', ruleId: plan.ruleId, action: action.type, reason: g.reason });
          continue;
        }
        if (!inventoryIsCopy) {
          inventory = inventoryFromPairs(inventoryPairs(inventory));
          inventoryIsCopy = true;
        }
        inventory = evolveInventory(inventory, g.fact);
        facts.push(g.fact);
        effects.push({ type: 'item.granted', ruleId: plan.ruleId, item: action.item, quantity: action.quantity });
        continue;
      }
      // points.award (every other action type was handled above).
      // A capped campaign currency: the award must fit in this command's grant.
      const cappedKey = campaign?.capped.includes(action.currency) ? budgetKey(campaign.id, action.currency) : null;
      if (cappedKey !== null) {
        grant ??= { ...(rules.budget ?? noGrant) };
        if (!consumeGrant(grant, cappedKey, action.amount)) {
          effects.push({ type: 'action.skipped', ruleId: plan.ruleId, action: action.type, reason: 'budget_exhausted' });
          (short ??= []).push({ currency: action.currency, amount: action.amount });
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
        book = ledger.cloneLedger(book);
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
    if (campaign !== undefined && short !== null && short.length === outcome.actions.length) {
      // Nothing applied (a budget skip records no fact): drop rule.fired and its limit keys.
      facts.length = factsAt;
      effects.length = effectsAt;
      effects.push({ type: 'rule.skipped', ruleId: plan.ruleId, reason: 'budget_exhausted', detail: budgetExhaustedDetail(campaign.id, short) });
    }
  }
  if (credited.size > 0 || evaluate !== null) {
    // tier.evaluate without a program re-places the customer in every program.
    const feeding = evaluate?.has('*') ? new Set(rules.tierPrograms.map((p) => p.currency)) : credited;
    const t = tierFacts(rules.tierPrograms, feeding, evaluate, book, subject.tiers, ctx);
    for (const f of t.facts) facts.push(f);
    for (const e of t.effects) effects.push(e);
  }
  return { facts, effects, challengeProgress, budgetLeft: grant ?? rules.budget };
}
