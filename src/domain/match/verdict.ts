// A match player's verdict after the report (spec 3): the review of a held player (admit or
// reject, replay of the same decision, invalid_state otherwise), the derived match status, and
// the event an admitted player becomes (spec 4.9 rule 6). Invariants: only a held player is ever
// reviewed; a review is given once (its repeat is a replay, never a second transition); rejected
// is final. Pure: time and actor come from the caller; never throws.
import { z } from 'zod';
import type { ErrorCode } from '../../errors/codes.js';
import type { Reason } from './reasons.js';

export type PlayerStatus = 'admitted' | 'held' | 'rejected';
export type MatchStatus = 'held' | 'admitted' | 'rejected' | 'partially_admitted';
export type ReviewDecision = 'admit' | 'reject';

export interface Review {
  decision: ReviewDecision;
  reason: string | null;
  /** Who decided (a user or key id), recorded as given. */
  actor: string;
  reviewedAtMs: number;
}

/** The part of a match result player the review reads and changes. */
export interface PlayerRecord {
  id: string;
  customerId: string;
  status: PlayerStatus;
  reasons: Reason[];
  review: Review | null;
}

export const reviewReasonCharsMax = 500;

/** The body of POST /match_result_players/{id}/reviews. */
export const reviewBodySchema = z.strictObject({
  decision: z.enum(['admit', 'reject'], { error: "decision is 'admit' or 'reject'." }),
  reason: z.string().max(reviewReasonCharsMax, `reason has at most ${reviewReasonCharsMax} characters.`).nullable().optional(),
});

export interface ReviewCommand {
  kind: 'match_player.review';
  decision: ReviewDecision;
  reason: string | null;
  actor: string;
  /** The secret key that reported the match was revoked since: admit is refused, the player stays held. */
  reportingKeyRevoked: boolean;
  /**
   * Event admission refused the player's event permanently. The caller learns it by deciding once
   * without it (nothing applied), recording the event, and deciding again with the answer.
   */
  eventRefused?: { message: string } | null;
}

export interface ReviewedFact {
  kind: 'match_player.reviewed';
  playerId: string;
  review: Review;
  status: PlayerStatus;
  reasons: Reason[];
}

export type ReviewDecisionResult =
  | {
      ok: true;
      facts: ReviewedFact[];
      reply: { player: PlayerRecord; replayed: boolean };
      /** Work for the caller after the facts are journaled (none on a replay). */
      effects: { recordEvent: boolean; releaseRateCount: boolean };
    }
  | { ok: false; code: ErrorCode; param?: string; message: string };

const noEffects = { recordEvent: false, releaseRateCount: false };

/**
 * Review codes: invalid_state (never held, or the opposite of the decision already given),
 * forbidden (admit while the reporting key is revoked: not a state conflict a retry could clear,
 * but an admission the service may not make; the player stays held and can still be rejected).
 */
export function decideReview(player: PlayerRecord, cmd: ReviewCommand, ctx: { nowMs: number }): ReviewDecisionResult {
  if (player.review !== null) {
    if (player.review.decision === cmd.decision) return { ok: true, facts: [], reply: { player, replayed: true }, effects: noEffects };
    return {
      ok: false,
      code: 'invalid_state',
      param: 'decision',
      message: `The player was already reviewed with '${player.review.decision}'.`,
    };
  }
  if (player.status !== 'held') {
    return { ok: false, code: 'invalid_state', message: `Only a held player can be reviewed; this one is ${player.status}.` };
  }
  if (cmd.decision === 'admit' && cmd.reportingKeyRevoked) {
    return {
      ok: false,
      code: 'forbidden',
      param: 'decision',
      message: 'The key that reported this match was revoked; the player stays held (it can still be rejected).',
    };
  }
  const review: Review = { decision: cmd.decision, reason: cmd.reason, actor: cmd.actor, reviewedAtMs: ctx.nowMs };
  let status: PlayerStatus;
  let reasons = player.reasons;
  let effects = noEffects;
  if (cmd.decision === 'reject') {
    status = 'rejected';
    effects = { recordEvent: false, releaseRateCount: true };
  } else if (cmd.eventRefused) {
    status = 'rejected';
    reasons = [...player.reasons, { code: 'event_refused', message: cmd.eventRefused.message }];
    effects = { recordEvent: false, releaseRateCount: true };
  } else {
    status = 'admitted';
    effects = { recordEvent: true, releaseRateCount: false };
  }
  const fact: ReviewedFact = { kind: 'match_player.reviewed', playerId: player.id, review, status, reasons };
  return { ok: true, facts: [fact], reply: { player: evolveReview(player, fact), replayed: false }, effects };
}

export function evolveReview(player: PlayerRecord, fact: ReviewedFact): PlayerRecord {
  return { ...player, status: fact.status, reasons: fact.reasons, review: fact.review };
}

/** Spec 3: held while any player is held; otherwise admitted (all), rejected (all) or partially_admitted. */
export function deriveMatchStatus(statuses: readonly PlayerStatus[]): MatchStatus {
  let admitted = 0;
  let rejected = 0;
  for (const s of statuses) {
    if (s === 'held') return 'held';
    if (s === 'admitted') admitted++;
    else rejected++;
  }
  if (rejected === 0) return 'admitted';
  if (admitted === 0) return 'rejected';
  return 'partially_admitted';
}

// ---------------------------------------------------------------------------------------------
// Spec 4.9 rule 6

export interface PlayerEventInput {
  matchId: string;
  customerId: string;
  profile: { key: string; event: string };
  endedAtMs: number;
  metrics: Readonly<Record<string, number>>;
  won: boolean | null;
  /** The reporting secret key's id, recorded as the event's source. */
  source: string;
}

export interface PlayerEvent {
  /** The client event id: `<match_id>:<customer id>` (dedups the event per player forever). */
  id: string;
  name: string;
  customerId: string;
  occurredAtMs: number;
  properties: Record<string, unknown>;
  trust: 'merchant_asserted';
  source: string;
}

export function clientEventId(matchId: string, customerId: string): string {
  return `${matchId}:${customerId}`;
}

/** The event an admitted player becomes, as if sent through POST /events. */
export function buildPlayerEvent(i: PlayerEventInput): PlayerEvent {
  // Object.assign, not a spread (a key added to a spread copy costs ~1 µs: see matchEventProperties).
  const properties: Record<string, unknown> = Object.assign({}, i.metrics);
  properties.match_id = i.matchId;
  properties.match_profile = i.profile.key;
  if (i.won !== null) properties.won = i.won;
  return {
    id: clientEventId(i.matchId, i.customerId),
    name: i.profile.event,
    customerId: i.customerId,
    occurredAtMs: i.endedAtMs,
    properties,
    trust: 'merchant_asserted',
    source: i.source,
  };
}
