// Black-box API tests of counter definitions: create (ready at once in an empty environment,
// backfilling once events exist), list, get, delete (resource_in_use while a rule or a challenge
// not ended reads it), every error code, live counting shown in the customer state, a rule reading
// a counter (skipped with counter_not_ready before the backfill, fired after), the backfill
// counting history exactly once (inline and as a job on the worker pool), and replay rebuilding
// identical counters.
import t from 'tap';
import type { Call, CallResult } from '../../src/actors/partition.js';
import { idem, signUp, startForTest, storageFor } from '../helpers/service.js';

const ago = (ms: number) => new Date(Date.now() - ms).toISOString();

type Api = Awaited<ReturnType<typeof signUp>>['server'];

async function customerId(api: Api, externalId: string): Promise<string> {
  return (await api.get(`/v1/customers?external_id=${externalId}`)).body.data[0].id;
}

async function counters(api: Api, externalId: string): Promise<Record<string, number>> {
  return (await api.get(`/v1/customers/${await customerId(api, externalId)}/state`)).body.counters;
}

function send(api: Api, id: string, customer: string, properties: Record<string, unknown> = {}, name = 'purchase', occurredAt = ago(1000)) {
  return api.post('/v1/events', { id, name, customer_id: customer, occurred_at: occurredAt, properties, mode: 'sync' });
}

