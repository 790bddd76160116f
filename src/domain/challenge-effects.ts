// Challenges inside the customer's step: the qualifying condition and completion actions of a
// challenge are compiled by the RULES compiler (same condition language, same action shapes), each
// recorded event is offered to the environment's active challenges (and to the challenges named by
// fired rules' `challenge.progress` actions), and a completion applies its actions (points.award
// through the ledger, tier re-placement as rules do) in the SAME journal entry as the event. Pure:
// challenge definitions, currencies, tier programs and the time zone were loaded before the step.
import { type BudgetGrant, budgetKey, type CampaignFact, type CampaignGate, campaignInactiveReason, consumeGrant } from './campaigns.js';
import * as ch from './challenges.js';
import { evolveInventory, grant as grantItem, type InventoryFact, type InventoryState, inventoryFromPairs, inventoryPairs } from './inventory.js';
import * as ledger from './ledger.js';
import type { Effect, RuleCounters, RuleSubject } from './rule-effects.js';
import { levelsByProgramKey, qualifiedLevel, tierFacts } from './rule-effects.js';
import { type RewardFact, requested } from './rewards.js';
import { type SegmentDef, segmentNames } from './segments.js';
import {
  compileRule,
  type EvalInput,
  evaluatePlan,
  type ResolvedAction,
  type RuleAction,
  type RulePlan,
  type RuleV2,
  validateRule,
} from './rules/index.js';
import { cloneTiers, evolveTiers, type TierFact, type TierProgram, type TiersState } from './tiers.js';

/** A challenge as the actor evaluates it: its config and its compiled qualifying plan. */
export interface ChallengeRuntime {
  config: ch.ChallengeConfig;
  /** Trigger = qualifying.event, conditions = qualifying.conditions, actions = completion actions (static). */
  plan: RulePlan;
}

export type ChallengeEffect =
  | { type: 'challenge.progressed'; challengeId: string; periodKey: string; count: number; target: number }
  | { type: 'challenge.completed'; challengeId: string; periodKey: string; completions: number }
  | { type: 'challenge.skipped'; challengeId: string; reason: string }
  | { type: 'challenge.points_awarded'; challengeId: string; currency: string; amount: number; entryId: string; campaignId?: string }
  | { type: 'challenge.item_granted'; challengeId: string; item: string; quantity: number }
  | { type: 'challenge.reward_requested'; challengeId: string; rewardId: string; issuanceId: string }
  | { type: 'challenge.action_skipped'; challengeId: string; action: string; reason: string };

/** What the step needs besides the customer: loaded before the step. */
export interface ChallengeContext {
  challenges: readonly ChallengeRuntime[];
  timeZone: string;
  currencies: readonly ledger.CurrencyConfig[];
  tierPrograms: readonly TierProgram[];
  /** Campaigns by id: a challenge with a campaign_id progresses only while it is live, for its audience. */
  campaigns?: Readonly<Record<string, CampaignGate>>;
  /** Segments (conditions and audiences read `customer.segments`). */
  segments?: readonly SegmentDef[];
  /** Counter values and readiness (conditions read `customer.counters.<name>`). */
  counters?: RuleCounters | null;
  /** What is left of the command's campaign budget grant after the rules (consumed by completion awards). */
  budget?: BudgetGrant;
}

type StepFact = ch.ChallengeFact | ledger.LedgerFact | TierFact | InventoryFact | RewardFact | CampaignFact;

/** Compiles a challenge (never throws; a definition that did not validate compiles to an inert plan). */
export function compileChallenge(config: ch.ChallengeConfig, version: number): ChallengeRuntime {
  const definition = {
    schema: 'service.rule/v2',
    trigger: { kind: 'customer_event', event: config.qualifying.event },
    ...(config.qualifying.conditions !== undefined && config.qualifying.conditions !== null ? { conditions: config.qualifying.conditions } : {}),
    actions: config.completionActions as RuleAction[],
  } as RuleV2;
  const plan = compileRule(definition, { ruleId: config.id, versionNumber: version, priority: 0 });
  // budgetWants reads the campaign of completion awards from the plan, as it does for rules.
  if (config.campaignId != null) plan.campaignId = config.campaignId;
  return { config, plan };
}

