// Challenges: one customer's enrollments and progress records, and the validation and status
// transitions of challenge definitions. Invariants: a contribution value counts once per period
// (per cycle); a period (cycle) completes at most once, and its completion fact carries the
// completion actions so the caller applies them in the same journal entry; completions are never
// undone; stored contributions per record are bounded. Pure: time is ctx.nowMs and the period key
// comes from it and the environment's time zone; conditions are evaluated by the caller; never throws.
import type { ErrorCode } from '../errors/codes.js';
import { isPeriodKind, type PeriodKind, periodEndMs, periodKey } from './periods.js';

export type ChallengeStatus = 'draft' | 'active' | 'paused' | 'ended';
export type EnrollmentMode = 'automatic' | 'explicit';

export const challengeStatuses: readonly ChallengeStatus[] = ['draft', 'active', 'paused', 'ended'];
export const enrollmentModes: readonly EnrollmentMode[] = ['automatic', 'explicit'];

export interface ChallengeConfig {
  id: string;
  name: string;
  /** `conditions` are evaluated by the caller's rule-condition evaluator (see contribute.qualifies). */
  qualifying: { event: string; conditions?: unknown };
  target: number;
  period: PeriodKind;
  /** A path such as 'event.properties.match_id'; null: every qualifying event counts. */
  contributionKey: string | null;
  enrollment: EnrollmentMode;
  /** Can complete again: in the next period, or (period 'none') in a new cycle after each completion. */
  repeatable: boolean;
  startsAtMs: number | null;
  endsAtMs: number | null;
  status: ChallengeStatus;
  /** Opaque to this module: returned in challenge.completed for the caller to apply. */
  completionActions: unknown[];
  campaignId?: string | null;
}

export type ProgressStatus = 'active' | 'completed';

export interface ChallengeProgress {
  challengeId: string;
  periodKey: string;
  /** 1 in every period; counts up within 'all' for a repeatable challenge of period 'none'. */
  cycle: number;
  count: number;
  target: number;
  status: ProgressStatus;
  /** Distinct contribution values of this period and cycle (empty when contributionKey is null). */
  contributions: string[];
  completedAtMs: number | null;
  updatedAtMs: number;
}

export interface Enrollment {
  challengeId: string;
  enrolledAtMs: number;
}

/** One customer's challenges. Only the latest progress record per challenge is kept in the actor. */
export interface ChallengesState {
  enrollments: Record<string, Enrollment>;
  progress: Record<string, ChallengeProgress>;
  /** Completions so far per challenge, across periods and cycles (never decreases). */
  completions: Record<string, number>;
}

export interface ChallengeCtx {
  nowMs: number;
}

export type Command =
  | { kind: 'challenge.enroll'; challenge: ChallengeConfig }
  | { kind: 'challenge.unenroll'; challengeId: string }
  | {
      kind: 'challenge.contribute';
      challenge: ChallengeConfig;
      /** Service event id of the qualifying event (events are deduplicated by id before this). */
      eventId: string;
      /** The value at challenge.contributionKey, stringified (see readContribution); ignored when the key is null. */
      contribution: string | null;
      /** Event name matched and conditions held, as decided by the caller's evaluator. */
      qualifies: boolean;
      timeZone: string;
    }
  | {
      kind: 'challenge.revoke';
      challenge: ChallengeConfig;
      contribution: string;
      /** Defaults to the latest record's period. */
      periodKey?: string | null;
    }
  | {
      kind: 'challenge.reevaluate';
      challenge: ChallengeConfig;
      timeZone: string;
      /**
       * Why the challenge's campaign is closed to the customer now (not live, or the customer is
       * outside its audience), as the caller judged it (challenge-effects): nothing completes.
       */
      campaignClosed?: CampaignClosed | null;
    };

/** Why a campaign challenge takes no progress from a customer now (as for an event: challenge.skipped). */
export type CampaignClosed = 'campaign_inactive' | 'segment_not_matched';

