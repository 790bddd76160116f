// Black-box API tests of tier programs (create, list, get by id or key, PATCH with If-Match and the
// edit guards, the held-level guard counting real holders, not deleted or merged ones, and
// reassign_to moving them), a move that stops part way finished by a repeat or the scheduler,
// check dates for a check added or shortened, rolling tiers driven by the test clock (earnings age
// out, the downgrade check drops the level), plus the catalog over a real database with a stub
// holder count.
import t from 'tap';
import type { Currency } from '../../src/catalog/currencies.js';
import { type HoldersByLevel, TierProgramCatalog } from '../../src/catalog/tier-programs.js';
import { ApiError } from '../../src/errors/api-error.js';
import { MemoryBus } from '../../src/persistence/memory/bus.js';
import { idem, signUp, startForTest } from '../helpers/service.js';
import { sqlForTest } from '../helpers/sql.js';

const levels = [
  { key: 'bronze', title: 'Bronze', threshold: 0 },
  { key: 'silver', title: 'Silver', threshold: 1000 },
  { key: 'gold', title: 'Gold', threshold: 5000 },
];

t.test('tier programs over the API', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);

  let id = '';

  await t.test('create (idempotent), wire shape and ETag', async (t) => {
    const key = idem();
    const body = { key: 'status', name: 'Status', currency: 'coins', basis: 'lifetime_earned', levels, downgrade_check: { every_days: 30 } };
    const r = await api.post('/v1/tier_programs', body, key);
    t.equal(r.status, 201);
    t.match(r.body, {
      id: /^tp_/,
      key: 'status',
      name: 'Status',
      currency: 'coins',
      basis: 'lifetime_earned',
      rolling_days: null,
      levels,
      downgrade_check: { every_days: 30 },
      version: 1,
      created_at: String,
      updated_at: String,
    });
    t.equal(r.headers.get('etag'), '"1"');
    id = r.body.id;
    const again = await api.post('/v1/tier_programs', body, key);
    t.equal(again.status, 201);
    t.equal(again.body.id, id, 'the same Idempotency-Key answers as the first time');

    const rolling = await api.post(
      '/v1/tier_programs',
      { key: 'season', name: 'Season', currency: 'coins', basis: 'earned_rolling_days', rolling_days: 90, levels },
      idem(),
    );
    t.equal(rolling.status, 201);
    t.match(rolling.body, { rolling_days: 90, downgrade_check: null });
  });

  await t.test('create errors: already_exists, validation_failed with the wire path, unknown currency', async (t) => {
    const dup = await api.post('/v1/tier_programs', { key: 'status', name: 'Again', currency: 'coins', basis: 'balance', levels }, idem());
    t.equal(dup.status, 409);
    t.equal(dup.body.error.code, 'already_exists');
    t.equal(dup.body.error.param, 'key');

    const badThreshold = await api.post(
      '/v1/tier_programs',
      { key: 'bad', name: 'Bad', currency: 'coins', basis: 'balance', levels: [levels[0], { key: 'x', title: 'X', threshold: 0 }] },
      idem(),
    );
    t.equal(badThreshold.status, 400);
    t.equal(badThreshold.body.error.code, 'validation_failed');
    t.equal(badThreshold.body.error.param, 'levels[1].threshold');

    const firstNotZero = await api.post(
      '/v1/tier_programs',
      { key: 'bad', name: 'Bad', currency: 'coins', basis: 'balance', levels: [{ key: 'a', title: 'A', threshold: 5 }] },
      idem(),
    );
    t.equal(firstNotZero.body.error.param, 'levels[0].threshold');

    const noRolling = await api.post('/v1/tier_programs', { key: 'bad', name: 'Bad', currency: 'coins', basis: 'earned_rolling_days', levels }, idem());
    t.equal(noRolling.body.error.code, 'validation_failed');
    t.equal(noRolling.body.error.param, 'rolling_days');

    const badCheck = await api.post(
      '/v1/tier_programs',
      { key: 'bad', name: 'Bad', currency: 'coins', basis: 'balance', levels, downgrade_check: { every_days: 0 } },
      idem(),
    );
    t.equal(badCheck.body.error.param, 'downgrade_check.every_days');

    const badBasis = await api.post('/v1/tier_programs', { key: 'bad', name: 'Bad', currency: 'coins', basis: 'spent', levels }, idem());
    t.equal(badBasis.status, 400);
    t.equal(badBasis.body.error.param, 'basis');

    const noCurrency = await api.post('/v1/tier_programs', { key: 'bad', name: 'Bad', currency: 'gems', basis: 'balance', levels }, idem());
    t.equal(noCurrency.status, 404);
    t.equal(noCurrency.body.error.code, 'resource_not_found');
    t.equal(noCurrency.body.error.param, 'currency');
  });

  await t.test('list (paged), get by id or key, another environment is 404', async (t) => {
    const page = await api.get('/v1/tier_programs?limit=1');
    t.equal(page.status, 200);
    t.equal(page.body.data.length, 1);
    t.equal(page.body.has_more, true);
    const next = await api.get(`/v1/tier_programs?limit=1&cursor=${page.body.next_cursor}`);
    t.equal(next.body.data.length, 1);
    t.not(next.body.data[0].id, page.body.data[0].id);
    t.equal(next.body.has_more, false);
    const badCursor = await api.get('/v1/tier_programs?cursor=***');
    t.equal(badCursor.body.error.code, 'invalid_cursor');

    const byId = await api.get(`/v1/tier_programs/${id}`);
    t.equal(byId.status, 200);
    t.equal(byId.headers.get('etag'), '"1"');
    const byKey = await tenant.admin.get('/v1/tier_programs/status');
    t.equal(byKey.status, 200, 'a PAT reads too');
    t.equal(byKey.body.id, id);

    const missing = await api.get('/v1/tier_programs/tp_nope');
    t.equal(missing.status, 404);
    t.equal(missing.body.error.code, 'resource_not_found');
    const live = tenant.admin.with({ 'x-service-environment': tenant.liveEnv });
    t.equal((await live.get(`/v1/tier_programs/${id}`)).status, 404);
    t.equal((await live.patch(`/v1/tier_programs/${id}`, { name: 'Hijack' }, { 'if-match': '"1"' })).status, 404);
    t.same((await live.get('/v1/tier_programs')).body.data, []);
  });

  await t.test('scopes: programs:read for GETs, programs:write for writes', async (t) => {
    const readOnly = await tenant.admin.post('/v1/api_keys', { kind: 'secret', name: 'reader', scopes: ['programs:read'] }, idem());
    t.equal(readOnly.status, 201);
    const reader = anon.with({ authorization: `Bearer ${readOnly.body.token}` });
    t.equal((await reader.get('/v1/tier_programs')).status, 200);
    const denied = await reader.post('/v1/tier_programs', { key: 'x', name: 'X', currency: 'coins', basis: 'balance', levels }, idem());
    t.equal(denied.status, 403);
    t.equal(denied.body.error.code, 'insufficient_scope');
    t.equal((await reader.patch(`/v1/tier_programs/${id}`, { name: 'X' })).body.error.code, 'insufficient_scope');
    const other = await tenant.admin.post('/v1/api_keys', { kind: 'secret', name: 'customers only', scopes: ['customers:read'] }, idem());
    const stranger = anon.with({ authorization: `Bearer ${other.body.token}` });
    t.equal((await stranger.get(`/v1/tier_programs/${id}`)).body.error.code, 'insufficient_scope');
    t.equal((await anon.get('/v1/tier_programs')).status, 401);
  });

  await t.test('patch with If-Match: edits, stale_write, validation', async (t) => {
    const r = await api.patch(
      `/v1/tier_programs/${id}`,
      { name: 'Status 2', levels: [...levels, { key: 'platinum', title: 'Platinum', threshold: 20000 }], downgrade_check: null },
      { 'if-match': '"1"' },
    );
    t.equal(r.status, 200);
    t.match(r.body, { name: 'Status 2', version: 2, downgrade_check: null });
    t.equal(r.body.levels.length, 4);
    t.equal(r.headers.get('etag'), '"2"');

    const stale = await api.patch(`/v1/tier_programs/${id}`, { name: 'Late' }, { 'if-match': '"1"' });
    t.equal(stale.status, 409);
    t.equal(stale.body.error.code, 'stale_write');
    const badTag = await api.patch(`/v1/tier_programs/${id}`, { name: 'Late' }, { 'if-match': 'nope' });
    t.equal(badTag.body.error.code, 'validation_failed');
    t.equal(badTag.body.error.param, 'If-Match');

    const badLevels = await api.patch(`/v1/tier_programs/${id}`, { levels: [{ key: 'a', title: 'A', threshold: 10 }] }, { 'if-match': '"2"' });
    t.equal(badLevels.body.error.code, 'validation_failed');
    t.equal(badLevels.body.error.param, 'levels[0].threshold');
    const unknownField = await api.patch(`/v1/tier_programs/${id}`, { currency: 'gems' }, { 'if-match': '"2"' });
    t.equal(unknownField.body.error.code, 'validation_failed');
    const badReassign = await api.patch(`/v1/tier_programs/${id}`, { levels: levels.slice(0, 2), reassign_to: 'gold' }, { 'if-match': '"2"' });
    t.equal(badReassign.body.error.code, 'validation_failed');
    t.equal(badReassign.body.error.param, 'reassign_to');
    // A body naming nothing to change is refused, as segments and campaigns refuse it.
    for (const body of [{}, { reevaluate: true }, { reassign_to: 'gold' }]) {
      const nothing = await api.patch(`/v1/tier_programs/${id}`, body);
      t.equal(nothing.status, 400, JSON.stringify(body));
      t.equal(nothing.body.error.code, 'validation_failed', JSON.stringify(body));
      t.match(nothing.body.error.message, 'Name at least one of name, basis, rolling_days, levels, downgrade_check', JSON.stringify(body));
    }
    const kept = await api.get(`/v1/tier_programs/${id}`);
    t.equal(kept.body.version, 2, 'failed edits change nothing');
    t.equal(kept.headers.get('etag'), '"2"', 'the ETag a client holds stays valid');
  });

  await t.test('guards: basis and rolling_days need reevaluate; level removal is free with 0 holders', async (t) => {
    const basis = await api.patch(`/v1/tier_programs/${id}`, { basis: 'balance' }, { 'if-match': '"2"' });
    t.equal(basis.status, 409);
    t.equal(basis.body.error.code, 'resource_in_use');
    t.equal(basis.body.error.param, 'basis');
    const ok = await api.patch(`/v1/tier_programs/${id}`, { basis: 'balance', reevaluate: true }, { 'if-match': '"2"' });
    t.equal(ok.status, 200);
    t.match(ok.body, { basis: 'balance', version: 3 });

    const rollingDays = await api.patch('/v1/tier_programs/season', { rolling_days: 30 });
    t.equal(rollingDays.status, 409);
    t.equal(rollingDays.body.error.code, 'resource_in_use');
    t.equal(rollingDays.body.error.param, 'rolling_days');
    const toRolling = await api.patch(`/v1/tier_programs/${id}`, { basis: 'earned_rolling_days', reevaluate: true }, { 'if-match': '"3"' });
    t.equal(toRolling.body.error.param, 'rolling_days', 'a rolling basis needs rolling_days');
    const withDays = await api.patch('/v1/tier_programs/season', { rolling_days: 30, reevaluate: true });
    t.match(withDays.body, { rolling_days: 30, version: 2 });
    const leaveRolling = await api.patch('/v1/tier_programs/season', { basis: 'balance', reevaluate: true });
    t.match(leaveRolling.body, { basis: 'balance', rolling_days: null }, 'leaving a rolling basis drops rolling_days');

    // No customer holds a level of this program, so removal needs no reassign_to.
    const removed = await api.patch(`/v1/tier_programs/${id}`, { levels: levels.slice(0, 2) }, { 'if-match': '"3"' });
    t.equal(removed.status, 200);
    t.same(
      removed.body.levels.map((l: { key: string }) => l.key),
      ['bronze', 'silver'],
    );
  });
});

