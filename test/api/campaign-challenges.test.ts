// Challenges inside campaigns, end to end: a challenge with a campaign_id progresses only while its
// campaign is live and only for the campaign's audience; its completion awards count against the
// campaign's budget (never exceeded); completion actions grant items and request rewards too; a
// campaign that a live challenge names cannot be deleted; campaign_id must exist.
import t from 'tap';
import { idem, signUp, startForTest } from '../helpers/service.js';

const now = () => new Date(Date.now() - 1000).toISOString();

t.test('challenges in campaigns', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const vip = await api.post('/v1/segments', { name: 'vip', kind: 'static' }, idem());
  t.equal(vip.status, 201, JSON.stringify(vip.body));
  const campaign = await api.post('/v1/campaigns', { name: 'Spring', audience_segment: 'vip', budgets: [{ currency: 'coins', amount: 150 }] }, idem());
  t.equal(campaign.status, 201, JSON.stringify(campaign.body));
  const mug = await api.post('/v1/rewards', { name: 'Mug', cost: 0, currency: 'coins', availability: 5 }, idem());
  t.equal(mug.status, 201, JSON.stringify(mug.body));

  const missing = await api.post(
    '/v1/challenges',
    { name: 'x', qualifying: { event: 'level.completed' }, target: 1, contribution_key: null, status: 'active', campaign_id: 'cmp_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ' },
    idem(),
  );
  t.equal(missing.status, 404);
  t.match(missing.body.error, { code: 'resource_not_found', param: 'campaign_id' });

  const challenge = await api.post(
    '/v1/challenges',
    {
      name: 'First level of spring',
      qualifying: { event: 'level.completed' },
      target: 1,
      contribution_key: null,
      status: 'active',
      campaign_id: campaign.body.id,
      completion_actions: [
        { type: 'points.award', currency: 'coins', amount: 100 },
        { type: 'item.grant', item: 'gem', quantity: 2 },
        { type: 'reward.issue', reward_id: mug.body.id },
      ],
    },
    idem(),
  );
  t.equal(challenge.status, 201, JSON.stringify(challenge.body));
  const send = (id: string, customer: string) => api.post('/v1/events', { id, name: 'level.completed', customer_id: customer, occurred_at: now(), properties: {}, mode: 'sync' });

  // A draft campaign: its challenges do not progress.
  t.match((await send('e-0', 'ann')).body.effects, [{ type: 'challenge.skipped', challenge_id: challenge.body.id, reason: 'campaign_inactive' }]);
  t.equal((await api.post(`/v1/campaigns/${campaign.body.id}/activate`, {})).status, 200);
  // Active, but ann is not in the audience.
  t.match((await send('e-1', 'ann')).body.effects, [{ type: 'challenge.skipped', reason: 'segment_not_matched' }]);
  t.equal((await api.post('/v1/customers', { external_id: 'bob', attributes: {} }, idem())).status, 201);
  for (const who of ['ann', 'bob']) t.equal((await api.post(`/v1/segments/${vip.body.id}/members`, { customer_id: who }, idem())).status, 201, `${who} joins vip`);

  const ann = await send('e-2', 'ann');
  t.match(ann.body.effects, [
    { type: 'challenge.progressed', challenge_id: challenge.body.id, count: 1, target: 1 },
    { type: 'challenge.completed', challenge_id: challenge.body.id },
    { type: 'challenge.points_awarded', currency: 'coins', amount: 100, campaign_id: campaign.body.id },
    { type: 'challenge.item_granted', item: 'gem', quantity: 2 },
    { type: 'challenge.reward_requested', reward_id: mug.body.id, issuance_id: /^rwi_/ },
  ]);
  // bob's completion award does not fit in what is left of the budget (50 of 150).
  const bob = await send('e-3', 'bob');
  t.match(bob.body.effects, [
    { type: 'challenge.progressed' },
    { type: 'challenge.completed' },
    { type: 'challenge.action_skipped', action: 'points.award', reason: 'budget_exhausted' },
    { type: 'challenge.item_granted', item: 'gem', quantity: 2 },
    { type: 'challenge.reward_requested' },
  ]);

  const annId = (await api.get('/v1/customers?external_id=ann')).body.data[0].id;
  const state = (await api.get(`/v1/customers/${annId}/state`)).body;
  t.same(state.inventory, [{ item: 'gem', quantity: 2 }]);
  t.match(state.balances, [{ currency: 'coins', available: 100 }]);
  // The requested reward is issued after the ack (the unit is reserved, then the actor records it).
  let issued: Array<{ reward_id: string; status: string }> = [];
  for (const until = Date.now() + 15_000; issued.length === 0 && Date.now() < until; ) {
    issued = (await api.get(`/v1/customers/${annId}/state`)).body.issuances;
    if (issued.length === 0) await new Promise((r) => setTimeout(r, 100));
  }
  t.match(issued, [{ reward_id: mug.body.id, status: 'issued' }], 'the completion reward was issued');
  const spent = (await api.get(`/v1/campaigns/${campaign.body.id}`)).body;
  t.match(spent.budgets, [{ currency: 'coins', amount: 150, spent: 100 }], 'only what was awarded is spent');

  // An operator's reevaluation takes no budget grant: a completion award in a capped currency is skipped.
  const two = await api.post(
    '/v1/challenges',
    {
      name: 'Two quests',
      qualifying: { event: 'quest.done' },
      target: 2,
      contribution_key: null,
      status: 'active',
      campaign_id: campaign.body.id,
      completion_actions: [{ type: 'points.award', currency: 'coins', amount: 1 }],
    },
    idem(),
  );
  t.equal(two.status, 201, JSON.stringify(two.body));
  const quest = await api.post('/v1/events', { id: 'q-1', name: 'quest.done', customer_id: 'ann', occurred_at: now(), properties: {}, mode: 'sync' });
  t.match(quest.body.effects, [{ type: 'challenge.progressed', challenge_id: two.body.id, count: 1, target: 2 }]);
  const lowered = await api.patch(`/v1/challenges/${two.body.id}`, { target: 1 });
  t.equal(lowered.status, 200, JSON.stringify(lowered.body));
  const re = await api.post(`/v1/challenges/${two.body.id}/reevaluate`, { customer_id: 'ann', reason: 'target lowered' });
  t.equal(re.status, 200, JSON.stringify(re.body));
  t.match(re.body, { completed: 1 });
  t.match(re.body.effects, [{ type: 'challenge.completed' }, { type: 'challenge.action_skipped', action: 'points.award', reason: 'budget_exhausted' }]);

  // A campaign that a live challenge names cannot be deleted; pausing stops its challenges.
  t.equal((await api.post(`/v1/campaigns/${campaign.body.id}/pause`, {})).status, 200);
  t.match((await send('e-4', 'cid')).body.effects, [{ type: 'challenge.skipped', reason: 'campaign_inactive' }]);
  const del = await api.delete(`/v1/campaigns/${campaign.body.id}`);
  t.equal(del.status, 409);
  t.equal(del.body.error.code, 'resource_in_use');
});
