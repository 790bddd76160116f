// The customer mechanic: identity, attributes, aliases/merges, deletion and event recording with
// permanent deduplication by the caller's event id. Pure: decide(state, command, ctx) returns
// facts (or an error code from the HTTP table), evolve(state, fact) applies one fact. No clock,
// no randomness, no I/O: time and ids come from ctx and are recorded in the facts, so a replay of
// the journal (evolve only) rebuilds exactly the same state. A throw in here is a bug.
import type { ErrorCode } from '../errors/codes.js';
import { limits } from '../limits.js';
import { canonicalJson, hash53 } from '../util/canonical-json.js';
import type { CampaignFact } from './campaigns.js';
import { applyChallenges, type ChallengeContext, type ChallengeRuntime, runChallengeCommand } from './challenge-effects.js';
import * as challenges from './challenges.js';
import { applyBump, type CounterFact, type CounterState, type CountersContext, type CountersState, cloneCounterState, counterBumps, counterValue, evolveCounters, hasBase } from './counters.js';
import { emptyInventory, evolveInventory, type InventoryFact, type InventoryState, inventoryPairs } from './inventory.js';
import * as ledger from './ledger.js';
import { decideMatch, evolveMatch, type MatchCommand, type MatchFact, type MatchPlayerReply } from './match/actor.js';
import type { RateState } from './match/rate.js';
import * as rewards from './rewards.js';
import { applyRules, boundLimitKey, dueTierFacts, type Effect, type RuleCounters, type RuleFact, type RulesContext, tierFacts, tierMetrics } from './rule-effects.js';
import { SeenEvents } from './seen-events.js';
import { decideMembership, evolveMembership, type SegmentCommand, type SegmentFact } from './segments.js';
import { evaluateTier, evolveTiers, moveOffRemovedLevel, scheduleDowngradeCheck, type TierFact, type TierProgram, type TiersState } from './tiers.js';

/**
 * Sections most customers never touch start as these SHARED empty values, so a new customer
 * allocates nothing for them (a million customers fit in memory); evolve gives the customer its
 * own value on the first fact that changes one (copy on first write). They are frozen, deeply: a
 * write that forgot to copy throws (modules are strict) instead of reaching every customer.
 * The types stay mutable on purpose, so state fields keep theirs; never write through them.
 */
export const sharedEmpty = deepFreeze({
  attributes: {} as Record<string, unknown>,
  aliases: [] as AliasState[],
  mergedFrom: [] as string[],
  ledger: ledger.emptyLedger(),
  ruleLimits: {} as Record<string, number>,
  tiers: {} as TiersState,
  rewards: rewards.emptyRewards(),
  challenges: challenges.emptyChallengesState(),
  counters: {} as CountersState,
  inventory: emptyInventory(),
  matchRates: {} as RateState,
  segmentIds: [] as string[],
  recentAnswers: [] as RecentAnswer[],
  recentCalls: [] as RecentCall[],
});

function deepFreeze<T extends object>(value: T): T {
  for (const v of Object.values(value)) if (typeof v === 'object' && v !== null) deepFreeze(v);
  return Object.freeze(value);
}

/** True when the object has no own enumerable key (a record read from a fact or a snapshot). */
export function isEmptyRecord(o: object): boolean {
  for (const _ in o) return false;
  return true;
}

export interface Ctx {
  nowMs: number;
  environmentId: string;
  newId(prefix: string): string;
  newCustomerId(): string;
  /** A service event id (evt_...) for an event received now. */
  newEventId(): string;
}

export interface AliasState {
  alias: string;
  kind: string;
  createdAtMs: number;
}

/**
 * Who sent an event: the kind of credential and its id (a customer token: the key that minted
 * it). A match player's event names the reporting secret key (spec 4.9 rule 6).
 */
export interface EventSource {
  type: 'secret_key' | 'publishable_key' | 'personal_access_token' | 'session' | 'customer_token';
  id: string;
}

export interface CustomerState {
  id: string;
  environmentId: string;
  /** null once deleted (personal data erased). */
  externalId: string | null;
  attributes: Record<string, unknown>;
  version: number;
  createdAtMs: number;
  updatedAtMs: number;
  deletedAtMs: number | null;
  aliases: AliasState[];
  /**
   * When a DELETE of this customer began (its If-Match checked, customer.delete_begin): the
   * customers merged into it may be erased already, so a repeat finishes the delete whatever the
   * version is by then. Absent (not null: most customers never have one) when none began.
   */
  deletingSinceMs?: number;
  /** Set when this customer was merged into another: commands are redirected there. */
  mergedInto: string | null;
  mergedFrom: string[];
  /**
   * What this customer handed to its survivor at the merge (sent again by customer.handover when
   * the merge's alias addition has to be repeated); null: not merged, or nothing to hand over.
   */
  handedOver: MergeTransfer | null;
  /** Every client event id recorded, with its content fingerprint and service id. Permanent: it is the deduplication record. */
  events: SeenEvents;
  /** Balances, lots and pending credits per currency. */
  ledger: ledger.LedgerState;
  /** How many times each rule fired per limit scope ("rule|limit|scope" -> count). */
  ruleLimits: Record<string, number>;
  /** Standing in each tier program, by program id. */
  tiers: TiersState;
  /** Reward issuances (and the rule path's pending requests). */
  rewards: rewards.RewardsState;
  /** Challenge enrollments, latest progress record and completions per challenge. */
  challenges: challenges.ChallengesState;
  /** Historical counters, by counter id (counters.ts). */
  counters: CountersState;
  /** Items granted by rules (`item.grant`), by item key. */
  inventory: InventoryState;
  /** Match rate windows of this customer's ownership group, by match profile id (merged customers' books are joined in). */
  matchRates: RateState;
  /** Ids of the static segments the customer is a member of (membership facts). */
  segmentIds: string[];
  /**
   * The effects answered to the last sync-mode events (limits.recentEventResultsPerCustomer),
   * oldest first, so a repeat answers as the first did (decisions.md, Events).
   */
  recentAnswers: RecentAnswer[];
  /**
   * The answers of the last calls that carried a call id and changed something (call.answered),
   * oldest first, at most limits.recentCallsPerCustomer and none older than
   * limits.recentCallsRetentionMs: a repeat of one of them (a forward whose answer was lost, a
   * request re-run under its Idempotency-Key) is answered as the first was, never applied again.
   */
  recentCalls: RecentCall[];
}

