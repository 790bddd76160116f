// Black-box API tests: the routes whose effect outlasts the request (API key creation and
// revocation, change-set confirmation, the environment's autonomy setting) decide on the role the
// caller holds now, not the one cached with its credential for up to 60 s (decisions.md roles:
// "admin also keys, members, confirmations"). An admin demoted or removed a moment ago, whose
// session is warm in the Authenticator's cache, is refused at once.
import t from 'tap';
import { testIssuer } from '../fixtures/oidc/issuer.js';
import { idem, signUp, startForTest, uniqueName } from '../helpers/service.js';

const err = (r: { status: number; body: any }) => ({ status: r.status, code: r.body?.error?.code });
const profile = (key: string) => ({
  type: 'match_profile.create',
  key,
  metrics: [{ key: 'kills', minimum: 0, maximum: 100 }],
  duration: { minimum_seconds: 60, maximum_seconds: 3600 },
  players: { minimum: 2, maximum: 10 },
});

t.test('an admin demoted or removed loses key management, confirmations and settings at once', async (t) => {
  const idp = await testIssuer(t);
  const { anon } = await startForTest(t, {
    env: { OIDC_ISSUER: idp.issuer, OIDC_AUDIENCE: idp.audience, OIDC_JWKS_FILE: idp.jwksFile },
  });
  const owner = await signUp(anon);
  const o = anon.with({ authorization: `Bearer ${owner.pat}` });
  const members = `/v1/organizations/${owner.orgId}/memberships`;
  const liveOwner = anon.with({ authorization: `Bearer ${owner.pat}`, 'x-service-environment': owner.liveEnv });

  // A held change set in the live environment (autonomy limits), to be confirmed.
  const liveKey = (await liveOwner.post('/v1/api_keys', { kind: 'secret', name: 'live' }, idem())).body.token as string;
  const live = anon.with({ authorization: `Bearer ${liveKey}` });
  const heldSet = async (key: string) => {
    const create = await live.post('/v1/change_sets', { commands: [profile(key)] }, idem());
    t.equal((await live.post('/v1/change_set_applications', { change_set_id: create.body.id }, idem())).status, 201);
    const archive = await live.post('/v1/change_sets', { commands: [{ type: 'match_profile.archive', key }] }, idem());
    t.equal((await live.post('/v1/change_set_applications', { change_set_id: archive.body.id }, idem())).status, 202, 'held');
    return archive.body.id as string;
  };

  const mail = `${uniqueName('admin')}@example.com`;
  const s = await anon.post('/v1/auth/sessions', { id_token: await idp.sign({ sub: uniqueName('sub'), email: mail }) });
  t.equal(s.status, 201);
  const adminId = s.body.user.id as string;
  t.equal((await o.post(members, { email: mail, role: 'admin' }, idem())).status, 201);
  const inTest = anon.with({ authorization: `Bearer ${s.body.token.token}`, 'x-service-environment': owner.testEnv });
  const inLive = anon.with({ authorization: `Bearer ${s.body.token.token}`, 'x-service-environment': owner.liveEnv });

  // As admin: everything works (and the credential's role is now cached in both environments).
  const made = await inTest.post('/v1/api_keys', { kind: 'secret', name: 'by admin' }, idem());
  t.equal(made.status, 201);
  const settings = await inLive.get('/v1/environment_settings');
  t.equal(settings.status, 200);
  const first = await heldSet('first');
  t.equal((await inLive.post(`/v1/change_sets/${first}/confirm`, {}, idem())).status, 201, 'an admin confirms');

  // Demoted to viewer: refused at once, though reads still work on the cached credential.
  t.equal((await o.patch(`${members}/${adminId}`, { role: 'viewer' })).status, 200);
  const second = await heldSet('second');
  t.same(err(await inTest.post('/v1/api_keys', { kind: 'secret', name: 'backdoor' }, idem())), { status: 403, code: 'forbidden' }, 'no new key');
  t.same(err(await inTest.post(`/v1/api_keys/${made.body.id}/revoke`, {})), { status: 403, code: 'forbidden' }, 'no revocation');
  t.same(err(await inLive.post(`/v1/change_sets/${second}/confirm`, {}, idem())), { status: 403, code: 'forbidden' }, 'no confirmation');
  t.equal((await live.get(`/v1/change_sets/${second}`)).body.status, 'awaiting_confirmation', 'the set still waits');
  t.same(
    err(await inLive.patch('/v1/environment_settings', { autonomy: 'auto' }, { 'if-match': settings.headers.get('etag')! })),
    { status: 403, code: 'forbidden' },
    'no settings change',
  );
  t.equal((await inTest.get('/v1/api_keys')).status, 200, 'reading keys is a viewer right');

  // Promoted back, then removed: the environment is no longer theirs.
  t.equal((await o.patch(`${members}/${adminId}`, { role: 'admin' })).status, 200);
  t.equal((await inTest.post('/v1/api_keys', { kind: 'secret', name: 'again' }, idem())).status, 201, 'an admin again');
  t.equal((await o.delete(`${members}/${adminId}`)).status, 204);
  t.same(err(await inTest.post('/v1/api_keys', { kind: 'secret', name: 'backdoor' }, idem())), { status: 404, code: 'resource_not_found' }, 'no new key');
  t.same(err(await inTest.post(`/v1/api_keys/${made.body.id}/revoke`, {})), { status: 404, code: 'resource_not_found' }, 'no revocation');
  t.same(err(await inLive.post(`/v1/change_sets/${second}/confirm`, {}, idem())), { status: 404, code: 'resource_not_found' }, 'no confirmation');
  t.same(err(await inLive.patch('/v1/environment_settings', { autonomy: 'auto' })), { status: 404, code: 'resource_not_found' }, 'no settings change');
  t.equal((await live.get(`/v1/change_sets/${second}`)).body.status, 'awaiting_confirmation');
  t.equal((await liveOwner.get('/v1/environment_settings')).body.autonomy, 'limits');
  const keys = (await anon.with({ authorization: `Bearer ${owner.pat}`, 'x-service-environment': owner.testEnv }).get('/v1/api_keys?limit=200')).body.data;
  t.notOk(keys.some((k: { name: string }) => k.name === 'backdoor'), 'no key was made');
  t.equal(keys.find((k: { id: string }) => k.id === made.body.id).revoked_at, null, 'none was revoked');
});
