// Tenancy routes: their schemas' limits (spec part 8), their handlers called directly with a
// constructed RequestContext, and the whole pipeline through the gateway's invoke() with the real
// Authenticator, so routing, auth specs, validation and idempotency meet the service on PostgreSQL.
import { pino } from 'pino';
import t from 'tap';
import { tenancyRoutes } from '../../src/gateway/handlers/tenancy.js';
import type { AnyRoute, Method, RequestContext } from '../../src/gateway/route.js';
import { createGateway } from '../../src/gateway/server.js';
import { MemoryBus, MemoryBusHub } from '../../src/persistence/memory/bus.js';
import { MemoryIdempotencyStore } from '../../src/persistence/memory/idempotency-store.js';
import { Authenticator } from '../../src/tenancy/authenticator.js';
import { TenancyService } from '../../src/tenancy/service.js';
import type { Principal } from '../../src/tenancy/types.js';
import { testIssuer } from '../fixtures/oidc/issuer.js';
import { sqlForTest } from '../helpers/sql.js';

const { sql } = await sqlForTest(t, 'postgres');
const idp = await testIssuer(t);
// Wired as on a node: the service announces revocations on the bus the Authenticator listens to.
const hub = new MemoryBusHub();
const serviceBus = new MemoryBus(hub);
const authBus = new MemoryBus(hub);
const tenancy = new TenancyService(sql, {
  signupEnabled: true,
  oidc: { issuer: idp.issuer, audience: idp.audience, jwksFile: idp.jwksFile },
  bus: serviceBus,
});
const auth = new Authenticator(sql, { bus: authBus });
await auth.start();
t.teardown(async () => {
  await auth.stop();
  await serviceBus.close();
  await authBus.close();
});
const routes = tenancyRoutes({ tenancy });

function find(method: Method, path: string): AnyRoute {
  const r = routes.find((x) => x.method === method && x.path === path);
  if (r === undefined) throw new Error(`no route ${method} ${path}`);
  return r;
}

function ctx(over: Partial<RequestContext>): RequestContext {
  return {
    requestId: 'req_test',
    method: 'GET',
    path: '/',
    params: {},
    query: {},
    headers: {},
    body: undefined,
    rawBody: Buffer.alloc(0),
    principal: null as unknown as Principal,
    receivedAtMs: Date.now(),
    ...over,
  };
}

t.test('route table', async (t) => {
  t.same(
    routes.map((r) => `${r.method} ${r.path} ${r.auth.kind} ${r.idempotent === true}`),
    [
      'POST /v1/auth/signup none true',
      'POST /v1/auth/sessions none false',
      'POST /v1/organizations credential true',
      'GET /v1/organizations credential false',
      'GET /v1/organizations/:id/environments credential false',
      'POST /v1/api_keys credential true',
      'GET /v1/api_keys credential false',
      'POST /v1/api_keys/:id/revoke credential false',
    ],
  );
  for (const r of routes) {
    if (r.auth.kind === 'credential') t.same(r.auth.allow, ['pat', 'session'], `${r.method} ${r.path}: management only`);
  }
});

t.test('schemas enforce the spec limits', async (t) => {
  const signup = find('POST', '/v1/auth/signup').body!;
  const ok = { email: 'a@example.com', organization_name: 'Org' };
  t.match(signup.parse(ok), { timezone: 'UTC' }, 'timezone defaults to UTC');
  const bad: Array<[string, unknown]> = [
    ['email too long', { ...ok, email: `${'a'.repeat(243)}@example.com` }],
    ['email format', { ...ok, email: 'not-an-email' }],
    ['email missing', { organization_name: 'Org' }],
    ['organization_name missing', { email: 'a@example.com' }],
    ['organization_name empty', { ...ok, organization_name: '' }],
    ['organization_name 121', { ...ok, organization_name: 'x'.repeat(121) }],
    ['name empty', { ...ok, name: '' }],
    ['timezone 65', { ...ok, timezone: 'x'.repeat(65) }],
    ['unknown field', { ...ok, plan: 'pro' }],
  ];
  for (const [name, body] of bad) t.notOk(signup.safeParse(body).success, name);
  t.ok(signup.safeParse({ ...ok, organization_name: 'x'.repeat(120), name: 'y'.repeat(120) }).success, '120 is allowed');

  const session = find('POST', '/v1/auth/sessions').body!;
  t.notOk(session.safeParse({ id_token: 'x'.repeat(19) }).success, 'id_token under 20');
  t.notOk(session.safeParse({ id_token: 'x'.repeat(8193) }).success, 'id_token over 8192');
  t.ok(session.safeParse({ id_token: 'x'.repeat(8192) }).success);

  const keys = find('POST', '/v1/api_keys').body!;
  t.ok(keys.safeParse({ kind: 'secret', name: 'k' }).success);
  t.notOk(keys.safeParse({ kind: 'root', name: 'k' }).success, 'unknown kind');
  t.notOk(keys.safeParse({ kind: 'secret', name: 'k', scopes: ['everything'] }).success, 'unknown scope');
  t.notOk(keys.safeParse({ kind: 'secret' }).success, 'name required');
});