export type Command =
  | { kind: 'customer.create'; externalId: string; attributes: Record<string, unknown> }
  | { kind: 'customer.get' }
  | { kind: 'customer.update'; attributes: Record<string, unknown>; expectedVersion: number | null }
  /**
   * The first step of a DELETE, before anything is erased: checks its If-Match (expectedVersion;
   * stale_write when the customer moved on) and marks the delete begun, in one step of the actor.
   * A delete already begun is not checked again: its repeat finishes it. Answers the customers
   * merged into this one (to erase first).
   */
  | { kind: 'customer.delete_begin'; expectedVersion?: number }
  /**
   * Erases the customer once the environment's register remembers the first `eventsErased` of its
   * recorded events (SeenEvents records, in order) as erased (EventIds.erase); while it has
   * recorded more, answers those (events_to_erase) and changes nothing: the caller erases them in
   * the register and asks again. So no event of an erased customer is ever missing there.
   */
  | { kind: 'customer.delete'; eventsErased: number }
  /**
   * Erases a customer merged into `survivorId` when the survivor is deleted (its personal data
   * goes with the survivor's). The only command a merged customer runs itself, not redirected.
   */
  | { kind: 'customer.erase_merged'; survivorId: string; eventsErased: number }
  /**
   * What a customer merged into `survivorId` hands over to it (mergeHandover), again: for a merge
   * whose alias addition did not finish (a crash after the claim). Run by the merged customer
   * itself, not redirected; no facts.
   */
  | { kind: 'customer.handover'; survivorId: string }
  /**
   * Reads which customers were merged into a customer merged into `survivorId` (the survivor's
   * export follows merges through them). Run by the merged customer itself, not redirected.
   */
  | { kind: 'customer.merged_from'; survivorId: string }
  | {
      kind: 'event.record';
      /** Used when the customer does not exist yet (created on first sight). */
      externalId: string;
      clientEventId: string;
      name: string;
      occurredAtMs: number;
      properties: Record<string, unknown>;
      fp: number;
      /** Trust of the sender (secret key: merchant_asserted; publishable key: client_reported). */
      trust: string;
      /** The credential that sent the event (kept with the event, shown on GET /events/{id}). */
      source: EventSource;
      /** Published rules and currencies of the environment, loaded before the step; null: none. */
      rules: RulesContext | null;
      /** The environment's counter definitions and time zone, loaded before the step; null/absent: none. */
      counters?: CountersContext | null;
      /** mode: sync: the answer's effects are kept, so a repeat answers as this one did. */
      sync?: boolean;
    }
  /** A backfill's historical base for one counter; refused (no facts) when a base was already applied. */
  /** `from`: the customer whose events the base counts (a customer merged into this one), else this one. */
  | { kind: 'counter.backfill'; counterId: string; base: CounterState; from?: string }
  /** Re-evaluates the tier programs whose downgrade check is due (the due-work scheduler). */
  | { kind: 'tier.run_due'; tierPrograms: TierProgram[] }
  /**
   * Moves a holder of a level the program no longer has (a tier program edit's move): to
   * `toLevel`, else to the removed level's reassign_to (program.retiredLevels), else re-placed.
   */
  | { kind: 'tier.reassign'; program: TierProgram; toLevel: string | null }
  /** Gives a holder a downgrade check date after the program's check was added or shortened. */
  | { kind: 'tier.schedule_check'; program: TierProgram }
  /** Re-places a holder at once after a basis change with reevaluate: true (downgrades need no check). */
  | { kind: 'tier.reevaluate'; program: TierProgram }
  /** With mergedFrom: what the merged customer handed over (MergeHandover), joined into this one. */
  | ({
      kind: 'alias.add';
      alias: string;
      aliasKind: string;
      mergedFrom: string | null;
      /** The environment's tier programs, re-placed after a ledger was taken over. */
      tierPrograms?: TierProgram[];
    } & MergeHandover)
  /** A ledger command, with the configs of the currencies it names (loaded before the step). */
  | { kind: 'ledger.run'; command: ledger.LedgerCommand; currencies: ledger.CurrencyConfig[]; tierPrograms: TierProgram[] }
  /** A reward issuance command; tier programs are re-placed after a redeem's spend. */
  | { kind: 'reward.run'; command: rewards.RewardCommand; tierPrograms: TierProgram[] }
  /**
   * An operator command on one of the customer's challenges. `challenge` is the runtime of the
   * command's challenge (completion actions); `context` gives currencies, tier programs, time zone.
   */
  | { kind: 'challenge.run'; command: challenges.Command; challenge: ChallengeRuntime | null; context: ChallengeContext }
  /** Match admission of one player and reviews (domain/match/actor.ts). */
  | MatchCommand
  /** Static segment membership (idempotent: no fact when nothing changes). */
  | SegmentCommand;

/** An event to record for an existing customer (the event.record command without its routing). */
export type EventToRecord = Omit<Extract<Command, { kind: 'event.record' }>, 'kind' | 'externalId'>;

export type Fact =
  | {
      kind: 'customer.created';
      id: string;
      environmentId: string;
      externalId: string;
      attributes: Record<string, unknown>;
      atMs: number;
    }
  /** Carries the resulting row (version, external id) so projections need no state. */
  | { kind: 'customer.updated'; attributes: Record<string, unknown>; version: number; externalId: string; createdAtMs: number; atMs: number }
  | { kind: 'customer.deleted'; version: number; atMs: number }
  /** A DELETE passed its If-Match check and began (customer.delete_begin); the version stays. */
  | { kind: 'customer.deletion_begun'; atMs: number }
  | {
      kind: 'event.recorded';
      id: string;
      clientEventId: string;
      name: string;
      occurredAtMs: number;
      receivedAtMs: number;
      properties: Record<string, unknown>;
      fp: number;
      /** Absent in events recorded before they were kept. */
      trust?: string;
      source?: EventSource;
    }
  | { kind: 'alias.added'; alias: string; aliasKind: string; mergedFrom: string | null; atMs: number }
  /** Merged into `into`; carries what the facts after it moved out for the survivor (mergeFacts). */
  | ({ kind: 'customer.merged'; into: string; atMs: number } & MergeTransfer)
  /** A merged customer's issuances, handed to its survivor with the merge (carried on customer.merged). */
  | { kind: 'rewards.handed_over'; to: string; atMs: number }
  /** A merged customer's items, handed to its survivor with the merge (carried on customer.merged). */
  | { kind: 'inventory.handed_over'; to: string; atMs: number }
  /** A merged customer's rule limit counts added to the survivor's. */
  | { kind: 'rule.limits_merged'; from: string; counts: Record<string, number>; atMs: number }
  /** A merged customer's recorded event ids joined into the survivor's (SeenEvents records). */
  | { kind: 'events.merged'; from: string; records: number[] }
  /** The effects a sync-mode event was answered with (kept for its repeats). */
  | { kind: 'event.answered'; clientEventId: string; effects: Effect[] }
  /**
   * The answer of a call with a call id, journaled in the record of the facts it applied: a
   * repeat of the call is answered with it instead of being applied again (recentCalls).
   */
  | { kind: 'call.answered'; call: string; atMs: number; reply: RememberedReply }
  /** A merged customer's remembered calls, joined into the survivor's (a repeat by key reaches the survivor). */
  | { kind: 'calls.merged'; calls: RecentCall[] }
  | ledger.LedgerFact
  | RuleFact
  | TierFact
  | rewards.RewardFact
  | challenges.ChallengeFact
  | CounterFact
  | InventoryFact
  | MatchFact
  | SegmentFact
  | CampaignFact;

