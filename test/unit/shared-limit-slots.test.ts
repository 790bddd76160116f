// Shared limit slots around one event step (catalog/shared-limit-slots.ts) on the in-memory store:
// events no shared-limit plan is triggered by pay nothing (null, synchronously); a reservation
// carries its answers in a copy of the rules context; after the reply, created slots of rules that
// did not fire are freed (a firing whose awards the campaign budget could not cover among them),
// a duplicate frees what it created, internal_error keeps everything; an event without a value for
// a shared scope reserves nothing.
import t from 'tap';
import type { CallResult } from '../../src/actors/partition.js';
import { reserveSharedLimits, settleSharedLimits } from '../../src/catalog/shared-limit-slots.js';
import { emptyLedger } from '../../src/domain/ledger.js';
import { applyRules, type RulesContext } from '../../src/domain/rule-effects.js';
import { compileRule, type RulePlan } from '../../src/domain/rules/compile.js';
import { validateRule } from '../../src/domain/rules/schema.js';
import { MemorySharedLimits } from '../../src/persistence/memory/shared-limits.js';

function plan(ruleId: string, over: Record<string, unknown> = {}): RulePlan {
  const v = validateRule({
    schema: 'service.rule/v2',
    trigger: { kind: 'customer_event', event: 'order.completed' },
    limits: [{ id: 'per_order', scope: ['event.properties.order_id'], max: 1 }],
    actions: [{ type: 'points.award', currency: 'points', amount: 10 }],
    ...over,
  });
  if (!v.ok) throw new Error(JSON.stringify(v.problems));
  return compileRule(v.definition, { ruleId, versionNumber: 1, priority: 0 });
}

const ev = (order: string, name = 'order.completed', trust = 'merchant_asserted') => ({ name, properties: { order_id: order }, trust });
const item = (ruleId: string, scopeKey: string) => ({ ruleId, limitId: 'per_order', scopeKey });
const flush = () => new Promise((r) => setTimeout(r, 10));

t.test('reserve before the step, settle after the reply', async (t) => {
  const store = new MemorySharedLimits();
  const a = plan('rule_a');
  const b = plan('rule_b', { trust: { minimum: 'merchant_asserted' } });
  const rules: RulesContext = { plans: [a, b], currencies: [], tierPrograms: [], sharedPlans: [a, b] };

  t.equal(reserveSharedLimits(store, 'env', 'e0', rules, ev('o1', 'other.event'), 0), null, 'another event name: null, synchronously');
  t.equal(reserveSharedLimits(store, 'env', 'e0', { ...rules, sharedPlans: [] }, ev('o1'), 0), null, 'no shared plans: null');
  t.equal(reserveSharedLimits(undefined, 'env', 'e0', rules, ev('o1'), 0), null, 'no store: null');

  const r1 = await reserveSharedLimits(store, 'env', 'e1', rules, ev('o1', 'order.completed', 'client_reported'), 0);
  t.same(r1?.rules.sharedLimits, { 'rule_a|per_order|s:o1': { granted: true, taken: 1 } }, 'a rule whose trust minimum the event misses takes no slot');
  t.not(r1?.rules, rules, 'a copy of the context carries the answers');
  t.equal(rules.sharedLimits, undefined, 'the cached context is untouched');

  // rule_a fired, rule_b did not: rule_b's slot is freed, rule_a's kept.
  const r2 = await reserveSharedLimits(store, 'env', 'e2', rules, ev('o2'), 0);
  t.same(r2?.held?.items.map((i) => i.ruleId), ['rule_a', 'rule_b']);
  const fired: CallResult = { ok: true, reply: { kind: 'event', duplicate: false, effects: [{ type: 'rule.fired', ruleId: 'rule_a', version: 1 }] } as never };
  settleSharedLimits(store, r2!.held, Promise.resolve(fired));
  await flush();
  t.same(await store.counts('env', [item('rule_a', 's:o2'), item('rule_b', 's:o2')]), [1, 0]);

  // A duplicate of e2: granted from its held slot (created false), freeing nothing of it.
  const dup = await reserveSharedLimits(store, 'env', 'e2', rules, ev('o2'), 0);
  t.same(dup?.rules.sharedLimits?.['rule_a|per_order|s:o2'], { granted: true, taken: 1 });
  t.same(dup?.held?.items.map((i) => i.ruleId), ['rule_b'], 'only the freed slot is created again');
  const duplicate: CallResult = { ok: true, reply: { kind: 'event', duplicate: true, effects: [{ type: 'rule.fired', ruleId: 'rule_a', version: 1 }] } as never };
  settleSharedLimits(store, dup!.held, Promise.resolve(duplicate));
  await flush();
  t.same(await store.counts('env', [item('rule_a', 's:o2'), item('rule_b', 's:o2')]), [1, 0], 'the duplicate freed what it created, not the first slot');

  // internal_error keeps the slots; another error frees them.
  const r3 = await reserveSharedLimits(store, 'env', 'e3', rules, ev('o3'), 0);
  settleSharedLimits(store, r3!.held, Promise.resolve({ ok: false, code: 'internal_error' }));
  await flush();
  t.same(await store.counts('env', [item('rule_a', 's:o3')]), [1], 'internal_error: kept');
  const r4 = await reserveSharedLimits(store, 'env', 'e4', rules, ev('o4'), 0);
  settleSharedLimits(store, r4!.held, Promise.resolve({ ok: false, code: 'event_id_conflict' }));
  await flush();
  t.same(await store.counts('env', [item('rule_a', 's:o4'), item('rule_b', 's:o4')]), [0, 0], 'another error: freed');
});