t.test('handlers called directly', async (t) => {
  const signupRoute = find('POST', '/v1/auth/signup');
  const reply = await signupRoute.handler(
    ctx({ method: 'POST', body: signupRoute.body!.parse({ email: 'direct@example.com', organization_name: 'Direct' }) }),
  );
  t.equal(reply.status, 201);
  const created = reply.body as { token: { token: string }; environments: Array<{ id: string }> };
  t.match(created.token.token, /^opat_/);
  const principal = await auth.authenticate(
    { authorization: `Bearer ${created.token.token}`, environment: created.environments[0]!.id },
    { scopes: [], allow: ['pat'] },
  );

  const createKey = find('POST', '/v1/api_keys');
  const keyReply = await createKey.handler(
    ctx({ method: 'POST', principal, body: createKey.body!.parse({ kind: 'secret', name: 'direct' }) }),
  );
  t.equal(keyReply.status, 201);
  const key = keyReply.body as { id: string; token: string };

  const revoke = find('POST', '/v1/api_keys/:id/revoke');
  const revoked = await revoke.handler(ctx({ method: 'POST', principal, params: { id: key.id } }));
  t.equal(revoked.status, 200);
  t.match(revoked.body, { id: key.id, revoked_at: /^\d{4}-/ });
  await t.rejects(
    async () => revoke.handler(ctx({ method: 'POST', principal, params: { id: 'key_missing' } })),
    { code: 'resource_not_found' },
    'handlers throw ApiError',
  );

  const list = find('GET', '/v1/organizations');
  const page = await list.handler(ctx({ principal, query: list.query!.parse({ limit: '1' }) }));
  t.match(page, { status: 200, body: { data: [{ name: 'Direct' }], has_more: false, next_cursor: null } });
  await t.rejects(async () => list.handler(ctx({ principal, query: { limit: 1, cursor: '!!' } })), {
    code: 'invalid_cursor',
  });
});