t.test('catalog guards with a stub holder count', async (t) => {
  const { sql } = await sqlForTest(t, 'postgres');
  const held: Record<string, number> = { gold: 3 };
  const asked: string[] = [];
  const holders: HoldersByLevel = async (_env, program) => {
    asked.push(program.id);
    return held;
  };
  const currencies = { all: async () => [{ key: 'coins' } as Currency] };
  const catalog = new TierProgramCatalog(sql, new MemoryBus(), currencies, holders);
  await catalog.start();
  const env = 'env_test';
  const p = await catalog.create(env, { key: 'vip', name: 'VIP', currency: 'coins', basis: 'lifetime_earned', rollingDays: null, levels, downgradeCheck: null });
  t.same((await catalog.all(env)).map((x) => x.key), ['vip']);

  const code = async (fn: () => Promise<unknown>) => {
    try {
      await fn();
      return 'ok';
    } catch (err) {
      return err instanceof ApiError ? `${err.code}:${err.param}` : String(err);
    }
  };

  t.equal(await code(() => catalog.update(env, p.id, { levels: levels.slice(0, 2) })), 'resource_in_use:levels', 'gold is held by 3');
  t.same(asked, [p.id]);
  t.equal(await code(() => catalog.update(env, p.id, { levels: [levels[0]!, levels[2]!] })), 'ok', 'silver is held by nobody');
  t.equal(await code(() => catalog.update(env, 'vip', { levels: [levels[0]!] }, { reassignTo: 'bronze', expectedVersion: 1 })), 'stale_write:undefined');
  const moved = await catalog.update(env, 'vip', { levels: [levels[0]!] }, { reassignTo: 'bronze', expectedVersion: 2 });
  t.same(
    moved.levels.map((l) => l.key),
    ['bronze'],
  );
  t.equal(moved.version, 3);
  t.same((await catalog.all(env))[0]!.levels.length, 1, 'the cache dropped the old definition');

  asked.length = 0;
  t.equal(await code(() => catalog.update(env, p.id, { name: 'Renamed' })), 'ok');
  t.same(asked, [], 'holders are only counted when an edit removes levels');
  t.equal(await code(() => catalog.get('env_other', p.id)), 'resource_not_found:id');
});

