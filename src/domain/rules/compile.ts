// Compiles a validated rule definition into an evaluation plan: plain data (JSON- and
// structured-clone-safe, no closures, no class instances) that the piscina worker returns and the
// actor evaluates per event. Paths are pre-split, ops are small integers, `in` lists are sorted
// sets, the counters the rule reads are listed, and mandatory segment checks are hoisted so a skip
// can say `segment_not_matched`. Pure; never throws (an unparsable path compiles to a false leaf).
import { buildInSet, type InSet, Op, type OpCode, type Primitive } from './ops.js';
import { PathSource, parsePath } from './paths.js';
import type { Condition, LeafCondition, RuleAction, RuleDefinition, RuleProblem, RuleSchemaName } from './schema.js';
import { validateRule } from './schema.js';
import { type TrustLevel, trustRank } from './trust.js';

/** Bumped when the plan layout changes, so a cached plan of another layout is recompiled. */
export const planFormat = 1;

export const NodeKind = { leaf: 0, all: 1, any: 2, not: 3 } as const;

/** A path resolved once: where it reads from and the segments below that source. */
export interface PlanPath {
  path: string;
  src: PathSource;
  seg: string[];
}

export interface PlanLeaf extends PlanPath {
  k: 0;
  /** Where the condition sits in the definition (for traces and skip details). */
  at: string;
  op: OpCode;
  opName: string;
  /** The definition's value: what traces show as expected. For `exists`, the flag (default true). */
  v: Primitive | Primitive[];
  /** in / not_in only: the values split by type and sorted. */
  set?: InSet;
}
export interface PlanGroup {
  k: 1 | 2;
  at: string;
  c: PlanNode[];
}
export interface PlanNot {
  k: 3;
  at: string;
  c: PlanNode;
}
export type PlanNode = PlanLeaf | PlanGroup | PlanNot;

export interface PlanLimit {
  id: string;
  max: number;
  scope: PlanPath[];
}

/** An action as the engine applies it. Static actions in a plan are already in this shape. */
export type ResolvedAction =
  | { type: 'points.award'; currency: string; amount: number }
  | { type: 'item.grant'; item: string; quantity: number }
  | { type: 'tier.evaluate'; program: string | null }
  | { type: 'reward.issue'; rewardId: string }
  | { type: 'challenge.progress'; challengeId: string };

/** points.award with amount_from: amount = floor(value at path x multiplier), resolved per event. */
export interface PlanAmountFrom {
  type: 'points.award_from';
  at: string;
  currency: string;
  from: PlanPath;
  multiplier: number;
}
export type PlanAction = ResolvedAction | PlanAmountFrom;

export interface RuleMeta {
  ruleId: string;
  versionNumber: number;
  priority: number;
  /** A campaign audience: the customer must be in this segment (checked with the hoisted segments). */
  audienceSegment?: string | null;
}

export interface RulePlan {
  planFormat: typeof planFormat;
  ruleId: string;
  versionNumber: number;
  priority: number;
  schema: RuleSchemaName;
  /** The trigger's event name: the engine indexes plans by it. */
  event: string;
  trustMinimum: TrustLevel | null;
  /** Rank of trustMinimum; -1 when the rule has none (every event passes). */
  trustRank: number;
  /** Every counter the rule reads (conditions and amount_from), sorted, unique: all must be ready. */
  counters: string[];
  limits: PlanLimit[];
  /** Mandatory `customer.segments contains` checks (top level of the conditions, and the audience). */
  segments: PlanLeaf[];
  /** The remaining conditions; null when none. */
  conditions: PlanNode | null;
  actions: PlanAction[];
  /** True when every action is static: evaluation returns `actions` itself, allocating nothing. */
  staticActions: boolean;
  /** The rule's campaign (set when published plans are loaded; the rule's current campaign_id). */
  campaignId?: string | null;
}

export type RuleCompilation = { ok: true; plan: RulePlan } | { ok: false; problems: RuleProblem[] };

function planPath(path: string, use: 'condition' | 'scope' | 'amount'): PlanPath | null {
  const r = parsePath(path, use);
  return r.ok ? { path, src: r.src, seg: r.seg } : null;
}

function compileLeaf(c: LeafCondition, at: string, counters: Set<string>): PlanLeaf {
  const p = planPath(c.path, 'condition');
  const op = Op[c.op];
  if (p === null || op === undefined) {
    // Unreachable for a validated definition; a leaf that never holds keeps the rule inert.
    return { k: 0, at, path: c.path, src: PathSource.eventName, seg: [], op: Op.in, opName: String(c.op), v: [], set: buildInSet([]) };
  }
  if (p.src === PathSource.counter && p.seg[0] !== undefined) counters.add(p.seg[0]);
  const leaf: PlanLeaf = { k: 0, at, ...p, op, opName: c.op, v: null };
  if (op === Op.exists) leaf.v = typeof c.value === 'boolean' ? c.value : true;
  else if (op === Op.in || op === Op.not_in) {
    const values = Array.isArray(c.value) ? (c.value as Primitive[]) : [];
    leaf.v = values.slice();
    leaf.set = buildInSet(values);
  } else leaf.v = (c.value ?? null) as Primitive;
  return leaf;
}