t.test('a shared scope value the event lacks reserves nothing for that plan (the rule skips with limit_scope_missing)', async (t) => {
  const store = new MemorySharedLimits();
  const a = plan('rule_a');
  const rules: RulesContext = { plans: [a], currencies: [], tierPrograms: [], sharedPlans: [a] };
  for (const order_id of [undefined, null, { x: 1 }, [1]]) {
    const properties = order_id === undefined ? {} : { order_id };
    t.equal(reserveSharedLimits(store, 'env', 'e1', rules, { name: 'order.completed', properties, trust: 'merchant_asserted' }, 0), null, JSON.stringify(properties));
  }
  // A plan with two shared limits, one of them missing: no slot for either.
  const two = plan('rule_two', {
    limits: [
      { id: 'per_order', scope: ['event.properties.order_id'], max: 1 },
      { id: 'per_code', scope: ['event.properties.code'], max: 1 },
    ],
  });
  const both: RulesContext = { plans: [a, two], currencies: [], tierPrograms: [], sharedPlans: [a, two] };
  const r = await reserveSharedLimits(store, 'env', 'e2', both, ev('o1'), 0);
  t.same(r?.held?.items.map((i) => i.ruleId), ['rule_a'], 'only the plan whose scopes have values reserves');
  t.same(await store.counts('env', [item('rule_two', 's:o1')]), [0]);
});

t.test('given a shared limit and a campaign budget that covers nothing, when the event is stepped and settled, then its slot is given back', async (t) => {
  const store = new MemorySharedLimits();
  const a = { ...plan('rule_a'), campaignId: 'cmp_1' };
  const gate = { id: 'cmp_1', status: 'active' as const, startsAtMs: null, endsAtMs: null, audienceSegment: null, capped: ['points'] };
  const rules: RulesContext = {
    plans: [a],
    currencies: [{ key: 'points', negativeBalance: 'forbid', expiryDays: null }],
    tierPrograms: [],
    sharedPlans: [a],
    campaigns: { cmp_1: gate },
    budget: { 'cmp_1|points': 0 },
  };
  const subject = { externalId: 'u1', attributes: {}, ledger: emptyLedger(), ruleLimits: {}, tiers: {}, inventory: {} };
  const stepCtx = { nowMs: 1, newId: (p: string) => `${p}_1` };

  const r = await reserveSharedLimits(store, 'env', 'e1', rules, ev('o1'), 0);
  t.same(await store.counts('env', [item('rule_a', 's:o1')]), [1], 'a slot is held during the step');
  const step = applyRules(r!.rules, ev('o1'), subject, stepCtx);
  t.match(step.effects, [{ type: 'rule.skipped', ruleId: 'rule_a', reason: 'budget_exhausted' }]);
  settleSharedLimits(store, r!.held, Promise.resolve({ ok: true, reply: { kind: 'event', duplicate: false, effects: step.effects } as never }));
  await flush();
  t.same(await store.counts('env', [item('rule_a', 's:o1')]), [0], 'nothing was awarded: the slot is free for the next customer');

  // With budget, the next event fires and keeps its slot.
  const funded: RulesContext = { ...rules, budget: { 'cmp_1|points': 10 } };
  const r2 = await reserveSharedLimits(store, 'env', 'e2', funded, ev('o1'), 0);
  const step2 = applyRules(r2!.rules, ev('o1'), subject, stepCtx);
  t.match(step2.effects, [{ type: 'rule.fired' }, { type: 'points.awarded', amount: 10 }]);
  settleSharedLimits(store, r2!.held, Promise.resolve({ ok: true, reply: { kind: 'event', duplicate: false, effects: step2.effects } as never }));
  await flush();
  t.same(await store.counts('env', [item('rule_a', 's:o1')]), [1]);
});