t.test('counter definitions over the API', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;

  let lifetimeId = '';
  await t.test('create in an empty environment: ready at once; idempotent; wire shape', async (t) => {
    const key = idem();
    const body = { name: 'purchases', event: 'purchase', window: { kind: 'lifetime' } };
    const r = await api.post('/v1/counter_definitions', body, key);
    t.equal(r.status, 201);
    t.match(r.body, {
      id: /^ctr_/,
      name: 'purchases',
      event: 'purchase',
      window: { kind: 'lifetime' },
      filter: null,
      status: 'ready',
      version: 1,
      created_at: String,
      updated_at: String,
    });
    lifetimeId = r.body.id;
    t.equal((await api.post('/v1/counter_definitions', body, key)).body.id, lifetimeId, 'the same Idempotency-Key answers as the first time');
    const gems = await api.post(
      '/v1/counter_definitions',
      { name: 'gem_buys_7d', event: 'purchase', window: { kind: 'rolling_days', days: 7 }, filter: { path: 'event.properties.sku', op: 'eq', value: 'gems' } },
      idem(),
    );
    t.match(gems.body, { status: 'ready', window: { kind: 'rolling_days', days: 7 }, filter: { path: 'event.properties.sku' } });
    const daily = await api.post('/v1/counter_definitions', { name: 'purchases_today', event: 'purchase', window: { kind: 'period', period: 'day' } }, idem());
    t.equal(daily.status, 201);
  });

  await t.test('create errors: validation_failed with the wire param, already_exists, missing Idempotency-Key', async (t) => {
    const cases: Array<[unknown, string]> = [
      [{ name: 'Bad Name', event: 'purchase', window: { kind: 'lifetime' } }, 'name'],
      [{ name: 'x', event: 'Purchase!', window: { kind: 'lifetime' } }, 'event'],
      [{ name: 'x', event: 'purchase', window: { kind: 'rolling_days', days: 0 } }, 'window.days'],
      [{ name: 'x', event: 'purchase', window: { kind: 'rolling_days', days: 400 } }, 'window.days'],
      [{ name: 'x', event: 'purchase', window: { kind: 'period', period: 'year' } }, 'window.period'],
      [{ name: 'x', event: 'purchase', window: { kind: 'lifetime' }, filter: { path: 'customer.attributes.vip', op: 'eq', value: true } }, 'filter.path'],
      [{ name: 'x', event: 'purchase', window: { kind: 'lifetime' }, filter: { all: [{ path: 'event.properties.sku', op: 'near', value: 1 }] } }, 'filter.all[0].op'],
    ];
    for (const [body, param] of cases) {
      const r = await api.post('/v1/counter_definitions', body, idem());
      t.equal(r.status, 400, param);
      t.equal(r.body.error.code, 'validation_failed', param);
      t.match(r.body.error.param, param, param);
    }
    const dup = await api.post('/v1/counter_definitions', { name: 'purchases', event: 'login', window: { kind: 'lifetime' } }, idem());
    t.equal(dup.status, 409);
    t.equal(dup.body.error.code, 'already_exists');
    t.equal(dup.body.error.param, 'name');
    const noKey = await api.post('/v1/counter_definitions', { name: 'y', event: 'purchase', window: { kind: 'lifetime' } });
    t.equal(noKey.body.error.code, 'idempotency_key_required');
  });

  await t.test('list (pagination) and get; unknown id is resource_not_found', async (t) => {
    const first = await api.get('/v1/counter_definitions?limit=2');
    t.equal(first.status, 200);
    t.equal(first.body.data.length, 2);
    t.equal(first.body.has_more, true);
    const rest = await api.get(`/v1/counter_definitions?limit=2&cursor=${first.body.next_cursor}`);
    t.equal(rest.body.data.length, 1);
    t.equal(rest.body.has_more, false);
    t.match((await api.get(`/v1/counter_definitions/${lifetimeId}`)).body, { id: lifetimeId, name: 'purchases' });
    const missing = await api.get('/v1/counter_definitions/ctr_nope');
    t.equal(missing.status, 404);
    t.equal(missing.body.error.code, 'resource_not_found');
    t.equal((await api.post('/v1/counter_definitions/ctr_nope/backfill', {})).body.error.code, 'resource_not_found');
    t.equal((await api.request('DELETE', '/v1/counter_definitions/ctr_nope')).body.error.code, 'resource_not_found');
  });

  await t.test('live counting: windows and filter, shown in the customer state', async (t) => {
    await send(api, 'p1', 'ana', { sku: 'gems' });
    await send(api, 'p2', 'ana', { sku: 'coins' });
    await send(api, 'p3', 'ana', { sku: 'gems' }, 'purchase', ago(10 * 86_400_000));
    await send(api, 'l1', 'ana', {}, 'login');
    await send(api, 'p1', 'ana', { sku: 'gems' }); // a duplicate counts nothing
    t.same(await counters(api, 'ana'), { purchases: 3, gem_buys_7d: 1, purchases_today: 2 });
  });

  await t.test('a ready counter in use by a rule cannot be deleted; archived rule releases it', async (t) => {
    const rule = await api.post(
      '/v1/rules',
      {
        name: 'reader',
        definition: {
          schema: 'service.rule/v2',
          trigger: { kind: 'customer_event', event: 'purchase' },
          conditions: { path: 'customer.counters.purchases_today', op: 'gte', value: 100 },
          actions: [{ type: 'tier.evaluate' }],
        },
      },
      idem(),
    );
    t.equal(rule.status, 201);
    const daily = (await api.get('/v1/counter_definitions')).body.data.find((d: { name: string }) => d.name === 'purchases_today');
    const inUse = await api.request('DELETE', `/v1/counter_definitions/${daily.id}`);
    t.equal(inUse.status, 409);
    t.equal(inUse.body.error.code, 'resource_in_use');
    t.match(inUse.body.error.message, rule.body.id);
    t.equal((await api.post(`/v1/rules/${rule.body.id}/archive`, {})).status, 200);
    const gone = await api.request('DELETE', `/v1/counter_definitions/${daily.id}`);
    t.equal(gone.status, 204);
    t.equal((await api.get(`/v1/counter_definitions/${daily.id}`)).status, 404);
    t.notOk('purchases_today' in (await counters(api, 'ana')), 'the state view shows only defined counters');
  });
});

