// Rule evaluation: every op (type mismatches are false, never a throw), all/any/not nesting, each
// skip reason and the order in which they are checked, limits and scope keys, amount_from, and
// the simulate trace (every check with expected and actual values, in evaluation order); a scope
// value missing (limit_scope_missing), long values hashed in per-customer keys, and simulate's
// budget step.
import t from 'tap';
import { compileRule, type RuleMeta, type RulePlan, validateAndCompile } from '../../src/domain/rules/compile.js';
import { boundLimitKey, type EvalInput, evaluatePlan, hashedScopePart, type RuleOutcome, scopeKey, traceRule } from '../../src/domain/rules/evaluate.js';
import { validateRule } from '../../src/domain/rules/schema.js';
import { budgetKeysOf, simulateRule } from '../../src/domain/rules/simulate.js';

const meta: RuleMeta = { ruleId: 'rule_1', versionNumber: 1, priority: 0 };

function plan(over: Record<string, unknown>, m: RuleMeta = meta): RulePlan {
  const v = validateRule({
    schema: 'service.rule/v2',
    trigger: { kind: 'customer_event', event: 'order.completed' },
    actions: [{ type: 'points.award', currency: 'points', amount: 10 }],
    ...over,
  });
  if (!v.ok) throw new Error(JSON.stringify(v.problems));
  return compileRule(v.definition, m);
}

interface Given {
  name?: string;
  properties?: Record<string, unknown>;
  trust?: string;
  attributes?: Record<string, unknown>;
  counters?: Record<string, number>;
  ready?: string[];
  segments?: string[];
  tiers?: Record<string, string>;
  externalId?: string | null;
  limitCounts?: Record<string, number>;
}

function input(g: Given = {}): EvalInput {
  const counts = g.limitCounts ?? {};
  return {
    event: { name: g.name ?? 'order.completed', properties: g.properties ?? {}, trust: g.trust ?? 'merchant_asserted' },
    customer: {
      attributes: g.attributes ?? {},
      counters: g.counters ?? {},
      countersReady: new Set(g.ready ?? Object.keys(g.counters ?? {})),
      segments: g.segments ?? [],
      tiers: g.tiers ?? {},
      externalId: g.externalId === undefined ? 'u1' : g.externalId,
    },
    limitCounts: (id, key) => counts[`${id}@${key}`] ?? 0,
  };
}

const leafPlan = (path: string, op: string, value?: unknown) => plan({ conditions: value === undefined ? { path, op } : { path, op, value } });

t.test('every op, including absent values and type mismatches', async (t) => {
  // [path, op, value, event properties, expected fired]
  const p = 'event.properties.x';
  const table: [string, string, unknown, Record<string, unknown>, boolean][] = [
    [p, 'eq', 5, { x: 5 }, true],
    [p, 'eq', 5, { x: '5' }, false],
    [p, 'eq', 'a', { x: 'a' }, true],
    [p, 'eq', true, { x: true }, true],
    [p, 'eq', null, { x: null }, true],
    [p, 'eq', null, {}, false],
    [p, 'eq', 5, {}, false],
    [p, 'eq', 5, { x: [5] }, false],
    [p, 'ne', 5, { x: 6 }, true],
    [p, 'ne', 5, { x: 5 }, false],
    [p, 'ne', 5, {}, true],
    [p, 'ne', 5, { x: '5' }, true],
    [p, 'gt', 5, { x: 6 }, true],
    [p, 'gt', 5, { x: 5 }, false],
    [p, 'gt', 5, { x: '6' }, false],
    [p, 'gt', 5, { x: null }, false],
    [p, 'gt', 5, {}, false],
    [p, 'gte', 5, { x: 5 }, true],
    [p, 'gte', 5, { x: 4.99 }, false],
    [p, 'lt', 5, { x: 4 }, true],
    [p, 'lt', 5, { x: 5 }, false],
    [p, 'lt', 5, { x: true }, false],
    [p, 'lte', 5, { x: 5 }, true],
    [p, 'lte', 5, { x: 6 }, false],
    [p, 'lte', 5, { x: [] }, false],
    [p, 'in', ['a', 'b', 3, true], { x: 'b' }, true],
    [p, 'in', ['a', 'b', 3, true], { x: 3 }, true],
    [p, 'in', ['a', 'b', 3, true], { x: true }, true],
    [p, 'in', ['a', 'b', 3, true], { x: false }, false],
    [p, 'in', ['a', 'b', 3, true], { x: '3' }, false],
    [p, 'in', ['a', 'b', 3, true], {}, false],
    [p, 'in', ['a', 'b', 3, true], { x: ['a'] }, false],
    [p, 'not_in', ['a', 'b'], { x: 'c' }, true],
    [p, 'not_in', ['a', 'b'], { x: 'a' }, false],
    [p, 'not_in', ['a', 'b'], {}, true],
    [p, 'exists', undefined, { x: 0 }, true],
    [p, 'exists', undefined, { x: false }, true],
    [p, 'exists', undefined, { x: null }, false],
    [p, 'exists', undefined, {}, false],
    [p, 'exists', true, { x: 'a' }, true],
    [p, 'exists', false, {}, true],
    [p, 'exists', false, { x: 1 }, false],
    [p, 'contains', 'ell', { x: 'hello' }, true],
    [p, 'contains', 'xyz', { x: 'hello' }, false],
    [p, 'contains', 'a', { x: ['b', 'a'] }, true],
    [p, 'contains', 2, { x: [1, 2] }, true],
    [p, 'contains', 2, { x: ['2'] }, false],
    [p, 'contains', 1, { x: 'a1' }, false],
    [p, 'contains', 'a', { x: { a: 1 } }, false],
    [p, 'contains', 'a', {}, false],
    ['event.properties.a.b', 'eq', 1, { a: { b: 1 } }, true],
    ['event.properties.a.b', 'eq', 1, { a: 'str' }, false],
    ['event.properties.items.0', 'eq', 'sku', { items: ['sku'] }, true],
    ['event.properties.constructor', 'exists', undefined, {}, false],
    ['event.properties.toString', 'exists', undefined, { x: 1 }, false],
  ];
  for (const [path, op, value, properties, fired] of table) {
    const r = evaluatePlan(leafPlan(path, op, value), input({ properties }));
    t.equal(r.fired, fired, `${path} ${op} ${JSON.stringify(value)} on ${JSON.stringify(properties)}`);
  }
});

