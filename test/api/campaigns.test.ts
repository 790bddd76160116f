// Campaigns end to end: routes and their errors, the status machine, rules joining through
// campaign_id, gating by status, schedule and audience, and the budget cap (never exceeded); simulate
// meets the budget as an event does, and a firing the budget cannot cover counts against no limit.
import t from 'tap';
import { idem, signUp, startForTest } from '../helpers/service.js';

const now = () => new Date(Date.now() - 1000).toISOString();
const inMs = (ms: number) => new Date(Date.now() + ms).toISOString();

const awardRule = (amount: number) => ({
  schema: 'service.rule/v2',
  trigger: { kind: 'customer_event', event: 'order.completed' },
  actions: [{ type: 'points.award', currency: 'coins', amount }],
});

t.test('campaign routes, transitions and errors', async (t) => {
  const { anon } = await startForTest(t);
  const { server: api } = await signUp(anon);
  await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem());
  await api.post('/v1/segments', { name: 'vip', kind: 'static' }, idem());

  t.equal((await api.post('/v1/campaigns', { name: 'Spring' })).body.error.code, 'idempotency_key_required');
  t.match((await api.post('/v1/campaigns', { name: 'x', audience_segment: 'nope' }, idem())).body.error, {
    code: 'resource_not_found',
    param: 'audience_segment',
  });
  t.match((await api.post('/v1/campaigns', { name: 'x', budgets: [{ currency: 'gems', amount: 5 }] }, idem())).body.error, {
    code: 'resource_not_found',
    param: 'budgets[0].currency',
  });
  t.match((await api.post('/v1/campaigns', { name: 'x', budgets: [{ currency: 'coins', amount: -1 }] }, idem())).body.error, {
    code: 'validation_failed',
  });
  t.match(
    (await api.post('/v1/campaigns', { name: 'x', budgets: [{ currency: 'coins', amount: 1 }, { currency: 'coins', amount: 2 }] }, idem())).body.error,
    { code: 'validation_failed', param: 'budgets[1].currency' },
  );
  t.match((await api.post('/v1/campaigns', { name: 'x', starts_at: inMs(10_000), ends_at: inMs(5_000) }, idem())).body.error, {
    code: 'validation_failed',
    param: 'ends_at',
  });

  const c = await api.post(
    '/v1/campaigns',
    { name: 'Spring', description: 'Spring sale', audience_segment: 'vip', budgets: [{ currency: 'coins', amount: 1000 }] },
    idem(),
  );
  t.equal(c.status, 201);
  t.match(c.body, {
    id: /^cmp_/,
    status: 'draft',
    audience_segment: 'vip',
    starts_at: null,
    ends_at: null,
    budgets: [{ currency: 'coins', amount: 1000, spent: 0, reserved: 0 }],
    spent: [],
    version: 1,
  });
  const id = c.body.id as string;
  t.equal((await api.get(`/v1/campaigns/${id}`)).headers.get('etag'), '"1"');
  t.equal((await api.get('/v1/campaigns/cmp_nope')).body.error.code, 'resource_not_found');
  const other = await api.post('/v1/campaigns', { name: 'Other' }, idem());
  const p1 = await api.get('/v1/campaigns?limit=1');
  t.equal(p1.body.has_more, true);
  t.equal((await api.get(`/v1/campaigns?limit=1&cursor=${p1.body.next_cursor}`)).body.data[0].id, other.body.id);
  t.equal((await api.get('/v1/campaigns?cursor=@@')).body.error.code, 'invalid_cursor');

  t.equal((await api.patch(`/v1/campaigns/${id}`, { name: 'x' }, { 'if-match': '"9"' })).body.error.code, 'stale_write');
  t.equal((await api.patch(`/v1/campaigns/${id}`, {})).body.error.code, 'validation_failed');
  t.equal((await api.patch('/v1/campaigns/cmp_nope', { name: 'x' })).body.error.code, 'resource_not_found');
  t.equal((await api.patch(`/v1/campaigns/${id}`, { audience_segment: 'nope' })).body.error.code, 'resource_not_found');
  const edited = await api.patch(`/v1/campaigns/${id}`, { name: 'Spring sale', ends_at: inMs(3_600_000) }, { 'if-match': '"1"' });
  t.match(edited.body, { name: 'Spring sale', version: 2, ends_at: /Z$/ });

  // Transitions: draft -> active -> paused -> active -> ended (final).
  t.equal((await api.post(`/v1/campaigns/${id}/pause`, {})).body.error.code, 'invalid_state');
  t.equal((await api.post(`/v1/campaigns/${id}/activate`, {})).body.status, 'active');
  t.equal((await api.post(`/v1/campaigns/${id}/activate`, {})).body.error.code, 'invalid_state');
  t.equal((await api.delete(`/v1/campaigns/${id}`)).body.error.code, 'invalid_state', 'not while active');
  t.equal((await api.post(`/v1/campaigns/${id}/pause`, {})).body.status, 'paused');
  t.equal((await api.post(`/v1/campaigns/${id}/activate`, {})).body.status, 'active');
  t.equal((await api.get('/v1/campaigns?status=active')).body.data.length, 1);
  t.equal((await api.post('/v1/campaigns/cmp_nope/activate', {})).body.error.code, 'resource_not_found');

  // The audience segment is in use: it cannot be renamed or deleted.
  const vip = (await api.get('/v1/segments')).body.data[0];
  t.match((await api.patch(`/v1/segments/${vip.id}`, { name: 'gold' })).body.error, { code: 'resource_in_use', details: { campaigns: [id] } });

  // Rules join through campaign_id, which must name a campaign of the environment.
  t.match((await api.post('/v1/rules', { name: 'r', definition: awardRule(1), campaign_id: 'cmp_nope' }, idem())).body.error, {
    code: 'resource_not_found',
    param: 'campaign_id',
  });
  const rule = await api.post('/v1/rules', { name: 'r', definition: awardRule(1), campaign_id: id }, idem());
  t.equal(rule.body.campaign_id, id);
  const loose = await api.post('/v1/rules', { name: 'loose', definition: awardRule(1) }, idem());
  t.equal((await api.patch(`/v1/rules/${loose.body.id}`, { campaign_id: 'cmp_nope' })).body.error.code, 'resource_not_found');
  t.same(
    (await api.get(`/v1/rules?campaign_id=${id}`)).body.data.map((r: { id: string }) => r.id),
    [rule.body.id],
  );

  t.equal((await api.post(`/v1/campaigns/${id}/end`, {})).body.status, 'ended');
  t.equal((await api.post(`/v1/campaigns/${id}/activate`, {})).body.error.code, 'invalid_state', 'ended is final');
  t.equal((await api.patch(`/v1/campaigns/${id}`, { name: 'again' })).body.error.code, 'invalid_state');
  const inUse = await api.delete(`/v1/campaigns/${id}`);
  t.match(inUse.body.error, { code: 'resource_in_use', details: { rules: [rule.body.id] } });
  await api.post(`/v1/rules/${rule.body.id}/archive`, {});
  t.equal((await api.delete(`/v1/campaigns/${id}`)).status, 204);
  t.equal((await api.get(`/v1/campaigns/${id}`)).body.error.code, 'resource_not_found');
  t.equal((await api.delete('/v1/campaigns/cmp_nope')).body.error.code, 'resource_not_found');
});