export type ChallengeFact =
  | { kind: 'challenge.enrolled'; challengeId: string; atMs: number }
  | { kind: 'challenge.unenrolled'; challengeId: string; atMs: number }
  | {
      kind: 'challenge.progressed';
      challengeId: string;
      periodKey: string;
      cycle: number;
      /** The stored contribution value; null when the challenge has no contribution key. */
      contribution: string | null;
      eventId: string | null;
      /** Count after this contribution. */
      count: number;
      target: number;
      atMs: number;
    }
  | {
      kind: 'challenge.completed';
      challengeId: string;
      challengeName: string;
      periodKey: string;
      cycle: number;
      count: number;
      target: number;
      completionActions: unknown[];
      /** Completions of this challenge after this one. */
      completions: number;
      atMs: number;
    }
  | {
      kind: 'challenge.revoked';
      challengeId: string;
      periodKey: string;
      cycle: number;
      contribution: string;
      /** Count after the revoke. */
      count: number;
      atMs: number;
    }
  /** A merged customer's challenges joined into the survivor's (joinChallenges): what changes here. */
  | {
      kind: 'challenge.merged';
      from: string;
      /** Enrollments the survivor did not have. */
      enrollments: Enrollment[];
      /** Progress records the survivor adopts (each replaces its latest record of that challenge). */
      progress: ChallengeProgress[];
      /** Completions added per challenge. */
      completions: Record<string, number>;
      atMs: number;
    };

/** Why a qualifying-looking event made no progress, in the order the checks run. */
export type SkipReason =
  | CampaignClosed
  | 'challenge_not_active'
  | 'challenge_not_started'
  | 'challenge_ended'
  | 'not_enrolled'
  | 'not_qualifying'
  | 'contribution_missing'
  | 'contribution_invalid'
  | 'already_completed'
  | 'period_completed'
  | 'duplicate_contribution'
  | 'contribution_limit_reached';

export type Reply =
  | { kind: 'enrollment'; enrollment: Enrollment; created: boolean }
  | { kind: 'unenrolled'; challengeId: string }
  | {
      kind: 'contribution';
      challengeId: string;
      outcome: 'progressed' | 'completed' | 'skipped';
      reason: SkipReason | null;
      /** The record after the command; null when nothing was ever recorded for it. */
      progress: ChallengeProgress | null;
    }
  | { kind: 'progress'; progress: ChallengeProgress }
  | { kind: 'reevaluated'; challengeId: string; completed: number; reason: SkipReason | null; progress: ChallengeProgress | null };

export type Decision =
  | { ok: true; facts: ChallengeFact[]; reply: Reply }
  | { ok: false; code: ErrorCode; message: string; param?: string };

export const challengeLimits = {
  nameCharsMax: 120,
  eventNameCharsMax: 128,
  /** Keyed challenges store every counted value, so their target bounds the record. */
  keyedTargetMax: 1000,
  /** Challenges without a key store no values. */
  targetMax: 1_000_000,
  contributionsPerProgressMax: 1000,
  contributionCharsMax: 128,
  contributionKeyCharsMax: 200,
  completionActionsMax: 20,
} as const;

export function emptyChallengesState(): ChallengesState {
  return { enrollments: {}, progress: {}, completions: {} };
}

const noFacts: ChallengeFact[] = [];

// ---------------------------------------------------------------------------------------------
// decide

export function decide(state: ChallengesState, cmd: Command, ctx: ChallengeCtx): Decision {
  switch (cmd.kind) {
    case 'challenge.enroll':
      return enroll(state, cmd.challenge, ctx);
    case 'challenge.unenroll': {
      if (!has(state.enrollments, cmd.challengeId)) {
        return { ok: false, code: 'resource_not_found', message: 'The customer is not enrolled in this challenge.', param: 'customer_id' };
      }
      return {
        ok: true,
        facts: [{ kind: 'challenge.unenrolled', challengeId: cmd.challengeId, atMs: ctx.nowMs }],
        reply: { kind: 'unenrolled', challengeId: cmd.challengeId },
      };
    }
    case 'challenge.contribute':
      return contribute(state, cmd, ctx);
    case 'challenge.revoke':
      return revoke(state, cmd, ctx);
    case 'challenge.reevaluate':
      return reevaluate(state, cmd.challenge, cmd.timeZone, cmd.campaignClosed ?? null, ctx);
  }
}