t.test('every path source resolves', async (t) => {
  const given: Given = {
    attributes: { country: 'FR', profile: { age: 30 } },
    counters: { orders_30d: 4 },
    segments: ['vip', 'eu'],
    tiers: { main: 'gold' },
    externalId: 'user-42',
  };
  const table: [string, string, unknown, boolean][] = [
    ['event.name', 'eq', 'order.completed', true],
    ['event.name', 'contains', 'order', true],
    ['customer.attributes.country', 'eq', 'FR', true],
    ['customer.attributes.profile.age', 'gte', 18, true],
    ['customer.attributes.missing', 'exists', false, true],
    ['customer.counters.orders_30d', 'gt', 3, true],
    ['customer.counters.orders_30d', 'in', [1, 2], false],
    ['customer.tiers.main', 'eq', 'gold', true],
    ['customer.tiers.other', 'exists', undefined, false],
    ['customer.external_id', 'contains', '42', true],
    ['customer.external_id', 'eq', 'user-1', false],
  ];
  for (const [path, op, value, fired] of table) {
    const p = plan({ conditions: { any: [value === undefined ? { path, op } : { path, op, value }] } });
    t.equal(evaluatePlan(p, input(given)).fired, fired, `${path} ${op} ${JSON.stringify(value)}`);
  }
  const noExt = plan({ conditions: { any: [{ path: 'customer.external_id', op: 'exists' }] } });
  t.equal(evaluatePlan(noExt, input({ externalId: null })).fired, false, 'a deleted customer has no external id');
});

t.test('all / any / not nest', async (t) => {
  const x = (v: number) => ({ path: 'event.properties.x', op: 'eq', value: v });
  const table: [string, unknown, boolean][] = [
    ['all true', { all: [x(1), { path: 'event.properties.y', op: 'eq', value: 2 }] }, true],
    ['all one false', { all: [x(1), x(2)] }, false],
    ['any one true', { any: [x(2), x(1)] }, true],
    ['any none', { any: [x(2), x(3)] }, false],
    ['not true', { not: x(2) }, true],
    ['not false', { not: x(1) }, false],
    ['not not', { not: { not: x(1) } }, true],
    ['all of any and not', { all: [{ any: [x(9), x(1)] }, { not: { all: [x(1), x(2)] } }] }, true],
    ['any of alls', { any: [{ all: [x(1), x(9)] }, { all: [x(1), { not: x(8) }] }] }, true],
    ['not of any', { not: { any: [x(1), x(2)] } }, false],
  ];
  for (const [name, conditions, fired] of table) {
    t.equal(evaluatePlan(plan({ conditions }), input({ properties: { x: 1, y: 2 } })).fired, fired, name);
  }
});

t.test('each skip reason, with its detail', async (t) => {
  const p = plan({
    trust: { minimum: 'merchant_asserted' },
    limits: [{ id: 'daily', scope: ['customer'], max: 2 }],
    conditions: { all: [{ path: 'customer.segments', op: 'contains', value: 'vip' }, { path: 'customer.counters.orders', op: 'gte', value: 3 }] },
  });
  const ok: Given = { segments: ['vip'], counters: { orders: 3 } };
  const table: [string, Given, Partial<RuleOutcome>][] = [
    ['fires', ok, { fired: true }],
    ['trigger', { ...ok, name: 'order.cancelled' }, { fired: false, reason: 'trigger_mismatch', param: 'trigger.event' }],
    ['trust', { ...ok, trust: 'client_reported' }, { fired: false, reason: 'trust_below_minimum', param: 'trust.minimum' }],
    ['unknown trust', { ...ok, trust: 'whatever' }, { fired: false, reason: 'trust_below_minimum' }],
    ['counter', { ...ok, ready: [] }, { fired: false, reason: 'counter_not_ready', param: 'orders' }],
    ['limit', { ...ok, limitCounts: { 'daily@customer': 2 } }, { fired: false, reason: 'limit_reached', param: 'daily' }],
    ['limit below max', { ...ok, limitCounts: { 'daily@customer': 1 } }, { fired: true }],
    ['segment', { ...ok, segments: ['eu'] }, { fired: false, reason: 'segment_not_matched', param: 'vip' }],
    ['conditions', { ...ok, counters: { orders: 2 } }, { fired: false, reason: 'conditions_not_met', param: 'conditions.all[1]' }],
  ];
  for (const [name, g, expected] of table) t.match(evaluatePlan(p, input(g)), expected, name);
  t.match(evaluatePlan(plan({ trust: { minimum: 'client_reported' } }), input(ok)), { fired: true }, 'higher trust passes');
  t.match(evaluatePlan(p, input({ ...ok, limitCounts: { 'daily@customer': 2 } })), {
    detail: "Limit 'daily' reached: fired 2 of 2 for scope 'customer'.",
  });
  t.match(evaluatePlan(p, input({ ...ok, counters: { orders: 2 } })), { detail: 'Condition conditions.all[1] (customer.counters.orders gte 3) is not met.' });
  t.match(evaluatePlan(p, input({ ...ok, trust: 'client_reported' })), {
    detail: "Event trust 'client_reported' is below the minimum 'merchant_asserted'.",
  });
});

