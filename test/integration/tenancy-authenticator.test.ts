// The Authenticator against real PostgreSQL: the synchronous cached path, the full error matrix and
// its order, role -> scope resolution, customer tokens, caching of unknown tokens, and revocation
// reaching a second node through the bus and, with the bus message lost, through the poll backstop.
import t from 'tap';
import { ApiError } from '../../src/errors/api-error.js';
import { limits } from '../../src/limits.js';
import { MemoryBus, MemoryBusHub } from '../../src/persistence/memory/bus.js';
import { type AuthRequest, Authenticator, type CredentialSpec } from '../../src/tenancy/authenticator.js';
import { roleScopes } from '../../src/tenancy/roles.js';
import { TenancyService } from '../../src/tenancy/service.js';
import { hashToken } from '../../src/tenancy/tokens.js';
import { allScopes, type Principal, type Role, type Scope } from '../../src/tenancy/types.js';
import { sqlForTest } from '../helpers/sql.js';

const { sql } = await sqlForTest(t, 'postgres');
const tenancy = new TenancyService(sql, { signupEnabled: true });

const owner = await tenancy.signup({ email: 'owner@example.com', organization_name: 'Auth Org', timezone: 'UTC' });
const testEnv = owner.environments[0]!;
const liveEnv = owner.environments[1]!;
const stranger = await tenancy.signup({ email: 'stranger@example.com', organization_name: 'Other', timezone: 'UTC' });

const setup = new Authenticator(sql);
const ownerHere = await setup.authenticate(
  { authorization: `Bearer ${owner.token.token}`, environment: testEnv.id },
  { scopes: [], allow: ['pat'] },
);
const secret = await tenancy.createApiKey(ownerHere, { kind: 'secret', name: 'server' });
const narrow = await tenancy.createApiKey(ownerHere, { kind: 'secret', name: 'narrow', scopes: ['customers:read'] });
const webPub = await tenancy.createApiKey(ownerHere, {
  kind: 'publishable',
  name: 'web',
  allowed_events: ['page_view'],
  allowed_origins: ['https://shop.example.com'],
});
const anyPub = await tenancy.createApiKey(ownerHere, { kind: 'publishable', name: 'any', allowed_events: ['page_view'] });

const bearer = (token: string): string => `Bearer ${token}`;
const eventsRoute: CredentialSpec = { scopes: ['events:write'], allow: ['secret', 'publishable'] };
const secretRoute: CredentialSpec = { scopes: ['customers:write'], allow: ['secret', 'pat', 'session'] };
const managementOnly: CredentialSpec = { scopes: [], allow: ['pat', 'session'] };

/** Runs authenticate and reports the outcome as a value, whether it threw, rejected or resolved. */
async function outcome(a: Authenticator, req: AuthRequest, spec: CredentialSpec): Promise<Principal | string> {
  try {
    return await a.authenticate(req, spec);
  } catch (err) {
    if (err instanceof ApiError) return err.code;
    throw err;
  }
}

t.test('a cached credential resolves synchronously', async (t) => {
  const a = new Authenticator(sql);
  const req = { authorization: bearer(secret.token) };
  const first = a.authenticate(req, eventsRoute);
  t.ok(first instanceof Promise, 'the first use queries the database');
  const p1 = await first;
  const second = a.authenticate(req, eventsRoute);
  t.notOk(second instanceof Promise, 'the second use is a cache hit');
  t.equal(second, p1, 'the same Principal object');
  t.match(p1, {
    kind: 'secret',
    credentialId: secret.id,
    organizationId: owner.organization.id,
    environment: { id: testEnv.id, runtimeClass: 'test', organizationId: owner.organization.id, timezone: 'UTC' },
    userId: null,
    role: null,
    customerId: null,
  });
  // Refusals of a cached credential are synchronous throws too.
  t.throws(() => a.authenticate(req, managementOnly), { code: 'forbidden' });

  const pat = { authorization: bearer(owner.token.token), environment: liveEnv.id };
  await a.authenticate(pat, secretRoute);
  const patAgain = a.authenticate(pat, secretRoute);
  t.notOk(patAgain instanceof Promise, 'a management credential in a known environment is a cache hit');
  t.equal((patAgain as Principal).environment?.id, liveEnv.id);
});