t.test("a campaign's rules fire only while it is active, inside its schedule, for its audience", async (t) => {
  const { anon } = await startForTest(t);
  const { server: api } = await signUp(anon);
  await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem());
  const vip = await api.post('/v1/segments', { name: 'vip', kind: 'static' }, idem());
  const c = await api.post('/v1/campaigns', { name: 'Spring', audience_segment: 'vip' }, idem());
  const rule = await api.post('/v1/rules', { name: 'r', definition: awardRule(3), campaign_id: c.body.id }, idem());
  await api.post(`/v1/rules/${rule.body.id}/publish`, {});
  let n = 0;
  const order = (who: string) => api.post('/v1/events', { id: `o-${++n}`, name: 'order.completed', customer_id: who, occurred_at: now(), mode: 'sync' });
  // Simulate says what an event would meet: the campaign's state and audience as well.
  const simulated = async (who: string) =>
    (await api.post(`/v1/rules/${rule.body.id}/simulate`, { event: { name: 'order.completed', properties: {} }, customer_id: who })).body;

  t.match((await order('ann')).body.effects, [{ type: 'rule.skipped', reason: 'campaign_inactive' }], 'draft');
  // Simulate traces the definition (ann is not in the audience yet) and says the campaign is not running.
  const draft = await simulated('ann');
  t.match(
    draft,
    { plan: [], trace: { live: false, not_live: [{ reason: 'campaign_inactive', detail: /draft/ }], outcome: { fired: false, reason: 'segment_not_matched' } } },
    'simulate: draft',
  );
  t.match(draft.trace.steps[1], { check: 'campaign', expected: c.body.id, pass: false }, 'the campaign step follows the trigger');
  await api.post(`/v1/campaigns/${c.body.id}/activate`, {});
  t.match((await order('ann')).body.effects, [{ type: 'rule.skipped', reason: 'segment_not_matched' }], 'not in the audience');
  t.match(
    await simulated('ann'),
    { plan: [], trace: { outcome: { fired: false, reason: 'segment_not_matched' }, steps: [{}, { check: 'campaign', pass: true }] } },
    'simulate: not in the audience',
  );
  await api.post(`/v1/segments/${vip.body.id}/members`, { customer_id: 'ann' }, idem());
  t.match(
    (await order('ann')).body.effects,
    [{ type: 'rule.fired' }, { type: 'points.awarded', amount: 3, campaign_id: c.body.id }],
    'active, in the audience',
  );
  t.match(await simulated('ann'), { plan: [{ type: 'points.award', amount: 3 }], trace: { live: true, outcome: { fired: true } } }, 'simulate: in the audience');
  await api.post(`/v1/campaigns/${c.body.id}/pause`, {});
  t.match((await order('ann')).body.effects, [{ type: 'rule.skipped', reason: 'campaign_inactive' }], 'paused');
  t.match(
    await simulated('ann'),
    { plan: [{ type: 'points.award', amount: 3 }], trace: { live: false, not_live: [{ reason: 'campaign_inactive', detail: /paused/ }], outcome: { fired: true } } },
    'simulate: paused',
  );
  await api.post(`/v1/campaigns/${c.body.id}/activate`, {});
  await api.patch(`/v1/campaigns/${c.body.id}`, { starts_at: inMs(3_600_000) });
  t.match((await order('ann')).body.effects, [{ type: 'rule.skipped', reason: 'campaign_inactive', detail: /not started/ }], 'before the schedule');
  await api.patch(`/v1/campaigns/${c.body.id}`, { starts_at: inMs(-7_200_000), ends_at: inMs(-3_600_000) });
  t.match((await order('ann')).body.effects, [{ type: 'rule.skipped', reason: 'campaign_inactive', detail: /over/ }], 'after the schedule');
  await api.patch(`/v1/campaigns/${c.body.id}`, { ends_at: null, audience_segment: null });
  t.match((await order('bob')).body.effects, [{ type: 'rule.fired' }, { type: 'points.awarded' }], 'no audience: everyone');
  const got = await api.get(`/v1/campaigns/${c.body.id}`);
  t.same(got.body.spent, [{ currency: 'coins', amount: 6 }], 'spent is what was awarded');
});