t.test('through the gateway pipeline', async (t) => {
  const gateway = createGateway({
    routes,
    authenticate: auth.authenticate,
    idempotency: new MemoryIdempotencyStore(),
    logger: pino({ level: 'silent' }),
    ready: async () => ({ ok: true, checks: {} }),
  });
  t.teardown(() => gateway.close());
  const call = (method: string, path: string, headers: Record<string, string>, body?: unknown) =>
    gateway.invoke({ method, path, headers: { 'content-type': 'application/json', ...headers }, body });

  const signupBody = { email: 'pipe@example.com', organization_name: 'Pipe Co', timezone: 'Europe/Paris' };
  t.match(await call('POST', '/v1/auth/signup', {}, signupBody), {
    status: 400,
    body: { error: { code: 'idempotency_key_required' } },
  });
  const signup = await call('POST', '/v1/auth/signup', { 'idempotency-key': 'signup-1' }, signupBody);
  t.equal(signup.status, 201);
  const s = signup.body as {
    token: { token: string };
    organization: { id: string; slug: string };
    environments: Array<{ id: string; name: string }>;
  };
  t.equal(s.organization.slug, 'pipe-co');
  const replay = await call('POST', '/v1/auth/signup', { 'idempotency-key': 'signup-1' }, signupBody);
  t.same(replay.body, { ...s, token: { ...s.token, token: null } }, 'a replay answers the stored result without the PAT');
  t.match(await call('POST', '/v1/auth/signup', { 'idempotency-key': 'signup-2' }, signupBody), {
    status: 409,
    body: { error: { code: 'already_exists', param: 'email' } },
  });
  t.match(await call('POST', '/v1/auth/signup', { 'idempotency-key': 'signup-3' }, { ...signupBody, email: 'tz@example.com', timezone: 'Moon/Base' }), {
    status: 400,
    body: { error: { code: 'validation_failed', param: 'timezone' } },
  });

  const pat = { authorization: `Bearer ${s.token.token}` };
  const testEnv = s.environments.find((e) => e.name === 'test')!.id;

  const orgs = await call('GET', '/v1/organizations', pat);
  t.match(orgs, { status: 200, body: { data: [{ id: s.organization.id, plan: { id: 'free', version: 1 } }], has_more: false } });
  t.match(await call('GET', '/v1/organizations', {}), { status: 401, body: { error: { code: 'authentication_required' } } });
  t.match(await call('GET', '/v1/organizations', { authorization: 'Bearer nope' }), {
    status: 401,
    body: { error: { code: 'invalid_credentials' } },
  });

  const org2 = await call('POST', '/v1/organizations', { ...pat, 'idempotency-key': 'org-2' }, { name: 'Pipe Two' });
  t.match(org2, { status: 201, body: { organization: { slug: 'pipe-two' }, environments: [{ name: 'test' }, { name: 'live' }] } });

  t.match(await call('POST', '/v1/api_keys', { ...pat, 'idempotency-key': 'k0' }, { kind: 'secret', name: 'k' }), {
    status: 403,
    body: { error: { code: 'environment_required' } },
  });
  const envPat = { ...pat, 'x-service-environment': testEnv };
  const key = await call('POST', '/v1/api_keys', { ...envPat, 'idempotency-key': 'k1' }, { kind: 'secret', name: 'server' });
  t.match(key, { status: 201, body: { kind: 'secret', token: /^osk_/, environment_id: testEnv } });
  const k = key.body as { id: string; token: string };
  t.match(await call('POST', '/v1/api_keys', { ...envPat, 'idempotency-key': 'k2' }, { kind: 'secret', name: 'k', scopes: ['nope'] }), {
    status: 400,
    body: { error: { code: 'validation_failed' } },
  });
  t.match(await call('POST', '/v1/api_keys', { ...envPat, 'idempotency-key': 'k3' }, { kind: 'publishable', name: 'web' }), {
    status: 400,
    body: { error: { code: 'validation_failed', param: 'allowed_events' } },
  });

  const keyAuth = { authorization: `Bearer ${k.token}` };
  t.match(await call('GET', '/v1/api_keys', keyAuth), { status: 403, body: { error: { code: 'forbidden' } } }, 'a secret key cannot manage keys');
  t.match(await call('POST', '/v1/api_keys', { ...keyAuth, 'idempotency-key': 'k4' }, { kind: 'secret', name: 'x' }), {
    status: 403,
    body: { error: { code: 'forbidden' } },
  });

  const list = await call('GET', '/v1/api_keys', envPat);
  t.match(list, { status: 200, body: { data: [{ id: k.id, token_hint: k.token.slice(-4) }] } });
  t.notOk(JSON.stringify(list.body).includes(k.token), 'the list never carries the token');

  const revoked = await call('POST', `/v1/api_keys/${k.id}/revoke`, envPat);
  t.match(revoked, { status: 200, body: { id: k.id, revoked_at: /^\d{4}-/ } });
  await new Promise((r) => setImmediate(r)); // bus delivery is asynchronous, as over a network
  t.match(await call('GET', '/v1/organizations', keyAuth), {
    status: 401,
    body: { error: { code: 'credentials_revoked' } },
  });
  t.match(await call('POST', '/v1/api_keys/key_unknown/revoke', envPat), { status: 404, body: { error: { code: 'resource_not_found' } } });

  t.match(await call('POST', '/v1/auth/sessions', {}, { id_token: 'short' }), { status: 400, body: { error: { code: 'validation_failed' } } });
  const idToken = await idp.sign({ sub: 'pipe-subject', email: 'pipe@example.com' });
  const session = await call('POST', '/v1/auth/sessions', {}, { id_token: idToken });
  t.match(session, {
    status: 201,
    body: { created: false, memberships: [{ role: 'owner' }, { role: 'owner' }], token: { expires_at: /^\d{4}-/ } },
  });
  const sessionToken = (session.body as { token: { token: string } }).token.token;
  const viaSession = await call('GET', '/v1/organizations', { authorization: `Bearer ${sessionToken}` });
  t.equal((viaSession.body as { data: unknown[] }).data.length, 2, 'the session sees both organizations');
  t.match(await call('POST', '/v1/auth/sessions', {}, { id_token: `${idToken.slice(0, -4)}AAAA` }), {
    status: 401,
    body: { error: { code: 'invalid_credentials' } },
  });

  const unconfigured = createGateway({
    routes: tenancyRoutes({ tenancy: new TenancyService(sql, { signupEnabled: false }) }),
    authenticate: auth.authenticate,
    idempotency: new MemoryIdempotencyStore(),
    logger: pino({ level: 'silent' }),
    ready: async () => ({ ok: true, checks: {} }),
  });
  t.teardown(() => unconfigured.close());
  t.match(await unconfigured.invoke({ method: 'POST', path: '/v1/auth/sessions', headers: {}, body: { id_token: idToken } }), {
    status: 501,
    body: { error: { code: 'capability_unavailable' } },
  });
  t.match(
    await unconfigured.invoke({
      method: 'POST',
      path: '/v1/auth/signup',
      headers: { 'idempotency-key': 'closed' },
      body: { email: 'closed@example.com', organization_name: 'Closed' },
    }),
    { status: 403, body: { error: { code: 'forbidden' } } },
  );
});