t.test('held levels: removal needs reassign_to, which moves the holders', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const p = await api.post('/v1/tier_programs', { key: 'status', name: 'Status', currency: 'coins', basis: 'lifetime_earned', levels }, idem());
  t.equal(p.status, 201);
  const customers: string[] = [];
  for (const [ext, amount] of [['ann', 1500], ['ben', 1200], ['cat', 10]] as const) {
    const c = await api.post('/v1/customers', { external_id: ext }, idem());
    customers.push(c.body.id);
    const e = await api.post('/v1/ledger_entries', { customer_id: c.body.id, currency: 'coins', amount, reason: 'welcome' }, idem());
    t.equal(e.status, 201);
  }
  const levelOf = async (id: string) => (await api.get(`/v1/customers/${id}/state`)).body.tiers.find((x: { program_id: string }) => x.program_id === p.body.id)?.level;
  t.equal(await levelOf(customers[0]!), 'silver');

  const held = await api.patch(`/v1/tier_programs/${p.body.id}`, { levels: [levels[0], levels[2]] });
  t.equal(held.status, 409);
  t.equal(held.body.error.code, 'resource_in_use');
  t.equal(held.body.error.param, 'levels');
  t.match(held.body.error.message, /held by 2 customer/);
  const unheld = await api.patch(`/v1/tier_programs/${p.body.id}`, { levels: levels.slice(0, 2) });
  t.equal(unheld.status, 200, 'gold is held by nobody: removed freely');

  const moved = await api.patch(`/v1/tier_programs/${p.body.id}`, { levels: [levels[0]], reassign_to: 'bronze' });
  t.equal(moved.status, 200);
  t.equal(await levelOf(customers[0]!), 'bronze', 'the holders were moved to reassign_to');
  t.equal(await levelOf(customers[1]!), 'bronze');
  t.equal(await levelOf(customers[2]!), 'bronze', 'others keep their level');

  // A basis change with reevaluate: true re-places every holder at once, even before a downgrade check.
  const vip = await api.post(
    '/v1/tier_programs',
    { key: 'vip', name: 'VIP', currency: 'coins', basis: 'lifetime_earned', levels: levels.slice(0, 2), downgrade_check: { every_days: 30 } },
    idem(),
  );
  const vipLevel = async (id: string) => (await api.get(`/v1/customers/${id}/state`)).body.tiers.find((x: { program_id: string }) => x.program_id === vip.body.id)?.level;
  await api.post('/v1/ledger_entries', { customer_id: customers[0], currency: 'coins', amount: 1, reason: 'bonus' }, idem());
  await api.post('/v1/ledger_entries', { customer_id: customers[0], currency: 'coins', amount: -1451, reason: 'spent' }, idem());
  t.equal(await vipLevel(customers[0]!), 'silver', 'lifetime earned 1501 keeps silver');
  const rebased = await api.patch(`/v1/tier_programs/${vip.body.id}`, { basis: 'balance', reevaluate: true });
  t.equal(rebased.status, 200);
  t.equal(await vipLevel(customers[0]!), 'bronze', 'a balance of 50 places bronze at once');
});