t.test('the budget cap is never exceeded, with many concurrent events', async (t) => {
  const { anon } = await startForTest(t);
  const { server: api } = await signUp(anon);
  await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem());
  const c = await api.post('/v1/campaigns', { name: 'Capped', budgets: [{ currency: 'coins', amount: 100 }] }, idem());
  await api.post(`/v1/campaigns/${c.body.id}/activate`, {});
  const rule = await api.post('/v1/rules', { name: 'r', definition: awardRule(7), campaign_id: c.body.id }, idem());
  await api.post(`/v1/rules/${rule.body.id}/publish`, {});

  // 40 customers x 3 events, in batches sent concurrently: 120 x 7 = 840 wanted, 100 allowed.
  let awarded = 0;
  let exhausted = 0;
  const batches = [];
  for (let b = 0; b < 6; b++) {
    const events = [];
    for (let i = 0; i < 20; i++) {
      events.push({ id: `e-${b}-${i}`, name: 'order.completed', customer_id: `c-${(b * 20 + i) % 40}`, occurred_at: now() });
    }
    batches.push(api.post('/v1/events', { events, mode: 'sync' }));
  }
  for (const r of await Promise.all(batches)) {
    t.equal(r.status, 207);
    for (const item of r.body.data) {
      for (const e of item.effects ?? []) {
        if (e.type === 'points.awarded') awarded += e.amount;
        // An event whose only award does not fit: rule.skipped budget_exhausted (the firing is not counted).
        if ((e.type === 'rule.skipped' || e.type === 'action.skipped') && e.reason === 'budget_exhausted') exhausted++;
      }
    }
  }
  t.ok(awarded <= 100, `awarded ${awarded} <= 100`);
  t.ok(awarded >= 70, `the budget is used (awarded ${awarded})`);
  t.ok(exhausted > 0, 'awards beyond the budget are skipped with budget_exhausted');
  const got = await api.get(`/v1/campaigns/${c.body.id}`);
  t.equal(got.body.budgets[0].spent, awarded, 'spent = what the events awarded');
  t.ok(got.body.budgets[0].reserved <= 100);

  // Lowering the budget below what is reserved is refused; raising it lets awards continue.
  const low = await api.patch(`/v1/campaigns/${c.body.id}`, { budgets: [{ currency: 'coins', amount: 1 }] });
  t.match(low.body.error, { code: 'invalid_state', param: 'budgets[0].amount' });
  t.equal((await api.patch(`/v1/campaigns/${c.body.id}`, { budgets: [{ currency: 'coins', amount: 200 }] })).status, 200);
  const more = await api.post('/v1/events', { id: 'more-1', name: 'order.completed', customer_id: 'c-1', occurred_at: now(), mode: 'sync' });
  t.match(more.body.effects, [{ type: 'rule.fired' }, { type: 'points.awarded', amount: 7 }]);
});

