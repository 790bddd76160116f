// Rule limits shared by every customer, end to end: a limit whose scope names no customer path
// allows `max` firings per scope key across all customers (sync rule.skipped limit_reached for the
// next customer), a scope with `customer` still counts per customer, racing customers get exactly
// max, a duplicate keeps its slot, a rule that did not fire frees its slot, validation refuses
// customer paths in a shared scope, and simulate shows the shared count without taking a slot.
import t, { type Test } from 'tap';
import { type Client, idem, signUp, startForTest } from '../helpers/service.js';

const now = () => new Date(Date.now() - 1000).toISOString();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function publish(t: Test, api: Client, name: string, definition: Record<string, unknown>): Promise<string> {
  const rule = await api.post('/v1/rules', { name, definition: { schema: 'service.rule/v2', ...definition } }, idem());
  t.equal(rule.status, 201, JSON.stringify(rule.body));
  t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);
  return rule.body.id as string;
}

type Effect = { type: string; rule_id?: string; reason?: string; detail?: string };
const firedBy = (effects: Effect[], ruleId: string) => effects.some((e) => e.type === 'rule.fired' && e.rule_id === ruleId);

t.test('limits shared by every customer', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const send = (id: string, customer: string, name: string, properties: Record<string, unknown>, occurredAt = now()) =>
    api.post('/v1/events', { id, name, customer_id: customer, occurred_at: occurredAt, properties, mode: 'sync' });
  const balance = async (customer: string): Promise<number> => {
    const c = (await api.get(`/v1/customers?external_id=${customer}`)).body.data[0];
    if (c === undefined) return 0;
    return ((await api.get(`/v1/customers/${c.id}/balances`)).body.data[0]?.available as number | undefined) ?? 0;
  };

  await t.test('validation refuses customer paths in a scope without customer', async (t) => {
    const bad = await api.post(
      '/v1/rules',
      {
        name: 'per country',
        definition: {
          schema: 'service.rule/v2',
          trigger: { kind: 'customer_event', event: 'order.completed' },
          limits: [
            { id: 'ok', scope: ['event.name', 'event.properties.order_id'], max: 1 },
            { id: 'country', scope: ['customer.attributes.country'], max: 1 },
            { id: 'mixed', scope: ['event.properties.a', 'customer.external_id'], max: 1 },
          ],
          actions: [{ type: 'points.award', currency: 'coins', amount: 1 }],
        },
      },
      idem(),
    );
    t.equal(bad.status, 422);
    t.equal(bad.body.error.code, 'rule_invalid');
    t.same(
      bad.body.error.details.map((d: { param: string }) => d.param),
      ['definition.limits[1].scope[0]', 'definition.limits[2].scope[1]'],
      'each bad path is named, the event-only scope is not',
    );
    t.match(bad.body.error.details[0].message, /shared by customers may name only event\.name and event\.properties.*add 'customer'/);
    const perCustomer = await api.post(
      '/v1/rules',
      {
        name: 'per country and customer',
        definition: {
          schema: 'service.rule/v2',
          trigger: { kind: 'customer_event', event: 'order.completed' },
          limits: [{ id: 'country', scope: ['customer', 'customer.attributes.country'], max: 1 }],
          actions: [{ type: 'points.award', currency: 'coins', amount: 1 }],
        },
      },
      idem(),
    );
    t.equal(perCustomer.status, 201, 'with customer the same path is accepted');
  });

  const perOrder = await publish(t, api, 'once per order', {
    trigger: { kind: 'customer_event', event: 'order.completed' },
    limits: [{ id: 'per_order', scope: ['event.properties.order_id'], max: 1 }],
    actions: [{ type: 'points.award', currency: 'coins', amount: 10 }],
  });

  await t.test('max 1 per order id across customers', async (t) => {
    const firstAt = now();
    const first = await send('o1-a', 'alice', 'order.completed', { order_id: 'o1' }, firstAt);
    t.equal(first.status, 200);
    t.match(first.body.effects, [{ type: 'rule.fired', rule_id: perOrder }, { type: 'points.awarded', amount: 10 }]);
    const second = await send('o1-b', 'bob', 'order.completed', { order_id: 'o1' });
    t.equal(second.status, 200);
    t.match(second.body.effects, [{ type: 'rule.skipped', rule_id: perOrder, reason: 'limit_reached', detail: /shared by every customer; 1 of 1 taken/ }]);
    t.match((await send('o2-b', 'bob', 'order.completed', { order_id: 'o2' })).body.effects, [{ type: 'rule.fired', rule_id: perOrder }], 'another order id fires');

    // A duplicate of the event that fired answers as the first and keeps its slot.
    const dup = await send('o1-a', 'alice', 'order.completed', { order_id: 'o1' }, firstAt);
    t.equal(dup.status, 200);
    t.equal(dup.body.duplicate, true);
    await sleep(300);
    t.match((await send('o1-c', 'carol', 'order.completed', { order_id: 'o1' })).body.effects, [{ type: 'rule.skipped', reason: 'limit_reached' }], 'the slot is still taken');
    t.equal(await balance('alice'), 10);
    t.equal(await balance('bob'), 10);
    t.equal(await balance('carol'), 0);

    // Simulate shows the shared count and reserves nothing.
    const sim = async (order: string) =>
      (await api.post(`/v1/rules/${perOrder}/simulate`, { event: { name: 'order.completed', properties: { order_id: order } }, customer_id: 'dave' })).body;
    const taken = await sim('o1');
    t.match(taken.trace.outcome, { fired: false, reason: 'limit_reached' });
    t.match(
      taken.trace.steps.find((s: { check: string }) => s.check === 'limit'),
      { limit_id: 'per_order', scope_key: 's:o1', shared: true, expected: 1, actual: 1, pass: false },
    );
    const free = await sim('o3');
    t.match(free.trace.outcome, { fired: true });
    t.match(free.trace.steps.find((s: { check: string }) => s.check === 'limit'), { shared: true, actual: 0, found: true, pass: true });
    t.match((await send('o3-d', 'dave', 'order.completed', { order_id: 'o3' })).body.effects, [{ type: 'rule.fired' }], 'the simulation took no slot');
  });

  await t.test('a rule that did not fire frees its slot', async (t) => {
    const big = await publish(t, api, 'big order once', {
      trigger: { kind: 'customer_event', event: 'cart.paid' },
      limits: [{ id: 'per_cart', scope: ['event.properties.cart'], max: 1 }],
      conditions: { all: [{ path: 'event.properties.total', op: 'gte', value: 100 }] },
      actions: [{ type: 'points.award', currency: 'coins', amount: 1 }],
    });
    t.match((await send('c1-a', 'alice', 'cart.paid', { cart: 'c1', total: 5 })).body.effects, [{ type: 'rule.skipped', rule_id: big, reason: 'conditions_not_met' }]);
    // The slot is freed after the reply (asynchronously, on another connection than the next
    // event's): wait until simulate, which reserves nothing, reads it free.
    const takenC1 = async () =>
      (await api.post(`/v1/rules/${big}/simulate`, { event: { name: 'cart.paid', properties: { cart: 'c1', total: 500 } }, customer_id: 'bob' })).body.trace.steps.find(
        (s: { check: string }) => s.check === 'limit',
      )?.actual;
    for (const until = Date.now() + 10_000; (await takenC1()) !== 0 && Date.now() < until; ) await sleep(50);
    t.equal(await takenC1(), 0, 'the rule that did not fire gave its slot back');
    t.match((await send('c1-b', 'bob', 'cart.paid', { cart: 'c1', total: 500 })).body.effects, [{ type: 'rule.fired', rule_id: big }]);
    t.match((await send('c1-c', 'carol', 'cart.paid', { cart: 'c1', total: 500 })).body.effects, [{ type: 'rule.skipped', reason: 'limit_reached' }]);
  });

  await t.test('a scope with customer still counts per customer', async (t) => {
    const perCustomer = await publish(t, api, 'once per item and customer', {
      trigger: { kind: 'customer_event', event: 'item.bought' },
      limits: [{ id: 'per_item', scope: ['customer', 'event.properties.item'], max: 1 }],
      actions: [{ type: 'points.award', currency: 'coins', amount: 1 }],
    });
    t.ok(firedBy((await send('i1-a', 'alice', 'item.bought', { item: 'i1' })).body.effects, perCustomer));
    t.ok(firedBy((await send('i1-b', 'bob', 'item.bought', { item: 'i1' })).body.effects, perCustomer), 'another customer fires too');
    const again = await send('i1-a2', 'alice', 'item.bought', { item: 'i1' });
    t.match(again.body.effects, [{ type: 'rule.skipped', reason: 'limit_reached' }]);
    t.notMatch(again.body.effects[0].detail, /shared/);
  });

  await t.test('N customers racing for max K: exactly K fire', async (t) => {
    const K = 3;
    const N = 16;
    const promo = await publish(t, api, 'first three', {
      trigger: { kind: 'customer_event', event: 'promo.claimed' },
      limits: [{ id: 'first', scope: ['event.properties.promo'], max: K }],
      actions: [{ type: 'points.award', currency: 'coins', amount: 7 }],
    });
    const answers = await Promise.all(Array.from({ length: N }, (_, i) => send(`p-${i}`, `racer-${i}`, 'promo.claimed', { promo: 'spring' })));
    t.ok(answers.every((a) => a.status === 200));
    t.equal(answers.filter((a) => firedBy(a.body.effects, promo)).length, K, 'K answers fired');
    const balances = await Promise.all(Array.from({ length: N }, (_, i) => balance(`racer-${i}`)));
    t.equal(balances.reduce((a, b) => a + b, 0), 7 * K, 'K awards in the ledger');
    t.equal(balances.filter((b) => b > 0).length, K);
  });

  await t.test("match players: a limit scoped by the match id awards one of the match's players", async (t) => {
    const profile = {
      type: 'match_profile.create',
      key: 'duel',
      metrics: [{ key: 'score', minimum: 0, maximum: 1000 }],
      duration: { minimum_seconds: 60, maximum_seconds: 3600 },
      players: { minimum: 1, maximum: 8 },
      rate_limits: [{ window_seconds: 3600, max_matches: 100 }],
    };
    const cs = await api.post('/v1/change_sets', { commands: [profile] }, idem());
    t.equal(cs.status, 201, JSON.stringify(cs.body));
    t.equal((await api.post('/v1/change_set_applications', { change_set_id: cs.body.id }, idem())).status, 201);
    await publish(t, api, 'one winner bonus per match', {
      trigger: { kind: 'customer_event', event: 'match.completed' },
      conditions: { all: [{ path: 'event.properties.won', op: 'eq', value: true }] },
      limits: [{ id: 'per_match', scope: ['event.properties.match_id'], max: 1 }],
      actions: [{ type: 'points.award', currency: 'coins', amount: 50 }],
    });
    const at = Date.now();
    const players = ['duel-1', 'duel-2', 'duel-3', 'duel-4'];
    const body = {
      profile: 'duel',
      match_id: `duel-${process.pid}-${at}`,
      started_at: new Date(at - 20 * 60_000).toISOString(),
      ended_at: new Date(at - 10 * 60_000).toISOString(),
      players: players.map((ext) => ({ customer: { external_id: ext }, metrics: { score: 10 }, won: true })),
    };
    const r = await api.post('/v1/match_results', body);
    t.equal(r.status, 201, JSON.stringify(r.body));
    t.equal(r.body.players.filter((p: { status: string }) => p.status === 'admitted').length, 4);
    // An admitted player's event was stepped by its actor before the answer (balances read the actors).
    const paid = async () => (await Promise.all(players.map((p) => balance(p)))).filter((b) => b > 0);
    t.same(await paid(), [50], 'one of the four winners got the bonus');
    t.equal((await api.post('/v1/match_results', body)).status, 200, 'the identical report replays');
    t.same(await paid(), [50], 'the replay awards nothing more');
  });
});
