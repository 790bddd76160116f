// Rules on events, end to end: a published rule awards points into the ledger in the same journal
// entry as the event; sync answers list what happened and why a rule did not fire; limit scopes
// without a value skip (limit_scope_missing) and long scope values are kept as short keys.
import t from 'tap';
import { idem, signUp, startForTest } from '../helpers/service.js';

const now = () => new Date(Date.now() - 1000).toISOString();

t.test('published rules award points on events', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const rule = await api.post(
    '/v1/rules',
    {
      name: 'level up',
      definition: {
        schema: 'service.rule/v2',
        trigger: { kind: 'customer_event', event: 'level.completed' },
        limits: [{ id: 'twice', scope: ['customer'], max: 2 }],
        conditions: { all: [{ path: 'event.properties.level', op: 'gte', value: 3 }] },
        trust: { minimum: 'merchant_asserted' },
        actions: [{ type: 'points.award', currency: 'coins', amount: 10 }],
      },
    },
    idem(),
  );
  t.equal(rule.status, 201);
  t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);

  const send = (id: string, level: number, occurredAt = now()) =>
    api.post('/v1/events', { id, name: 'level.completed', customer_id: 'hero', occurred_at: occurredAt, properties: { level }, mode: 'sync' });

  const firstAt = now();
  const first = await send('l-1', 5, firstAt);
  t.equal(first.status, 200);
  t.match(first.body.effects, [
    { type: 'rule.fired', rule_id: rule.body.id, version: 1 },
    { type: 'points.awarded', rule_id: rule.body.id, currency: 'coins', amount: 10, ledger_entry_id: /^le_/ },
  ]);
  const low = await send('l-2', 1);
  t.match(low.body.effects, [{ type: 'rule.skipped', rule_id: rule.body.id, reason: 'conditions_not_met' }]);
  t.match((await send('l-3', 7)).body.effects, [{ type: 'rule.fired' }, { type: 'points.awarded' }]);
  t.match((await send('l-4', 9)).body.effects, [{ type: 'rule.skipped', reason: 'limit_reached' }], 'the limit of two holds');
  const dup = await send('l-1', 5, firstAt);
  t.equal(dup.status, 200);
  t.same(dup.body, { ...first.body, duplicate: true }, 'a duplicate answers as the first did, effects included (and applies nothing again)');
  // A sync repeat of an event first sent without sync answers as that first answer: 202 accepted.
  const quiet = await api.post('/v1/events', { id: 'l-async', name: 'level.completed', customer_id: 'hero', occurred_at: firstAt, properties: { level: 1 } });
  t.equal(quiet.status, 202);
  const quietAgain = await api.post('/v1/events', { id: 'l-async', name: 'level.completed', customer_id: 'hero', occurred_at: firstAt, properties: { level: 1 }, mode: 'sync' });
  t.equal(quietAgain.status, 202);
  t.same(quietAgain.body, { ...quiet.body, duplicate: true });

  const cid = (await api.get('/v1/customers?external_id=hero')).body.data[0].id;
  t.same((await api.get(`/v1/customers/${cid}/balances`)).body.data, [{ currency: 'coins', available: 20, pending: 0, lifetime_earned: 20 }]);
  const entries = (await api.get(`/v1/customers/${cid}/ledger_entries`)).body.data;
  t.equal(entries.length, 2);
  t.match(entries[0], { type: 'award', amount: 10, source_type: 'rule_execution', source_id: rule.body.id });

  // A publishable key's events are client-reported: below the rule's trust minimum.
  const pk = await tenant.admin.post('/v1/api_keys', { kind: 'publishable', name: 'web', allowed_events: ['level.completed'] }, idem());
  const web = anon.with({ authorization: `Bearer ${pk.body.token}` });
  const fromClient = await web.post('/v1/events', { id: 'w-1', name: 'level.completed', customer_id: 'other', occurred_at: now(), properties: { level: 5 }, mode: 'sync' });
  t.match(fromClient.body.effects, [{ type: 'rule.skipped', reason: 'trust_below_minimum' }]);

  // item.grant adds to the customer's inventory in the same journal record as the event.
  const grant = await api.post(
    '/v1/rules',
    {
      name: 'chest',
      definition: { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: 'chest.opened' }, actions: [{ type: 'item.grant', item: 'sword', quantity: 1 }, { type: 'item.grant', item: 'gem', quantity: 5 }, { type: 'item.grant', item: 'sword', quantity: 2 }] },
    },
    idem(),
  );
  await api.post(`/v1/rules/${grant.body.id}/publish`, {});
  const chest = await api.post('/v1/events', { id: 'c-1', name: 'chest.opened', customer_id: 'hero', occurred_at: now(), mode: 'sync' });
  t.match(chest.body.effects, [
    { type: 'rule.fired' },
    { type: 'item.granted', rule_id: grant.body.id, item: 'sword', quantity: 1 },
    { type: 'item.granted', item: 'gem', quantity: 5 },
    { type: 'item.granted', item: 'sword', quantity: 2 },
  ]);
  const inventory = [
    { item: 'gem', quantity: 5 },
    { item: 'sword', quantity: 3 },
  ];
  t.same((await api.get(`/v1/customers/${cid}/state`)).body.inventory, inventory, 'the state view lists the inventory');
  t.same((await api.get(`/v1/customers/${cid}/export`)).body.inventory, inventory, 'so does the export');
  const again = await api.post('/v1/events', { id: 'c-2', name: 'chest.opened', customer_id: 'hero', occurred_at: now(), mode: 'sync' });
  t.match(again.body.effects, [{ type: 'rule.fired' }, { type: 'item.granted' }, { type: 'item.granted' }, { type: 'item.granted' }]);
  t.same((await api.get(`/v1/customers/${cid}/state`)).body.inventory, [
    { item: 'gem', quantity: 10 },
    { item: 'sword', quantity: 6 },
  ]);

  // Paused rules stop firing.
  await api.post(`/v1/rules/${rule.body.id}/pause`, {});
  const paused = await api.post('/v1/events', { id: 'l-9', name: 'level.completed', customer_id: 'fresh', occurred_at: now(), properties: { level: 5 }, mode: 'sync' });
  t.same(paused.body.effects, []);

  // Publishing a fix to a paused rule (or rolling it back) changes the active version, not the
  // pause: it runs again only once resumed.
  const fixed = { ...rule.body.draft_definition, limits: [], actions: [{ type: 'points.award', currency: 'coins', amount: 20 }] };
  t.equal((await api.patch(`/v1/rules/${rule.body.id}`, { definition: fixed })).status, 200);
  const published = await api.post(`/v1/rules/${rule.body.id}/publish`, {});
  t.equal(published.status, 200);
  t.match(published.body, { status: 'paused', active_version: { number: 2 }, draft_definition: null });
  const still = await api.post('/v1/events', { id: 'l-10', name: 'level.completed', customer_id: 'fresh', occurred_at: now(), properties: { level: 5 }, mode: 'sync' });
  t.same(still.body.effects, [], 'a paused rule stays off after publish');
  const rolledBack = await api.post(`/v1/rules/${rule.body.id}/rollback`, { number: 1 });
  t.match(rolledBack.body, { status: 'paused', active_version: { number: 1 } }, 'rollback keeps the pause too');
  t.equal((await api.post(`/v1/rules/${rule.body.id}/rollback`, { number: 2 })).status, 200);
  t.match((await api.post(`/v1/rules/${rule.body.id}/resume`, {})).body, { status: 'published', active_version: { number: 2 } });
  const live = await api.post('/v1/events', { id: 'l-11', name: 'level.completed', customer_id: 'fresh', occurred_at: now(), properties: { level: 5 }, mode: 'sync' });
  t.match(live.body.effects, [{ type: 'rule.fired', version: 2 }, { type: 'points.awarded', amount: 20 }], 'resumed: version 2 runs');
});