t.test("a counter read by a challenge's qualifying conditions cannot be deleted until the challenge ends", async (t) => {
  const { anon } = await startForTest(t);
  const api = (await signUp(anon)).server;
  const visits = (await api.post('/v1/counter_definitions', { name: 'visits', event: 'visit', window: { kind: 'lifetime' } }, idem())).body;
  const visits2d = (await api.post('/v1/counter_definitions', { name: 'visits_2d', event: 'visit', window: { kind: 'rolling_days', days: 2 } }, idem()))
    .body;
  const challenge = await api.post(
    '/v1/challenges',
    {
      name: 'Regulars',
      qualifying: { event: 'visit', conditions: { all: [{ path: 'customer.counters.visits_2d', op: 'gte', value: 1 }] } },
      target: 2,
      status: 'active',
    },
    idem(),
  );
  t.equal(challenge.status, 201);
  const id = challenge.body.id as string;

  const del = await api.request('DELETE', `/v1/counter_definitions/${visits2d.id}`);
  t.equal(del.status, 409);
  t.match(del.body.error, { code: 'resource_in_use', param: 'id', details: { rules: [], challenges: [id] } });
  t.match(del.body.error.message, `challenge ${id}`);
  t.equal((await api.get(`/v1/counter_definitions/${visits2d.id}`)).status, 200, 'still there');
  t.equal((await api.request('DELETE', `/v1/counter_definitions/${visits.id}`)).status, 204, 'a counter whose name is only a prefix of the one read is free');

  // An ended challenge is final and never evaluates again: it no longer holds the counter.
  t.equal((await api.patch(`/v1/challenges/${id}`, { status: 'ended' })).status, 200);
  t.equal((await api.request('DELETE', `/v1/counter_definitions/${visits2d.id}`)).status, 204);
});

t.test('backfill: a rule reading the counter skips until ready, history counts exactly once (inline)', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  // History before the counter exists.
  for (let i = 0; i < 3; i++) await send(api, `h-${i}`, 'bo', { sku: 'gems' });
  await send(api, 'h-x', 'bo', { sku: 'coins' });
  await send(api, 'h-c', 'cy', { sku: 'gems' });

  const ctr = await api.post(
    '/v1/counter_definitions',
    { name: 'gem_buys', event: 'purchase', window: { kind: 'lifetime' }, filter: { path: 'event.properties.sku', op: 'eq', value: 'gems' } },
    idem(),
  );
  t.equal(ctr.body.status, 'backfilling', 'the environment already has events');
  const rule = await api.post(
    '/v1/rules',
    {
      name: 'fifth gem pack',
      definition: {
        schema: 'service.rule/v2',
        trigger: { kind: 'customer_event', event: 'purchase' },
        conditions: { path: 'customer.counters.gem_buys', op: 'gte', value: 5 },
        actions: [{ type: 'points.award', currency: 'coins', amount: 50 }],
      },
    },
    idem(),
  );
  t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);

  // A challenge whose qualifying conditions read the counter says why it did not progress.
  const challenge = await api.post(
    '/v1/challenges',
    { name: 'Gem fan', qualifying: { event: 'purchase', conditions: { path: 'customer.counters.gem_buys', op: 'gte', value: 0 } }, target: 9, status: 'active' },
    idem(),
  );
  t.equal(challenge.status, 201);

  // Live counting starts at once; rules skip while the counter is not ready.
  const during = await send(api, 'd-1', 'bo', { sku: 'gems' });
  t.match(during.body.effects, [{ type: 'rule.skipped', rule_id: rule.body.id, reason: 'counter_not_ready' }]);
  t.ok(
    during.body.effects.some((e: { type: string; challenge_id?: string; reason?: string }) =>
      e.type === 'challenge.skipped' && e.challenge_id === challenge.body.id && e.reason === 'counter_not_ready'),
    `the challenge too: ${JSON.stringify(during.body.effects)}`,
  );
  t.same(await counters(api, 'bo'), { gem_buys: 1 }, 'only the live event so far');

  const bf = await api.post(`/v1/counter_definitions/${ctr.body.id}/backfill`, {});
  t.equal(bf.status, 200, 'a small history is counted inline');
  t.match(bf.body, { id: ctr.body.id, status: 'ready', version: 2 });
  t.same(await counters(api, 'bo'), { gem_buys: 4 }, '3 historical + 1 live: the live one is not counted again');
  t.same(await counters(api, 'cy'), { gem_buys: 1 });

  const after = await send(api, 'a-1', 'bo', { sku: 'gems' });
  t.match(after.body.effects, [{ type: 'rule.fired' }, { type: 'points.awarded', amount: 50 }], 'the fifth gem pack fires the rule');
  t.same(await counters(api, 'bo'), { gem_buys: 5 });

  const again = await api.post(`/v1/counter_definitions/${ctr.body.id}/backfill`, {});
  t.equal(again.status, 200, 'a ready counter answers as it is');
  t.same(await counters(api, 'bo'), { gem_buys: 5 }, 'a second backfill counts nothing twice');
});