t.test('rolling tiers: earnings by day, upgrade at once, downgrade at the due check as the test clock moves', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const p = await api.post(
    '/v1/tier_programs',
    { key: 'season', name: 'Season', currency: 'coins', basis: 'earned_rolling_days', rolling_days: 7, levels, downgrade_check: { every_days: 1 } },
    idem(),
  );
  t.equal(p.status, 201);
  const tooLong = await api.post(
    '/v1/tier_programs',
    { key: 'year', name: 'Year', currency: 'coins', basis: 'earned_rolling_days', rolling_days: 400, levels },
    idem(),
  );
  t.equal(tooLong.body.error.param, 'rolling_days', 'earnings by day are kept for 366 days at most');

  const c = await api.post('/v1/customers', { external_id: 'dee' }, idem());
  const credit = (amount: number) => api.post('/v1/ledger_entries', { customer_id: c.body.id, currency: 'coins', amount, reason: 'match' }, idem());
  const level = async () => (await api.get(`/v1/customers/${c.body.id}/state`)).body.tiers.find((x: { program_id: string }) => x.program_id === p.body.id)?.level;

  t.equal((await credit(600)).status, 201);
  t.equal(await level(), 'bronze');
  await api.post('/v1/test_clock/advance', { seconds: 3 * 86_400 });
  await credit(600);
  t.equal(await level(), 'silver', '1200 earned within 7 days');

  // Five days later the first 600 left the window: the daily check drops the customer to bronze.
  await api.post('/v1/test_clock/advance', { seconds: 5 * 86_400 });
  t.equal(await level(), 'bronze', 'the due downgrade check re-placed the customer');
  await credit(5000);
  t.equal(await level(), 'gold');
  await api.post('/v1/test_clock/advance', { seconds: 8 * 86_400 });
  t.equal(await level(), 'bronze', 'nothing earned in the last 7 days');
});