/**
 * Enrollment is recorded for either mode (it gates progress only for explicit challenges). An
 * ended challenge (status or ends_at passed) refuses with invalid_state; enrolling twice answers
 * the first enrollment. Drafts accept enrollments so operators can prepare a launch.
 */
function enroll(state: ChallengesState, challenge: ChallengeConfig, ctx: ChallengeCtx): Decision {
  const existing = get(state.enrollments, challenge.id);
  if (existing !== undefined) return { ok: true, facts: noFacts, reply: { kind: 'enrollment', enrollment: existing, created: false } };
  if (challenge.status === 'ended' || (challenge.endsAtMs !== null && ctx.nowMs >= challenge.endsAtMs)) {
    return { ok: false, code: 'invalid_state', message: 'The challenge has ended.', param: 'challenge_id' };
  }
  return {
    ok: true,
    facts: [{ kind: 'challenge.enrolled', challengeId: challenge.id, atMs: ctx.nowMs }],
    reply: { kind: 'enrollment', enrollment: { challengeId: challenge.id, enrolledAtMs: ctx.nowMs }, created: true },
  };
}

/** Challenge-level and customer-level gates shared by contribute and reevaluate, in order. */
function gate(state: ChallengesState, challenge: ChallengeConfig, nowMs: number): SkipReason | null {
  if (challenge.status !== 'active') return 'challenge_not_active';
  if (challenge.startsAtMs !== null && nowMs < challenge.startsAtMs) return 'challenge_not_started';
  if (challenge.endsAtMs !== null && nowMs >= challenge.endsAtMs) return 'challenge_ended';
  if (challenge.enrollment === 'explicit' && !has(state.enrollments, challenge.id)) return 'not_enrolled';
  return null;
}

/**
 * The period key now; never earlier than the latest record's (a clock that steps back, e.g. after
 * a failover between nodes, keeps counting into the latest period instead of reopening one).
 */
function currentPeriodKey(state: ChallengesState, challenge: ChallengeConfig, nowMs: number, timeZone: string): string {
  const key = periodKey(challenge.period, nowMs, timeZone);
  const latest = get(state.progress, challenge.id);
  if (latest !== undefined && latest.periodKey > key && samePeriodShape(latest.periodKey, key)) return latest.periodKey;
  return key;
}

/** Keys of one kind have one shape; a challenge whose period kind changed compares nothing. */
function samePeriodShape(a: string, b: string): boolean {
  return a.length === b.length && a.includes('W') === b.includes('W');
}

/**
 * One qualifying event. Checks in order: status, schedule window, enrollment, qualification,
 * contribution value, completion state, duplicate value, stored-value bound. Reaching the target
 * emits challenge.progressed then challenge.completed in the same decision.
 * Repeatable: a completed period accepts nothing more; the next period starts fresh. For period
 * 'none' the next qualifying event after a completion opens cycle n+1 from count 0 (with empty
 * contributions, so a value counted in an earlier cycle can count again).
 * Not repeatable: after the first completion nothing counts again, in any period.
 */