t.test('a campaign past ends_at is ended by the scheduler (budget given back); activating one past ends_at is refused', async (t) => {
  const { anon } = await startForTest(t);
  const { server: api } = await signUp(anon);
  await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem());
  const clockMs = Date.parse((await api.get('/v1/test_clock')).body.now);
  const at = (ms: number) => new Date(clockMs + ms).toISOString();
  const hour = 3_600_000;

  // Past ends_at by the environment's clock: activation is refused, the draft stays a draft.
  const past = await api.post('/v1/campaigns', { name: 'Past', ends_at: at(-hour) }, idem());
  const refused = await api.post(`/v1/campaigns/${past.body.id}/activate`, {});
  t.equal(refused.status, 409);
  t.match(refused.body.error, { code: 'invalid_state', param: 'ends_at', message: /ends_at has passed/, details: { status: 'draft', ends_at: past.body.ends_at } });
  t.match((await api.get(`/v1/campaigns/${past.body.id}`)).body, { status: 'draft', version: 1 });
  // Moved later, it activates.
  t.equal((await api.patch(`/v1/campaigns/${past.body.id}`, { ends_at: at(hour) })).status, 200);
  t.equal((await api.post(`/v1/campaigns/${past.body.id}/activate`, {})).body.status, 'active');

  // A running campaign with a budget: an award leases a chunk (reserved above spent).
  const c = await api.post('/v1/campaigns', { name: 'Weekend', ends_at: at(2 * hour), budgets: [{ currency: 'coins', amount: 1000 }] }, idem());
  t.equal((await api.post(`/v1/campaigns/${c.body.id}/activate`, {})).status, 200);
  const paused = await api.post('/v1/campaigns', { name: 'Paused', ends_at: at(2 * hour) }, idem());
  await api.post(`/v1/campaigns/${paused.body.id}/activate`, {});
  t.equal((await api.post(`/v1/campaigns/${paused.body.id}/pause`, {})).body.status, 'paused');
  const rule = await api.post('/v1/rules', { name: 'r', definition: awardRule(5), campaign_id: c.body.id }, idem());
  await api.post(`/v1/rules/${rule.body.id}/publish`, {});
  const sent = await api.post('/v1/events', { id: 'w-1', name: 'order.completed', customer_id: 'ann', occurred_at: new Date(clockMs).toISOString(), mode: 'sync' });
  t.match(sent.body.effects, [{ type: 'rule.fired' }, { type: 'points.awarded', amount: 5 }]);
  const leased = (await api.get(`/v1/campaigns/${c.body.id}`)).body.budgets[0];
  t.ok(leased.reserved > leased.spent, `a chunk is leased (reserved ${leased.reserved}, spent ${leased.spent})`);

  const adv = await api.post('/v1/test_clock/advance', { seconds: 3 * 3600 });
  t.match(adv.body, { campaigns_ended: 3 }, 'the two active campaigns and the paused one');
  for (const id of [past.body.id, c.body.id, paused.body.id]) t.equal((await api.get(`/v1/campaigns/${id}`)).body.status, 'ended', id);
  t.same((await api.get('/v1/campaigns?status=active')).body.data, [], 'the status filter no longer lists them');
  // The node's unused chunk goes back (asynchronously, as on every campaign change).
  let budget = leased;
  for (const until = Date.now() + 10_000; budget.reserved !== budget.spent && Date.now() < until; ) {
    await new Promise((r) => setTimeout(r, 50));
    budget = (await api.get(`/v1/campaigns/${c.body.id}`)).body.budgets[0];
  }
  t.match(budget, { spent: 5, reserved: 5 }, 'the leased budget is released');
  t.equal((await api.post(`/v1/campaigns/${c.body.id}/activate`, {})).body.error.code, 'invalid_state', 'ended is final');
  const again = await api.post('/v1/test_clock/advance', { seconds: 60 });
  t.match(again.body, { campaigns_ended: 0 }, 'an ended campaign is not ended twice');
});

