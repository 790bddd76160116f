// Tier programs: validation of a program, placement of one customer on a program's levels from a
// metric (lifetime earned, earned over rolling days, or balance), `tier.changed` facts with
// direction and display titles, the downgrade-check schedule, and the catalog's edit guards.
// Invariants: levels ascend strictly from threshold 0; a customer holds exactly one level per
// program; upgrades apply at once, downgrades wait for a due downgrade check when one is configured.
// Pure: time is ctx.nowMs, metrics are read by the caller beforehand; never throws.
import type { ErrorCode } from '../errors/codes.js';

export type TierBasis = 'lifetime_earned' | 'earned_rolling_days' | 'balance';

export const tierBases: readonly TierBasis[] = ['lifetime_earned', 'earned_rolling_days', 'balance'];

export interface TierLevel {
  key: string;
  title: string;
  /** Minimum metric value (currency minor units) to hold this level. */
  threshold: number;
}

export interface TierProgram {
  id: string;
  key: string;
  name?: string;
  /** Currency key whose movements feed the metric. */
  currency: string;
  basis: TierBasis;
  /** Required for earned_rolling_days, absent otherwise. */
  rollingDays?: number | null;
  /** Ascending thresholds, the first 0. */
  levels: TierLevel[];
  /** With a check, downgrades wait for it; without one they apply at the next evaluation. */
  downgradeCheck?: { everyDays: number } | null;
  /**
   * Levels an edit removed, kept (with their title and threshold) until the edit's move of their
   * holders has finished: a holder still on one is moved by them, and tier.changed compares
   * thresholds through them (the catalog's pending move).
   */
  retiredLevels?: RetiredLevel[] | null;
}

/** A level removed by an edit whose holders may not all have moved yet. */
export interface RetiredLevel {
  key: string;
  title: string;
  threshold: number;
  /** The edit's reassign_to; null: its holders are re-placed by their metric. */
  reassignTo: string | null;
}

/** One customer's standing in one program. */
export interface TierState {
  programId: string;
  level: string;
  sinceMs: number;
  /** When the next downgrade check is due; null when the program has no check. */
  nextDowngradeCheckMs: number | null;
}

/** A customer's tiers, by program id. */
export type TiersState = Record<string, TierState>;

export interface TierMetrics {
  lifetimeEarned: number;
  balance: number;
  /** Earned within the program's rolling window, when the caller precomputed it. */
  earnedRolling?: number;
  /** Earned since an instant (inclusive); used for earned_rolling_days when earnedRolling is absent. */
  earnedSince?: (sinceMs: number) => number;
}

export interface TierCtx {
  nowMs: number;
}

export type TierDirection = 'up' | 'down';

export type TierFact =
  | {
      /** Spec event kind. Titles travel with the fact so notifications need no catalog lookup. */
      kind: 'tier.changed';
      programId: string;
      programKey: string;
      level: string;
      levelTitle: string;
      /** The level held before; on a first placement above the base level, the base level. */
      previousLevel: string;
      previousLevelTitle: string;
      direction: TierDirection;
      /** The metric value that placed the customer. */
      value: number;
      atMs: number;
      nextDowngradeCheckMs: number | null;
    }
  | {
      /** First placement on the base level (no change to announce, but the state starts here). */
      kind: 'tier.assigned';
      programId: string;
      programKey: string;
      level: string;
      levelTitle: string;
      value: number;
      atMs: number;
      nextDowngradeCheckMs: number | null;
    }
  | {
      /** A downgrade check ran (and kept the level, or came with a tier.changed); next one scheduled. */
      kind: 'tier.downgrade_check_scheduled';
      programId: string;
      nextDowngradeCheckMs: number | null;
      atMs: number;
    };

export interface TierEvaluation {
  facts: TierFact[];
  /** The level held after the facts apply. */
  level: string;
  /** The level the metric qualifies for now (differs from `level` while a downgrade waits for its check). */
  qualifiedLevel: string;
  value: number;
}

