// Evaluates a compiled plan against one event and the customer's loaded state. Hot path: no I/O,
// no clock, no closures or JSON per call, paths walked from pre-split segments (own properties
// only). Checks run in one fixed order and the first failure is the skip reason:
//   trigger -> trust -> counter readiness -> limits -> segments -> conditions -> action amounts.
// traceRule runs EVERY check (no short circuit) for simulate; its verdict equals evaluatePlan's.
// A limit whose scope reads no customer path is shared by every customer of the environment: it is
// counted outside the actor (a slot reserved before the step) and passes only on a granted answer.
// A scope path without a usable value (absent, null, an object, an array) skips the rule with
// limit_scope_missing: such an event is never counted. Scope keys are stored (customer state,
// shared limits store): their spelling is a persisted format (scopeKey, boundLimitKey).
import { hash53Pair } from '../../util/canonical-json.js';
import { ruleBounds } from './bounds.js';
import { type PlanLeaf, type PlanLimit, type PlanNode, type PlanPath, type ResolvedAction, type RulePlan, NodeKind } from './compile.js';
import { applyOp, Op } from './ops.js';
import { PathSource } from './paths.js';
import { trustRank } from './trust.js';

export interface EvalEvent {
  name: string;
  properties: Record<string, unknown>;
  /** A trust level (trust.ts); an unknown one ranks below all. */
  trust: string;
}

export interface EvalCustomer {
  attributes: Record<string, unknown>;
  counters: Record<string, number | undefined>;
  /** Which counters are ready (backfilled): a set of names or a predicate kept by the actor. */
  countersReady: ReadonlySet<string> | ((name: string) => boolean);
  segments: readonly string[];
  /** Program key -> level key. */
  tiers: Record<string, string>;
  externalId: string | null;
}

/** The answer of the shared limits store for one (rule, limit, scope key) of this event. */
export interface SharedLimitAnswer {
  granted: boolean;
  /** Firings counted against the limit's max (with this event's when granted). */
  taken: number;
}

export interface EvalInput {
  event: EvalEvent;
  customer: EvalCustomer;
  /** How many times this rule already fired for (limit id, scope key) for this customer. */
  limitCounts: (limitId: string, scopeKey: string) => number;
  /**
   * Shared limits (scopes without a customer path): the store's answer per limitKey(rule id,
   * limit id, scope key). A shared limit without an answer counts as reached.
   */
  sharedLimits?: Readonly<Record<string, SharedLimitAnswer>>;
}

/**
 * In check order: the first failing check names the reason. campaign_inactive is decided before
 * the plan is evaluated (the rule's campaign is not running), by the engine and by simulate;
 * budget_exhausted after it, when the actions apply: every action of the firing was an award its
 * campaign's budget could not cover (rule-effects.ts; simulate with the budget left). Limit checks
 * run limit by limit: a missing scope value (limit_scope_missing) before that limit's count.
 */
export const skipReasons = [
  'trigger_mismatch',
  'campaign_inactive',
  'trust_below_minimum',
  'counter_not_ready',
  'limit_scope_missing',
  'limit_reached',
  'segment_not_matched',
  'conditions_not_met',
  'amount_invalid',
  'budget_exhausted',
] as const;
export type SkipReason = (typeof skipReasons)[number];

/**
 * The detail of budget_exhausted (engine and simulate): the awards the campaign's budget could not
 * cover. Only on skip paths.
 */
export function budgetExhaustedDetail(campaignId: string, awards: ReadonlyArray<{ currency: string; amount: number }>): string {
  const what = awards.map((a) => `${a.amount} ${a.currency}`).join(', ');
  return `The budget of campaign '${campaignId}' cannot cover the rule's awards (${what}): nothing was applied, and the firing is not counted against the rule's limits.`;
}

export interface LimitKey {
  limitId: string;
  scopeKey: string;
}

export type RuleOutcome =
  | {
      fired: true;
      /** Read-only: for static actions this is the plan's own array. */
      actions: readonly ResolvedAction[];
      /** One per limit: the engine adds 1 to each count when it applies the actions. */
      limitKeys: LimitKey[];
    }
  | {
      fired: false;
      reason: SkipReason;
      detail: string;
      /** What failed: the counter name, limit id, segment name or definition position (at). */
      param: string | null;
    };

const triggerMismatch: RuleOutcome = Object.freeze({
  fired: false,
  reason: 'trigger_mismatch',
  detail: 'The event name is not the rule trigger.',
  param: 'trigger.event',
});
const noLimitKeys: LimitKey[] = [];

