// Historical counters: how many events of one name (optionally filtered on event.properties.*) a
// customer sent within a window. Windows: `lifetime`, `rolling_days` (the last N UTC days,
// today included, kept as one bucket per day) and `period` (the current calendar day, week or
// month in the environment's time zone). Counting happens in the customer's step: decide computes
// one bump per counter the event matches (`counterBumps`), the `counter.counted` fact carries the
// bumps, and evolve applies them; a backfill hands the customer a historical base
// (`counter.backfilled`) built by the very same bump and apply functions over past events, so
// live and historical counts agree. Per-customer state is self-describing (window length, period
// end) so reading a count needs only the instant. Pure: no clock, no I/O, never throws.

import { type PeriodKind, periodBounds } from './periods.js';
import { compileRule, type EvalInput, evaluatePlan, type RulePlan, ruleBounds, validateRule } from './rules/index.js';

export const dayMs = 86_400_000;

export type CounterPeriod = 'day' | 'week' | 'month';
export const counterPeriods: readonly CounterPeriod[] = ['day', 'week', 'month'];

export type CounterWindow = { kind: 'lifetime' } | { kind: 'rolling_days'; days: number } | { kind: 'period'; period: CounterPeriod };

export const counterLimits = {
  rollingDaysMax: 365,
  /** Counter definitions per environment (each is evaluated for every event of its name). */
  perEnvironmentMax: 200,
} as const;

export type CounterStatus = 'backfilling' | 'ready';

/** What the actor needs of one definition (loaded before the step). */
export interface CounterDef {
  id: string;
  name: string;
  event: string;
  window: CounterWindow;
  /** The compiled filter (a rule plan whose conditions read only event.properties.*); null: every event counts. */
  filter: RulePlan | null;
  status: CounterStatus;
}

/** The environment's counters, passed with each event like RulesContext. */
export interface CountersContext {
  defs: readonly CounterDef[];
  timeZone: string;
}

/** One customer's count for one counter. Plain data (msgpack-safe). */
export interface CounterState {
  /** lifetime: the total; period: the count of period `key`; rolling: unused (0). */
  n: number;
  /** period only: the period counted and its end (first instant of the next period). */
  key?: string;
  endMs?: number;
  /** rolling only: the window length in days and day buckets [utc day index, count], ascending. */
  days?: number;
  b?: Array<[number, number]>;
  /** Set once the historical base of this customer's own events was applied (a second is refused). */
  based?: boolean;
  /**
   * Customers merged into this one whose historical base this count holds (applied here after the
   * merge, or theirs before it): a backfill counts events by the customer that recorded them, so a
   * merged customer's base arrives under its own id and is taken once.
   */
  basedFrom?: string[];
}

/** A customer's counters, by counter id. */
export type CountersState = Record<string, CounterState>;

/** One counter moved by one event. */
export type CounterBump =
  | { id: string; w: 'l' }
  | { id: string; w: 'r'; d: number; days: number }
  | { id: string; w: 'p'; key: string; endMs: number };

export type CounterFact =
  /** The counters an event bumped (journaled with the event; the projector marks the event row). */
  | { kind: 'counter.counted'; eventId: string; bumps: CounterBump[] }
  /**
   * The historical base of a backfill (events recorded before live counting began): this
   * customer's own, or (`from`) those of a customer merged into it, recorded under that id.
   */
  | { kind: 'counter.backfilled'; id: string; base: CounterState; atMs: number; from?: string }
  /** A merged customer's counts joined into the survivor's (its events now count as the survivor's). */
  | { kind: 'counter.merged'; from: string; counters: CountersState; atMs: number };

export interface CountedEvent {
  name: string;
  occurredAtMs: number;
  properties: Record<string, unknown>;
}

const periodKinds: Record<CounterPeriod, PeriodKind> = { day: 'daily', week: 'weekly', month: 'monthly' };

export function utcDay(ms: number): number {
  return Math.floor(ms / dayMs);
}

function noLimits(): number {
  return 0;
}
const emptyCounters: Record<string, number | undefined> = {};
const noneReady = (): boolean => false;