export interface EvaluateOptions {
  /**
   * Apply a downgrade now even when a check is configured and not yet due. Used by an operator's
   * reevaluation (a PATCH with `reevaluate: true` after a basis change).
   */
  immediate?: boolean;
}

export const tierLimits = {
  levelsMax: 50,
  levelKeyCharsMax: 64,
  levelTitleCharsMax: 120,
  /** Earnings by date are kept for 366 days (ledger earnedDaysKept). */
  rollingDaysMax: 366,
  downgradeEveryDaysMax: 3650,
} as const;

export const dayMs = 86_400_000;

// ---------------------------------------------------------------------------------------------
// Validation

export interface IssueDetail {
  param: string;
  message: string;
}

export type Validation =
  | { ok: true }
  | { ok: false; code: 'validation_failed'; param: string; message: string; details: IssueDetail[] };

export const levelKeyPattern = /^[A-Za-z0-9][A-Za-z0-9_-]*$/;

/**
 * Checks a program as a client wrote it. Params name wire fields (`levels[2].threshold`,
 * `rolling_days`, `downgrade_check.every_days`); every issue is listed in details.
 */
export function validateTierProgram(program: Omit<TierProgram, 'id' | 'key'> & { key?: string }): Validation {
  const issues: IssueDetail[] = [];
  const add = (param: string, message: string) => issues.push({ param, message });

  if (!tierBases.includes(program.basis)) add('basis', `basis must be one of ${tierBases.join(', ')}.`);
  if (typeof program.currency !== 'string' || program.currency.length === 0) add('currency', 'Name a currency key.');

  const rolling = program.rollingDays ?? null;
  if (program.basis === 'earned_rolling_days') {
    if (rolling === null) add('rolling_days', 'Required when basis is earned_rolling_days.');
    else if (!Number.isSafeInteger(rolling) || rolling < 1 || rolling > tierLimits.rollingDaysMax) {
      add('rolling_days', `An integer from 1 to ${tierLimits.rollingDaysMax}.`);
    }
  } else if (rolling !== null) {
    add('rolling_days', 'Only allowed when basis is earned_rolling_days.');
  }

  const check = program.downgradeCheck ?? null;
  if (check !== null) {
    const every = check.everyDays;
    if (!Number.isSafeInteger(every) || every < 1 || every > tierLimits.downgradeEveryDaysMax) {
      add('downgrade_check.every_days', `An integer from 1 to ${tierLimits.downgradeEveryDaysMax}.`);
    }
  }

  const levels = Array.isArray(program.levels) ? program.levels : [];
  if (levels.length === 0) add('levels', 'At least one level, the first with threshold 0.');
  if (levels.length > tierLimits.levelsMax) add('levels', `At most ${tierLimits.levelsMax} levels.`);
  const seen = new Set<string>();
  let previous: number | null = null;
  levels.forEach((level, i) => {
    const at = `levels[${i}]`;
    if (typeof level.key !== 'string' || level.key.length === 0 || level.key.length > tierLimits.levelKeyCharsMax) {
      add(`${at}.key`, `1 to ${tierLimits.levelKeyCharsMax} characters.`);
    } else if (!levelKeyPattern.test(level.key)) {
      add(`${at}.key`, 'Letters, digits, "_" and "-", starting with a letter or digit.');
    } else if (seen.has(level.key)) {
      add(`${at}.key`, `Duplicate level key "${level.key}".`);
    } else {
      seen.add(level.key);
    }
    if (typeof level.title !== 'string' || level.title.length === 0 || level.title.length > tierLimits.levelTitleCharsMax) {
      add(`${at}.title`, `1 to ${tierLimits.levelTitleCharsMax} characters.`);
    }
    const threshold = level.threshold;
    if (!Number.isSafeInteger(threshold) || threshold < 0) {
      add(`${at}.threshold`, 'A non-negative integer (currency minor units).');
      return;
    }
    if (i === 0 && threshold !== 0) add(`${at}.threshold`, 'The first level starts at threshold 0.');
    if (i > 0 && previous !== null && threshold <= previous) {
      add(`${at}.threshold`, `Thresholds ascend strictly: greater than ${previous}.`);
    }
    previous = threshold;
  });

  const first = issues[0];
  if (first === undefined) return { ok: true };
  const more = issues.length > 1 ? ` (and ${issues.length - 1} more; see details)` : '';
  return { ok: false, code: 'validation_failed', param: first.param, message: `${first.param}: ${first.message}${more}`, details: issues };
}