function walk(v: unknown, seg: readonly string[]): unknown {
  for (let i = 0; i < seg.length; i++) {
    if (v === null || typeof v !== 'object') return undefined;
    const s = seg[i]!;
    if (!Object.hasOwn(v, s)) return undefined;
    v = (v as Record<string, unknown>)[s];
  }
  return v;
}

/** The value a path reads; undefined when absent. */
export function resolvePath(p: PlanPath, input: EvalInput): unknown {
  switch (p.src) {
    case PathSource.eventName:
      return input.event.name;
    case PathSource.eventProperty:
      return walk(input.event.properties, p.seg);
    case PathSource.attribute:
      return walk(input.customer.attributes, p.seg);
    case PathSource.counter:
      return walk(input.customer.counters, p.seg);
    case PathSource.segments:
      return input.customer.segments;
    case PathSource.tier:
      return walk(input.customer.tiers, p.seg);
    case PathSource.externalId:
      return input.customer.externalId ?? undefined;
    case PathSource.customer:
      return 'customer';
    default:
      return undefined;
  }
}

/** The key of a limit count: per customer in `ruleLimits`, and of a shared limit's answer. */
export function limitKey(ruleId: string, limitId: string, scopeKey: string): string {
  return `${ruleId}|${limitId}|${scopeKey}`;
}

/**
 * True when the scope reads no customer path (neither `customer` nor `customer.*`): the limit is
 * shared by every customer of the environment. A scope naming `customer.*` paths without
 * `customer` (refused by validation now, kept by plans compiled before) stays per customer.
 */
export function isSharedScope(scope: readonly PlanPath[]): boolean {
  for (let i = 0; i < scope.length; i++) {
    const src = scope[i]!.src;
    if (src !== PathSource.eventName && src !== PathSource.eventProperty) return false;
  }
  return scope.length > 0;
}

function sharedAnswer(input: EvalInput, ruleId: string, limitId: string, key: string): SharedLimitAnswer | undefined {
  const answers = input.sharedLimits;
  if (answers === undefined) return undefined;
  const k = limitKey(ruleId, limitId, key);
  return Object.hasOwn(answers, k) ? answers[k] : undefined;
}

/** Only on skip paths. */
function sharedReachedDetail(limitId: string, max: number, key: string, a: SharedLimitAnswer | undefined): string {
  return a === undefined
    ? `Limit '${limitId}' counts as reached: it is shared by every customer and no slot was reserved for this event (scope '${key}', max ${max}).`
    : `Limit '${limitId}' reached: it is shared by every customer; ${a.taken} of ${max} taken for scope '${key}'.`;
}

function isReady(ready: EvalCustomer['countersReady'], name: string): boolean {
  return typeof ready === 'function' ? ready(name) : ready.has(name);
}

function escapeScope(s: string): string {
  return s.indexOf('|') < 0 && s.indexOf('\\') < 0 ? s : s.replace(/\\/g, '\\\\').replace(/\|/g, '\\|');
}

function unescapeScope(s: string): string {
  return s.indexOf('\\') < 0 ? s : s.replace(/\\([\s\S])/g, '$1');
}

/** Seeds of the scope value hash: part of the stored key format, never change them. */
const scopeHashSeedA = 0x5c09e;
const scopeHashSeedB = 0x11a1f;
const scopePrefixChars = 16;

/**
 * The part of a string scope value longer than ruleBounds.scopeValueCharsMax in a per-customer
 * limit key: 'h:' + a 106-bit hash of the value (two hash53, 11 base-36 digits each) + ':' + its
 * first 16 characters, escaped (for traces and skip details). At most 57 characters.
 */
export function hashedScopePart(v: string): string {
  const [a, b] = hash53Pair(v, scopeHashSeedA, scopeHashSeedB);
  let n = scopePrefixChars;
  const last = v.charCodeAt(n - 1);
  // Never end the prefix inside a surrogate pair (a lone half would not survive UTF-8 encoding).
  if (last >= 0xd800 && last <= 0xdbff) n--;
  return `h:${a.toString(36).padStart(11, '0')}${b.toString(36).padStart(11, '0')}:${escapeScope(v.slice(0, n))}`;
}

/**
 * The scope key of a limit for this event: one part per scope path joined with '|'; null when a
 * path has no usable value (absent, null, an object or an array: limit_scope_missing, never
 * counted). `customer` is the literal 'customer' (counts are kept per customer); a string is
 * 's:<escaped>', a number 'n:<n>', a boolean 'b:<b>'. Types are kept apart, as conditions keep
 * them (`1` and `"1"` are two scope values). In a per-customer scope a string longer than
 * ruleBounds.scopeValueCharsMax is its hashedScopePart, so the customer's stored keys stay
 * small; a shared scope keeps the value (the shared limits store bounds its own keys).
 */
