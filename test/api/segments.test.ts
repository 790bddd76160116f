// Segments end to end: CRUD with If-Match, static members journaled by the customer's actor,
// dynamic conditions over attributes, rules with `customer.segments contains` firing only for
// members, the state view's segments[], and resource_in_use on renaming or deleting a segment a
// rule, a campaign audience or a challenge's qualifying conditions use.
import t from 'tap';
import { idem, signUp, startForTest } from '../helpers/service.js';

const now = () => new Date(Date.now() - 1000).toISOString();

const vipRule = {
  schema: 'service.rule/v2',
  trigger: { kind: 'customer_event', event: 'order.completed' },
  conditions: { all: [{ path: 'customer.segments', op: 'contains', value: 'vip' }] },
  actions: [{ type: 'points.award', currency: 'coins', amount: 5 }],
};

t.test('segment routes and their errors', async (t) => {
  const { anon } = await startForTest(t);
  const { server: api } = await signUp(anon);

  t.equal((await api.post('/v1/segments', { name: 'vip', kind: 'static' })).body.error.code, 'idempotency_key_required');
  const vip = await api.post('/v1/segments', { name: 'vip', kind: 'static', description: 'Top spenders' }, idem());
  t.equal(vip.status, 201);
  t.match(vip.body, { id: /^seg_/, name: 'vip', kind: 'static', description: 'Top spenders', condition: null, version: 1 });
  t.equal(vip.headers.get('etag'), '"1"');
  t.equal((await api.post('/v1/segments', { name: 'vip', kind: 'static' }, idem())).body.error.code, 'already_exists');
  t.equal((await api.post('/v1/segments', { name: 'bad name!', kind: 'static' }, idem())).body.error.code, 'validation_failed');
  t.equal((await api.post('/v1/segments', { name: 'x', kind: 'static', condition: { path: 'customer.attributes.a', op: 'eq', value: 1 } }, idem())).body.error.code, 'validation_failed');
  const noCond = await api.post('/v1/segments', { name: 'x', kind: 'dynamic' }, idem());
  t.match(noCond.body.error, { code: 'validation_failed', param: 'condition' });
  const eventPath = await api.post('/v1/segments', { name: 'x', kind: 'dynamic', condition: { all: [{ path: 'event.properties.a', op: 'eq', value: 1 }] } }, idem());
  t.match(eventPath.body.error, { code: 'validation_failed', param: 'condition.all[0].path' }, 'only customer.attributes paths');
  const badOp = await api.post('/v1/segments', { name: 'x', kind: 'dynamic', condition: { path: 'customer.attributes.a', op: 'zz', value: 1 } }, idem());
  t.match(badOp.body.error, { code: 'validation_failed', param: /^condition/ });

  const whales = await api.post(
    '/v1/segments',
    { name: 'whales', kind: 'dynamic', condition: { all: [{ path: 'customer.attributes.spend', op: 'gte', value: 1000 }] } },
    idem(),
  );
  t.equal(whales.status, 201);

  const page1 = await api.get('/v1/segments?limit=1');
  t.equal(page1.body.data.length, 1);
  t.equal(page1.body.has_more, true);
  const page2 = await api.get(`/v1/segments?limit=1&cursor=${page1.body.next_cursor}`);
  t.equal(page2.body.data[0].id, whales.body.id);
  t.equal((await api.get('/v1/segments?cursor=@@')).body.error.code, 'invalid_cursor');
  t.equal((await api.get('/v1/segments/seg_nope')).body.error.code, 'resource_not_found');
  t.equal((await api.get(`/v1/segments/${vip.body.id}`)).body.name, 'vip');

  const stale = await api.patch(`/v1/segments/${vip.body.id}`, { description: 'x' }, { 'if-match': '"7"' });
  t.equal(stale.body.error.code, 'stale_write');
  const edited = await api.patch(`/v1/segments/${vip.body.id}`, { description: 'Best' }, { 'if-match': '"1"' });
  t.match(edited.body, { description: 'Best', version: 2 });
  t.equal((await api.patch(`/v1/segments/${vip.body.id}`, {})).body.error.code, 'validation_failed');
  t.equal((await api.patch(`/v1/segments/${vip.body.id}`, { name: 'whales' })).body.error.code, 'already_exists');
  t.match((await api.patch(`/v1/segments/${vip.body.id}`, { condition: { path: 'customer.attributes.a', op: 'eq', value: 1 } })).body.error, {
    code: 'validation_failed',
    param: 'condition',
  });
  t.equal((await api.patch('/v1/segments/seg_nope', { description: 'x' })).body.error.code, 'resource_not_found');

  // Members: static only, by service id or external id, idempotent both ways.
  await api.post('/v1/events', { id: 'e0', name: 'app.opened', customer_id: 'ann', occurred_at: now() });
  const added = await api.post(`/v1/segments/${vip.body.id}/members`, { customer_id: 'ann' }, idem());
  t.equal(added.status, 201);
  t.match(added.body, { segment_id: vip.body.id, customer_id: /^cust_/, added_at: String });
  t.equal((await api.post('/v1/test_clock/advance', { seconds: 60 })).status, 200);
  const again = await api.post(`/v1/segments/${vip.body.id}/members`, { customer_id: added.body.customer_id }, idem());
  t.equal(again.status, 200, 'already a member');
  t.same(again.body, added.body, 'the stored membership, its original added_at included');
  for (const ghost of ['ghost', 'cust_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ', 'cust_07B01M8ESVY1NC4D4HM6HZ0HYEXXX']) {
    const r = await api.post(`/v1/segments/${vip.body.id}/members`, { customer_id: ghost }, idem());
    t.match(r, { status: 404, body: { error: { code: 'resource_not_found', param: 'customer_id' } } }, `an unknown customer_id (${ghost}) is named`);
  }
  t.equal((await api.post(`/v1/segments/${vip.body.id}/members`, { customer_id: 'ann' })).body.error.code, 'idempotency_key_required');
  t.equal((await api.post(`/v1/segments/${whales.body.id}/members`, { customer_id: 'ann' }, idem())).body.error.code, 'invalid_state');
  t.equal((await api.post('/v1/segments/seg_nope/members', { customer_id: 'ann' }, idem())).body.error.code, 'resource_not_found');
  const members = await api.get(`/v1/segments/${vip.body.id}/members`);
  t.same(members.body.data.map((m: { customer_id: string }) => m.customer_id), [added.body.customer_id]);
  t.equal((await api.get(`/v1/segments/${whales.body.id}/members`)).body.error.code, 'invalid_state');
  t.match(await api.delete(`/v1/segments/${vip.body.id}/members/ghost`), { status: 404, body: { error: { code: 'resource_not_found', param: 'customer_id' } } });
  t.equal((await api.delete(`/v1/segments/${vip.body.id}/members/ann`)).status, 204);
  t.equal((await api.delete(`/v1/segments/${vip.body.id}/members/ann`)).status, 204, 'removing a non-member is a no-op');
  t.same((await api.get(`/v1/segments/${vip.body.id}/members`)).body.data, []);

  t.equal((await api.delete('/v1/segments/seg_nope')).body.error.code, 'resource_not_found');
  t.equal((await api.delete(`/v1/segments/${whales.body.id}`)).status, 204);
  t.equal((await api.get(`/v1/segments/${whales.body.id}`)).body.error.code, 'resource_not_found');
});

