// Black-box API tests of cursor binding (gateway/pagination.ts) on the real service: a
// next_cursor pages only the list that wrote it. Used on another list, with other filter values,
// under another customer or in another environment it is 400 invalid_cursor with param cursor
// (it would page from a position that means something else there); on its own list it still
// pages, whatever the limit (limit is not part of the binding). A cursor of the previous format
// (v 1, bound to no list) is refused. Every list's `limit` is decimal digits (no 0x10, 1e1, " 5").
import t, { type Test } from 'tap';
import { idem, signUp, startForTest } from '../helpers/service.js';

const matches = (name: string, status: string) => ({
  name,
  qualifying: { event: 'match.completed' },
  target: 3,
  status,
});

t.test('a cursor pages only the list that wrote it', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;

  /** Asserts that GET path answers 400 invalid_cursor naming the cursor. */
  async function refused(t: Test, path: string, what: string) {
    const r = await api.get(path);
    t.equal(r.status, 400, `${what}: ${JSON.stringify(r.body)}`);
    t.equal(r.body.error?.code, 'invalid_cursor', what);
    t.equal(r.body.error?.param, 'cursor', what);
  }

  const customers: string[] = [];
  for (let i = 0; i < 3; i++) {
    const c = await api.post('/v1/customers', { external_id: `bind-${i}` }, idem());
    t.equal(c.status, 201);
    customers.push(c.body.id as string);
  }
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  for (const customer of customers.slice(0, 2)) {
    for (const amount of [10, 20, 30]) {
      const r = await api.post('/v1/ledger_entries', { customer_id: customer, currency: 'coins', amount, reason: 'seed' }, idem());
      t.equal(r.status, 201, JSON.stringify(r.body));
    }
  }
  for (const [name, status] of [
    ['Active A', 'active'],
    ['Active B', 'active'],
    ['Active C', 'active'],
    ['Draft A', 'draft'],
    ['Draft B', 'draft'],
  ]) {
    t.equal((await api.post('/v1/challenges', matches(name!, status!), idem())).status, 201);
  }

  await t.test('a cursor from one list is refused on another', async (t) => {
    const first = await api.get('/v1/customers?limit=1');
    t.equal(first.body.has_more, true);
    const cursor = first.body.next_cursor as string;
    t.ok(cursor.length < 200, `a cursor is short (${cursor.length} characters)`);
    for (const list of ['/v1/rules', '/v1/challenges', '/v1/currencies', '/v1/segments', '/v1/reward_issuances', '/v1/match_results']) {
      await refused(t, `${list}?cursor=${cursor}`, `customers cursor on ${list}`);
    }
    await refused(t, `/v1/customers/${customers[0]}/ledger_entries?cursor=${cursor}`, 'customers cursor on a ledger');
    await refused(t, `/v1/customers?external_id=bind-2&cursor=${cursor}`, 'customers cursor on the customers list filtered by external_id');
  });

  await t.test('a cursor from ?status=x is refused with ?status=y or no status', async (t) => {
    const active = await api.get('/v1/challenges?status=active&limit=1');
    t.equal(active.status, 200);
    t.equal(active.body.has_more, true);
    const cursor = active.body.next_cursor as string;
    await refused(t, `/v1/challenges?status=draft&cursor=${cursor}`, 'active cursor with status=draft');
    await refused(t, `/v1/challenges?status=paused&cursor=${cursor}`, 'active cursor with status=paused');
    await refused(t, `/v1/challenges?cursor=${cursor}`, 'active cursor without a status');

    const all = await api.get('/v1/challenges?limit=1');
    await refused(t, `/v1/challenges?status=active&cursor=${all.body.next_cursor}`, 'unfiltered cursor with status=active');
  });

  await t.test("a cursor from one customer's ledger is refused on another's", async (t) => {
    const [a, b] = customers;
    const first = await api.get(`/v1/customers/${a}/ledger_entries?limit=1`);
    t.equal(first.status, 200);
    t.equal(first.body.has_more, true);
    await refused(t, `/v1/customers/${b}/ledger_entries?cursor=${first.body.next_cursor}`, "A's ledger cursor on B's ledger");
    const own = await api.get(`/v1/customers/${a}/ledger_entries?limit=1&cursor=${first.body.next_cursor}`);
    t.equal(own.status, 200, "and it still pages A's ledger");
    t.equal(own.body.data[0].amount, 20);
  });

  await t.test('a cursor from the test environment is refused in the live environment', async (t) => {
    const first = await tenant.admin.get('/v1/customers?limit=1');
    t.equal(first.body.has_more, true);
    const live = tenant.admin.with({ 'x-service-environment': tenant.liveEnv });
    const r = await live.get(`/v1/customers?cursor=${first.body.next_cursor}`);
    t.equal(r.status, 400);
    t.equal(r.body.error?.code, 'invalid_cursor');
    t.equal(r.body.error?.param, 'cursor');
    t.equal((await tenant.admin.get(`/v1/customers?cursor=${first.body.next_cursor}`)).status, 200, 'a PAT and a secret key share the list of one environment');
  });

  await t.test('a cursor still pages its own list, with the same filters and any limit', async (t) => {
    const first = await api.get('/v1/challenges?status=active&limit=1');
    const names = [first.body.data[0].name as string];
    let cursor = first.body.next_cursor as string | null;
    for (const limit of [1, 50]) {
      const r = await api.get(`/v1/challenges?status=active&limit=${limit}&cursor=${cursor}`);
      t.equal(r.status, 200, `limit ${limit}`);
      names.push(...r.body.data.map((c: { name: string }) => c.name));
      cursor = r.body.next_cursor;
      if (cursor === null) break;
    }
    t.same(names.sort(), ['Active A', 'Active B', 'Active C'], 'every active challenge once, no draft');
    t.equal(cursor, null);

    const c1 = await api.get('/v1/customers?limit=2');
    const c2 = await api.get(`/v1/customers?limit=200&cursor=${c1.body.next_cursor}`);
    t.equal(c2.status, 200);
    t.same(
      [...c1.body.data, ...c2.body.data].map((c: { id: string }) => c.id).sort(),
      [...customers].sort(),
      'customers paged with another limit',
    );
  });

  await t.test('a cursor of the previous build (v 1, bound to no list) is refused', async (t) => {
    const v1 = (k: string[]) => Buffer.from(JSON.stringify({ v: 1, k })).toString('base64url');
    await refused(t, `/v1/customers?cursor=${v1([customers[0]!])}`, 'v1 customers cursor');
    await refused(t, `/v1/customers/${customers[0]}/ledger_entries?cursor=${v1(['1700000000000', 'le_x'])}`, 'v1 ledger cursor');
  });

  await t.test('every list documenting limit takes decimal digits only', async (t) => {
    const doc = (await api.get('/v1/openapi.json')).body as {
      paths: Record<string, Record<string, { parameters?: Array<{ name: string; in: string }> }>>;
    };
    const lists = Object.entries(doc.paths)
      .filter(([, ops]) => ops.get?.parameters?.some((p) => p.in === 'query' && p.name === 'limit') === true)
      .map(([path]) => path.replace(/\{[^}]+\}/g, 'x'));
    t.ok(lists.includes('/v1/customers') && lists.includes('/v1/organizations') && lists.length > 15, `${lists.length} lists`);
    for (const path of lists) {
      for (const limit of ['0x10', '1e1', '%205']) {
        // A PAT acting in the test environment reaches every list; a secret key the environment's.
        let r = await tenant.admin.get(`${path}?limit=${limit}`);
        if (r.status === 401 || r.status === 403) r = await api.get(`${path}?limit=${limit}`);
        t.same(
          { status: r.status, code: r.body.error?.code, param: r.body.error?.param },
          { status: 400, code: 'validation_failed', param: 'limit' },
          `${path}?limit=${limit}`,
        );
      }
    }
  });
});