export function scopeKey(scope: readonly PlanPath[], input: EvalInput): string | null {
  const bounded = !isSharedScope(scope);
  let key = '';
  for (let i = 0; i < scope.length; i++) {
    const p = scope[i]!;
    let part: string;
    if (p.src === PathSource.customer) part = 'customer';
    else {
      const v = resolvePath(p, input);
      if (typeof v === 'string') part = bounded && v.length > ruleBounds.scopeValueCharsMax ? hashedScopePart(v) : 's:' + escapeScope(v);
      else if (typeof v === 'number') part = 'n:' + v;
      else if (typeof v === 'boolean') part = v ? 'b:true' : 'b:false';
      else return null;
    }
    key = i === 0 ? part : key + '|' + part;
  }
  return key;
}

/** The first scope path of the limit without a usable value, and what it holds (only on skip paths). */
function missingScope(l: PlanLimit, input: EvalInput): { path: string; detail: string } {
  for (const p of l.scope) {
    if (p.src === PathSource.customer) continue;
    const v = resolvePath(p, input);
    if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean') continue;
    const what = v === undefined ? 'absent' : v === null ? 'null' : Array.isArray(v) ? 'an array' : 'an object';
    return {
      path: p.path,
      detail: `Limit '${l.id}' cannot count this event: its scope path '${p.path}' is ${what} (a scope value is a string, number or boolean).`,
    };
  }
  return { path: '', detail: `Limit '${l.id}' cannot count this event.` };
}

/**
 * A per-customer limit key (limitKey) as scopeKey writes it now: a string scope value longer than
 * ruleBounds.scopeValueCharsMax that older code kept whole ('s:<escaped>') becomes its
 * hashedScopePart; any other key is returned as is (the same string). Counts loaded from
 * snapshots and replayed from journal facts go through it, so a key written before values were
 * hashed keeps counting under the key evaluation reads, and stops holding the long value.
 */
export function boundLimitKey(key: string): string {
  const max = ruleBounds.scopeValueCharsMax;
  if (key.length <= max + 2) return key;
  // Find the parts (split on unescaped '|'); nothing is allocated unless one is long.
  let long = false;
  let start = 0;
  for (let i = 0; i <= key.length; i++) {
    const c = i < key.length ? key.charCodeAt(i) : 0x7c;
    if (c === 0x5c) i++;
    else if (c === 0x7c) {
      if (i - start > max + 2) long = true;
      start = i + 1;
    }
  }
  if (!long) return key;
  const parts: string[] = [];
  start = 0;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c === 0x5c) i++;
    else if (c === 0x7c) {
      parts.push(key.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(key.slice(start));
  let changed = false;
  // parts[0] is the rule id and parts[1] the limit id (neither holds '|' or '\\').
  for (let j = 2; j < parts.length; j++) {
    const p = parts[j]!;
    if (p.length <= max + 2 || !p.startsWith('s:')) continue;
    const raw = unescapeScope(p.slice(2));
    if (raw.length <= max) continue;
    parts[j] = hashedScopePart(raw);
    changed = true;
  }
  return changed ? parts.join('|') : key;
}

function testLeaf(leaf: PlanLeaf, input: EvalInput): boolean {
  return applyOp(leaf.op, resolvePath(leaf, input), leaf.v, leaf.set);
}

function evalNode(n: PlanNode, input: EvalInput): boolean {
  switch (n.k) {
    case NodeKind.leaf:
      return testLeaf(n, input);
    case NodeKind.all:
      for (let i = 0; i < n.c.length; i++) if (!evalNode(n.c[i]!, input)) return false;
      return true;
    case NodeKind.any:
      for (let i = 0; i < n.c.length; i++) if (evalNode(n.c[i]!, input)) return true;
      return false;
    case NodeKind.not:
      return !evalNode(n.c, input);
  }
}

function describeLeaf(l: PlanLeaf): string {
  return `${l.path} ${l.opName}${l.op === Op.exists ? (l.v === false ? ' false' : '') : ` ${stringifyShort(l.v)}`}`;
}

/** Only on skip paths (never per successful evaluation). */
function stringifyShort(v: unknown): string {
  const s = JSON.stringify(v) ?? 'null';
  return s.length > 80 ? `${s.slice(0, 77)}...` : s;
}

function skip(reason: SkipReason, detail: string, param: string | null): RuleOutcome {
  return { fired: false, reason, detail, param };
}

/** Amount for a points.award_from; NaN when not a positive safe integer. */
function resolveAmount(value: unknown, multiplier: number): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) return Number.NaN;
  const x = value * multiplier;
  // Round down, forgiving float noise (19.99 x 100 = 1998.9999999999998 must give 1999).
  const amount = Math.floor(x + Math.abs(x) * 1e-12);
  return Number.isSafeInteger(amount) && amount > 0 ? amount : Number.NaN;
}