export interface DefinitionProblem {
  param: string;
  message: string;
}

/**
 * Checks qualifying and completion_actions with the rules schema (so conditions are exactly the
 * rule condition language) and names each problem by its wire field. Completion actions must be
 * static (no amount_from: a completion is not one event) and cannot progress another challenge.
 */
export function validateChallengeDefinition(qualifying: unknown, completionActions: unknown): DefinitionProblem[] {
  const problems: DefinitionProblem[] = [];
  if (qualifying === null || typeof qualifying !== 'object' || Array.isArray(qualifying)) {
    return [{ param: 'qualifying', message: 'qualifying is {event, conditions?}.' }];
  }
  const q = qualifying as Record<string, unknown>;
  for (const k of Object.keys(q)) if (k !== 'event' && k !== 'conditions') problems.push({ param: `qualifying.${k}`, message: 'Unknown field.' });
  const actions = Array.isArray(completionActions) ? completionActions : [];
  // The rules schema wants at least one action: an empty list is checked with a harmless stand-in.
  const doc = {
    schema: 'service.rule/v2',
    trigger: { kind: 'customer_event', event: q.event },
    ...(q.conditions !== undefined && q.conditions !== null ? { conditions: q.conditions } : {}),
    actions: actions.length > 0 ? actions : [{ type: 'tier.evaluate' }],
  };
  const v = validateRule(doc);
  if (!v.ok) {
    for (const p of v.problems) problems.push({ param: wireParam(p.path), message: p.message });
  }
  actions.forEach((a, i) => {
    if (a === null || typeof a !== 'object') return;
    const o = a as Record<string, unknown>;
    if (o.type === 'points.award' && o.amount_from !== undefined) {
      problems.push({ param: `completion_actions[${i}].amount_from`, message: 'Completion awards take a fixed amount.' });
    }
    if (o.type === 'challenge.progress') {
      problems.push({ param: `completion_actions[${i}].type`, message: 'A completion cannot progress a challenge.' });
    }
  });
  return problems;
}

function wireParam(path: string): string {
  if (path === 'trigger.event' || path.startsWith('trigger')) return 'qualifying.event';
  if (path.startsWith('conditions')) return `qualifying.${path}`;
  if (path.startsWith('actions')) return `completion_${path}`;
  return path;
}

const noCounters: Record<string, number | undefined> = {};
const noneReady = (): boolean => false;
const noSegments: readonly string[] = [];
const noLimits = (): number => 0;

/**
 * The ledger and tiers as they will be after `earlier` (the rule facts of this step), made lazily
 * and only when a completion awards or re-places; completion facts are applied to them as they go.
 */
class Book {
  private book: ledger.LedgerState | null = null;
  private tiersNow: TiersState | null = null;
  readonly credited = new Set<string>();
  evaluate: Set<string> | null = null;

  private items: InventoryState | null = null;
  /** The step's private copy of the budget grant (null: none taken for this command). */
  readonly grant: BudgetGrant | null;

  constructor(
    private readonly subject: Pick<RuleSubject, 'ledger' | 'tiers'> & { inventory?: InventoryState },
    private readonly earlier: ReadonlyArray<{ kind: string }>,
    grant: BudgetGrant | undefined = undefined,
  ) {
    this.grant = grant === undefined ? null : { ...grant };
  }

  /** The inventory as it stands after the earlier facts of this step (a private copy). */
  inventory(): InventoryState {
    if (this.items === null) {
      let inv = inventoryFromPairs(inventoryPairs(this.subject.inventory ?? {}));
      for (const f of this.earlier) if (f.kind === 'item.granted') inv = evolveInventory(inv, f as InventoryFact);
      this.items = inv;
    }
    return this.items;
  }

  ledger(): ledger.LedgerState {
    if (this.book === null) {
      let b = ledger.cloneLedger(this.subject.ledger);
      for (const f of this.earlier) if (ledger.isLedgerFact(f)) b = ledger.evolve(b, f);
      this.book = b;
    }
    return this.book;
  }