function contribute(state: ChallengesState, cmd: Command & { kind: 'challenge.contribute' }, ctx: ChallengeCtx): Decision {
  const challenge = cmd.challenge;
  const latest = get(state.progress, challenge.id) ?? null;
  const skip = (reason: SkipReason): Decision => ({
    ok: true,
    facts: noFacts,
    reply: { kind: 'contribution', challengeId: challenge.id, outcome: 'skipped', reason, progress: latest },
  });

  const gated = gate(state, challenge, ctx.nowMs);
  if (gated !== null) return skip(gated);
  if (!cmd.qualifies) return skip('not_qualifying');

  const keyed = challenge.contributionKey !== null;
  let value: string | null = null;
  if (keyed) {
    if (cmd.contribution === null || cmd.contribution.length === 0) return skip('contribution_missing');
    if (cmd.contribution.length > challengeLimits.contributionCharsMax) return skip('contribution_invalid');
    value = cmd.contribution;
  }

  if (!challenge.repeatable && (state.completions[challenge.id] ?? 0) > 0) return skip('already_completed');

  const key = currentPeriodKey(state, challenge, ctx.nowMs, cmd.timeZone);
  let current = latest !== null && latest.periodKey === key ? latest : null;
  let cycle = current?.cycle ?? 1;
  if (current !== null && current.status === 'completed') {
    if (!(challenge.repeatable && challenge.period === 'none')) return skip('period_completed');
    cycle = current.cycle + 1;
    current = null;
  }
  const contributions = current?.contributions ?? [];
  if (value !== null && contributions.includes(value)) return skip('duplicate_contribution');
  if (value !== null && contributions.length >= challengeLimits.contributionsPerProgressMax) return skip('contribution_limit_reached');

  const count = (current?.count ?? 0) + 1;
  const target = challenge.target;
  const facts: ChallengeFact[] = [
    {
      kind: 'challenge.progressed',
      challengeId: challenge.id,
      periodKey: key,
      cycle,
      contribution: value,
      eventId: cmd.eventId,
      count,
      target,
      atMs: ctx.nowMs,
    },
  ];
  const completes = count >= target;
  if (completes) facts.push(completedFact(state, challenge, key, cycle, count, ctx.nowMs));
  const progress: ChallengeProgress = {
    challengeId: challenge.id,
    periodKey: key,
    cycle,
    count,
    target,
    status: completes ? 'completed' : 'active',
    contributions: value === null ? [...contributions] : [...contributions, value],
    completedAtMs: completes ? ctx.nowMs : null,
    updatedAtMs: ctx.nowMs,
  };
  return {
    ok: true,
    facts,
    reply: { kind: 'contribution', challengeId: challenge.id, outcome: completes ? 'completed' : 'progressed', reason: null, progress },
  };
}

function completedFact(
  state: ChallengesState,
  challenge: ChallengeConfig,
  key: string,
  cycle: number,
  count: number,
  atMs: number,
): ChallengeFact {
  return {
    kind: 'challenge.completed',
    challengeId: challenge.id,
    challengeName: challenge.name,
    periodKey: key,
    cycle,
    count,
    target: challenge.target,
    completionActions: challenge.completionActions,
    completions: (state.completions[challenge.id] ?? 0) + 1,
    atMs,
  };
}

/**
 * Operator action: removes one contribution from the latest record (or the named period's, which
 * must be the latest). The count drops by one. A completed record stays completed: completions
 * are never undone (their rewards were given) and the period still accepts no more progress.
 * Without a contribution key no values are stored: the revoke takes one count off whatever
 * value it names (the value is kept in the fact for the audit trail).
 */
function revoke(state: ChallengesState, cmd: Command & { kind: 'challenge.revoke' }, ctx: ChallengeCtx): Decision {
  const challenge = cmd.challenge;
  const latest = get(state.progress, challenge.id);
  if (latest === undefined || (cmd.periodKey != null && cmd.periodKey !== latest.periodKey)) {
    return { ok: false, code: 'resource_not_found', message: 'No progress for this customer and period.', param: 'customer_id' };
  }
  const keyed = challenge.contributionKey !== null;
  const found = keyed ? latest.contributions.includes(cmd.contribution) : latest.count > 0;
  if (!found) {
    return { ok: false, code: 'resource_not_found', message: 'The contribution is not part of this progress record.', param: 'contribution' };
  }
  const count = latest.count - 1;
  const fact: ChallengeFact = {
    kind: 'challenge.revoked',
    challengeId: challenge.id,
    periodKey: latest.periodKey,
    cycle: latest.cycle,
    contribution: cmd.contribution,
    count,
    atMs: ctx.nowMs,
  };
  const progress: ChallengeProgress = {
    ...latest,
    count,
    contributions: latest.contributions.filter((c) => c !== cmd.contribution),
    updatedAtMs: ctx.nowMs,
  };
  return { ok: true, facts: [fact], reply: { kind: 'progress', progress } };
}

/**
 * Operator action: completes the current period's record when it already reaches the target (for
 * example after the target was lowered) and the challenge may progress now (its campaign, when it
 * has one, live and the customer in its audience: `campaignClosed` otherwise). Completes at most
 * once, like a contribution would; the caller sums `completed` over customers.
 */