t.test('skip reasons are checked in order: trigger, trust, counters, limits, segments, conditions, amount', async (t) => {
  const p = plan({
    trust: { minimum: 'merchant_asserted' },
    limits: [{ id: 'once', scope: ['customer'], max: 1 }],
    conditions: { all: [{ path: 'customer.segments', op: 'contains', value: 'vip' }, { path: 'customer.counters.n', op: 'gt', value: 5 }] },
    actions: [{ type: 'points.award', currency: 'points', amount_from: 'event.properties.total' }],
  });
  // Start with every check failing; fix them one at a time: the reason moves down the order.
  const g: Given = {
    name: 'other.event',
    trust: 'client_reported',
    counters: { n: 1 },
    ready: [],
    limitCounts: { 'once@customer': 1 },
    segments: [],
    properties: { total: 'lots' },
  };
  const steps: [string, Partial<Given>][] = [
    ['trigger_mismatch', {}],
    ['trust_below_minimum', { name: 'order.completed' }],
    ['counter_not_ready', { trust: 'merchant_asserted' }],
    ['limit_reached', { ready: ['n'] }],
    ['segment_not_matched', { limitCounts: {} }],
    ['conditions_not_met', { segments: ['vip'] }],
    ['amount_invalid', { counters: { n: 6 } }],
  ];
  for (const [reason, fix] of steps) {
    Object.assign(g, fix);
    t.match(evaluatePlan(p, input(g)), { fired: false, reason }, reason);
  }
  Object.assign(g, { properties: { total: 12.5 } });
  t.same(evaluatePlan(p, input(g)), {
    fired: true,
    actions: [{ type: 'points.award', currency: 'points', amount: 12 }],
    limitKeys: [{ limitId: 'once', scopeKey: 'customer' }],
  });
  t.same(
    traceRule(p, input(g)).steps.map((s) => s.check),
    ['trigger', 'trust', 'counter', 'limit', 'segment', 'condition', 'group', 'amount'],
    'the trace lists the checks in the same order',
  );
});

t.test('limits: scope keys from paths, one key per limit, max per key', async (t) => {
  const p = plan({
    limits: [
      { id: 'per_level', scope: ['customer', 'event.properties.level'], max: 1 },
      { id: 'per_day', scope: ['event.properties.day', 'customer'], max: 3 },
    ],
  });
  const table: [Record<string, unknown>, string, string][] = [
    [{ level: 3, day: '2024-01-01' }, 'customer|n:3', 's:2024-01-01|customer'],
    [{ level: 'boss', day: true }, 'customer|s:boss', 'b:true|customer'],
    [{ level: 'a|b\\c', day: 0 }, 'customer|s:a\\|b\\\\c', 'n:0|customer'],
    [{ level: '', day: false }, 'customer|s:', 'b:false|customer'],
  ];
  for (const [properties, k1, k2] of table) {
    const r = evaluatePlan(p, input({ properties }));
    t.same(r, { fired: true, actions: p.actions, limitKeys: [{ limitId: 'per_level', scopeKey: k1 }, { limitId: 'per_day', scopeKey: k2 }] }, k1);
    t.equal(scopeKey(p.limits[0]!.scope, input({ properties })), k1);
  }
  t.not(scopeKey(p.limits[0]!.scope, input({ properties: { level: 'a|b' } })), scopeKey(p.limits[0]!.scope, input({ properties: { level: 'a\\|b' } })), 'escaping keeps keys distinct');
  // The level-3 key is used up; level 4 still fires. The second limit is checked even when the first passes.
  const used = { 'per_level@customer|n:3': 1 };
  t.match(evaluatePlan(p, input({ properties: { level: 3 }, limitCounts: used })), { fired: false, reason: 'limit_reached', param: 'per_level' });
  t.match(evaluatePlan(p, input({ properties: { level: 4, day: 'd' }, limitCounts: used })), { fired: true });
  t.match(evaluatePlan(p, input({ properties: { level: 4, day: 'd' }, limitCounts: { 'per_day@s:d|customer': 3 } })), {
    fired: false,
    reason: 'limit_reached',
    param: 'per_day',
  });
  t.same(evaluatePlan(plan({}), input()), { fired: true, actions: plan({}).actions, limitKeys: [] }, 'no limits, no keys');
});

