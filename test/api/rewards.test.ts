// Black-box API tests of rewards and reward issuances: every route, every error code each one
// produces, the issuance state table (redeem spends in the same step, insufficient_balance keeps
// it issued, cancel from issued only and gives the unit back, expiry by the test clock), the
// customer state view and export, and the stock reconciler repairing a crash between reservation
// and journal.
import t from 'tap';
import { openSql } from '../../src/persistence/sql/db.js';
import { idem, signUp, startForTest, storageFor } from '../helpers/service.js';
import { databaseUrl } from '../helpers/service.js';

t.test('rewards and issuances over the API', async (t) => {
  const storage = storageFor(t);
  const { anon, service } = await startForTest(t, { storage });
  const tenant = await signUp(anon);
  const api = tenant.server;
  const sql = openSql({ url: databaseUrl, schema: storage.schema, max: 1 });
  t.teardown(() => sql.end());
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const alice = await api.post('/v1/customers', { external_id: 'alice' }, idem());
  t.equal(alice.status, 201);
  const aliceId = alice.body.id as string;
  const fund = async (customer: string, amount: number) => {
    const r = await api.post('/v1/ledger_entries', { customer_id: customer, currency: 'coins', amount, reason: 'test' }, idem());
    t.equal(r.status, 201, `funded ${amount}`);
  };
  const balance = async (customer: string) => {
    const r = await api.get(`/v1/customers/${customer}/balances`);
    return (r.body.data.find((b: { currency: string }) => b.currency === 'coins')?.available ?? 0) as number;
  };
  const issue = (reward: string, customer: string, key = idem()) => api.post('/v1/reward_issuances', { reward_id: reward, customer_id: customer }, key);
  const rewardOf = async (id: string) => (await api.get(`/v1/rewards/${id}`)).body;

  let mug = '';

  await t.test('POST /v1/rewards: 201, wire shape, ETag, idempotent replay', async (t) => {
    const key = idem();
    const body = { name: 'Mug', cost: 500, currency: 'coins', availability: 3, expiry_after: '30d' };
    const r = await api.post('/v1/rewards', body, key);
    t.equal(r.status, 201);
    t.match(r.body, {
      id: /^rw_/,
      name: 'Mug',
      cost: 500,
      currency: 'coins',
      availability: 3,
      issued: 0,
      expiry_after: '30d',
      status: 'active',
      version: 1,
      created_at: String,
      updated_at: String,
    });
    t.equal(r.headers.get('etag'), '"1"');
    mug = r.body.id;
    const again = await api.post('/v1/rewards', body, key);
    t.equal(again.body.id, mug, 'the same Idempotency-Key answers as the first time');
    const hours = await api.post('/v1/rewards', { name: 'Hourly', cost: 0, currency: 'coins', availability: 1, expiry_after: '12h' }, idem());
    t.equal(hours.status, 201, '<n>h is accepted');
    const never = await api.post('/v1/rewards', { name: 'Forever', cost: 1, currency: 'coins', availability: 0 }, idem());
    t.equal(never.body.expiry_after, null, 'expiry_after defaults to null (never)');
  });

  await t.test('POST /v1/rewards errors', async (t) => {
    const base = { name: 'X', cost: 1, currency: 'coins', availability: 1 };
    const cases: Array<[string, unknown, number, string, string | undefined]> = [
      ['unknown currency', { ...base, currency: 'gems' }, 404, 'resource_not_found', 'currency'],
      ['bad expiry_after', { ...base, expiry_after: '3w' }, 400, 'validation_failed', 'expiry_after'],
      ['negative cost', { ...base, cost: -1 }, 400, 'validation_failed', 'cost'],
      ['fractional availability', { ...base, availability: 1.5 }, 400, 'validation_failed', 'availability'],
      ['unknown field', { ...base, colour: 'red' }, 400, 'validation_failed', undefined],
    ];
    for (const [name, body, status, code, param] of cases) {
      const r = await api.post('/v1/rewards', body, idem());
      t.equal(r.status, status, name);
      t.equal(r.body.error.code, code, name);
      if (param !== undefined) t.equal(r.body.error.param, param, `${name}: param`);
    }
    const noKey = await api.post('/v1/rewards', base);
    t.equal(noKey.body.error.code, 'idempotency_key_required');
    const key = idem();
    await api.post('/v1/rewards', base, key);
    t.equal((await api.post('/v1/rewards', { ...base, name: 'Y' }, key)).body.error.code, 'idempotency_key_reused');
  });

  await t.test('GET /v1/rewards: list, status filter, pagination, invalid_cursor; GET one; 404', async (t) => {
    const page1 = await api.get('/v1/rewards?limit=2');
    t.equal(page1.status, 200);
    t.equal(page1.body.data.length, 2);
    t.equal(page1.body.has_more, true);
    const page2 = await api.get(`/v1/rewards?limit=200&cursor=${page1.body.next_cursor}`);
    t.notOk(page2.body.data.some((r: { id: string }) => page1.body.data.some((p: { id: string }) => p.id === r.id)), 'no repeats');
    t.equal((await api.get('/v1/rewards?cursor=!!')).body.error.code, 'invalid_cursor');
    t.equal((await api.get('/v1/rewards?status=gone')).body.error.code, 'validation_failed');
    const one = await api.get(`/v1/rewards/${mug}`);
    t.equal(one.status, 200);
    t.equal(one.body.id, mug);
    t.equal(one.headers.get('etag'), '"1"');
    const missing = await api.get('/v1/rewards/rw_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ');
    t.same([missing.status, missing.body.error.code], [404, 'resource_not_found']);
  });

  let first = '';

  await t.test('POST /v1/reward_issuances: 201 by service id or external id; errors', async (t) => {
    const key = idem();
    const r = await issue(mug, aliceId, key);
    t.equal(r.status, 201);
    t.match(r.body, {
      id: /^rwi_/,
      reward_id: mug,
      customer_id: aliceId,
      status: 'issued',
      source_type: 'api',
      cost_entry_id: null,
      redeemed_at: null,
      cancelled_at: null,
      version: 1,
      created_at: String,
    });
    t.equal(Date.parse(r.body.expires_at) - Date.parse(r.body.created_at), 30 * 86_400_000, 'expires_at = created_at + 30d');
    first = r.body.id;
    const again = await issue(mug, aliceId, key);
    t.equal(again.body.id, first, 'replayed, not issued twice');
    t.equal((await rewardOf(mug)).issued, 1, 'one unit taken');
    const byExternal = await issue(mug, 'alice');
    t.equal(byExternal.status, 201);
    t.equal(byExternal.body.customer_id, aliceId);

    const unknownReward = await issue('rw_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ', aliceId);
    t.same([unknownReward.status, unknownReward.body.error.code, unknownReward.body.error.param], [404, 'resource_not_found', 'reward_id']);
    const unknownCustomer = await issue(mug, 'nobody');
    t.same([unknownCustomer.status, unknownCustomer.body.error.code, unknownCustomer.body.error.param], [404, 'resource_not_found', 'customer_id']);
    t.equal((await rewardOf(mug)).issued, 2, 'refusals take no unit');
    t.equal((await api.post('/v1/reward_issuances', { reward_id: mug, customer_id: aliceId })).body.error.code, 'idempotency_key_required');
    t.equal((await api.post('/v1/reward_issuances', { reward_id: mug }, idem())).body.error.code, 'validation_failed');

    t.equal((await issue(mug, aliceId)).status, 201, 'third unit');
    const none = await issue(mug, aliceId);
    t.same([none.status, none.body.error.code], [409, 'reward_unavailable'], 'none left');
    t.equal((await rewardOf(mug)).issued, 3, 'never more than availability');
  });

  await t.test('GET /v1/reward_issuances/{id} and the list', async (t) => {
    const one = await api.get(`/v1/reward_issuances/${first}`);
    t.equal(one.status, 200);
    t.match(one.body, { id: first, reward_id: mug, customer_id: aliceId, status: 'issued', version: 1 });
    const missing = await api.get('/v1/reward_issuances/rwi_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ');
    t.same([missing.status, missing.body.error.code], [404, 'resource_not_found']);
    const all = await api.get('/v1/reward_issuances?status=issued&limit=2');
    t.equal(all.body.data.length, 2);
    t.equal(all.body.has_more, true);
    const rest = await api.get(`/v1/reward_issuances?status=issued&cursor=${all.body.next_cursor}`);
    t.equal(rest.body.data.length, 1);
    t.equal((await api.get(`/v1/reward_issuances?customer_id=alice`)).body.data.length, 3, 'by external id');
    t.same((await api.get('/v1/reward_issuances?customer_id=nobody')).body, { data: [], next_cursor: null, has_more: false });
    t.equal((await api.get('/v1/reward_issuances?status=redeemed')).body.data.length, 0);
    t.equal((await api.get('/v1/reward_issuances?status=pending')).body.error.code, 'validation_failed');
    t.equal((await api.get('/v1/reward_issuances?cursor=%%%')).body.error.code, 'invalid_cursor');
  });

  await t.test('redeem: insufficient_balance keeps it issued; then spends the cost in the same step', async (t) => {
    await fund(aliceId, 300);
    const poor = await api.post(`/v1/reward_issuances/${first}/redeem`, {});
    t.same([poor.status, poor.body.error.code], [409, 'insufficient_balance']);
    t.equal((await api.get(`/v1/reward_issuances/${first}`)).body.status, 'issued', 'still issued');
    t.equal(await balance(aliceId), 300, 'nothing spent');
    await fund(aliceId, 400);
    const r = await api.post(`/v1/reward_issuances/${first}/redeem`, {});
    t.equal(r.status, 200);
    t.match(r.body, { id: first, status: 'redeemed', cost_entry_id: /^le_/, redeemed_at: String, version: 2 });
    t.equal(await balance(aliceId), 200, '700 - 500');
    const entries = await api.get(`/v1/customers/${aliceId}/ledger_entries`);
    const spend = entries.body.data.find((e: { id: string }) => e.id === r.body.cost_entry_id);
    t.match(spend, { type: 'spend', amount: -500, source_type: 'reward_issuance', source_id: first });
    const twice = await api.post(`/v1/reward_issuances/${first}/redeem`, {});
    t.same([twice.status, twice.body.error.code], [409, 'invalid_state']);
    const cancelRedeemed = await api.post(`/v1/reward_issuances/${first}/cancel`, {});
    t.same([cancelRedeemed.status, cancelRedeemed.body.error.code], [409, 'invalid_state']);
    const missing = await api.post('/v1/reward_issuances/rwi_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ/redeem', {});
    t.same([missing.status, missing.body.error.code], [404, 'resource_not_found']);
    t.equal((await api.post(`/v1/reward_issuances/${first}/redeem`, { extra: 1 })).body.error.code, 'validation_failed');
    t.equal((await rewardOf(mug)).issued, 3, 'a redeemed unit stays counted');
  });

  await t.test('redeem in a currency with negative_balance allow: still insufficient_balance, no debt', async (t) => {
    t.equal((await api.post('/v1/currencies', { key: 'gems', name: 'Gems', negative_balance: 'allow' }, idem())).status, 201);
    const gem = (await api.post('/v1/rewards', { name: 'Gem box', cost: 50, currency: 'gems', availability: 5 }, idem())).body.id as string;
    const bob = (await api.post('/v1/customers', { external_id: 'bob-allow' }, idem())).body.id as string;
    t.equal((await api.post('/v1/ledger_entries', { customer_id: bob, currency: 'gems', amount: 49, reason: 'test' }, idem())).status, 201);
    const gems = async () => (await api.get(`/v1/customers/${bob}/balances`)).body.data.find((b: { currency: string }) => b.currency === 'gems').available;
    const id = (await issue(gem, bob)).body.id as string;
    const poor = await api.post(`/v1/reward_issuances/${id}/redeem`, {});
    t.same([poor.status, poor.body.error.code], [409, 'insufficient_balance']);
    t.equal((await api.get(`/v1/reward_issuances/${id}`)).body.status, 'issued', 'still issued');
    t.equal(await gems(), 49, 'nothing spent, the balance did not go negative');
    t.equal((await api.post('/v1/ledger_entries', { customer_id: bob, currency: 'gems', amount: 1, reason: 'test' }, idem())).status, 201);
    t.equal((await api.post(`/v1/reward_issuances/${id}/redeem`, {})).status, 200);
    t.equal(await gems(), 0);
  });

  await t.test('cancel: from issued, gives the unit back; reason; then invalid_state', async (t) => {
    const list = await api.get('/v1/reward_issuances?status=issued');
    const id = list.body.data[0].id as string;
    const r = await api.post(`/v1/reward_issuances/${id}/cancel`, { reason: 'changed mind' });
    t.equal(r.status, 200);
    t.match(r.body, { id, status: 'cancelled', cancelled_at: String, cost_entry_id: null, version: 2 });
    t.equal((await rewardOf(mug)).issued, 2, 'one unit back');
    const again = await api.post(`/v1/reward_issuances/${id}/cancel`);
    t.same([again.status, again.body.error.code], [409, 'invalid_state']);
    t.equal((await rewardOf(mug)).issued, 2, 'given back once');
    const redeem = await api.post(`/v1/reward_issuances/${id}/redeem`, {});
    t.same([redeem.status, redeem.body.error.code], [409, 'invalid_state']);
    t.equal((await api.post(`/v1/reward_issuances/${id}/cancel`, { reason: '' })).body.error.code, 'validation_failed');
    const missing = await api.post('/v1/reward_issuances/rwi_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ/cancel', {});
    t.same([missing.status, missing.body.error.code], [404, 'resource_not_found']);
    t.equal((await issue(mug, aliceId)).status, 201, 'the unit given back can be issued again');
  });

  await t.test('PATCH /v1/rewards: If-Match, resource_in_use below issued, validation, 404', async (t) => {
    const cur = await api.get(`/v1/rewards/${mug}`);
    const etag = cur.headers.get('etag')!;
    const stale = await api.patch(`/v1/rewards/${mug}`, { name: 'Big mug' }, { 'if-match': '"999"' });
    t.same([stale.status, stale.body.error.code], [409, 'stale_write']);
    const below = await api.patch(`/v1/rewards/${mug}`, { availability: 2 }, { 'if-match': etag });
    t.same([below.status, below.body.error.code, below.body.error.param], [409, 'resource_in_use', 'availability']);
    const bad = await api.patch(`/v1/rewards/${mug}`, { expiry_after: 'soon' });
    t.same([bad.status, bad.body.error.code], [400, 'validation_failed']);
    const ok = await api.patch(`/v1/rewards/${mug}`, { name: 'Big mug', availability: 4, cost: 50 }, { 'if-match': etag });
    t.equal(ok.status, 200);
    t.match(ok.body, { name: 'Big mug', availability: 4, cost: 50, issued: 3, version: cur.body.version + 1 });
    t.equal(ok.headers.get('etag'), `"${cur.body.version + 1}"`);
    const missing = await api.patch('/v1/rewards/rw_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ', { name: 'x' });
    t.same([missing.status, missing.body.error.code], [404, 'resource_not_found']);
    // A body naming nothing to change is refused, as the other catalog PATCHes refuse it.
    const nothing = await api.patch(`/v1/rewards/${mug}`, {}, { 'if-match': ok.headers.get('etag')! });
    t.same([nothing.status, nothing.body.error.code], [400, 'validation_failed']);
    t.match(nothing.body.error.message, 'Name at least one of name, cost, availability, expiry_after, status');
    const kept = await api.get(`/v1/rewards/${mug}`);
    t.equal(kept.body.version, cur.body.version + 1, 'an empty PATCH keeps the version');
    t.equal(kept.headers.get('etag'), ok.headers.get('etag'), 'the ETag a client holds stays valid');
    t.equal((await api.patch(`/v1/rewards/${mug}`, { expiry_after: null })).status, 200, 'null is a change');
  });

  await t.test('expiry: the test clock expires issued issuances (no refund, no unit back)', async (t) => {
    const soon = await api.post('/v1/rewards', { name: 'Voucher', cost: 10, currency: 'coins', availability: 5, expiry_after: '1d' }, idem());
    const i = await issue(soon.body.id, aliceId);
    t.equal(i.status, 201);
    const adv = await api.post('/v1/test_clock/advance', { seconds: 2 * 86_400 });
    t.equal(adv.status, 200);
    const after = await api.get(`/v1/reward_issuances/${i.body.id}`);
    t.match(after.body, { status: 'expired', version: 2 });
    t.equal((await rewardOf(soon.body.id)).issued, 1, 'an expired unit is not given back');
    const redeem = await api.post(`/v1/reward_issuances/${i.body.id}/redeem`, {});
    t.same([redeem.status, redeem.body.error.code], [409, 'invalid_state']);
    t.equal((await api.get('/v1/reward_issuances?status=expired')).body.data.length, 1);
  });

  await t.test('state view and export list the issuances', async (t) => {
    const st = await api.get(`/v1/customers/${aliceId}/state`);
    t.equal(st.status, 200);
    t.ok(st.body.issuances.length >= 5);
    t.match(st.body.issuances.find((x: { id: string }) => x.id === first), { id: first, reward_id: mug, status: 'redeemed', expires_at: String });
    t.same(Object.keys(st.body.issuances[0]).sort(), ['expires_at', 'id', 'reward_id', 'status']);
    const ex = await api.get(`/v1/customers/${aliceId}/export`);
    t.match(ex.body.reward_issuances.find((x: { id: string }) => x.id === first), {
      id: first,
      reward: mug,
      status: 'redeemed',
      redeemed_at: String,
      cancelled_at: null,
      created_at: String,
    });
  });

  await t.test('DELETE /v1/rewards archives: no new issuances, existing ones still work', async (t) => {
    const live = await api.get(`/v1/reward_issuances?status=issued&customer_id=${aliceId}`);
    const held = live.body.data.find((x: { reward_id: string }) => x.reward_id === mug).id as string;
    const del = await api.delete(`/v1/rewards/${mug}`);
    t.equal(del.status, 204);
    t.equal((await rewardOf(mug)).status, 'archived');
    t.equal((await api.delete(`/v1/rewards/${mug}`)).status, 204, 'archiving twice is fine');
    t.ok((await api.get('/v1/rewards?status=archived')).body.data.some((r: { id: string }) => r.id === mug));
    t.notOk((await api.get('/v1/rewards?status=active')).body.data.some((r: { id: string }) => r.id === mug));
    const none = await issue(mug, aliceId);
    t.same([none.status, none.body.error.code, none.body.error.message], [409, 'reward_unavailable', 'The reward is archived.']);
    await fund(aliceId, 500);
    const r = await api.post(`/v1/reward_issuances/${held}/redeem`, {});
    t.equal(r.status, 200, 'an issuance of an archived reward can still be redeemed (at the price fixed when issued)');
    t.equal(r.body.status, 'redeemed');
    const missing = await api.delete('/v1/rewards/rw_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ');
    t.same([missing.status, missing.body.error.code], [404, 'resource_not_found']);
  });

  await t.test('the reconciler gives back a unit reserved by a request that never reached the journal', async (t) => {
    const tee = await api.post('/v1/rewards', { name: 'Tee', cost: 0, currency: 'coins', availability: 2 }, idem());
    const teeId = tee.body.id as string;
    const kept = await issue(teeId, aliceId);
    t.equal(kept.status, 201);
    // A crash right after the reservation: the unit is taken, nothing was journaled.
    await sql`insert into reward_reservations (environment_id, issuance_id, reward_id, customer_id, state, created_at)
      values (${tenant.testEnv}, 'rwi_CRASHED0000000000000000000', ${teeId}, ${aliceId}, 'reserved', now() - interval '10 minutes')`;
    await sql`update rewards set issued = issued + 1 where id = ${teeId}`;
    // A lost confirm: the issuance is journaled but its reservation still says reserved.
    await sql`update reward_reservations set state = 'reserved', created_at = now() - interval '10 minutes' where issuance_id = ${kept.body.id}`;
    t.equal((await rewardOf(teeId)).issued, 2);
    t.equal((await issue(teeId, aliceId)).body.error.code, 'reward_unavailable', 'the leaked unit blocks the stock');
    const released = await service.rewardDue.reconcile(Date.now() - 60_000);
    t.equal(released, 1, 'one unit given back');
    t.equal((await rewardOf(teeId)).issued, 1, 'the journaled issuance keeps its unit');
    const [res] = await sql`select state from reward_reservations where issuance_id = ${kept.body.id}`;
    t.equal(res!.state, 'confirmed');
    t.equal((await issue(teeId, aliceId)).status, 201, 'the unit is issuable again');
    t.equal(await service.rewardDue.reconcile(Date.now() - 60_000), 0, 'a second run changes nothing');
  });
});