t.test('ETag: create, GET and backfill answer the version; DELETE takes it as If-Match', async (t) => {
  const { anon } = await startForTest(t);
  const api = (await signUp(anon)).server;
  await send(api, 'e-1', 'ed', {});
  const ctr = await api.post('/v1/counter_definitions', { name: 'buys', event: 'purchase', window: { kind: 'lifetime' } }, idem());
  t.match(ctr.body, { status: 'backfilling', version: 1 });
  t.equal(ctr.headers.get('etag'), '"1"', 'the create');
  t.equal((await api.get(`/v1/counter_definitions/${ctr.body.id}`)).headers.get('etag'), '"1"', 'a GET');
  const bf = await api.post(`/v1/counter_definitions/${ctr.body.id}/backfill`, {});
  t.match(bf.body, { status: 'ready', version: 2 });
  t.equal(bf.headers.get('etag'), '"2"', 'the backfill that marked it ready moved the version');
  t.equal((await api.get(`/v1/counter_definitions/${ctr.body.id}`)).headers.get('etag'), '"2"');
  const stale = await api.request('DELETE', `/v1/counter_definitions/${ctr.body.id}`, undefined, { 'if-match': ctr.headers.get('etag')! });
  t.equal(stale.status, 409);
  t.equal(stale.body.error.code, 'stale_write');
  t.equal((await api.request('DELETE', `/v1/counter_definitions/${ctr.body.id}`, undefined, { 'if-match': bf.headers.get('etag')! })).status, 204);
});

t.test('a counter defined while the first events are still in flight counts each of them once, live or by the backfill', async (t) => {
  const { anon, service } = await startForTest(t);
  const api = (await signUp(anon)).server;
  // The actors' steps are held: each event has read its counters context (none yet) and is in
  // the engine, but not applied, journaled or projected.
  let held = 0;
  let release!: () => void;
  const gate = new Promise<void>((r) => {
    release = r;
  });
  t.teardown(() => release());
  for (let p = 0; p < service.engine.partitions; p++) {
    const partition = service.placement.local(p);
    if (partition === undefined) continue;
    const submit = partition.submit.bind(partition);
    partition.submit = (call: Call): Promise<CallResult> => {
      if (call.command.kind !== 'event.record') return submit(call);
      held++;
      return gate.then(() => submit(call));
    };
  }
  const n = 12;
  const events = Array.from({ length: n }, (_, i) =>
    api.post('/v1/events', { id: `first-${i}`, name: 'first.visit', customer_id: `fv-${i % 4}`, occurred_at: ago(1000), properties: {} }),
  );
  while (held < n) await new Promise((r) => setTimeout(r, 5));

  // The definition is created while they are in flight; they are let go a moment later.
  const creating = api.post('/v1/counter_definitions', { name: 'visits', event: 'first.visit', window: { kind: 'lifetime' } }, idem());
  const letGo = setTimeout(release, 150);
  t.teardown(() => clearTimeout(letGo));
  const ctr = await creating;
  release();
  t.same((await Promise.all(events)).map((r) => r.status), Array(n).fill(202));
  t.equal(ctr.status, 201);
  t.equal(ctr.body.status, 'backfilling', 'events the definition did not count live were recorded: it is not ready');

  const bf = await api.post(`/v1/counter_definitions/${ctr.body.id}/backfill`, {});
  t.equal(bf.body.status, 'ready');
  let sum = 0;
  for (let c = 0; c < 4; c++) sum += (await counters(api, `fv-${c}`)).visits ?? 0;
  t.equal(sum, n, 'every event counted once');
});

