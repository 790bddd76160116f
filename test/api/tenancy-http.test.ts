// Black-box API tests of the tenancy routes over real HTTP (spec 4.1, decisions.md "Tenancy and
// credentials"): signup, OIDC sessions (not configured here), organizations, API keys and their
// revocation, with every error code each route can produce, idempotent replays that never show a
// secret twice, and the role checks (viewer, editor, admin memberships inserted with SQL).
import t from 'tap';
import { openSql } from '../../src/persistence/sql/db.js';
import { databaseUrl, idem, signUp, startForTest, uniqueName } from '../helpers/service.js';

const allScopes = [
  'events:write',
  'events:read',
  'customers:read',
  'customers:write',
  'ledger:read',
  'ledger:write',
  'programs:read',
  'programs:write',
  'notifications:read',
  'notifications:write',
  'webhooks:read',
  'webhooks:write',
  'audit:read',
  'config:read',
  'config:write',
  'customer_sessions:write',
];
const now = () => new Date(Date.now() - 1000).toISOString();
const email = () => `${uniqueName('u')}@example.com`;
const err = (r: { status: number; body: any }) => ({ status: r.status, code: r.body?.error?.code, param: r.body?.error?.param });

t.test('tenancy over HTTP', async (t) => {
  const { anon, config } = await startForTest(t);
  const sql = openSql({ url: databaseUrl, schema: config.DB_SCHEMA, max: 1 });
  t.teardown(() => sql.end());
  const owner = await signUp(anon);
  const bearer = (token: string, env?: string) => anon.with({ authorization: `Bearer ${token}`, ...(env ? { 'x-service-environment': env } : {}) });
  const patOnly = bearer(owner.pat);

  await t.test('POST /v1/auth/signup: 201, replay with token.token null, 409, idempotency', async (t) => {
    const body = { email: email(), name: 'Ada', organization_name: 'Ada Games', timezone: 'Europe/Berlin' };
    const key = idem();
    const r = await anon.post('/v1/auth/signup', body, key);
    t.equal(r.status, 201);
    t.match(r.body, {
      user: { id: /^usr_/, email: body.email, name: 'Ada', created_at: String },
      organization: { id: /^org_/, name: 'Ada Games', slug: /^ada-games/ },
      project: { id: /^proj_/, name: String },
      token: { id: /^pat_/, token: /^opat_/ },
    });
    t.same(r.body.token.scopes, allScopes, 'the PAT holds every scope');
    t.same(
      r.body.environments.map((e: { name: string; runtime_class: string }) => [e.name, e.runtime_class]),
      [['test', 'test'], ['live', 'live']],
      'exactly a test and a live environment',
    );
    const pat = r.body.token.token as string;
    t.equal((await bearer(pat).get('/v1/organizations')).status, 200, 'the PAT works');

    const replay = await anon.post('/v1/auth/signup', body, key);
    t.equal(replay.status, 201, 'a replay answers as the first');
    t.equal(replay.headers.get('idempotent-replayed'), 'true');
    t.equal(replay.body.token.token, null, 'a replay never shows the PAT again');
    t.same(replay.body, { ...r.body, token: { ...r.body.token, token: null } }, 'everything else is the stored answer');
    const replay2 = await anon.post('/v1/auth/signup', { ...body }, key);
    t.equal(replay2.body.token.token, null, 'nor on a second replay');

    t.same(err(await anon.post('/v1/auth/signup', { ...body, name: 'Eve' }, key)), { status: 422, code: 'idempotency_key_reused', param: 'Idempotency-Key' });
    t.same(err(await anon.post('/v1/auth/signup', body)), { status: 400, code: 'idempotency_key_required', param: 'Idempotency-Key' });
    t.equal(err(await anon.post('/v1/auth/signup', body, { 'idempotency-key': 'k'.repeat(256) })).code, 'idempotency_key_required', 'a key over 255 characters');

    const dupKey = idem();
    const dup = await anon.post('/v1/auth/signup', { ...body, email: body.email.toUpperCase() }, dupKey);
    t.same(err(dup), { status: 409, code: 'already_exists', param: 'email' }, 'the same email, in any case, is 409');
    t.match(dup.body.error.message, /POST \/v1\/auth\/sessions.*personal access token/, 'and says how to get in instead');
    const dupReplay = await anon.post('/v1/auth/signup', { ...body, email: body.email.toUpperCase() }, dupKey);
    t.same(dupReplay.body.error.code, 'already_exists', 'a stored 409 replays unchanged');
    t.notOk('token' in dupReplay.body, 'no token field is added to a replayed error');
  });

  await t.test('POST /v1/auth/signup: validation bounds', async (t) => {
    const ok = { email: email(), organization_name: 'Org' };
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ['email missing', { organization_name: 'Org' }, 'email'],
      ['email not an address', { ...ok, email: 'not-an-email' }, 'email'],
      ['email over 254', { ...ok, email: `${'a'.repeat(60)}@${'b'.repeat(60)}.${'c'.repeat(60)}.${'d'.repeat(60)}.example.com` }, 'email'],
      ['name empty', { ...ok, name: '' }, 'name'],
      ['name over 120', { ...ok, name: 'n'.repeat(121) }, 'name'],
      ['organization_name missing', { email: ok.email }, 'organization_name'],
      ['organization_name empty', { ...ok, organization_name: '' }, 'organization_name'],
      ['organization_name over 120', { ...ok, organization_name: 'o'.repeat(121) }, 'organization_name'],
      ['timezone empty', { ...ok, timezone: '' }, 'timezone'],
      ['timezone over 64', { ...ok, timezone: 'T'.repeat(65) }, 'timezone'],
      ['timezone not IANA', { ...ok, timezone: 'Mars/Olympus_Mons' }, 'timezone'],
      ['unknown field', { ...ok, plan: 'free' }, 'plan'],
    ];
    for (const [name, body, param] of cases) {
      t.same(err(await anon.post('/v1/auth/signup', body, idem())), { status: 400, code: 'validation_failed', param }, name);
    }
    const edge = await anon.post('/v1/auth/signup', { ...ok, name: 'n'.repeat(120), organization_name: 'o'.repeat(120) }, idem());
    t.equal(edge.status, 201, 'name and organization_name of 120 characters are accepted');
    t.equal(edge.body.environments.length, 2);
    const bad = await anon.request('POST', '/v1/auth/signup', '{"email":', { ...idem(), 'content-type': 'application/json' });
    t.same(err(bad), { status: 400, code: 'invalid_json', param: undefined });
    const text = await anon.request('POST', '/v1/auth/signup', 'hello', { ...idem(), 'content-type': 'text/plain' });
    t.same(err(text), { status: 415, code: 'unsupported_media_type', param: 'Content-Type' });
  });

  await t.test('POST /v1/auth/signup: turned off by configuration is 403 forbidden', async (t) => {
    const off = await startForTest(t, { env: { SIGNUP_ENABLED: 'false' } });
    const r = await off.anon.post('/v1/auth/signup', { email: email(), organization_name: 'Org' }, idem());
    t.same(err(r), { status: 403, code: 'forbidden', param: undefined });
  });

  await t.test('POST /v1/auth/sessions: 501 capability_unavailable without OIDC; id_token bounds', async (t) => {
    const r = await anon.post('/v1/auth/sessions', { id_token: 'x'.repeat(20) });
    t.same(err(r), { status: 501, code: 'capability_unavailable', param: undefined });
    t.equal(r.body.error.type, 'api_error');
    t.equal((await anon.post('/v1/auth/sessions', { id_token: 'x'.repeat(8192) })).status, 501, '8192 characters pass validation');
    for (const [name, body] of [
      ['missing', {}],
      ['19 characters', { id_token: 'x'.repeat(19) }],
      ['8193 characters', { id_token: 'x'.repeat(8193) }],
      ['not a string', { id_token: 42 }],
    ] as const) {
      t.same(err(await anon.post('/v1/auth/sessions', body)), { status: 400, code: 'validation_failed', param: 'id_token' }, name);
    }
  });

  await t.test('POST /v1/organizations: 201 with default project and two environments; refusals', async (t) => {
    const key = idem();
    const r = await patOnly.post('/v1/organizations', { name: 'Second Studio' }, key);
    t.equal(r.status, 201, 'no X-Service-Environment needed');
    t.match(r.body, { organization: { id: /^org_/, name: 'Second Studio', slug: 'second-studio' }, project: { id: /^proj_/, name: String } });
    t.same(r.body.environments.map((e: { name: string; runtime_class: string }) => [e.name, e.runtime_class]), [['test', 'test'], ['live', 'live']]);
    const replay = await patOnly.post('/v1/organizations', { name: 'Second Studio' }, key);
    t.same(replay.body, r.body, 'a replay answers the stored organization');
    const newTest = r.body.environments[0].id as string;
    const inNew = bearer(owner.pat, newTest);
    t.same((await inNew.get('/v1/api_keys')).body, { data: [], next_cursor: null, has_more: false }, 'the creator owns the new environments');
    t.equal((await inNew.post('/v1/api_keys', { kind: 'secret', name: 'k' }, idem())).status, 201, 'as owner');
    const again = await patOnly.post('/v1/organizations', { name: 'Second Studio' }, idem());
    t.equal(again.body.organization.slug, 'second-studio-2', 'slugs stay unique');

    t.same(err(await patOnly.post('/v1/organizations', { name: 'X' })), { status: 400, code: 'idempotency_key_required', param: 'Idempotency-Key' });
    t.same(err(await patOnly.post('/v1/organizations', { name: 'Y' }, key)), { status: 422, code: 'idempotency_key_reused', param: 'Idempotency-Key' });
    for (const [name, body, param] of [
      ['name missing', {}, 'name'],
      ['name empty', { name: '' }, 'name'],
      ['name over 120', { name: 'n'.repeat(121) }, 'name'],
      ['timezone over 64', { name: 'n', timezone: 'T'.repeat(65) }, 'timezone'],
      ['timezone not IANA', { name: 'n', timezone: 'Nowhere/Else' }, 'timezone'],
    ] as const) {
      t.same(err(await patOnly.post('/v1/organizations', body, idem())), { status: 400, code: 'validation_failed', param }, name);
    }
    t.same(err(await owner.server.post('/v1/organizations', { name: 'Z' }, idem())), { status: 403, code: 'forbidden', param: undefined }, 'a secret key');
    t.same(err(await anon.post('/v1/organizations', { name: 'Z' }, idem())), { status: 401, code: 'authentication_required', param: undefined });
    t.same(err(await bearer('opat_nope').post('/v1/organizations', { name: 'Z' }, idem())), { status: 401, code: 'invalid_credentials', param: undefined });
  });

  await t.test('GET /v1/organizations: the caller\'s organizations, paged', async (t) => {
    const all = await patOnly.get('/v1/organizations');
    t.equal(all.status, 200);
    t.equal(all.body.data.length, 3, 'signup org + two created');
    t.match(all.body.data[0], { id: /^org_/, name: String, slug: String, plan: { id: String, version: Number }, billing_mode: /^(card|invoice|none)$/, ai_drafting_disabled: false, version: Number, created_at: String, updated_at: String });
    t.equal(all.body.data[2].id, owner.orgId, 'newest first: the signup organization is last');
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const r: { status: number; body: any } = await patOnly.get(`/v1/organizations?limit=1${cursor ? `&cursor=${cursor}` : ''}`);
      t.equal(r.status, 200);
      seen.push(...r.body.data.map((o: { id: string }) => o.id));
      t.equal(r.body.has_more, r.body.next_cursor !== null);
      cursor = r.body.next_cursor;
      pages++;
    } while (cursor !== null && pages < 10);
    t.same(seen, all.body.data.map((o: { id: string }) => o.id), 'limit=1 pages through all, in order');
    t.same(err(await patOnly.get('/v1/organizations?cursor=!!!')), { status: 400, code: 'invalid_cursor', param: 'cursor' });
    t.same(err(await patOnly.get('/v1/organizations?cursor=bm90LWpzb24')), { status: 400, code: 'invalid_cursor', param: 'cursor' }, 'base64url of non-JSON');
    t.same(err(await patOnly.get(`/v1/organizations?cursor=${'a'.repeat(2049)}`)), { status: 400, code: 'invalid_cursor', param: 'cursor' }, 'longer than 2048 characters');
    for (const limit of ['0', '201', 'x']) {
      t.same(err(await patOnly.get(`/v1/organizations?limit=${limit}`)), { status: 400, code: 'validation_failed', param: 'limit' }, `limit=${limit}`);
    }
    t.equal((await patOnly.get('/v1/organizations?limit=200')).status, 200);
    t.same(err(await owner.server.get('/v1/organizations')), { status: 403, code: 'forbidden', param: undefined }, 'a secret key');
    t.same(err(await anon.get('/v1/organizations')), { status: 401, code: 'authentication_required', param: undefined });
  });

  await t.test("GET /v1/organizations/{id}/environments: any member learns the ids X-Service-Environment takes", async (t) => {
    const path = `/v1/organizations/${owner.orgId}/environments`;
    const r = await patOnly.get(path);
    t.equal(r.status, 200, 'no X-Service-Environment needed');
    t.same(r.body.has_more, false);
    t.same(r.body.next_cursor, null);
    const projectId = (await sql`select id from projects where organization_id = ${owner.orgId}`)[0]!.id as string;
    t.same(
      r.body.data,
      [
        { id: owner.testEnv, name: 'test', runtime_class: 'test', project_id: projectId },
        { id: owner.liveEnv, name: 'live', runtime_class: 'live', project_id: projectId },
      ],
      "the signup's environments, in its shape, with their project; test before live",
    );

    // An invited member (here a row in memberships) who never saw the signup answer finds them and acts in them.
    const u = await signUp(anon);
    const userId = (await sql`select user_id from credentials where kind = 'pat' and organization_id = ${u.orgId}`)[0]!.user_id as string;
    await sql`insert into memberships (organization_id, user_id, role) values (${owner.orgId}, ${userId}, 'viewer')`;
    const viewer = bearer(u.pat);
    const seen = await viewer.get(path);
    t.same(seen.body, r.body, 'a viewer lists them');
    t.equal((await bearer(u.pat, seen.body.data[1].id).get('/v1/customers')).status, 200, 'and reads in the live environment it learned');

    const p1 = await patOnly.get(`${path}?limit=1`);
    t.same(p1.body.data, [r.body.data[0]]);
    t.equal(p1.body.has_more, true);
    const p2 = await patOnly.get(`${path}?limit=1&cursor=${p1.body.next_cursor}`);
    t.same(p2.body, { data: [r.body.data[1]], next_cursor: null, has_more: false }, 'limit=1 pages through them');
    t.same(err(await patOnly.get(`/v1/organizations/${u.orgId}/environments?cursor=${p1.body.next_cursor}`)), { status: 400, code: 'invalid_cursor', param: 'cursor' }, "another organization's cursor");
    t.same(err(await patOnly.get(`${path}?limit=0`)), { status: 400, code: 'validation_failed', param: 'limit' });
    t.same(err(await patOnly.get(`${path}?runtime_class=live`)), { status: 400, code: 'validation_failed', param: 'runtime_class' }, 'no filter is silently ignored');

    const outsider = await signUp(anon);
    t.same(err(await bearer(outsider.pat).get(path)), { status: 404, code: 'resource_not_found', param: 'id' }, 'a non-member');
    t.same(err(await patOnly.get('/v1/organizations/org_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ/environments')), { status: 404, code: 'resource_not_found', param: 'id' }, 'an unknown organization, the same');
    t.same(err(await patOnly.get(`/v1/organizations/${'o'.repeat(65)}/environments`)), { status: 400, code: 'validation_failed', param: 'id' });
    t.same(err(await owner.server.get(path)), { status: 403, code: 'forbidden', param: undefined }, 'a secret key');
    t.same(err(await anon.get(path)), { status: 401, code: 'authentication_required', param: undefined });
  });

  await t.test('POST /v1/api_keys: secret and publishable shapes; token only at creation; errors', async (t) => {
    const key = idem();
    const s = await owner.admin.post('/v1/api_keys', { kind: 'secret', name: 'backend' }, key);
    t.equal(s.status, 201);
    t.match(s.body, { id: /^key_/, kind: 'secret', name: 'backend', token: /^osk_/, token_hint: String, allowed_events: [], allowed_origins: [], environment_id: owner.testEnv, created_at: String, revoked_at: null });
    t.same(s.body.scopes, allScopes.filter((x) => x !== 'customer_sessions:write'), 'default: every scope but customer_sessions:write');
    t.notOk(s.body.token_hint.includes(s.body.token), 'the hint is not the token');
    const replay = await owner.admin.post('/v1/api_keys', { kind: 'secret', name: 'backend' }, key);
    t.equal(replay.status, 201);
    t.same(replay.body, { ...s.body, token: null }, 'a replay answers the stored key without its token');

    const p = await owner.admin.post(
      '/v1/api_keys',
      { kind: 'publishable', name: 'web', allowed_events: ['app.opened', 'app.opened'], allowed_origins: ['https://shop.example.com'] },
      idem(),
    );
    t.equal(p.status, 201);
    t.match(p.body, { kind: 'publishable', token: /^opk_/, scopes: ['events:write'], allowed_events: ['app.opened'], allowed_origins: ['https://shop.example.com'] });
    t.same(p.body.allowed_events, ['app.opened'], 'a repeated event name is kept once');
    const longest = `a${'b'.repeat(127)}`;
    t.same((await owner.admin.post('/v1/api_keys', { kind: 'publishable', name: 'long', allowed_events: [longest, 'level_2.done'] }, idem())).body.allowed_events, [longest, 'level_2.done'], '128 characters, digits and underscores');
    const web = bearer(p.body.token);
    const ev = { id: 'w-1', name: 'app.opened', customer_id: 'web-1', occurred_at: now() };
    t.equal((await web.post('/v1/events', ev, { origin: 'https://shop.example.com' })).status, 202, 'the publishable key sends its event');
    t.same(err(await web.post('/v1/events', { ...ev, id: 'w-2' }, { origin: 'https://evil.example.com' })), { status: 403, code: 'origin_not_allowed', param: undefined });

    const scoped = await owner.admin.post('/v1/api_keys', { kind: 'secret', name: 'minter', scopes: ['customer_sessions:write', 'customers:read', 'customers:read'] }, idem());
    t.same(scoped.body.scopes, ['customers:read', 'customer_sessions:write'], 'the owner may grant customer_sessions:write; scopes canonical');

    const cases: Array<[string, Record<string, unknown>, string]> = [
      ['kind missing', { name: 'x' }, 'kind'],
      ['kind unknown', { kind: 'root', name: 'x' }, 'kind'],
      ['name missing', { kind: 'secret' }, 'name'],
      ['name empty', { kind: 'secret', name: '' }, 'name'],
      ['name over 120', { kind: 'secret', name: 'n'.repeat(121) }, 'name'],
      ['unknown scope', { kind: 'secret', name: 'x', scopes: ['root:all'] }, 'scopes[0]'],
      ['no scope', { kind: 'secret', name: 'x', scopes: [] }, 'scopes'],
      ['secret with allowed_events', { kind: 'secret', name: 'x', allowed_events: ['a.b'] }, 'allowed_events'],
      ['secret with allowed_origins', { kind: 'secret', name: 'x', allowed_origins: ['https://a.example'] }, 'allowed_origins'],
      ['publishable without allowed_events', { kind: 'publishable', name: 'x' }, 'allowed_events'],
      ['publishable with empty allowed_events', { kind: 'publishable', name: 'x', allowed_events: [] }, 'allowed_events'],
      ['publishable with another scope', { kind: 'publishable', name: 'x', allowed_events: ['a.b'], scopes: ['customers:read'] }, 'scopes'],
      ['publishable with a bad origin', { kind: 'publishable', name: 'x', allowed_events: ['a.b'], allowed_origins: ['https://a.example/path'] }, 'allowed_origins[0]'],
      // allowed_events are event names as POST /v1/events takes them (dotted snake_case, 1-128).
      ['publishable with an event name POST /v1/events refuses', { kind: 'publishable', name: 'x', allowed_events: ['page.viewed', 'Page Viewed!'] }, 'allowed_events[1]'],
      ['publishable with an upper-case event name', { kind: 'publishable', name: 'x', allowed_events: ['Page.viewed'] }, 'allowed_events[0]'],
      ['publishable with an event name ending in a dot', { kind: 'publishable', name: 'x', allowed_events: ['page.'] }, 'allowed_events[0]'],
      ['publishable with an empty event name', { kind: 'publishable', name: 'x', allowed_events: [''] }, 'allowed_events[0]'],
      ['publishable with an event name over 128', { kind: 'publishable', name: 'x', allowed_events: [`a${'b'.repeat(128)}`] }, 'allowed_events[0]'],
      ['unknown field', { kind: 'secret', name: 'x', environment_id: owner.liveEnv }, 'environment_id'],
    ];
    for (const [name, body, param] of cases) {
      t.same(err(await owner.admin.post('/v1/api_keys', body, idem())), { status: 400, code: 'validation_failed', param }, name);
    }
    const body = { kind: 'secret', name: 'x' };
    t.same(err(await owner.admin.post('/v1/api_keys', body)), { status: 400, code: 'idempotency_key_required', param: 'Idempotency-Key' });
    t.same(err(await owner.admin.post('/v1/api_keys', { kind: 'secret', name: 'other' }, key)), { status: 422, code: 'idempotency_key_reused', param: 'Idempotency-Key' });
    t.same(err(await owner.server.post('/v1/api_keys', body, idem())), { status: 403, code: 'forbidden', param: undefined }, 'a secret key cannot create keys');
    t.same(err(await web.post('/v1/api_keys', body, idem())), { status: 403, code: 'forbidden', param: undefined }, 'a publishable key, like a secret key (no API key may create keys)');
    t.same(err(await patOnly.post('/v1/api_keys', body, idem())), { status: 403, code: 'environment_required', param: undefined }, 'a PAT without X-Service-Environment');
    t.same(err(await bearer(owner.pat, 'env_nope').post('/v1/api_keys', body, idem())), { status: 404, code: 'resource_not_found', param: undefined }, 'an unknown environment');
    t.same(err(await anon.post('/v1/api_keys', body, idem())), { status: 401, code: 'authentication_required', param: undefined });
  });

  await t.test('GET /v1/api_keys: a page of the environment\'s keys, never the token', async (t) => {
    const live = bearer(owner.pat, owner.liveEnv);
    const liveKey = await live.post('/v1/api_keys', { kind: 'secret', name: 'live only' }, idem());
    const r = await owner.admin.get('/v1/api_keys?limit=200');
    t.equal(r.status, 200);
    t.ok(r.body.data.length >= 4);
    t.ok(r.body.data.every((k: Record<string, unknown>) => !('token' in k) && k.environment_id === owner.testEnv), 'no token; only this environment');
    t.notOk(JSON.stringify(r.body).match(/osk_|opk_/), 'no secret value anywhere');
    t.notOk(r.body.data.some((k: { id: string }) => k.id === liveKey.body.id), "the live environment's key is not listed in test");
    const ids = r.body.data.map((k: { id: string }) => k.id);
    t.same(ids, [...ids].sort().reverse(), 'newest first');
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const p: { body: any } = await owner.admin.get(`/v1/api_keys?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      seen.push(...p.body.data.map((k: { id: string }) => k.id));
      cursor = p.body.next_cursor;
    } while (cursor !== null && seen.length < 500);
    t.same(seen, ids, 'limit=2 pages through the same list');
    t.same(err(await owner.admin.get('/v1/api_keys?cursor=!!!')), { status: 400, code: 'invalid_cursor', param: 'cursor' });
    t.same(err(await owner.admin.get('/v1/api_keys?limit=0')), { status: 400, code: 'validation_failed', param: 'limit' });
    t.same(err(await owner.server.get('/v1/api_keys')), { status: 403, code: 'forbidden', param: undefined }, 'a secret key');
    t.same(err(await patOnly.get('/v1/api_keys')), { status: 403, code: 'environment_required', param: undefined });
  });

  await t.test('POST /v1/api_keys/{id}/revoke: revoked_at; next use 401 credentials_revoked; other environment 404', async (t) => {
    const k = await owner.admin.post('/v1/api_keys', { kind: 'secret', name: 'to revoke' }, idem());
    const client = bearer(k.body.token);
    t.equal((await client.get('/v1/customers')).status, 200, 'works before');
    const r = await owner.admin.post(`/v1/api_keys/${k.body.id}/revoke`, {});
    t.equal(r.status, 200);
    t.match(r.body, { id: k.body.id, kind: 'secret', revoked_at: String, environment_id: owner.testEnv });
    t.notOk('token' in r.body);
    const twice = await owner.admin.post(`/v1/api_keys/${k.body.id}/revoke`, {});
    t.same(twice.body, r.body, 'revoking again answers the first revocation');
    let after = await client.get('/v1/customers');
    for (const until = Date.now() + 10_000; after.status !== 401 && Date.now() < until; ) {
      await new Promise((res) => setTimeout(res, 100));
      after = await client.get('/v1/customers');
    }
    t.same(err(after), { status: 401, code: 'credentials_revoked', param: undefined }, 'next use');
    t.same(err(await client.post('/v1/events', { id: 'r-1', name: 'app.opened', customer_id: 'r', occurred_at: now() })), { status: 401, code: 'credentials_revoked', param: undefined });
    const listed = (await owner.admin.get('/v1/api_keys?limit=200')).body.data.find((x: { id: string }) => x.id === k.body.id);
    t.equal(listed.revoked_at, r.body.revoked_at, 'the list shows revoked_at');

    const liveKey = await bearer(owner.pat, owner.liveEnv).post('/v1/api_keys', { kind: 'secret', name: 'live' }, idem());
    t.same(err(await owner.admin.post(`/v1/api_keys/${liveKey.body.id}/revoke`, {})), { status: 404, code: 'resource_not_found', param: 'id' }, "another environment's key id");
    t.equal((await bearer(liveKey.body.token).get('/v1/customers')).status, 200, 'and that key still works');
    t.same(err(await owner.admin.post('/v1/api_keys/key_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ/revoke', {})), { status: 404, code: 'resource_not_found', param: 'id' }, 'unknown id');
    t.same(err(await owner.admin.post(`/v1/api_keys/${'k'.repeat(65)}/revoke`, {})), { status: 400, code: 'validation_failed', param: 'id' }, 'id over 64 characters');
    const patId = (await sql`select id from credentials where kind = 'pat' and organization_id = ${owner.orgId}`)[0]!.id as string;
    t.same(err(await owner.admin.post(`/v1/api_keys/${patId}/revoke`, {})), { status: 404, code: 'resource_not_found', param: 'id' }, "a PAT's id is not an API key");
    t.equal((await patOnly.get('/v1/organizations')).status, 200, 'and the PAT still works');
    t.same(err(await owner.server.post(`/v1/api_keys/${liveKey.body.id}/revoke`, {})), { status: 403, code: 'forbidden', param: undefined }, 'a secret key');
    t.same(err(await patOnly.post(`/v1/api_keys/${liveKey.body.id}/revoke`, {})), { status: 403, code: 'environment_required', param: undefined });
  });

  await t.test('roles (decisions.md): viewer reads; editor writes programs, customers, ledger; admin manages keys', async (t) => {
    const member = async (role: string) => {
      const u = await signUp(anon);
      const userId = (await sql`select user_id from credentials where kind = 'pat' and organization_id = ${u.orgId}`)[0]!.user_id as string;
      await sql`insert into memberships (organization_id, user_id, role) values (${owner.orgId}, ${userId}, ${role})`;
      return bearer(u.pat, owner.testEnv);
    };
    const viewer = await member('viewer');
    const editor = await member('editor');
    const admin = await member('admin');
    const cust = (await owner.server.post('/v1/customers', { external_id: 'roles-1' }, idem())).body;
    const someKey = (await owner.admin.post('/v1/api_keys', { kind: 'secret', name: 'victim' }, idem())).body;

    // Viewer: reads work; writes are refused.
    t.equal((await viewer.get('/v1/customers')).status, 200, 'viewer lists customers');
    t.equal((await viewer.get(`/v1/customers/${cust.id}`)).status, 200, 'viewer reads a customer');
    t.equal((await viewer.get('/v1/api_keys')).status, 200, 'viewer lists keys (never tokens)');
    const orgs = (await viewer.get('/v1/organizations')).body.data.map((o: { id: string }) => o.id);
    t.ok(orgs.includes(owner.orgId), "viewer's organization list includes the organization it joined");
    t.same(err(await viewer.post('/v1/customers', { external_id: 'v-1' }, idem())), { status: 403, code: 'insufficient_scope', param: undefined }, 'viewer creates a customer');
    t.same(err(await viewer.patch(`/v1/customers/${cust.id}`, { attributes: { a: 1 } })), { status: 403, code: 'insufficient_scope', param: undefined }, 'viewer patches');
    t.same(err(await viewer.delete(`/v1/customers/${cust.id}`)), { status: 403, code: 'insufficient_scope', param: undefined }, 'viewer deletes');
    t.same(err(await viewer.post('/v1/events', { id: 'v-e', name: 'app.opened', customer_id: 'v', occurred_at: now() })), { status: 403, code: 'insufficient_scope', param: undefined }, 'viewer sends an event');
    t.same(err(await viewer.post('/v1/api_keys', { kind: 'secret', name: 'v' }, idem())), { status: 403, code: 'forbidden', param: undefined }, 'viewer creates a key: forbidden (a role check, no scope names keys)');
    t.same(err(await viewer.post(`/v1/api_keys/${someKey.id}/revoke`, {})), { status: 403, code: 'forbidden', param: undefined }, 'viewer revokes a key');

    // Editor: writes customers (events write a customer's data) and program configuration, not keys.
    t.equal((await editor.post('/v1/customers', { external_id: 'e-1' }, idem())).status, 201, 'editor creates a customer');
    t.equal((await editor.post('/v1/events', { id: 'e-e', name: 'app.opened', customer_id: 'e', occurred_at: now() })).status, 202, 'editor sends an event');
    t.equal((await editor.post('/v1/test_clock/advance', { seconds: 1 })).status, 200, "editor moves a test environment's clock (config:write)");
    const profile = { type: 'match_profile.create', key: 'editor_arena', metrics: [{ key: 'kills', minimum: 0, maximum: 100 }] };
    const cs = await editor.post('/v1/change_sets', { commands: [profile] }, idem());
    t.equal(cs.status, 201, 'editor stores a change set (config:write)');
    t.equal((await editor.post('/v1/change_set_applications', { change_set_id: cs.body.id }, idem())).status, 201, 'and applies it in a test environment');
    t.same(err(await editor.post('/v1/api_keys', { kind: 'secret', name: 'e' }, idem())), { status: 403, code: 'forbidden', param: undefined }, 'editor creates a key');
    t.same(err(await editor.post(`/v1/customers/${cust.id}/client_token`, {})), { status: 403, code: 'insufficient_scope', param: undefined }, 'editor mints a customer token');

    // Admin: keys, including the one a browser integration needs, and customer tokens.
    const made = await admin.post('/v1/api_keys', { kind: 'secret', name: 'a' }, idem());
    t.equal(made.status, 201, 'admin creates a key with the default scopes');
    const minter = await admin.post('/v1/api_keys', { kind: 'secret', name: 'a2', scopes: ['customer_sessions:write', 'customers:read'] }, idem());
    t.equal(minter.status, 201, 'admin grants customer_sessions:write');
    t.same(minter.body.scopes, ['customers:read', 'customer_sessions:write']);
    const minted = await admin.post(`/v1/customers/${cust.id}/client_token`, {});
    t.equal(minted.status, 200, 'admin mints a customer token');
    t.equal((await bearer(minted.body.customer_token).get(`/v1/customers/${cust.id}`)).status, 200, 'and it reads its customer');
    t.equal((await admin.post(`/v1/api_keys/${made.body.id}/revoke`, {})).status, 200, 'admin revokes a key');

    // A member of another organization only: its environment is not found, for every role.
    const outsider = await signUp(anon);
    t.same(err(await bearer(outsider.pat, owner.testEnv).get('/v1/api_keys')), { status: 404, code: 'resource_not_found', param: undefined }, 'a non-member naming the environment');
  });
});
