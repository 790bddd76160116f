// The match commands of the customer actor (spec 2.12, 3, 4.9 rules 5 and 6). The actor of the
// player's ownership group (the merged survivor: commands to a merged customer are redirected)
// runs the group stage of admission one report at a time: duplicate after a merge, then the rate
// windows, then, for an admitted player, records the rule-6 event through the same recording path
// as POST /v1/events (rules run on it) in the SAME step, so the rate count and the event are
// journaled together or not at all. A retry is a replay: the rate book knows (match, customer) and
// the event id `<match_id>:<customer id>` is deduplicated forever. A review admit checks the
// duplicate again (customers may have merged since the report): never two events for one match
// in one group. Pure; never throws.
import type { CountersContext } from '../counters.js';
import type { ErrorCode } from '../../errors/codes.js';
import type { CustomerState, Ctx, EventSource, EventToRecord, Fact } from '../customer.js';
import type { Effect, RulesContext } from '../rule-effects.js';
import type { RateLimit } from './profile.js';
import { decideRate, duplicatePlayerAfterMerge, evolveRate, mergeRateStates, type PendingVerdict, type RateFact, type RateState } from './rate.js';
import type { Reason } from './reasons.js';
import { clientEventId, type PlayerStatus } from './verdict.js';

/** The rule-6 event of a player, without its id (the actor knows the customer id). */
export interface MatchEventSpec {
  name: string;
  matchId: string;
  profileKey: string;
  occurredAtMs: number;
  metrics: Record<string, number>;
  won: boolean | null;
  /**
   * The event's content fingerprint as if sent through POST /v1/events (domain/event-fingerprint.ts,
   * with the player's customer identifier as a client would send it): the coordinator binds the id
   * to it in the environment's register before the step, so an exact resend is a duplicate.
   */
  fp: number;
  trust: 'merchant_asserted';
  /** The reporting secret key (spec 4.9 rule 6). */
  source: EventSource;
  /** Published rules of the environment (loaded before the step); null: none. */
  rules: RulesContext | null;
  /** The environment's counter definitions (loaded before the step); null/absent: none. */
  counters?: CountersContext | null;
}

export type MatchCommand =
  | {
      kind: 'match.admit';
      /**
       * The player's customer id as the report resolved it. After a merge the command reaches the
       * survivor's actor while this stays the merged customer's id: the rate book tells another
       * player of the same group in the same match (duplicate_player_after_merge) from a retry.
       */
      customerId: string;
      /** Set when the report named the player by external id: an unknown customer is created. */
      externalId: string | null;
      profileId: string;
      rateLimits: RateLimit[];
      endedAtMs: number;
      /** The verdict stages 1, 2 and 4 reserved (outliers), applied if the group stage lets the player through. */
      pending: PendingVerdict;
      outlierReasons: Reason[];
      event: MatchEventSpec;
    }
  | {
      /**
       * A review decision of a held player: admit records the event (or, when another player of the
       * match in the group was admitted, rejects with duplicate_player_after_merge), reject releases
       * the rate count; a rejection either way releases it.
       */
      kind: 'match.review';
      decision: 'admit' | 'reject';
      /** The player's customer id as stored on the match result player. */
      customerId: string;
      profileId: string;
      event: MatchEventSpec;
    };

export type MatchFact = RateFact | { kind: 'match_rate.merged'; from: RateState };

export interface MatchPlayerReply {
  kind: 'match_player';
  customerId: string;
  status: PlayerStatus;
  reasons: Reason[];
  eventId: string | null;
  clientEventId: string;
  effects: Effect[];
}

export interface MatchHooks {
  recordEvent(
    state: CustomerState,
    ev: EventToRecord,
    ctx: Ctx,
  ): { facts: Fact[]; eventId: string; effects: Effect[] };
}

type Decision = { ok: true; facts: Fact[]; reply: MatchPlayerReply } | { ok: false; code: ErrorCode; message?: string; param?: string };

/** Rule 6: metrics plus match_id, match_profile and, when given, won. */
export function matchEventProperties(e: Pick<MatchEventSpec, 'metrics' | 'matchId' | 'profileKey' | 'won'>): Record<string, unknown> {
  // Copied with Object.assign, not a spread: on Node 20 every key added to an object made by a
  // spread costs ~1 µs (docs/architecture.md, Hot-path JavaScript). Metric keys start with a letter.
  const properties: Record<string, unknown> = Object.assign({}, e.metrics);
  properties.match_id = e.matchId;
  properties.match_profile = e.profileKey;
  if (e.won !== null) properties.won = e.won;
  return properties;
}