  setLedger(b: ledger.LedgerState): void {
    this.book = b;
  }

  tiers(): TiersState {
    if (this.tiersNow === null) {
      let t = cloneTiers(this.subject.tiers);
      for (const f of this.earlier) if (isTierFact(f)) t = evolveTiers(t, f);
      this.tiersNow = t;
    }
    return this.tiersNow;
  }
}

function isTierFact(f: { kind: string }): f is TierFact {
  return f.kind.startsWith('tier.');
}

/** Applies one completion's actions: ledger facts and effects appended; tiers are re-placed in finish(). */
function complete(
  fact: ch.ChallengeFact & { kind: 'challenge.completed' },
  rt: ChallengeRuntime,
  context: Pick<ChallengeContext, 'currencies' | 'campaigns'>,
  book: Book,
  facts: StepFact[],
  effects: Effect[],
  ctx: ledger.LedgerCtx,
): void {
  effects.push({ type: 'challenge.completed', challengeId: fact.challengeId, periodKey: fact.periodKey, completions: fact.completions });
  const campaign = rt.config.campaignId != null ? context.campaigns?.[rt.config.campaignId] : undefined;
  for (const action of actionsOf(rt)) {
    if (action.type === 'tier.evaluate') {
      book.evaluate ??= new Set();
      book.evaluate.add(action.program ?? '*');
      continue;
    }
    if (action.type === 'item.grant') {
      const g = grantItem(book.inventory(), action.item, action.quantity, fact.challengeId, ctx);
      if (!g.ok) {
        effects.push({ type: 'challenge.action_skipped', challengeId: fact.challengeId, action: action.type, reason: g.reason });
        continue;
      }
      evolveInventory(book.inventory(), g.fact);
      facts.push(g.fact);
      effects.push({ type: 'challenge.item_granted', challengeId: fact.challengeId, item: action.item, quantity: action.quantity });
      continue;
    }
    if (action.type === 'reward.issue') {
      // Stock is shared across customers: the completion records the request (outbox), like a rule.
      const f = requested(action.rewardId, fact.challengeId, ctx, 'challenge_completion');
      facts.push(f);
      effects.push({ type: 'challenge.reward_requested', challengeId: fact.challengeId, rewardId: action.rewardId, issuanceId: f.issuance.id });
      continue;
    }
    if (action.type !== 'points.award') {
      effects.push({ type: 'challenge.action_skipped', challengeId: fact.challengeId, action: action.type, reason: 'action_not_available' });
      continue;
    }
    // A capped campaign currency: the award must fit in what is left of the command's grant.
    const capped = campaign?.capped.includes(action.currency) === true;
    if (capped && (book.grant === null || !consumeGrant(book.grant, budgetKey(campaign.id, action.currency), action.amount))) {
      effects.push({ type: 'challenge.action_skipped', challengeId: fact.challengeId, action: action.type, reason: 'budget_exhausted' });
      continue;
    }
    const d = ledger.decide(
      book.ledger(),
      {
        kind: 'ledger.award',
        currency: action.currency,
        amount: action.amount,
        reason: `challenge ${fact.challengeId} ${fact.periodKey}${fact.cycle > 1 ? ` cycle ${fact.cycle}` : ''}`,
        sourceType: 'challenge_completion',
        sourceId: fact.challengeId,
      },
      context.currencies,
      ctx,
    );
    if (!d.ok) {
      if (capped && book.grant !== null) book.grant[budgetKey(campaign.id, action.currency)]! += action.amount;
      effects.push({ type: 'challenge.action_skipped', challengeId: fact.challengeId, action: action.type, reason: d.code });
      continue;
    }
    let b = book.ledger();
    for (const f of d.facts) {
      b = ledger.evolve(b, f);
      facts.push(f);
    }
    book.setLedger(b);
    book.credited.add(action.currency);
    if (capped) facts.push({ kind: 'campaign.spent', campaignId: campaign.id, currency: action.currency, amount: action.amount, atMs: ctx.nowMs });
    if (d.reply.kind === 'ledger.entry') {
      effects.push({
        type: 'challenge.points_awarded',
        challengeId: fact.challengeId,
        currency: action.currency,
        amount: action.amount,
        entryId: d.reply.entry.id,
        ...(capped ? { campaignId: campaign.id } : {}),
      });
    }
  }
}