// ---------------------------------------------------------------------------------------------
// Evaluation

/** The metric value a program places a customer by. */
export function tierValue(program: TierProgram, metrics: TierMetrics, nowMs: number): number {
  switch (program.basis) {
    case 'lifetime_earned':
      return metrics.lifetimeEarned;
    case 'balance':
      return metrics.balance;
    case 'earned_rolling_days': {
      if (metrics.earnedRolling !== undefined) return metrics.earnedRolling;
      if (metrics.earnedSince !== undefined) return metrics.earnedSince(rollingWindowStartMs(program, nowMs));
      return 0;
    }
  }
}

/** First instant inside the rolling window (nowMs - rollingDays days); nowMs for other bases. */
export function rollingWindowStartMs(program: TierProgram, nowMs: number): number {
  if (program.basis !== 'earned_rolling_days') return nowMs;
  return nowMs - (program.rollingDays ?? 0) * dayMs;
}

/** Index of the highest level whose threshold the value reaches (0 for anything below, e.g. a negative balance). */
export function levelIndexFor(program: TierProgram, value: number): number {
  let index = 0;
  for (let i = 0; i < program.levels.length; i++) {
    const level = program.levels[i]!;
    if (value >= level.threshold) index = i;
    else break;
  }
  return index;
}

/** A level's display title, a retired level's too; else its key. */
export function levelTitle(program: TierProgram, levelKey: string): string {
  const level = program.levels.find((l) => l.key === levelKey) ?? retiredLevel(program, levelKey);
  return level === undefined || level.title.length === 0 ? levelKey : level.title;
}

/** The record of a level the program no longer has, while its edit's move is owed. */
export function retiredLevel(program: TierProgram, levelKey: string): RetiredLevel | undefined {
  if (program.levels.some((l) => l.key === levelKey)) return undefined;
  return program.retiredLevels?.find((l) => l.key === levelKey);
}

/** A level's threshold, a retired level's too; undefined for a level the program never knew. */
function thresholdOf(program: TierProgram, levelKey: string): number | undefined {
  return (program.levels.find((l) => l.key === levelKey) ?? retiredLevel(program, levelKey))?.threshold;
}

/**
 * Up when `to` needs more than `from` did, by thresholds (a retired level's recorded one counts);
 * a level the program never knew counts as above (down).
 */
function directionBetween(program: TierProgram, from: string, to: string): TierDirection {
  const a = thresholdOf(program, from);
  const b = thresholdOf(program, to);
  return a !== undefined && b !== undefined && b > a ? 'up' : 'down';
}

/**
 * Places one customer on a program. Rules, in order:
 * 1. First evaluation (no state): placed at the qualified level at once. On the base level that is
 *    `tier.assigned`; above it, `tier.changed` up from the base level (a level-up to announce).
 * 2. Qualified above the held level: `tier.changed` up at once.
 * 3. Qualified below the held level: without a downgrade check, `tier.changed` down at once; with
 *    one, only when the check is due (nowMs >= nextDowngradeCheckMs, a missing date counts as due)
 *    or `options.immediate`. A due check with no downgrade emits only the next schedule.
 * 4. The check schedule: every tier change restarts it at atMs + everyDays (a customer keeps a new
 *    level at least that long); a check that keeps the level moves it forward in whole steps of
 *    everyDays from the previous due date, so the cadence does not drift with event timing.
 * 5. A held level the program no longer has (removed by an edit whose move has not reached this
 *    customer yet) is replaced at once, as if the move had come first: with the edit's reassign_to
 *    (program.retiredLevels), the customer lands there, or higher when it qualifies higher, or on
 *    the qualified level when the program has no downgrade check; otherwise on the qualified
 *    level. Direction compares the thresholds (the retired level's recorded one); a level the
 *    program never knew counts as above (down).
 * A downgrade goes straight to the qualified level, not one step at a time.
 */
