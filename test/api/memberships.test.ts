// Black-box API tests of membership management over real HTTP (spec 2.1, part 7 last_owner;
// decisions.md: admins manage members, only owners grant or remove owner): list, add by email
// (creating an unknown user without a credential), change a role, remove, with every error code.
// The members are people who signed in with the identity provider (test/fixtures/oidc), so their
// invitations take effect at once; test/api/accounts.test.ts covers invitations that wait.
import t from 'tap';
import { openSql } from '../../src/persistence/sql/db.js';
import { testIssuer } from '../fixtures/oidc/issuer.js';
import { databaseUrl, idem, signUp, startForTest, uniqueName } from '../helpers/service.js';

const email = () => `${uniqueName('m')}@example.com`;
const err = (r: { status: number; body: any }) => ({ status: r.status, code: r.body?.error?.code });

t.test('memberships over HTTP', async (t) => {
  const idp = await testIssuer(t);
  const { anon, config } = await startForTest(t, {
    env: { OIDC_ISSUER: idp.issuer, OIDC_AUDIENCE: idp.audience, OIDC_JWKS_FILE: idp.jwksFile },
  });
  const sql = openSql({ url: databaseUrl, schema: config.DB_SCHEMA, max: 1 });
  t.teardown(() => sql.end());
  const bearer = (token: string) => anon.with({ authorization: `Bearer ${token}` });

  const owner = await signUp(anon);
  const org = owner.orgId;
  const o = bearer(owner.pat);
  const base = `/v1/organizations/${org}/memberships`;
  const userOf = async (mail: string) => (await sql`select id from users where email = ${mail}`)[0]!.id as string;
  const ownerId = (await sql`select user_id from memberships where organization_id = ${org}`)[0]!.user_id as string;

  // Other people, each signed in (a session), to be added here with different roles.
  const account = async () => {
    const mail = email();
    const s = await anon.post('/v1/auth/sessions', { id_token: await idp.sign({ sub: uniqueName('sub'), email: mail }) });
    if (s.status !== 201) throw new Error(`sign-in failed: ${s.status} ${JSON.stringify(s.body)}`);
    return { mail, id: s.body.user.id as string, c: bearer(s.body.token.token) };
  };
  const admin = await account();
  const editor = await account();
  const viewer = await account();
  // Someone with an organization of their own (signup), never added here.
  const outsiderMail = email();
  const outsiderTenant = await signUp(anon, outsiderMail);
  const outsider = { mail: outsiderMail, id: await userOf(outsiderMail), c: bearer(outsiderTenant.pat), tenant: outsiderTenant };

  await t.test('GET: the owner alone, with the spec fields', async (t) => {
    const r = await o.get(base);
    t.equal(r.status, 200);
    t.equal(r.body.data.length, 1);
    t.match(r.body.data[0], { organization_id: org, user_id: ownerId, email: /@example\.com$/, role: 'owner', created_at: String });
    t.same(Object.keys(r.body.data[0]).sort(), ['created_at', 'email', 'organization_id', 'role', 'user_id']);
    t.equal(r.body.has_more, false);
  });

  await t.test('POST: 201 for known accounts; owner grants any role', async (t) => {
    for (const [who, role] of [
      [admin, 'admin'],
      [editor, 'editor'],
      [viewer, 'viewer'],
    ] as const) {
      const r = await o.post(base, { email: who.mail.toUpperCase(), role }, idem());
      t.equal(r.status, 201, `${role} added`);
      t.same(r.body, { organization_id: org, user_id: who.id, email: who.mail, role, created_at: r.body.created_at });
    }
  });

  await t.test('POST: an unknown email creates a user without a credential; replay; 409 already_exists', async (t) => {
    const mail = email();
    const key = idem();
    const r = await admin.c.post(base, { email: mail, role: 'viewer' }, key);
    t.equal(r.status, 201, 'an admin adds a viewer');
    t.match(r.body, { organization_id: org, user_id: /^usr_/, email: mail, role: 'viewer' });
    const creds = await sql`select count(*)::int as n from credentials where user_id = ${r.body.user_id as string}`;
    t.equal(creds[0]!.n, 0, 'the new user holds no credential');
    const replay = await admin.c.post(base, { email: mail, role: 'viewer' }, key);
    t.equal(replay.status, 201);
    t.equal(replay.headers.get('idempotent-replayed'), 'true');
    t.same(replay.body, r.body);
    t.same(err(await o.post(base, { email: mail, role: 'editor' }, idem())), { status: 409, code: 'already_exists' });
    const ownerMail = (await sql`select email from users where id = ${ownerId}`)[0]!.email as string;
    t.same(err(await o.post(base, { email: ownerMail, role: 'viewer' }, idem())), { status: 409, code: 'already_exists' }, 'the owner is a member');
    t.equal((await sql`select count(*)::int as n from users where email = ${mail}`)[0]!.n, 1, 'one user row');
  });

  await t.test('POST: 403 forbidden below admin, and for an admin granting owner', async (t) => {
    t.same(err(await editor.c.post(base, { email: email(), role: 'viewer' }, idem())), { status: 403, code: 'forbidden' });
    t.same(err(await viewer.c.post(base, { email: email(), role: 'viewer' }, idem())), { status: 403, code: 'forbidden' });
    t.same(err(await admin.c.post(base, { email: email(), role: 'owner' }, idem())), { status: 403, code: 'forbidden' });
    t.equal((await admin.c.post(base, { email: email(), role: 'admin' }, idem())).status, 201, 'an admin may grant admin');
  });

  await t.test("Idempotency-Key: one member never gets another's stored answer, and refusals are not stored", async (t) => {
    const inEnv = (c: typeof o) => c.with({ 'x-service-environment': owner.testEnv });
    const body = { kind: 'secret', name: uniqueName('k') };
    const key = idem();
    const created = await inEnv(o).post('/v1/api_keys', body, key);
    t.equal(created.status, 201);
    // The viewer repeating the owner's key and body runs the request under its own role.
    t.same(err(await inEnv(viewer.c).post('/v1/api_keys', body, key)), { status: 403, code: 'forbidden' }, 'no replay of the owner');
    t.equal((await inEnv(o).post('/v1/api_keys', body, key)).headers.get('idempotent-replayed'), 'true', 'the owner still replays');
    // A refusal of the caller is not the request's final answer: the owner may run it with the key.
    const other = { kind: 'secret', name: uniqueName('k') };
    const key2 = idem();
    t.same(err(await inEnv(viewer.c).post('/v1/api_keys', other, key2)), { status: 403, code: 'forbidden' });
    t.same(err(await inEnv(viewer.c).post('/v1/api_keys', other, key2)), { status: 403, code: 'forbidden' }, 'refused again, not replayed');
    const ran = await inEnv(o).post('/v1/api_keys', other, key2);
    t.equal(ran.status, 201, 'the owner creates the key');
    t.equal(ran.headers.get('idempotent-replayed'), null);
  });

  await t.test('POST: validation, idempotency key, credential kinds', async (t) => {
    t.same(err(await o.post(base, { email: 'nope', role: 'viewer' }, idem())), { status: 400, code: 'validation_failed' });
    t.same(err(await o.post(base, { email: email(), role: 'root' }, idem())), { status: 400, code: 'validation_failed' });
    t.same(err(await o.post(base, { email: email() }, idem())), { status: 400, code: 'validation_failed' });
    t.same(err(await o.post(base, { email: email(), role: 'viewer', extra: 1 }, idem())), { status: 400, code: 'validation_failed' });
    t.same(err(await o.post(base, { email: email(), role: 'viewer' })), { status: 400, code: 'idempotency_key_required' });
    const secret = await owner.server.get(base);
    t.ok(secret.status === 401 || secret.status === 403, `a secret key is refused (${secret.status})`);
  });

  await t.test('404 resource_not_found for a non-member and an unknown organization', async (t) => {
    const unknown = '/v1/organizations/org_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ/memberships';
    for (const [name, c, path] of [
      ['outsider', outsider.c, base],
      ['unknown org', o, unknown],
    ] as const) {
      t.same(err(await c.get(path)), { status: 404, code: 'resource_not_found' }, `${name}: GET`);
      t.same(err(await c.post(path, { email: email(), role: 'viewer' }, idem())), { status: 404, code: 'resource_not_found' }, `${name}: POST`);
      t.same(err(await c.patch(`${path}/${viewer.id}`, { role: 'editor' })), { status: 404, code: 'resource_not_found' }, `${name}: PATCH`);
      t.same(err(await c.delete(`${path}/${viewer.id}`)), { status: 404, code: 'resource_not_found' }, `${name}: DELETE`);
    }
    t.same(err(await o.patch(`${base}/${outsider.id}`, { role: 'editor' })), { status: 404, code: 'resource_not_found' }, 'PATCH a non-member');
    t.same(err(await o.delete(`${base}/${outsider.id}`)), { status: 404, code: 'resource_not_found' }, 'DELETE a non-member');
    t.same(err(await outsider.c.get(`/v1/organizations/${outsider.tenant.orgId}/memberships`)), { status: 200, code: undefined }, 'their own org lists');
  });

  await t.test('GET: any member lists; pages', async (t) => {
    const all = await viewer.c.get(`${base}?limit=200`);
    t.equal(all.status, 200, 'a viewer lists');
    const n = all.body.data.length as number;
    t.ok(n >= 6);
    const p1 = await editor.c.get(`${base}?limit=2`);
    t.equal(p1.body.data.length, 2);
    t.equal(p1.body.has_more, true);
    const seen = [...p1.body.data];
    let cursor = p1.body.next_cursor as string | null;
    while (cursor !== null) {
      const p = await editor.c.get(`${base}?limit=2&cursor=${cursor}`);
      t.equal(p.status, 200);
      seen.push(...p.body.data);
      cursor = p.body.next_cursor;
    }
    t.same(seen, all.body.data, 'the pages make up the whole list');
    t.same(err(await o.get(`${base}?cursor=!!`)), { status: 400, code: 'invalid_cursor' });
  });

  await t.test('PATCH: role rules and their immediate effect here', async (t) => {
    const r = await admin.c.patch(`${base}/${viewer.id}`, { role: 'editor' });
    t.equal(r.status, 200);
    t.same(r.body, { organization_id: org, user_id: viewer.id, email: viewer.mail, role: 'editor', created_at: r.body.created_at });
    t.same(err(await editor.c.patch(`${base}/${viewer.id}`, { role: 'viewer' })), { status: 403, code: 'forbidden' }, 'an editor may not');
    t.same(err(await admin.c.patch(`${base}/${viewer.id}`, { role: 'owner' })), { status: 403, code: 'forbidden' }, 'an admin may not grant owner');
    t.same(err(await admin.c.patch(`${base}/${ownerId}`, { role: 'admin' })), { status: 403, code: 'forbidden' }, 'an admin may not remove owner');
    t.same(err(await o.patch(`${base}/${ownerId}`, { role: 'admin' })), { status: 409, code: 'last_owner' }, 'the last owner stays');
    t.same(err(await o.patch(`${base}/${viewer.id}`, { role: 'boss' })), { status: 400, code: 'validation_failed' });
    t.equal((await o.patch(`${base}/${ownerId}`, { role: 'owner' })).status, 200, 'the last owner keeping owner is no change');

    // Demote the admin to viewer: their next management call sees the new role at once.
    t.equal((await o.patch(`${base}/${admin.id}`, { role: 'viewer' })).body.role, 'viewer');
    t.same(err(await admin.c.post(base, { email: email(), role: 'viewer' }, idem())), { status: 403, code: 'forbidden' }, 'demoted at once');
    t.equal((await o.patch(`${base}/${admin.id}`, { role: 'admin' })).body.role, 'admin');
    t.equal((await admin.c.post(base, { email: email(), role: 'viewer' }, idem())).status, 201, 'promoted at once');

    // Two owners: one may step down, the other then may not.
    t.equal((await o.patch(`${base}/${editor.id}`, { role: 'owner' })).body.role, 'owner', 'an owner grants owner');
    t.equal((await editor.c.patch(`${base}/${ownerId}`, { role: 'admin' })).body.role, 'admin', 'an owner removes owner');
    t.same(err(await editor.c.patch(`${base}/${editor.id}`, { role: 'viewer' })), { status: 409, code: 'last_owner' });
    t.equal((await editor.c.patch(`${base}/${ownerId}`, { role: 'owner' })).body.role, 'owner', 'and back');
  });

  await t.test('DELETE: rules, self-removal, last owner', async (t) => {
    // Now: owner and editor are owners, admin is admin, viewer is editor.
    const extra = await o.post(base, { email: email(), role: 'viewer' }, idem());
    t.same(err(await viewer.c.delete(`${base}/${extra.body.user_id}`)), { status: 403, code: 'forbidden' }, 'an editor may not remove others');
    t.same(err(await admin.c.delete(`${base}/${ownerId}`)), { status: 403, code: 'forbidden' }, 'an admin may not remove an owner');
    const del = await admin.c.delete(`${base}/${extra.body.user_id}`);
    t.equal(del.status, 204, 'an admin removes a viewer');
    t.equal(del.body, undefined, 'no body');
    t.same(err(await admin.c.delete(`${base}/${extra.body.user_id}`)), { status: 404, code: 'resource_not_found' }, 'gone');
    t.equal((await viewer.c.delete(`${base}/${viewer.id}`)).status, 204, 'a member removes themselves');
    t.same(err(await viewer.c.get(base)), { status: 404, code: 'resource_not_found' }, 'and no longer sees the organization');
    t.equal((await o.delete(`${base}/${editor.id}`)).status, 204, 'an owner removes another owner');
    t.same(err(await o.delete(`${base}/${ownerId}`)), { status: 409, code: 'last_owner' }, 'the last owner cannot leave');
    t.equal((await admin.c.delete(`${base}/${admin.id}`)).status, 204, 'an admin leaves');
    const left = await o.get(base);
    t.ok(left.body.data.every((m: { user_id: string }) => ![admin.id, editor.id, viewer.id].includes(m.user_id)));
    t.equal(left.body.data.filter((m: { role: string }) => m.role === 'owner').length, 1);
  });
});
