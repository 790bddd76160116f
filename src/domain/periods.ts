// Period keys for period-scoped mechanics (challenges; later streaks and leagues): which period an
// instant falls in, in the environment's IANA time zone, and when that period ends. Pure: the
// instant is always ctx.nowMs passed in, never the wall clock. DST-correct because the boundaries
// are local midnights computed by luxon. Keys sort lexicographically in time order within a kind.
// An unknown zone falls back to UTC (validate zones at the wire with isValidTimeZone); never throws.
import { DateTime, IANAZone } from 'luxon';

export type PeriodKind = 'none' | 'daily' | 'weekly' | 'monthly';

export const periodKinds: readonly PeriodKind[] = ['none', 'daily', 'weekly', 'monthly'];

/** The key of the single period of kind 'none'. */
export const allTimeKey = 'all';

export interface PeriodBounds {
  /** 'all', '2026-11-23', '2026-W48' (ISO week, Monday start), '2026-11'. */
  key: string;
  /** First instant of the period (inclusive); null for 'none'. */
  startMs: number | null;
  /** First instant of the next period (exclusive end); null for 'none' (never ends). */
  endMs: number | null;
}

export function isPeriodKind(value: unknown): value is PeriodKind {
  return value === 'none' || value === 'daily' || value === 'weekly' || value === 'monthly';
}

export function isValidTimeZone(timeZone: string): boolean {
  return typeof timeZone === 'string' && timeZone.length > 0 && IANAZone.isValidZone(timeZone);
}

/** The period key of `nowMs` in `timeZone`. */
export function periodKey(kind: PeriodKind, nowMs: number, timeZone: string): string {
  return periodBounds(kind, nowMs, timeZone).key;
}

/** When the period containing `nowMs` ends (the next period's first instant); null for 'none'. */
export function periodEndMs(kind: PeriodKind, nowMs: number, timeZone: string): number | null {
  return periodBounds(kind, nowMs, timeZone).endMs;
}

/** When the period containing `nowMs` started; null for 'none'. */
export function periodStartMs(kind: PeriodKind, nowMs: number, timeZone: string): number | null {
  return periodBounds(kind, nowMs, timeZone).startMs;
}

const noneBounds: PeriodBounds = { key: allTimeKey, startMs: null, endMs: null };

// Memo of the last period seen per (kind, zone): an event stream mostly hits the same period, and
// a hit is a range check instead of luxon arithmetic. Deterministic (a pure function's cache);
// bounded so a stream of odd zones cannot grow it.
const memo = new Map<string, { key: string; startMs: number; endMs: number }>();
const memoEntriesMax = 256;

export function periodBounds(kind: PeriodKind, nowMs: number, timeZone: string): PeriodBounds {
  if (kind === 'none') return noneBounds;
  const memoKey = `${kind}\u0000${timeZone}`;
  const hit = memo.get(memoKey);
  if (hit !== undefined && nowMs >= hit.startMs && nowMs < hit.endMs) {
    return { key: hit.key, startMs: hit.startMs, endMs: hit.endMs };
  }
  const computed = computeBounds(kind, nowMs, timeZone);
  if (memo.size >= memoEntriesMax && !memo.has(memoKey)) memo.clear();
  memo.set(memoKey, computed);
  return { key: computed.key, startMs: computed.startMs, endMs: computed.endMs };
}

function computeBounds(kind: Exclude<PeriodKind, 'none'>, nowMs: number, timeZone: string) {
  const zone = isValidTimeZone(timeZone) ? timeZone : 'UTC';
  let local = DateTime.fromMillis(nowMs, { zone });
  if (!local.isValid) local = DateTime.fromMillis(0, { zone: 'UTC' });
  switch (kind) {
    case 'daily': {
      // startOf('day') on a day whose midnight does not exist (a DST jump at 00:00) gives the
      // first existing instant; plus({days: 1}) then startOf('day') lands on the next local midnight.
      const start = local.startOf('day');
      const end = start.plus({ days: 1 }).startOf('day');
      return { key: `${pad(local.year, 4)}-${pad(local.month, 2)}-${pad(local.day, 2)}`, startMs: start.toMillis(), endMs: end.toMillis() };
    }
    case 'weekly': {
      // luxon's startOf('week') is the ISO week (Monday) unless locale weeks are asked for.
      const start = local.startOf('week');
      const end = start.plus({ weeks: 1 }).startOf('week');
      return { key: `${pad(local.weekYear, 4)}-W${pad(local.weekNumber, 2)}`, startMs: start.toMillis(), endMs: end.toMillis() };
    }
    case 'monthly': {
      const start = local.startOf('month');
      const end = start.plus({ months: 1 }).startOf('month');
      return { key: `${pad(local.year, 4)}-${pad(local.month, 2)}`, startMs: start.toMillis(), endMs: end.toMillis() };
    }
  }
}

function pad(n: number, width: number): string {
  return String(n).padStart(width, '0');
}