t.test('campaign routes: remaining error codes (scopes, filters, If-Match on transitions, reused keys)', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  const reader = await tenant.admin.post('/v1/api_keys', { kind: 'secret', name: 'reader', scopes: ['programs:read'] }, idem());
  const ro = anon.with({ authorization: `Bearer ${reader.body.token}` });
  t.equal((await ro.post('/v1/campaigns', { name: 'x' }, idem())).body.error.code, 'insufficient_scope');
  const key = idem();
  const c = await api.post('/v1/campaigns', { name: 'x' }, key);
  t.equal((await api.post('/v1/campaigns', { name: 'y' }, key)).body.error.code, 'idempotency_key_reused');
  t.equal((await ro.post(`/v1/campaigns/${c.body.id}/activate`, {})).body.error.code, 'insufficient_scope');
  t.equal((await ro.delete(`/v1/campaigns/${c.body.id}`)).body.error.code, 'insufficient_scope');
  t.equal((await ro.get(`/v1/campaigns/${c.body.id}`)).status, 200);
  t.equal((await api.get('/v1/campaigns?status=running')).body.error.code, 'validation_failed');
  t.equal((await api.post(`/v1/campaigns/${c.body.id}/activate`, {}, { 'if-match': '"5"' })).body.error.code, 'stale_write');
  t.equal((await api.post(`/v1/campaigns/${c.body.id}/activate`, { now: true })).body.error.code, 'validation_failed');
  t.equal((await api.post(`/v1/campaigns/${c.body.id}/end`, {}, { 'if-match': '"1"' })).body.status, 'ended');
  t.equal((await api.post(`/v1/campaigns/${c.body.id}/pause`, {})).body.error.code, 'invalid_state');
  t.equal((await api.post('/v1/campaigns/cmp_nope/pause', {})).body.error.code, 'resource_not_found');
  t.equal((await api.post('/v1/campaigns/cmp_nope/end', {})).body.error.code, 'resource_not_found');
  t.equal((await api.patch(`/v1/campaigns/${c.body.id}`, { starts_at: 'tomorrow' })).body.error.code, 'validation_failed');
});