t.test('amount_from: floor(value x multiplier), forgiving float noise; non-positive or non-numeric skips', async (t) => {
  const table: [unknown, number, number | null][] = [
    [19.99, 100, 1999],
    [10, 1, 10],
    [10, 0.5, 5],
    [3, 0.5, 1],
    [0.4, 1, null],
    [0, 1, null],
    [-5, 1, null],
    ['10', 1, null],
    [undefined, 1, null],
    [2 ** 53, 2, null],
  ];
  for (const [total, multiplier, amount] of table) {
    const p = plan({ actions: [{ type: 'points.award', currency: 'points', amount_from: 'event.properties.total', multiplier }, { type: 'tier.evaluate' }] });
    const r = evaluatePlan(p, input({ properties: total === undefined ? {} : { total } }));
    if (amount === null) t.match(r, { fired: false, reason: 'amount_invalid', param: 'actions[0].amount_from' }, `${total} x ${multiplier}`);
    else
      t.same(
        r,
        { fired: true, actions: [{ type: 'points.award', currency: 'points', amount }, { type: 'tier.evaluate', program: null }], limitKeys: [] },
        `${total} x ${multiplier}`,
      );
  }
  const fromCounter = plan({ actions: [{ type: 'points.award', currency: 'points', amount_from: 'customer.counters.streak', multiplier: 10 }] });
  t.same(fromCounter.counters, ['streak']);
  t.match(evaluatePlan(fromCounter, input({ counters: { streak: 2 }, ready: [] })), { reason: 'counter_not_ready' });
  t.match(evaluatePlan(fromCounter, input({ counters: { streak: 2 } })), { actions: [{ amount: 20 }] });
});

t.test('countersReady may be a predicate; static actions are returned without copying', async (t) => {
  const p = plan({ conditions: { path: 'customer.counters.n', op: 'exists' } });
  const i = input({ counters: { n: 1 } });
  const asked: string[] = [];
  i.customer.countersReady = (name) => {
    asked.push(name);
    return true;
  };
  const r = evaluatePlan(p, i);
  t.same(asked, ['n']);
  t.ok(r.fired && r.actions === p.actions, 'the plan array itself');
});

t.test('the trace: every check, expected and actual values, in evaluation order, same outcome', async (t) => {
  const p = plan({
    trust: { minimum: 'merchant_asserted' },
    limits: [{ id: 'once', scope: ['customer'], max: 1 }],
    conditions: {
      all: [
        { path: 'customer.segments', op: 'contains', value: 'vip' },
        { path: 'event.properties.total', op: 'gte', value: 50 },
        { any: [{ path: 'customer.tiers.main', op: 'in', value: ['gold', 'silver'] }, { not: { path: 'event.properties.coupon', op: 'exists' } }] },
      ],
    },
  }, { ...meta, audienceSegment: 'eu' });
  const i = input({ trust: 'client_reported', segments: ['vip'], properties: { total: 20, coupon: 'X' }, tiers: { main: 'bronze' } });
  const trace = traceRule(p, i);
  t.same(trace.outcome, evaluatePlan(p, i), 'same verdict as evaluatePlan');
  t.match(trace.outcome, { fired: false, reason: 'trust_below_minimum' });
  const row = (s: (typeof trace.steps)[number]) => [s.check, s.at, s.path, s.op, s.expected, s.actual, s.found, s.pass];
  t.same(trace.steps.map(row), [
    ['trigger', 'trigger.event', 'event.name', 'eq', 'order.completed', 'order.completed', true, true],
    ['trust', 'trust.minimum', null, 'gte', 'merchant_asserted', 'client_reported', true, false],
    ['limit', 'limits[0]', null, 'lt', 1, 0, true, true],
    ['segment', 'campaign.audience', 'customer.segments', 'contains', 'eu', ['vip'], true, false],
    ['segment', 'conditions.all[0]', 'customer.segments', 'contains', 'vip', ['vip'], true, true],
    ['condition', 'conditions.all[1]', 'event.properties.total', 'gte', 50, 20, true, false],
    ['condition', 'conditions.all[2].any[0]', 'customer.tiers.main', 'in', ['gold', 'silver'], 'bronze', true, false],
    ['condition', 'conditions.all[2].any[1].not', 'event.properties.coupon', 'exists', true, 'X', true, true],
    ['group', 'conditions.all[2].any[1]', null, 'not', null, false, true, false],
    ['group', 'conditions.all[2]', null, 'any', null, false, true, false],
    ['group', 'conditions', null, 'all', null, false, true, false],
  ]);
  t.match(trace.steps[2], { limitId: 'once', scopeKey: 'customer' });
  const missing = traceRule(plan({ conditions: { path: 'event.properties.nope', op: 'eq', value: 1 } }), input());
  t.match(missing.steps.at(-1), { check: 'condition', actual: null, found: false, pass: false });
  t.same(JSON.parse(JSON.stringify(trace)), trace, 'JSON-safe');
});