/**
 * A call's remembered answer. A customer answer is remembered as its kind only: a repeat answers
 * the customer as it is now (its attributes are not kept twice).
 */
export type RememberedReply = Exclude<Reply, { kind: 'customer' }> | { kind: 'customer' };

/** A call applied with a call id: `call` is `<tag> <call id>` (actors/calls.ts), atMs when it was applied (real clock, not the environment's). */
export interface RecentCall {
  call: string;
  atMs: number;
  reply: RememberedReply;
}

/** A sync-mode event's answer: its client event id's hash (as in SeenEvents) and the effects. */
export interface RecentAnswer {
  key: number;
  effects: Effect[];
}

export interface EventReply {
  kind: 'event';
  id: string;
  clientEventId: string;
  duplicate: boolean;
  customerId: string;
  /**
   * What the rules did. A duplicate replays the first answer's effects when that answer was a
   * sync one still among the customer's recent answers (then `evaluated`), else none.
   */
  effects: Effect[];
  /** A duplicate whose first answer was a sync one (200 evaluated with these effects). */
  evaluated?: boolean;
}

export type Reply =
  | { kind: 'customer'; customer: CustomerState }
  | EventReply
  | { kind: 'alias'; alias: AliasState; customerId: string; mergedFrom: string | null }
  /** customer.delete_begin: the customers merged into this one, to erase before it. */
  | { kind: 'deletion_begun'; mergedFrom: string[] }
  /**
   * customer.delete: what it held when erased, for the caller to finish with: the customers merged
   * into it (one merged after the delete began is erased too), its aliases (to release) and the
   * issuances the delete ended whose reserved units go back (`released`).
   */
  | { kind: 'deleted'; mergedFrom: string[]; aliases: string[]; released?: string[] }
  /** customer.delete: the recorded events past its eventsErased (SeenEvents records) to erase first. */
  | { kind: 'events_to_erase'; records: number[] }
  /**
   * A merged customer erased: the customers merged into it before, to erase in turn, and its own
   * aliases (still bound to it), for the caller to release.
   */
  | { kind: 'erased'; mergedFrom: string[]; aliases: string[] }
  /** customer.merged_from: the customers merged into a merged customer before its own merge. */
  | { kind: 'merged_from'; mergedFrom: string[]; aliases: AliasState[]; attributes: Record<string, unknown> }
  | ({ kind: 'handover' } & MergeHandover)
  /** customerId: the customer whose ledger it is (a request may name it by external id). */
  | { kind: 'ledger'; reply: ledger.LedgerReply; customerId: string }
  /** customerId: the customer that holds the issuance now (a merged customer's survivor). */
  | { kind: 'reward'; reply: rewards.RewardReply; customerId: string }
  | { kind: 'challenge'; reply: challenges.Reply; effects: Effect[]; customerId: string }
  /** counter.backfill, tier.run_due, tier.reassign, tier.schedule_check: whether anything changed. */
  | { kind: 'applied'; changed: boolean }
  | MatchPlayerReply
  | { kind: 'segment_membership'; segmentId: string; member: boolean; changed: boolean };

/** What a merged customer's own facts moved out at the merge, for the survivor to take in. */
export interface MergeTransfer {
  /** Its ledger, emptied by transfer entries. */
  ledger?: ledger.BookHandover[];
  /** Its reward issuances (every status) and voided reservation ids. */
  rewards?: rewards.RewardsState;
  /** Its historical counters (joined into the survivor's; the merged customer keeps its own). */
  counters?: CountersState;
  /** Its challenge enrollments, progress and completions (joined; the merged customer keeps its own). */
  challenges?: challenges.ChallengesState;
  /** Its rule limit counts ("rule|limit|scope" -> count; added, so a per-customer limit holds for the person). */
  ruleLimits?: Record<string, number>;
  /** Its items, [item, quantity] pairs (moved: it holds none afterwards). */
  inventory?: Array<[string, number]>;
  /** Its static segments, left. */
  segmentIds?: string[];
}

/** What a merged customer hands its survivor: what it moved out, plus its match rate books and recorded event ids (joined). */
export interface MergeHandover extends MergeTransfer {
  /** Its match rate books (joined into the group's). */
  matchRates?: RateState;
  /** Its recorded event ids (SeenEvents records), deduplicated on the survivor from now on. */
  seenEvents?: number[];
  /** Its remembered calls: a repeat of one of them by key now reaches the survivor. */
  recentCalls?: RecentCall[];
}

export function mergeHandover(state: CustomerState): MergeHandover {
  return {
    // Rate books guard fairness across the ownership group; event ids keep a retry a duplicate.
    ...(state.matchRates !== undefined && Object.keys(state.matchRates).length > 0 ? { matchRates: state.matchRates } : {}),
    ...(state.events.size > 0 ? { seenEvents: state.events.records() } : {}),
    ...(state.recentCalls.length > 0 ? { recentCalls: state.recentCalls } : {}),
    ...(state.handedOver ?? {}),
  };
}

export type Decision =
  | { ok: true; facts: Fact[]; reply: Reply }
  | { ok: false; code: ErrorCode; message?: string; param?: string; currentVersion?: number };

const noFacts: Fact[] = [];

/** An erasing command's answer while the register lacks some recorded events: those, past `erased`. */
function eventsToErase(state: CustomerState, erased: number): Decision {
  return { ok: true, facts: noFacts, reply: { kind: 'events_to_erase', records: state.events.records(erased) } };
}

function fail(code: ErrorCode, message?: string, param?: string): Decision {
  return { ok: false, code, message, param };
}

/** stale_write with the version the caller should have named (the answer's details.current_version). */
function stale(version: number): Decision {
  return { ok: false, code: 'stale_write', message: `The customer is at version ${version}.`, currentVersion: version };
}