export function evaluateTier(
  program: TierProgram,
  state: TierState | null,
  metrics: TierMetrics,
  ctx: TierCtx,
  options: EvaluateOptions = {},
): TierEvaluation {
  const value = tierValue(program, metrics, ctx.nowMs);
  const base = program.levels[0];
  if (base === undefined) return { facts: [], level: state?.level ?? '', qualifiedLevel: '', value };
  const qualifiedIndex = levelIndexFor(program, value);
  const qualified = program.levels[qualifiedIndex]!;
  const everyMs = downgradeEveryMs(program);
  const freshCheckMs = everyMs === null ? null : ctx.nowMs + everyMs;

  if (state === null) {
    if (qualifiedIndex === 0) {
      const fact: TierFact = {
        kind: 'tier.assigned',
        programId: program.id,
        programKey: program.key,
        level: base.key,
        levelTitle: levelTitle(program, base.key),
        value,
        atMs: ctx.nowMs,
        nextDowngradeCheckMs: freshCheckMs,
      };
      return { facts: [fact], level: base.key, qualifiedLevel: base.key, value };
    }
    const fact = changed(program, base.key, qualified.key, 'up', value, ctx.nowMs, freshCheckMs);
    return { facts: [fact], level: qualified.key, qualifiedLevel: qualified.key, value };
  }

  const heldIndex = program.levels.findIndex((l) => l.key === state.level);
  if (heldIndex < 0) {
    const reassignIndex = program.levels.findIndex((l) => l.key === retiredLevel(program, state.level)?.reassignTo);
    const to = reassignIndex >= 0 && reassignIndex > qualifiedIndex && everyMs !== null ? program.levels[reassignIndex]! : qualified;
    const fact = changed(program, state.level, to.key, directionBetween(program, state.level, to.key), value, ctx.nowMs, freshCheckMs);
    return { facts: [fact], level: to.key, qualifiedLevel: qualified.key, value };
  }
  if (qualifiedIndex > heldIndex) {
    const fact = changed(program, state.level, qualified.key, 'up', value, ctx.nowMs, freshCheckMs);
    return { facts: [fact], level: qualified.key, qualifiedLevel: qualified.key, value };
  }

  // Held or below: only the downgrade check can move the customer, or immediately without one.
  if (everyMs === null) {
    if (qualifiedIndex < heldIndex) {
      const fact = changed(program, state.level, qualified.key, 'down', value, ctx.nowMs, null);
      return { facts: [fact], level: qualified.key, qualifiedLevel: qualified.key, value };
    }
    if (state.nextDowngradeCheckMs !== null) {
      // The program's check was removed: clear the stale schedule.
      const fact: TierFact = { kind: 'tier.downgrade_check_scheduled', programId: program.id, nextDowngradeCheckMs: null, atMs: ctx.nowMs };
      return { facts: [fact], level: state.level, qualifiedLevel: qualified.key, value };
    }
    return { facts: [], level: state.level, qualifiedLevel: qualified.key, value };
  }

  const due = state.nextDowngradeCheckMs === null || ctx.nowMs >= state.nextDowngradeCheckMs;
  if (qualifiedIndex < heldIndex && (due || options.immediate === true)) {
    const fact = changed(program, state.level, qualified.key, 'down', value, ctx.nowMs, freshCheckMs);
    return { facts: [fact], level: qualified.key, qualifiedLevel: qualified.key, value };
  }
  if (due) {
    const next = state.nextDowngradeCheckMs === null ? freshCheckMs! : nextCheckAfter(state.nextDowngradeCheckMs, everyMs, ctx.nowMs);
    const fact: TierFact = { kind: 'tier.downgrade_check_scheduled', programId: program.id, nextDowngradeCheckMs: next, atMs: ctx.nowMs };
    return { facts: [fact], level: state.level, qualifiedLevel: qualified.key, value };
  }
  return { facts: [], level: state.level, qualifiedLevel: qualified.key, value };
}

