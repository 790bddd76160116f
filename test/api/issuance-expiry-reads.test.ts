// An issuance past its expires_at, before the expiry sweep recorded it (the sweep runs every
// minute, and an advance's run may still be on its way): every read answers it `expired`, exactly
// as the sweep will record it (same status, same version and ETag), status filters and pages agree
// with what each item shows, and redeem and cancel refuse it with invalid_state without spending or
// giving a unit back, also when they race the sweep. The sweep is held by replacing the job's
// expireForEnvironment (what both the minute sweep and an advance's run call) until the test
// lets it run.
import t, { type Test } from 'tap';
import { openSql } from '../../src/persistence/sql/db.js';
import { type Client, databaseUrl, idem, signUp, startForTest, storageFor } from '../helpers/service.js';

type Item = { id: string; status: string; version: number };

async function setUp(t: Test) {
  const storage = storageFor(t);
  const { anon, service } = await startForTest(t, { storage });
  const tenant = await signUp(anon);
  const api = tenant.server;
  const sql = openSql({ url: databaseUrl, schema: storage.schema, max: 1 });
  t.teardown(() => sql.end());
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const job = service.rewardDue;
  const expire = job.expireForEnvironment.bind(job);
  const hold = () => {
    job.expireForEnvironment = async () => [];
  };
  const release = () => {
    job.expireForEnvironment = expire;
  };
  t.teardown(release);
  return { api, sql, service, hold, release, env: tenant.testEnv };
}

