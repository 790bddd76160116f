// Black-box API tests of challenges: the catalog routes and their errors (idempotency, validation
// with the wire path, If-Match, status transitions, delete rules), progress from events (automatic
// and explicit enrollment, contribution-key dedup, qualifying conditions, completion exactly once
// with its award in the same journal entry), a daily period rolling over with the test clock,
// rule-driven progress, audited revoke and reevaluate, the state view and export, and the end sweep.
import t from 'tap';
import { openSql } from '../../src/persistence/sql/db.js';
import { databaseUrl, idem, signUp, startForTest } from '../helpers/service.js';

const now = () => new Date(Date.now() - 1000).toISOString();

const matches = {
  name: 'Play 3 ranked matches',
  qualifying: { event: 'match.completed', conditions: { path: 'event.properties.mode', op: 'eq', value: 'ranked' } },
  target: 3,
  contribution_key: 'event.properties.match_id',
  completion_actions: [{ type: 'points.award', currency: 'coins', amount: 100 }],
  status: 'active',
};

t.test('challenges over the API', async (t) => {
  const { anon, config } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const sql = openSql({ url: databaseUrl, schema: config.DB_SCHEMA, max: 1 });
  t.teardown(() => sql.end());

  let counter = 0;
  const send = (customer: string, name: string, properties: Record<string, unknown> = {}) =>
    api.post('/v1/events', { id: `e-${++counter}`, name, customer_id: customer, occurred_at: now(), properties, mode: 'sync' });
  const customerId = async (ext: string) => (await api.get(`/v1/customers?external_id=${ext}`)).body.data[0].id as string;
  const balance = async (id: string) => (await api.get(`/v1/customers/${id}/balances`)).body.data[0]?.available ?? 0;

  await t.test('create: wire shape, ETag, defaults, idempotent replay', async (t) => {
    const key = idem();
    const r = await api.post('/v1/challenges', matches, key);
    t.equal(r.status, 201);
    t.match(r.body, {
      id: /^chl_/,
      name: matches.name,
      qualifying: matches.qualifying,
      target: 3,
      period: 'none',
      contribution_key: 'event.properties.match_id',
      enrollment: 'automatic',
      repeatable: false,
      completion_actions: matches.completion_actions,
      campaign_id: null,
      starts_at: null,
      ends_at: null,
      status: 'active',
      version: 1,
      created_at: String,
      updated_at: String,
    });
    t.equal(r.headers.get('etag'), '"1"');
    const again = await api.post('/v1/challenges', matches, key);
    t.equal(again.body.id, r.body.id, 'the same Idempotency-Key answers as the first time');
    const reused = await api.post('/v1/challenges', { ...matches, name: 'other' }, key);
    t.equal(reused.body.error.code, 'idempotency_key_reused');
    const noKey = await api.post('/v1/challenges', matches);
    t.equal(noKey.status, 400);
    t.equal(noKey.body.error.code, 'idempotency_key_required');
  });

  await t.test('create errors: validation_failed names the wire field', async (t) => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ target: 0 }, 'target'],
      [{ target: 5000 }, 'target'],
      [{ qualifying: { event: 'Bad Name' } }, 'qualifying.event'],
      [{ qualifying: { event: 'match.completed', conditions: { path: 'event.properties.mode', op: 'nope', value: 1 } } }, 'qualifying.conditions.op'],
      [{ qualifying: { event: 'match.completed', conditions: { path: 'somewhere.else', op: 'eq', value: 1 } } }, 'qualifying.conditions.path'],
      [{ completion_actions: [{ type: 'points.award', currency: 'coins', amount_from: 'event.properties.score' }] }, 'completion_actions[0].amount_from'],
      [{ completion_actions: [{ type: 'points.award', currency: 'coins' }] }, 'completion_actions[0].amount'],
      [{ completion_actions: [{ type: 'teleport' }] }, 'completion_actions[0].type'],
      [{ completion_actions: [{ type: 'challenge.progress', challenge_id: 'chl_x' }] }, 'completion_actions[0].type'],
      [{ contribution_key: 'match_id' }, 'contribution_key'],
      [{ period: 'hourly' }, 'period'],
      [{ enrollment: 'invite' }, 'enrollment'],
      [{ starts_at: '2030-01-02T00:00:00Z', ends_at: '2030-01-01T00:00:00Z' }, 'ends_at'],
      [{ status: 'paused' }, 'status'],
      [{ name: '' }, 'name'],
    ];
    for (const [patch, param] of cases) {
      const r = await api.post('/v1/challenges', { ...matches, ...patch }, idem());
      t.equal(r.status, 400, JSON.stringify(patch));
      t.equal(r.body.error.code, 'validation_failed', JSON.stringify(patch));
      t.equal(r.body.error.param, param, JSON.stringify(patch));
    }
  });

  await t.test('list with status filter and pagination; get; not found', async (t) => {
    const draft = await api.post('/v1/challenges', { ...matches, name: 'Draft one', status: 'draft' }, idem());
    t.equal(draft.body.status, 'draft');
    const drafts = await api.get('/v1/challenges?status=draft');
    t.same(drafts.body.data.map((c: { id: string }) => c.id), [draft.body.id]);
    const page1 = await api.get('/v1/challenges?limit=1');
    t.equal(page1.body.data.length, 1);
    t.equal(page1.body.has_more, true);
    const page2 = await api.get(`/v1/challenges?limit=1&cursor=${page1.body.next_cursor}`);
    t.not(page2.body.data[0].id, page1.body.data[0].id);
    t.equal((await api.get('/v1/challenges?cursor=@@@')).body.error.code, 'invalid_cursor');
    t.equal((await api.get('/v1/challenges?status=done')).body.error.param, 'status');
    const one = await api.get(`/v1/challenges/${draft.body.id}`);
    t.equal(one.status, 200);
    t.equal(one.headers.get('etag'), '"1"');
    const missing = await api.get('/v1/challenges/chl_nope');
    t.equal(missing.status, 404);
    t.equal(missing.body.error.code, 'resource_not_found');
  });

  await t.test('PATCH: If-Match, transitions, validation; DELETE rules', async (t) => {
    const c = (await api.post('/v1/challenges', { ...matches, name: 'Lifecycle', status: 'draft' }, idem())).body;
    const stale = await api.patch(`/v1/challenges/${c.id}`, { name: 'x' }, { 'if-match': '"7"' });
    t.equal(stale.status, 409);
    t.equal(stale.body.error.code, 'stale_write');
    const bad = await api.patch(`/v1/challenges/${c.id}`, { status: 'paused' }, { 'if-match': '"1"' });
    t.equal(bad.status, 409);
    t.equal(bad.body.error.code, 'invalid_state');
    t.equal(bad.body.error.param, 'status');
    const invalid = await api.patch(`/v1/challenges/${c.id}`, { target: -1 });
    t.equal(invalid.body.error.code, 'validation_failed');
    t.equal(invalid.body.error.param, 'target');
    // A body naming nothing to change is refused, as the other catalog PATCHes refuse it.
    const nothing = await api.patch(`/v1/challenges/${c.id}`, {}, { 'if-match': '"1"' });
    t.same([nothing.status, nothing.body.error.code], [400, 'validation_failed']);
    t.match(nothing.body.error.message, 'Name at least one of name, qualifying, target, period, contribution_key');
    const kept = await api.get(`/v1/challenges/${c.id}`);
    t.equal(kept.body.version, 1, 'an empty PATCH keeps the version');
    t.equal(kept.headers.get('etag'), '"1"', 'the ETag a client holds stays valid');
    const cleared = await api.patch(`/v1/challenges/${c.id}`, { contribution_key: null }, { 'if-match': '"1"' });
    t.match([cleared.status, cleared.body], [200, { contribution_key: null, version: 2 }], 'null is a change');
    const active = await api.patch(`/v1/challenges/${c.id}`, { status: 'active', name: 'Lifecycle 2' }, { 'if-match': '"2"' });
    t.equal(active.status, 200);
    t.match(active.body, { status: 'active', name: 'Lifecycle 2', version: 3 });
    t.equal(active.headers.get('etag'), '"3"');
    const del = await api.delete(`/v1/challenges/${c.id}`);
    t.equal(del.status, 409, 'an active challenge is not deleted');
    t.equal(del.body.error.code, 'invalid_state');
    t.equal((await api.patch(`/v1/challenges/${c.id}`, { status: 'paused' })).body.status, 'paused');
    t.equal((await api.patch(`/v1/challenges/${c.id}`, { status: 'active' })).body.status, 'active');
    t.equal((await api.patch(`/v1/challenges/${c.id}`, { status: 'ended' })).body.status, 'ended');
    const afterEnd = await api.patch(`/v1/challenges/${c.id}`, { status: 'active' });
    t.equal(afterEnd.body.error.code, 'invalid_state', 'ended is final');
    t.equal((await api.delete(`/v1/challenges/${c.id}`)).status, 204, 'an ended challenge can be deleted');
    t.equal((await api.get(`/v1/challenges/${c.id}`)).status, 404);
    const draft = (await api.post('/v1/challenges', { ...matches, name: 'Throwaway', status: 'draft' }, idem())).body;
    t.equal((await api.delete(`/v1/challenges/${draft.id}`)).status, 204, 'a draft can be deleted');
    t.equal((await api.delete(`/v1/challenges/${draft.id}`)).body.error.code, 'resource_not_found');
  });

  await t.test('a challenge that a non-archived rule progresses is not deleted (409 resource_in_use naming the rules)', async (t) => {
    const ch = (await api.post('/v1/challenges', { name: 'Progressed', qualifying: { event: 'progressed.never' }, target: 5 }, idem())).body;
    const progress = (challengeId: string) => ({
      schema: 'service.rule/v2',
      trigger: { kind: 'customer_event', event: 'progressed.go' },
      actions: [{ type: 'challenge.progress', challenge_id: challengeId }],
    });
    const drafted = (await api.post('/v1/rules', { name: 'drafted', definition: progress(ch.id) }, idem())).body;
    const live = (await api.post('/v1/rules', { name: 'live', definition: progress(ch.id) }, idem())).body;
    t.equal((await api.post(`/v1/rules/${live.id}/publish`)).status, 200);
    // Another challenge id that merely starts the same way names something else.
    t.equal((await api.post('/v1/rules', { name: 'other', definition: progress(`${ch.id}X`) }, idem())).status, 201);
    const refused = await api.delete(`/v1/challenges/${ch.id}`);
    t.equal(refused.status, 409);
    t.match(refused.body.error, { code: 'resource_in_use', param: 'id', details: { rules: [drafted.id, live.id].sort() } });
    t.match(refused.body.error.message, `rule ${live.id}`);
    t.equal((await api.get(`/v1/challenges/${ch.id}`)).status, 200, 'still there');
    // An archived rule names nothing; a draft edited away still leaves the active version naming it.
    t.equal((await api.post(`/v1/rules/${drafted.id}/archive`)).status, 200);
    const other = { ...progress(ch.id), actions: [{ type: 'item.grant', item: 'flag', quantity: 1 }] };
    t.equal((await api.patch(`/v1/rules/${live.id}`, { definition: other })).status, 200);
    t.same((await api.delete(`/v1/challenges/${ch.id}`)).body.error.details, { rules: [live.id] }, 'the active version still progresses it');
    t.equal((await api.post(`/v1/rules/${live.id}/publish`)).status, 200);
    t.equal((await api.delete(`/v1/challenges/${ch.id}`)).status, 204, 'no rule progresses it any more');
  });

  await t.test('a completion award naming a missing currency is 404 naming the field (create, PATCH, activation)', async (t) => {
    const awards = (...currencies: string[]) => currencies.map((currency) => ({ type: 'points.award', currency, amount: 5 }));
    // Its own qualifying event: the challenges here never meet the events of the later subtests.
    const gems = { name: 'Gems', qualifying: { event: 'gem.found' }, target: 2 };
    const created = await api.post('/v1/challenges', { ...gems, status: 'active', completion_actions: awards('coins', 'gems') }, idem());
    t.equal(created.status, 404);
    t.equal(created.body.error.code, 'resource_not_found');
    t.equal(created.body.error.param, 'completion_actions[1].currency');
    const draft = await api.post('/v1/challenges', { ...gems, completion_actions: awards('gems') }, idem());
    t.equal(draft.body.error.param, 'completion_actions[0].currency', 'a draft challenge too');
    const shape = await api.post('/v1/challenges', { ...gems, target: 0, completion_actions: awards('gems') }, idem());
    t.equal(shape.body.error.code, 'validation_failed', 'shape problems come first');
    t.notOk(
      (await api.get('/v1/challenges?limit=100')).body.data.some((c: { name: string }) => c.name === 'Gems'),
      'nothing was created',
    );

    const c = (await api.post('/v1/challenges', { ...gems, name: 'Coins only', completion_actions: awards('coins') }, idem())).body;
    const patched = await api.patch(`/v1/challenges/${c.id}`, { completion_actions: awards('gems') });
    t.equal(patched.status, 404);
    t.equal(patched.body.error.param, 'completion_actions[0].currency');
    t.equal((await api.get(`/v1/challenges/${c.id}`)).body.version, 1, 'unchanged');

    // A challenge stored before this check (written here directly) can still be ended, not activated.
    await sql`update challenges set completion_actions = ${sql.json(awards('gems'))} where id = ${c.id}`;
    const activate = await api.patch(`/v1/challenges/${c.id}`, { status: 'active' });
    t.equal(activate.status, 404, 'activation checks the stored awards');
    t.equal(activate.body.error.param, 'completion_actions[0].currency');
    t.equal((await api.patch(`/v1/challenges/${c.id}`, { name: 'Renamed' })).status, 200, 'other edits are not blocked');

    t.equal((await api.post('/v1/currencies', { key: 'gems', name: 'Gems' }, idem())).status, 201);
    t.equal((await api.patch(`/v1/challenges/${c.id}`, { status: 'active' })).status, 200, 'activated once the currency exists');
    const ok = await api.post('/v1/challenges', { ...gems, completion_actions: awards('coins', 'gems') }, idem());
    t.equal(ok.status, 201);
    t.equal((await api.patch(`/v1/challenges/${c.id}`, { status: 'ended' })).status, 200);
  });

  await t.test('events: conditions, contribution-key dedup, completion once with its award', async (t) => {
    // A fresh environment set: only one active matches challenge matters here.
    const list = (await api.get('/v1/challenges?status=active&limit=200')).body.data as Array<{ id: string; name: string }>;
    const chl = list.find((c) => c.name === matches.name)!.id;
    const first = await send('p1', 'match.completed', { match_id: 'm1', mode: 'ranked' });
    t.equal(first.status, 200);
    t.match(first.body.effects, [{ type: 'challenge.progressed', challenge_id: chl, period_key: 'all', count: 1, target: 3 }]);
    const casual = await send('p1', 'match.completed', { match_id: 'm2', mode: 'casual' });
    t.match(casual.body.effects, [{ type: 'challenge.skipped', challenge_id: chl, reason: 'not_qualifying' }]);
    const dup = await send('p1', 'match.completed', { match_id: 'm1', mode: 'ranked' });
    t.match(dup.body.effects, [{ type: 'challenge.skipped', challenge_id: chl, reason: 'duplicate_contribution' }], 'one match counts once');
    const missing = await send('p1', 'match.completed', { mode: 'ranked' });
    t.match(missing.body.effects, [{ type: 'challenge.skipped', reason: 'contribution_missing' }]);
    t.match((await send('p1', 'match.completed', { match_id: 'm2', mode: 'ranked' })).body.effects, [{ type: 'challenge.progressed', count: 2 }]);
    const done = await send('p1', 'match.completed', { match_id: 'm3', mode: 'ranked' });
    t.match(done.body.effects, [
      { type: 'challenge.progressed', count: 3 },
      { type: 'challenge.completed', challenge_id: chl, period_key: 'all', completions: 1 },
      { type: 'challenge.points_awarded', challenge_id: chl, currency: 'coins', amount: 100, ledger_entry_id: /^le_/ },
    ]);
    const id = await customerId('p1');
    t.equal(await balance(id), 100, 'the award is visible right after the sync answer');
    const after = await send('p1', 'match.completed', { match_id: 'm4', mode: 'ranked' });
    t.match(after.body.effects, [{ type: 'challenge.skipped', reason: 'already_completed' }], 'completes exactly once');
    t.equal(await balance(id), 100);
    const entries = (await api.get(`/v1/customers/${id}/ledger_entries`)).body.data;
    t.match(entries, [{ amount: 100, source_type: 'challenge_completion', source_id: chl }]);

    const state = (await api.get(`/v1/customers/${id}/state`)).body;
    t.same(state.challenges, [{ challenge_id: chl, period_key: 'all', count: 3, status: 'completed' }]);
    const exp = (await api.get(`/v1/customers/${id}/export`)).body;
    t.match(exp.challenge_progress, [{ challenge: chl, period_key: 'all', count: 3, completed_at: String }]);
    const progress = await api.get(`/v1/challenges/${chl}/progress?customer_id=${id}`);
    t.match(progress.body.data, [{ challenge_id: chl, customer_id: id, period_key: 'all', cycle: 1, count: 3, target: 3, status: 'completed' }]);
    t.same(progress.body.data[0].contributions, ['m1', 'm2', 'm3'], 'spec 2.8: the distinct contribution_key values, in the order counted');
    t.same((await api.get(`/v1/challenges/${chl}/progress?status=active`)).body.data, []);
    t.equal((await api.get(`/v1/challenges/${chl}/progress?status=open`)).body.error.param, 'status');
    // A filter naming no customer lists nothing, as the other lists' filters (issuances, rules' campaign_id).
    for (const ref of ['cust_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ', 'nobody-here']) {
      const none = await api.get(`/v1/challenges/${chl}/progress?customer_id=${ref}`);
      t.same([none.status, none.body], [200, { data: [], next_cursor: null, has_more: false }], `unknown customer ${ref}: an empty page`);
    }
    t.equal((await api.get(`/v1/challenges/${chl}/progress?cursor=@@`)).body.error.code, 'invalid_cursor');
    // Nothing else counts once the challenge is paused.
    t.equal((await api.patch(`/v1/challenges/${chl}`, { status: 'paused' })).status, 200);
    t.same((await send('p9', 'match.completed', { match_id: 'm1', mode: 'ranked' })).body.effects, [], 'a paused challenge is not offered events');
  });

  await t.test('explicit enrollment gates progress', async (t) => {
    const c = (
      await api.post(
        '/v1/challenges',
        { name: 'Invite only', qualifying: { event: 'shot.scored' }, target: 5, enrollment: 'explicit', status: 'active' },
        idem(),
      )
    ).body;
    t.match((await send('vip', 'shot.scored')).body.effects, [{ type: 'challenge.skipped', challenge_id: c.id, reason: 'not_enrolled' }]);
    const id = await customerId('vip');
    const enrolled = await api.post(`/v1/challenges/${c.id}/enrollments`, { customer_id: id });
    t.equal(enrolled.status, 201);
    t.match(enrolled.body, { challenge_id: c.id, customer_id: id, enrolled_at: String });
    const twice = await api.post(`/v1/challenges/${c.id}/enrollments`, { customer_id: 'vip' });
    t.equal(twice.status, 200, 'enrolling again (here by external id) answers the enrollment');
    t.equal(twice.body.enrolled_at, enrolled.body.enrolled_at);
    t.match((await send('vip', 'shot.scored')).body.effects, [{ type: 'challenge.progressed', count: 1 }]);
    const list = await api.get(`/v1/challenges/${c.id}/enrollments`);
    t.same(list.body, { data: [{ challenge_id: c.id, customer_id: id, enrolled_at: enrolled.body.enrolled_at }], next_cursor: null, has_more: false });
    t.equal((await api.delete(`/v1/challenges/${c.id}/enrollments/${id}`)).status, 204);
    t.equal((await api.delete(`/v1/challenges/${c.id}/enrollments/${id}`)).body.error.code, 'resource_not_found');
    t.same((await api.get(`/v1/challenges/${c.id}/enrollments`)).body.data, []);
    t.match((await send('vip', 'shot.scored')).body.effects, [{ type: 'challenge.skipped', reason: 'not_enrolled' }]);
    // A customer that does not exist is named by customer_id (id is the challenge in the path).
    for (const ref of ['cust_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ', 'nobody-here']) {
      const nobody = await api.post(`/v1/challenges/${c.id}/enrollments`, { customer_id: ref });
      t.same([nobody.status, nobody.body.error.code, nobody.body.error.param], [404, 'resource_not_found', 'customer_id'], ref);
      const gone = await api.delete(`/v1/challenges/${c.id}/enrollments/${ref}`);
      t.same([gone.status, gone.body.error.code, gone.body.error.param], [404, 'resource_not_found', 'customer_id'], ref);
    }
    t.equal((await api.post(`/v1/challenges/${c.id}/enrollments`, {})).body.error.param, 'customer_id');
    t.equal((await api.post('/v1/challenges/chl_nope/enrollments', { customer_id: id })).body.error.code, 'resource_not_found');
    // A merged customer's enrollment moves to its survivor; the list shows the survivor only.
    await send('enr-m', 'app.opened');
    const merged = await customerId('enr-m');
    t.equal((await api.post(`/v1/challenges/${c.id}/enrollments`, { customer_id: merged })).status, 201);
    const survivor = (await api.post('/v1/customers', { external_id: 'enr-s' }, idem())).body.id as string;
    t.equal((await api.post(`/v1/customers/${survivor}/aliases`, { alias: 'enr-m' }, idem())).status, 201);
    const listed = (await api.get(`/v1/challenges/${c.id}/enrollments`)).body.data.map((e: { customer_id: string }) => e.customer_id);
    t.same(listed, [survivor], 'the survivor, not the merged customer');
    t.equal((await api.delete(`/v1/challenges/${c.id}/enrollments/${survivor}`)).status, 204, 'and it can be unenrolled');
    t.same((await api.get(`/v1/challenges/${c.id}/enrollments`)).body.data, []);
    t.equal((await api.patch(`/v1/challenges/${c.id}`, { status: 'ended' })).status, 200);
    const late = await api.post(`/v1/challenges/${c.id}/enrollments`, { customer_id: id });
    t.equal(late.status, 409);
    t.equal(late.body.error.code, 'invalid_state', 'an ended challenge takes no enrollment');
  });

  await t.test('rule action challenge.progress contributes to the named challenge', async (t) => {
    const c = (await api.post('/v1/challenges', { name: 'Quests', qualifying: { event: 'never.sent' }, target: 2, status: 'active' }, idem())).body;
    const rule = await api.post(
      '/v1/rules',
      {
        name: 'quest counts',
        definition: { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: 'quest.done' }, actions: [{ type: 'challenge.progress', challenge_id: c.id }] },
      },
      idem(),
    );
    t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);
    const r = await send('quester', 'quest.done');
    t.match(r.body.effects, [{ type: 'rule.fired', rule_id: rule.body.id }, { type: 'challenge.progressed', challenge_id: c.id, count: 1 }]);
    t.notOk(r.body.effects.some((e: { type: string }) => e.type === 'action.skipped'), 'no longer reported as not available');
    t.match((await send('quester', 'quest.done')).body.effects, [{ type: 'rule.fired' }, { type: 'challenge.progressed', count: 2 }, { type: 'challenge.completed' }]);
    t.equal((await api.post(`/v1/rules/${rule.body.id}/pause`, {})).status, 200);
  });

  await t.test('revoke and reevaluate are audited operator actions', async (t) => {
    const c = (
      await api.post(
        '/v1/challenges',
        {
          name: 'Revocable',
          qualifying: { event: 'goal.scored' },
          target: 3,
          contribution_key: 'event.properties.goal_id',
          completion_actions: [{ type: 'points.award', currency: 'coins', amount: 7 }],
          status: 'active',
        },
        idem(),
      )
    ).body;
    await send('striker', 'goal.scored', { goal_id: 'g1' });
    await send('striker', 'goal.scored', { goal_id: 'g2' });
    const id = await customerId('striker');
    const revoked = await api.post(`/v1/challenges/${c.id}/progress/revoke`, { customer_id: id, contribution: 'g2', reason: 'own goal' });
    t.equal(revoked.status, 200);
    t.match(revoked.body, { challenge_id: c.id, customer_id: id, period_key: 'all', count: 1, status: 'active', audit_entry_id: /^aud_/ });
    t.same(revoked.body.contributions, ['g1'], 'the revoked value is gone from contributions');
    const again = await api.post(`/v1/challenges/${c.id}/progress/revoke`, { customer_id: id, contribution: 'g2', reason: 'own goal' });
    t.equal(again.status, 404);
    t.equal(again.body.error.param, 'contribution');
    const noReason = await api.post(`/v1/challenges/${c.id}/progress/revoke`, { customer_id: id, contribution: 'g1' });
    t.equal(noReason.status, 403);
    t.same([noReason.body.error.code, noReason.body.error.param], ['audit_reason_required', 'reason']);
    const blank = await api.post(`/v1/challenges/${c.id}/progress/revoke`, { customer_id: id, contribution: 'g1', reason: '  ' });
    t.equal(blank.body.error.code, 'audit_reason_required');
    const long = await api.post(`/v1/challenges/${c.id}/progress/revoke`, { customer_id: id, contribution: 'g1', reason: 'x'.repeat(501) });
    t.same([long.status, long.body.error.code, long.body.error.param], [400, 'validation_failed', 'reason']);
    const noContribution = await api.post(`/v1/challenges/${c.id}/progress/revoke`, { customer_id: id, reason: 'x' });
    t.same([noContribution.body.error.code, noContribution.body.error.param], ['validation_failed', 'contribution']);
    const nobody = await api.post(`/v1/challenges/${c.id}/progress/revoke`, { customer_id: 'nobody', contribution: 'g1', reason: 'x' });
    t.same([nobody.status, nobody.body.error.code, nobody.body.error.param], [404, 'resource_not_found', 'customer_id'], 'the unknown customer is named');
    t.match((await send('striker', 'goal.scored', { goal_id: 'g2' })).body.effects, [{ type: 'challenge.progressed', count: 2 }], 'a revoked value may count again');

    const notYet = await api.post(`/v1/challenges/${c.id}/reevaluate`, { customer_id: id, reason: 'check' });
    t.match(notYet.body, { effects: [], progress: { count: 2 }, audit_entry_id: /^aud_/ });
    t.same(notYet.body.progress.contributions, ['g1', 'g2'], 'a value revoked and counted again comes last');
    t.equal(notYet.body.completed, 0, 'completed is the integer count of completions (spec 2.8)');
    t.equal((await api.patch(`/v1/challenges/${c.id}`, { target: 2 })).status, 200);
    const re = await api.post(`/v1/challenges/${c.id}/reevaluate`, { customer_id: id, reason: 'target lowered' });
    t.equal(re.status, 200);
    t.equal(re.body.completed, 1);
    t.match(re.body, {
      effects: [
        { type: 'challenge.completed', challenge_id: c.id, completions: 1 },
        { type: 'challenge.points_awarded', currency: 'coins', amount: 7 },
      ],
      progress: { status: 'completed', count: 2 },
    });
    t.equal(await balance(id), 7);
    const twice = await api.post(`/v1/challenges/${c.id}/reevaluate`, { customer_id: id, reason: 'again' });
    t.match(twice.body, { reason: 'already_completed', effects: [] }, 'completes at most once');
    t.equal(twice.body.completed, 0);
    t.equal(await balance(id), 7);
    const kept = await api.post(`/v1/challenges/${c.id}/progress/revoke`, { customer_id: id, contribution: 'g1', reason: 'offside' });
    t.match(kept.body, { count: 1, status: 'completed' }, 'a completed period stays completed');
    t.same(kept.body.contributions, ['g2']);
    const listed = (await api.get(`/v1/challenges/${c.id}/progress?customer_id=${id}`)).body.data;
    t.same(listed.map((p: { count: number; contributions: string[] }) => [p.count, p.contributions]), [[1, ['g2']]], 'the list shows what the actor holds');
    const unexplained = await api.post(`/v1/challenges/${c.id}/reevaluate`, { customer_id: id });
    t.same([unexplained.status, unexplained.body.error.code], [403, 'audit_reason_required']);
    t.equal((await api.post(`/v1/challenges/${c.id}/reevaluate`, { reason: 'x' })).body.error.param, 'customer_id');
    const nobodyRe = await api.post(`/v1/challenges/${c.id}/reevaluate`, { customer_id: 'nobodyprog', reason: 'x' });
    t.same([nobodyRe.status, nobodyRe.body.error.code, nobodyRe.body.error.param], [404, 'resource_not_found', 'customer_id'], 'the unknown customer is named');
    t.equal((await api.post('/v1/challenges/chl_nope/reevaluate', { customer_id: id, reason: 'x' })).body.error.code, 'resource_not_found');

    const audit = await sql`select * from audit_entries where target_id = ${c.id} order by created_at, id`;
    t.same(
      audit.map((a) => [a.action, a.reason, a.customer_id, a.actor_kind, a.target_type]),
      [
        ['challenge.progress.revoke', 'own goal', id, 'secret', 'challenge'],
        ['challenge.reevaluate', 'check', id, 'secret', 'challenge'],
        ['challenge.reevaluate', 'target lowered', id, 'secret', 'challenge'],
        ['challenge.reevaluate', 'again', id, 'secret', 'challenge'],
        ['challenge.progress.revoke', 'offside', id, 'secret', 'challenge'],
      ],
    );
    t.ok(audit.every((a) => String(a.id).startsWith('aud_') && String(a.actor_credential_id).startsWith('key_') && a.environment_id === tenant.testEnv));
    t.same(
      audit.filter((a) => a.action === 'challenge.reevaluate').map((a) => (a.details as { completed: unknown }).completed),
      [0, 1, 0],
      'the audit entry records the count too',
    );
  });

  await t.test('a daily repeatable challenge rolls over with the test clock; ends_at ends it', async (t) => {
    const clock = Date.parse((await api.get('/v1/test_clock')).body.now);
    const c = (
      await api.post(
        '/v1/challenges',
        {
          name: 'Daily two',
          qualifying: { event: 'app.opened' },
          target: 2,
          period: 'daily',
          repeatable: true,
          completion_actions: [{ type: 'points.award', currency: 'coins', amount: 5 }],
          ends_at: new Date(clock + 3 * 86_400_000).toISOString(),
          status: 'active',
        },
        idem(),
      )
    ).body;
    const today = new Date(clock).toISOString().slice(0, 10);
    t.match((await send('daily', 'app.opened')).body.effects, [{ type: 'challenge.progressed', period_key: today, count: 1 }]);
    t.match((await send('daily', 'app.opened')).body.effects, [{ type: 'challenge.progressed', count: 2 }, { type: 'challenge.completed' }, { type: 'challenge.points_awarded', amount: 5 }]);
    t.match((await send('daily', 'app.opened')).body.effects, [{ type: 'challenge.skipped', reason: 'period_completed' }]);
    t.equal((await api.post('/v1/test_clock/advance', { seconds: 86_400 })).status, 200);
    const tomorrow = new Date(clock + 86_400_000).toISOString().slice(0, 10);
    t.match((await send('daily', 'app.opened')).body.effects, [{ type: 'challenge.progressed', period_key: tomorrow, count: 1 }], 'a new day starts from zero');
    t.match((await send('daily', 'app.opened')).body.effects, [{ type: 'challenge.progressed', count: 2 }, { type: 'challenge.completed', completions: 2 }]);
    const id = await customerId('daily');
    t.equal(await balance(id), 10);
    const rows = (await api.get(`/v1/challenges/${c.id}/progress?customer_id=daily&limit=1`)).body;
    t.match(rows, { data: [{ period_key: today, status: 'completed' }], has_more: true });
    t.same(rows.data[0].contributions, [], 'no contribution_key: contributions is always empty');
    const next = (await api.get(`/v1/challenges/${c.id}/progress?customer_id=daily&limit=1&cursor=${rows.next_cursor}`)).body;
    t.match(next, { data: [{ period_key: tomorrow, status: 'completed' }], has_more: false });

    t.equal((await api.post('/v1/test_clock/advance', { seconds: 3 * 86_400 })).status, 200);
    t.equal((await api.get(`/v1/challenges/${c.id}`)).body.status, 'ended', 'the sweep ended it when the test clock passed ends_at');
    t.same((await send('daily', 'app.opened')).body.effects, [], 'an ended challenge is not offered events');
  });

  await t.test("a reevaluation's reward.issue completion is issued right after the ack, also in a test environment whose clock ran ahead", async (t) => {
    // Given a test clock days ahead of the real one (the scheduler's re-drive compared with the real clock).
    t.equal((await api.post('/v1/test_clock/advance', { seconds: 4 * 86_400 })).status, 200);
    const reward = (await api.post('/v1/rewards', { name: 'Reeval mug', cost: 0, currency: 'coins', availability: 5, expiry_after: '7d' }, idem())).body;
    const c = (
      await api.post(
        '/v1/challenges',
        { name: 'Reeval reward', qualifying: { event: 'rr.done' }, target: 3, status: 'active', completion_actions: [{ type: 'reward.issue', reward_id: reward.id }] },
        idem(),
      )
    ).body;
    for (const n of [1, 2]) {
      const e = await api.post('/v1/events', { id: `rr-${n}`, name: 'rr.done', customer_id: 'rr-p1', occurred_at: now(), mode: 'sync' });
      t.match(e.body.effects, [{ type: 'challenge.progressed', count: n }]);
    }
    t.equal((await api.patch(`/v1/challenges/${c.id}`, { target: 2 })).status, 200);
    // When the operator reevaluates.
    const re = await api.post(`/v1/challenges/${c.id}/reevaluate`, { customer_id: 'rr-p1', reason: 'target lowered' });
    t.equal(re.status, 200, JSON.stringify(re.body));
    t.equal(re.body.completed, 1);
    const requested = re.body.effects.find((e: { type: string }) => e.type === 'challenge.reward_requested');
    t.match(requested, { challenge_id: c.id, reward_id: reward.id, issuance_id: /^rwi_/ });
    // Then the reward is issued right after the ack, as after an event (not a sweep minutes later, or never).
    let got = await api.get(`/v1/reward_issuances/${requested.issuance_id}`);
    for (const until = Date.now() + 15_000; got.status !== 200 && Date.now() < until; ) {
      await new Promise((r) => setTimeout(r, 50));
      got = await api.get(`/v1/reward_issuances/${requested.issuance_id}`);
    }
    t.equal(got.status, 200, 'issued within seconds of the reevaluation');
    t.match(got.body, { status: 'issued', reward_id: reward.id, source_type: 'challenge_completion', source_id: c.id });
    t.equal((await api.get(`/v1/rewards/${reward.id}`)).body.issued, 1, 'its unit is taken');
  });

  await t.test("reevaluate is gated by the challenge's campaign as events are: an ended campaign or a customer outside its audience completes nothing", async (t) => {
    const vip = (await api.post('/v1/segments', { name: 'reeval-vip', kind: 'static' }, idem())).body;
    const cmp = (await api.post('/v1/campaigns', { name: 'Reeval camp', audience_segment: 'reeval-vip' }, idem())).body;
    t.equal((await api.post(`/v1/campaigns/${cmp.id}/activate`, {})).status, 200);
    const c = (
      await api.post(
        '/v1/challenges',
        {
          name: 'Camp challenge',
          qualifying: { event: 'cc.done' },
          target: 3,
          status: 'active',
          campaign_id: cmp.id,
          completion_actions: [{ type: 'points.award', currency: 'coins', amount: 99 }],
        },
        idem(),
      )
    ).body;
    const out = (await api.post('/v1/customers', { external_id: 'cc-out' }, idem())).body.id as string;
    t.equal((await api.post('/v1/customers', { external_id: 'cc-in' }, idem())).status, 201);
    t.equal((await api.post(`/v1/segments/${vip.id}/members`, { customer_id: 'cc-in' }, idem())).status, 201);
    let n = 0;
    for (let i = 0; i < 2; i++) {
      const e = await api.post('/v1/events', { id: `cc-${++n}`, name: 'cc.done', customer_id: 'cc-in', occurred_at: now(), mode: 'sync' });
      t.match(e.body.effects, [{ type: 'challenge.progressed', challenge_id: c.id }]);
    }
    // cc-out made progress while it was in the audience, then left it.
    t.equal((await api.post(`/v1/segments/${vip.id}/members`, { customer_id: 'cc-out' }, idem())).status, 201);
    for (let i = 0; i < 2; i++) {
      const e = await api.post('/v1/events', { id: `cc-${++n}`, name: 'cc.done', customer_id: 'cc-out', occurred_at: now(), mode: 'sync' });
      t.match(e.body.effects, [{ type: 'challenge.progressed', challenge_id: c.id }]);
    }
    t.equal((await api.delete(`/v1/segments/${vip.id}/members/${out}`)).status, 204);
    t.equal((await api.patch(`/v1/challenges/${c.id}`, { target: 2 })).status, 200);

    const outside = await api.post(`/v1/challenges/${c.id}/reevaluate`, { customer_id: 'cc-out', reason: 'lowered' });
    t.equal(outside.status, 200, JSON.stringify(outside.body));
    t.match(outside.body, { completed: 0, reason: 'segment_not_matched', effects: [], progress: { count: 2, status: 'active' } }, 'outside the audience: nothing completes');

    t.equal((await api.post(`/v1/campaigns/${cmp.id}/end`, {})).status, 200);
    const ended = await api.post(`/v1/challenges/${c.id}/reevaluate`, { customer_id: 'cc-in', reason: 'lowered' });
    t.equal(ended.status, 200, JSON.stringify(ended.body));
    t.match(ended.body, { completed: 0, reason: 'campaign_inactive', effects: [], progress: { count: 2, status: 'active' } }, 'the campaign ended: nothing completes');
    t.equal(await balance(await customerId('cc-in')), 0, 'no award was paid');
    const listed = (await api.get(`/v1/challenges/${c.id}/progress?customer_id=cc-in`)).body.data;
    t.match(listed, [{ count: 2, status: 'active', completed_at: null }]);
  });

  await t.test("a deleted customer's enrollment is removed with it; its progress stays listed, also filtered by its id", async (t) => {
    const c = (await api.post('/v1/challenges', { name: 'Invite deleted', qualifying: { event: 'del.scored' }, target: 5, enrollment: 'explicit', status: 'active' }, idem())).body;
    const gone = (await api.post('/v1/customers', { external_id: 'enr-gone' }, idem())).body.id as string;
    const stays = (await api.post('/v1/customers', { external_id: 'enr-stays' }, idem())).body.id as string;
    for (const id of [gone, stays]) t.equal((await api.post(`/v1/challenges/${c.id}/enrollments`, { customer_id: id })).status, 201);
    t.match((await api.post('/v1/events', { id: 'del-1', name: 'del.scored', customer_id: 'enr-gone', occurred_at: now(), mode: 'sync' })).body.effects, [{ type: 'challenge.progressed', count: 1 }]);
    t.equal((await api.delete(`/v1/customers/${gone}`)).status, 204);
    const listed = (await api.get(`/v1/challenges/${c.id}/enrollments`)).body.data.map((e: { customer_id: string }) => e.customer_id);
    t.same(listed, [stays], 'the deleted customer is not listed as enrolled');
    const progress = await api.get(`/v1/challenges/${c.id}/progress?customer_id=${gone}`);
    t.match(progress.body.data, [{ customer_id: gone, count: 1 }], "filtering by the deleted customer's id lists its records, as the unfiltered list does");
    t.same((await api.get(`/v1/challenges/${c.id}/progress`)).body.data.map((p: { customer_id: string }) => p.customer_id), [gone]);
  });

  await t.test('OpenAPI: completion_actions names every action a challenge accepts', async (t) => {
    const doc = (await anon.get('/v1/openapi.json')).body;
    const body = doc.paths['/v1/challenges'].post.requestBody.content['application/json'].schema;
    const description = body.properties.completion_actions.description as string;
    for (const type of ['points.award', 'item.grant', 'reward.issue', 'tier.evaluate']) t.match(description, type, `${type} is documented`);
    const patch = doc.paths['/v1/challenges/{id}'].patch.requestBody.content['application/json'].schema;
    t.match(patch.properties.completion_actions.description, 'reward.issue');
  });

  // Last: the tier program made here would re-place the customers of the earlier subtests.
  await t.test('a completion reward or tier program that does not exist is 404 naming the field (create, PATCH, activation)', async (t) => {
    const relics = { name: 'Relics', qualifying: { event: 'relic.found' }, target: 2 };
    const issue = (reward_id: string) => ({ type: 'reward.issue', reward_id });
    const coins = { type: 'points.award', currency: 'coins', amount: 5 };
    const created = await api.post('/v1/challenges', { ...relics, status: 'active', completion_actions: [coins, issue('rw_nope')] }, idem());
    t.equal(created.status, 404);
    t.equal(created.body.error.code, 'resource_not_found');
    t.equal(created.body.error.param, 'completion_actions[1].reward_id');
    const program = await api.post('/v1/challenges', { ...relics, completion_actions: [{ type: 'tier.evaluate', program: 'club' }] }, idem());
    t.equal(program.status, 404);
    t.equal(program.body.error.param, 'completion_actions[0].program');
    t.notOk(
      (await api.get('/v1/challenges?limit=200')).body.data.some((c: { name: string }) => c.name === 'Relics'),
      'nothing was created',
    );

    const c = (await api.post('/v1/challenges', { ...relics, name: 'Relics ok', completion_actions: [{ type: 'tier.evaluate' }] }, idem())).body;
    t.ok(c.id, 'tier.evaluate without a program names nothing');
    const patched = await api.patch(`/v1/challenges/${c.id}`, { completion_actions: [issue('rw_nope')] });
    t.equal(patched.status, 404);
    t.equal(patched.body.error.code, 'resource_not_found');
    t.equal(patched.body.error.param, 'completion_actions[0].reward_id');
    t.equal((await api.get(`/v1/challenges/${c.id}`)).body.version, 1, 'unchanged');

    // A challenge stored before this check (written here directly) can still be edited, not activated.
    await sql`update challenges set completion_actions = ${sql.json([issue('rw_nope')])} where id = ${c.id}`;
    const activate = await api.patch(`/v1/challenges/${c.id}`, { status: 'active' });
    t.equal(activate.status, 404, 'activation checks the stored actions');
    t.equal(activate.body.error.param, 'completion_actions[0].reward_id');
    t.equal((await api.patch(`/v1/challenges/${c.id}`, { name: 'Relics renamed' })).status, 200, 'other edits are not blocked');

    const reward = (await api.post('/v1/rewards', { name: 'Relic', cost: 0, currency: 'coins', availability: 10, expiry_after: null }, idem())).body;
    const levels = [
      { key: 'bronze', title: 'Bronze', threshold: 0 },
      { key: 'silver', title: 'Silver', threshold: 100 },
    ];
    const club = await api.post('/v1/tier_programs', { key: 'club', name: 'Club', currency: 'coins', basis: 'lifetime_earned', levels }, idem());
    t.equal(club.status, 201);
    const both = [issue(reward.id), { type: 'tier.evaluate', program: 'club' }, { type: 'tier.evaluate', program: club.body.id }];
    const fixed = await api.patch(`/v1/challenges/${c.id}`, { completion_actions: both, status: 'active' });
    t.equal(fixed.status, 200, 'an existing reward, and a tier program by key or by id');
    t.equal((await api.post('/v1/challenges', { ...relics, completion_actions: both }, idem())).status, 201);
    t.equal((await api.patch(`/v1/challenges/${c.id}`, { status: 'ended' })).status, 200);
  });
});