t.test('tiers follow the ledger: rule awards and manual adjustments move customers between levels', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  await api.post('/v1/currencies', { key: 'xp', name: 'XP' }, idem());
  const program = await api.post(
    '/v1/tier_programs',
    {
      key: 'rank',
      name: 'Rank',
      currency: 'xp',
      basis: 'lifetime_earned',
      levels: [
        { key: 'bronze', title: 'Bronze', threshold: 0 },
        { key: 'silver', title: 'Silver', threshold: 100 },
        { key: 'gold', title: 'Gold', threshold: 250 },
      ],
    },
    idem(),
  );
  t.equal(program.status, 201);
  const rule = await api.post(
    '/v1/rules',
    { name: 'xp', definition: { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: 'match.won' }, actions: [{ type: 'points.award', currency: 'xp', amount: 60 }] } },
    idem(),
  );
  await api.post(`/v1/rules/${rule.body.id}/publish`, {});
  const win = (id: string) => api.post('/v1/events', { id, name: 'match.won', customer_id: 'climber', occurred_at: now(), mode: 'sync' });
  const first = await win('w-1');
  t.notOk(first.body.effects.some((e: { type: string }) => e.type === 'tier.changed'), 'placed on the base level, nothing to announce');
  const second = await win('w-2');
  t.match(second.body.effects, [{ type: 'rule.fired' }, { type: 'points.awarded', amount: 60 }, { type: 'tier.changed', program_id: program.body.id, level: 'silver', previous_level: 'bronze', direction: 'up' }]);
  const cid = (await api.get('/v1/customers?external_id=climber')).body.data[0].id;
  t.match((await api.get(`/v1/customers/${cid}/state`)).body.tiers, [{ program_id: program.body.id, level: 'silver', since: /Z$/ }]);
  const adj = await api.post('/v1/ledger_entries', { customer_id: cid, currency: 'xp', amount: 200, reason: 'tournament prize' }, idem());
  t.equal(adj.status, 201);
  const st = await api.get(`/v1/customers/${cid}/state`);
  t.match(st.body.tiers, [{ level: 'gold' }], 'a manual credit counts too');
  t.match((await api.get(`/v1/customers/${cid}/export`)).body.tiers, [{ program: program.body.id, level: 'gold' }]);
});