t.test('simulateRule: a dry run with the actions it would apply, from plain-data input', async (t) => {
  const p = plan({
    limits: [{ id: 'once', scope: ['customer'], max: 1 }],
    conditions: { path: 'customer.counters.orders', op: 'gte', value: 1 },
  });
  const snapshot = {
    event: { name: 'order.completed', properties: {}, trust: 'merchant_asserted' },
    customer: { attributes: {}, counters: { orders: 2 }, readyCounters: ['orders'], segments: [], tiers: {}, externalId: 'u1' },
    limitCounts: [] as { limitId: string; scopeKey: string; count: number }[],
  };
  const fired = simulateRule(p, snapshot);
  t.same(fired.plan, [{ type: 'points.award', currency: 'points', amount: 10 }]);
  t.match(fired, { simulated: true, trace: { outcome: { fired: true } } });
  const limited = simulateRule(p, { ...snapshot, limitCounts: [{ limitId: 'once', scopeKey: 'customer', count: 1 }] });
  t.same(limited.plan, []);
  t.match(limited.trace.outcome, { fired: false, reason: 'limit_reached' });
  const notReady = simulateRule(p, { ...snapshot, customer: { ...snapshot.customer, readyCounters: [] } });
  t.match(notReady.trace.outcome, { fired: false, reason: 'counter_not_ready', param: 'orders' });
  t.match(notReady.trace.steps.find((s) => s.check === 'counter'), { actual: 'not_ready', pass: false });
});

t.test("simulateRule with the rule's campaign: its state is a step and a notLive entry, not the outcome; its audience is a segment check", async (t) => {
  const p = plan({});
  const snapshot = {
    event: { name: 'order.completed', properties: {}, trust: 'merchant_asserted' },
    customer: { attributes: {}, counters: {}, readyCounters: [], segments: ['vip'], tiers: {}, externalId: 'u1' },
    limitCounts: [] as { limitId: string; scopeKey: string; count: number }[],
  };
  const gate = { id: 'cmp_1', status: 'active' as const, startsAtMs: null, endsAtMs: null, audienceSegment: 'vip', capped: [] };
  const running = simulateRule(p, snapshot, { id: 'cmp_1', gate, nowMs: 1000 });
  t.match(running, { plan: [{ type: 'points.award' }], trace: { outcome: { fired: true } }, notLive: [] });
  t.match(running.trace.steps.slice(0, 2), [{ check: 'trigger' }, { check: 'campaign', expected: 'cmp_1', actual: 'running', found: true, pass: true }]);
  t.match(running.trace.steps.find((s) => s.at === 'campaign.audience'), { check: 'segment', expected: 'vip', pass: true });

  const outsider = simulateRule(p, { ...snapshot, customer: { ...snapshot.customer, segments: [] } }, { id: 'cmp_1', gate, nowMs: 1000 });
  t.match(outsider.trace.outcome, { fired: false, reason: 'segment_not_matched' });

  // Not running: the definition is still traced (plan and outcome), the campaign says why an event would be skipped.
  const paused = simulateRule(p, snapshot, { id: 'cmp_1', gate: { ...gate, status: 'paused' }, nowMs: 1000 });
  t.match(paused, { plan: [{ type: 'points.award' }], trace: { outcome: { fired: true } } });
  t.same(paused.notLive, [{ reason: 'campaign_inactive', detail: 'The campaign is paused.', param: 'campaign_id' }]);
  t.match(paused.trace.steps[1], { check: 'campaign', actual: 'The campaign is paused.', pass: false });
  const over = simulateRule(p, snapshot, { id: 'cmp_1', gate: { ...gate, endsAtMs: 500 }, nowMs: 1000 });
  t.match(over.notLive, [{ reason: 'campaign_inactive', detail: /over/ }]);
  const gone = simulateRule(p, snapshot, { id: 'cmp_1', gate: undefined, nowMs: 1000 });
  t.match(gone.notLive, [{ reason: 'campaign_inactive', detail: /does not exist/ }]);
  t.match(gone.trace.steps[1], { check: 'campaign', found: false, pass: false });
  const otherEvent = simulateRule(p, { ...snapshot, event: { ...snapshot.event, name: 'x.y' } }, { id: 'cmp_1', gate: { ...gate, status: 'paused' }, nowMs: 1000 });
  t.match(otherEvent.trace.outcome, { reason: 'trigger_mismatch' }, 'the trigger is checked first, as the engine does');
});

t.test("simulateRule with the rule's status: what keeps an event from running the traced definition", async (t) => {
  const p = plan({});
  const snapshot = {
    event: { name: 'order.completed', properties: {}, trust: 'merchant_asserted' },
    customer: { attributes: {}, counters: {}, readyCounters: [], segments: [], tiers: {}, externalId: 'u1' },
    limitCounts: [] as { limitId: string; scopeKey: string; count: number }[],
  };
  const reasons = (status: 'draft' | 'published' | 'paused' | 'archived', tracedDraft: boolean, activeVersion: number | null) => {
    const r = simulateRule(p, snapshot, undefined, { status, tracedDraft, activeVersion });
    t.match(r.trace.outcome, { fired: true }, `${status}: the definition is traced`);
    return r.notLive.map((n) => [n.reason, n.param]);
  };
  t.same(reasons('published', false, 2), [], 'published, its active version: live');
  t.same(reasons('draft', true, null), [['rule_not_published', 'status']]);
  t.same(reasons('published', true, 2), [['draft_not_published', 'draft_definition']]);
  t.same(reasons('paused', false, 2), [['rule_paused', 'status']]);
  t.same(reasons('paused', true, 2), [
    ['rule_paused', 'status'],
    ['draft_not_published', 'draft_definition'],
  ]);
  t.same(reasons('archived', false, 2), [['rule_archived', 'status']]);
  t.match(simulateRule(p, snapshot, undefined, { status: 'published', tracedDraft: true, activeVersion: 2 }).notLive[0], {
    detail: 'This is the unpublished draft: events run version 2 until it is published.',
  });
});