/** True when the event passes the definition's name and filter. */
export function counterMatches(def: CounterDef, event: CountedEvent): boolean {
  if (def.event !== event.name) return false;
  if (def.filter === null) return true;
  const input: EvalInput = {
    event: { name: event.name, properties: event.properties, trust: 'merchant_asserted' },
    customer: { attributes: emptyCounters, counters: emptyCounters, countersReady: noneReady, segments: [], tiers: {}, externalId: null },
    limitCounts: noLimits,
  };
  // The filter plan has no trust minimum, counters, limits or segments: only its conditions decide.
  return evaluatePlan(def.filter, input).fired;
}

/**
 * The bump an event makes on one counter at nowMs, or null. Events are placed by occurred_at; an
 * event older than a rolling window, or in a period before the one the customer's count is in,
 * changes nothing now (it would only count in a window that is already over).
 */
export function bumpFor(def: CounterDef, event: CountedEvent, state: CounterState | undefined, timeZone: string, nowMs: number): CounterBump | null {
  if (!counterMatches(def, event)) return null;
  const w = def.window;
  switch (w.kind) {
    case 'lifetime':
      return { id: def.id, w: 'l' };
    case 'rolling_days': {
      const d = utcDay(event.occurredAtMs);
      if (d <= utcDay(nowMs) - w.days) return null;
      return { id: def.id, w: 'r', d, days: w.days };
    }
    case 'period': {
      const p = periodBounds(periodKinds[w.period], event.occurredAtMs, timeZone);
      if (p.endMs === null || p.endMs <= nowMs) return null;
      if (state?.key !== undefined && p.key < state.key) return null;
      return { id: def.id, w: 'p', key: p.key, endMs: p.endMs };
    }
  }
}

/** The bumps of one event over the environment's counters (empty when none matches). */
export function counterBumps(ctx: CountersContext, event: CountedEvent, counters: CountersState, nowMs: number): CounterBump[] {
  let out: CounterBump[] | null = null;
  for (const def of ctx.defs) {
    if (def.event !== event.name) continue;
    const b = bumpFor(def, event, counters[def.id], ctx.timeZone, nowMs);
    if (b !== null) (out ??= []).push(b);
  }
  return out ?? noBumps;
}
const noBumps: CounterBump[] = [];

/** A private copy to bump (applyBump changes its state in place). */
export function cloneCounterState(s: CounterState): CounterState {
  const c: CounterState = { ...s };
  if (s.b !== undefined) c.b = s.b.map((e): [number, number] => [e[0], e[1]]);
  if (s.basedFrom !== undefined) c.basedFrom = [...s.basedFrom];
  return c;
}

/** Applies one bump. Mutates and returns the counter's state. */
export function applyBump(state: CounterState | undefined, bump: CounterBump): CounterState {
  const s: CounterState = state ?? { n: 0 };
  switch (bump.w) {
    case 'l':
      s.n += 1;
      return s;
    case 'r':
      addBucket(s, bump.d, 1, bump.days);
      return s;
    case 'p':
      if (s.key === bump.key) s.n += 1;
      else if (s.key === undefined || bump.key > s.key) {
        s.key = bump.key;
        s.endMs = bump.endMs;
        s.n = 1;
      }
      return s;
  }
}

/** Adds to a day bucket and keeps only the `days` most recent days (relative to the newest bucket). */
function addBucket(s: CounterState, day: number, count: number, days: number): void {
  s.days = days;
  const b = (s.b ??= []);
  let i = b.length;
  while (i > 0 && b[i - 1]![0] > day) i--;
  if (i > 0 && b[i - 1]![0] === day) b[i - 1]![1] += count;
  else b.splice(i, 0, [day, count]);
  const newest = b[b.length - 1]![0];
  let drop = 0;
  while (drop < b.length && b[drop]![0] <= newest - days) drop++;
  if (drop > 0) b.splice(0, drop);
}

/** Merges this customer's own historical base into the live state and marks it applied. */
export function applyBase(state: CounterState | undefined, base: CounterState): CounterState {
  const s = addBase(state, base);
  s.based = true;
  return s;
}

/** True when the historical base of `from`'s events (this customer's own when from is its id) is in the count. */
export function hasBase(state: CounterState | undefined, customerId: string, from: string): boolean {
  return from === customerId ? state?.based === true : state?.basedFrom?.includes(from) === true;
}