export function decide(state: CustomerState | null, cmd: Command, ctx: Ctx): Decision {
  if (state !== null && state.deletedAtMs !== null) {
    // A merged customer erased with its survivor still answers the survivor's delete and export:
    // a delete stopped after erasing it (429, a crash) is repeated, and the survivor lives on.
    if ((cmd.kind === 'customer.erase_merged' || cmd.kind === 'customer.merged_from') && state.mergedInto === cmd.survivorId) {
      return cmd.kind === 'customer.erase_merged'
        ? { ok: true, facts: noFacts, reply: { kind: 'erased', mergedFrom: [...state.mergedFrom], aliases: [] } }
        : { ok: true, facts: noFacts, reply: { kind: 'merged_from', mergedFrom: [...state.mergedFrom], aliases: [], attributes: {} } };
    }
    // An issuance it held can still be ended (a delete made before deletes ended them left it open).
    if (cmd.kind === 'reward.run') {
      const d = rewards.decideDeleted(state.rewards, cmd.command, ctx);
      if (d !== null) return d.ok ? { ok: true, facts: d.facts, reply: { kind: 'reward', reply: d.reply, customerId: state.id } } : d;
    }
    // A deleted customer keeps its id as a tombstone; its routing keys were released.
    return fail('resource_not_found', 'The customer was deleted.', 'id');
  }
  if (state === null) {
    // Only creation paths reach a customer that does not exist.
    if (cmd.kind === 'customer.create') {
      if (attributesBytes(cmd.attributes) > limits.attributesBytesMax) return attributesTooLarge();
      const created = createdFact(cmd.externalId, cmd.attributes, ctx);
      const next = evolve(null, created);
      return { ok: true, facts: [created], reply: { kind: 'customer', customer: next } };
    }
    if (cmd.kind === 'event.record') {
      const created = createdFact(cmd.externalId, {}, ctx);
      const recorded = recordedFact(cmd, ctx);
      const facts: Fact[] = [created, recorded];
      const effects = rulesFor(cmd, evolve(null, created), ctx, facts);
      if (cmd.sync === true) facts.push(answeredFact(cmd.clientEventId, effects));
      return {
        ok: true,
        facts,
        reply: { kind: 'event', id: recorded.id, clientEventId: cmd.clientEventId, duplicate: false, customerId: created.id, effects },
      };
    }
    if (cmd.kind === 'match.admit' && cmd.externalId !== null) {
      // A player named by an unknown external id: created on first sight, then admitted.
      const created = createdFact(cmd.externalId, {}, ctx);
      const d = decideMatch(evolve(null, created), cmd, ctx, matchHooks);
      return d.ok ? { ok: true, facts: [created, ...d.facts], reply: d.reply } : d;
    }
    return fail('resource_not_found', 'No customer with this id.', 'id');
  }

  switch (cmd.kind) {
    case 'customer.create':
      return fail('already_exists', 'A customer with this external_id already exists.', 'external_id');
    case 'customer.get':
      return { ok: true, facts: noFacts, reply: { kind: 'customer', customer: state } };
    case 'customer.update': {
      if (cmd.expectedVersion !== null && cmd.expectedVersion !== state.version) {
        return stale(state.version);
      }
      // A patch that changes nothing records nothing: the version stays.
      if (changesNothing(state.attributes, cmd.attributes)) return { ok: true, facts: noFacts, reply: { kind: 'customer', customer: state } };
      const attributes = mergeAttributes(state.attributes, cmd.attributes);
      if (Object.keys(attributes).length > limits.attributeKeysMax) {
        return fail('validation_failed', `A customer holds at most ${limits.attributeKeysMax} attributes.`, 'attributes');
      }
      // A patch may not take the attributes past the bound; one that shrinks them may (a customer
      // stored before the bound existed can still be trimmed a key at a time).
      const bytes = attributesBytes(attributes);
      if (bytes > limits.attributesBytesMax && bytes > attributesBytes(state.attributes)) return attributesTooLarge();
      const fact: Fact = {
        kind: 'customer.updated',
        attributes,
        version: state.version + 1,
        externalId: state.externalId ?? '',
        createdAtMs: state.createdAtMs,
        atMs: ctx.nowMs,
      };
      return { ok: true, facts: [fact], reply: { kind: 'customer', customer: state } };
    }
    case 'customer.delete_begin': {
      const reply: Reply = { kind: 'deletion_begun', mergedFrom: [...state.mergedFrom] };
      if (state.deletingSinceMs !== undefined) return { ok: true, facts: noFacts, reply };
      if (cmd.expectedVersion !== undefined && cmd.expectedVersion !== state.version) return stale(state.version);
      return { ok: true, facts: [{ kind: 'customer.deletion_begun', atMs: ctx.nowMs }], reply };
    }
    case 'customer.delete': {
      if (state.events.size > cmd.eventsErased) return eventsToErase(state, cmd.eventsErased);
      // Its open issuances end and its enrollments are removed in the same record: nothing of a
      // deleted customer holds reward stock or stays listed as enrolled.
      const closed = rewards.closeForDeletion(state.rewards, ctx.nowMs);
      return {
        ok: true,
        facts: [...closed.facts, ...challenges.unenrollAll(state.challenges, ctx.nowMs), { kind: 'customer.deleted', version: state.version + 1, atMs: ctx.nowMs }],
        reply: { kind: 'deleted', mergedFrom: [...state.mergedFrom], aliases: state.aliases.map((a) => a.alias), released: closed.released },
      };
    }
    case 'customer.erase_merged':
      if (state.mergedInto !== cmd.survivorId) return fail('invalid_state', 'The customer is not merged into this survivor.', 'id');
      // As customer.delete: its recorded events (those of a merge whose alias step never ran are
      // not in the survivor's) go to the register first. Erased once: a repeat of the survivor's
      // delete finds it deleted (above).
      if (state.events.size > cmd.eventsErased) return eventsToErase(state, cmd.eventsErased);
      return {
        ok: true,
        facts: [{ kind: 'customer.deleted', version: state.version + 1, atMs: ctx.nowMs }],
        reply: { kind: 'erased', mergedFrom: [...state.mergedFrom], aliases: state.aliases.map((a) => a.alias) },
      };
    case 'customer.handover':
      if (state.mergedInto !== cmd.survivorId) return fail('invalid_state', 'The customer is not merged into this survivor.', 'id');
      return { ok: true, facts: noFacts, reply: { kind: 'handover', ...mergeHandover(state) } };
    case 'customer.merged_from':
      if (state.mergedInto !== cmd.survivorId) return fail('invalid_state', 'The customer is not merged into this survivor.', 'id');
      return {
        ok: true,
        facts: noFacts,
        reply: { kind: 'merged_from', mergedFrom: [...state.mergedFrom], aliases: [...state.aliases], attributes: state.attributes },
      };
    case 'event.record': {
      const seen = state.events.get(cmd.clientEventId);
      if (seen !== undefined) {
        if (seen.fp !== cmd.fp) {
          return fail('event_id_conflict', `Event ${cmd.clientEventId} was already received with different content.`, 'id');
        }
        // Answered as the first was: its effects when it was a sync event still remembered.
        const answer = findAnswer(state.recentAnswers, cmd.clientEventId);
        return {
          ok: true,
          facts: noFacts,
          reply: {
            kind: 'event',
            id: seen.id,
            clientEventId: cmd.clientEventId,
            duplicate: true,
            customerId: state.id,
            effects: answer?.effects ?? [],
            evaluated: answer !== undefined,
          },
        };
      }
      const recorded = recordedFact(cmd, ctx);
      const facts: Fact[] = [recorded];
      const effects = rulesFor(cmd, state, ctx, facts);
      if (cmd.sync === true) facts.push(answeredFact(cmd.clientEventId, effects));
      return {
        ok: true,
        facts,
        reply: { kind: 'event', id: recorded.id, clientEventId: cmd.clientEventId, duplicate: false, customerId: state.id, effects },
      };
    }
    case 'alias.add': {
      const existing = state.aliases.find((a) => a.alias === cmd.alias);
      if (existing !== undefined) {
        return { ok: true, facts: noFacts, reply: { kind: 'alias', alias: existing, customerId: state.id, mergedFrom: null } };
      }
      const fact: Fact = {
        kind: 'alias.added',
        alias: cmd.alias,
        aliasKind: cmd.aliasKind,
        mergedFrom: cmd.mergedFrom,
        atMs: ctx.nowMs,
      };
      const rateFacts: Fact[] =
        cmd.matchRates !== undefined && Object.keys(cmd.matchRates).length > 0 ? [{ kind: 'match_rate.merged', from: cmd.matchRates }] : [];
      // A retry of an event first sent for the merged customer is a duplicate here too.
      const eventFacts: Fact[] =
        cmd.mergedFrom !== null && cmd.seenEvents !== undefined && cmd.seenEvents.length > 0
          ? [{ kind: 'events.merged', from: cmd.mergedFrom, records: cmd.seenEvents }]
          : [];
      return {
        ok: true,
        facts: [fact, ...rateFacts, ...eventFacts, ...takenOver(state, cmd, ctx)],
        reply: {
          kind: 'alias',
          alias: { alias: cmd.alias, kind: cmd.aliasKind, createdAtMs: ctx.nowMs },
          customerId: state.id,
          mergedFrom: cmd.mergedFrom,
        },
      };
    }
    case 'ledger.run': {
      const d = ledger.decide(state.ledger, cmd.command, cmd.currencies, ctx);
      if (!d.ok) return d;
      if (cmd.tierPrograms.length === 0 || d.facts.length === 0) {
        return { ok: true, facts: d.facts, reply: { kind: 'ledger', reply: d.reply, customerId: state.id } };
      }
      // Tiers follow the ledger as it will be after this step (due work may touch every currency).
      let book = ledger.cloneLedger(state.ledger);
      for (const f of d.facts) book = ledger.evolve(book, f);
      const touched = 'currency' in cmd.command ? [cmd.command.currency] : cmd.tierPrograms.map((p) => p.currency);
      const t = tierFacts(cmd.tierPrograms, new Set(touched), null, book, state.tiers, ctx);
      return { ok: true, facts: [...d.facts, ...t.facts], reply: { kind: 'ledger', reply: d.reply, customerId: state.id } };
    }
    case 'reward.run': {
      const d = rewards.decide(state.rewards, state.ledger, cmd.command, ctx);
      if (!d.ok) return d;
      const facts: Fact[] = d.facts;
      const spent = new Set<string>();
      for (const f of d.facts) if (f.kind === 'ledger.entry_recorded') spent.add(f.entry.currency);
      if (cmd.tierPrograms.length === 0 || spent.size === 0) return { ok: true, facts, reply: { kind: 'reward', reply: d.reply, customerId: state.id } };
      // A redeem's spend moves the balance: balance-based tiers follow it in the same record.
      let book = ledger.cloneLedger(state.ledger);
      for (const f of d.facts) if (ledger.isLedgerFact(f)) book = ledger.evolve(book, f);
      const t = tierFacts(cmd.tierPrograms, spent, null, book, state.tiers, ctx);
      return { ok: true, facts: [...facts, ...t.facts], reply: { kind: 'reward', reply: d.reply, customerId: state.id } };
    }
    case 'challenge.run': {
      const r = runChallengeCommand(cmd.context, cmd.challenge, cmd.command, state, ctx);
      if (!r.ok) return fail(r.code, r.message, r.param);
      return { ok: true, facts: r.facts, reply: { kind: 'challenge', reply: r.reply, effects: r.effects, customerId: state.id } };
    }
    case 'counter.backfill': {
      const from = cmd.from ?? state.id;
      if (hasBase(state.counters[cmd.counterId], state.id, from)) return { ok: true, facts: noFacts, reply: { kind: 'applied', changed: false } };
      const fact: Fact =
        from === state.id
          ? { kind: 'counter.backfilled', id: cmd.counterId, base: cmd.base, atMs: ctx.nowMs }
          : { kind: 'counter.backfilled', id: cmd.counterId, base: cmd.base, atMs: ctx.nowMs, from };
      return { ok: true, facts: [fact], reply: { kind: 'applied', changed: true } };
    }
    case 'tier.run_due': {
      const facts = dueTierFacts(cmd.tierPrograms, state.ledger, state.tiers, ctx);
      return { ok: true, facts, reply: { kind: 'applied', changed: facts.length > 0 } };
    }
    case 'tier.reevaluate': {
      const held = state.tiers[cmd.program.id];
      if (held === undefined) return { ok: true, facts: noFacts, reply: { kind: 'applied', changed: false } };
      const facts = evaluateTier(cmd.program, held, tierMetrics(cmd.program, state.ledger, ctx.nowMs), ctx, { immediate: true }).facts;
      return { ok: true, facts, reply: { kind: 'applied', changed: facts.length > 0 } };
    }
    case 'tier.reassign': {
      const held = state.tiers[cmd.program.id];
      if (held === undefined) return { ok: true, facts: noFacts, reply: { kind: 'applied', changed: false } };
      const facts = moveOffRemovedLevel(cmd.program, held, cmd.toLevel, tierMetrics(cmd.program, state.ledger, ctx.nowMs), ctx);
      return { ok: true, facts, reply: { kind: 'applied', changed: facts.length > 0 } };
    }
    case 'tier.schedule_check': {
      const held = state.tiers[cmd.program.id];
      const facts = held === undefined ? noFacts : scheduleDowngradeCheck(cmd.program, held, ctx);
      return { ok: true, facts, reply: { kind: 'applied', changed: facts.length > 0 } };
    }
    case 'match.admit':
    case 'match.review':
      return decideMatch(state, cmd, ctx, matchHooks);
    case 'segment.add_member':
    case 'segment.remove_member': {
      const facts = decideMembership(state.segmentIds, cmd, ctx);
      return {
        ok: true,
        facts,
        reply: { kind: 'segment_membership', segmentId: cmd.segmentId, member: cmd.kind === 'segment.add_member', changed: facts.length > 0 },
      };
    }
  }
}

