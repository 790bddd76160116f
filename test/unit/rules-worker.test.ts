// Rule compilation runs in the piscina pool (off the main thread): the plan comes back through the
// worker boundary intact, evaluates the same as one compiled in-process, and simulate traces it on
// the main thread.
import { threadId } from 'node:worker_threads';
import t from 'tap';
import { compileRule } from '../../src/domain/rules/compile.js';
import { evaluatePlan } from '../../src/domain/rules/evaluate.js';
import { type RuleDefinition, validateRule } from '../../src/domain/rules/schema.js';
import { simulateRule } from '../../src/domain/rules/simulate.js';
import { WorkerPool } from '../../src/workers/pool.js';

const definition = {
  schema: 'service.rule/v2',
  trigger: { kind: 'customer_event', event: 'order.completed' },
  trust: { minimum: 'merchant_asserted' },
  limits: [{ id: 'per_order', scope: ['customer', 'event.properties.order_id'], max: 1 }],
  conditions: { all: [{ path: 'event.properties.total', op: 'gte', value: 10 }, { path: 'customer.counters.orders_30d', op: 'lt', value: 100 }] },
  actions: [{ type: 'points.award', currency: 'points', amount_from: 'event.properties.total', multiplier: 10 }],
};
const meta = { ruleId: 'rule_1', versionNumber: 2, priority: 5 };

t.test('rule.compile runs on a worker thread and returns the same plan as in-process compilation', async (t) => {
  const pool = new WorkerPool(2);
  t.teardown(() => pool.close());
  const r = await pool.run({ kind: 'rule.compile', definition, meta });
  if (r.kind !== 'rule.compiled' || !r.ok) return t.fail(`unexpected ${JSON.stringify(r)}`);
  t.not(r.threadId, threadId, 'compiled off the main thread');
  const local = compileRule((validateRule(definition) as { definition: RuleDefinition }).definition, meta);
  t.same(r.plan, local);
  const input = {
    event: { name: 'order.completed', properties: { total: 12.5, order_id: 'o1' }, trust: 'merchant_asserted' },
    customer: { attributes: {}, counters: { orders_30d: 3 }, countersReady: new Set(['orders_30d']), segments: [], tiers: {}, externalId: 'u1' },
    limitCounts: () => 0,
  };
  t.same(evaluatePlan(r.plan, input), {
    fired: true,
    actions: [{ type: 'points.award', currency: 'points', amount: 125 }],
    limitKeys: [{ limitId: 'per_order', scopeKey: 'customer|s:o1' }],
  });
});

t.test('rule.compile answers the problems of an invalid definition', async (t) => {
  const pool = new WorkerPool(1);
  t.teardown(() => pool.close());
  const r = await pool.run({ kind: 'rule.compile', definition: { ...definition, conditions: { all: [{ path: 'x.y', op: 'eq', value: 1 }] } }, meta });
  t.match(r, { kind: 'rule.compiled', ok: false, problems: [{ path: 'conditions.all[0].path', message: /Unknown path prefix/ }] });
});

t.test('a plan compiled on a worker thread traces on the main thread (simulate)', async (t) => {
  const pool = new WorkerPool(1);
  t.teardown(() => pool.close());
  const r = await pool.run({ kind: 'rule.compile', definition, meta });
  if (r.kind !== 'rule.compiled' || !r.ok) return t.fail(`unexpected ${JSON.stringify(r)}`);
  t.not(r.threadId, threadId);
  const result = simulateRule(r.plan, {
    event: { name: 'order.completed', properties: { total: 12, order_id: 'o1' }, trust: 'merchant_asserted' },
    customer: { attributes: {}, counters: { orders_30d: 3 }, readyCounters: ['orders_30d'], segments: [], tiers: {}, externalId: 'u1' },
    limitCounts: [{ limitId: 'per_order', scopeKey: 'customer|s:o1', count: 1 }],
  });
  t.match(result, { simulated: true, plan: [], trace: { outcome: { fired: false, reason: 'limit_reached', param: 'per_order' } } });
  t.same(
    result.trace.steps.map((s) => [s.check, s.pass]),
    [
      ['trigger', true],
      ['trust', true],
      ['counter', true],
      ['limit', false],
      ['condition', true],
      ['condition', true],
      ['group', true],
      ['amount', true],
    ],
  );
});
