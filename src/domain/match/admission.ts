// Admission checks of a validated match report (spec 2.12, 3), in the spec's order with early
// returns per player: match-wide bounds (everyone), metric bounds, the group stage (duplicate after
// a merge, rate windows; only inside all bounds; decided by the group's owner, see rate.ts),
// outliers, then event admission. A player records the reasons of the first failing stage only.
// The stages are separate functions so a coordinator can run them across actors; admitMatch runs
// them all in one place. Pure; never throws.
import type { MatchProfile, ProfileSections } from './profile.js';
import { decideRate, evolveRate, type PendingVerdict, type RateFact, type RateOutcome, type RateState } from './rate.js';
import type { Reason } from './reasons.js';
import type { MatchReport } from './report.js';
import { deriveMatchStatus, type MatchStatus, type PlayerStatus } from './verdict.js';

/** Before any check: an archived profile takes no new reports (stored results and reviews stay). */
export function checkProfileOpen(profile: Pick<MatchProfile, 'status' | 'key'>): { ok: true } | { ok: false; code: 'match_profile_archived'; param: 'profile'; message: string } {
  if (profile.status === 'active') return { ok: true };
  return { ok: false, code: 'match_profile_archived', param: 'profile', message: `The match profile '${profile.key}' is archived.` };
}

// ---------------------------------------------------------------------------------------------
// Stage checks (each returns every violation of its own stage)

/** Stage 1: duration (negative when started_at is after ended_at) and player count; a violation rejects every player. */
export function checkMatchBounds(profile: Pick<ProfileSections, 'duration' | 'players'>, report: Pick<MatchReport, 'durationSeconds' | 'players'>): Reason[] {
  const out: Reason[] = [];
  const d = report.durationSeconds;
  const { minimumSeconds, maximumSeconds } = profile.duration;
  if (d < minimumSeconds || d > maximumSeconds) {
    out.push({
      code: 'duration_out_of_bounds',
      message:
        d < 0
          ? `The match started ${-d} seconds after it ended; the profile allows ${minimumSeconds} to ${maximumSeconds} seconds.`
          : `The match lasted ${d} seconds; the profile allows ${minimumSeconds} to ${maximumSeconds}.`,
      value: d,
      limit: d < minimumSeconds ? minimumSeconds : maximumSeconds,
    });
  }
  const n = report.players.length;
  if (n < profile.players.minimum || n > profile.players.maximum) {
    out.push({
      code: 'player_count_out_of_bounds',
      message: `The match has ${n} ${n === 1 ? 'player' : 'players'}; the profile allows ${profile.players.minimum} to ${profile.players.maximum}.`,
      value: n,
      limit: n < profile.players.minimum ? profile.players.minimum : profile.players.maximum,
    });
  }
  return out;
}

/** Stage 2: each metric against its minimum, maximum and per-minute maximum. */
export function checkMetricBounds(profile: Pick<ProfileSections, 'metrics'>, durationSeconds: number, metrics: Readonly<Record<string, number>>): Reason[] {
  const out: Reason[] = [];
  const minutes = durationSeconds / 60;
  for (const m of profile.metrics) {
    const v = metrics[m.key];
    if (v === undefined) continue; // report validation guarantees presence
    if (v < m.minimum) {
      out.push({ code: 'metric_below_minimum', message: `${m.key} is ${v}, under the minimum ${m.minimum}.`, metric: m.key, value: v, limit: m.minimum });
    } else if (v > m.maximum) {
      out.push({ code: 'metric_above_maximum', message: `${m.key} is ${v}, over the maximum ${m.maximum}.`, metric: m.key, value: v, limit: m.maximum });
    }
    if (m.perMinuteMaximum !== null) {
      const perMinute = v / minutes;
      if (perMinute > m.perMinuteMaximum) {
        out.push({
          code: 'metric_per_minute_exceeded',
          message: `${m.key} is ${perMinute} per minute, over the maximum ${m.perMinuteMaximum}.`,
          metric: m.key,
          value: perMinute,
          limit: m.perMinuteMaximum,
        });
      }
    }
  }
  return out;
}

export interface OutlierCheck {
  /** admitted when no threshold is crossed; otherwise held or rejected per outliers.action. */
  verdict: PendingVerdict;
  reasons: Reason[];
}

/** Stage 4: every hold metric above its threshold is an outlier reason. */
export function checkOutliers(profile: Pick<ProfileSections, 'outliers'>, metrics: Readonly<Record<string, number>>): OutlierCheck {
  const o = profile.outliers;
  if (o === null) return { verdict: 'admitted', reasons: [] };
  const reasons: Reason[] = [];
  for (const h of o.holdMetrics) {
    const v = metrics[h.key];
    if (v !== undefined && v > h.above) {
      reasons.push({ code: 'outlier', message: `${h.key} is ${v}, above the hold threshold ${h.above}.`, metric: h.key, value: v, limit: h.above });
    }
  }
  if (reasons.length === 0) return { verdict: 'admitted', reasons };
  return { verdict: o.action === 'hold' ? 'held' : 'rejected', reasons };
}

