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
  t.equal(adv.body.customers_settled, 1);
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
  const live = tenant.admin.with({ 'x-service-environment': tenant.liveEnv });
  t.equal((await live.get('/v1/test_clock')).status, 403);
  t.equal((await live.post('/v1/test_clock/advance', { seconds: 60 })).body.error.code, 'forbidden');
});