t.test('rules on customer.segments: static members and dynamic matches; used segments cannot be renamed or deleted', async (t) => {
  const { anon } = await startForTest(t);
  const { server: api } = await signUp(anon);
  await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem());
  const vip = await api.post('/v1/segments', { name: 'vip', kind: 'static' }, idem());
  const rule = await api.post('/v1/rules', { name: 'vip bonus', definition: vipRule }, idem());
  t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);

  let n = 0;
  const order = (customer: string) =>
    api.post('/v1/events', { id: `o-${++n}`, name: 'order.completed', customer_id: customer, occurred_at: now(), mode: 'sync' });

  t.match((await order('ann')).body.effects, [{ type: 'rule.skipped', reason: 'segment_not_matched' }], 'not a member yet');
  await api.post(`/v1/segments/${vip.body.id}/members`, { customer_id: 'ann' }, idem());
  t.match((await order('ann')).body.effects, [{ type: 'rule.fired' }, { type: 'points.awarded', amount: 5 }], 'a static member');
  t.match((await order('bob')).body.effects, [{ type: 'rule.skipped', reason: 'segment_not_matched' }]);
  const ann = (await api.get('/v1/customers?external_id=ann')).body.data[0].id;
  t.same((await api.get(`/v1/customers/${ann}/state`)).body.segments, ['vip']);
  t.same((await api.get(`/v1/customers/${ann}/export`)).body.segments, ['vip'], 'the export lists the segments too');

  // Renaming or deleting a segment a rule names: resource_in_use, naming the rule.
  const rename = await api.patch(`/v1/segments/${vip.body.id}`, { name: 'gold' });
  t.match(rename.body.error, { code: 'resource_in_use', param: 'name', details: { rules: [rule.body.id] } });
  t.match(rename.body.error.message, rule.body.id);
  t.equal((await api.delete(`/v1/segments/${vip.body.id}`)).body.error.code, 'resource_in_use');
  t.equal((await api.patch(`/v1/segments/${vip.body.id}`, { description: 'renaming is what is guarded' })).status, 200);

  // Archived rules no longer hold the segment.
  await api.post(`/v1/rules/${rule.body.id}/archive`, {});
  t.equal((await api.patch(`/v1/segments/${vip.body.id}`, { name: 'gold' })).status, 200);
  t.equal((await api.delete(`/v1/segments/${vip.body.id}`)).status, 204);

  // Dynamic: "vip" now means attribute tier = gold; members are whoever matches at event time.
  const dyn = await api.post(
    '/v1/segments',
    { name: 'vip', kind: 'dynamic', condition: { path: 'customer.attributes.tier', op: 'eq', value: 'gold' } },
    idem(),
  );
  t.equal(dyn.status, 201);
  const rule2 = await api.post('/v1/rules', { name: 'vip bonus 2', definition: vipRule }, idem());
  await api.post(`/v1/rules/${rule2.body.id}/publish`, {});
  t.match((await order('cat')).body.effects, [{ type: 'rule.skipped', reason: 'segment_not_matched' }]);
  const cat = (await api.get('/v1/customers?external_id=cat')).body.data[0].id;
  t.equal((await api.patch(`/v1/customers/${cat}`, { attributes: { tier: 'gold' } })).status, 200);
  t.match((await order('cat')).body.effects, [{ type: 'rule.fired' }, { type: 'points.awarded', amount: 5 }], 'attributes match');
  t.same((await api.get(`/v1/customers/${cat}/state`)).body.segments, ['vip']);
  // A published rule's active definition holds the segment, and so does a draft that was never published.
  t.equal((await api.delete(`/v1/segments/${dyn.body.id}`)).body.error.code, 'resource_in_use');
  const beta = await api.post('/v1/segments', { name: 'beta', kind: 'static' }, idem());
  const draft = await api.post(
    '/v1/rules',
    { name: 'draft', definition: { ...vipRule, conditions: { any: [{ not: { path: 'customer.segments', op: 'contains', value: 'beta' } }] } } },
    idem(),
  );
  t.match((await api.delete(`/v1/segments/${beta.body.id}`)).body.error, { code: 'resource_in_use', details: { rules: [draft.body.id], campaigns: [] } });
});