/** What the match commands reuse of event recording (the same path as POST /v1/events). */
const matchHooks = {
  recordEvent(
    state: CustomerState,
    ev: EventToRecord,
    ctx: Ctx,
  ): { facts: Fact[]; eventId: string; effects: Effect[] } {
    const cmd: Command & { kind: 'event.record' } = { kind: 'event.record', externalId: state.externalId ?? '', ...ev };
    const recorded = recordedFact(cmd, ctx);
    const facts: Fact[] = [recorded];
    const effects = rulesFor(cmd, state, ctx, facts);
    return { facts, eventId: recorded.id, effects };
  },
};

function createdFact(externalId: string, attributes: Record<string, unknown>, ctx: Ctx): Fact & { kind: 'customer.created' } {
  return {
    kind: 'customer.created',
    id: ctx.newCustomerId(),
    environmentId: ctx.environmentId,
    externalId,
    attributes: mergeAttributes({}, attributes),
    atMs: ctx.nowMs,
  };
}

const noEffects: Effect[] = [];

/**
 * Counts the event on the environment's counters (a `counter.counted` fact after the event), then
 * runs the rules, which read the counts including this event, then the challenges (automatic ones
 * and those named by fired rules); appends their facts; returns the effects.
 */
function rulesFor(cmd: Command & { kind: 'event.record' }, subject: CustomerState, ctx: Ctx, facts: Fact[]): Effect[] {
  const recorded = facts[facts.length - 1] as Fact & { kind: 'event.recorded' };
  let counters: RuleCounters | null = null;
  const cc = cmd.counters ?? null;
  if (cc !== null && cc.defs.length > 0) {
    const event = { name: cmd.name, occurredAtMs: cmd.occurredAtMs, properties: cmd.properties };
    const bumps = counterBumps(cc, event, subject.counters, ctx.nowMs);
    if (bumps.length > 0) facts.push({ kind: 'counter.counted', eventId: recorded.id, bumps });
    // Counter values are computed only when a rule or challenge on this event reads counters.
    if (cmd.rules !== null && readsCounters(cmd.rules, cmd.name)) {
      const values: Record<string, number> = {};
      for (const def of cc.defs) {
        let s = subject.counters[def.id];
        for (const b of bumps) if (b.id === def.id) s = applyBump(s === undefined ? undefined : cloneCounterState(s), b);
        values[def.name] = counterValue(s, ctx.nowMs);
      }
      counters = { values, ready: (name) => cc.defs.some((d) => d.name === name && d.status === 'ready') };
    }
  }
  const rules = cmd.rules;
  if (rules === null) return noEffects;
  const active = rules.challenges ?? [];
  if (rules.plans.length === 0 && active.length === 0) return noEffects;
  const event = { name: cmd.name, properties: cmd.properties, trust: cmd.trust };
  const r = rules.plans.length === 0 ? null : applyRules(rules, event, subject, ctx, counters);
  if (r !== null) for (const f of r.facts) facts.push(f);
  const requested = r?.challengeProgress ?? [];
  if (active.length === 0 && requested.length === 0) return r?.effects ?? noEffects;
  const c = applyChallenges(
    {
      challenges: active,
      timeZone: rules.timeZone ?? 'UTC',
      currencies: rules.currencies,
      tierPrograms: rules.tierPrograms,
      campaigns: rules.campaigns,
      segments: rules.segments,
      counters,
      budget: r === null ? rules.budget : r.budgetLeft,
    },
    requested,
    { id: recorded.id, ...event },
    subject,
    r?.facts ?? [],
    ctx,
  );
  for (const f of c.facts) facts.push(f);
  return r === null ? c.effects : [...r.effects, ...c.effects];
}