t.test('shared limits: a scope without a customer path passes only on a granted slot, never in limitKeys', async (t) => {
  const p = plan({
    limits: [
      { id: 'mine', scope: ['customer'], max: 5 },
      { id: 'per_order', scope: ['event.properties.order_id'], max: 2 },
    ],
  });
  const g = { properties: { order_id: 'o1' } };
  const key = 'rule_1|per_order|s:o1';
  t.match(evaluatePlan(p, input(g)), { fired: false, reason: 'limit_reached', param: 'per_order', detail: /shared by every customer and no slot was reserved/ }, 'no answer: reached');
  const granted = { ...input(g), sharedLimits: { [key]: { granted: true, taken: 2 } } };
  t.same(evaluatePlan(p, granted), { fired: true, actions: p.actions, limitKeys: [{ limitId: 'mine', scopeKey: 'customer' }] }, 'granted: fires; only the per-customer key is counted by the customer');
  const counted = { ...input({ ...g, limitCounts: { 'per_order@s:o1': 99 } }), sharedLimits: { [key]: { granted: true, taken: 1 } } };
  t.match(evaluatePlan(p, counted), { fired: true }, "the customer's own counts are not read for a shared limit");
  const refused = { ...input(g), sharedLimits: { [key]: { granted: false, taken: 2 } } };
  t.match(evaluatePlan(p, refused), { fired: false, reason: 'limit_reached', param: 'per_order', detail: "Limit 'per_order' reached: it is shared by every customer; 2 of 2 taken for scope 's:o1'." });
  const trace = traceRule(p, refused).steps.filter((s) => s.check === 'limit');
  t.match(trace, [
    { limitId: 'mine', pass: true },
    { limitId: 'per_order', scopeKey: 's:o1', shared: true, expected: 2, actual: 2, pass: false },
  ]);
  t.equal(trace[0]!.shared, undefined, 'a per-customer step is not marked shared');

  // Simulate: the store's count, no reservation; passes while taken < max.
  const sim = (taken: number) =>
    simulateRule(p, {
      event: { name: 'order.completed', properties: { order_id: 'o1' }, trust: 'merchant_asserted' },
      customer: { attributes: {}, counters: {}, readyCounters: [], segments: [], tiers: {}, externalId: null },
      limitCounts: [],
      sharedCounts: [{ limitId: 'per_order', scopeKey: 's:o1', taken }],
    });
  t.match(sim(1).trace.outcome, { fired: true });
  t.match(sim(2).trace.outcome, { fired: false, reason: 'limit_reached' });
  t.match(sim(2).trace.steps.find((s) => s.limitId === 'per_order'), { shared: true, actual: 2, pass: false });

  // A stored definition whose scope names customer.* without customer (refused for new rules)
  // still compiles and counts per customer.
  const stored = {
    schema: 'service.rule/v2',
    trigger: { kind: 'customer_event', event: 'order.completed' },
    limits: [{ id: 'country', scope: ['customer.attributes.country'], max: 1 }],
    actions: [{ type: 'points.award', currency: 'points', amount: 1 }],
  };
  t.equal(validateRule(stored).ok, false, 'refused for a new definition');
  const c = validateAndCompile(stored, meta);
  if (!c.ok) return t.fail('a stored definition must compile');
  t.same(evaluatePlan(c.plan, input({ attributes: { country: 'FR' } })), { fired: true, actions: c.plan.actions, limitKeys: [{ limitId: 'country', scopeKey: 's:FR' }] });
  t.match(evaluatePlan(c.plan, input({ attributes: { country: 'FR' }, limitCounts: { 'country@s:FR': 1 } })), { fired: false, reason: 'limit_reached' });
});

