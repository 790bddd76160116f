// Rate windows per player ownership group (spec 2.11, 2.12): for each profile, a book of the
// group's admitted or held matches, sorted by ended_at. The actor that owns the group applies
// `match_rate.count` one report at a time, so no window ever holds more than max_matches. Entries
// carry (match_id, customer id): a retried count is a replay, and another customer of the group in
// the same match is duplicate_player_after_merge. Windows count distinct matches (after a merge one
// match can have an entry per customer). Pruned beyond any window a later report can reach.
// Pure; never throws.
import { matchLimits, type RateLimit } from './profile.js';
import type { Reason } from './reasons.js';

export interface RateEntry {
  endedAtMs: number;
  matchId: string;
  customerId: string;
}

/** One profile's book: entries sorted by endedAtMs (then matchId), each (matchId, customerId) once. */
export interface RateBook {
  entries: RateEntry[];
}

/** A group's books by profile id. Plain data (msgpack-friendly). */
export type RateState = Record<string, RateBook>;

export const emptyRateState = (): RateState => ({});

export interface RateCtx {
  nowMs: number;
}

/** What admission decided for the player before its group was asked (outliers included). */
export type PendingVerdict = 'admitted' | 'held' | 'rejected';

export type RateCommand =
  | {
      /** Count one player of one report: duplicate check, rate windows, then record when counted. */
      kind: 'match_rate.count';
      profileId: string;
      rateLimits: readonly RateLimit[];
      matchId: string;
      customerId: string;
      endedAtMs: number;
      /** The verdict the player gets if the group lets it through; only admitted and held count. */
      pending: PendingVerdict;
      /**
       * From the caller's own records: another customer of this group already has an admitted
       * player in this match (the group book sees the ones it counted itself).
       */
      alreadyAdmittedInGroup?: boolean;
    }
  | {
      /** The player stopped counting (reviewed to rejected, or its event was refused). */
      kind: 'match_rate.release';
      profileId: string;
      matchId: string;
      customerId: string;
    };

export type RateFact =
  | {
      kind: 'match_rate.counted';
      profileId: string;
      matchId: string;
      customerId: string;
      endedAtMs: number;
      /** Entries ending before this are dropped: no report a caller may still send can reach them. */
      pruneBeforeMs: number;
    }
  | { kind: 'match_rate.released'; profileId: string; matchId: string; customerId: string };

export type RateOutcome =
  /** Counted now (pending admitted or held). */
  | { result: 'counted' }
  /** This (match, customer) was counted before: a retry; nothing changes. */
  | { result: 'replayed' }
  /** Passed the group stage but does not count (pending rejected by outliers). */
  | { result: 'not_counted' }
  /** Rejected at the group stage: rate_limited or duplicate_player_after_merge. */
  | { result: 'rejected'; reasons: Reason[] }
  | { result: 'released' };

export interface RateDecision {
  ok: true;
  facts: RateFact[];
  reply: RateOutcome;
}

function findEntry(book: RateBook | undefined, matchId: string, customerId: string): number {
  if (book === undefined) return -1;
  return book.entries.findIndex((e) => e.matchId === matchId && e.customerId === customerId);
}