function readsCounters(rules: RulesContext, eventName: string): boolean {
  for (const p of rules.plans) if (p.event === eventName && p.counters.length > 0) return true;
  for (const c of rules.challenges ?? []) if (c.plan.event === eventName && c.plan.counters.length > 0) return true;
  return false;
}

function answeredFact(clientEventId: string, effects: Effect[]): Fact {
  return { kind: 'event.answered', clientEventId, effects };
}

/**
 * The remembered answer of `call` (`<tag> <call id>`), or undefined: never applied, forgotten
 * (older than limits.recentCallsRetentionMs at nowMs, the real clock's time, or pushed out by later calls).
 */
export function findCall(calls: readonly RecentCall[], call: string, nowMs: number): RecentCall | undefined {
  for (let i = calls.length - 1; i >= 0; i--) {
    const c = calls[i]!;
    if (c.call === call) return c.atMs >= nowMs - limits.recentCallsRetentionMs ? c : undefined;
  }
  return undefined;
}

/** The remembered calls with `added` joined: none older than the retention at `atMs`, the newest limits.recentCallsPerCustomer. */
function rememberCalls(calls: RecentCall[], added: readonly RecentCall[], atMs: number): RecentCall[] {
  const since = atMs - limits.recentCallsRetentionMs;
  const out: RecentCall[] = [];
  for (const c of calls) if (c.atMs >= since) out.push(c);
  for (const c of added) if (c.atMs >= since) out.push(c);
  return out.length > limits.recentCallsPerCustomer ? out.slice(out.length - limits.recentCallsPerCustomer) : out;
}

function findAnswer(answers: readonly RecentAnswer[], clientEventId: string): RecentAnswer | undefined {
  if (answers.length === 0) return undefined;
  const key = hash53(clientEventId);
  for (let i = answers.length - 1; i >= 0; i--) if (answers[i]!.key === key) return answers[i];
  return undefined;
}

function recordedFact(cmd: Command & { kind: 'event.record' }, ctx: Ctx): Fact & { kind: 'event.recorded' } {
  return {
    kind: 'event.recorded',
    id: ctx.newEventId(),
    clientEventId: cmd.clientEventId,
    name: cmd.name,
    occurredAtMs: cmd.occurredAtMs,
    receivedAtMs: ctx.nowMs,
    properties: cmd.properties,
    fp: cmd.fp,
    trust: cmd.trust,
    source: cmd.source,
  };
}

