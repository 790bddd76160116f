// Black-box API tests of gateway guarantees on the real service (real Redis and PostgreSQL): an
// idempotent replay repeats the headers a client needs next (the ETag for If-Match), a key sent on
// an enrollment or an action makes its repeat a replay (optional there, required on creates), and an
// unusable cursor is 400 invalid_cursor on every paged list, never a 500 from the database
// (a NUL byte, a lone surrogate, an empty or overlong cursor, a numeric part out of range).
// The forged cursors carry the right list binding (cursorScope of the path and environment),
// so what refuses them is the check of their key, not the binding (test/api/cursor-binding.test.ts).
import t from 'tap';
import { cursorScope, encodeCursor } from '../../src/gateway/pagination.js';
import { limits } from '../../src/limits.js';
import { idem, signUp, startForTest } from '../helpers/service.js';

/** Base64url of any JSON value, to build cursors the service would never write. */
const rawCursor = (json: string) => Buffer.from(json).toString('base64url');

const matches = {
  name: 'Play 3 ranked matches',
  qualifying: { event: 'match.completed' },
  target: 3,
  status: 'active',
};

t.test('idempotent replays and cursors over the API', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  const admin = tenant.admin;

  await t.test('a replayed create repeats its ETag, so the next If-Match can be sent', async (t) => {
    const key = idem();
    const first = await api.post('/v1/customers', { external_id: 'replay-etag' }, key);
    t.equal(first.status, 201);
    t.equal(first.headers.get('etag'), '"1"');
    const replay = await api.post('/v1/customers', { external_id: 'replay-etag' }, key);
    t.equal(replay.status, 201);
    t.equal(replay.headers.get('idempotent-replayed'), 'true');
    t.equal(replay.headers.get('etag'), '"1"', 'the stored ETag');
    t.not(replay.headers.get('request-id'), first.headers.get('request-id'), 'never the stored Request-Id');
    const edit = await api.patch(`/v1/customers/${replay.body.id}`, { attributes: { a: 1 } }, { 'if-match': replay.headers.get('etag')! });
    t.equal(edit.status, 200);
  });

  await t.test('an Idempotency-Key sent on an enrollment or an action replays it; without one the request runs', async (t) => {
    const c = await api.post('/v1/challenges', { ...matches, name: 'Invited', enrollment: 'explicit' }, idem());
    t.equal(c.status, 201, JSON.stringify(c.body));
    const who = (await api.post('/v1/customers', { external_id: 'opt-enroll' }, idem())).body.id as string;
    const path = `/v1/challenges/${c.body.id}/enrollments`;
    const key = idem();
    const first = await api.post(path, { customer_id: 'opt-enroll' }, key);
    t.equal(first.status, 201);
    t.equal(first.headers.get('idempotent-replayed'), null);
    t.equal((await api.delete(`${path}/${who}`)).status, 204, 'unenrolled');
    // A late retry of the enrollment: the stored answer, not a second enrollment.
    const retry = await api.post(path, { customer_id: 'opt-enroll' }, key);
    t.equal(retry.status, 201);
    t.equal(retry.headers.get('idempotent-replayed'), 'true');
    t.same(retry.body, first.body);
    t.same((await api.get(path)).body.data, [], 'still unenrolled');
    const reused = await api.post(path, { customer_id: 'someone-else' }, key);
    t.same([reused.status, reused.body.error?.code], [422, 'idempotency_key_reused'], 'the same key with another body');
    const empty = await api.post(path, { customer_id: 'opt-enroll' }, { 'idempotency-key': '' });
    t.same([empty.status, empty.body.error?.code], [400, 'idempotency_key_required'], 'a key sent empty is refused, not ignored');
    // Without a key the enrollment runs each time, as before.
    t.equal((await api.post(path, { customer_id: 'opt-enroll' })).status, 201);
    t.equal((await api.post(path, { customer_id: 'opt-enroll' })).status, 200, 'already enrolled');

    const before = Date.parse((await api.get('/v1/test_clock')).body.now);
    const clockKey = idem();
    const advanced = await api.post('/v1/test_clock/advance', { seconds: 60 }, clockKey);
    t.equal(advanced.status, 200);
    const again = await api.post('/v1/test_clock/advance', { seconds: 60 }, clockKey);
    t.equal(again.headers.get('idempotent-replayed'), 'true');
    t.equal(again.body.now, advanced.body.now);
    const now = Date.parse((await api.get('/v1/test_clock')).body.now);
    t.ok(now - before >= 60_000 && now - before < 120_000, `advanced once (${now - before} ms)`);
    const other = await api.post('/v1/test_clock/advance', { seconds: 120 }, clockKey);
    t.same([other.status, other.body.error?.code], [422, 'idempotency_key_reused']);

    // A replayed token mint does not show the token again (it was shown once).
    const minter = tenant.admin;
    const tokenKey = idem();
    const minted = await minter.post(`/v1/customers/${who}/client_token`, {}, tokenKey);
    t.equal(minted.status, 200);
    t.match(minted.body.customer_token, /\./);
    const mintedAgain = await minter.post(`/v1/customers/${who}/client_token`, {}, tokenKey);
    t.equal(mintedAgain.headers.get('idempotent-replayed'), 'true');
    t.same(mintedAgain.body, { ...minted.body, customer_token: null });

    const doc = (await api.get('/v1/openapi.json')).body;
    const keyParam = (p: string) => doc.paths[p].post.parameters.find((x: { name: string }) => x.name === 'Idempotency-Key');
    t.match(keyParam('/v1/challenges/{id}/enrollments'), { in: 'header', required: false }, 'declared, optional');
    t.match(keyParam('/v1/test_clock/advance'), { required: false });
    t.match(keyParam('/v1/customers'), { required: true }, 'required on creating POSTs');
    t.equal(keyParam('/v1/events'), undefined, 'events: the event id is the key');
  });

  const customer = (await api.post('/v1/customers', { external_id: 'cursor-owner' }, idem())).body.id as string;
  const challenge = await api.post('/v1/challenges', matches, idem());
  t.equal(challenge.status, 201, JSON.stringify(challenge.body));

  // Every paged list the OpenAPI document names, plus the lists under a resource.
  const doc = (await api.get('/v1/openapi.json')).body as { paths: Record<string, Record<string, { parameters?: Array<{ name: string }> }>> };
  const lists = Object.entries(doc.paths)
    .filter(([path, ops]) => !path.includes('{') && ops.get?.parameters?.some((p) => p.name === 'cursor'))
    .map(([path]) => path.replace(/^\/v1/, '/v1'));
  t.ok(lists.length >= 10, `found ${lists.length} paged lists`);
  const nested = [`/v1/customers/${customer}/ledger_entries`, `/v1/challenges/${challenge.body.id}/progress`];

  // The caller's user id: /v1/organizations is bound to the user (it has no environment).
  const members = await admin.get(`/v1/organizations/${tenant.orgId}/memberships`);
  const userId = members.body.data[0].user_id as string;
  /** The binding the service writes into the first page's cursor of `path` (no filters). */
  const scopeOf = (path: string) =>
    path === '/v1/organizations'
      ? cursorScope({ path, environmentId: null, userId, filters: {} })
      : cursorScope({ path, environmentId: tenant.testEnv, userId: null, filters: {} });
  /** A cursor bound to `path` holding `key` raw (JSON text of the k array). */
  const rawBound = (path: string, k: string) => rawCursor(`{"v":2,"s":"${scopeOf(path)}","k":${k}}`);

  await t.test('a well-formed key with the right binding pages every list (so the refusals below are the key)', async (t) => {
    for (const path of lists) {
      const r = await admin.get(`${path}?cursor=${encodeCursor(['zzz'], scopeOf(path))}`);
      t.equal(r.status, 200, `${path}: ${JSON.stringify(r.body.error ?? null)}`);
    }
    for (const [path, key] of [
      [nested[0]!, ['1700000000000', 'le_x']],
      [nested[1]!, ['cust_x', '2030-01-01', '0']],
    ] as const) {
      const r = await api.get(`${path}?cursor=${encodeCursor([...key], scopeOf(path))}`);
      t.equal(r.status, 200, `${path}: ${JSON.stringify(r.body.error ?? null)}`);
    }
  });

  await t.test('a NUL or a lone surrogate in any cursor part is invalid_cursor on every list', async (t) => {
    const bad = (path: string): Array<[string, string]> => [
      ['NUL', encodeCursor(['a\u0000b'], scopeOf(path))],
      ['lone surrogate', rawBound(path, '["\\ud800"]')],
      ['part too long', encodeCursor(['x'.repeat(300)], scopeOf(path))],
    ];
    const nestedBad: Record<string, Array<[string, string]>> = {
      [nested[0]!]: [
        ['NUL in the id', encodeCursor(['1700000000000', 'le_\u0000'], scopeOf(nested[0]!))],
        ['lone surrogate in the id', rawBound(nested[0]!, '["1700000000000","\\udfff"]')],
      ],
      [nested[1]!]: [
        ['NUL in the customer', encodeCursor(['cust_\u0000', '2030-01-01', '0'], scopeOf(nested[1]!))],
        ['NUL in the period', encodeCursor(['cust_x', '\u0000', '0'], scopeOf(nested[1]!))],
      ],
    };
    for (const path of lists) {
      for (const [what, cursor] of bad(path)) {
        // The PAT client: it may call every list (a secret key may not list API keys).
        const r = await admin.get(`${path}?cursor=${cursor}`);
        t.equal(r.status, 400, `${path}: ${what}`);
        t.equal(r.body.error?.code, 'invalid_cursor', `${path}: ${what}`);
      }
    }
    for (const [path, cases] of Object.entries(nestedBad)) {
      for (const [what, cursor] of cases) {
        const r = await api.get(`${path}?cursor=${cursor}`);
        t.equal(r.status, 400, `${path}: ${what}`);
        t.equal(r.body.error?.code, 'invalid_cursor', `${path}: ${what}`);
      }
    }
  });

  await t.test('a query parameter a list does not take is validation_failed, never silently ignored', async (t) => {
    for (const path of [...lists, ...nested]) {
      const r = await admin.get(`${path}?currency=coins`);
      t.equal(r.status, 400, `${path}: unknown filter`);
      t.equal(r.body.error?.code, 'validation_failed', path);
      t.match(r.body.error?.message, /currency/, `${path}: the message names the parameter`);
    }
    t.equal((await api.get(`${nested[0]}?limit=2`)).status, 200, 'known parameters still pass');
  });

  await t.test('an empty or overlong cursor is invalid_cursor, not validation_failed', async (t) => {
    for (const path of ['/v1/customers', '/v1/currencies', ...nested]) {
      for (const [what, cursor] of [
        ['empty', ''],
        ['2049 characters', 'A'.repeat(limits.cursorCharsMax + 1)],
      ] as const) {
        const r = await api.get(`${path}?cursor=${cursor}`);
        t.equal(r.status, 400, `${path}: ${what}`);
        t.equal(r.body.error?.code, 'invalid_cursor', `${path}: ${what}`);
        t.equal(r.body.error?.param, 'cursor', `${path}: ${what}`);
      }
    }
  });

  await t.test(
    'a numeric cursor part out of its column range is invalid_cursor',
    async (t) => {
      for (const [path, cursor] of [
        [nested[0]!, encodeCursor(['99999999999999999999', 'le_x'], scopeOf(nested[0]!))],
        [nested[0]!, encodeCursor(['9007199254740993', 'le_x'], scopeOf(nested[0]!))],
        [nested[1]!, encodeCursor(['cust_x', '2030-01-01', '99999999999'], scopeOf(nested[1]!))],
      ] as const) {
        const r = await api.get(`${path}?cursor=${cursor}`);
        t.equal(r.status, 400, `${path}: ${cursor}`);
        t.equal(r.body.error?.code, 'invalid_cursor', `${path}: ${cursor}`);
      }
    },
  );

  await t.test('the cursors the service writes still page', async (t) => {
    for (let i = 0; i < 3; i++) t.equal((await api.post('/v1/customers', { external_id: `page-${i}` }, idem())).status, 201);
    const first = await api.get('/v1/customers?limit=2');
    t.equal(first.body.has_more, true);
    const second = await api.get(`/v1/customers?limit=2&cursor=${first.body.next_cursor}`);
    t.equal(second.status, 200);
    t.equal(second.body.data.length, 2);
  });
});
