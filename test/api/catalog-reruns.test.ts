// A creating request whose answer was never stored under its Idempotency-Key (the store write
// failed, or the process died, so the claim went stale; or a 5xx released it) runs again when the
// client repeats it. A catalog create (rows in PostgreSQL, no actor) must find what the first run
// created and answer it, not create a second resource or answer 409 for its own unique key; only
// to a caller the create would allow now; a test clock's advance moves the clock once. The
// lost answer is made here as the gateway leaves it: the claim in_progress and untouched for longer
// than the stale window (or gone, after a release). Real service, PostgreSQL and Redis.
import t, { type Test } from 'tap';
import { testIssuer } from '../fixtures/oidc/issuer.js';
import { openSql } from '../../src/persistence/sql/db.js';
import { type Client, databaseUrl, idem, signUp, startForTest, storageFor, uniqueName } from '../helpers/service.js';

type Answer = Awaited<ReturnType<Client['post']>>;

t.test('creates run again after a lost answer find the first run’s resource', async (t) => {
  const storage = storageFor(t);
  // An identity provider, so members can be invited and a signed-in admin can confirm change sets.
  const idp = await testIssuer(t);
  const { anon } = await startForTest(t, {
    storage,
    env: { OIDC_ISSUER: idp.issuer, OIDC_AUDIENCE: idp.audience, OIDC_JWKS_FILE: idp.jwksFile },
  });
  const tenant = await signUp(anon);
  const api = tenant.server;
  const admin = tenant.admin;
  const sql = openSql({ url: databaseUrl, schema: storage.schema, max: 1 });
  t.teardown(() => sql.end());

  /** The state a failed answer write leaves: the claim in progress, last touched past the stale window (60 s). */
  const loseAnswer = async (t: Test, key: string) => {
    const rows = await sql`
      update idempotency_keys
      set state = 'in_progress', status = null, body = null, headers = null, customer_ids = null,
          created_at = now() - interval '2 minutes', touched_at = now() - interval '2 minutes'
      where key = ${key} returning 1`;
    t.equal(rows.length, 1, 'the answer is lost');
  };
  /** The state a 5xx leaves: the claim released. */
  const releaseClaim = async (t: Test, key: string) => {
    const rows = await sql`delete from idempotency_keys where key = ${key} returning 1`;
    t.equal(rows.length, 1, 'the claim is released');
  };

  /** POST, lose the answer, POST again: the run again answers `status` (201) with the first run's resource; a third POST replays it. */
  const rerun = async (t: Test, client: Client, path: string, body: unknown, lose = loseAnswer, status = 201): Promise<{ first: Answer; again: Answer }> => {
    const key = idem();
    const first = await client.post(path, body, key);
    t.equal(first.status, status, `${path}: created (${JSON.stringify(first.body)})`);
    await lose(t, key['idempotency-key']!);
    const again = await client.post(path, body, key);
    t.equal(again.status, status, `${path}: the run again answers ${status} (${JSON.stringify(again.body)})`);
    t.equal(again.headers.get('idempotent-replayed'), null, 'it ran again (no stored answer to replay)');
    t.equal(again.headers.get('etag'), first.headers.get('etag'), 'the same ETag');
    const replay = await client.post(path, body, key);
    t.equal(replay.headers.get('idempotent-replayed'), 'true', 'its answer is stored now');
    t.same(replay.body, again.body);
    return { first, again };
  };

  const count = async (t: Test, client: Client, path: string, pick: (r: Record<string, unknown>) => boolean) => {
    const r = await client.get(`${path}${path.includes('?') ? '&' : '?'}limit=200`);
    t.equal(r.status, 200, `GET ${path}`);
    return (r.body.data as Record<string, unknown>[]).filter(pick).length;
  };

  await t.test('a currency: the same currency, not 409 for its own key', async (t) => {
    const { first, again } = await rerun(t, api, '/v1/currencies', { key: 'gems', name: 'Gems' });
    t.same(again.body, first.body);
    t.equal(await count(t, api, '/v1/currencies', (c) => c.key === 'gems'), 1);
  });

  await t.test('a currency whose first run was refused (key taken) answers the refusal again, nothing recorded', async (t) => {
    const key = idem();
    const body = { key: 'gems', name: 'Gems again' };
    const first = await api.post('/v1/currencies', body, key);
    t.equal(first.status, 409);
    await loseAnswer(t, key['idempotency-key']!);
    const again = await api.post('/v1/currencies', body, key);
    t.equal(again.status, 409);
    t.equal(again.body.error.code, 'already_exists');
  });

  await t.test('a reward: one reward, answered as the first run did', async (t) => {
    const body = { name: uniqueName('Mug'), cost: 5, currency: 'gems', availability: 3 };
    const { first, again } = await rerun(t, api, '/v1/rewards', body);
    t.match(first.body, { id: /^rw_/, version: 1 });
    t.same(again.body, first.body);
    t.equal(await count(t, api, '/v1/rewards', (r) => r.name === body.name), 1);
  });

  await t.test('a reward after a 5xx released the claim: the same reward', async (t) => {
    const body = { name: uniqueName('Cap'), cost: 5, currency: 'gems', availability: 3 };
    const { first, again } = await rerun(t, api, '/v1/rewards', body, releaseClaim);
    t.equal(again.body.id, first.body.id);
    t.equal(await count(t, api, '/v1/rewards', (r) => r.name === body.name), 1);
  });

  await t.test('a reward edited in between: the run again answers it as it is now', async (t) => {
    const key = idem();
    const body = { name: uniqueName('Pin'), cost: 5, currency: 'gems', availability: 3 };
    const first = await api.post('/v1/rewards', body, key);
    await loseAnswer(t, key['idempotency-key']!);
    t.equal((await api.patch(`/v1/rewards/${first.body.id}`, { availability: 9 }, { 'if-match': '"1"' })).status, 200);
    const again = await api.post('/v1/rewards', body, key);
    t.equal(again.status, 201);
    t.match(again.body, { id: first.body.id, availability: 9, version: 2 });
    t.equal(again.headers.get('etag'), '"2"');
  });

  const definition = {
    schema: 'service.rule/v2',
    trigger: { kind: 'customer_event', event: 'order.completed' },
    trust: { minimum: 'merchant_asserted' },
    conditions: { all: [{ path: 'event.properties.total', op: 'gte', value: 10 }] },
    actions: [{ type: 'points.award', currency: 'gems', amount: 1 }],
  };

  await t.test('a rule: one rule in draft', async (t) => {
    const body = { name: uniqueName('Orders'), definition };
    const { first, again } = await rerun(t, api, '/v1/rules', body);
    t.same(again.body, first.body);
    t.equal(await count(t, api, '/v1/rules', (r) => r.name === body.name), 1);
  });

  await t.test('a segment: the same segment, not 409 for its own name', async (t) => {
    const { first, again } = await rerun(t, api, '/v1/segments', { name: 'vip', kind: 'static' });
    t.same(again.body, first.body);
    t.equal(await count(t, api, '/v1/segments', (s) => s.name === 'vip'), 1);
  });

  await t.test('a segment deleted before the run again: resource_not_found, no second segment', async (t) => {
    const key = idem();
    const body = { name: 'gone', kind: 'static' };
    const first = await api.post('/v1/segments', body, key);
    t.equal(first.status, 201);
    await loseAnswer(t, key['idempotency-key']!);
    t.equal((await api.delete(`/v1/segments/${first.body.id}`)).status, 204);
    const again = await api.post('/v1/segments', body, key);
    t.equal(again.status, 404);
    t.equal(again.body.error.code, 'resource_not_found');
    t.equal(await count(t, api, '/v1/segments', (s) => s.name === 'gone'), 0);
  });

  await t.test('a campaign with a budget: one campaign, one budget', async (t) => {
    const body = { name: uniqueName('Spring'), budgets: [{ currency: 'gems', amount: 1000 }] };
    const { first, again } = await rerun(t, api, '/v1/campaigns', body);
    t.same(again.body, first.body);
    t.equal(again.body.budgets.length, 1);
    t.equal(await count(t, api, '/v1/campaigns', (c) => c.name === body.name), 1);
    const budgets = await sql`select count(*)::int as n from campaign_budgets where campaign_id = ${first.body.id as string}`;
    t.equal(budgets[0]!.n, 1);
  });

  await t.test('a challenge, a counter definition, a tier program and an attribute definition: one of each', async (t) => {
    const challenge = { name: uniqueName('Ten'), qualifying: { event: 'order.completed' }, target: 10 };
    t.same((await rerun(t, api, '/v1/challenges', challenge)).again.body.name, challenge.name);
    t.equal(await count(t, api, '/v1/challenges', (c) => c.name === challenge.name), 1);

    const counter = { name: 'orders', event: 'order.completed', window: { kind: 'lifetime' } };
    const c = await rerun(t, api, '/v1/counter_definitions', counter);
    t.equal(c.again.body.id, c.first.body.id);
    t.equal(await count(t, api, '/v1/counter_definitions', (d) => d.name === 'orders'), 1);

    const levels = [
      { key: 'bronze', title: 'Bronze', threshold: 0 },
      { key: 'silver', title: 'Silver', threshold: 100 },
    ];
    const tp = await rerun(t, api, '/v1/tier_programs', { key: 'club', name: 'Club', currency: 'gems', basis: 'lifetime_earned', levels });
    t.same(tp.again.body, tp.first.body);
    t.equal(await count(t, api, '/v1/tier_programs', (p) => p.key === 'club'), 1);

    const attr = await rerun(t, api, '/v1/attribute_definitions', { key: 'mode', type: 'string' });
    t.same(attr.again.body, attr.first.body);
    t.equal(await count(t, api, '/v1/attribute_definitions', (d) => d.key === 'mode'), 1);
  });

  await t.test('an API key: the same key without its token; the first token still works, no second secret exists', async (t) => {
    const name = uniqueName('backend');
    const { first, again } = await rerun(t, admin, '/v1/api_keys', { kind: 'secret', name });
    t.match(first.body.token, /^osk_/);
    t.equal(again.body.id, first.body.id);
    t.equal(again.body.token, null, 'the token is shown once: never minted again');
    t.same({ ...again.body, token: first.body.token }, first.body, 'otherwise as the first answer');
    t.equal(await count(t, admin, '/v1/api_keys', (k) => k.name === name), 1);
    const rows = await sql`select count(*)::int as n from credentials where name = ${name}`;
    t.equal(rows[0]!.n, 1, 'one credential row: one valid secret');
    const usable = await anon.get('/v1/currencies', { authorization: `Bearer ${first.body.token}` });
    t.equal(usable.status, 200, 'the first run’s token is the key’s');
  });

  await t.test('an organization: one organization with its project and environments', async (t) => {
    const name = uniqueName('Studio');
    const { first, again } = await rerun(t, admin, '/v1/organizations', { name });
    t.same(again.body, first.body);
    t.equal(await count(t, admin, '/v1/organizations', (o) => o.name === name), 1);
  });

  await t.test('a signup: the same account, not 409; the PAT is not shown again', async (t) => {
    const email = `${uniqueName('u')}@example.com`;
    const { first, again } = await rerun(t, anon, '/v1/auth/signup', { email, organization_name: 'Rerun Games' });
    t.match(first.body.token.token, /^opat_/);
    t.equal(again.body.token.token, null);
    t.same({ ...again.body, token: first.body.token }, first.body, 'otherwise as the first answer');
    const orgs = await sql`select count(*)::int as n from organizations where name = 'Rerun Games'`;
    t.equal(orgs[0]!.n, 1);
  });

  await t.test('a change set and its application: one set, applied once, answered applied', async (t) => {
    const profile = { type: 'match_profile.create', key: 'duel', metrics: [{ key: 'kills', minimum: 0, maximum: 100 }], duration: { minimum_seconds: 60, maximum_seconds: 3600 }, players: { minimum: 2, maximum: 10 } };
    const { first, again } = await rerun(t, admin, '/v1/change_sets', { commands: [profile] });
    t.same(again.body, first.body);
    const sets = await sql`select count(*)::int as n from change_sets where environment_id = ${tenant.testEnv}`;
    t.equal(sets[0]!.n, 1);
    const applied = await rerun(t, admin, '/v1/change_set_applications', { change_set_id: first.body.id });
    t.equal(applied.again.body.status, 'applied');
    t.same(applied.again.body, applied.first.body);
  });

  await t.test('a membership and a change set confirmation: answered as made, not 409', async (t) => {
    const owner = anon.with({ authorization: `Bearer ${tenant.pat}` });
    const members = `/v1/organizations/${tenant.orgId}/memberships`;
    const invited = await rerun(t, owner, members, { email: `${uniqueName('m')}@example.com`, role: 'editor' });
    t.same(invited.again.body, invited.first.body);

    // A signed-in admin confirms a set held in the live environment (autonomy limits).
    const mail = `${uniqueName('admin')}@example.com`;
    const session = await anon.post('/v1/auth/sessions', { id_token: await idp.sign({ sub: uniqueName('sub'), email: mail }) });
    t.equal(session.status, 201);
    t.equal((await owner.post(members, { email: mail, role: 'admin' }, idem())).status, 201);
    const inLive = anon.with({ authorization: `Bearer ${session.body.token.token}`, 'x-service-environment': tenant.liveEnv });
    const duel = { type: 'match_profile.create', key: 'bout', metrics: [{ key: 'kills', minimum: 0, maximum: 100 }], duration: { minimum_seconds: 60, maximum_seconds: 3600 }, players: { minimum: 2, maximum: 10 } };
    const made = await inLive.post('/v1/change_sets', { commands: [duel] }, idem());
    t.equal((await inLive.post('/v1/change_set_applications', { change_set_id: made.body.id }, idem())).status, 201);
    const archive = await inLive.post('/v1/change_sets', { commands: [{ type: 'match_profile.archive', key: 'bout' }] }, idem());
    const held = await rerun(t, inLive, '/v1/change_set_applications', { change_set_id: archive.body.id }, loseAnswer, 202);
    t.equal(held.again.body.status, 'awaiting_confirmation', 'the run again of an application that held the set answers 202 held');
    t.same(held.again.body, held.first.body);
    const confirmed = await rerun(t, inLive, `/v1/change_sets/${archive.body.id}/confirm`, {});
    t.equal(confirmed.again.body.status, 'applied');
    t.same(confirmed.again.body, confirmed.first.body);
  });

  /** A person signed in with the identity provider, made a member of the tenant's organization with `role` if given. */
  const signIn = async (t: Test, role?: string) => {
    const email = `${uniqueName('person')}@example.com`;
    const s = await anon.post('/v1/auth/sessions', { id_token: await idp.sign({ sub: uniqueName('sub'), email }) });
    t.equal(s.status, 201, 'signed in');
    const owner = anon.with({ authorization: `Bearer ${tenant.pat}` });
    if (role !== undefined) t.equal((await owner.post(`/v1/organizations/${tenant.orgId}/memberships`, { email, role }, idem())).status, 201, `made ${role}`);
    return { email, userId: s.body.user.id as string, client: anon.with({ authorization: `Bearer ${s.body.token.token}` }) };
  };

  await t.test('a run again answers only a caller allowed now: a demoted admin is refused a membership and an API key', async (t) => {
    const owner = anon.with({ authorization: `Bearer ${tenant.pat}` });
    const members = `/v1/organizations/${tenant.orgId}/memberships`;
    const manager = await signIn(t, 'admin');
    const invite = { email: `${uniqueName('m')}@example.com`, role: 'viewer' };
    const inviteKey = idem();
    const invited = await manager.client.post(members, invite, inviteKey);
    t.equal(invited.status, 201);
    await loseAnswer(t, inviteKey['idempotency-key']!);
    const inTest = manager.client.with({ 'x-service-environment': tenant.testEnv });
    const apiKey = { kind: 'secret', name: uniqueName('demoted') };
    const apiKeyKey = idem();
    t.equal((await inTest.post('/v1/api_keys', apiKey, apiKeyKey)).status, 201);
    await loseAnswer(t, apiKeyKey['idempotency-key']!);

    t.equal((await owner.patch(`${members}/${manager.userId}`, { role: 'viewer' })).status, 200, 'demoted');
    const again = await manager.client.post(members, invite, inviteKey);
    t.equal(again.status, 403, `the membership's run again is refused (${JSON.stringify(again.body)})`);
    t.equal(again.body.error?.code, 'forbidden');
    const keyAgain = await inTest.post('/v1/api_keys', apiKey, apiKeyKey);
    t.equal(keyAgain.status, 403, `the API key's run again is refused (${JSON.stringify(keyAgain.body)})`);
    t.equal(keyAgain.body.error?.code, 'forbidden');

    // A refusal of the caller is not stored: made admin again, the run again answers what was made.
    t.equal((await owner.patch(`${members}/${manager.userId}`, { role: 'admin' })).status, 200, 'admin again');
    const answered = await manager.client.post(members, invite, inviteKey);
    t.equal(answered.status, 201);
    t.equal(answered.body.user_id, invited.body.user_id);
  });

  await t.test('an organization’s run again is refused to its creator who left it', async (t) => {
    const creator = await signIn(t);
    const heir = await signIn(t);
    const body = { name: uniqueName('Handed') };
    const key = idem();
    const made = await creator.client.post('/v1/organizations', body, key);
    t.equal(made.status, 201);
    await loseAnswer(t, key['idempotency-key']!);
    const orgMembers = `/v1/organizations/${made.body.organization.id}/memberships`;
    t.equal((await creator.client.post(orgMembers, { email: heir.email, role: 'owner' }, idem())).status, 201, 'handed over');
    t.equal((await creator.client.delete(`${orgMembers}/${creator.userId}`)).status, 204, 'left');
    const again = await creator.client.post('/v1/organizations', body, key);
    t.equal(again.status, 403, `refused (${JSON.stringify(again.body)})`);
    t.equal(again.body.error?.code, 'forbidden');
    t.notOk(JSON.stringify(again.body).includes(body.name), 'nothing of the organization shown');
  });

  await t.test('a membership removed before the run again: 404 saying so, no second membership', async (t) => {
    const owner = anon.with({ authorization: `Bearer ${tenant.pat}` });
    const members = `/v1/organizations/${tenant.orgId}/memberships`;
    const key = idem();
    const body = { email: `${uniqueName('m')}@example.com`, role: 'viewer' };
    const first = await owner.post(members, body, key);
    t.equal(first.status, 201);
    await loseAnswer(t, key['idempotency-key']!);
    t.equal((await owner.delete(`${members}/${first.body.user_id}`)).status, 204);
    const again = await owner.post(members, body, key);
    t.equal(again.status, 404);
    t.equal(again.body.error.code, 'resource_not_found');
    t.equal(again.body.error.message, `An earlier run of this request added ${first.body.user_id} to the organization, who is not a member any more.`);
    t.equal(await count(t, owner, members, (m) => m.email === body.email), 0);
  });

  await t.test('another Idempotency-Key is another request: a second reward', async (t) => {
    const body = { name: uniqueName('Twin'), cost: 5, currency: 'gems', availability: 3 };
    t.equal((await api.post('/v1/rewards', body, idem())).status, 201);
    t.equal((await api.post('/v1/rewards', body, idem())).status, 201);
    t.equal(await count(t, api, '/v1/rewards', (r) => r.name === body.name), 2);
  });

  await t.test('a test clock advance: moved once, the run again answers the clock as it is now', async (t) => {
    const hour = 3600_000;
    const before = Date.parse((await api.get('/v1/test_clock')).body.now);
    const key = idem();
    const first = await api.post('/v1/test_clock/advance', { seconds: 3600 }, key);
    t.equal(first.status, 200);
    await loseAnswer(t, key['idempotency-key']!);
    const again = await api.post('/v1/test_clock/advance', { seconds: 3600 }, key);
    t.equal(again.status, 200, JSON.stringify(again.body));
    t.equal(again.headers.get('idempotent-replayed'), null, 'it ran again');
    const now = Date.parse((await api.get('/v1/test_clock')).body.now);
    t.ok(now - before >= hour && now - before < 2 * hour - 60_000, `moved one hour, not two (${(now - before) / hour} h)`);
    t.ok(Math.abs(Date.parse(again.body.now) - Date.parse(first.body.now)) < 60_000, 'answered the clock as it is now');
  });
});