/** True when applying `patch` leaves `base` as it is (values compared as canonical JSON: key order aside). */
function changesNothing(base: Record<string, unknown>, patch: Record<string, unknown>): boolean {
  for (const k of Object.keys(patch)) {
    const v = patch[k];
    if (v === null) {
      if (Object.hasOwn(base, k)) return false;
    } else if (!Object.hasOwn(base, k) || (base[k] !== v && canonicalJson(base[k]) !== canonicalJson(v))) return false;
  }
  return true;
}

/** The attributes serialized as JSON, in UTF-8 bytes (limits.attributesBytesMax). */
export function attributesBytes(attributes: Record<string, unknown>): number {
  const text = JSON.stringify(attributes);
  let bytes = text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    // One UTF-16 unit is 1 byte below U+0080, 2 below U+0800, else 3; a surrogate pair is 4.
    if (c >= 0x80) bytes += c < 0x800 || (c >= 0xd800 && c <= 0xdfff) ? 1 : 2;
  }
  return bytes;
}

function attributesTooLarge(): Decision {
  return fail('validation_failed', `A customer's attributes are at most ${limits.attributesBytesMax} bytes as JSON.`, 'attributes');
}

/** PATCH semantics: a key set to null is removed; other keys replace. */

function mergeAttributes(base: Record<string, unknown>, patch: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base };
  for (const k of Object.keys(patch)) {
    const v = patch[k];
    if (v === null) delete out[k];
    else out[k] = v;
  }
  return out;
}

/**
 * The merged customer's side of a merge: merged into the survivor, its ledger moved out by transfer
 * entries (ledger.handOverBooks), its static segments left, its issuances and items handed over;
 * what moved rides on the merged fact, so the survivor can be given it again (customer.handover).
 * Its counters, challenges and rule limit counts are copied (nothing reads a merged customer's own).
 */
export function mergeFacts(state: CustomerState, survivorId: string, ctx: Ctx): Fact[] {
  const out = ledger.handOverBooks(state.ledger, survivorId, ctx);
  const segmentIds = [...state.segmentIds];
  const held = state.rewards.issuances.length > 0 || state.rewards.voided.length > 0;
  const items = inventoryPairs(state.inventory);
  const merged: Fact = {
    kind: 'customer.merged',
    into: survivorId,
    atMs: ctx.nowMs,
    ...(out.handover.length > 0 ? { ledger: out.handover } : {}),
    ...(segmentIds.length > 0 ? { segmentIds } : {}),
    ...(held ? { rewards: structuredClone(state.rewards) } : {}),
    ...(!isEmptyRecord(state.counters) ? { counters: structuredClone(state.counters) } : {}),
    ...(state.challenges !== sharedEmpty.challenges ? { challenges: structuredClone(state.challenges) } : {}),
    ...(!isEmptyRecord(state.ruleLimits) ? { ruleLimits: { ...state.ruleLimits } } : {}),
    ...(items.length > 0 ? { inventory: items } : {}),
  };
  const left: Fact[] = segmentIds.map((segmentId) => ({ kind: 'segment.member_removed', segmentId, atMs: ctx.nowMs }));
  const handed: Fact[] = held ? [{ kind: 'rewards.handed_over', to: survivorId, atMs: ctx.nowMs }] : [];
  if (items.length > 0) handed.push({ kind: 'inventory.handed_over', to: survivorId, atMs: ctx.nowMs });
  return [merged, ...out.facts, ...left, ...handed];
}

/**
 * The survivor's side of a merge (alias.add): the merged customer's ledger, static segments,
 * issuances, counters, challenges, rule limit counts and items taken over, once (a customer
 * already in mergedFrom is not).
 */
function takenOver(state: CustomerState, cmd: Extract<Command, { kind: 'alias.add' }>, ctx: Ctx): Fact[] {
  const from = cmd.mergedFrom;
  if (from === null || state.mergedFrom.includes(from)) return noFacts;
  const facts: Fact[] = [];
  if (cmd.ledger !== undefined && cmd.ledger.length > 0) facts.push(...absorbedLedger(state, cmd.ledger, from, cmd.tierPrograms ?? [], ctx));
  for (const segmentId of cmd.segmentIds ?? []) {
    if (!state.segmentIds.includes(segmentId)) facts.push({ kind: 'segment.member_added', segmentId, atMs: ctx.nowMs });
  }
  if (cmd.rewards !== undefined) facts.push(...rewards.takeOver(state.rewards, cmd.rewards, from, ctx));
  if (cmd.counters !== undefined) facts.push({ kind: 'counter.merged', from, counters: cmd.counters, atMs: ctx.nowMs });
  const joined = cmd.challenges === undefined ? null : challenges.joinChallenges(state.challenges, cmd.challenges, from, ctx);
  if (joined !== null) facts.push(joined);
  if (cmd.ruleLimits !== undefined && !isEmptyRecord(cmd.ruleLimits)) facts.push({ kind: 'rule.limits_merged', from, counts: cmd.ruleLimits, atMs: ctx.nowMs });
  // Items add up (a merge may take the survivor past inventoryLimits.itemsMax distinct items).
  for (const [item, quantity] of cmd.inventory ?? []) facts.push({ kind: 'item.granted', item, quantity, sourceId: from, atMs: ctx.nowMs });
  if (cmd.recentCalls !== undefined && cmd.recentCalls.length > 0) facts.push({ kind: 'calls.merged', calls: cmd.recentCalls });
  return facts;
}

/** The survivor's transfer entries for a merged customer's ledger, then its tier programs re-placed on the joined books. */
function absorbedLedger(state: CustomerState, handover: ledger.BookHandover[], fromId: string, programs: TierProgram[], ctx: Ctx): Fact[] {
  const facts: Fact[] = ledger.absorbBooks(state.ledger, handover, fromId, ctx);
  if (programs.length === 0) return facts;
  let book = ledger.cloneLedger(state.ledger);
  for (const f of facts) book = ledger.evolve(book, f as ledger.LedgerFact);
  const t = tierFacts(programs, new Set(handover.map((h) => h.currency)), null, book, state.tiers, ctx);
  return [...facts, ...t.facts];
}

/**
 * Applies one fact. Mutates and returns the state (the engine owns the only reference; a failed
 * journal append discards the whole partition's memory and replays, so mutation is safe).
 */