// ---------------------------------------------------------------------------------------------
// The pipeline, split where the coordinator has to ask another actor

export interface PlayerVerdict {
  status: PlayerStatus;
  reasons: Reason[];
}

/**
 * What the report alone decides for each player (stages 1, 2 and the precomputed stage 4):
 * either a final rejection, or the verdict pending on the group stage.
 */
export type PrePlayer =
  | { stage: 'final'; verdict: PlayerVerdict }
  | { stage: 'group'; pending: PendingVerdict; outlierReasons: Reason[] };

export function preAdmit(profile: ProfileSections, report: MatchReport): PrePlayer[] {
  const matchReasons = checkMatchBounds(profile, report);
  return report.players.map((p): PrePlayer => {
    if (matchReasons.length > 0) return { stage: 'final', verdict: { status: 'rejected', reasons: matchReasons.map((r) => ({ ...r })) } };
    const bounds = checkMetricBounds(profile, report.durationSeconds, p.metrics);
    if (bounds.length > 0) return { stage: 'final', verdict: { status: 'rejected', reasons: bounds } };
    const outliers = checkOutliers(profile, p.metrics);
    return { stage: 'group', pending: outliers.verdict, outlierReasons: outliers.reasons };
  });
}

/** After the group stage: rejected there (its reasons only), or the outlier verdict. */
export function afterGroup(pre: Extract<PrePlayer, { stage: 'group' }>, outcome: RateOutcome): PlayerVerdict {
  if (outcome.result === 'rejected') return { status: 'rejected', reasons: outcome.reasons };
  return { status: pre.pending, reasons: pre.outlierReasons };
}

/**
 * Stage 5, for an admitted player whose event admission answered: a permanent refusal (for
 * example a trust floor) turns the verdict into rejected with event_refused; the caller then
 * releases the player's count (match_rate.release). Held and rejected verdicts pass unchanged.
 */
export function afterEvent(verdict: PlayerVerdict, eventRefused: { message: string } | null): PlayerVerdict {
  if (verdict.status !== 'admitted' || eventRefused === null) return verdict;
  return { status: 'rejected', reasons: [{ code: 'event_refused', message: eventRefused.message }] };
}

// ---------------------------------------------------------------------------------------------
// All stages in one place (one process owns every group of the report; also the tests' model)

export interface PlayerContext {
  customerId: string;
  /** The ownership group (the surviving customer id after merges); keys `groups`. */
  groupId: string;
  alreadyAdmittedInGroup?: boolean;
  /** The answer event admission would give: null when the event is accepted. */
  eventRefused?: { message: string } | null;
}

export interface MatchAdmission {
  players: PlayerVerdict[];
  status: MatchStatus;
  /** Rate facts per group, in application order; `groups` below already has them applied. */
  rateFacts: Record<string, RateFact[]>;
  groups: Record<string, RateState>;
}

/**
 * Admits every player of a report against the groups' rate state, counting players one at a time
 * in report order (the same order the group actors would see). `players[i]` belongs to
 * `report.players[i]`.
 */
export function admitMatch(
  profile: Pick<MatchProfile, 'id'> & ProfileSections,
  report: MatchReport,
  players: readonly PlayerContext[],
  groups: Readonly<Record<string, RateState>>,
  ctx: { nowMs: number },
): MatchAdmission {
  const pre = preAdmit(profile, report);
  const nextGroups: Record<string, RateState> = { ...groups };
  const rateFacts: Record<string, RateFact[]> = {};
  const record = (groupId: string, facts: RateFact[]) => {
    let s = nextGroups[groupId] ?? {};
    for (const f of facts) s = evolveRate(s, f);
    nextGroups[groupId] = s;
    if (facts.length > 0) (rateFacts[groupId] ??= []).push(...facts);
  };
  const verdicts = pre.map((p, i): PlayerVerdict => {
    if (p.stage === 'final') return p.verdict;
    const c = players[i]!;
    const counted = decideRate(
      nextGroups[c.groupId] ?? {},
      {
        kind: 'match_rate.count',
        profileId: profile.id,
        rateLimits: profile.rateLimits,
        matchId: report.matchId,
        customerId: c.customerId,
        endedAtMs: report.endedAtMs,
        pending: p.pending,
        alreadyAdmittedInGroup: c.alreadyAdmittedInGroup ?? false,
      },
      ctx,
    );
    record(c.groupId, counted.facts);
    const v = afterGroup(p, counted.reply);
    const final = afterEvent(v, c.eventRefused ?? null);
    if (final !== v) {
      const released = decideRate(
        nextGroups[c.groupId] ?? {},
        { kind: 'match_rate.release', profileId: profile.id, matchId: report.matchId, customerId: c.customerId },
        ctx,
      );
      record(c.groupId, released.facts);
    }
    return final;
  });
  return { players: verdicts, status: deriveMatchStatus(verdicts.map((v) => v.status)), rateFacts, groups: nextGroups };
}