t.test('error matrix', async (t) => {
  const a = new Authenticator(sql);
  const cases: Array<[string, AuthRequest, CredentialSpec, string]> = [
    ['no header', {}, eventsRoute, 'authentication_required'],
    ['not bearer', { authorization: `Basic ${secret.token}` }, eventsRoute, 'authentication_required'],
    ['empty bearer', { authorization: 'Bearer ' }, eventsRoute, 'authentication_required'],
    ['unknown token', { authorization: bearer('osk_DOESNOTEXIST') }, eventsRoute, 'invalid_credentials'],
    ['oversized token', { authorization: bearer('x'.repeat(5000)) }, eventsRoute, 'invalid_credentials'],
    ['publishable on a secret route', { authorization: bearer(anyPub.token) }, secretRoute, 'event_requires_secret_key'],
    ['secret key on a management route', { authorization: bearer(secret.token) }, managementOnly, 'forbidden'],
    // event_requires_secret_key only where a secret key would do; an operators' route takes no key.
    ['publishable on a management route', { authorization: bearer(anyPub.token) }, managementOnly, 'forbidden'],
    ['PAT on a key-only route', { authorization: bearer(owner.token.token), environment: testEnv.id }, eventsRoute, 'forbidden'],
    ['missing scope', { authorization: bearer(narrow.token) }, secretRoute, 'insufficient_scope'],
    ['publishable without Origin', { authorization: bearer(webPub.token) }, eventsRoute, 'origin_not_allowed'],
    [
      'publishable from another origin',
      { authorization: bearer(webPub.token), origin: 'https://evil.example.com' },
      eventsRoute,
      'origin_not_allowed',
    ],
    ['PAT without environment', { authorization: bearer(owner.token.token) }, secretRoute, 'environment_required'],
    [
      "PAT naming another organization's environment",
      { authorization: bearer(owner.token.token), environment: stranger.environments[0]!.id },
      secretRoute,
      'resource_not_found',
    ],
    [
      'PAT naming an environment that does not exist',
      { authorization: bearer(owner.token.token), environment: 'env_01NOPE' },
      secretRoute,
      'resource_not_found',
    ],
    ['PAT naming a malformed environment', { authorization: bearer(owner.token.token), environment: 'live' }, secretRoute, 'resource_not_found'],
  ];
  for (const [name, req, spec, code] of cases) {
    // Twice: the first answer comes from the database, the second from the cache; both must agree.
    t.equal(await outcome(a, req, spec), code, name);
    t.equal(await outcome(a, req, spec), code, `${name} (cached)`);
  }

  t.match(await outcome(a, { authorization: bearer(webPub.token), origin: 'https://shop.example.com' }, eventsRoute), {
    kind: 'publishable',
    allowedEvents: ['page_view'],
    allowedOrigins: ['https://shop.example.com'],
  });
  t.match(await outcome(a, { authorization: bearer(anyPub.token) }, eventsRoute), { kind: 'publishable' }, 'no origins: any');
  t.match(await outcome(a, { authorization: `bearer ${secret.token}` }, eventsRoute), { kind: 'secret' }, 'scheme is case-insensitive');
  t.match(
    await outcome(a, { authorization: bearer(owner.token.token) }, { scopes: [], allow: ['pat'], environment: false }),
    { kind: 'pat', environment: null, role: null, userId: owner.user.id },
    'environment: false needs no header',
  );

  // Revocation is checked before the route's kind and scope rules (401 before 403).
  const doomed = await tenancy.createApiKey(ownerHere, { kind: 'publishable', name: 'doomed', allowed_events: ['x'] });
  await tenancy.revokeApiKey(ownerHere, doomed.id);
  t.equal(await outcome(a, { authorization: bearer(doomed.token) }, secretRoute), 'credentials_revoked');
  t.equal(await outcome(a, { authorization: bearer(doomed.token) }, eventsRoute), 'credentials_revoked');
});