t.test('a customer never placed in a program reads the level it qualifies for now: rules, simulate, the state view', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  // p1 earned 1200 (100 spent) before any program existed; p6 never earned anything.
  const p1 = (await api.post('/v1/customers', { external_id: 'p1' }, idem())).body.id as string;
  const p6 = (await api.post('/v1/customers', { external_id: 'p6' }, idem())).body.id as string;
  t.equal((await api.post('/v1/ledger_entries', { customer_id: p1, currency: 'coins', amount: 1200, reason: 'history' }, idem())).status, 201);
  t.equal((await api.post('/v1/ledger_entries', { customer_id: p1, currency: 'coins', amount: -100, reason: 'spent' }, idem())).status, 201);
  const status = (await api.post('/v1/tier_programs', { key: 'status', name: 'Status', currency: 'coins', basis: 'lifetime_earned', levels }, idem())).body;
  const recent = (
    await api.post('/v1/tier_programs', { key: 'recent', name: 'Recent', currency: 'coins', basis: 'earned_rolling_days', rolling_days: 30, levels }, idem())
  ).body;
  const wallet = (await api.post('/v1/tier_programs', { key: 'wallet', name: 'Wallet', currency: 'coins', basis: 'balance', levels }, idem())).body;

  // The state view lists every program: never placed, since is null and the level is the qualified one.
  const tiersOf = async (id: string) =>
    Object.fromEntries(((await api.get(`/v1/customers/${id}/state`)).body.tiers as Array<{ program_id: string; level: string; since: string | null }>).map((x) => [x.program_id, x]));
  t.same(await tiersOf(p1), {
    [status.id]: { program_id: status.id, level: 'silver', since: null },
    [recent.id]: { program_id: recent.id, level: 'silver', since: null },
    [wallet.id]: { program_id: wallet.id, level: 'silver', since: null },
  });
  t.same(await tiersOf(p6), {
    [status.id]: { program_id: status.id, level: 'bronze', since: null },
    [recent.id]: { program_id: recent.id, level: 'bronze', since: null },
    [wallet.id]: { program_id: wallet.id, level: 'bronze', since: null },
  });

  // Rules read the same levels, in simulate and on events.
  const probe = async (name: string, level: string) => {
    const definition = {
      schema: 'service.rule/v2',
      trigger: { kind: 'customer_event', event: `tier.${name}` },
      conditions: { all: [{ path: 'customer.tiers.status', op: 'eq', value: level }, { path: 'customer.tiers.recent', op: 'eq', value: level }] },
      actions: [{ type: 'item.grant', item: `${name}_badge`, quantity: 1 }],
    };
    const r = (await api.post('/v1/rules', { name, definition }, idem())).body;
    t.equal((await api.post(`/v1/rules/${r.id}/publish`)).status, 200);
    return r.id as string;
  };
  const silverRule = await probe('silver', 'silver');
  const bronzeRule = await probe('bronze', 'bronze');
  const simulate = async (ruleId: string, event: string, customer: string) =>
    (await api.post(`/v1/rules/${ruleId}/simulate`, { event: { name: event, properties: {} }, customer_id: customer })).body;
  const sp1 = await simulate(silverRule, 'tier.silver', 'p1');
  t.match(sp1.trace.outcome, { fired: true }, 'p1 qualifies for silver');
  t.match(sp1.trace.steps.find((s: { check: string }) => s.check === 'condition'), { path: 'customer.tiers.status', actual: 'silver', found: true, pass: true });
  const sp6 = await simulate(silverRule, 'tier.silver', 'p6');
  t.match(sp6.trace.steps.find((s: { check: string }) => s.check === 'condition'), { actual: 'bronze', found: true, pass: false }, 'p6 reads bronze, not nothing');
  t.match((await simulate(bronzeRule, 'tier.bronze', 'p6')).trace.outcome, { fired: true }, 'every customer qualifies for the first level');
  t.match((await simulate(bronzeRule, 'tier.bronze', 'never-seen')).trace.outcome, { fired: true }, 'so does a customer an event would create');
  let n = 0;
  const send = (customer: string, name: string) =>
    api.post('/v1/events', { id: `tp-${++n}`, name, customer_id: customer, occurred_at: new Date(Date.now() - 1000).toISOString(), mode: 'sync' });
  t.match((await send('p1', 'tier.silver')).body.effects, [{ type: 'rule.fired', rule_id: silverRule }, { type: 'item.granted' }]);
  t.match((await send('p6', 'tier.bronze')).body.effects, [{ type: 'rule.fired', rule_id: bronzeRule }, { type: 'item.granted' }]);
  t.match((await send('p6', 'tier.silver')).body.effects, [{ type: 'rule.skipped', reason: 'conditions_not_met' }]);
  t.match((await send('fresh', 'tier.bronze')).body.effects, [{ type: 'rule.fired', rule_id: bronzeRule }, { type: 'item.granted' }], 'a new customer');

  // Once placed (a credit in the program's currency), the state view shows the placement and its since.
  t.equal((await api.post('/v1/ledger_entries', { customer_id: p6, currency: 'coins', amount: 5, reason: 'bonus' }, idem())).status, 201);
  const placed = await tiersOf(p6);
  t.match(placed[status.id], { level: 'bronze', since: String }, 'placed: since is set');
});

