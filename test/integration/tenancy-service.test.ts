// TenancyService on real PostgreSQL (unique schema per run): signup, OIDC sessions, organizations and
// API keys, with every error code the service answers. Principals come from the real Authenticator,
// so these tests also pin how credentials resolve after creation.
import { createHash } from 'node:crypto';
import t from 'tap';
import { ApiError } from '../../src/errors/api-error.js';
import { decodeCursor } from '../../src/gateway/pagination.js';
import { Authenticator } from '../../src/tenancy/authenticator.js';
import { CustomerTokens } from '../../src/tenancy/customer-tokens.js';
import { defaultSecretKeyScopes } from '../../src/tenancy/roles.js';
import { TenancyService } from '../../src/tenancy/service.js';
import { allScopes, type CredentialKind, type Principal, type Role } from '../../src/tenancy/types.js';
import { testIssuer } from '../fixtures/oidc/issuer.js';
import { sqlForTest } from '../helpers/sql.js';

const { sql } = await sqlForTest(t, 'postgres');
const tenancy = new TenancyService(sql, { signupEnabled: true });
const auth = new Authenticator(sql);

const management: CredentialKind[] = ['pat', 'session'];
const firstPage = { limit: 50, after: null, scope: 'test-list' };

async function principal(token: string, environment?: string, origin?: string): Promise<Principal> {
  return auth.authenticate(
    { authorization: `Bearer ${token}`, environment, origin },
    { scopes: [], allow: ['pat', 'session', 'secret', 'publishable'], environment: environment !== undefined },
  );
}

function apiError(code: string, param?: string) {
  return param === undefined ? { constructor: ApiError, code } : { constructor: ApiError, code, param };
}

let counter = 0;
async function signup(orgName = 'Acme Inc', timezone = 'UTC') {
  counter += 1;
  return tenancy.signup({ email: `User${counter}@Example.com`, name: `User ${counter}`, organization_name: orgName, timezone });
}

/** Adds an existing user to an organization with a role (no invitation API yet) and gives them a PAT. */
async function memberWithRole(orgId: string, role: Role): Promise<string> {
  const s = await signup(`Own org of ${role}`);
  await sql`insert into memberships (organization_id, user_id, role) values (${orgId}, ${s.user.id}, ${role})`;
  return s.token.token;
}

t.test('signup creates user, organization, project, two environments and an owner PAT', async (t) => {
  const r = await tenancy.signup({
    email: 'Founder@Example.COM',
    name: 'Founder',
    organization_name: 'Zeta Games',
    timezone: 'Europe/Berlin',
  });
  t.match(r.user, { id: /^usr_/, email: 'founder@example.com', name: 'Founder' });
  t.ok(!Number.isNaN(Date.parse(r.user.created_at)));
  t.match(r.organization, { id: /^org_/, name: 'Zeta Games', slug: 'zeta-games' });
  t.match(r.project, { id: /^proj_/ });
  t.same(
    r.environments.map((e) => [e.name, e.runtime_class]),
    [
      ['test', 'test'],
      ['live', 'live'],
    ],
  );
  t.ok(r.environments.every((e) => e.id.startsWith('env_')));
  t.match(r.token, { id: /^pat_/, token: /^opat_/ });
  t.same(r.token.scopes, [...allScopes]);

  const envRows = await sql`select name, autonomy, timezone from environments where organization_id = ${r.organization.id} order by name`;
  t.same(
    envRows.map((e) => [e.name, e.autonomy, e.timezone]),
    [
      ['live', 'limits', 'Europe/Berlin'],
      ['test', 'auto', 'Europe/Berlin'],
    ],
  );
  const [m] = await sql`select role from memberships where organization_id = ${r.organization.id} and user_id = ${r.user.id}`;
  t.equal(m?.role, 'owner');

  // The secret exists only as its sha256.
  const [cred] = await sql`select * from credentials where id = ${r.token.id}`;
  t.equal(cred?.token_hash, createHash('sha256').update(r.token.token).digest('hex'));
  t.notOk(JSON.stringify(cred).includes(r.token.token));

  const p = await principal(r.token.token, r.environments[1]!.id);
  t.equal(p.kind, 'pat');
  t.equal(p.role, 'owner');
  t.equal(p.userId, r.user.id);
  t.equal(p.organizationId, r.organization.id);
  t.equal(p.environment?.runtimeClass, 'live');
  t.equal(p.scopes.size, allScopes.length);
});