t.test('role -> scope matrix for management credentials', async (t) => {
  const a = new Authenticator(sql);
  const expected: Record<Role, Scope[]> = {
    viewer: allScopes.filter((s) => s.endsWith(':read')),
    editor: [...allScopes.filter((s) => s.endsWith(':read')), 'programs:write', 'customers:write', 'ledger:write', 'events:write', 'config:write'],
    admin: [
      ...allScopes.filter((s) => s.endsWith(':read')),
      'programs:write',
      'customers:write',
      'ledger:write',
      'events:write',
      'config:write',
      'webhooks:write',
      'notifications:write',
      'customer_sessions:write',
    ],
    owner: [...allScopes],
  };
  for (const role of ['viewer', 'editor', 'admin', 'owner'] as const) {
    const member = await tenancy.signup({ email: `role-${role}@example.com`, organization_name: `${role} home`, timezone: 'UTC' });
    await sql`insert into memberships (organization_id, user_id, role) values (${owner.organization.id}, ${member.user.id}, ${role})`;
    const p = await outcome(a, { authorization: bearer(member.token.token), environment: testEnv.id }, managementOnly);
    if (typeof p === 'string') {
      t.fail(`${role}: ${p}`);
      continue;
    }
    t.equal(p.role, role);
    t.same([...p.scopes].sort(), [...expected[role]].sort(), `${role} scopes`);
    t.same([...roleScopes[role]].sort(), [...expected[role]].sort(), `${role} table`);
    for (const scope of allScopes) {
      const got = await outcome(a, { authorization: bearer(member.token.token), environment: testEnv.id }, { scopes: [scope], allow: ['pat'] });
      const allowed = expected[role].includes(scope);
      t.equal(typeof got === 'string' ? got : 'ok', allowed ? 'ok' : 'insufficient_scope', `${role} ${scope}`);
    }
    // In the member's own organization the same PAT is an owner.
    const home = await outcome(a, { authorization: bearer(member.token.token), environment: member.environments[0]!.id }, managementOnly);
    t.match(home, { role: 'owner' });
  }
});

t.test('cache lifetimes: positive TTL and the brief negative cache', async (t) => {
  let nowMs = Date.now();
  const a = new Authenticator(sql, { now: () => nowMs });

  // A role change shows after the credential cache TTL.
  const member = await tenancy.signup({ email: 'ttl@example.com', organization_name: 'ttl home', timezone: 'UTC' });
  await sql`insert into memberships (organization_id, user_id, role) values (${owner.organization.id}, ${member.user.id}, 'viewer')`;
  const req = { authorization: bearer(member.token.token), environment: testEnv.id };
  t.match(await outcome(a, req, managementOnly), { role: 'viewer' });
  await sql`update memberships set role = 'editor' where organization_id = ${owner.organization.id} and user_id = ${member.user.id}`;
  nowMs += limits.credentialCacheTtlMs - 1;
  t.match(await outcome(a, req, managementOnly), { role: 'viewer' }, 'still cached');
  nowMs += 2;
  t.match(await outcome(a, req, managementOnly), { role: 'editor' }, 'reloaded after the TTL');

  // An unknown token is remembered briefly: a credential that appears is seen after ~2 s.
  const token = 'osk_APPEARSLATER0000000000000000000000000000000000000';
  const late = { authorization: bearer(token) };
  t.equal(await outcome(a, late, eventsRoute), 'invalid_credentials');
  await sql`
    insert into credentials (id, kind, token_hash, token_hint, name, organization_id, environment_id, scopes)
    values ('key_LATE', 'secret', ${hashToken(token)}, '0000', 'late', ${owner.organization.id}, ${testEnv.id}, ${['events:write']})`;
  t.equal(await outcome(a, late, eventsRoute), 'invalid_credentials', 'negative answer cached');
  nowMs += 2001;
  t.match(await outcome(a, late, eventsRoute), { kind: 'secret', credentialId: 'key_LATE' });
});

/** The code and message of a refusal (or 'accepted'). */
async function refusal(a: Authenticator, req: AuthRequest, spec: CredentialSpec): Promise<{ code: string; message: string } | 'accepted'> {
  try {
    await a.authenticate(req, spec);
    return 'accepted';
  } catch (err) {
    if (err instanceof ApiError) return { code: err.code, message: err.message };
    throw err;
  }
}
const expired = { code: 'credentials_revoked', message: 'The credential has expired.' };
const revoked = { code: 'credentials_revoked', message: 'The credential has been revoked.' };

