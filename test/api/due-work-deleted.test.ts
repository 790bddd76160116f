// Black-box test of the due-work scheduler and deleted customers: a deleted customer keeps its
// ledger rows (ledger integrity), but its due work (a lot past its expiry, a pending credit) is
// not found, run or counted again on every sweep; a live customer's still is.
import t from 'tap';
import { idem, signUp, startForTest } from '../helpers/service.js';

t.test("a deleted customer's due ledger work is not found or counted by the sweeps", async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  t.equal((await api.post('/v1/currencies', { key: 'gems', name: 'Gems' }, idem())).status, 201);
  const now = Date.parse((await api.get('/v1/test_clock')).body.now);
  const inADay = new Date(now + 86_400_000).toISOString();
  const customer = async (ext: string) => {
    const c = await api.post('/v1/customers', { external_id: ext }, idem());
    const lot = await api.post('/v1/ledger_entries', { customer_id: c.body.id, currency: 'gems', amount: 10, reason: 'x', expires_at: inADay }, idem());
    t.equal(lot.status, 201);
    const pending = await api.post(
      '/v1/ledger_entries',
      { customer_id: c.body.id, currency: 'gems', amount: 10, reason: 'later', confirm_after: new Date(now + 3 * 86_400_000).toISOString() },
      idem(),
    );
    t.equal(pending.status, 201);
    return c.body.id as string;
  };
  // Given p3 (deleted) and p5 (live), each with a lot expiring in a day and a credit pending for three,
  const p3 = await customer('p3');
  await customer('p5');
  t.equal((await api.delete(`/v1/customers/${p3}`)).status, 204);

  // when the clock passes the expiry, then only p5's work runs;
  const first = await api.post('/v1/test_clock/advance', { seconds: 2 * 86_400 });
  t.equal(first.status, 200);
  t.equal(first.body.customers_settled, 1, 'p5 only');
  // and later sweeps find nothing of p3's, though its rows still look due.
  t.equal((await api.post('/v1/test_clock/advance', { seconds: 1 })).body.customers_settled, 0);
  const past = await api.post('/v1/test_clock/advance', { seconds: 2 * 86_400 });
  t.equal(past.body.customers_settled, 1, "p5's pending credit is confirmed; p3's is not counted");
  t.equal((await api.post('/v1/test_clock/advance', { seconds: 1 })).body.customers_settled, 0);
});
