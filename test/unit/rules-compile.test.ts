// Rule compilation: the evaluation plan is plain, serializable data (it crosses the piscina
// boundary and may be cached): pre-split paths, integer ops, sorted `in` sets, the counters the
// rule reads, normalized limits, hoisted mandatory segment checks.
import t from 'tap';
import { compileRule, NodeKind, planFormat, validateAndCompile } from '../../src/domain/rules/compile.js';
import { Op } from '../../src/domain/rules/ops.js';
import { PathSource } from '../../src/domain/rules/paths.js';
import { type RuleDefinition, validateRule } from '../../src/domain/rules/schema.js';

const meta = { ruleId: 'rule_1', versionNumber: 3, priority: 10 };

function parsed(doc: unknown): RuleDefinition {
  const v = validateRule(doc);
  if (!v.ok) throw new Error(JSON.stringify(v.problems));
  return v.definition;
}

const full = parsed({
  schema: 'service.rule/v2',
  trigger: { kind: 'customer_event', event: 'order.completed' },
  trust: { minimum: 'merchant_asserted' },
  limits: [{ id: 'per_order', scope: ['customer', 'event.properties.order.id'], max: 2 }],
  conditions: {
    all: [
      { path: 'customer.segments', op: 'contains', value: 'vip' },
      { path: 'event.properties.country', op: 'in', value: ['FR', 'DE', 'AT', 'DE', 1, true] },
      { any: [{ path: 'customer.counters.orders_30d', op: 'gte', value: 3 }, { not: { path: 'customer.tiers.main', op: 'exists' } }] },
    ],
  },
  actions: [
    { type: 'points.award', currency: 'points', amount_from: 'customer.counters.spend_30d', multiplier: 2 },
    { type: 'reward.issue', reward_id: 'rw_1' },
  ],
});

t.test('a plan is plain data that survives JSON and structured clone unchanged', async (t) => {
  const plan = compileRule(full, meta);
  t.same(JSON.parse(JSON.stringify(plan)), plan, 'JSON round trip');
  t.same(structuredClone(plan), plan, 'structured clone (worker boundary)');
  const walk = (v: unknown): void => {
    if (typeof v === 'function') t.fail('a closure in the plan');
    if (v && typeof v === 'object') {
      const proto = Object.getPrototypeOf(v);
      if (proto !== Object.prototype && proto !== Array.prototype) t.fail('a class instance in the plan');
      for (const x of Object.values(v)) walk(x);
    }
  };
  walk(plan);
});

t.test('the plan shape: meta, trigger, trust rank, counters, limits, hoisted segments, conditions, actions', async (t) => {
  const plan = compileRule(full, meta);
  t.match(plan, {
    planFormat,
    ruleId: 'rule_1',
    versionNumber: 3,
    priority: 10,
    schema: 'service.rule/v2',
    event: 'order.completed',
    trustMinimum: 'merchant_asserted',
    trustRank: 1,
    staticActions: false,
  });
  t.same(plan.counters, ['orders_30d', 'spend_30d'], 'conditions and amount_from counters, sorted');
  t.same(plan.limits, [
    {
      id: 'per_order',
      max: 2,
      scope: [
        { path: 'customer', src: PathSource.customer, seg: [] },
        { path: 'event.properties.order.id', src: PathSource.eventProperty, seg: ['order', 'id'] },
      ],
    },
  ]);
  t.same(plan.segments, [
    { k: 0, at: 'conditions.all[0]', path: 'customer.segments', src: PathSource.segments, seg: [], op: Op.contains, opName: 'contains', v: 'vip' },
  ]);
  const root = plan.conditions;
  if (root === null || root.k !== NodeKind.all) return t.fail('root all expected');
  t.equal(root.at, 'conditions');
  t.equal(root.c.length, 2, 'the segment check left the tree');
  t.match(root.c[0], {
    k: NodeKind.leaf,
    at: 'conditions.all[1]',
    src: PathSource.eventProperty,
    seg: ['country'],
    op: Op.in,
    v: ['FR', 'DE', 'AT', 'DE', 1, true],
    set: { s: ['AT', 'DE', 'FR'], n: [1], b: 2 },
  });
  t.match(root.c[1], {
    k: NodeKind.any,
    at: 'conditions.all[2]',
    c: [
      { k: NodeKind.leaf, at: 'conditions.all[2].any[0]', src: PathSource.counter, seg: ['orders_30d'], op: Op.gte, v: 3 },
      { k: NodeKind.not, at: 'conditions.all[2].any[1]', c: { k: NodeKind.leaf, op: Op.exists, v: true, src: PathSource.tier, seg: ['main'] } },
    ],
  });
  t.same(plan.actions, [
    {
      type: 'points.award_from',
      at: 'actions[0].amount_from',
      currency: 'points',
      from: { path: 'customer.counters.spend_30d', src: PathSource.counter, seg: ['spend_30d'] },
      multiplier: 2,
    },
    { type: 'reward.issue', rewardId: 'rw_1' },
  ]);
});

t.test('v1 flat conditions compile to one all; static actions are flagged; no trust minimum', async (t) => {
  const plan = compileRule(
    parsed({
      schema: 'service.rule/v1',
      trigger: { event: 'level.completed' },
      conditions: [{ path: 'event.properties.level', op: 'gt', value: 2 }],
      actions: [
        { type: 'points.award', currency: 'xp', amount: 50 },
        { type: 'item.grant', item: 'chest', quantity: 2 },
        { type: 'tier.evaluate' },
        { type: 'challenge.progress', challenge_id: 'chl_1' },
      ],
    }),
    meta,
  );
  t.match(plan, { trustMinimum: null, trustRank: -1, counters: [], limits: [], segments: [], staticActions: true });
  t.match(plan.conditions, { k: NodeKind.all, at: 'conditions', c: [{ k: NodeKind.leaf, at: 'conditions[0]', op: Op.gt, v: 2 }] });
  t.same(plan.actions, [
    { type: 'points.award', currency: 'xp', amount: 50 },
    { type: 'item.grant', item: 'chest', quantity: 2 },
    { type: 'tier.evaluate', program: null },
    { type: 'challenge.progress', challengeId: 'chl_1' },
  ]);
});

t.test('hoisting: a lone segment check empties the tree; a campaign audience adds one; nested ones stay', async (t) => {
  const base = { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: 'a' }, actions: [{ type: 'tier.evaluate' }] };
  const lone = compileRule(parsed({ ...base, conditions: { path: 'customer.segments', op: 'contains', value: 'vip' } }), {
    ...meta,
    audienceSegment: 'eu',
  });
  t.same(
    lone.segments.map((s) => [s.at, s.v]),
    [
      ['campaign.audience', 'eu'],
      ['conditions', 'vip'],
    ],
  );
  t.equal(lone.conditions, null);
  const nested = compileRule(
    parsed({ ...base, conditions: { any: [{ path: 'customer.segments', op: 'contains', value: 'vip' }, { path: 'event.properties.x', op: 'exists' }] } }),
    meta,
  );
  t.same(nested.segments, [], 'a segment check inside any is an ordinary condition');
  t.equal(nested.conditions?.k, NodeKind.any);
});

t.test('validateAndCompile answers problems for an invalid document', async (t) => {
  const r = validateAndCompile({ schema: 'service.rule/v2' }, meta);
  t.equal(r.ok, false);
  if (!r.ok) t.same(r.problems.map((p) => p.path), ['trigger', 'actions']);
});