t.test('an expired session: credentials_revoked, saying it expired; a revoked one says revoked', async (t) => {
  let nowMs = Date.now();
  const a = new Authenticator(sql, { now: () => nowMs });
  const token = 'oses_EXPIRESSOON000000000000000000000000000000000000';
  await sql`
    insert into credentials (id, kind, token_hash, token_hint, name, user_id, scopes, expires_at)
    values ('ses_EXPIRING', 'session', ${hashToken(token)}, '0000', 'session', ${owner.user.id}, ${[...allScopes]},
            ${new Date(nowMs + 60_000)})`;
  const req = { authorization: bearer(token), environment: testEnv.id };
  t.match(await outcome(a, req, managementOnly), { kind: 'session', role: 'owner' }, 'valid before');
  nowMs += 60_000;
  t.same(await refusal(a, req, managementOnly), expired, 'cached entry');
  t.same(await refusal(new Authenticator(sql, { now: () => nowMs }), req, managementOnly), expired, 'a fresh node');
  await sql`update credentials set revoked_at = now() where id = 'ses_EXPIRING'`;
  t.same(await refusal(new Authenticator(sql, { now: () => nowMs }), req, managementOnly), revoked, 'revoked and expired: revoked');
});

t.test('customer tokens', async (t) => {
  let nowMs = Date.now();
  const a = new Authenticator(sql, { now: () => nowMs });
  const minter = await tenancy.createApiKey(ownerHere, { kind: 'secret', name: 'minter', scopes: ['customer_sessions:write'] });
  const minted = await tenancy.mintCustomerToken({
    environmentId: testEnv.id,
    customerId: 'cust_00001TESTCUSTOMER000000000',
    externalId: 'player-7',
    credentialId: minter.id,
  });
  const customerRoute: CredentialSpec = { scopes: ['customers:read'], allow: ['customer'] };
  const req = { authorization: bearer(minted.token) };
  const p = await a.authenticate(req, customerRoute);
  t.match(p, {
    kind: 'customer',
    customerId: 'cust_00001TESTCUSTOMER000000000',
    credentialId: minter.id,
    organizationId: owner.organization.id,
    environment: { id: testEnv.id },
    userId: null,
  });
  const cached = a.authenticate(req, customerRoute);
  t.notOk(cached instanceof Promise, 'verification is cached');
  t.throws(() => a.authenticate(req, eventsRoute), { code: 'forbidden' }, 'customer tokens only where routes allow them');
  t.throws(() => a.authenticate(req, { scopes: ['customers:write'], allow: ['customer'] }), { code: 'insufficient_scope' });

  // Forged: same claims, signed with another secret.
  const { SignJWT } = await import('jose');
  const forged = await new SignJWT({ env: testEnv.id, ext: 'player-7', cid: minter.id })
    .setProtectedHeader({ alg: 'HS256' })
    .setIssuer('loyalty-engine')
    .setAudience('customer')
    .setSubject('cust_00001TESTCUSTOMER000000000')
    .setExpirationTime('10m')
    .sign(new Uint8Array(32));
  t.equal(await outcome(a, { authorization: bearer(forged) }, customerRoute), 'invalid_credentials');

  // Unknown minting key: not a credential.
  const orphan = await tenancy.mintCustomerToken({ environmentId: testEnv.id, customerId: 'cust_y', externalId: 'y', credentialId: 'key_GONE' });
  t.equal(await outcome(a, { authorization: bearer(orphan.token) }, customerRoute), 'invalid_credentials');

  // Expiry, on the cached entry and on a fresh node: credentials_revoked, saying it expired.
  nowMs = minted.expiresAtMs;
  t.same(await refusal(a, req, customerRoute), expired, 'cached');
  const fresh = new Authenticator(sql, { now: () => nowMs });
  t.same(await refusal(fresh, req, customerRoute), expired, 'a fresh node (the JWT check)');

  // Revoking the minting key ends its customer tokens, on a node that has them cached.
  nowMs = Date.now();
  const b = new Authenticator(sql, { now: () => nowMs });
  const again = await tenancy.mintCustomerToken({ environmentId: testEnv.id, customerId: 'cust_z', externalId: 'z', credentialId: minter.id });
  const againReq = { authorization: bearer(again.token) };
  t.match(await outcome(b, againReq, customerRoute), { kind: 'customer' });
  await tenancy.revokeApiKey(ownerHere, minter.id);
  t.match(await outcome(b, againReq, customerRoute), { kind: 'customer' }, 'no bus, no poll: still cached');
  await b.start();
  t.teardown(() => b.stop());
  t.same(await refusal(b, againReq, customerRoute), revoked, 'the first poll marks it');
  t.equal(await outcome(new Authenticator(sql), againReq, customerRoute), 'credentials_revoked', 'and a fresh node refuses it');
});

