// Black-box API tests of who an account belongs to (spec 4.1; README "Accounts and email
// addresses"): a signup does not prove its email address, so an invitation to that address waits
// for a sign-in with the identity provider (test/fixtures/oidc), and the first such sign-in revokes
// the PATs signup issued; an invited address's first sign-in creates the account; without an
// identity provider an invitation that could never take effect is refused; signup's
// Idempotency-Key belongs to the address signing up, not to everyone.
import t from 'tap';
import { openSql } from '../../src/persistence/sql/db.js';
import { testIssuer } from '../fixtures/oidc/issuer.js';
import { type Client, databaseUrl, idem, signUp, startForTest, uniqueName } from '../helpers/service.js';

const email = () => `${uniqueName('a')}@example.com`;
const err = (r: { status: number; body: any }) => ({ status: r.status, code: r.body?.error?.code });

/** Revocations reach every node within a second (bus, then a poll): retry for up to 10 s (a loaded box is late). */
async function eventually401(c: Client, path: string): Promise<{ status: number; body: any }> {
  let r = await c.get(path);
  for (const until = Date.now() + 10_000; r.status !== 401 && Date.now() < until; ) {
    await new Promise((res) => setTimeout(res, 100));
    r = await c.get(path);
  }
  return r;
}

t.test('accounts with an identity provider', async (t) => {
  const idp = await testIssuer(t);
  const { anon, config } = await startForTest(t, {
    env: { OIDC_ISSUER: idp.issuer, OIDC_AUDIENCE: idp.audience, OIDC_JWKS_FILE: idp.jwksFile },
  });
  const sql = openSql({ url: databaseUrl, schema: config.DB_SCHEMA, max: 1 });
  t.teardown(() => sql.end());
  const bearer = (token: string, env?: string) => anon.with({ authorization: `Bearer ${token}`, ...(env ? { 'x-service-environment': env } : {}) });
  const signIn = async (mail: string, claims: Record<string, unknown> = {}) => {
    const r = await anon.post('/v1/auth/sessions', { id_token: await idp.sign({ sub: `sub-${mail}`, email: mail, ...claims }) });
    t.equal(r.status, 201, `${mail} signs in`);
    return r.body;
  };
  const owner = await signUp(anon);
  const o = bearer(owner.pat);
  const members = `/v1/organizations/${owner.orgId}/memberships`;

  await t.test('an invitation to an address someone signed up with waits for a sign-in with that address', async (t) => {
    const mail = email();
    const squat = await signUp(anon, mail);
    const sq = bearer(squat.pat);
    const invited = await o.post(members, { email: mail, role: 'admin' }, idem());
    t.equal(invited.status, 201, 'the invitation is made');
    t.match(invited.body, { organization_id: owner.orgId, email: mail, role: 'admin' });
    t.ok((await o.get(members)).body.data.some((m: { user_id: string }) => m.user_id === invited.body.user_id), 'and listed');

    // The PAT that signup gave whoever typed the address gains nothing from it.
    const orgs = (await sq.get('/v1/organizations')).body.data.map((x: { id: string }) => x.id);
    t.same(orgs, [squat.orgId], 'the organization is not in its list');
    t.same(err(await bearer(squat.pat, owner.testEnv).post('/v1/api_keys', { kind: 'secret', name: 'squat' }, idem())), { status: 404, code: 'resource_not_found' }, 'no key in its environments');
    t.same(err(await bearer(squat.pat, owner.testEnv).get('/v1/customers')), { status: 404, code: 'resource_not_found' }, 'no reads');
    t.same(err(await sq.get(members)), { status: 404, code: 'resource_not_found' }, 'no member list');
    t.same(err(await sq.get(`/v1/organizations/${owner.orgId}/environments`)), { status: 404, code: 'resource_not_found' }, 'no environment list');
    t.same(err(await sq.delete(`${members}/${invited.body.user_id}`)), { status: 404, code: 'resource_not_found' }, 'not even leaving');

    // The person the address belongs to signs in: the invitation takes effect, the signup's PAT dies.
    const s = await signIn(mail);
    t.equal(s.user.id, invited.body.user_id, 'the invited user');
    t.equal(s.created, false, 'the account was made by signup');
    t.match(
      [...s.memberships].sort((a: { role: string }, b: { role: string }) => a.role.localeCompare(b.role)),
      [{ organization_id: owner.orgId, role: 'admin' }, { organization_id: squat.orgId, role: 'owner' }],
    );
    t.same(err(await eventually401(sq, '/v1/organizations')), { status: 401, code: 'credentials_revoked' }, "the signup's PAT is revoked");
    const session = bearer(s.token.token, owner.testEnv);
    t.equal((await session.post('/v1/api_keys', { kind: 'secret', name: 'real' }, idem())).status, 201, 'the session acts as admin');
    t.equal((await bearer(s.token.token).get(members)).status, 200);
    t.equal((await bearer(s.token.token).get(`/v1/organizations/${owner.orgId}/environments`)).body.data.length, 2, 'nor the environments');
  });

  await t.test("the first sign-in of an address revokes the PATs of whoever signed up with it", async (t) => {
    const mail = email();
    const squat = await signUp(anon, mail);
    const atk = bearer(squat.pat);
    const keyBefore = await bearer(squat.pat, squat.testEnv).post('/v1/api_keys', { kind: 'secret', name: 'before' }, idem());
    t.equal(keyBefore.status, 201, 'signup, then a key in its own organization: the ordinary first steps work');

    const first = await signIn(mail, { name: 'Real Person' });
    t.equal(first.user.id, (await sql`select id from users where email = ${mail}`)[0]!.id, 'linked to the signup row');
    t.equal(first.created, false);
    t.equal(first.user.name, 'Tester', 'a name given at signup stays');
    t.same(err(await eventually401(atk, '/v1/organizations')), { status: 401, code: 'credentials_revoked' });
    const [row] = await sql`select origin, email_verified_at from users where email = ${mail}`;
    t.match(row, { origin: 'signup', email_verified_at: Date }, 'the address is now proven');

    // What the person creates from now on is theirs alone.
    const session = bearer(first.token.token);
    const org = await session.post('/v1/organizations', { name: 'Real Org' }, idem());
    t.equal(org.status, 201);
    t.same(err(await atk.get('/v1/organizations')), { status: 401, code: 'credentials_revoked' });
    const inNew = bearer(first.token.token, org.body.environments[0].id);
    t.equal((await inNew.post('/v1/api_keys', { kind: 'secret', name: 'k' }, idem())).status, 201, 'the session manages keys');

    // Later sign-ins revoke nothing: the first session keeps working.
    const second = await signIn(mail);
    t.equal(second.created, false);
    t.equal((await session.get('/v1/organizations')).status, 200, 'the first session still works');
  });

  await t.test("an invited address's first sign-in creates the account, with the token's name", async (t) => {
    const mail = email();
    const invited = await o.post(members, { email: mail, role: 'viewer' }, idem());
    t.equal(invited.status, 201);
    const first = await signIn(mail, { name: 'Invited Person' });
    t.equal(first.created, true, 'created: true');
    t.match(first.user, { id: invited.body.user_id, email: mail, name: 'Invited Person' });
    t.match(first.memberships, [{ organization_id: owner.orgId, user_id: invited.body.user_id, role: 'viewer' }]);
    const [row] = await sql`select origin, email_verified_at from users where email = ${mail}`;
    t.match(row, { origin: 'invitation', email_verified_at: Date });
    const viewer = bearer(first.token.token, owner.testEnv);
    t.equal((await viewer.get('/v1/api_keys')).status, 200, 'a viewer reads');
    t.same(err(await viewer.post('/v1/api_keys', { kind: 'secret', name: 'v' }, idem())), { status: 403, code: 'forbidden' });
    const again = await signIn(mail, { name: 'Another Name' });
    t.equal(again.created, false, 'the second sign-in creates nothing');
    t.equal(again.user.name, 'Invited Person', 'nor renames');

    // A brand-new person: created, as before.
    const fresh = await signIn(email(), { name: 'New' });
    t.equal(fresh.created, true);
    t.same(fresh.memberships, []);

    // Someone who signed in already: the invitation takes effect at once.
    const known = await o.post(members, { email: fresh.user.email, role: 'editor' }, idem());
    t.equal(known.status, 201);
    t.equal((await bearer(fresh.token.token, owner.testEnv).post('/v1/customers', { external_id: 'c-1' }, idem())).status, 201, 'the editor writes at once');
  });

  await t.test('a pending invitation to owner keeps nobody the last owner', async (t) => {
    const solo = await signUp(anon);
    const so = bearer(solo.pat);
    const base = `/v1/organizations/${solo.orgId}/memberships`;
    const soloId = (await sql`select user_id from memberships where organization_id = ${solo.orgId}`)[0]!.user_id as string;
    const invited = await so.post(base, { email: email(), role: 'owner' }, idem());
    t.equal(invited.status, 201);
    t.same(err(await so.patch(`${base}/${soloId}`, { role: 'admin' })), { status: 409, code: 'last_owner' }, 'the only effective owner stays');
    t.same(err(await so.delete(`${base}/${soloId}`)), { status: 409, code: 'last_owner' });
    t.equal((await so.patch(`${base}/${invited.body.user_id}`, { role: 'viewer' })).status, 200, 'the pending owner can be changed');
    t.equal((await so.delete(`${base}/${invited.body.user_id}`)).status, 204, 'and removed');
  });

  await t.test("signup's Idempotency-Key belongs to the address signing up", async (t) => {
    const key = idem();
    const a = { email: email(), organization_name: 'Q' };
    const b = { email: email(), organization_name: 'Q' };
    const first = await anon.post('/v1/auth/signup', a, key);
    t.equal(first.status, 201);
    const other = await anon.post('/v1/auth/signup', b, key);
    t.equal(other.status, 201, 'another person with the same key signs up');
    t.equal(other.headers.get('idempotent-replayed'), null);
    t.not(other.body.user.id, first.body.user.id);
    const replay = await anon.post('/v1/auth/signup', a, key);
    t.equal(replay.headers.get('idempotent-replayed'), 'true', 'the same person and body replay');
    t.same(replay.body, { ...first.body, token: { ...first.body.token, token: null } });
    t.same(err(await anon.post('/v1/auth/signup', { ...a, organization_name: 'R' }, key)), { status: 422, code: 'idempotency_key_reused' }, 'the same person, another body');
    const upper = await anon.post('/v1/auth/signup', { ...a, email: a.email.toUpperCase() }, key);
    t.same(err(upper), { status: 422, code: 'idempotency_key_reused' }, 'the address in another case is the same person');
  });
});