export function evolve(state: CustomerState | null, fact: Fact): CustomerState {
  if (fact.kind === 'customer.created') {
    return {
      id: fact.id,
      environmentId: fact.environmentId,
      externalId: fact.externalId,
      attributes: isEmptyRecord(fact.attributes) ? sharedEmpty.attributes : fact.attributes,
      version: 1,
      createdAtMs: fact.atMs,
      updatedAtMs: fact.atMs,
      deletedAtMs: null,
      aliases: sharedEmpty.aliases,
      mergedInto: null,
      mergedFrom: sharedEmpty.mergedFrom,
      handedOver: null,
      events: new SeenEvents(),
      ledger: sharedEmpty.ledger,
      ruleLimits: sharedEmpty.ruleLimits,
      tiers: sharedEmpty.tiers,
      rewards: sharedEmpty.rewards,
      challenges: sharedEmpty.challenges,
      counters: sharedEmpty.counters,
      inventory: sharedEmpty.inventory,
      matchRates: sharedEmpty.matchRates,
      segmentIds: sharedEmpty.segmentIds,
      recentAnswers: sharedEmpty.recentAnswers,
      recentCalls: sharedEmpty.recentCalls,
    };
  }
  if (state === null) throw new Error(`evolve: ${fact.kind} before customer.created`);
  switch (fact.kind) {
    case 'customer.updated':
      state.attributes = isEmptyRecord(fact.attributes) ? sharedEmpty.attributes : fact.attributes;
      state.version = fact.version;
      state.updatedAtMs = fact.atMs;
      return state;
    case 'customer.deletion_begun':
      state.deletingSinceMs = fact.atMs;
      return state;
    case 'customer.deleted':
      state.externalId = null;
      state.attributes = sharedEmpty.attributes;
      state.aliases = sharedEmpty.aliases;
      state.deletedAtMs = fact.atMs;
      state.updatedAtMs = fact.atMs;
      state.version = fact.version;
      // A tombstone remembers no earlier answer (only its delete's, journaled after this fact).
      state.recentCalls = sharedEmpty.recentCalls;
      return state;
    case 'event.recorded':
      state.events.add(fact.clientEventId, fact.fp, fact.id);
      return state;
    case 'alias.added':
      if (state.aliases === sharedEmpty.aliases) state.aliases = [];
      state.aliases.push({ alias: fact.alias, kind: fact.aliasKind, createdAtMs: fact.atMs });
      if (fact.mergedFrom !== null && !state.mergedFrom.includes(fact.mergedFrom)) {
        if (state.mergedFrom === sharedEmpty.mergedFrom) state.mergedFrom = [];
        state.mergedFrom.push(fact.mergedFrom);
      }
      return state;
    case 'customer.merged':
      state.mergedInto = fact.into;
      state.updatedAtMs = fact.atMs;
      {
        const { kind: _k, into: _i, atMs: _a, ...transfer } = fact;
        if (!isEmptyRecord(transfer)) state.handedOver = transfer;
      }
      return state;
    case 'inventory.handed_over':
      state.inventory = sharedEmpty.inventory;
      return state;
    case 'rewards.handed_over':
      state.rewards = sharedEmpty.rewards;
      return state;
    case 'ledger.entry_recorded':
    case 'ledger.pending_confirmed':
    case 'ledger.pending_cancelled':
    case 'ledger.earnings_merged':
      state.ledger = ledger.evolve(state.ledger === sharedEmpty.ledger ? ledger.emptyLedger() : state.ledger, fact);
      return state;
    case 'rule.fired':
      if (fact.limitKeys.length === 0) return state;
      if (state.ruleLimits === sharedEmpty.ruleLimits) state.ruleLimits = {};
      // boundLimitKey: facts journaled before long scope values were hashed count under today's key.
      for (const k of fact.limitKeys) {
        const b = boundLimitKey(k);
        state.ruleLimits[b] = (state.ruleLimits[b] ?? 0) + 1;
      }
      return state;
    case 'rule.limits_merged':
      if (state.ruleLimits === sharedEmpty.ruleLimits) state.ruleLimits = {};
      for (const [k, n] of Object.entries(fact.counts)) {
        const b = boundLimitKey(k);
        state.ruleLimits[b] = (state.ruleLimits[b] ?? 0) + n;
      }
      return state;
    case 'tier.changed':
    case 'tier.assigned':
    case 'tier.downgrade_check_scheduled':
      state.tiers = evolveTiers(state.tiers === sharedEmpty.tiers ? {} : state.tiers, fact);
      return state;
    case 'reward.issue_requested':
    case 'reward.issued':
    case 'reward.issue_refused':
    case 'reward.redeemed':
    case 'reward.cancelled':
    case 'reward.expired':
    case 'reward.reservation_voided':
    case 'reward.taken_over':
      state.rewards = rewards.evolve(state.rewards === sharedEmpty.rewards ? rewards.emptyRewards() : state.rewards, fact);
      return state;
    case 'challenge.enrolled':
    case 'challenge.unenrolled':
    case 'challenge.progressed':
    case 'challenge.completed':
    case 'challenge.revoked':
    case 'challenge.merged':
      state.challenges = challenges.evolve(state.challenges === sharedEmpty.challenges ? challenges.emptyChallengesState() : state.challenges, fact);
      return state;
    case 'counter.counted':
    case 'counter.backfilled':
    case 'counter.merged':
      state.counters = evolveCounters(state.counters === sharedEmpty.counters ? {} : state.counters, fact);
      return state;
    case 'item.granted':
      state.inventory = evolveInventory(state.inventory === sharedEmpty.inventory ? emptyInventory() : state.inventory, fact);
      return state;
    case 'events.merged':
      state.events.addRecords(fact.records);
      return state;
    case 'event.answered': {
      const answers = state.recentAnswers === sharedEmpty.recentAnswers ? [] : state.recentAnswers;
      answers.push({ key: hash53(fact.clientEventId), effects: fact.effects });
      if (answers.length > limits.recentEventResultsPerCustomer) answers.shift();
      state.recentAnswers = answers;
      return state;
    }
    case 'call.answered':
      state.recentCalls = rememberCalls(state.recentCalls, [{ call: fact.call, atMs: fact.atMs, reply: fact.reply }], fact.atMs);
      return state;
    case 'calls.merged': {
      let newest = 0;
      for (const c of fact.calls) if (c.atMs > newest) newest = c.atMs;
      state.recentCalls = rememberCalls(state.recentCalls, fact.calls, newest);
      return state;
    }
    case 'match_rate.counted':
    case 'match_rate.released':
    case 'match_rate.merged':
      state.matchRates = evolveMatch(state.matchRates === undefined || state.matchRates === sharedEmpty.matchRates ? {} : state.matchRates, fact);
      return state;
    case 'segment.member_added':
    case 'segment.member_removed':
      state.segmentIds = evolveMembership(state.segmentIds === sharedEmpty.segmentIds ? [] : state.segmentIds, fact);
      return state;
    case 'campaign.spent':
      // Budget accounting lives in the projection (campaign_spend); nothing in customer state.
      return state;
  }
}

/** Routing keys this customer owns in its own partition (its external id). Aliases live in their own partitions. */
export function ownKeys(state: CustomerState): string[] {
  return state.externalId === null ? [] : [state.externalId];
}