const reward = async (api: Client, name: string, expiry_after: string | null, cost = 100) => {
  const r = await api.post('/v1/rewards', { name, cost, currency: 'coins', availability: 10, expiry_after }, idem());
  return r.body.id as string;
};
const issue = async (api: Client, rewardId: string, customer: string) => {
  const r = await api.post('/v1/reward_issuances', { reward_id: rewardId, customer_id: customer }, idem());
  if (r.status !== 201) throw new Error(`issue: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.id as string;
};
const fund = (api: Client, customer: string, amount: number) =>
  api.post('/v1/ledger_entries', { customer_id: customer, currency: 'coins', amount, reason: 'test' }, idem());
const available = async (api: Client, customer: string) =>
  (await api.get(`/v1/customers/${customer}/balances`)).body.data.find((b: { currency: string }) => b.currency === 'coins').available as number;
const ids = (items: Item[]) => items.map((i) => i.id).sort();

/** Every page of a list, one item a page: the ids in order, and no page repeating another's item. */
async function walk(api: Client, query: string): Promise<Item[]> {
  const out: Item[] = [];
  let cursor: string | null = null;
  for (let n = 0; n < 50; n++) {
    const r = await api.get(`/v1/reward_issuances?limit=1&${query}${cursor === null ? '' : `&cursor=${cursor}`}`);
    if (r.status !== 200) throw new Error(`list: ${r.status} ${JSON.stringify(r.body)}`);
    out.push(...r.body.data);
    if (!r.body.has_more) {
      if (r.body.next_cursor !== null) throw new Error('a last page with a cursor');
      return out;
    }
    cursor = r.body.next_cursor;
  }
  throw new Error('no last page');
}

t.test('past expires_at and not swept yet: every read answers expired, as the sweep then records it', async (t) => {
  const { api, sql, service, hold, release } = await setUp(t);
  const voucher = await reward(api, 'Voucher', '1d');
  const forever = await reward(api, 'Forever', null);
  const alice = (await api.post('/v1/customers', { external_id: 'alice' }, idem())).body.id as string;
  t.equal((await fund(api, alice, 1000)).status, 201);
  const a = await issue(api, voucher, alice);
  const b = await issue(api, voucher, alice);
  const c = await issue(api, forever, alice);
  const d = await issue(api, voucher, alice);
  t.equal((await api.post(`/v1/reward_issuances/${d}/redeem`, {})).status, 200);
  const bob = (await api.post('/v1/customers', { external_id: 'bob' }, idem())).body.id as string;
  const e = await issue(api, voucher, 'bob');

  // Given the test clock two days on, past the vouchers' expires_at, and the sweep not run yet.
  hold();
  t.equal((await api.post('/v1/test_clock/advance', { seconds: 2 * 86_400 })).status, 200);
  const [stored] = await sql`select status, version from reward_issuances where id = ${a}`;
  t.same(stored, { status: 'issued', version: 1 }, 'the sweep has not recorded the expiry');

  // Then GET answers it expired, with the version (and ETag) the sweep will record.
  const one = await api.get(`/v1/reward_issuances/${a}`);
  t.equal(one.status, 200);
  t.match(one.body, { id: a, status: 'expired', version: 2, redeemed_at: null, cancelled_at: null });
  t.equal(one.headers.get('etag'), '"2"');
  t.match((await api.get(`/v1/reward_issuances/${c}`)).body, { status: 'issued', version: 1 }, 'one that never expires stays issued');

  // And the lists: every item as GET shows it; each filter lists exactly the items showing that status.
  const all = await walk(api, '');
  t.same(
    all.map((i) => [i.id, i.status, i.version]),
    [[a, 'expired', 2], [b, 'expired', 2], [c, 'issued', 1], [d, 'redeemed', 2], [e, 'expired', 2]].sort((x, y) => String(x[0]).localeCompare(String(y[0]))),
  );
  t.same(ids(await walk(api, 'status=issued')), [c], 'status=issued lists no expired one');
  t.same(ids(await walk(api, 'status=expired')), [a, b, e].sort(), 'status=expired lists the ones not swept yet, page by page');
  t.same(ids(await walk(api, 'status=redeemed')), [d]);
  t.same(ids(await walk(api, `status=expired&customer_id=${alice}`)), [a, b].sort());
  t.same(ids(await walk(api, 'status=issued&customer_id=alice')), [c]);
  t.same(ids(await walk(api, `status=expired&customer_id=${bob}`)), [e]);
  const twoPages = await api.get('/v1/reward_issuances?status=expired&limit=2');
  t.equal(twoPages.body.data.length, 2);
  t.equal(twoPages.body.has_more, true);
  const last = await api.get(`/v1/reward_issuances?status=expired&limit=2&cursor=${twoPages.body.next_cursor}`);
  t.same([last.body.data.length, last.body.has_more, last.body.next_cursor], [1, false, null]);

  // And the state view and the export.
  const state = await api.get(`/v1/customers/${alice}/state`);
  t.same(
    state.body.issuances.map((i: Item) => [i.id, i.status]),
    [[a, 'expired'], [b, 'expired'], [c, 'issued'], [d, 'redeemed']],
  );
  const exported = await api.get(`/v1/customers/${alice}/export`);
  t.same(
    exported.body.reward_issuances.map((i: Item) => [i.id, i.status]),
    [[a, 'expired'], [b, 'expired'], [c, 'issued'], [d, 'redeemed']],
  );

  // When it is redeemed or cancelled: invalid_state, nothing spent, no unit back.
  const before = await available(api, alice);
  const issuedUnits = (await api.get(`/v1/rewards/${voucher}`)).body.issued as number;
  const redeem = await api.post(`/v1/reward_issuances/${a}/redeem`, {});
  t.same([redeem.status, redeem.body.error?.code], [409, 'invalid_state']);
  const cancel = await api.post(`/v1/reward_issuances/${b}/cancel`, {});
  t.same([cancel.status, cancel.body.error?.code], [409, 'invalid_state']);
  t.equal(await available(api, alice), before, 'nothing spent');
  t.equal((await api.get(`/v1/rewards/${voucher}`)).body.issued, issuedUnits, 'no unit given back');

  // When the sweep runs, it records what the reads already answered: every read answers the same.
  const seen = {
    one: one.body,
    all: (await api.get('/v1/reward_issuances?limit=200')).body,
    expired: (await api.get('/v1/reward_issuances?status=expired&limit=200')).body,
    issued: (await api.get('/v1/reward_issuances?status=issued&limit=200')).body,
    state: (await api.get(`/v1/customers/${alice}/state`)).body.issuances,
    exported: (await api.get(`/v1/customers/${alice}/export`)).body.reward_issuances,
  };
  release();
  await service.rewardDue.sweep();
  const swept = await sql`select id, status, version from reward_issuances where id in ${sql([a, b, e])} order by id`;
  t.same(
    swept.map((r) => [r.id, r.status, r.version]),
    [a, b, e].sort().map((id) => [id, 'expired', 2]),
    'the sweep recorded the expiries',
  );
  const again = await api.get(`/v1/reward_issuances/${a}`);
  t.same(again.body, seen.one, 'GET answers as before the sweep');
  t.equal(again.headers.get('etag'), '"2"');
  t.same((await api.get('/v1/reward_issuances?limit=200')).body, seen.all);
  t.same((await api.get('/v1/reward_issuances?status=expired&limit=200')).body, seen.expired);
  t.same((await api.get('/v1/reward_issuances?status=issued&limit=200')).body, seen.issued);
  t.same((await api.get(`/v1/customers/${alice}/state`)).body.issuances, seen.state);
  t.same((await api.get(`/v1/customers/${alice}/export`)).body.reward_issuances, seen.exported);
});

t.test("the environment's clock passing expires_at between sweeps (no advance crosses it): read expired at once", async (t) => {
  const { api, hold } = await setUp(t);
  const hourly = await reward(api, 'Hourly', '1h');
  const carol = (await api.post('/v1/customers', { external_id: 'carol' }, idem())).body.id as string;
  const id = await issue(api, hourly, 'carol');
  const expiresAt = Date.parse((await api.get(`/v1/reward_issuances/${id}`)).body.expires_at);
  const clock = async () => Date.parse((await api.get('/v1/test_clock')).body.now);
  hold();
  // Given the clock moved to two seconds before expires_at: still issued.
  t.equal((await api.post('/v1/test_clock/advance', { seconds: Math.floor((expiresAt - (await clock())) / 1000) - 2 })).status, 200);
  t.match((await api.get(`/v1/reward_issuances/${id}`)).body, { status: 'issued', version: 1 });
  t.same(ids((await api.get('/v1/reward_issuances?status=issued')).body.data), [id]);
  // When the environment's clock runs past it (real time passing, no sweep since).
  while ((await clock()) <= expiresAt) await new Promise((r) => setTimeout(r, 200));
  // Then it reads expired everywhere.
  t.match((await api.get(`/v1/reward_issuances/${id}`)).body, { status: 'expired', version: 2 });
  t.same((await api.get('/v1/reward_issuances?status=issued')).body.data, []);
  t.same(ids((await api.get('/v1/reward_issuances?status=expired')).body.data), [id]);
  t.match((await api.get(`/v1/customers/${carol}/state`)).body.issuances, [{ id, status: 'expired' }]);
  const redeem = await api.post(`/v1/reward_issuances/${id}/redeem`, {});
  t.same([redeem.status, redeem.body.error?.code], [409, 'invalid_state']);
});

t.test('redeem and cancel racing the expiry sweep: refused whichever runs first; an open one is cancelled and the sweep leaves it', async (t) => {
  const { api, sql, service, hold, release } = await setUp(t);
  const voucher = await reward(api, 'Voucher', '1d');
  const forever = await reward(api, 'Forever', null);
  const dave = (await api.post('/v1/customers', { external_id: 'dave' }, idem())).body.id as string;
  t.equal((await fund(api, dave, 1000)).status, 201);
  const lapsedA = await issue(api, voucher, dave);
  const lapsedB = await issue(api, voucher, dave);
  const open = await issue(api, forever, dave);
  hold();
  t.equal((await api.post('/v1/test_clock/advance', { seconds: 2 * 86_400 })).status, 200);
  const units = async (r: string) => (await api.get(`/v1/rewards/${r}`)).body.issued as number;
  const before = { coins: await available(api, dave), voucher: await units(voucher), forever: await units(forever) };
  release();
  // When redeem, cancel and the sweep run together.
  const [redeemA, cancelB, cancelOpen] = await Promise.all([
    api.post(`/v1/reward_issuances/${lapsedA}/redeem`, {}),
    api.post(`/v1/reward_issuances/${lapsedB}/cancel`, {}),
    api.post(`/v1/reward_issuances/${open}/cancel`, {}),
    service.rewardDue.sweep(),
  ]);
  // Then the lapsed ones are refused (invalid_state), nothing is spent, no voucher unit goes back.
  t.same([redeemA.status, redeemA.body.error?.code], [409, 'invalid_state']);
  t.same([cancelB.status, cancelB.body.error?.code], [409, 'invalid_state']);
  t.match(cancelOpen.body, { id: open, status: 'cancelled', version: 2 });
  t.equal(await available(api, dave), before.coins, 'nothing spent');
  t.equal(await units(voucher), before.voucher, 'an expiry gives no unit back');
  t.equal(await units(forever), before.forever - 1, 'the cancel gave its unit back');
  await service.rewardDue.sweep();
  const rows = await sql`select id, status, version from reward_issuances where id in ${sql([lapsedA, lapsedB, open])} order by id`;
  t.same(
    rows.map((r) => [r.id, r.status, r.version]),
    [
      [lapsedA, 'expired', 2],
      [lapsedB, 'expired', 2],
      [open, 'cancelled', 2],
    ].sort((x, y) => String(x[0]).localeCompare(String(y[0]))),
    'each ended once: expired by the sweep, or cancelled',
  );
});