t.test('signup refusals', async (t) => {
  await signup();
  await t.rejects(
    tenancy.signup({ email: `user${counter}@example.com`, organization_name: 'Again', timezone: 'UTC' }),
    apiError('already_exists', 'email'),
    'same email in another case is the same account',
  );
  await t.rejects(
    tenancy.signup({ email: 'tz@example.com', organization_name: 'Tz', timezone: 'Mars/Olympus' }),
    apiError('validation_failed', 'timezone'),
  );
  const [row] = await sql`select count(*)::int as n from users where email = 'tz@example.com'`;
  t.equal(row?.n, 0, 'a refused signup leaves nothing behind');

  const closed = new TenancyService(sql, { signupEnabled: false });
  await t.rejects(
    closed.signup({ email: 'closed@example.com', organization_name: 'Closed', timezone: 'UTC' }),
    apiError('forbidden'),
  );
  const [closedRow] = await sql`select count(*)::int as n from users where email = 'closed@example.com'`;
  t.equal(closedRow?.n, 0);
});

t.test('organization slugs get a numeric suffix on a clash', async (t) => {
  const a = await signup('Clash & Co');
  const b = await signup('Clash & Co');
  const c = await signup('clash co');
  const d = await signup('!!!');
  t.equal(a.organization.slug, 'clash-co');
  t.equal(b.organization.slug, 'clash-co-2');
  t.equal(c.organization.slug, 'clash-co-3');
  t.equal(d.organization.slug, 'org');
});

t.test('createOrganization and listOrganizations', async (t) => {
  const s = await signup('First Org');
  const pat = await principal(s.token.token);
  const created = await tenancy.createOrganization(pat, { name: 'Second Org', timezone: 'America/New_York' });
  t.match(created.organization, { id: /^org_/, name: 'Second Org', slug: 'second-org' });
  t.equal(created.environments.length, 2);
  const [m] = await sql`select role from memberships where organization_id = ${created.organization.id} and user_id = ${s.user.id}`;
  t.equal(m?.role, 'owner', 'the caller owns the new organization');
  await t.rejects(
    tenancy.createOrganization(pat, { name: 'Bad tz', timezone: 'Nowhere/Land' }),
    apiError('validation_failed', 'timezone'),
  );

  const page = await tenancy.listOrganizations(pat, firstPage);
  t.same(
    page.data.map((o) => o.id),
    [created.organization.id, s.organization.id],
    'only the caller\'s organizations, newest first',
  );
  t.same(Object.keys(page.data[0]!).sort(), [
    'ai_drafting_disabled',
    'billing_mode',
    'created_at',
    'id',
    'name',
    'plan',
    'slug',
    'updated_at',
    'version',
  ]);
  t.match(page.data[0], { plan: { id: 'free', version: 1 }, billing_mode: 'none', ai_drafting_disabled: false, version: 1 });
  t.equal(page.has_more, false);
  t.equal(page.next_cursor, null);

  const p1 = await tenancy.listOrganizations(pat, { limit: 1, after: null, scope: 'test-list' });
  t.equal(p1.data.length, 1);
  t.equal(p1.has_more, true);
  t.type(p1.next_cursor, 'string');
  const p2 = await tenancy.listOrganizations(pat, { limit: 1, after: decodeCursor(p1.next_cursor!, 'test-list'), scope: 'test-list' });
  t.same(
    p2.data.map((o) => o.id),
    [s.organization.id],
  );
  t.equal(p2.has_more, false);

  const key = await tenancy.createApiKey(await principal(s.token.token, s.environments[0]!.id), {
    kind: 'secret',
    name: 'server',
  });
  const keyPrincipal = await principal(key.token);
  await t.rejects(tenancy.listOrganizations(keyPrincipal, firstPage), apiError('forbidden'));
  await t.rejects(tenancy.createOrganization(keyPrincipal, { name: 'x', timezone: 'UTC' }), apiError('forbidden'));
});