t.test('rule action reward.issue: journaled request, delivered after the ack, refused when none left, re-driven after a crash', async (t) => {
  const { anon, service } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const reward = await api.post('/v1/rewards', { name: 'Badge', cost: 0, currency: 'coins', availability: 2, expiry_after: '7d' }, idem());
  const rewardId = reward.body.id as string;
  const rule = await api.post(
    '/v1/rules',
    { name: 'win', definition: { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: 'match.won' }, actions: [{ type: 'reward.issue', reward_id: rewardId }] } },
    idem(),
  );
  t.equal(rule.status, 201);
  t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);
  const at = () => new Date(Date.now() - 1000).toISOString();
  const send = (id: string, customer: string) => api.post('/v1/events', { id, name: 'match.won', customer_id: customer, occurred_at: at(), mode: 'sync' });
  // The issuance lands after the ack: up to 15 s on a loaded box.
  const settled = async (id: string) => {
    for (const until = Date.now() + 15_000; Date.now() < until; ) {
      const r = await api.get(`/v1/reward_issuances/${id}`);
      if (r.status === 200) return r;
      await new Promise((res) => setTimeout(res, 50));
    }
    return api.get(`/v1/reward_issuances/${id}`);
  };

  const e1 = await send('e1', 'bob');
  t.equal(e1.status, 200);
  const req = e1.body.effects.find((e: { type: string }) => e.type === 'reward.issue_requested');
  t.match(req, { type: 'reward.issue_requested', rule_id: rule.body.id, reward_id: rewardId, issuance_id: /^rwi_/ });
  const got = await settled(req.issuance_id);
  t.equal(got.status, 200, 'delivered after the ack');
  t.match(got.body, { id: req.issuance_id, reward_id: rewardId, status: 'issued', source_type: 'rule_execution', source_id: rule.body.id, expires_at: String });
  const bob = got.body.customer_id as string;
  t.match((await api.get(`/v1/customers/${bob}/state`)).body.issuances, [{ id: req.issuance_id, status: 'issued' }]);

  // A crash between the event's ack and the delivery: the request stays pending in the actor (and journal).
  const deliver = service.rewardDue.afterEvent;
  service.rewardDue.afterEvent = () => {};
  const e2 = await send('e2', 'carol');
  service.rewardDue.afterEvent = deliver;
  const pending = e2.body.effects.find((e: { type: string }) => e.type === 'reward.issue_requested').issuance_id as string;
  t.equal((await api.get(`/v1/reward_issuances/${pending}`)).status, 404, 'a pending request is not an issuance yet');
  t.equal((await api.get(`/v1/rewards/${rewardId}`)).body.issued, 1, 'no unit taken yet');
  t.equal(await service.rewardDue.redrive(Date.now() + 1000), 1, 'the sweep re-drives the pending request');
  t.match((await api.get(`/v1/reward_issuances/${pending}`)).body, { status: 'issued', source_type: 'rule_execution' });
  t.equal(await service.rewardDue.redrive(Date.now() + 1000), 0, 'nothing left to re-drive');

  // None left: the request is refused (reward_unavailable) and never becomes an issuance.
  const e3 = await send('e3', 'dave');
  const refusedId = e3.body.effects.find((e: { type: string }) => e.type === 'reward.issue_requested').issuance_id as string;
  for (let i = 0; i < 50 && (await service.rewardDue.redrive(Date.now() + 1000)) > 0; i++);
  t.equal((await api.get(`/v1/reward_issuances/${refusedId}`)).status, 404, 'refused: not an issuance');
  t.equal((await api.get(`/v1/rewards/${rewardId}`)).body.issued, 2, 'never more than availability');
  t.equal((await api.get(`/v1/reward_issuances?limit=200`)).body.data.length, 2);
  const dave = (await api.get('/v1/customers?external_id=dave')).body.data[0].id as string;
  t.same((await api.get(`/v1/customers/${dave}/state`)).body.issuances, [], 'no issuance for the refused request');
});

