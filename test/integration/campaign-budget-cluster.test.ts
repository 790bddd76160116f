// A campaign budget across two nodes: two server processes on one Redis and one PostgreSQL, sync
// events for customers on every partition sent through both nodes at once (each node forwards to
// the partition owner and grants from its own leased chunks). The awards never pass the budget,
// and `spent` ends equal to what the events awarded.
import t from 'tap';
import { twoNodes } from '../helpers/process.js';
import { idem, redisUrl, serverEnv, storageFor } from '../helpers/service.js';

const budget = 500;
const award = 9;

t.test('two nodes never award more than the campaign budget', async (t) => {
  const storage = storageFor(t);
  const base = serverEnv(storage, redisUrl, {
    PARTITIONS: '16',
    ADVERTISE_HOST: '127.0.0.1',
  });
  const { apiA, apiB } = await twoNodes(t, base, 16);
  t.equal((await apiA.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const c = await apiA.post('/v1/campaigns', { name: 'Capped', budgets: [{ currency: 'coins', amount: budget }] }, idem());
  t.equal((await apiA.post(`/v1/campaigns/${c.body.id}/activate`, {})).status, 200);
  const rule = await apiA.post(
    '/v1/rules',
    {
      name: 'r',
      campaign_id: c.body.id,
      definition: { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: 'order.completed' }, actions: [{ type: 'points.award', currency: 'coins', amount: award }] },
    },
    idem(),
  );
  t.equal((await apiA.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);
  // Node B learns the change over the bus; give it a moment.
  await new Promise((r) => setTimeout(r, 300));

  // 2 nodes x 6 batches x 20 events = 240 events x 9 = 2160 wanted, 500 allowed.
  const occurredAt = new Date(Date.now() - 1000).toISOString();
  const sends = [];
  for (const [n, api] of [apiA, apiB].entries()) {
    for (let batch = 0; batch < 6; batch++) {
      const events = Array.from({ length: 20 }, (_, i) => ({
        id: `e-${n}-${batch}-${i}`,
        name: 'order.completed',
        customer_id: `c-${(batch * 20 + i) % 60}`,
        occurred_at: occurredAt,
      }));
      sends.push(api.post('/v1/events', { events, mode: 'sync' }));
    }
  }
  let awarded = 0;
  let exhausted = 0;
  for (const r of await Promise.all(sends)) {
    t.equal(r.status, 207);
    for (const item of r.body.data) {
      for (const e of item.effects ?? []) {
        if (e.type === 'points.awarded') awarded += e.amount;
        // An event whose only award does not fit: rule.skipped budget_exhausted (the firing is not counted).
        if ((e.type === 'rule.skipped' || e.type === 'action.skipped') && e.reason === 'budget_exhausted') exhausted++;
      }
    }
  }
  t.ok(awarded <= budget, `awarded ${awarded} <= ${budget}`);
  t.ok(awarded >= budget / 2, `most of the budget is used across nodes (${awarded})`);
  t.ok(exhausted > 0, 'the rest is skipped with budget_exhausted');

  // spent is projected by each partition's owner: poll until both nodes' projections landed.
  let spent = -1;
  for (const until = Date.now() + 20_000; spent !== awarded && Date.now() < until; ) {
    spent = (await apiA.get(`/v1/campaigns/${c.body.id}`)).body.budgets[0].spent;
    if (spent !== awarded) await new Promise((r) => setTimeout(r, 100));
  }
  t.equal(spent, awarded, 'spent = what the events awarded');
});