t.test('API keys: create, list, revoke', async (t) => {
  const s = await signup('Keys Org');
  const [testEnv, liveEnv] = s.environments;
  const owner = await principal(s.token.token, testEnv!.id);

  const secret = await tenancy.createApiKey(owner, { kind: 'secret', name: 'backend' });
  t.match(secret, {
    id: /^key_/,
    kind: 'secret',
    name: 'backend',
    token: /^osk_/,
    environment_id: testEnv!.id,
    allowed_events: [],
    allowed_origins: [],
    revoked_at: null,
  });
  t.equal(secret.token_hint, secret.token.slice(-4));
  t.same(secret.scopes, [...defaultSecretKeyScopes]);
  t.notOk(secret.scopes.includes('customer_sessions:write'), 'not a default scope');

  const minting = await tenancy.createApiKey(owner, {
    kind: 'secret',
    name: 'sessions',
    scopes: ['customer_sessions:write', 'customers:read', 'customers:read'],
  });
  t.same(minting.scopes, ['customers:read', 'customer_sessions:write'], 'deduplicated, canonical order');

  const pub = await tenancy.createApiKey(owner, {
    kind: 'publishable',
    name: 'web',
    allowed_events: ['page_view', 'add_to_cart'],
    allowed_origins: ['https://shop.example.com'],
  });
  t.match(pub, { token: /^opk_/, scopes: ['events:write'], allowed_events: ['page_view', 'add_to_cart'] });
  t.same(pub.allowed_origins, ['https://shop.example.com']);

  const keyPrincipal = await principal(secret.token);
  t.equal(keyPrincipal.environment?.id, testEnv!.id, 'the key is bound to the environment it was created in');

  // Validation.
  await t.rejects(
    tenancy.createApiKey(owner, { kind: 'publishable', name: 'no events' }),
    apiError('validation_failed', 'allowed_events'),
  );
  await t.rejects(
    tenancy.createApiKey(owner, { kind: 'publishable', name: 'p', allowed_events: ['a'], scopes: ['customers:read'] }),
    apiError('validation_failed', 'scopes'),
  );
  await t.rejects(
    tenancy.createApiKey(owner, { kind: 'publishable', name: 'p', allowed_events: ['a'], allowed_origins: ['shop.example.com'] }),
    apiError('validation_failed', 'allowed_origins[0]'),
  );
  await t.rejects(
    tenancy.createApiKey(owner, { kind: 'secret', name: 's', allowed_events: ['a'] }),
    apiError('validation_failed', 'allowed_events'),
  );
  await t.rejects(
    tenancy.createApiKey(owner, { kind: 'secret', name: 's', scopes: ['events:write', 'root:all'] }),
    apiError('validation_failed', 'scopes[1]'),
  );

  // Who may manage keys.
  await t.rejects(tenancy.createApiKey(keyPrincipal, { kind: 'secret', name: 'x' }), apiError('forbidden'));
  await t.rejects(
    tenancy.createApiKey(await principal(pub.token, undefined, 'https://shop.example.com'), { kind: 'secret', name: 'x' }),
    apiError('forbidden'),
  );
  await t.rejects(
    tenancy.createApiKey(await principal(s.token.token), { kind: 'secret', name: 'x' }),
    apiError('environment_required'),
  );
  const editor = await principal(await memberWithRole(s.organization.id, 'editor'), testEnv!.id);
  await t.rejects(tenancy.createApiKey(editor, { kind: 'secret', name: 'x' }), apiError('forbidden'));
  await t.rejects(tenancy.revokeApiKey(editor, secret.id), apiError('forbidden'));
  const admin = await principal(await memberWithRole(s.organization.id, 'admin'), testEnv!.id);
  const byAdmin = await tenancy.createApiKey(admin, { kind: 'secret', name: 'by admin' });
  t.same(byAdmin.scopes, [...defaultSecretKeyScopes], 'an admin creates default secret keys');
  // Nobody grants more than they hold: a PAT issued without a scope cannot put it on a key.
  const narrowToken = await memberWithRole(s.organization.id, 'admin');
  await sql`update credentials set scopes = array_remove(scopes, 'customer_sessions:write')
            where token_hash = ${createHash('sha256').update(narrowToken).digest('hex')}`;
  await t.rejects(
    tenancy.createApiKey(await principal(narrowToken, testEnv!.id), { kind: 'secret', name: 'x', scopes: ['customer_sessions:write'] }),
    apiError('insufficient_scope', 'scopes'),
    'a credential cannot grant a scope it lacks',
  );

  // Listing: this environment's keys only, newest first, never a token.
  const other = await tenancy.createApiKey(await principal(s.token.token, liveEnv!.id), { kind: 'secret', name: 'live' });
  const list = await tenancy.listApiKeys(editor, firstPage);
  t.same(
    list.data.map((k) => k.id),
    [byAdmin.id, pub.id, minting.id, secret.id],
  );
  t.notOk(JSON.stringify(list).includes('"token"'), 'no token field in a listing');
  for (const k of [secret, pub, minting, byAdmin]) t.notOk(JSON.stringify(list).includes(k.token));
  const paged = await tenancy.listApiKeys(editor, { limit: 3, after: null, scope: 'test-list' });
  t.equal(paged.has_more, true);
  const rest = await tenancy.listApiKeys(editor, { limit: 3, after: decodeCursor(paged.next_cursor!, 'test-list'), scope: 'test-list' });
  t.same(
    rest.data.map((k) => k.id),
    [secret.id],
  );
  await t.rejects(tenancy.listApiKeys(keyPrincipal, firstPage), apiError('forbidden'));

  // Revocation.
  const revoked = await tenancy.revokeApiKey(owner, secret.id);
  t.equal(revoked.id, secret.id);
  t.type(revoked.revoked_at, 'string');
  t.notOk('token' in revoked);
  const again = await tenancy.revokeApiKey(owner, secret.id);
  t.equal(again.revoked_at, revoked.revoked_at, 'revoking twice keeps the first revocation time');
  await t.rejects(tenancy.revokeApiKey(owner, other.id), apiError('resource_not_found'), "another environment's key");
  await t.rejects(tenancy.revokeApiKey(owner, s.token.id), apiError('resource_not_found'), 'a PAT is not an API key');
  await t.rejects(tenancy.revokeApiKey(owner, 'key_nope'), apiError('resource_not_found'));
  const stranger = await signup('Stranger Org');
  const strangerOwner = await principal(stranger.token.token, stranger.environments[0]!.id);
  await t.rejects(tenancy.revokeApiKey(strangerOwner, pub.id), apiError('resource_not_found'), "another tenant's key");

  const fresh = new Authenticator(sql);
  await t.rejects(
    async () => fresh.authenticate({ authorization: `Bearer ${secret.token}` }, { scopes: [], allow: ['secret'] }),
    apiError('credentials_revoked'),
  );

  // decisions.md: admins manage keys, so they grant customer_sessions:write (the browser integration's key).
  const minterByAdmin = await tenancy.createApiKey(admin, { kind: 'secret', name: 'minter by admin', scopes: ['customer_sessions:write'] });
  t.same(minterByAdmin.scopes, ['customer_sessions:write'], 'an admin grants customer_sessions:write');
});