/**
 * Moves a customer to a named level (the catalog's `reassign_to` when a held level is removed).
 * Direction compares thresholds: the held level's in `program`, or, for a removed level, the one
 * recorded in `program.retiredLevels`; a level the program never knew counts as above (down).
 * No facts when the customer already holds it or the level is unknown.
 */
export function reassignTier(program: TierProgram, state: TierState, toLevel: string, value: number, ctx: TierCtx): TierFact[] {
  if (state.level === toLevel) return [];
  if (!program.levels.some((l) => l.key === toLevel)) return [];
  const everyMs = downgradeEveryMs(program);
  return [changed(program, state.level, toLevel, directionBetween(program, state.level, toLevel), value, ctx.nowMs, everyMs === null ? null : ctx.nowMs + everyMs)];
}

/**
 * Moves a holder of a level the program no longer has (an edit's move): to `toLevel` when given,
 * else to the retired level's reassign_to, else re-placed by its metric (evaluateTier, rule 5).
 * No facts for a level the program has: a repeat, or a customer an evaluation already moved.
 */
export function moveOffRemovedLevel(program: TierProgram, state: TierState, toLevel: string | null, metrics: TierMetrics, ctx: TierCtx): TierFact[] {
  if (program.levels.some((l) => l.key === state.level)) return [];
  const to = toLevel ?? retiredLevel(program, state.level)?.reassignTo ?? null;
  if (to !== null && program.levels.some((l) => l.key === to)) return reassignTier(program, state, to, tierValue(program, metrics, ctx.nowMs), ctx);
  return evaluateTier(program, state, metrics, ctx).facts;
}

/**
 * Gives a holder its first downgrade check date after the program's check was added, or an
 * earlier one after it was shortened: nowMs + everyDays, unless an earlier date is already set.
 * No facts without a check (a removed check's stale date is cleared by the next evaluation).
 */
export function scheduleDowngradeCheck(program: TierProgram, state: TierState, ctx: TierCtx): TierFact[] {
  const everyMs = downgradeEveryMs(program);
  if (everyMs === null) return [];
  const next = ctx.nowMs + everyMs;
  if (state.nextDowngradeCheckMs !== null && state.nextDowngradeCheckMs <= next) return [];
  return [{ kind: 'tier.downgrade_check_scheduled', programId: program.id, nextDowngradeCheckMs: next, atMs: ctx.nowMs }];
}

/** When this customer's tier needs the scheduler next (a downgrade check), or null. */
export function nextTierTimerMs(state: TierState): number | null {
  return state.nextDowngradeCheckMs;
}

function downgradeEveryMs(program: TierProgram): number | null {
  const check = program.downgradeCheck ?? null;
  if (check === null || !Number.isSafeInteger(check.everyDays) || check.everyDays < 1) return null;
  return check.everyDays * dayMs;
}

/** The first due date after nowMs on the grid dueMs + k * everyMs. */
function nextCheckAfter(dueMs: number, everyMs: number, nowMs: number): number {
  const steps = Math.floor((nowMs - dueMs) / everyMs) + 1;
  return dueMs + steps * everyMs;
}

function changed(
  program: TierProgram,
  from: string,
  to: string,
  direction: TierDirection,
  value: number,
  atMs: number,
  nextDowngradeCheckMs: number | null,
): TierFact {
  return {
    kind: 'tier.changed',
    programId: program.id,
    programKey: program.key,
    level: to,
    levelTitle: levelTitle(program, to),
    previousLevel: from,
    previousLevelTitle: levelTitle(program, from),
    direction,
    value,
    atMs,
    nextDowngradeCheckMs,
  };
}