t.test("backfill after merges counts the merged customers' events too, each once", async (t) => {
  const { anon } = await startForTest(t);
  const api = (await signUp(anon)).server;
  // m1 was merged into m2, m2 into s, before the counter existed; s has events of its own.
  await send(api, 'mh-1', 'm1', {});
  await send(api, 'mh-2', 'm2', {});
  await send(api, 'mh-3', 'm2', {});
  await send(api, 'sh-1', 's', {});
  const idOf = async (ext: string) => (await api.get(`/v1/customers?external_id=${ext}`)).body.data[0].id as string;
  const [m2, s] = [await idOf('m2'), await idOf('s')];
  t.equal((await api.post(`/v1/customers/${m2}/aliases`, { alias: 'm1' }, idem())).status, 201);
  t.equal((await api.post(`/v1/customers/${s}/aliases`, { alias: 'm2' }, idem())).status, 201);
  const ctr = await api.post('/v1/counter_definitions', { name: 'buys', event: 'purchase', window: { kind: 'lifetime' } }, idem());
  t.equal(ctr.body.status, 'backfilling');
  t.equal((await api.post(`/v1/counter_definitions/${ctr.body.id}/backfill`, {})).status, 200);
  t.same(await counters(api, 's'), { buys: 4 }, "s's own event and the three of the customers merged into it");
  // A customer counted live, merged after the backfill, joins its count once.
  await send(api, 'oh-1', 'o', {});
  t.equal((await api.post(`/v1/customers/${s}/aliases`, { alias: 'o' }, idem())).status, 201);
  t.same(await counters(api, 's'), { buys: 5 }, "o's live-counted event joined at its merge");
});

t.test('simulate reads counters as the real event would: with the event counted', async (t) => {
  const { anon } = await startForTest(t);
  const api = (await signUp(anon)).server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const ctr = await api.post('/v1/counter_definitions', { name: 'plays', event: 'purchase', window: { kind: 'lifetime' } }, idem());
  t.equal(ctr.body.status, 'ready');
  const rule = await api.post(
    '/v1/rules',
    {
      name: 'second purchase',
      definition: {
        schema: 'service.rule/v2',
        trigger: { kind: 'customer_event', event: 'purchase' },
        conditions: { path: 'customer.counters.plays', op: 'eq', value: 2 },
        actions: [{ type: 'points.award', currency: 'coins', amount: 10 }],
      },
    },
    idem(),
  );
  t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);
  const simulate = async (customer: string) =>
    (await api.post(`/v1/rules/${rule.body.id}/simulate`, { event: { name: 'purchase', properties: {} }, customer_id: customer })).body;
  const fired = (effects: Array<{ type: string }>) => effects.some((e) => e.type === 'rule.fired');
  for (let n = 1; n <= 3; n++) {
    const planned = (await simulate('sim-c')).plan.length > 0;
    const real = await send(api, `sc-${n}`, 'sim-c', {});
    t.equal(planned, fired(real.body.effects), `purchase ${n}: simulate and the real event agree (${planned})`);
  }
  t.equal((await simulate('never-seen')).plan.length, 0, "a new customer's first purchase counts 1, not 2");
});