t.test('sessions from OpenID Connect ID tokens', async (t) => {
  const unconfigured = new TenancyService(sql, { signupEnabled: true });
  await t.rejects(unconfigured.createSession('x'.repeat(40)), apiError('capability_unavailable'));

  const idp = await testIssuer(t);
  let nowMs = Date.now();
  const sessions = new TenancyService(sql, {
    signupEnabled: true,
    oidc: { issuer: idp.issuer, audience: idp.audience, jwksFile: idp.jwksFile },
    now: () => nowMs,
  });

  const first = await sessions.createSession(await idp.sign({ sub: 'subject-1', email: 'New.Person@Example.com', name: 'New Person' }));
  t.equal(first.created, true);
  t.match(first.user, { id: /^usr_/, email: 'new.person@example.com', name: 'New Person' });
  t.same(first.memberships, []);
  t.match(first.token, { token: /^oses_/ });
  t.same(first.token.scopes, [...allScopes]);
  t.equal(Date.parse(first.token.expires_at), nowMs + 30 * 24 * 3600_000);

  const second = await sessions.createSession(await idp.sign({ sub: 'subject-1', email: 'new.person@example.com' }));
  t.equal(second.created, false);
  t.equal(second.user.id, first.user.id);
  t.not(second.token.token, first.token.token, 'each sign-in is a new session');

  // A session is a management credential: it creates organizations and then acts in them.
  const bare = await principal(first.token.token);
  t.equal(bare.kind, 'session');
  const org = await sessions.createOrganization(bare, { name: 'Session Org', timezone: 'UTC' });
  const third = await sessions.createSession(await idp.sign({ sub: 'subject-1', email: 'new.person@example.com' }));
  t.match(third.memberships, [
    { organization_id: org.organization.id, user_id: first.user.id, email: 'new.person@example.com', role: 'owner' },
  ]);

  // An account made by signup is linked by email on its first sign-in.
  const s = await tenancy.signup({ email: 'linked@example.com', organization_name: 'Linked', timezone: 'UTC' });
  const linked = await sessions.createSession(await idp.sign({ sub: 'subject-linked', email: 'LINKED@example.com' }));
  t.equal(linked.created, false);
  t.equal(linked.user.id, s.user.id);
  t.match(linked.memberships, [{ organization_id: s.organization.id, role: 'owner' }]);

  // Refusals.
  await t.rejects(
    sessions.createSession(await idp.sign({ sub: 'other-subject', email: 'linked@example.com' })),
    apiError('invalid_credentials'),
    'an address linked to another subject',
  );
  await t.rejects(
    sessions.createSession(await idp.sign({ sub: 's2', email: 'x@example.com' }, { expiresInSeconds: -120 })),
    apiError('invalid_credentials'),
  );
  await t.rejects(
    sessions.createSession(await idp.sign({ sub: 's2', email: 'x@example.com' }, { audience: 'someone-else' })),
    apiError('invalid_credentials'),
  );
  await t.rejects(
    sessions.createSession(await idp.sign({ sub: 's2', email: 'x@example.com' }, { issuer: 'https://evil.example' })),
    apiError('invalid_credentials'),
  );
  await t.rejects(sessions.createSession(await idp.sign({ sub: 's2' })), apiError('invalid_credentials'), 'no email claim');
  await t.rejects(
    sessions.createSession(await idp.sign({ sub: 's2', email: 'x@example.com', email_verified: false })),
    apiError('invalid_credentials'),
  );
  const otherIdp = await testIssuer(t, idp.issuer);
  await t.rejects(
    sessions.createSession(await otherIdp.sign({ sub: 's2', email: 'x@example.com' }, { audience: idp.audience })),
    apiError('invalid_credentials'),
    'signed by a key the issuer does not publish',
  );
  await t.rejects(sessions.createSession('not.a.jwt-at-all'), apiError('invalid_credentials'));
  const [n] = await sql`select count(*)::int as n from users where email = 'x@example.com'`;
  t.equal(n?.n, 0, 'no refused token creates a user');

  // The session lasts 30 days.
  const sessionAuth = new Authenticator(sql, { now: () => nowMs });
  const token = first.token.token;
  const ok = await sessionAuth.authenticate({ authorization: `Bearer ${token}` }, { scopes: [], allow: management, environment: false });
  t.equal(ok.userId, first.user.id);
  nowMs += 30 * 24 * 3600_000;
  await t.rejects(
    async () => sessionAuth.authenticate({ authorization: `Bearer ${token}` }, { scopes: [], allow: management, environment: false }),
    apiError('credentials_revoked'),
    'an expired session is refused',
  );
});