/** Applies one fact to one program's state. */
export function evolveTier(state: TierState | null, fact: TierFact): TierState | null {
  switch (fact.kind) {
    case 'tier.assigned':
    case 'tier.changed':
      return { programId: fact.programId, level: fact.level, sinceMs: fact.atMs, nextDowngradeCheckMs: fact.nextDowngradeCheckMs };
    case 'tier.downgrade_check_scheduled':
      if (state === null) return null;
      state.nextDowngradeCheckMs = fact.nextDowngradeCheckMs;
      return state;
  }
}

/** A private copy to evolve (evolveTier changes a held level's check date in place). */
export function cloneTiers(tiers: Readonly<TiersState>): TiersState {
  const out: TiersState = {};
  for (const k of Object.keys(tiers)) out[k] = { ...tiers[k]! };
  return out;
}

/** Applies one fact to a customer's tiers (all programs). Mutates and returns `tiers`. */
export function evolveTiers(tiers: TiersState, fact: TierFact): TiersState {
  const next = evolveTier(tiers[fact.programId] ?? null, fact);
  if (next !== null) tiers[fact.programId] = next;
  return tiers;
}

// ---------------------------------------------------------------------------------------------
// Catalog guards (answer 409 resource_in_use through the HTTP table)

export type Guard = { ok: true } | { ok: false; code: ErrorCode; param: string; message: string };

const allowed: Guard = { ok: true };

/**
 * A level that customers hold may be removed only with `reassign_to` naming a level that remains.
 * `remainingLevels` are the level keys after the edit (defaults to the program's minus this one).
 */
export function canRemoveLevel(
  program: TierProgram,
  levelKey: string,
  holdersCount: number,
  reassignTo: string | null = null,
  remainingLevels: readonly string[] = program.levels.map((l) => l.key).filter((k) => k !== levelKey),
): Guard {
  if (holdersCount <= 0) return allowed;
  if (reassignTo === null) {
    return {
      ok: false,
      code: 'resource_in_use',
      param: 'levels',
      message: `Level "${levelKey}" of tier program ${program.id} is held by ${holdersCount} customer(s); name reassign_to.`,
    };
  }
  if (reassignTo === levelKey || !remainingLevels.includes(reassignTo)) {
    return { ok: false, code: 'validation_failed', param: 'reassign_to', message: 'reassign_to must name a level that remains in the program.' };
  }
  return allowed;
}

/**
 * Changing what places customers (the basis, or rolling_days of a rolling basis) needs
 * `reevaluate: true`, after which the caller re-runs evaluateTier with `immediate: true` for every
 * holder. Threshold edits need no flag: they apply at each customer's next evaluation.
 */
export function canChangeBasis(before: TierProgram, after: Pick<TierProgram, 'basis' | 'rollingDays'>, reevaluate: boolean): Guard {
  if (!needsReevaluation(before, after) || reevaluate) return allowed;
  const param = before.basis !== after.basis ? 'basis' : 'rolling_days';
  return {
    ok: false,
    code: 'resource_in_use',
    param,
    message: `Changing ${param} of tier program ${before.id} re-places its customers; send reevaluate: true.`,
  };
}

export function needsReevaluation(before: TierProgram, after: Pick<TierProgram, 'basis' | 'rollingDays'>): boolean {
  if (before.basis !== after.basis) return true;
  return before.basis === 'earned_rolling_days' && (before.rollingDays ?? null) !== (after.rollingDays ?? null);
}

/**
 * Every guard for a program edit at once, in order: the basis, then each removed held level.
 * `holdersByLevel` counts customers per level key (from the read model).
 */
export function checkTierProgramEdit(
  before: TierProgram,
  after: TierProgram,
  holdersByLevel: Readonly<Record<string, number>>,
  options: { reassignTo?: string | null; reevaluate?: boolean } = {},
): Guard {
  const basis = canChangeBasis(before, after, options.reevaluate === true);
  if (!basis.ok) return basis;
  const remaining = after.levels.map((l) => l.key);
  for (const level of before.levels) {
    if (remaining.includes(level.key)) continue;
    const guard = canRemoveLevel(before, level.key, holdersByLevel[level.key] ?? 0, options.reassignTo ?? null, remaining);
    if (!guard.ok) return guard;
  }
  return allowed;
}