t.test('limit_scope_missing: a scope path without a string, number or boolean skips the rule and is never counted', async (t) => {
  const perOrder = plan({ limits: [{ id: 'once_per_order', scope: ['customer', 'event.properties.order_id'], max: 1 }] });
  const shared = plan({ limits: [{ id: 'first_coupon', scope: ['event.properties.code'], max: 1 }] });
  const table: [string, Record<string, unknown>, string][] = [
    ['absent', {}, 'absent'],
    ['null', { order_id: null, code: null }, 'null'],
    ['an object', { order_id: { x: 1 }, code: { x: 1 } }, 'an object'],
    ['an array', { order_id: [1, 2], code: [1, 2] }, 'an array'],
  ];
  for (const [name, properties, what] of table) {
    // Given a count already spent under the old shared "no value" key, when such an event comes,
    // then the rule skips with its own reason, naming the path, and adds no limit key.
    const r = evaluatePlan(perOrder, input({ properties, limitCounts: { 'once_per_order@customer|-': 1 } }));
    t.same(
      r,
      {
        fired: false,
        reason: 'limit_scope_missing',
        param: 'once_per_order',
        detail: `Limit 'once_per_order' cannot count this event: its scope path 'event.properties.order_id' is ${what} (a scope value is a string, number or boolean).`,
      },
      `per customer: ${name}`,
    );
    t.equal(scopeKey(perOrder.limits[0]!.scope, input({ properties })), null);
    // A shared scope: skipped before the store's answer is read (no answer needed, no slot taken).
    t.match(evaluatePlan(shared, input({ properties })), { fired: false, reason: 'limit_scope_missing', param: 'first_coupon', detail: /'event\.properties\.code' is / }, `shared: ${name}`);
  }
  // A customer path of a per-customer scope (a stored definition) counts the same way: no external id, no key.
  const byExternal = plan({ limits: [{ id: 'per_ext', scope: ['customer', 'customer.external_id'], max: 1 }] });
  t.match(evaluatePlan(byExternal, input({ externalId: null })), { reason: 'limit_scope_missing', detail: /'customer\.external_id' is absent/ });
  t.match(evaluatePlan(byExternal, input({ externalId: 'u1' })), { fired: true, limitKeys: [{ scopeKey: 'customer|s:u1' }] });

  // Checked limit by limit, in order: an earlier limit reached is reported first; a missing value
  // comes before the count of its own limit.
  const two = plan({
    limits: [
      { id: 'daily', scope: ['customer'], max: 1 },
      { id: 'per_order', scope: ['customer', 'event.properties.order_id'], max: 1 },
    ],
  });
  t.match(evaluatePlan(two, input({ limitCounts: { 'daily@customer': 1 } })), { reason: 'limit_reached', param: 'daily' });
  t.match(evaluatePlan(two, input({ limitCounts: { 'per_order@customer|-': 5 } })), { reason: 'limit_scope_missing', param: 'per_order' });
  t.match(evaluatePlan(two, input({ ready: [], counters: { n: 1 } })), { reason: 'limit_scope_missing' }, 'after counters (none read here)');

  // Two shared limits, the second without a value: the store reserved nothing for the plan, and
  // the skip is the missing scope's (as the trace, which reads counts, reaches it), not limit_reached.
  const twoShared = plan({
    limits: [
      { id: 'per_code', scope: ['event.properties.code'], max: 1 },
      { id: 'per_store', scope: ['event.properties.store'], max: 1 },
    ],
  });
  t.match(evaluatePlan(twoShared, input({ properties: { code: 'A' } })), { reason: 'limit_scope_missing', param: 'per_store' });

  // The trace names the path, found false, no scope key; the verdict is evaluatePlan's.
  const i = input({ properties: { order_id: null } });
  const trace = traceRule(perOrder, i);
  t.same(trace.outcome, evaluatePlan(perOrder, i));
  const step = trace.steps.find((s) => s.check === 'limit')!;
  t.match(step, { at: 'limits[0]', path: 'event.properties.order_id', expected: 1, actual: null, found: false, pass: false, limitId: 'once_per_order' });
  t.equal(step.scopeKey, undefined);
  t.match(traceRule(shared, input()).steps.find((s) => s.check === 'limit'), { shared: true, path: 'event.properties.code', found: false, pass: false });
});

t.test('scope values keep their JSON type: 1 and "1" are two scope values (documented)', async (t) => {
  const p = plan({ limits: [{ id: 'once_per_order', scope: ['customer', 'event.properties.order_id'], max: 1 }] });
  t.equal(scopeKey(p.limits[0]!.scope, input({ properties: { order_id: 1 } })), 'customer|n:1');
  t.equal(scopeKey(p.limits[0]!.scope, input({ properties: { order_id: '1' } })), 'customer|s:1');
  t.match(evaluatePlan(p, input({ properties: { order_id: '1' }, limitCounts: { 'once_per_order@customer|n:1': 1 } })), { fired: true });
});

t.test('long scope values: hashed in per-customer keys (bounded size), kept in shared ones; old keys are read under the new one', async (t) => {
  const p = plan({ limits: [{ id: 'once_per_order', scope: ['customer', 'event.properties.order_id'], max: 1 }] });
  const shared = plan({ limits: [{ id: 'per_order', scope: ['event.properties.order_id'], max: 1 }] });
  const keyOf = (v: unknown, q = p) => scopeKey(q.limits[0]!.scope, input({ properties: { order_id: v } }));
  const at64 = 'x'.repeat(64);
  t.equal(keyOf(at64), `customer|s:${at64}`, 'up to 64 characters: the value itself');
  const huge = 'ORD-2024|'.padEnd(20_000, 'z');
  const k = keyOf(huge)!;
  t.match(k, /^customer\|h:[0-9a-z]{22}:ORD-2024\\\|zzzzzzz$/, "'h:' + hash + ':' + the first 16 characters, escaped");
  t.ok(k.length <= 'customer|'.length + 57, `bounded (${k.length} characters)`);
  t.equal(keyOf(huge), k, 'deterministic');
  t.not(keyOf(`${huge}a`), k, 'another value, another key');
  t.not(keyOf('y'.repeat(65)), keyOf('y'.repeat(66)), 'same prefix, another key');
  t.equal(hashedScopePart('😀'.repeat(40)).split(':')[2], '😀'.repeat(8));
  t.equal(hashedScopePart(`a${'😀'.repeat(40)}`).split(':')[2], `a${'😀'.repeat(7)}`, 'the prefix never splits a surrogate pair');
  t.equal(keyOf(huge, shared), `s:${huge.replace('|', '\\|')}`, 'a shared scope keeps the value (its store bounds its keys)');

  // Given counts written by older code (raw long value), when the key is read now, then it is the
  // hashed key: the same limit still counts as spent.
  const old = `rule_1|once_per_order|customer|s:${huge.replace('|', '\\|')}`;
  t.equal(boundLimitKey(old), `rule_1|once_per_order|${k}`);
  t.equal(boundLimitKey(boundLimitKey(old)), boundLimitKey(old), 'idempotent');
  for (const kept of ['rule_1|once|customer', `rule_1|once_per_order|customer|s:${at64}`, `rule_1|l|customer|s:${'\\|'.repeat(40)}`, `rule_1|l|customer|n:${'9'.repeat(80)}`]) {
    t.equal(boundLimitKey(kept), kept, `kept: ${kept.slice(0, 40)}`);
  }
  const twoLong = `rule_1|l|customer|s:${'a'.repeat(70)}|s:${'b'.repeat(70)}`;
  t.equal(boundLimitKey(twoLong), `rule_1|l|customer|${hashedScopePart('a'.repeat(70))}|${hashedScopePart('b'.repeat(70))}`);
});