t.test('an edit whose move of holders stops is finished by a repeat of the PATCH or by the scheduler; tier.changed goes up when it is up', async (t) => {
  const { anon, service } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const make = async (key: string) => (await api.post('/v1/tier_programs', { key, name: key, currency: 'coins', basis: 'lifetime_earned', levels }, idem())).body.id as string;
  const first = await make('first');
  const second = await make('second');
  const ids: string[] = [];
  for (const [ext, amount] of [['s1', 1200], ['s2', 1500], ['s3', 1100], ['g1', 6000]] as const) {
    const c = await api.post('/v1/customers', { external_id: ext }, idem());
    ids.push(c.body.id);
    t.equal((await api.post('/v1/ledger_entries', { customer_id: c.body.id, currency: 'coins', amount, reason: 'welcome' }, idem())).status, 201);
  }
  const levelsOf = async (program: string) =>
    Promise.all(ids.map(async (id) => (await api.get(`/v1/customers/${id}/state`)).body.tiers.find((x: { program_id: string }) => x.program_id === program)?.level));
  t.same(await levelsOf(first), ['silver', 'silver', 'silver', 'gold']);

  // Given the move fails right after the edit is stored (an injected failure of every move command),
  const engine = service.engine;
  const execute = engine.execute.bind(engine);
  let failing = true;
  engine.execute = (call) =>
    failing && call.command.kind === 'tier.reassign' ? Promise.resolve({ ok: false, code: 'internal_error', message: 'injected' } as const) : execute(call);
  t.teardown(() => {
    engine.execute = execute;
  });
  const edit = { levels: [levels[0], levels[2]], reassign_to: 'gold' };
  const stopped = await api.patch(`/v1/tier_programs/${first}`, edit);
  t.equal(stopped.status, 500);
  t.equal(stopped.body.error.code, 'internal_error');
  t.match(stopped.body.error.message, /version 2 is stored, but moving its customers did not finish/);
  t.match((await api.get(`/v1/tier_programs/${first}`)).body, { version: 2, levels: [{ key: 'bronze' }, { key: 'gold' }] }, 'the edit is stored');
  t.same(await levelsOf(first), ['silver', 'silver', 'silver', 'gold'], 'nobody moved');

  // when the same PATCH is repeated, then it finishes the move first: every holder is on a level the program has.
  failing = false;
  const repeated = await api.patch(`/v1/tier_programs/${first}`, edit);
  t.equal(repeated.status, 200);
  t.equal(repeated.body.version, 3);
  t.same(await levelsOf(first), ['gold', 'gold', 'gold', 'gold'], 'moved to reassign_to');

  // Given another stopped move (silver removed, reassign_to bronze),
  failing = true;
  t.equal((await api.patch(`/v1/tier_programs/${second}`, { levels: [levels[0], levels[2]], reassign_to: 'bronze' })).status, 500);
  t.same(await levelsOf(second), ['silver', 'silver', 'silver', 'gold']);
  // when a holder still on silver earns enough for gold, then it is a move up from Silver (not down),
  const rule = await api.post(
    '/v1/rules',
    { name: 'big win', definition: { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: 'big.win' }, actions: [{ type: 'points.award', currency: 'coins', amount: 4000 }] } },
    idem(),
  );
  t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);
  const win = await api.post('/v1/events', { id: 'win-1', name: 'big.win', customer_id: 's1', occurred_at: new Date(Date.now() - 1000).toISOString(), mode: 'sync' });
  t.equal(win.status, 200);
  const changed = win.body.effects.filter((e: { type: string; program_id?: string }) => e.type === 'tier.changed' && e.program_id === second);
  t.match(changed, [{ level: 'gold', previous_level: 'silver', direction: 'up' }]);
  t.equal(changed.length, 1);
  // and the scheduler (here: a test clock advance, which runs the same jobs) moves the others.
  failing = false;
  t.equal((await api.post('/v1/test_clock/advance', { seconds: 60 })).status, 200);
  t.same(await levelsOf(second), ['gold', 'bronze', 'bronze', 'gold'], 'the rest moved to reassign_to');
  const next = await api.patch(`/v1/tier_programs/${second}`, { name: 'Second' });
  t.equal(next.status, 200, 'nothing is owed any more: the next edit goes through');
});