t.test('a firing the budget cannot cover counts against no limit: per customer, and a shared slot is given back', async (t) => {
  const { anon } = await startForTest(t);
  const { server: api } = await signUp(anon);
  await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem());
  const c = await api.post('/v1/campaigns', { name: 'Small', budgets: [{ currency: 'coins', amount: 150 }] }, idem());
  await api.post(`/v1/campaigns/${c.body.id}/activate`, {});
  const rule = await api.post(
    '/v1/rules',
    {
      name: 'twice',
      definition: {
        schema: 'service.rule/v2',
        trigger: { kind: 'customer_event', event: 'promo.hit' },
        limits: [{ id: 'twice', scope: ['customer'], max: 2 }],
        actions: [{ type: 'points.award', currency: 'coins', amount: 100 }],
      },
      campaign_id: c.body.id,
    },
    idem(),
  );
  await api.post(`/v1/rules/${rule.body.id}/publish`, {});
  let n = 0;
  const hit = (who: string, properties: Record<string, unknown> = {}, name = 'promo.hit') =>
    api.post('/v1/events', { id: `ph-${++n}`, name, customer_id: who, occurred_at: now(), properties, mode: 'sync' });

  t.match((await hit('p2')).body.effects, [{ type: 'rule.fired' }, { type: 'points.awarded', amount: 100 }]);
  // 50 left: the award of 100 does not fit, nothing is applied, and the answer says so.
  const skipped = await hit('p2');
  t.same(skipped.body.effects.map((e: { type: string; reason?: string }) => [e.type, e.reason ?? null]), [['rule.skipped', 'budget_exhausted']]);
  t.match(skipped.body.effects[0], { rule_id: rule.body.id, detail: /cannot cover the rule's awards \(100 coins\).*not counted against the rule's limits/ });
  // Topped up: the customer's second firing was not used up by the skipped one.
  const got = await api.get(`/v1/campaigns/${c.body.id}`);
  t.equal((await api.patch(`/v1/campaigns/${c.body.id}`, { budgets: [{ currency: 'coins', amount: 1000 }] }, { 'if-match': got.headers.get('etag')! })).status, 200);
  t.match((await hit('p2')).body.effects, [{ type: 'rule.fired' }, { type: 'points.awarded', amount: 100 }], 'the second firing is awarded');
  t.match((await hit('p2')).body.effects, [{ type: 'rule.skipped', reason: 'limit_reached', detail: /fired 2 of 2/ }]);

  // A shared limit (scope of event paths only): a firing skipped for budget gives its slot back.
  const zero = await api.post('/v1/campaigns', { name: 'Zero', budgets: [{ currency: 'coins', amount: 0 }] }, idem());
  await api.post(`/v1/campaigns/${zero.body.id}/activate`, {});
  const shared = await api.post(
    '/v1/rules',
    {
      name: 'one per code',
      definition: {
        schema: 'service.rule/v2',
        trigger: { kind: 'customer_event', event: 'cz.hit' },
        limits: [{ id: 'one_per_code', scope: ['event.properties.code'], max: 1 }],
        actions: [{ type: 'points.award', currency: 'coins', amount: 10 }],
      },
      campaign_id: zero.body.id,
    },
    idem(),
  );
  await api.post(`/v1/rules/${shared.body.id}/publish`, {});
  t.match((await hit('z1', { code: 'A' }, 'cz.hit')).body.effects, [{ type: 'rule.skipped', reason: 'budget_exhausted' }]);
  const zeroNow = await api.get(`/v1/campaigns/${zero.body.id}`);
  t.equal((await api.patch(`/v1/campaigns/${zero.body.id}`, { budgets: [{ currency: 'coins', amount: 100 }] }, { 'if-match': zeroNow.headers.get('etag')! })).status, 200);
  // The slot is freed after the reply (asynchronously, on another connection than the next
  // event's): wait until simulate, which reserves nothing, reads it free.
  const takenA = async () =>
    (await api.post(`/v1/rules/${shared.body.id}/simulate`, { event: { name: 'cz.hit', properties: { code: 'A' } }, customer_id: 'z2' })).body.trace.steps.find(
      (s: { check: string }) => s.check === 'limit',
    )?.actual;
  for (const until = Date.now() + 10_000; (await takenA()) !== 0 && Date.now() < until; ) await new Promise((r) => setTimeout(r, 50));
  t.equal(await takenA(), 0, 'the skipped firing gave its slot back');
  t.match((await hit('z2', { code: 'A' }, 'cz.hit')).body.effects, [{ type: 'rule.fired' }, { type: 'points.awarded', amount: 10 }], 'code A is still free for the next customer');
  t.match((await hit('z3', { code: 'A' }, 'cz.hit')).body.effects, [{ type: 'rule.skipped', reason: 'limit_reached' }]);
});