function compileNode(c: Condition, at: string, counters: Set<string>): PlanNode {
  if ('all' in c) return { k: NodeKind.all, at, c: c.all.map((x, i) => compileNode(x, `${at}.all[${i}]`, counters)) };
  if ('any' in c) return { k: NodeKind.any, at, c: c.any.map((x, i) => compileNode(x, `${at}.any[${i}]`, counters)) };
  if ('not' in c) return { k: NodeKind.not, at, c: compileNode(c.not, `${at}.not`, counters) };
  return compileLeaf(c, at, counters);
}

function isSegmentCheck(n: PlanNode): n is PlanLeaf {
  return n.k === NodeKind.leaf && n.src === PathSource.segments && n.op === Op.contains;
}

function compileAction(a: RuleAction, at: string, counters: Set<string>): PlanAction {
  switch (a.type) {
    case 'points.award': {
      if (a.amount_from !== undefined) {
        const from = planPath(a.amount_from, 'amount') ?? { path: a.amount_from, src: PathSource.eventName, seg: [] };
        if (from.src === PathSource.counter && from.seg[0] !== undefined) counters.add(from.seg[0]);
        return { type: 'points.award_from', at: `${at}.amount_from`, currency: a.currency, from, multiplier: a.multiplier ?? 1 };
      }
      return { type: 'points.award', currency: a.currency, amount: a.amount ?? 0 };
    }
    case 'item.grant':
      return { type: 'item.grant', item: a.item, quantity: a.quantity };
    case 'tier.evaluate':
      return { type: 'tier.evaluate', program: a.program ?? null };
    case 'reward.issue':
      return { type: 'reward.issue', rewardId: a.reward_id };
    case 'challenge.progress':
      return { type: 'challenge.progress', challengeId: a.challenge_id };
  }
}

/** The campaign audience check: the customer must be in the segment (the plan's first segment check). */
function audienceLeaf(segment: string): PlanLeaf {
  return { k: 0, at: 'campaign.audience', path: 'customer.segments', src: PathSource.segments, seg: [], op: Op.contains, opName: 'contains', v: segment };
}

/**
 * The plan with `audience` as its first hoisted segment check (replacing one it had), so
 * evaluation skips non-members with segment_not_matched; the plan itself when there is none.
 */
export function withAudienceSegment(plan: RulePlan, audience: string | null): RulePlan {
  if (audience === null) return plan;
  return { ...plan, segments: [audienceLeaf(audience), ...plan.segments.filter((s) => s.at !== 'campaign.audience')] };
}

/** Compiles a definition that validateRule accepted. */
export function compileRule(definition: RuleDefinition, meta: RuleMeta): RulePlan {
  const counters = new Set<string>();
  let root: PlanNode | null = null;
  if (definition.schema === 'service.rule/v1') {
    const list = definition.conditions ?? [];
    if (list.length > 0) root = { k: NodeKind.all, at: 'conditions', c: list.map((c, i) => compileLeaf(c, `conditions[${i}]`, counters)) };
  } else if (definition.conditions !== undefined) {
    root = compileNode(definition.conditions, 'conditions', counters);
  }

  // Hoist mandatory segment checks: the root itself, or direct members of a root `all`.
  const segments: PlanLeaf[] = [];
  if (meta.audienceSegment != null) segments.push(audienceLeaf(meta.audienceSegment));
  if (root !== null && isSegmentCheck(root)) {
    segments.push(root);
    root = null;
  } else if (root !== null && root.k === NodeKind.all) {
    const rest: PlanNode[] = [];
    for (const c of root.c) (isSegmentCheck(c) ? segments : rest).push(c as PlanLeaf);
    root = rest.length === 0 ? null : { k: NodeKind.all, at: root.at, c: rest };
  }

  const actions = definition.actions.map((a, i) => compileAction(a, `actions[${i}]`, counters));
  const limits: PlanLimit[] = (definition.limits ?? []).map((l) => ({
    id: l.id,
    max: l.max,
    scope: l.scope.map((s) => planPath(s, 'scope') ?? { path: s, src: PathSource.customer, seg: [] }),
  }));
  const trustMinimum = definition.schema === 'service.rule/v2' ? (definition.trust?.minimum ?? null) : null;
  return {
    planFormat,
    ruleId: meta.ruleId,
    versionNumber: meta.versionNumber,
    priority: meta.priority,
    schema: definition.schema,
    event: definition.trigger.event,
    trustMinimum,
    trustRank: trustMinimum === null ? -1 : trustRank(trustMinimum),
    counters: [...counters].sort(),
    limits,
    segments,
    conditions: root,
    actions,
    staticActions: actions.every((a) => a.type !== 'points.award_from'),
  };
}

/**
 * validateRule, then compileRule: what the piscina task runs for a raw definition document. The
 * documents it sees were validated when stored (create, PATCH); one stored before a check was
 * added (a shared limit's scope naming customer.* paths) must keep compiling.
 */
export function validateAndCompile(definition: unknown, meta: RuleMeta): RuleCompilation {
  const v = validateRule(definition, { storedDefinition: true });
  if (!v.ok) return v;
  return { ok: true, plan: compileRule(v.definition, meta) };
}