t.test('a downgrade check added or shortened schedules the current holders', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  t.equal((await api.post('/v1/currencies', { key: 'stars', name: 'Stars' }, idem())).status, 201);
  const rolling = [
    { key: 'none', title: 'None', threshold: 0 },
    { key: 'active', title: 'Active', threshold: 50 },
  ];
  const program = async (key: string, downgradeCheck: { every_days: number } | null) =>
    (await api.post('/v1/tier_programs', { key, name: key, currency: 'stars', basis: 'earned_rolling_days', rolling_days: 7, levels: rolling, downgrade_check: downgradeCheck }, idem())).body
      .id as string;
  const added = await program('added', null);
  const shortened = await program('shortened', { every_days: 30 });
  const c = await api.post('/v1/customers', { external_id: 'p11' }, idem());
  t.equal((await api.post('/v1/ledger_entries', { customer_id: c.body.id, currency: 'stars', amount: 60, reason: 'x' }, idem())).status, 201);
  const levelIn = async (p: string) => (await api.get(`/v1/customers/${c.body.id}/state`)).body.tiers.find((x: { program_id: string }) => x.program_id === p)?.level;
  t.equal(await levelIn(added), 'active');
  t.equal(await levelIn(shortened), 'active');

  // Given a check every day is added to one program and the other's goes from 30 days to 1,
  t.equal((await api.patch(`/v1/tier_programs/${added}`, { downgrade_check: { every_days: 1 } })).status, 200);
  t.equal((await api.patch(`/v1/tier_programs/${shortened}`, { downgrade_check: { every_days: 1 } })).status, 200);
  // when 10 days pass with nothing earned in the last 7,
  t.equal((await api.post('/v1/test_clock/advance', { seconds: 10 * 86_400 })).status, 200);
  // then the holder was checked and dropped in both.
  t.equal(await levelIn(added), 'none', 'a check added later reaches the existing holders');
  t.equal(await levelIn(shortened), 'none', 'a shorter check replaces the old 30-day date');
});