t.test('backfill as a job on the worker pool (202, later ready); replay rebuilds identical counters', async (t) => {
  const storage = storageFor(t);
  const first = await startForTest(t, { storage, env: { COUNTER_BACKFILL_INLINE_MAX: '0' } });
  const tenant = await signUp(first.anon);
  let api = tenant.server;
  for (let i = 0; i < 4; i++) await send(api, `h-${i}`, `p${i % 2}`, {}, 'match.won', ago(2 * 86_400_000));
  const ctr = await api.post('/v1/counter_definitions', { name: 'wins_7d', event: 'match.won', window: { kind: 'rolling_days', days: 7 } }, idem());
  t.equal(ctr.body.status, 'backfilling');
  await send(api, 'live-1', 'p0', {}, 'match.won');
  const bf = await api.post(`/v1/counter_definitions/${ctr.body.id}/backfill`, {});
  t.equal(bf.status, 202);
  t.equal(bf.body.status, 'backfilling');
  let status = 'backfilling';
  // The job's worker thread loads the domain on its first task: generous under a loaded machine.
  for (let i = 0; i < 600 && status !== 'ready'; i++) {
    await new Promise((r) => setTimeout(r, 50));
    status = (await api.get(`/v1/counter_definitions/${ctr.body.id}`)).body.status;
  }
  t.equal(status, 'ready', 'a later GET shows ready');
  t.same(await counters(api, 'p0'), { wins_7d: 3 });
  t.same(await counters(api, 'p1'), { wins_7d: 2 });

  // A restart rebuilds the actors from snapshots and the journal: the same counts.
  await first.service.stop();
  const second = await startForTest(t, { storage, env: { COUNTER_BACKFILL_INLINE_MAX: '0' } });
  api = second.anon.with(tenant.server.headers);
  t.same(await counters(api, 'p0'), { wins_7d: 3 }, 'replay rebuilds identical counters');
  t.same(await counters(api, 'p1'), { wins_7d: 2 });
});

t.test('a history longer than the inline scan bound runs as a job, whatever share of it is the counter event', async (t) => {
  // Names are not indexed: the request reads at most COUNTER_BACKFILL_INLINE_SCAN_MAX of the
  // environment's events to decide, and the job pages through every customer with events.
  const { anon } = await startForTest(t, { env: { COUNTER_BACKFILL_INLINE_SCAN_MAX: '4' } });
  const api = (await signUp(anon)).server;
  for (let i = 0; i < 4; i++) await send(api, `o-${i}`, `other-${i}`, {}, 'login', ago(3_600_000));
  await send(api, 'w-0', 'winner', {}, 'match.won', ago(3_600_000));
  await send(api, 'w-1', 'winner', {}, 'match.won', ago(3_600_000));
  await send(api, 'w-2', 'other-0', {}, 'match.won', ago(3_600_000));
  const ctr = await api.post('/v1/counter_definitions', { name: 'wins', event: 'match.won', window: { kind: 'lifetime' } }, idem());
  t.equal(ctr.body.status, 'backfilling');
  const bf = await api.post(`/v1/counter_definitions/${ctr.body.id}/backfill`, {});
  t.equal(bf.status, 202, '3 uncounted events, under the inline maximum, but 7 events in the environment');
  let status = 'backfilling';
  for (let i = 0; i < 600 && status !== 'ready'; i++) {
    await new Promise((r) => setTimeout(r, 50));
    status = (await api.get(`/v1/counter_definitions/${ctr.body.id}`)).body.status;
  }
  t.equal(status, 'ready');
  t.same(await counters(api, 'winner'), { wins: 2 });
  t.same(await counters(api, 'other-0'), { wins: 1 }, 'only its match.won, not its login');
  t.same(await counters(api, 'other-1'), { wins: 0 }, 'a customer with no match.won counts none');
});