/** Records the event unless this id is already recorded; a recorded id with other content is refused. */
function recordOnce(
  state: CustomerState,
  playerId: string,
  e: MatchEventSpec,
  ctx: Ctx,
  hooks: MatchHooks,
): { refused: string } | { facts: Fact[]; eventId: string; effects: Effect[] } {
  const id = clientEventId(e.matchId, playerId);
  const properties = matchEventProperties(e);
  const seen = state.events.get(id);
  if (seen !== undefined) {
    if (seen.fp !== e.fp) return { refused: `Event ${id} was already recorded with different content.` };
    return { facts: [], eventId: seen.id, effects: [] };
  }
  return hooks.recordEvent(state, { clientEventId: id, name: e.name, occurredAtMs: e.occurredAtMs, properties, fp: e.fp, trust: e.trust, source: e.source, rules: e.rules, counters: e.counters ?? null }, ctx);
}

/**
 * Whether another customer of this group already has an admitted player in the match: its event
 * `<match_id>:<customer id>` is in the group's records (a merge hands the merged customer's event ids
 * to the survivor). The group's customers that can have played: this actor's, the ones merged into
 * it, and those the group's rate book names for the match.
 */
function groupAdmittedOther(state: CustomerState, rates: RateState, profileId: string, matchId: string, playerId: string): boolean {
  const admitted = (customerId: string) => customerId !== playerId && state.events.get(clientEventId(matchId, customerId)) !== undefined;
  if (admitted(state.id) || state.mergedFrom.some(admitted)) return true;
  return rates[profileId]?.entries.some((e) => e.matchId === matchId && admitted(e.customerId)) ?? false;
}

export function decideMatch(state: CustomerState, cmd: MatchCommand, ctx: Ctx, hooks: MatchHooks): Decision {
  const rates = state.matchRates ?? {};
  const matchId = cmd.event.matchId;
  // '' only for a customer created by this very command (the report named an unknown external id).
  const playerId = cmd.customerId === '' ? state.id : cmd.customerId;
  const reply = (status: PlayerStatus, reasons: Reason[], eventId: string | null, effects: Effect[] = []): MatchPlayerReply => ({
    kind: 'match_player',
    customerId: playerId,
    status,
    reasons,
    eventId,
    clientEventId: clientEventId(matchId, playerId),
    effects,
  });

  if (cmd.kind === 'match.review') {
    const release = () => decideRate(rates, { kind: 'match_rate.release', profileId: cmd.profileId, matchId, customerId: playerId }, ctx).facts;
    if (cmd.decision === 'reject') return { ok: true, facts: release(), reply: reply('rejected', [], null) };
    // The group stage again, for its duplicate check only (a held player was counted when reported).
    if (groupAdmittedOther(state, rates, cmd.profileId, matchId, playerId)) {
      return { ok: true, facts: release(), reply: reply('rejected', [duplicatePlayerAfterMerge()], null) };
    }
    const rec = recordOnce(state, playerId, cmd.event, ctx, hooks);
    if ('refused' in rec) {
      return { ok: true, facts: release(), reply: reply('rejected', [{ code: 'event_refused', message: rec.refused }], null) };
    }
    return { ok: true, facts: rec.facts, reply: reply('admitted', [], rec.eventId, rec.effects) };
  }

  const counted = decideRate(
    rates,
    {
      kind: 'match_rate.count',
      profileId: cmd.profileId,
      rateLimits: cmd.rateLimits,
      matchId,
      customerId: playerId,
      endedAtMs: cmd.endedAtMs,
      pending: cmd.pending,
    },
    ctx,
  );
  const outcome = counted.reply;
  if (outcome.result === 'rejected') return { ok: true, facts: [], reply: reply('rejected', outcome.reasons, null) };
  if (cmd.pending !== 'admitted') return { ok: true, facts: counted.facts, reply: reply(cmd.pending, cmd.outlierReasons, null) };
  if (outcome.result === 'replayed' && playerId !== state.id && state.events.get(clientEventId(matchId, playerId)) === undefined) {
    // Counted by the merged customer's actor before the merge, in the same step as its event: the
    // event exists in that customer's history (its id is not carried over); never record it twice.
    return { ok: true, facts: [], reply: reply('admitted', [], null) };
  }
  const rec = recordOnce(state, playerId, cmd.event, ctx, hooks);
  if ('refused' in rec) {
    // Stage 5: a permanent refusal; the count is not recorded (or released if a retry finds it).
    const released =
      outcome.result === 'replayed'
        ? decideRate(rates, { kind: 'match_rate.release', profileId: cmd.profileId, matchId, customerId: playerId }, ctx).facts
        : [];
    return { ok: true, facts: released, reply: reply('rejected', [{ code: 'event_refused', message: rec.refused }], null) };
  }
  return { ok: true, facts: [...counted.facts, ...rec.facts], reply: reply('admitted', [], rec.eventId, rec.effects) };
}

export function evolveMatch(state: RateState, fact: MatchFact): RateState {
  if (fact.kind === 'match_rate.merged') return mergeRateStates(state, fact.from);
  return evolveRate(state, fact);
}