t.test('deleted and merged customers hold no level: removing a level only they held is free, counts leave them out', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  t.equal((await api.post('/v1/currencies', { key: 'gems', name: 'Gems' }, idem())).status, 201);
  const vipLevels = [
    { key: 'base', title: 'Base', threshold: 0 },
    { key: 'star', title: 'Star', threshold: 1 },
  ];
  const vip = (await api.post('/v1/tier_programs', { key: 'vip', name: 'VIP', currency: 'gems', basis: 'lifetime_earned', levels: vipLevels }, idem())).body.id as string;
  const star = async (ext: string) => {
    const c = await api.post('/v1/customers', { external_id: ext }, idem());
    t.equal((await api.post('/v1/ledger_entries', { customer_id: c.body.id, currency: 'gems', amount: 5, reason: 'x' }, idem())).status, 201);
    return c.body.id as string;
  };
  const removeStar = () => api.patch(`/v1/tier_programs/${vip}`, { levels: [vipLevels[0]] });

  // Given the only holder of star is deleted, removing star needs no reassign_to.
  const p4 = await star('p4');
  t.equal((await api.delete(`/v1/customers/${p4}`)).status, 204);
  const removed = await removeStar();
  t.equal(removed.status, 200, JSON.stringify(removed.body));

  // Given star again, held by p9 and by p8, which is then merged into p9: one holder, not two.
  t.equal((await api.patch(`/v1/tier_programs/${vip}`, { levels: vipLevels })).status, 200);
  const p8 = await star('p8');
  const p9 = await star('p9');
  t.match(await api.post(`/v1/customers/${p9}/aliases`, { alias: 'p8' }, idem()), { status: 201, body: { merged_from: p8 } });
  const held = await removeStar();
  t.equal(held.status, 409);
  t.equal(held.body.error.code, 'resource_in_use');
  t.match(held.body.error.message, /held by 1 customer\(s\)/, 'the merged customer is not counted');
});
