// A budget added to a campaign that has already awarded in the currency (audit auds #1): the cap
// starts from what the campaign really awarded, not from the projected `spent` (which lags: here
// the projector runs every 10 s, so nothing is projected when the PATCH lands). Every campaign
// award is leased from the currency's budget row, capped or not, so the row is a transactional
// running total; removing a cap keeps it, and a cap added again starts from it. An uncapped award
// whose amount only the step knows (amount_from a customer path) still awards in full.
import t from 'tap';
import { type Client, idem, signUp, startForTest } from '../helpers/service.js';

const now = () => new Date(Date.now() - 1000).toISOString();

let seq = 0;
/** `n` sync events at once for new customers; what they awarded and how many were budget_exhausted. */
async function fire(api: Client, n: number): Promise<{ awarded: number; exhausted: number }> {
  const replies = await Promise.all(
    Array.from({ length: n }, () => {
      const i = ++seq;
      return api.post('/v1/events', { id: `e-${i}`, name: 'order.completed', customer_id: `c-${i}`, occurred_at: now(), mode: 'sync' });
    }),
  );
  let awarded = 0;
  let exhausted = 0;
  for (const r of replies) {
    if (r.status !== 200) throw new Error(`${r.status} ${JSON.stringify(r.body)}`);
    for (const e of r.body.effects) {
      if (e.type === 'points.awarded') awarded += e.amount;
      if (e.reason === 'budget_exhausted') exhausted++;
    }
  }
  return { awarded, exhausted };
}

t.test('a cap added, removed and added again starts from what the campaign awarded, not from the lagging projection', async (t) => {
  const { anon } = await startForTest(t, { env: { PROJECTOR_CYCLE_MS: '10000' } });
  const api = (await signUp(anon)).server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const c = await api.post('/v1/campaigns', { name: 'Uncapped first' }, idem());
  const id = c.body.id as string;
  t.equal((await api.post(`/v1/campaigns/${id}/activate`, {})).status, 200);
  const rule = await api.post(
    '/v1/rules',
    {
      name: 'ten',
      campaign_id: id,
      definition: { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: 'order.completed' }, actions: [{ type: 'points.award', currency: 'coins', amount: 10 }] },
    },
    idem(),
  );
  t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);

  // Given 100 coins awarded while uncapped (none of it projected yet)
  t.same(await fire(api, 10), { awarded: 100, exhausted: 0 }, 'uncapped: every event awards');
  // When a cap of 100 is added at once
  const capped = await api.patch(`/v1/campaigns/${id}`, { budgets: [{ currency: 'coins', amount: 100 }] });
  t.equal(capped.status, 200, JSON.stringify(capped.body));
  t.ok(capped.body.budgets[0].reserved >= 100, `the cap starts from what was awarded (reserved ${capped.body.budgets[0].reserved})`);
  // Then nothing more is awarded, and spent never passes the cap.
  t.same(await fire(api, 10), { awarded: 0, exhausted: 10 }, 'capped at what was awarded: every event is budget_exhausted');
  let got = (await api.get(`/v1/campaigns/${id}`)).body;
  t.match(got.budgets, [{ currency: 'coins', amount: 100, spent: 100 }]);

  // Given the cap removed and 50 more coins awarded uncapped
  const removed = await api.patch(`/v1/campaigns/${id}`, { budgets: [] });
  t.equal(removed.status, 200, JSON.stringify(removed.body));
  t.same(removed.body.budgets, []);
  t.same(await fire(api, 5), { awarded: 50, exhausted: 0 }, 'uncapped again');
  // When a cap of 200 is added again, then it starts from the 150 awarded: 50 more at most.
  const again = await api.patch(`/v1/campaigns/${id}`, { budgets: [{ currency: 'coins', amount: 200 }] });
  t.equal(again.status, 200, JSON.stringify(again.body));
  t.ok(again.body.budgets[0].reserved >= 150, `the cap starts from the running total (reserved ${again.body.budgets[0].reserved})`);
  const after = await fire(api, 10);
  t.ok(after.awarded <= 50, `at most the 50 left are awarded (${after.awarded})`);
  got = (await api.get(`/v1/campaigns/${id}`)).body;
  t.ok(got.budgets[0].spent <= 200, `spent ${got.budgets[0].spent} <= 200`);
  t.equal(got.budgets[0].spent, 150 + after.awarded, 'spent is what the events awarded');
  t.ok(got.budgets[0].reserved >= got.budgets[0].spent, 'reserved never below spent');

  // An uncapped award whose amount only the step knows (a customer attribute) awards in full.
  t.equal((await api.patch(`/v1/campaigns/${id}`, { budgets: [] })).status, 200);
  const gems = await api.post('/v1/currencies', { key: 'gems', name: 'Gems' }, idem());
  t.equal(gems.status, 201);
  const fromLevel = await api.post(
    '/v1/rules',
    {
      name: 'level',
      campaign_id: id,
      definition: {
        schema: 'service.rule/v2',
        trigger: { kind: 'customer_event', event: 'level.up' },
        actions: [{ type: 'points.award', currency: 'gems', amount_from: 'customer.attributes.level', multiplier: 1000 }],
      },
    },
    idem(),
  );
  t.equal((await api.post(`/v1/rules/${fromLevel.body.id}/publish`, {})).status, 200);
  t.equal((await api.post('/v1/customers', { external_id: 'lvl', attributes: { level: 7 } }, idem())).status, 201);
  const up = await api.post('/v1/events', { id: 'up-1', name: 'level.up', customer_id: 'lvl', occurred_at: now(), mode: 'sync' });
  t.match(up.body.effects, [{ type: 'rule.fired' }, { type: 'points.awarded', currency: 'gems', amount: 7000 }]);
});