t.test('simulate meets the budget as the event does: a budget step per capped award, what does not fit leaves the plan', async (t) => {
  const { anon } = await startForTest(t);
  const { server: api } = await signUp(anon);
  await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem());
  await api.post('/v1/currencies', { key: 'gems', name: 'Gems' }, idem());
  const c = await api.post('/v1/campaigns', { name: 'Small', budgets: [{ currency: 'coins', amount: 150 }] }, idem());
  await api.post(`/v1/campaigns/${c.body.id}/activate`, {});
  const publish = async (name: string, actions: unknown[]) => {
    const definition = { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: 'promo.hit' }, actions };
    const rule = await api.post('/v1/rules', { name, definition, campaign_id: c.body.id }, idem());
    t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);
    return rule.body.id as string;
  };
  const award = await publish('award 100', [{ type: 'points.award', currency: 'coins', amount: 100 }]);
  let n = 0;
  const hit = (who: string) => api.post('/v1/events', { id: `sb-${++n}`, name: 'promo.hit', customer_id: who, occurred_at: now(), mode: 'sync' });
  const simulate = async (ruleId: string, who: string) =>
    (await api.post(`/v1/rules/${ruleId}/simulate`, { event: { name: 'promo.hit', properties: {} }, customer_id: who })).body;

  // 150 left: the award of 100 fits, in simulate and in the event.
  const fits = await simulate(award, 'p1');
  t.same(fits.plan, [{ type: 'points.award', currency: 'coins', amount: 100 }]);
  t.match(fits.trace.steps.at(-1), { check: 'budget', at: 'actions[0]', op: 'gte', expected: 100, actual: 150, found: true, pass: true });
  t.match((await hit('p1')).body.effects, [{ type: 'rule.fired' }, { type: 'points.awarded', amount: 100 }]);

  // 50 left: simulate plans nothing and says why, as the event then reports it.
  const short = await simulate(award, 'p1');
  t.same(short.plan, []);
  t.match(short.trace.outcome, { fired: false, reason: 'budget_exhausted', param: 'actions[0]', detail: /cannot cover the rule's awards \(100 coins\)/ });
  t.match(short.trace.steps.at(-1), { check: 'budget', expected: 100, actual: 50, pass: false });
  t.match((await hit('p1')).body.effects, [{ type: 'rule.skipped', reason: 'budget_exhausted' }], 'the event agrees');
  // Simulating awarded nothing: spent is what the first event awarded.
  t.equal((await api.get(`/v1/campaigns/${c.body.id}`)).body.budgets[0].spent, 100);

  // A rule with an uncapped award next to a capped one: the capped one that does not fit leaves
  // the plan, the other stays (the event fires and skips that award).
  const mixed = await publish('mixed', [
    { type: 'points.award', currency: 'gems', amount: 5 },
    { type: 'points.award', currency: 'coins', amount: 60 },
  ]);
  const partial = await simulate(mixed, 'p2');
  t.match(partial.trace.outcome, { fired: true });
  t.same(partial.plan, [{ type: 'points.award', currency: 'gems', amount: 5 }]);
  t.same(
    partial.trace.steps.filter((s: { check: string }) => s.check === 'budget').map((s: { at: string; pass: boolean }) => [s.at, s.pass]),
    [['actions[1]', false]],
  );
});