t.test('sessions with keys from a JWKS URL', async (t) => {
  const idp = await testIssuer(t, 'https://remote-idp.test.example');
  const jwksUrl = await idp.serveJwks();
  const sessions = new TenancyService(sql, {
    signupEnabled: true,
    oidc: { issuer: idp.issuer, audience: idp.audience, jwksUrl },
  });
  const r = await sessions.createSession(await idp.sign({ sub: 'remote-1', email: 'remote@example.com' }));
  t.equal(r.created, true);
  t.equal(r.user.email, 'remote@example.com');
});

t.test('customer tokens', async (t) => {
  const s = await signup('Customer Org');
  const owner = await principal(s.token.token, s.environments[0]!.id);
  const key = await tenancy.createApiKey(owner, { kind: 'secret', name: 'k', scopes: ['customer_sessions:write'] });
  const minted = await tenancy.mintCustomerToken({
    environmentId: s.environments[0]!.id,
    customerId: 'cust_000TESTCUSTOMER0000000000',
    externalId: 'player-1',
    credentialId: key.id,
  });
  const lifetime = minted.expiresAtMs - Date.now();
  t.ok(lifetime > 14 * 60_000 && lifetime <= 15 * 60_000 + 1000, '15 minutes by default');

  // Another node (its own CustomerTokens) reads the same generated secret and accepts the token.
  const otherNode = new CustomerTokens(sql);
  const check = await otherNode.verify(minted.token);
  t.match(check, { ok: true, claims: { customerId: 'cust_000TESTCUSTOMER0000000000', externalId: 'player-1', credentialId: key.id } });
  const [secrets] = await sql`select count(*)::int as n from service_secrets`;
  t.equal(secrets?.n, 1, 'one signing secret for every node');

  await t.rejects(
    tenancy.mintCustomerToken({ environmentId: 'e', customerId: 'c', externalId: 'x', credentialId: 'k', ttlMs: 25 * 3600_000 }),
    apiError('validation_failed', 'ttl'),
  );
  const short = await tenancy.mintCustomerToken({
    environmentId: s.environments[0]!.id,
    customerId: 'cust_x',
    externalId: 'x',
    credentialId: key.id,
    ttlMs: 60_000,
  });
  t.ok(short.expiresAtMs - Date.now() <= 61_000);
});