t.test("a segment named in a challenge's qualifying conditions cannot be renamed or deleted until the challenge ends", async (t) => {
  const { anon } = await startForTest(t);
  const { server: api } = await signUp(anon);
  const club = (await api.post('/v1/segments', { name: 'club', kind: 'static' }, idem())).body;
  const solo = (await api.post('/v1/segments', { name: 'solo', kind: 'static' }, idem())).body;
  const challenge = await api.post(
    '/v1/challenges',
    {
      name: 'Club runs',
      qualifying: {
        event: 'run.finished',
        // 'solo' appears only as an event property value here: it does not name the segment.
        conditions: { all: [{ any: [{ path: 'customer.segments', op: 'contains', value: 'club' }] }, { path: 'event.properties.mode', op: 'eq', value: 'solo' }] },
      },
      target: 3,
    },
    idem(),
  );
  t.equal(challenge.status, 201);
  const id = challenge.body.id as string;

  const del = await api.delete(`/v1/segments/${club.id}`);
  t.equal(del.status, 409);
  t.match(del.body.error, { code: 'resource_in_use', param: 'id', details: { rules: [], campaigns: [], challenges: [id] } });
  t.match(del.body.error.message, `challenge ${id}`);
  const rename = await api.patch(`/v1/segments/${club.id}`, { name: 'club2' });
  t.match(rename.body.error, { code: 'resource_in_use', param: 'name', details: { challenges: [id] } });
  t.equal((await api.get(`/v1/segments/${club.id}`)).body.name, 'club', 'still there, same name');
  t.equal((await api.delete(`/v1/segments/${solo.id}`)).status, 204, 'a value that is not a segment test holds nothing');

  // An ended challenge is final and never evaluates again: it no longer holds the segment.
  t.equal((await api.patch(`/v1/challenges/${id}`, { status: 'ended' })).status, 200);
  t.equal((await api.patch(`/v1/segments/${club.id}`, { name: 'club2' })).status, 200);
  t.equal((await api.delete(`/v1/segments/${club.id}`)).status, 204);
});