t.test('a cap added to a campaign that has awarded starts from every award made before it, however far the projection lags', async (t) => {
  // Given a slow projector (one cycle in 10 s): the awards below are journaled, not yet projected
  const { anon } = await startForTest(t, { env: { PROJECTOR_CYCLE_MS: '10000' } });
  const { server: api } = await signUp(anon);
  await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem());
  const c = await api.post('/v1/campaigns', { name: 'Lagging' }, idem());
  await api.post(`/v1/campaigns/${c.body.id}/activate`, {});
  const rule = await api.post('/v1/rules', { name: 'r', definition: awardRule(10), campaign_id: c.body.id }, idem());
  await api.post(`/v1/rules/${rule.body.id}/publish`, {});
  const send = (prefix: string) =>
    Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        api.post('/v1/events', { id: `${prefix}-${i}`, name: 'order.completed', customer_id: `${prefix}-c${i}`, occurred_at: now(), mode: 'sync' }),
      ),
    );
  const awardedIn = (rs: Array<{ body: any }>) =>
    rs.flatMap((r) => r.body.effects ?? []).reduce((n: number, e: { type: string; amount?: number }) => n + (e.type === 'points.awarded' ? e.amount! : 0), 0);
  // and 10 awards of 10 coins while the campaign has no cap
  t.equal(awardedIn(await send('before')), 100);

  // When a cap of 100 coins is added at once
  const patched = await api.patch(`/v1/campaigns/${c.body.id}`, { budgets: [{ currency: 'coins', amount: 100 }] });

  // Then it starts from all 100 awarded (none of it was projected when the PATCH came)
  t.equal(patched.status, 200);
  t.match(patched.body.budgets, [{ currency: 'coins', amount: 100, spent: 100, reserved: 100 }]);
  // and no later event awards past the cap
  t.equal(awardedIn(await send('after')), 0, 'the cap is used up');
  const got = (await api.get(`/v1/campaigns/${c.body.id}`)).body.budgets[0];
  t.ok(got.spent <= got.amount, `spent ${got.spent} <= amount ${got.amount}`);
  t.match(got, { spent: 100, reserved: 100 });

  // And a cap removed and added again starts from what was awarded too
  t.equal((await api.patch(`/v1/campaigns/${c.body.id}`, { budgets: [] })).status, 200);
  t.equal(awardedIn(await send('uncapped')), 100);
  const again = await api.patch(`/v1/campaigns/${c.body.id}`, { budgets: [{ currency: 'coins', amount: 150 }] });
  t.match(again.body.budgets, [{ currency: 'coins', amount: 150, spent: 200, reserved: 150 }]);
  t.equal(awardedIn(await send('last')), 0, 'the cap added again is used up');
});