t.test("deleting a customer ends its open issuances and gives their units back; its issuances stay listed, also filtered by its id", async (t) => {
  const { anon, service } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const pen = (await api.post('/v1/rewards', { name: 'Pen', cost: 10, currency: 'coins', availability: 10, expiry_after: '2d' }, idem())).body.id as string;
  const rule = await api.post(
    '/v1/rules',
    { name: 'pen', definition: { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: 'pen.won' }, actions: [{ type: 'reward.issue', reward_id: pen }] } },
    idem(),
  );
  t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);
  // Given a customer with two issued pens, one redeemed, and a request its rule made that is still pending.
  const c4 = (await api.post('/v1/customers', { external_id: 'p4' }, idem())).body.id as string;
  await api.post('/v1/ledger_entries', { customer_id: c4, currency: 'coins', amount: 100, reason: 'test' }, idem());
  const issue = async () => (await api.post('/v1/reward_issuances', { reward_id: pen, customer_id: c4 }, idem())).body.id as string;
  const [a, b, used] = [await issue(), await issue(), await issue()];
  t.equal((await api.post(`/v1/reward_issuances/${used}/redeem`, {})).status, 200);
  const deliver = service.rewardDue.afterEvent;
  service.rewardDue.afterEvent = () => {};
  const won = await api.post('/v1/events', { id: 'pen-1', name: 'pen.won', customer_id: 'p4', occurred_at: new Date(Date.now() - 1000).toISOString(), mode: 'sync' });
  service.rewardDue.afterEvent = deliver;
  const pending = won.body.effects.find((e: { type: string }) => e.type === 'reward.issue_requested').issuance_id as string;
  t.equal((await api.get(`/v1/rewards/${pen}`)).body.issued, 3);

  // When it is deleted.
  t.equal((await api.delete(`/v1/customers/${c4}`)).status, 204);

  // Then its issued pens are cancelled and their units are back at once; the redeemed one stays redeemed.
  for (const id of [a, b]) t.match((await api.get(`/v1/reward_issuances/${id}`)).body, { status: 'cancelled', cancelled_at: String }, `${id} cancelled`);
  t.equal((await api.get(`/v1/reward_issuances/${used}`)).body.status, 'redeemed');
  t.equal((await api.get(`/v1/rewards/${pen}`)).body.issued, 1, 'only the redeemed pen still counts');
  const again = await api.post(`/v1/reward_issuances/${a}/cancel`, {});
  t.same([again.status, again.body.error.code], [409, 'invalid_state'], 'a cancelled issuance, like any other');
  // Its pending request was refused: never issued, and the sweep does not re-drive it again and again.
  t.equal(await service.rewardDue.redrive(Date.now() + 1000), 0, 'nothing left to re-drive');
  t.equal((await api.get(`/v1/reward_issuances/${pending}`)).status, 404, 'a refused request is not an issuance');
  t.equal((await api.get(`/v1/rewards/${pen}`)).body.issued, 1);
  // Its issuances are listed by its id as in the whole list.
  const all = (await api.get('/v1/reward_issuances?limit=200')).body.data.map((i: { id: string }) => i.id).sort();
  const mine = await api.get(`/v1/reward_issuances?customer_id=${c4}&limit=200`);
  t.equal(mine.status, 200);
  t.same(mine.body.data.map((i: { id: string }) => i.id).sort(), all, "filtering by the deleted customer's id lists its issuances");
  t.same((await api.get(`/v1/reward_issuances?customer_id=${c4}&status=issued`)).body.data, [], 'none left issued');
  t.same((await api.get('/v1/reward_issuances?customer_id=p4')).body.data, [], 'its erased external id names nobody');
  // And the expiry past their expires_at finds nothing to do for it.
  const adv = await api.post('/v1/test_clock/advance', { seconds: 3 * 86_400 });
  t.match(adv.body, { customers_settled: 0 }, 'no issuance of the deleted customer is left to expire');
});