/** Decides whether the rule fires for this event, and with which actions. Never throws. */
export function evaluatePlan(plan: RulePlan, input: EvalInput): RuleOutcome {
  if (input.event.name !== plan.event) return triggerMismatch;
  if (plan.trustRank >= 0 && trustRank(input.event.trust) < plan.trustRank) {
    return skip('trust_below_minimum', `Event trust '${input.event.trust}' is below the minimum '${plan.trustMinimum}'.`, 'trust.minimum');
  }
  const counters = plan.counters;
  for (let i = 0; i < counters.length; i++) {
    const name = counters[i]!;
    if (!isReady(input.customer.countersReady, name)) return skip('counter_not_ready', `Counter '${name}' is not ready.`, name);
  }
  let limitKeys = noLimitKeys;
  if (plan.limits.length > 0) {
    limitKeys = [];
    for (let i = 0; i < plan.limits.length; i++) {
      const l = plan.limits[i]!;
      const key = scopeKey(l.scope, input);
      if (key === null) return skip('limit_scope_missing', missingScope(l, input).detail, l.id);
      if (isSharedScope(l.scope)) {
        // Counted across customers by the store; never in the customer's own counts (limitKeys).
        const a = sharedAnswer(input, plan.ruleId, l.id, key);
        if (a === undefined) {
          // The store reserved nothing for the plan when one of its shared scopes has no value
          // (shared-limit-slots.ts): that limit's skip, as the trace reaches it, not this one's.
          for (let j = i + 1; j < plan.limits.length; j++) {
            const later = plan.limits[j]!;
            if (isSharedScope(later.scope) && scopeKey(later.scope, input) === null) {
              return skip('limit_scope_missing', missingScope(later, input).detail, later.id);
            }
          }
        }
        if (a === undefined || !a.granted) return skip('limit_reached', sharedReachedDetail(l.id, l.max, key, a), l.id);
        continue;
      }
      const count = input.limitCounts(l.id, key);
      if (count >= l.max) return skip('limit_reached', `Limit '${l.id}' reached: fired ${count} of ${l.max} for scope '${key}'.`, l.id);
      limitKeys.push({ limitId: l.id, scopeKey: key });
    }
  }
  for (let i = 0; i < plan.segments.length; i++) {
    const s = plan.segments[i]!;
    if (!testLeaf(s, input)) return skip('segment_not_matched', `The customer is not in segment '${String(s.v)}'.`, String(s.v));
  }
  const root = plan.conditions;
  if (root !== null) {
    if (root.k === NodeKind.all) {
      for (let i = 0; i < root.c.length; i++) {
        const c = root.c[i]!;
        if (!evalNode(c, input)) {
          const what = c.k === NodeKind.leaf ? `${c.at} (${describeLeaf(c)})` : c.at;
          return skip('conditions_not_met', `Condition ${what} is not met.`, c.at);
        }
      }
    } else if (!evalNode(root, input)) {
      const what = root.k === NodeKind.leaf ? `${root.at} (${describeLeaf(root)})` : root.at;
      return skip('conditions_not_met', `Condition ${what} is not met.`, root.at);
    }
  }
  if (plan.staticActions) return { fired: true, actions: plan.actions as ResolvedAction[], limitKeys };
  const actions: ResolvedAction[] = [];
  for (let i = 0; i < plan.actions.length; i++) {
    const a = plan.actions[i]!;
    if (a.type !== 'points.award_from') {
      actions.push(a);
      continue;
    }
    const value = resolvePath(a.from, input);
    const amount = resolveAmount(value, a.multiplier);
    if (Number.isNaN(amount)) {
      return skip(
        'amount_invalid',
        `${a.from.path} = ${stringifyShort(value)} x ${a.multiplier} is not a positive integer amount.`,
        a.at,
      );
    }
    actions.push({ type: 'points.award', currency: a.currency, amount });
  }
  return { fired: true, actions, limitKeys };
}

export type TraceCheck = 'trigger' | 'campaign' | 'trust' | 'counter' | 'limit' | 'segment' | 'condition' | 'group' | 'amount' | 'budget';