/** Adds a base's counts (sums in the same window; the later period wins). Mutates and returns the state. */
function addBase(state: CounterState | undefined, base: CounterState): CounterState {
  const s: CounterState = state ?? { n: 0 };
  if (base.b !== undefined && base.days !== undefined) {
    for (const [day, count] of base.b) addBucket(s, day, count, base.days);
    return s;
  }
  if (base.key !== undefined) {
    if (s.key === base.key) s.n += base.n;
    else if (s.key === undefined || base.key > s.key) {
      s.key = base.key;
      s.endMs = base.endMs;
      s.n = base.n;
    }
    return s;
  }
  s.n += base.n;
  return s;
}

/**
 * The count of customer `from`, merged into this one, joined into this one's, as a historical base
 * is (lifetime and rolling day buckets add; a period adds when it is the same period, else the
 * later period wins). Whether this customer's own base was applied stays as it was; the bases the
 * merged customer held (its own, and those of customers merged into it) are held here now.
 */
export function joinCounter(state: CounterState | undefined, theirs: CounterState, from: string): CounterState {
  const own = state?.based === true;
  const sources = new Set(state?.basedFrom);
  for (const id of theirs.basedFrom ?? []) sources.add(id);
  if (theirs.based === true) sources.add(from);
  const s = addBase(state, theirs);
  if (own) s.based = true;
  else delete s.based;
  if (sources.size > 0) s.basedFrom = [...sources];
  else delete s.basedFrom;
  return s;
}

/** The count a rule or the state view reads at nowMs. */
export function counterValue(state: CounterState | undefined, nowMs: number): number {
  if (state === undefined) return 0;
  if (state.b !== undefined) {
    const from = utcDay(nowMs) - (state.days ?? 0);
    let sum = 0;
    for (const [day, count] of state.b) if (day > from) sum += count;
    return sum;
  }
  if (state.key !== undefined) return state.endMs !== undefined && nowMs < state.endMs ? state.n : 0;
  return state.n;
}

/** Applies one counter fact to a customer's counters. Mutates and returns `counters`. */
export function evolveCounters(counters: CountersState, fact: CounterFact): CountersState {
  if (fact.kind === 'counter.counted') {
    for (const bump of fact.bumps) counters[bump.id] = applyBump(counters[bump.id], bump);
    return counters;
  }
  if (fact.kind === 'counter.merged') {
    for (const [id, theirs] of Object.entries(fact.counters)) counters[id] = joinCounter(counters[id], theirs, fact.from);
    return counters;
  }
  if (fact.from === undefined) counters[fact.id] = applyBase(counters[fact.id], fact.base);
  else {
    const s = addBase(counters[fact.id], fact.base);
    s.basedFrom = [...(s.basedFrom ?? []), fact.from];
    counters[fact.id] = s;
  }
  return counters;
}

/**
 * The historical base of one customer for one counter: its past events (any order) counted as
 * live counting would have at nowMs. Null when none of them counts now.
 */
export function historicalBase(def: CounterDef, events: readonly CountedEvent[], timeZone: string, nowMs: number): CounterState | null {
  const sorted = [...events].sort((a, b) => a.occurredAtMs - b.occurredAtMs);
  let s: CounterState | undefined;
  for (const e of sorted) {
    const bump = bumpFor(def, e, s, timeZone, nowMs);
    if (bump !== null) s = applyBump(s, bump);
  }
  if (s === undefined) return null;
  // A rolling window's state has no n; a base for a customer with nothing in the window is empty.
  if (counterValue(s, nowMs) === 0 && def.window.kind !== 'lifetime') return null;
  return s;
}

/** Counter values by name for the definitions given (rules, the state view). */
export function counterValues(defs: readonly CounterDef[], counters: CountersState, nowMs: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const def of defs) out[def.name] = counterValue(counters[def.id], nowMs);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Validation of a definition as a client wrote it

export interface CounterIssue {
  param: string;
  message: string;
}