t.test('accounts without an identity provider', async (t) => {
  const { anon, config } = await startForTest(t);
  const sql = openSql({ url: databaseUrl, schema: config.DB_SCHEMA, max: 1 });
  t.teardown(() => sql.end());
  const owner = await signUp(anon);
  const o = anon.with({ authorization: `Bearer ${owner.pat}` });
  const members = `/v1/organizations/${owner.orgId}/memberships`;

  const unknown = email();
  const r = await o.post(members, { email: unknown, role: 'viewer' }, idem());
  t.same(err(r), { status: 501, code: 'capability_unavailable' }, 'an unknown address could never sign in');
  t.match(r.body.error.message, /identity provider/);
  t.equal((await sql`select count(*)::int as n from users where email = ${unknown}`)[0]!.n, 0, 'no user row is made');

  const mail = email();
  const other = await signUp(anon, mail);
  t.same(err(await o.post(members, { email: mail, role: 'viewer' }, idem())), { status: 501, code: 'capability_unavailable' }, 'nor can an address signup never proved');
  t.same((await anon.with({ authorization: `Bearer ${other.pat}` }).get('/v1/organizations')).body.data.map((x: { id: string }) => x.id), [other.orgId]);
  t.equal((await o.get(members)).body.data.length, 1, 'the owner alone');
});