/** Tier re-placement after every completion of the step (as rule-effects does after awards). */
function finish(book: Book, programs: readonly TierProgram[], facts: StepFact[], effects: Effect[], ctx: ledger.LedgerCtx): void {
  if (book.credited.size === 0 && book.evaluate === null) return;
  const feeding = book.evaluate?.has('*') ? new Set(programs.map((p) => p.currency)) : book.credited;
  const t = tierFacts(programs, feeding, book.evaluate, book.ledger(), book.tiers(), ctx);
  for (const f of t.facts) facts.push(f);
  for (const e of t.effects) effects.push(e);
}

function actionsOf(rt: ChallengeRuntime): readonly ResolvedAction[] {
  // Completion actions are static by validation; a stored amount_from (never accepted) is dropped.
  return rt.plan.actions.filter((a): a is ResolvedAction => a.type !== 'points.award_from');
}

/**
 * Offers one recorded event to the challenges. `requested` are challenge ids named by rules that
 * fired for this event (their challenge.progress actions): the rule's conditions stand in for the
 * challenge's own. `earlier` are the facts this step produced before (rules), so awards see them.
 * A challenge is contributed to at most once per event.
 */
export function applyChallenges(
  context: ChallengeContext,
  requested: ReadonlyArray<{ challengeId: string; ruleId: string }>,
  event: { id: string; name: string; properties: Record<string, unknown>; trust: string },
  subject: RuleSubject & { challenges: ch.ChallengesState },
  earlier: ReadonlyArray<{ kind: string }>,
  ctx: ledger.LedgerCtx,
): { facts: StepFact[]; effects: Effect[] } {
  const facts: StepFact[] = [];
  const effects: Effect[] = [];
  const targets = new Map<string, { rt: ChallengeRuntime; byRule: boolean }>();
  for (const rt of context.challenges) {
    if (rt.config.qualifying.event === event.name) targets.set(rt.config.id, { rt, byRule: false });
  }
  for (const r of requested) {
    const known = targets.get(r.challengeId);
    if (known !== undefined) {
      known.byRule = true;
      continue;
    }
    const rt = context.challenges.find((c) => c.config.id === r.challengeId);
    if (rt === undefined) {
      // Only active challenges are loaded: a draft, paused, ended or unknown one does not progress.
      effects.push({ type: 'challenge.skipped', challengeId: r.challengeId, reason: 'challenge_not_active' });
      continue;
    }
    targets.set(rt.config.id, { rt, byRule: true });
  }
  if (targets.size === 0) return { facts, effects };

  let segments: readonly string[] | null = null;
  let tierLevels: Readonly<Record<string, string>> | null = null;
  const input: EvalInput = {
    event: { name: event.name, properties: event.properties, trust: event.trust },
    customer: {
      attributes: subject.attributes,
      counters: context.counters?.values ?? noCounters,
      countersReady: context.counters?.ready ?? noneReady,
      // Resolved on first read, as for rules (before this step's facts).
      get segments(): readonly string[] {
        segments ??= context.segments === undefined ? noSegments : segmentNames(context.segments, subject.segmentIds ?? noSegments, subject.attributes);
        return segments;
      },
      get tiers(): Readonly<Record<string, string>> {
        tierLevels ??= levelsByProgramKey(context.tierPrograms, subject.tiers, (p) => qualifiedLevel(p, subject.ledger, ctx.nowMs));
        return tierLevels;
      },
      externalId: subject.externalId,
    },
    limitCounts: noLimits,
  };
  const root = { event: { id: event.id, name: event.name, properties: event.properties }, customer: { attributes: subject.attributes } };
  const book = new Book(subject, earlier, context.budget);
  for (const { rt, byRule } of targets.values()) {
    // A challenge of a campaign progresses only while the campaign is live, for its audience.
    const closed = campaignClosed(rt.config, context.campaigns, ctx.nowMs, () => input.customer.segments);
    if (closed !== null) {
      effects.push({ type: 'challenge.skipped', challengeId: rt.config.id, reason: closed });
      continue;
    }
    const outcome = byRule ? null : evaluatePlan(rt.plan, input);
    const qualifies = outcome === null || outcome.fired;
    const d = ch.decide(
      subject.challenges,
      {
        kind: 'challenge.contribute',
        challenge: rt.config,
        eventId: event.id,
        contribution: ch.readContribution(rt.config.contributionKey, root),
        qualifies,
        timeZone: context.timeZone,
      },
      ctx,
    );
    if (!d.ok || d.reply.kind !== 'contribution') continue;
    if (d.reply.outcome === 'skipped') {
      // Conditions reading a counter not ready yet are not decided, as for a rule: say so.
      const reason =
        d.reply.reason === 'not_qualifying' && outcome !== null && !outcome.fired && outcome.reason === 'counter_not_ready'
          ? 'counter_not_ready'
          : (d.reply.reason ?? 'skipped');
      effects.push({ type: 'challenge.skipped', challengeId: rt.config.id, reason });
      continue;
    }
    for (const f of d.facts) {
      facts.push(f);
      if (f.kind === 'challenge.progressed') {
        effects.push({ type: 'challenge.progressed', challengeId: f.challengeId, periodKey: f.periodKey, count: f.count, target: f.target });
      } else if (f.kind === 'challenge.completed') {
        complete(f, rt, context, book, facts, effects, ctx);
      }
    }
  }
  finish(book, context.tierPrograms, facts, effects, ctx);
  return { facts, effects };
}