/** One check of a trace. JSON-safe: an absent actual value is null with found: false. */
export interface TraceStep {
  check: TraceCheck;
  /** Position in the definition (conditions.all[1].any[0], actions[0].amount_from, limits[0]...). */
  at: string;
  path: string | null;
  op: string | null;
  expected: unknown;
  actual: unknown;
  found: boolean;
  pass: boolean;
  /** Limit steps only: which limit, and the scope key this event counts against. */
  limitId?: string;
  scopeKey?: string;
  /** Limit steps only: true when the limit is shared by every customer (actual: its taken count). */
  shared?: boolean;
}

export interface RuleTrace {
  outcome: RuleOutcome;
  steps: TraceStep[];
}

function step(check: TraceCheck, at: string, path: string | null, op: string | null, expected: unknown, actual: unknown, pass: boolean): TraceStep {
  return { check, at, path, op, expected, actual: actual === undefined ? null : actual, found: actual !== undefined, pass };
}

function traceNode(n: PlanNode, input: EvalInput, out: TraceStep[]): boolean {
  if (n.k === NodeKind.leaf) {
    const actual = resolvePath(n, input);
    const pass = applyOp(n.op, actual, n.v, n.set);
    out.push(step('condition', n.at, n.path, n.opName, n.v, actual, pass));
    return pass;
  }
  let pass: boolean;
  let op: string;
  if (n.k === NodeKind.not) {
    op = 'not';
    pass = !traceNode(n.c, input, out);
  } else {
    // Every member is traced (no short circuit), so the answer shows all reasons at once.
    op = n.k === NodeKind.all ? 'all' : 'any';
    let all = true;
    let any = false;
    for (const c of n.c) {
      const r = traceNode(c, input, out);
      all &&= r;
      any ||= r;
    }
    pass = n.k === NodeKind.all ? all : any;
  }
  out.push(step('group', n.at, null, op, null, pass, pass));
  return pass;
}

/**
 * Every check in evaluation order (groups after their members), with expected and actual values,
 * and the same outcome evaluatePlan gives. For POST /rules/{id}/simulate; allocates freely.
 */
export function traceRule(plan: RulePlan, input: EvalInput): RuleTrace {
  const steps: TraceStep[] = [];
  steps.push(step('trigger', 'trigger.event', 'event.name', 'eq', plan.event, input.event.name, input.event.name === plan.event));
  const trustPass = plan.trustRank < 0 || trustRank(input.event.trust) >= plan.trustRank;
  steps.push(step('trust', 'trust.minimum', null, 'gte', plan.trustMinimum, input.event.trust, trustPass));
  for (const name of plan.counters) {
    const ready = isReady(input.customer.countersReady, name);
    steps.push(step('counter', `customer.counters.${name}`, `customer.counters.${name}`, 'ready', 'ready', ready ? 'ready' : 'not_ready', ready));
  }
  plan.limits.forEach((l, i) => {
    const key = scopeKey(l.scope, input);
    let s: TraceStep;
    if (key === null) {
      // Nothing to count against: the path that has no usable value, found false.
      s = step('limit', `limits[${i}]`, missingScope(l, input).path, 'lt', l.max, undefined, false);
      if (isSharedScope(l.scope)) s.shared = true;
      s.limitId = l.id;
      steps.push(s);
      return;
    }
    if (isSharedScope(l.scope)) {
      const a = sharedAnswer(input, plan.ruleId, l.id, key);
      s = step('limit', `limits[${i}]`, null, 'lt', l.max, a?.taken, a?.granted === true);
      s.shared = true;
    } else {
      const count = input.limitCounts(l.id, key);
      s = step('limit', `limits[${i}]`, null, 'lt', l.max, count, count < l.max);
    }
    s.limitId = l.id;
    s.scopeKey = key;
    steps.push(s);
  });
  for (const s of plan.segments) {
    const actual = resolvePath(s, input);
    steps.push(step('segment', s.at, s.path, s.opName, s.v, actual, applyOp(s.op, actual, s.v, s.set)));
  }
  if (plan.conditions !== null) traceNode(plan.conditions, input, steps);
  for (const a of plan.actions) {
    if (a.type !== 'points.award_from') continue;
    const value = resolvePath(a.from, input);
    const amount = resolveAmount(value, a.multiplier);
    steps.push(step('amount', a.at, a.from.path, `x${a.multiplier}`, 'a positive integer', value, !Number.isNaN(amount)));
  }
  return { outcome: evaluatePlan(plan, input), steps };
}