function reevaluate(state: ChallengesState, challenge: ChallengeConfig, timeZone: string, campaignClosed: CampaignClosed | null, ctx: ChallengeCtx): Decision {
  const latest = get(state.progress, challenge.id) ?? null;
  const key = currentPeriodKey(state, challenge, ctx.nowMs, timeZone);
  // The answer shows the current period's record: one of an earlier period (or of the period
  // kind the challenge had before an edit) is not what was re-checked.
  const current = latest !== null && latest.periodKey === key ? latest : null;
  const none = (reason: SkipReason | null): Decision => ({
    ok: true,
    facts: noFacts,
    reply: { kind: 'reevaluated', challengeId: challenge.id, completed: 0, reason, progress: current },
  });
  // The campaign first, as for an event (challenge-effects skips before the challenge's own gates).
  const gated = campaignClosed ?? gate(state, challenge, ctx.nowMs);
  if (gated !== null) return none(gated);
  if (!challenge.repeatable && (state.completions[challenge.id] ?? 0) > 0) return none('already_completed');
  if (latest === null || latest.periodKey !== key) return none(null);
  if (latest.status === 'completed') return none('period_completed');
  if (latest.count < challenge.target) return none(null);
  const fact = completedFact(state, challenge, key, latest.cycle, latest.count, ctx.nowMs);
  const progress: ChallengeProgress = { ...latest, status: 'completed', target: challenge.target, completedAtMs: ctx.nowMs, updatedAtMs: ctx.nowMs };
  return { ok: true, facts: [fact], reply: { kind: 'reevaluated', challengeId: challenge.id, completed: 1, reason: null, progress } };
}

// ---------------------------------------------------------------------------------------------
// evolve

/** Applies one fact. Mutates and returns the state (the actor owns the only reference). */
export function evolve(state: ChallengesState, fact: ChallengeFact): ChallengesState {
  switch (fact.kind) {
    case 'challenge.enrolled':
      state.enrollments[fact.challengeId] = { challengeId: fact.challengeId, enrolledAtMs: fact.atMs };
      return state;
    case 'challenge.unenrolled':
      delete state.enrollments[fact.challengeId];
      return state;
    case 'challenge.progressed': {
      let rec = get(state.progress, fact.challengeId);
      if (rec === undefined || rec.periodKey !== fact.periodKey || rec.cycle !== fact.cycle) {
        rec = {
          challengeId: fact.challengeId,
          periodKey: fact.periodKey,
          cycle: fact.cycle,
          count: 0,
          target: fact.target,
          status: 'active',
          contributions: [],
          completedAtMs: null,
          updatedAtMs: fact.atMs,
        };
        state.progress[fact.challengeId] = rec;
      }
      rec.count = fact.count;
      rec.target = fact.target;
      if (fact.contribution !== null && !rec.contributions.includes(fact.contribution)) rec.contributions.push(fact.contribution);
      rec.updatedAtMs = fact.atMs;
      return state;
    }
    case 'challenge.completed': {
      const rec = get(state.progress, fact.challengeId);
      if (rec !== undefined && rec.periodKey === fact.periodKey && rec.cycle === fact.cycle) {
        rec.status = 'completed';
        rec.target = fact.target;
        rec.completedAtMs = fact.atMs;
        rec.updatedAtMs = fact.atMs;
      }
      state.completions[fact.challengeId] = fact.completions;
      return state;
    }
    case 'challenge.revoked': {
      const rec = get(state.progress, fact.challengeId);
      if (rec === undefined || rec.periodKey !== fact.periodKey || rec.cycle !== fact.cycle) return state;
      rec.count = fact.count;
      rec.contributions = rec.contributions.filter((c) => c !== fact.contribution);
      rec.updatedAtMs = fact.atMs;
      return state;
    }
    case 'challenge.merged':
      for (const e of fact.enrollments) state.enrollments[e.challengeId] = { ...e };
      for (const p of fact.progress) state.progress[p.challengeId] = { ...p, contributions: [...p.contributions] };
      for (const [id, n] of Object.entries(fact.completions)) state.completions[id] = (get(state.completions, id) ?? 0) + n;
      return state;
  }
}

/** A deleted customer's enrollments, removed with the delete (its progress records stay, as history). */
export function unenrollAll(state: ChallengesState, nowMs: number): ChallengeFact[] {
  return Object.keys(state.enrollments).map((challengeId) => ({ kind: 'challenge.unenrolled', challengeId, atMs: nowMs }));
}