t.test("a test environment whose clock ran ahead: the minute sweep expires and re-drives by the environment's clock, and an advance re-drives", async (t) => {
  const storage = storageFor(t);
  const { anon, service } = await startForTest(t, { storage });
  const tenant = await signUp(anon);
  const api = tenant.server;
  const sql = openSql({ url: databaseUrl, schema: storage.schema, max: 1 });
  t.teardown(() => sql.end());
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  // Given a test clock four days ahead of the real one.
  t.equal((await api.post('/v1/test_clock/advance', { seconds: 4 * 86_400 })).status, 200);
  const clock = async () => Date.parse((await api.get('/v1/test_clock')).body.now);
  const hourly = (await api.post('/v1/rewards', { name: 'Hourly', cost: 0, currency: 'coins', availability: 5, expiry_after: '1h' }, idem())).body.id as string;
  const rule = await api.post(
    '/v1/rules',
    { name: 'win', definition: { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: 'match.won' }, actions: [{ type: 'reward.issue', reward_id: hourly }] } },
    idem(),
  );
  t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);
  let n = 0;
  /** A request left pending (as by a crash between the event's ack and its delivery). */
  const pendingRequest = async () => {
    const deliver = service.rewardDue.afterEvent;
    service.rewardDue.afterEvent = () => {};
    const e = await api.post('/v1/events', { id: `w-${++n}`, name: 'match.won', customer_id: 'p1', occurred_at: new Date(Date.now() - 1000).toISOString(), mode: 'sync' });
    service.rewardDue.afterEvent = deliver;
    const id = e.body.effects.find((x: { type: string }) => x.type === 'reward.issue_requested').issuance_id as string;
    t.equal((await api.get(`/v1/reward_issuances/${id}`)).status, 404, 'pending');
    return id;
  };

  // When a request has been pending for 90 seconds of the environment's clock, the minute sweep re-drives it.
  const late = await pendingRequest();
  await sql`update reward_issuances set created_at = created_at - interval '90 seconds' where id = ${late}`;
  await service.rewardDue.sweep();
  t.match((await api.get(`/v1/reward_issuances/${late}`)).body, { status: 'issued' }, 're-driven by the environment clock');

  // When the test clock moves past the re-drive delay, the advance re-drives a pending request itself.
  const waiting = await pendingRequest();
  const adv = await api.post('/v1/test_clock/advance', { seconds: 120 });
  t.match(adv.body, { customers_settled: 1 });
  t.match((await api.get(`/v1/reward_issuances/${waiting}`)).body, { status: 'issued' }, 're-driven by the advance');

  // When an issuance's expires_at passes on the environment's clock without an advance, the next sweep expires it.
  const issued = await api.post('/v1/reward_issuances', { reward_id: hourly, customer_id: 'p1' }, idem());
  t.equal(issued.status, 201);
  const expiresAt = Date.parse(issued.body.expires_at);
  t.equal((await api.post('/v1/test_clock/advance', { seconds: Math.floor((expiresAt - (await clock())) / 1000) - 2 })).status, 200);
  t.equal((await api.get(`/v1/reward_issuances/${issued.body.id}`)).body.status, 'issued', 'not due at the advance');
  while ((await clock()) <= expiresAt) await new Promise((r) => setTimeout(r, 200));
  await service.rewardDue.sweep();
  t.equal((await api.get(`/v1/reward_issuances/${issued.body.id}`)).body.status, 'expired', 'expired by the sweep, by the environment clock');
  t.ok((await api.get('/v1/reward_issuances?status=expired')).body.data.some((i: { id: string }) => i.id === issued.body.id));
});