/**
 * Why a campaign's challenge is closed to the customer now: its campaign is not live
 * (campaign_inactive) or the customer is outside its audience (segment_not_matched, `segments`
 * read only then); null for a challenge without a campaign or one open to the customer.
 */
function campaignClosed(
  config: ch.ChallengeConfig,
  campaigns: ChallengeContext['campaigns'],
  nowMs: number,
  segments: () => readonly string[],
): ch.CampaignClosed | null {
  if (config.campaignId == null) return null;
  const gate = campaigns?.[config.campaignId];
  if (campaignInactiveReason(gate, nowMs) !== null) return 'campaign_inactive';
  if (gate?.audienceSegment != null && !segments().includes(gate.audienceSegment)) return 'segment_not_matched';
  return null;
}

/**
 * An operator command on one customer's challenge (enroll, unenroll, revoke, reevaluate). A
 * reevaluation that completes applies the completion actions in the same journal entry; it is
 * gated by the challenge's campaign as an event is (nothing completes while the campaign is not
 * live, or for a customer outside its audience).
 */
export function runChallengeCommand(
  context: ChallengeContext,
  runtime: ChallengeRuntime | null,
  command: ch.Command,
  subject: Pick<RuleSubject, 'ledger' | 'tiers'> & {
    challenges: ch.ChallengesState;
    inventory?: InventoryState;
    attributes?: Record<string, unknown>;
    segmentIds?: readonly string[];
  },
  ctx: ledger.LedgerCtx,
): { ok: true; facts: StepFact[]; effects: Effect[]; reply: ch.Reply } | Extract<ch.Decision, { ok: false }> {
  if (command.kind === 'challenge.reevaluate') {
    const closed = campaignClosed(command.challenge, context.campaigns, ctx.nowMs, () =>
      segmentNames(context.segments ?? [], subject.segmentIds ?? noSegments, subject.attributes ?? {}),
    );
    command = { ...command, campaignClosed: closed };
  }
  const d = ch.decide(subject.challenges, command, ctx);
  if (!d.ok) return d;
  const facts: StepFact[] = [];
  const effects: Effect[] = [];
  const book = new Book(subject, []);
  for (const f of d.facts) {
    facts.push(f);
    // An operator's reevaluation takes no budget grant: capped campaign awards are skipped (budget_exhausted).
    if (f.kind === 'challenge.completed' && runtime !== null) complete(f, runtime, context, book, facts, effects, ctx);
  }
  finish(book, context.tierPrograms, facts, effects, ctx);
  return { ok: true, facts, effects, reply: d.reply };
}