/**
 * A merged customer's challenges joined into the survivor's, without completing anything (the
 * merge runs no completion actions) and without a period completing twice: its enrollments are
 * added, its completions counted, and per challenge its latest progress record is adopted when the
 * survivor has none, when it is of a later period (or cycle), or, for the same period and cycle,
 * when it is completed (the survivor's is not) or counts higher (neither completed). Null when
 * nothing changes.
 */
export function joinChallenges(state: ChallengesState, theirs: ChallengesState, fromId: string, ctx: ChallengeCtx): ChallengeFact | null {
  const enrollments = Object.values(theirs.enrollments).filter((e) => get(state.enrollments, e.challengeId) === undefined);
  const completions: Record<string, number> = {};
  for (const [id, n] of Object.entries(theirs.completions)) if (n > 0) completions[id] = n;
  const progress: ChallengeProgress[] = [];
  for (const m of Object.values(theirs.progress)) {
    const s = get(state.progress, m.challengeId);
    if (s === undefined || adopts(s, m)) progress.push(m);
  }
  if (enrollments.length === 0 && progress.length === 0 && Object.keys(completions).length === 0) return null;
  return { kind: 'challenge.merged', from: fromId, enrollments, progress, completions, atMs: ctx.nowMs };
}

/** Whether the survivor's latest record `s` gives way to the merged customer's `m` (joinChallenges). */
function adopts(s: ChallengeProgress, m: ChallengeProgress): boolean {
  if (m.periodKey !== s.periodKey) return m.periodKey > s.periodKey; // period keys sort in time order
  if (m.cycle !== s.cycle) return m.cycle > s.cycle;
  if (s.status === 'completed') return false;
  return m.status === 'completed' || m.count > s.count;
}

// ---------------------------------------------------------------------------------------------
// Reads and helpers for the caller

/**
 * The record as of now: the stored one while its period lasts, else a fresh zero record for the
 * current period (what a progress list shows for a customer whose period rolled over). Null when
 * the customer never progressed.
 */
export function progressAt(state: ChallengesState, challenge: ChallengeConfig, nowMs: number, timeZone: string): ChallengeProgress | null {
  const latest = get(state.progress, challenge.id);
  if (latest === undefined) return null;
  const key = currentPeriodKey(state, challenge, nowMs, timeZone);
  if (latest.periodKey === key) return latest;
  return {
    challengeId: challenge.id,
    periodKey: key,
    cycle: 1,
    count: 0,
    target: challenge.target,
    status: 'active',
    contributions: [],
    completedAtMs: null,
    updatedAtMs: latest.updatedAtMs,
  };
}

/** When the challenge's current period ends (for the scheduler); null for period 'none'. */
export function nextPeriodBoundaryMs(challenge: ChallengeConfig, nowMs: number, timeZone: string): number | null {
  return periodEndMs(challenge.period, nowMs, timeZone);
}

/** Challenges an event name may progress (status and window are checked again by contribute). */
export function challengesForEvent(challenges: readonly ChallengeConfig[], eventName: string): ChallengeConfig[] {
  return challenges.filter((c) => c.status === 'active' && c.qualifying.event === eventName);
}

/**
 * Reads a contribution value at a dotted path ('event.properties.match_id') from `root`
 * ({event: {id, name, properties}, customer: {attributes}}). Strings as they are, finite numbers
 * and booleans stringified; anything else (missing, null, object, array) is null.
 */
export function readContribution(path: string | null, root: Readonly<Record<string, unknown>>): string | null {
  if (path === null) return null;
  let at: unknown = root;
  for (const segment of path.split('.')) {
    if (at === null || typeof at !== 'object' || Array.isArray(at) || !Object.hasOwn(at, segment)) return null;
    at = (at as Record<string, unknown>)[segment];
  }
  if (typeof at === 'string') return at;
  if (typeof at === 'number' && Number.isFinite(at)) return String(at);
  if (typeof at === 'boolean') return String(at);
  return null;
}

// ---------------------------------------------------------------------------------------------
// Definition validation and status transitions

export interface IssueDetail {
  param: string;
  message: string;
}