t.test('rules read customer.tiers.<program key>; simulate traces against the named customer as it is', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const levels = [
    { key: 'bronze', title: 'Bronze', threshold: 0 },
    { key: 'silver', title: 'Silver', threshold: 100 },
  ];
  t.equal((await api.post('/v1/tier_programs', { key: 'rank', name: 'Rank', currency: 'coins', basis: 'lifetime_earned', levels }, idem())).status, 201);
  const rule = await api.post(
    '/v1/rules',
    {
      name: 'silver vip bonus',
      definition: {
        schema: 'service.rule/v2',
        trigger: { kind: 'customer_event', event: 'level.completed' },
        limits: [{ id: 'once', scope: ['customer'], max: 1 }],
        conditions: {
          all: [
            { path: 'customer.attributes.vip', op: 'eq', value: true },
            { path: 'customer.tiers.rank', op: 'eq', value: 'silver' },
          ],
        },
        actions: [{ type: 'points.award', currency: 'coins', amount: 5 }],
      },
    },
    idem(),
  );
  t.equal(rule.status, 201, JSON.stringify(rule.body));
  t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);
  const c = await api.post('/v1/customers', { external_id: 'sim-1', attributes: { vip: true } }, idem());
  t.equal(c.status, 201);
  const simulate = (customer_id?: string) =>
    api.post(`/v1/rules/${rule.body.id}/simulate`, { event: { name: 'level.completed', properties: {} }, ...(customer_id === undefined ? {} : { customer_id }) });

  // Not placed yet (placement follows the first credit): the customer reads the level it
  // qualifies for now, the first one, so the silver condition fails; the trace shows real values.
  const bronze = await simulate('sim-1');
  t.equal(bronze.status, 200);
  t.match(bronze.body.trace.outcome, { fired: false, reason: 'conditions_not_met' });
  const steps = bronze.body.trace.steps.filter((s: { check: string }) => s.check === 'condition');
  t.match(steps, [
    { path: 'customer.attributes.vip', actual: true, pass: true },
    { path: 'customer.tiers.rank', actual: 'bronze', found: true, pass: false },
  ]);
  t.equal((await api.post('/v1/ledger_entries', { customer_id: 'sim-1', currency: 'coins', amount: 150, reason: 'grant' }, idem())).status, 201);
  const silver = await simulate(c.body.id);
  t.match(silver.body.trace.outcome, { fired: true });
  t.same(silver.body.plan, [{ type: 'points.award', currency: 'coins', amount: 5 }]);
  t.match((await simulate()).body.trace.outcome, { fired: false, reason: 'conditions_not_met' }, 'without customer_id: an empty customer');
  t.match((await simulate('never-seen')).body.trace.outcome, { fired: false, reason: 'conditions_not_met' }, 'an unknown external id: a new customer');
  const missing = await simulate('cust_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ');
  t.equal(missing.status, 404);
  t.match(missing.body.error, { code: 'resource_not_found', param: 'customer_id' });

  // The live path reads the same tier level; afterwards simulate sees the spent limit.
  const live = await api.post('/v1/events', { id: 'lv-1', name: 'level.completed', customer_id: 'sim-1', occurred_at: new Date(Date.now() - 1000).toISOString(), mode: 'sync' });
  t.match(live.body.effects, [{ type: 'rule.fired' }, { type: 'points.awarded', amount: 5 }]);
  t.match((await simulate('sim-1')).body.trace.outcome, { fired: false, reason: 'limit_reached' });
  t.same((await api.get(`/v1/customers/${c.body.id}/balances`)).body.data[0].available, 155, 'simulations changed nothing');
});

