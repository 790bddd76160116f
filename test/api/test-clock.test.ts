// The test clock moves a test environment's time and runs the ledger work that falls due:
// pending credits are confirmed, expired lots are written off, tiers follow.
import t from 'tap';
import { idem, signUp, startForTest } from '../helpers/service.js';

t.test('test clock and due ledger work', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  const start = await api.get('/v1/test_clock');
  t.equal(start.status, 200);
  const startMs = Date.parse(start.body.now);
  t.ok(Math.abs(startMs - Date.now()) < 5000, 'a new test clock reads the real time');

  await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem());
  const customer = (await api.post('/v1/customers', { external_id: 'timed' }, idem())).body;
  const day = 86_400_000;
  await api.post('/v1/ledger_entries', { customer_id: customer.id, currency: 'coins', amount: 100, reason: 'expires', expires_at: new Date(startMs + 2 * day).toISOString() }, idem());
  await api.post('/v1/ledger_entries', { customer_id: customer.id, currency: 'coins', amount: 40, reason: 'later', confirm_after: new Date(startMs + 3600_000).toISOString() }, idem());
  const balance = async () => (await api.get(`/v1/customers/${customer.id}/balances`)).body.data[0];
  t.match(await balance(), { available: 100, pending: 40 });

  const adv = await api.post('/v1/test_clock/advance', { seconds: 2 * 3600 });
  t.equal(adv.status, 200);
  t.ok(Date.parse(adv.body.now) >= startMs + 2 * 3600_000);
  t.same(Object.keys(adv.body).sort(), ['campaigns_ended', 'challenges_ended', 'customers_settled', 'now']);
  t.match(adv.body, { customers_settled: 1, challenges_ended: 0, campaigns_ended: 0 });
  t.match(await balance(), { available: 140, pending: 0, lifetime_earned: 140 });
  const afterConfirm = (await api.get(`/v1/customers/${customer.id}/ledger_entries`)).body.data;
  t.ok(afterConfirm.every((e: { status: string }) => e.status === 'posted'), 'the pending credit is posted');

  await api.post('/v1/test_clock/advance', { seconds: 3 * 86_400 });
  t.match(await balance(), { available: 40, pending: 0, lifetime_earned: 140 });
  const entries = (await api.get(`/v1/customers/${customer.id}/ledger_entries`)).body.data;
  t.match(entries[0], { type: 'expiry', amount: -100 }, 'the expiry is an entry of its own');
  t.ok(entries.some((e: { status: string; amount: number }) => e.amount === 100 && e.status === 'expired'));

  // Events are judged against the environment's clock.
  const future = new Date(Date.now() + 24 * 3600_000).toISOString();
  const ev = await api.post('/v1/events', { id: 'tc-1', name: 'app.opened', customer_id: 'timed', occurred_at: future });
  t.equal(ev.status, 202, 'a day ahead of the real clock is not in the future of a clock five days ahead');

  t.equal((await api.post('/v1/test_clock/advance', { seconds: 0 })).body.error.code, 'validation_failed');
  t.equal((await api.post('/v1/test_clock/advance', { seconds: 60, extra: 1 })).body.error.param, 'extra');
  t.equal((await api.post('/v1/test_clock/advance')).body.error.param, 'seconds', 'no body is a missing seconds');
  const live = tenant.admin.with({ 'x-service-environment': tenant.liveEnv });
  t.equal((await live.get('/v1/test_clock')).status, 403);
  t.equal((await live.post('/v1/test_clock/advance', { seconds: 60 })).body.error.code, 'forbidden');
  // A live environment has no test clock, whatever the body says (decisions.md: both answer 403).
  for (const body of [{ seconds: 'x' }, { seconds: -1 }, {}, undefined]) {
    const r = await live.post('/v1/test_clock/advance', body);
    t.equal(r.status, 403, JSON.stringify(body));
    t.equal(r.body.error.code, 'forbidden', JSON.stringify(body));
  }
});