t.test('simulateRule with a campaign budget: a budget step per capped award; what does not fit leaves the plan', async (t) => {
  const snapshot = {
    event: { name: 'order.completed', properties: {}, trust: 'merchant_asserted' },
    customer: { attributes: {}, counters: {}, readyCounters: [], segments: [], tiers: {}, externalId: 'u1' },
    limitCounts: [] as { limitId: string; scopeKey: string; count: number }[],
  };
  const gate = { id: 'cmp_1', status: 'active' as const, startsAtMs: null, endsAtMs: null, audienceSegment: null, capped: ['coins'] };
  const rule = plan({
    actions: [
      { type: 'points.award', currency: 'coins', amount: 30 },
      { type: 'points.award', currency: 'gems', amount: 5 },
      { type: 'points.award', currency: 'coins', amount: 30 },
    ],
  });
  t.same(budgetKeysOf(rule, gate), ['cmp_1|coins']);
  t.same(budgetKeysOf(rule, { ...gate, capped: [] }), []);
  t.same(budgetKeysOf(rule, undefined), []);
  const run = (left: number, p = rule) => simulateRule(p, snapshot, { id: 'cmp_1', gate, nowMs: 1000, budgetLeft: { 'cmp_1|coins': left } });

  // Given 50 left, when two awards of 30 are simulated, then the first fits and the second does not.
  const partial = run(50);
  t.same(partial.plan, [
    { type: 'points.award', currency: 'coins', amount: 30 },
    { type: 'points.award', currency: 'gems', amount: 5 },
  ]);
  t.match(partial.trace.outcome, { fired: true });
  t.same(
    partial.trace.steps.filter((s) => s.check === 'budget'),
    [
      { check: 'budget', at: 'actions[0]', path: null, op: 'gte', expected: 30, actual: 50, found: true, pass: true },
      { check: 'budget', at: 'actions[2]', path: null, op: 'gte', expected: 30, actual: 20, found: true, pass: false },
    ],
  );
  t.same(run(60).plan.length, 3, 'enough for both');

  // Given every action is a capped award that does not fit, then the outcome is budget_exhausted, as the engine reports it.
  const only = plan({ actions: [{ type: 'points.award', currency: 'coins', amount: 100 }] });
  const none = run(50, only);
  t.same(none.plan, []);
  t.same(none.trace.outcome, {
    fired: false,
    reason: 'budget_exhausted',
    detail: "The budget of campaign 'cmp_1' cannot cover the rule's awards (100 coins): nothing was applied, and the firing is not counted against the rule's limits.",
    param: 'actions[0]',
  });
  t.match(none.trace.steps.at(-1), { check: 'budget', expected: 100, actual: 50, pass: false });
  t.match(run(100, only), { plan: [{ amount: 100 }], trace: { outcome: { fired: true } } });

  // Nothing to check: a rule that does not fire, or no budget read. A campaign not running is
  // still traced, budget included (its state is a notLive entry, not the outcome).
  const notFired = simulateRule(only, { ...snapshot, event: { ...snapshot.event, name: 'x.y' } }, { id: 'cmp_1', gate, nowMs: 1000, budgetLeft: { 'cmp_1|coins': 0 } });
  t.match(notFired.trace.outcome, { reason: 'trigger_mismatch' });
  t.equal(notFired.trace.steps.filter((s) => s.check === 'budget').length, 0);
  const paused = simulateRule(only, snapshot, { id: 'cmp_1', gate: { ...gate, status: 'paused' }, nowMs: 1000, budgetLeft: { 'cmp_1|coins': 0 } });
  t.match(paused, { notLive: [{ reason: 'campaign_inactive' }], trace: { outcome: { reason: 'budget_exhausted' } } });
  const unread = simulateRule(only, snapshot, { id: 'cmp_1', gate, nowMs: 1000 });
  t.match(unread, { plan: [{ amount: 100 }], trace: { outcome: { fired: true } } });
  t.equal(unread.trace.steps.filter((s) => s.check === 'budget').length, 0);
  // amount_from: the resolved amount meets the budget.
  const from = plan({ actions: [{ type: 'points.award', currency: 'coins', amount_from: 'event.properties.total' }] });
  t.same(budgetKeysOf(from, gate), ['cmp_1|coins']);
  const big = simulateRule(from, { ...snapshot, event: { ...snapshot.event, properties: { total: 70 } } }, { id: 'cmp_1', gate, nowMs: 1000, budgetLeft: { 'cmp_1|coins': 69 } });
  t.match(big.trace.outcome, { reason: 'budget_exhausted' });
});