t.test('segment routes: remaining error codes (scopes, bodies, cursors, dynamic members, reused keys)', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  const reader = await tenant.admin.post('/v1/api_keys', { kind: 'secret', name: 'reader', scopes: ['programs:read', 'customers:read'] }, idem());
  const ro = anon.with({ authorization: `Bearer ${reader.body.token}` });
  t.equal((await ro.post('/v1/segments', { name: 'vip', kind: 'static' }, idem())).body.error.code, 'insufficient_scope');
  const key = idem();
  t.equal((await api.post('/v1/segments', { name: 'vip', kind: 'static' }, key)).status, 201);
  const replay = await api.post('/v1/segments', { name: 'vip', kind: 'static' }, key);
  t.equal(replay.status, 201, 'the same key and body: the stored answer');
  t.equal((await api.post('/v1/segments', { name: 'other', kind: 'static' }, key)).body.error.code, 'idempotency_key_reused');
  const vip = (await api.get('/v1/segments')).body.data[0];
  t.equal((await ro.post(`/v1/segments/${vip.id}/members`, { customer_id: 'ann' }, idem())).body.error.code, 'insufficient_scope');
  t.equal((await ro.patch(`/v1/segments/${vip.id}`, { name: 'x' })).body.error.code, 'insufficient_scope');
  t.equal((await ro.delete(`/v1/segments/${vip.id}`)).body.error.code, 'insufficient_scope');
  t.equal((await ro.get(`/v1/segments/${vip.id}`)).status, 200, 'reading needs programs:read only');
  t.match((await api.post(`/v1/segments/${vip.id}/members`, {}, idem())).body.error, { code: 'validation_failed', param: 'customer_id' });
  t.equal((await api.get('/v1/segments?limit=500')).body.error.code, 'validation_failed');
  t.equal((await api.get(`/v1/segments/${vip.id}/members?cursor=@@`)).body.error.code, 'invalid_cursor');
  t.equal((await api.get('/v1/segments/seg_nope/members')).body.error.code, 'resource_not_found');
  t.equal((await api.delete('/v1/segments/seg_nope/members/ann')).body.error.code, 'resource_not_found');
  const dyn = await api.post('/v1/segments', { name: 'dyn', kind: 'dynamic', condition: { path: 'customer.attributes.a', op: 'eq', value: 1 } }, idem());
  t.equal((await api.delete(`/v1/segments/${dyn.body.id}/members/ann`)).body.error.code, 'invalid_state');
  const badPatch = await api.patch(`/v1/segments/${dyn.body.id}`, { condition: { path: 'event.name', op: 'eq', value: 'x' } });
  t.match(badPatch.body.error, { code: 'validation_failed', param: 'condition.path' });
  t.match((await api.patch(`/v1/segments/${dyn.body.id}`, { condition: { path: 'customer.attributes.b', op: 'exists' } })).body, { version: 2, condition: { path: 'customer.attributes.b' } });
});