async function waitFor(check: () => Promise<boolean>, deadlineMs: number): Promise<number> {
  const started = Date.now();
  while (Date.now() - started < deadlineMs) {
    if (await check()) return Date.now() - started;
    await new Promise((r) => setTimeout(r, 20));
  }
  return -1;
}

t.test('revocation reaches every node through the bus', async (t) => {
  const hub = new MemoryBusHub();
  const busA = new MemoryBus(hub);
  const busB = new MemoryBus(hub);
  const busService = new MemoryBus(hub);
  // Polling far apart: only the bus can deliver the revocation in time.
  const nodeA = new Authenticator(sql, { bus: busA, pollEveryMs: 3_600_000 });
  const nodeB = new Authenticator(sql, { bus: busB, pollEveryMs: 3_600_000 });
  await nodeA.start();
  await nodeB.start();
  t.teardown(async () => {
    await nodeA.stop();
    await nodeB.stop();
    await busA.close();
    await busB.close();
    await busService.close();
  });
  const service = new TenancyService(sql, { signupEnabled: true, bus: busService });
  const key = await service.createApiKey(ownerHere, { kind: 'secret', name: 'bus' });
  const req = { authorization: bearer(key.token) };
  t.match(await outcome(nodeA, req, eventsRoute), { kind: 'secret' });
  t.match(await outcome(nodeB, req, eventsRoute), { kind: 'secret' });
  t.notOk(nodeB.authenticate(req, eventsRoute) instanceof Promise, 'cached on node B');

  await service.revokeApiKey(ownerHere, key.id);
  // Any wait far below the hour-long poll proves the bus; 10 s because a loaded box is late.
  const seen = await waitFor(async () => (await outcome(nodeB, req, eventsRoute)) === 'credentials_revoked', 10_000);
  t.ok(seen >= 0, `node B refuses the key (${seen} ms)`);
  t.equal(await outcome(nodeA, req, eventsRoute), 'credentials_revoked', 'node A too');
  t.throws(() => nodeB.authenticate(req, eventsRoute), { code: 'credentials_revoked' }, 'still from the cache');
});

t.test('a lost bus message is covered by the poll backstop', async (t) => {
  const hub = new MemoryBusHub();
  const bus = new MemoryBus(hub);
  const node = new Authenticator(sql, { bus }); // default poll period: limits.revocationPropagationMs
  await node.start();
  t.teardown(async () => {
    await node.stop();
    await bus.close();
  });
  // The service publishes on a bus nobody hears: the message is lost.
  const deaf = new MemoryBus(new MemoryBusHub());
  t.teardown(() => deaf.close());
  const service = new TenancyService(sql, { signupEnabled: true, bus: deaf });
  const key = await service.createApiKey(ownerHere, { kind: 'secret', name: 'poll' });
  const req = { authorization: bearer(key.token) };
  t.match(await outcome(node, req, eventsRoute), { kind: 'secret' });
  t.notOk(node.authenticate(req, eventsRoute) instanceof Promise, 'cached');

  await service.revokeApiKey(ownerHere, key.id);
  // The poll runs every second; the wait is not a timing check (a loaded box runs the timer late).
  const seen = await waitFor(async () => (await outcome(node, req, eventsRoute)) === 'credentials_revoked', 10_000);
  t.ok(seen >= 0, `refused once the poll ran (${seen} ms)`);
  t.throws(() => node.authenticate(req, eventsRoute), { code: 'credentials_revoked' });
});

t.test('a load that raced a revocation is cached as revoked', async (t) => {
  // The row still reads as active (the revocation "has not committed" for this load), but the node
  // has already heard of the revocation: the entry it caches must be refused.
  const a = new Authenticator(sql);
  const key = await tenancy.createApiKey(ownerHere, { kind: 'secret', name: 'race' });
  a.markRevoked(key.id, 'not-yet-cached');
  t.equal(await outcome(a, { authorization: bearer(key.token) }, eventsRoute), 'credentials_revoked');
  const other = new Authenticator(sql);
  t.match(await outcome(other, { authorization: bearer(key.token) }, eventsRoute), { kind: 'secret' }, 'per node state');
});