export type Validation =
  | { ok: true }
  | { ok: false; code: 'validation_failed'; param: string; message: string; details: IssueDetail[] };

export const contributionKeyPattern = /^(event\.(id|name|properties(\.[A-Za-z0-9_-]+)+)|customer\.attributes(\.[A-Za-z0-9_-]+)+)$/;

/** Checks a definition as a client wrote it; params name wire fields, every issue in details. */
export function validateChallenge(c: Omit<ChallengeConfig, 'id'>): Validation {
  const issues: IssueDetail[] = [];
  const add = (param: string, message: string) => issues.push({ param, message });

  if (typeof c.name !== 'string' || c.name.length === 0 || c.name.length > challengeLimits.nameCharsMax) {
    add('name', `1 to ${challengeLimits.nameCharsMax} characters.`);
  }
  const event = c.qualifying?.event;
  if (typeof event !== 'string' || event.length === 0 || event.length > challengeLimits.eventNameCharsMax) {
    add('qualifying.event', `An event name of 1 to ${challengeLimits.eventNameCharsMax} characters.`);
  }
  const key = c.contributionKey;
  if (key !== null) {
    if (typeof key !== 'string' || key.length > challengeLimits.contributionKeyCharsMax || !contributionKeyPattern.test(key)) {
      add('contribution_key', 'A path such as event.properties.match_id or customer.attributes.team, or null.');
    }
  }
  const targetMax = key === null ? challengeLimits.targetMax : challengeLimits.keyedTargetMax;
  if (!Number.isSafeInteger(c.target) || c.target < 1 || c.target > targetMax) {
    add('target', `An integer from 1 to ${targetMax}${key === null ? '' : ' with a contribution_key'}.`);
  }
  if (!isPeriodKind(c.period)) add('period', 'One of none, daily, weekly, monthly.');
  if (!enrollmentModes.includes(c.enrollment)) add('enrollment', 'One of automatic, explicit.');
  if (typeof c.repeatable !== 'boolean') add('repeatable', 'A boolean.');
  if (!challengeStatuses.includes(c.status)) add('status', 'One of draft, active, paused, ended.');
  if (c.startsAtMs !== null && !Number.isSafeInteger(c.startsAtMs)) add('starts_at', 'A timestamp.');
  if (c.endsAtMs !== null && !Number.isSafeInteger(c.endsAtMs)) add('ends_at', 'A timestamp.');
  if (c.startsAtMs !== null && c.endsAtMs !== null && c.endsAtMs <= c.startsAtMs) add('ends_at', 'Must be after starts_at.');
  if (!Array.isArray(c.completionActions)) add('completion_actions', 'A list of actions.');
  else if (c.completionActions.length > challengeLimits.completionActionsMax) {
    add('completion_actions', `At most ${challengeLimits.completionActionsMax} actions.`);
  }

  const first = issues[0];
  if (first === undefined) return { ok: true };
  const more = issues.length > 1 ? ` (and ${issues.length - 1} more; see details)` : '';
  return { ok: false, code: 'validation_failed', param: first.param, message: `${first.param}: ${first.message}${more}`, details: issues };
}

/**
 * Status transitions (spec part 3 shows none; ours): draft -> active | ended; active <-> paused;
 * active | paused -> ended; ended is final. Staying in the same status is allowed (a no-op).
 */
export function canTransitionChallenge(from: ChallengeStatus, to: ChallengeStatus): { ok: true } | { ok: false; code: 'invalid_state'; message: string } {
  if (from === to) return { ok: true };
  const allowedNext: Record<ChallengeStatus, readonly ChallengeStatus[]> = {
    draft: ['active', 'ended'],
    active: ['paused', 'ended'],
    paused: ['active', 'ended'],
    ended: [],
  };
  if (allowedNext[from].includes(to)) return { ok: true };
  return { ok: false, code: 'invalid_state', message: `A challenge cannot go from ${from} to ${to}.` };
}

function has<T>(record: Record<string, T>, key: string): boolean {
  return Object.hasOwn(record, key);
}

function get<T>(record: Record<string, T>, key: string): T | undefined {
  return Object.hasOwn(record, key) ? record[key] : undefined;
}
