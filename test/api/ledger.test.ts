// Black-box API tests of currencies, manual ledger adjustments, balances and ledger entry lists.
import t from 'tap';
import { idem, signUp, startForTest } from '../helpers/service.js';

t.test('currencies and the ledger', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;

  await t.test('currencies: create (idempotent), list, duplicates and validation', async (t) => {
    const r = await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem());
    t.equal(r.status, 201);
    t.match(r.body, { id: /^cur_/, key: 'coins', name: 'Coins', negative_balance: 'forbid', expiry_days: null, version: 1 });
    t.equal((await api.post('/v1/currencies', { key: 'gems', name: 'Gems', negative_balance: 'allow', expiry_days: 30 }, idem())).status, 201);
    const dup = await api.post('/v1/currencies', { key: 'coins', name: 'Again' }, idem());
    t.equal(dup.status, 409);
    t.equal(dup.body.error.code, 'already_exists');
    const bad = await api.post('/v1/currencies', { key: 'Coins!', name: 'x' }, idem());
    t.equal(bad.body.error.code, 'validation_failed');
    t.equal(bad.body.error.param, 'key');
    const list = await api.get('/v1/currencies?limit=1');
    t.equal(list.body.data.length, 1);
    t.equal(list.body.has_more, true);
    const next = await api.get(`/v1/currencies?limit=1&cursor=${list.body.next_cursor}`);
    t.not(next.body.data[0].key, list.body.data[0].key);
  });

  const customer = (await api.post('/v1/customers', { external_id: 'ledger-1' }, idem())).body;

  await t.test('adjustments move balances; spending takes the earliest expiry first', async (t) => {
    const soon = new Date(Date.now() + 5 * 86_400_000).toISOString();
    const later = new Date(Date.now() + 10 * 86_400_000).toISOString();
    const a = await api.post('/v1/ledger_entries', { customer_id: customer.id, currency: 'coins', amount: 100, reason: 'welcome', expires_at: later }, idem());
    t.equal(a.status, 201);
    t.match(a.body, { id: /^le_/, currency: 'coins', type: 'adjustment', status: 'posted', amount: 100, remaining: 100, reason: 'welcome' });
    t.match(a.body.balance, { currency: 'coins', available: 100, pending: 0, lifetime_earned: 100 });
    await api.post('/v1/ledger_entries', { customer_id: 'ledger-1', currency: 'coins', amount: 50, reason: 'bonus', expires_at: soon }, idem());
    const spend = await api.post('/v1/ledger_entries', { customer_id: customer.id, currency: 'coins', amount: -70, reason: 'correction' }, idem());
    t.equal(spend.status, 201);
    t.match(spend.body, { amount: -70, balance: { available: 80, lifetime_earned: 150 } });
    const entries = await api.get(`/v1/customers/${customer.id}/ledger_entries`);
    t.equal(entries.status, 200);
    t.same(
      entries.body.data.map((e: { amount: number; remaining: number }) => [e.amount, e.remaining]),
      [
        [-70, 0],
        [50, 0],
        [100, 80],
      ],
      'newest first; the lot expiring first (50) was spent fully, then 20 of the later one',
    );
    const page = await api.get(`/v1/customers/${customer.id}/ledger_entries?limit=2`);
    t.equal(page.body.has_more, true);
    const rest = await api.get(`/v1/customers/${customer.id}/ledger_entries?limit=2&cursor=${page.body.next_cursor}`);
    t.same(rest.body.data.map((e: { amount: number }) => e.amount), [100]);
  });

  await t.test('forbid refuses going below zero; allow does not', async (t) => {
    const r = await api.post('/v1/ledger_entries', { customer_id: customer.id, currency: 'coins', amount: -1000, reason: 'too much' }, idem());
    t.equal(r.status, 409);
    t.equal(r.body.error.code, 'insufficient_balance');
    const g = await api.post('/v1/ledger_entries', { customer_id: customer.id, currency: 'gems', amount: -5, reason: 'debt ok' }, idem());
    t.equal(g.status, 201);
    t.equal(g.body.balance.available, -5);
  });

  await t.test('pending credits count in pending until confirm_after', async (t) => {
    const r = await api.post(
      '/v1/ledger_entries',
      { customer_id: customer.id, currency: 'coins', amount: 30, reason: 'pending', confirm_after: new Date(Date.now() + 3600_000).toISOString() },
      idem(),
    );
    t.equal(r.status, 201);
    t.match(r.body, { status: 'pending', balance: { available: 80, pending: 30 } });
  });

  await t.test('balances in the state view, /balances and the export', async (t) => {
    const st = await api.get(`/v1/customers/${customer.id}/state`);
    t.same(st.body.balances, [
      { currency: 'coins', available: 80, pending: 30, lifetime_earned: 150 },
      { currency: 'gems', available: -5, pending: 0, lifetime_earned: 0 },
    ]);
    t.same((await api.get(`/v1/customers/${customer.id}/balances`)).body.data, st.body.balances);
    const ex = await api.get(`/v1/customers/${customer.id}/export`);
    t.equal(ex.body.ledger_entries.length, 5);
  });

  await t.test('errors: unknown currency or customer, zero amount, missing reason, no key, cursor', async (t) => {
    const unknownCurrency = await api.post('/v1/ledger_entries', { customer_id: customer.id, currency: 'nope', amount: 1, reason: 'x' }, idem());
    t.match(unknownCurrency, { status: 404, body: { error: { code: 'resource_not_found', param: 'currency' } } }, 'a body field naming a missing resource');
    const cases: Array<[unknown, number, string]> = [
      [{ customer_id: 'cust_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ', currency: 'coins', amount: 1, reason: 'x' }, 404, 'resource_not_found'],
      [{ customer_id: 'never-seen', currency: 'coins', amount: 1, reason: 'x' }, 404, 'resource_not_found'],
      [{ customer_id: customer.id, currency: 'coins', amount: 0, reason: 'x' }, 400, 'validation_failed'],
      [{ customer_id: customer.id, currency: 'coins', amount: 1.5, reason: 'x' }, 400, 'validation_failed'],
      [{ customer_id: customer.id, currency: 'coins', amount: 1 }, 400, 'validation_failed'],
    ];
    for (const [body, status, code] of cases) {
      const r = await api.post('/v1/ledger_entries', body, idem());
      t.equal(r.status, status, JSON.stringify(body));
      t.equal(r.body.error.code, code, JSON.stringify(body));
    }
    // The 404 of an unknown customer names the body field (the engine names it `id`, the path's name).
    const other = await signUp(anon);
    const theirs = (await other.server.post('/v1/customers', { external_id: 'ledger-other' }, idem())).body;
    for (const [name, ref] of [
      ['an unknown service id', 'cust_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ'],
      ['a service id of no partition', 'cust_07B01M8ESVY1NC4D4HM6HZ0HYEXXX'],
      ['an unknown external id', 'never-seen'],
      ["another tenant's customer", theirs.id],
    ] as const) {
      const r = await api.post('/v1/ledger_entries', { customer_id: ref, currency: 'coins', amount: 5, reason: 'x' }, idem());
      t.match(r, { status: 404, body: { error: { code: 'resource_not_found', param: 'customer_id' } } }, name);
    }
    t.equal((await api.post('/v1/ledger_entries', { customer_id: customer.id, currency: 'coins', amount: 1, reason: 'x' })).body.error.code, 'idempotency_key_required');
    t.equal((await api.get(`/v1/customers/${customer.id}/ledger_entries?cursor=abc`)).body.error.code, 'invalid_cursor');
  });

  await t.test('replayed adjustments are applied once', async (t) => {
    const key = idem();
    const body = { customer_id: customer.id, currency: 'coins', amount: 7, reason: 'once' };
    const first = await api.post('/v1/ledger_entries', body, key);
    const again = await api.post('/v1/ledger_entries', body, key);
    t.same(again.body, first.body);
    const st = await api.get(`/v1/customers/${customer.id}/balances`);
    t.equal(st.body.data[0].available, 87);
  });
});
