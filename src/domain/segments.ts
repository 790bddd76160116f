// Segments (spec 2.9): static segments list their members explicitly; a dynamic segment is a
// condition of the rule language over customer.attributes.* evaluated live. Static membership is
// customer state (facts segment.member_added / segment.member_removed journaled by the actor), so
// evaluating `customer.segments` needs no I/O. Dynamic conditions are validated and compiled with
// the rule language itself (schema.ts, compile.ts, evaluate.ts): there is no second language.
// Pure: no clock, no I/O, never throws.
import { compileRule, type RulePlan } from './rules/compile.js';
import { type EvalInput, evaluatePlan } from './rules/evaluate.js';
import { PathSource, parsePath } from './rules/paths.js';
import type { Condition, RuleProblem } from './rules/schema.js';
import { validateRule } from './rules/schema.js';

export const segmentKinds = ['static', 'dynamic'] as const;
export type SegmentKind = (typeof segmentKinds)[number];

/** What evaluation needs of a segment (the catalog caches these per environment). */
export interface SegmentDef {
  id: string;
  name: string;
  kind: SegmentKind;
  /** Dynamic only: the condition compiled as a rule plan (its conditions part is what runs). */
  plan: RulePlan | null;
}

export type SegmentFact =
  | { kind: 'segment.member_added'; segmentId: string; atMs: number }
  | { kind: 'segment.member_removed'; segmentId: string; atMs: number };

export type SegmentCommand = { kind: 'segment.add_member'; segmentId: string } | { kind: 'segment.remove_member'; segmentId: string };

/** The trigger of the wrapper definition a dynamic condition is validated and compiled in. */
const wrapperEvent = 'segment.evaluate';

function wrap(condition: unknown): unknown {
  return {
    schema: 'service.rule/v2',
    trigger: { kind: 'customer_event', event: wrapperEvent },
    conditions: condition,
    actions: [{ type: 'tier.evaluate' }],
  };
}

function leaves(c: Condition, at: string, out: Array<{ path: string; at: string }>): void {
  if ('all' in c) {
    for (const [i, x] of c.all.entries()) leaves(x, `${at}.all[${i}]`, out);
  } else if ('any' in c) {
    for (const [i, x] of c.any.entries()) leaves(x, `${at}.any[${i}]`, out);
  }
  else if ('not' in c) leaves(c.not, `${at}.not`, out);
  else out.push({ path: `${at}.path`, at: c.path });
}

/**
 * Validates a dynamic segment condition: a rule-language condition whose every path is
 * customer.attributes.<name>. Problems name the wire field (condition.all[0].path).
 */
export function validateSegmentCondition(condition: unknown): { ok: true; condition: Condition } | { ok: false; problems: RuleProblem[] } {
  if (condition === null || condition === undefined) {
    return { ok: false, problems: [{ path: 'condition', message: 'A dynamic segment needs a condition.' }] };
  }
  const v = validateRule(wrap(condition));
  if (!v.ok) {
    const problems = v.problems
      .filter((p) => p.path.startsWith('conditions'))
      .map((p) => ({ path: `condition${p.path.slice('conditions'.length)}`, message: p.message }));
    return { ok: false, problems: problems.length > 0 ? problems : [{ path: 'condition', message: 'Not a valid condition.' }] };
  }
  const cond = (v.definition as { conditions?: Condition }).conditions as Condition;
  const paths: Array<{ path: string; at: string }> = [];
  leaves(cond, 'condition', paths);
  const problems: RuleProblem[] = [];
  for (const p of paths) {
    const parsed = parsePath(p.at, 'condition');
    if (!parsed.ok || parsed.src !== PathSource.attribute) {
      problems.push({ path: p.path, message: `A segment condition reads only customer.attributes.<name>; got '${p.at}'.` });
    }
  }
  return problems.length > 0 ? { ok: false, problems } : { ok: true, condition: cond };
}

/** Compiles a validated dynamic condition into the plan evaluation runs. */
export function compileSegmentCondition(segmentId: string, condition: Condition): RulePlan {
  return compileRule(
    { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: wrapperEvent }, conditions: condition, actions: [{ type: 'tier.evaluate' }] },
    { ruleId: segmentId, versionNumber: 0, priority: 0 },
  );
}

const noCounters: Record<string, number | undefined> = {};
const noneReady = (): boolean => false;
const noTiers: Record<string, string> = {};
const noSegments: readonly string[] = [];
const noLimits = (): number => 0;
const wrapperEventInput = { name: wrapperEvent, properties: {}, trust: 'merchant_asserted' };

/** Whether the customer's attributes satisfy a dynamic segment now. */
export function matchesDynamic(plan: RulePlan, attributes: Record<string, unknown>): boolean {
  const input: EvalInput = {
    event: wrapperEventInput,
    customer: { attributes, counters: noCounters, countersReady: noneReady, segments: noSegments, tiers: noTiers, externalId: null },
    limitCounts: noLimits,
  };
  return evaluatePlan(plan, input).fired;
}

/**
 * The names of the segments the customer is in: static segments it is a member of (by id; a
 * deleted segment's leftover membership is ignored) and dynamic segments whose condition holds.
 * In the catalog's order (by name).
 */
export function segmentNames(defs: readonly SegmentDef[], memberOf: readonly string[], attributes: Record<string, unknown>): string[] {
  const out: string[] = [];
  for (const d of defs) {
    if (d.kind === 'static') {
      if (memberOf.includes(d.id)) out.push(d.name);
    } else if (d.plan !== null && matchesDynamic(d.plan, attributes)) out.push(d.name);
  }
  return out;
}

/** Adding a member twice or removing a non-member changes nothing (no fact): both are idempotent. */
export function decideMembership(memberOf: readonly string[], cmd: SegmentCommand, ctx: { nowMs: number }): SegmentFact[] {
  const isMember = memberOf.includes(cmd.segmentId);
  if (cmd.kind === 'segment.add_member') return isMember ? [] : [{ kind: 'segment.member_added', segmentId: cmd.segmentId, atMs: ctx.nowMs }];
  return isMember ? [{ kind: 'segment.member_removed', segmentId: cmd.segmentId, atMs: ctx.nowMs }] : [];
}

export function evolveMembership(memberOf: string[], fact: SegmentFact): string[] {
  if (fact.kind === 'segment.member_added') {
    if (!memberOf.includes(fact.segmentId)) memberOf.push(fact.segmentId);
    return memberOf;
  }
  const i = memberOf.indexOf(fact.segmentId);
  if (i >= 0) memberOf.splice(i, 1);
  return memberOf;
}

/** Every segment name a rule definition's conditions test with `customer.segments contains`. */
export function segmentsReferenced(definition: unknown): string[] {
  const out = new Set<string>();
  const visit = (c: unknown): void => {
    if (c === null || typeof c !== 'object') return;
    if (Array.isArray(c)) {
      for (const x of c) visit(x);
      return;
    }
    const o = c as Record<string, unknown>;
    if (o.path === 'customer.segments' && typeof o.value === 'string') out.add(o.value);
    if (o.path === 'customer.segments' && Array.isArray(o.value)) for (const v of o.value) if (typeof v === 'string') out.add(v);
    for (const k of ['all', 'any', 'not']) if (k in o) visit(o[k]);
  };
  if (definition !== null && typeof definition === 'object') visit((definition as { conditions?: unknown }).conditions);
  return [...out];
}