/** First index whose endedAtMs >= t. */
function lowerBound(entries: readonly RateEntry[], t: number): number {
  let lo = 0;
  let hi = entries.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (entries[mid]!.endedAtMs < t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Entry i repeats the match of entry i - 1 (two players of one match whose customers merged). */
function repeatsPrevious(entries: readonly RateEntry[], i: number): boolean {
  const prev = entries[i - 1];
  return prev !== undefined && prev.matchId === entries[i]!.matchId && prev.endedAtMs === entries[i]!.endedAtMs;
}

/**
 * The most matches any window of `windowMs` that contains t holds, counting a new match at t.
 * A window is [a, a + windowMs): two matches share a window when their ends are less than
 * windowMs apart. Reports may arrive out of order (ended_at up to 7 days old), so windows after
 * t count too: the spec bounds every window, not only the one ending at t. Matches, not entries:
 * after a merge a book can hold one match once per customer; those entries are adjacent (sorted
 * by endedAtMs, then matchId) and share endedAtMs, so a window holds all or none of them, and the
 * repeats inside [left, right) are subtracted as two running counts (no extra pass or allocation).
 */
export function busiestWindowWith(entries: readonly RateEntry[], t: number, windowMs: number): number {
  const from = lowerBound(entries, t - windowMs + 1);
  const to = lowerBound(entries, t + windowMs); // exclusive
  let best = 0;
  // Left edge at each entry in (t - windowMs, t], then at t itself; the right pointer only moves on.
  let right = from;
  const starts: number[] = [];
  for (let i = from; i < to && entries[i]!.endedAtMs <= t; i++) starts.push(entries[i]!.endedAtMs);
  starts.push(t);
  let left = from;
  // Repeats in [from, left) and in [from, right).
  let leftRepeats = 0;
  let rightRepeats = 0;
  for (const a of starts) {
    while (left < to && entries[left]!.endedAtMs < a) {
      if (repeatsPrevious(entries, left)) leftRepeats++;
      left++;
    }
    if (right < left) {
      right = left;
      rightRepeats = leftRepeats;
    }
    while (right < to && entries[right]!.endedAtMs < a + windowMs) {
      if (repeatsPrevious(entries, right)) rightRepeats++;
      right++;
    }
    best = Math.max(best, right - left - (rightRepeats - leftRepeats));
  }
  return best + 1;
}

/** The first rate limit a new match ending at t would break, as a rate_limited reason; null if none. */
export function checkRateWindows(book: RateBook | undefined, limits: readonly RateLimit[], t: number): Reason | null {
  const entries = book?.entries ?? [];
  for (const l of limits) {
    const count = busiestWindowWith(entries, t, l.windowSeconds * 1000);
    if (count > l.maxMatches) {
      return {
        code: 'rate_limited',
        message: `At most ${l.maxMatches} admitted or held matches within ${l.windowSeconds} seconds.`,
        value: count - 1,
        limit: l.maxMatches,
      };
    }
  }
  return null;
}

/** Entries ending before this can no longer share a window with any report that passes rule 3. */
export function pruneHorizonMs(nowMs: number, limits: readonly RateLimit[]): number {
  const widestMs = limits.reduce((w, l) => Math.max(w, l.windowSeconds * 1000), 0);
  return nowMs - matchLimits.endedAtMaxAgeMs - widestMs;
}

/** The reason of a player whose customer group already has an admitted player in the same match. */
export function duplicatePlayerAfterMerge(): Reason {
  return {
    code: 'duplicate_player_after_merge',
    message: 'Another player of this match belongs to the same customer after a merge and was already admitted.',
  };
}

export function decideRate(state: RateState, cmd: RateCommand, ctx: RateCtx): RateDecision {
  const book = state[cmd.profileId];
  if (cmd.kind === 'match_rate.release') {
    if (findEntry(book, cmd.matchId, cmd.customerId) < 0) return { ok: true, facts: [], reply: { result: 'released' } };
    const fact: RateFact = { kind: 'match_rate.released', profileId: cmd.profileId, matchId: cmd.matchId, customerId: cmd.customerId };
    return { ok: true, facts: [fact], reply: { result: 'released' } };
  }
  if (findEntry(book, cmd.matchId, cmd.customerId) >= 0) return { ok: true, facts: [], reply: { result: 'replayed' } };

  // Order inside the group stage: a duplicate after a merge, then the rate windows.
  const other = book?.entries.find((e) => e.matchId === cmd.matchId && e.customerId !== cmd.customerId);
  if (cmd.alreadyAdmittedInGroup === true || other !== undefined) {
    return { ok: true, facts: [], reply: { result: 'rejected', reasons: [duplicatePlayerAfterMerge()] } };
  }
  const limited = checkRateWindows(book, cmd.rateLimits, cmd.endedAtMs);
  if (limited !== null) return { ok: true, facts: [], reply: { result: 'rejected', reasons: [limited] } };
  if (cmd.pending === 'rejected') return { ok: true, facts: [], reply: { result: 'not_counted' } };
  const fact: RateFact = {
    kind: 'match_rate.counted',
    profileId: cmd.profileId,
    matchId: cmd.matchId,
    customerId: cmd.customerId,
    endedAtMs: cmd.endedAtMs,
    pruneBeforeMs: pruneHorizonMs(ctx.nowMs, cmd.rateLimits),
  };
  return { ok: true, facts: [fact], reply: { result: 'counted' } };
}

function insertSorted(entries: RateEntry[], e: RateEntry): void {
  let i = lowerBound(entries, e.endedAtMs);
  while (i < entries.length && entries[i]!.endedAtMs === e.endedAtMs && entries[i]!.matchId <= e.matchId) i++;
  entries.splice(i, 0, e);
}

/**
 * The state with one profile's book replaced. Object.assign, not a spread: a key added to a spread
 * copy (a customer's first book) costs ~1 µs on Node 20 (docs/architecture.md, Hot-path JavaScript).
 */
function withBook(state: RateState, profileId: string, book: RateBook): RateState {
  const out: RateState = Object.assign({}, state);
  out[profileId] = book;
  return out;
}

/** Applies one fact; returns a new state (the books it touches are copied). */
export function evolveRate(state: RateState, fact: RateFact): RateState {
  const book = state[fact.profileId];
  if (fact.kind === 'match_rate.released') {
    if (book === undefined) return state;
    const entries = book.entries.filter((e) => !(e.matchId === fact.matchId && e.customerId === fact.customerId));
    return withBook(state, fact.profileId, { entries });
  }
  const kept = book === undefined ? [] : book.entries.slice(lowerBound(book.entries, fact.pruneBeforeMs));
  if (findEntry({ entries: kept }, fact.matchId, fact.customerId) < 0) {
    insertSorted(kept, { endedAtMs: fact.endedAtMs, matchId: fact.matchId, customerId: fact.customerId });
  }
  return withBook(state, fact.profileId, { entries: kept });
}

/**
 * Two groups become one on a merge: their books are joined (merged customers share their windows).
 * A match both groups played keeps one entry per customer (a retry finds its own entry, a review
 * releases only its own) and counts once (busiestWindowWith counts matches). Windows of the joined
 * book may briefly exceed max_matches; later reports are limited until they fall out.
 */
export function mergeRateStates(into: RateState, from: RateState): RateState {
  const out: RateState = { ...into };
  for (const [profileId, book] of Object.entries(from)) {
    const entries = [...(out[profileId]?.entries ?? [])];
    for (const e of book.entries) {
      if (findEntry({ entries }, e.matchId, e.customerId) < 0) insertSorted(entries, { ...e });
    }
    out[profileId] = { entries };
  }
  return out;
}