t.test('advance names what it settled: customers (once each), challenges and campaigns ended; OpenAPI documents that answer', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  const nowMs = Date.parse((await api.get('/v1/test_clock')).body.now);
  const hour = 3600_000;
  const ch = await api.post(
    '/v1/challenges',
    { name: 'Short', qualifying: { event: 'app.opened' }, target: 3, ends_at: new Date(nowMs + hour).toISOString(), status: 'active' },
    idem(),
  );
  t.equal(ch.status, 201, JSON.stringify(ch.body));
  const cmp = await api.post('/v1/campaigns', { name: 'Short', ends_at: new Date(nowMs + hour).toISOString() }, idem());
  t.equal((await api.post(`/v1/campaigns/${cmp.body.id}/activate`, {})).status, 200);
  const adv = await api.post('/v1/test_clock/advance', { seconds: 2 * 3600 });
  t.equal(adv.status, 200);
  t.match(adv.body, { customers_settled: 0, challenges_ended: 1, campaigns_ended: 1 }, 'a challenge or campaign ending is not a customer settled');
  t.equal((await api.get(`/v1/challenges/${ch.body.id}`)).body.status, 'ended');
  t.equal((await api.get(`/v1/campaigns/${cmp.body.id}`)).body.status, 'ended');

  // One customer with a pending credit and an issuance, both due: two jobs settle it, it counts once.
  await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem());
  const customer = (await api.post('/v1/customers', { external_id: 'both' }, idem())).body;
  const at = Date.parse(adv.body.now);
  await api.post('/v1/ledger_entries', { customer_id: customer.id, currency: 'coins', amount: 50, reason: 'gift' }, idem());
  await api.post('/v1/ledger_entries', { customer_id: customer.id, currency: 'coins', amount: 5, reason: 'later', confirm_after: new Date(at + hour).toISOString() }, idem());
  const voucher = await api.post('/v1/rewards', { name: 'Voucher', cost: 10, currency: 'coins', availability: 5, expiry_after: '1d' }, idem());
  const issuance = await api.post('/v1/reward_issuances', { reward_id: voucher.body.id, customer_id: customer.id }, idem());
  t.equal(issuance.status, 201);
  const both = await api.post('/v1/test_clock/advance', { seconds: 2 * 86_400 });
  t.same(both.body, { now: both.body.now, customers_settled: 1, challenges_ended: 0, campaigns_ended: 0 }, 'the ledger and the reward expiry settled the same customer');
  t.equal((await api.get(`/v1/reward_issuances/${issuance.body.id}`)).body.status, 'expired');
  t.match((await api.get(`/v1/customers/${customer.id}/balances`)).body.data[0], { pending: 0 });

  const doc = (await anon.get('/v1/openapi.json')).body;
  const res = doc.paths['/v1/test_clock/advance'].post.responses['200'];
  t.match(res.description, /customers_settled/);
  t.notMatch(res.description, /jobs_run/);
  const schema = res.content['application/json'].schema;
  t.same(Object.keys(schema.properties).sort(), Object.keys(adv.body).sort(), 'the documented fields are the answered ones');
  t.same([...schema.required].sort(), Object.keys(adv.body).sort());
  t.equal(schema.additionalProperties, false);
});

t.test("the minute sweep runs what falls due by an advanced test clock as it moves on: challenge and campaign ends, ledger confirmations", async (t) => {
  const { anon, service } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  const clock = async () => Date.parse((await api.get('/v1/test_clock')).body.now);
  // Given a test clock days ahead of the real one, and work falling due an hour later on it.
  t.equal((await api.post('/v1/test_clock/advance', { seconds: 4 * 86_400 })).status, 200);
  const due = (await clock()) + 3600_000 + 3000;
  const ch = await api.post('/v1/challenges', { name: 'Ends', qualifying: { event: 'zzz' }, target: 1, status: 'active', ends_at: new Date(due).toISOString() }, idem());
  t.equal(ch.status, 201, JSON.stringify(ch.body));
  const cmp = await api.post('/v1/campaigns', { name: 'Ends', ends_at: new Date(due).toISOString() }, idem());
  t.equal((await api.post(`/v1/campaigns/${cmp.body.id}/activate`, {})).status, 200);
  await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem());
  const customer = (await api.post('/v1/customers', { external_id: 'later' }, idem())).body;
  await api.post('/v1/ledger_entries', { customer_id: customer.id, currency: 'coins', amount: 40, reason: 'later', confirm_after: new Date(due).toISOString() }, idem());
  const adv = await api.post('/v1/test_clock/advance', { seconds: 3600 });
  t.match(adv.body, { customers_settled: 0, challenges_ended: 0, campaigns_ended: 0 }, 'nothing due yet at the advance');

  // When the environment's clock passes that instant (the real clock is still days behind) and the minute sweep runs.
  while ((await clock()) <= due) await new Promise((r) => setTimeout(r, 200));
  await service.scheduler.sweep();

  // Then the sweep did it, as it would in a live environment.
  t.equal((await api.get(`/v1/challenges/${ch.body.id}`)).body.status, 'ended');
  t.notOk((await api.get('/v1/challenges?status=active')).body.data.some((c: { id: string }) => c.id === ch.body.id), 'no longer listed as active');
  t.equal((await api.get(`/v1/campaigns/${cmp.body.id}`)).body.status, 'ended');
  const entries = (await api.get(`/v1/customers/${customer.id}/ledger_entries`)).body.data;
  t.same(entries.map((e: { amount: number; status: string }) => [e.amount, e.status]), [[40, 'posted']], 'the pending credit is confirmed (journaled by the sweep)');
});