export function validateWindow(window: unknown): CounterIssue | null {
  if (window === null || typeof window !== 'object') return { param: 'window', message: 'window is {kind: "lifetime" | "rolling_days" | "period", ...}.' };
  const w = window as Record<string, unknown>;
  switch (w.kind) {
    case 'lifetime':
      if (Object.keys(w).some((k) => k !== 'kind')) return { param: 'window', message: 'A lifetime window has no other field.' };
      return null;
    case 'rolling_days': {
      if (Object.keys(w).some((k) => k !== 'kind' && k !== 'days')) return { param: 'window', message: 'A rolling_days window has only kind and days.' };
      const d = w.days;
      if (typeof d !== 'number' || !Number.isSafeInteger(d) || d < 1 || d > counterLimits.rollingDaysMax) {
        return { param: 'window.days', message: `days is an integer from 1 to ${counterLimits.rollingDaysMax}.` };
      }
      return null;
    }
    case 'period':
      if (Object.keys(w).some((k) => k !== 'kind' && k !== 'period')) return { param: 'window', message: 'A period window has only kind and period.' };
      if (!counterPeriods.includes(w.period as CounterPeriod)) return { param: 'window.period', message: `period is one of ${counterPeriods.join(', ')}.` };
      return null;
    default:
      return { param: 'window.kind', message: 'kind is one of lifetime, rolling_days, period.' };
  }
}

/**
 * Validates and compiles a filter: a condition in the rule language over event.properties.* only.
 * Problems name the wire path (`filter.all[0].op`). The plan is a rule plan whose conditions are
 * the filter (no trust minimum, limits or counters), evaluated with evaluatePlan.
 */
export function compileCounterFilter(event: string, filter: unknown): { ok: true; plan: RulePlan } | { ok: false; issues: CounterIssue[] } {
  const v = validateRule({ schema: 'service.rule/v2', trigger: { kind: 'customer_event', event }, conditions: filter, actions: [{ type: 'tier.evaluate' }] });
  // A path outside event.properties is named as such, not with the rule language's list of prefixes.
  const foreign = new Map<string, string>();
  foreignPaths(filter, 'filter', foreign, 0);
  const issues: CounterIssue[] = v.ok
    ? []
    : v.problems
        .map((p) => ({ param: p.path.replace(/^conditions/, 'filter').replace(/^trigger\.event/, 'event'), message: p.message }))
        .filter((i) => !foreign.has(i.param));
  for (const [param, path] of foreign) issues.push({ param, message: `A counter filter reads only event.properties.<name>; got '${path}'.` });
  if (!v.ok || issues.length > 0) return { ok: false, issues };
  return { ok: true, plan: compileRule(v.definition, { ruleId: 'counter', versionNumber: 0, priority: 0 }) };
}

/** The leaf paths of a raw filter that do not read event.properties, by wire param (`filter.all[0].path`). */
function foreignPaths(c: unknown, at: string, out: Map<string, string>, depth: number): void {
  if (c === null || typeof c !== 'object' || Array.isArray(c) || depth > ruleBounds.conditionDepthMax) return;
  const o = c as Record<string, unknown>;
  for (const group of ['all', 'any'] as const) {
    const items = o[group];
    if (!Array.isArray(items)) continue;
    for (const [i, x] of items.entries()) foreignPaths(x, `${at}.${group}[${i}]`, out, depth + 1);
  }
  if ('not' in o) foreignPaths(o.not, `${at}.not`, out, depth + 1);
  if (typeof o.path === 'string' && !o.path.startsWith('event.properties.')) out.set(`${at}.path`, o.path);
}

/** Historical bases of many customers for one stored definition (the backfill; runs in the pool for large histories). */
export function historicalBasesOf(
  source: { id: string; name: string; event: string; window: CounterWindow; filter: unknown },
  customers: ReadonlyArray<{ customerId: string; events: ReadonlyArray<{ occurredAtMs: number; properties: Record<string, unknown> }> }>,
  timeZone: string,
  nowMs: number,
): Array<{ customerId: string; base: CounterState }> {
  const f = source.filter === null || source.filter === undefined ? null : compileCounterFilter(source.event, source.filter);
  if (f !== null && !f.ok) return [];
  const def: CounterDef = { id: source.id, name: source.name, event: source.event, window: source.window, filter: f === null ? null : f.plan, status: 'backfilling' };
  const out: Array<{ customerId: string; base: CounterState }> = [];
  for (const c of customers) {
    const base = historicalBase(
      def,
      c.events.map((e) => ({ name: source.event, occurredAtMs: e.occurredAtMs, properties: e.properties })),
      timeZone,
      nowMs,
    );
    if (base !== null) out.push({ customerId: c.customerId, base });
  }
  return out;
}