t.test('limit scopes: a missing value skips with limit_scope_missing and counts nothing; a long value is kept as a short key', async (t) => {
  const { anon } = await startForTest(t);
  const api = (await signUp(anon)).server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const publish = async (name: string, event: string, limits: unknown[]) => {
    const definition = { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event }, limits, actions: [{ type: 'points.award', currency: 'coins', amount: 5 }] };
    const rule = await api.post('/v1/rules', { name, definition }, idem());
    t.equal(rule.status, 201, JSON.stringify(rule.body));
    t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);
    return rule.body.id as string;
  };
  const perOrder = await publish('per order', 'order.paid', [{ id: 'once_per_order', scope: ['customer', 'event.properties.order_id'], max: 1 }]);
  const firstCoupon = await publish('first coupon', 'coupon.used', [{ id: 'first_coupon', scope: ['event.properties.code'], max: 1 }]);
  let n = 0;
  const send = (name: string, who: string, properties: Record<string, unknown>) =>
    api.post('/v1/events', { id: `ls-${++n}`, name, customer_id: who, occurred_at: now(), properties, mode: 'sync' });

  // Per customer: an event without a usable order id is skipped, every time, and takes nothing.
  const cases: [Record<string, unknown>, string][] = [
    [{}, 'absent'],
    [{ order_id: null }, 'null'],
    [{ order_id: { x: 1 } }, 'an object'],
    [{ order_id: [1, 2] }, 'an array'],
    [{}, 'absent'],
  ];
  for (const [properties, what] of cases) {
    const r = await send('order.paid', 'p1', properties);
    t.same(
      r.body.effects,
      [
        {
          type: 'rule.skipped',
          rule_id: perOrder,
          reason: 'limit_scope_missing',
          detail: `Limit 'once_per_order' cannot count this event: its scope path 'event.properties.order_id' is ${what} (a scope value is a string, number or boolean).`,
        },
      ],
      JSON.stringify(properties),
    );
  }
  t.match((await send('order.paid', 'p1', { order_id: 'A' })).body.effects, [{ type: 'rule.fired' }, { type: 'points.awarded', amount: 5 }]);
  t.match((await send('order.paid', 'p1', { order_id: 'B' })).body.effects, [{ type: 'rule.fired' }], 'a second order is not lumped with anything');
  t.match((await send('order.paid', 'p1', { order_id: 'A' })).body.effects, [{ type: 'rule.skipped', reason: 'limit_reached' }]);
  // Types are kept apart (documented): 1 and "1" are two orders.
  t.match((await send('order.paid', 'p1', { order_id: 1 })).body.effects, [{ type: 'rule.fired' }]);
  t.match((await send('order.paid', 'p1', { order_id: '1' })).body.effects, [{ type: 'rule.fired' }]);
  const sim = await api.post(`/v1/rules/${perOrder}/simulate`, { event: { name: 'order.paid', properties: { order_id: null } }, customer_id: 'p1' });
  t.match(sim.body.trace.outcome, { fired: false, reason: 'limit_scope_missing', param: 'once_per_order' });
  const step = sim.body.trace.steps.find((s: { check: string }) => s.check === 'limit');
  t.match(step, { limit_id: 'once_per_order', path: 'event.properties.order_id', actual: null, found: false, pass: false });
  t.notOk('scope_key' in step);

  // Shared: an event of one customer without a code does not use the limit up for everyone.
  t.match((await send('coupon.used', 'q1', {})).body.effects, [{ type: 'rule.skipped', rule_id: firstCoupon, reason: 'limit_scope_missing', detail: /'event\.properties\.code' is absent/ }]);
  t.match((await send('coupon.used', 'q2', { code: null })).body.effects, [{ type: 'rule.skipped', reason: 'limit_scope_missing', detail: /is null/ }]);
  t.match((await send('coupon.used', 'q3', { code: 'X' })).body.effects, [{ type: 'rule.fired', rule_id: firstCoupon }]);
  t.match((await send('coupon.used', 'q4', { code: 'X' })).body.effects, [{ type: 'rule.skipped', reason: 'limit_reached' }]);

  // A 20,000-character order id: counted under a short key (hash and the first 16 characters).
  const long = `ORD-${'9'.repeat(20_000)}`;
  t.match((await send('order.paid', 'p1', { order_id: long })).body.effects, [{ type: 'rule.fired' }]);
  const again = await send('order.paid', 'p1', { order_id: long });
  t.match(again.body.effects, [{ type: 'rule.skipped', reason: 'limit_reached', detail: /for scope 'customer\|h:[0-9a-z]{22}:ORD-999999999999'/ }]);
  t.ok(again.body.effects[0].detail.length < 200, 'the detail does not carry the value');
  t.match((await send('order.paid', 'p1', { order_id: `${long}0` })).body.effects, [{ type: 'rule.fired' }], 'another long order id is another key');
  const traced = await api.post(`/v1/rules/${perOrder}/simulate`, { event: { name: 'order.paid', properties: { order_id: long } }, customer_id: 'p1' });
  t.match(traced.body.trace.steps.find((s: { check: string }) => s.check === 'limit'), { scope_key: /^customer\|h:[0-9a-z]{22}:ORD-9{12}$/, actual: 1, pass: false });
});
