// Black-box API tests of POST /v1/events (single, batch, sync) and GET /v1/events/{id}, with the
// error codes each can produce. Real Redis + PostgreSQL, unique schema and key prefix.
import t from 'tap';
import { idem, signUp, startForTest } from '../helpers/service.js';

const now = () => new Date(Date.now() - 1000).toISOString();
const event = (id: string, customer = 'player-1', extra: Record<string, unknown> = {}) => ({
  id,
  name: 'level.completed',
  customer_id: customer,
  occurred_at: now(),
  properties: { level: 3 },
  ...extra,
});

t.test('events', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;

  await t.test('a single event is journaled and answered 202 with a service id', async (t) => {
    const r = await api.post('/v1/events', event('e-1'));
    t.equal(r.status, 202);
    t.match(r.body, { id: /^evt_/, client_event_id: 'e-1', status: 'accepted' });
    t.ok(r.headers.get('request-id')?.startsWith('req_'));
    const got = await api.get(`/v1/events/${r.body.id}`);
    t.equal(got.status, 200);
    t.match(got.body, { id: r.body.id, client_event_id: 'e-1', name: 'level.completed', status: 'evaluated', properties: { level: 3 } });
    const customer = (await api.get(`/v1/customers?external_id=${encodeURIComponent(event('e-1').customer_id)}`)).body.data[0];
    t.equal(got.body.customer_id, event('e-1').customer_id, 'customer_id is the caller\'s identifier, as sent');
    t.equal(got.body.customer_service_id, customer.id, 'and the service id alongside');
    t.equal(got.body.trust, 'merchant_asserted', 'a secret key asserts its events');
    // The id the client sent is not this route's: the error says which id it takes.
    const byClientId = await api.get('/v1/events/e-1');
    t.match([byClientId.status, byClientId.body.error], [404, { code: 'resource_not_found', param: 'id', message: /evt_.*client_event_id/ }]);
    t.same(got.body.source, { type: 'secret_key', id: tenant.secretKeyId }, 'the sending key is kept with the event');
  });

  await t.test('a body nested deeper than 64 levels is 400 validation_failed, and the service keeps serving', async (t) => {
    const arrays = (n: number): unknown => JSON.parse('['.repeat(n) + '1' + ']'.repeat(n));
    // The body is level 1 and properties level 2: 62 arrays inside properties reach level 64.
    const ok = await api.post('/v1/events', event('deep-ok', 'deep-p', { properties: { x: arrays(62) } }));
    t.equal(ok.status, 202, 'at the limit');
    for (const n of [63, 3000]) {
      const r = await api.post('/v1/events', event(`deep-${n}`, 'deep-p', { properties: { x: arrays(n) } }));
      t.equal(r.status, 400, `${n} arrays inside properties`);
      t.equal(r.body.error.code, 'validation_failed');
      t.match(r.body.error.message, /at most 64 levels/);
      t.match(r.body.error, { param: 'body', details: [{ param: 'body', message: /at most 64 levels/ }] }, 'details like every validation_failed');
    }
    // 3,000 levels of arrays in one event used to overflow the journal's msgpack encoder and end the process.
    const deepRule = await tenant.admin.post('/v1/rules', { name: 'deep', definition: { schema: 'service.rule/v2', conditions: arrays(2000) } }, idem());
    t.equal(deepRule.status, 400, 'a rule definition too');
    t.equal((await api.post('/v1/events', event('deep-after', 'deep-p'))).status, 202, 'still serving');
  });

  await t.test('U+0000 and unpaired surrogates are refused in any string or key, on every route', async (t) => {
    // PostgreSQL stores neither: such an event stalled its partition's projection for good.
    for (const [what, body, param] of [
      ['a lone surrogate in a property', event('txt-1', 'txt-p', { properties: { x: 'a\ud800b' } }), 'properties.x'],
      ['a lone surrogate in a key', event('txt-2', 'txt-p', { properties: { ['\udc00']: 1 } }), 'properties'],
      ['NUL in a property', event('txt-3', 'txt-p', { properties: { x: 'a\u0000b' } }), 'properties.x'],
      ['NUL in the external id', event('txt-4', 'txt-\u0000p'), 'customer_id'],
      ['in a batch item', { events: [event('txt-5', 'txt-p'), event('txt-6', 'txt-p', { name: 'a\ud800' })] }, 'events[1].name'],
    ] as const) {
      const r = await api.post('/v1/events', body);
      t.equal(r.status, 400, what);
      t.match(r.body.error, { code: 'validation_failed', param, message: /U\+0000 or an unpaired surrogate/ }, what);
      t.match(r.body.error.details, [{ param }], `${what}: details`);
    }
    const currency = await api.post('/v1/currencies', { key: 'txt', name: 'Coins\u0000' }, idem());
    t.match([currency.status, currency.body.error?.param], [400, 'name'], 'a catalog name (was a 500)');
    const customer = await api.post('/v1/customers', { external_id: 'txt-c', attributes: { a: '\ud800' } }, idem());
    t.match([customer.status, customer.body.error?.param], [400, 'attributes.a']);
    const fine = await api.post('/v1/events', event('txt-7', 'txt-p', { properties: { trophy: '\u{1F3C6}', name: 'Zoë' } }));
    t.equal(fine.status, 202, 'surrogate pairs and other text pass');
    // In a path, such an id names nothing (it was a 500 on most routes); in a query, bad input.
    for (const path of ['/v1/rules/%00', '/v1/rewards/%00', '/v1/segments/a%00b', '/v1/match_profiles/%00', '/v1/tier_programs/%00', '/v1/customers/%00']) {
      const r = await tenant.admin.get(path);
      t.match([r.status, r.body.error?.code], [404, 'resource_not_found'], path);
    }
    for (const path of ['/v1/customers?external_id=%00', '/v1/rules?status=%00']) {
      const r = await api.get(path);
      t.match([r.status, r.body.error?.code], [400, 'validation_failed'], path);
    }
    // The whole batch is refused, like invalid JSON: its valid item was not recorded.
    t.equal((await api.post('/v1/events', event('txt-5', 'txt-p'))).body.duplicate, undefined, 'txt-5 is new when sent alone');
  });

  await t.test('numbers beyond the double range (1e400) are refused anywhere in a body, named by their path', async (t) => {
    // JSON.parse reads 1e400 as Infinity: a rule compared it as Infinity, while the journal, the
    // event row and every answer held null. Such a number is bad input, like invalid text.
    const text = (id: string, props: string) =>
      `{"id":"${id}","name":"level.completed","customer_id":"inf-p","occurred_at":"${now()}","properties":${props}}`;
    for (const [what, body, param] of [
      ['1e400 in a property', text('inf-1', '{"x":1e400}'), 'properties.x'],
      ['-1e400 deeper down', text('inf-2', '{"a":[1,{"b":-1e400}]}'), 'properties.a[1].b'],
      ['in a batch item', `{"events":[${text('inf-3', '{}')},${text('inf-4', '{}')},${text('inf-5', '{"x":1e400}')}]}`, 'events[2].properties.x'],
    ] as const) {
      const r = await api.request('POST', '/v1/events', body);
      t.equal(r.status, 400, what);
      t.match(r.body.error, { code: 'validation_failed', param, message: /finite/, details: [{ param }] }, what);
    }
    t.same((await api.request('POST', '/v1/events', text('inf-1', '{"x":1}'))).body.duplicate, undefined, 'nothing was recorded: inf-1 is new');
    t.equal((await api.request('POST', '/v1/events', text('inf-3', '{}'))).status, 202, 'the whole batch was refused, like invalid JSON');
    t.equal((await api.request('POST', '/v1/events', text('inf-6', '{"x":1.7976931348623157e308,"y":1e-400}'))).status, 202, 'the largest double, and an underflow to 0, pass');
    const created = await api.request('POST', '/v1/customers', '{"external_id":"inf-c","attributes":{"inf":1e400}}', idem());
    t.match([created.status, created.body.error?.param], [400, 'attributes.inf'], 'a customer attribute on create');
    const c = (await api.post('/v1/customers', { external_id: 'inf-c', attributes: { level: 3 } }, idem())).body;
    const patched = await api.request('PATCH', `/v1/customers/${c.id}`, '{"attributes":{"inf":1e400}}');
    t.match([patched.status, patched.body.error?.param], [400, 'attributes.inf'], 'and on patch');
    t.match((await api.get(`/v1/customers/${c.id}`)).body, { attributes: { level: 3 }, version: 1 }, 'which changed nothing');
  });

  await t.test('the same id and content is answered as the first, with duplicate: true', async (t) => {
    const ev = event('e-dup');
    const first = await api.post('/v1/events', ev);
    const again = await api.post('/v1/events', { ...ev, properties: { level: 3 } });
    t.equal(again.status, 202);
    t.same(again.body, { ...first.body, duplicate: true });
  });

  await t.test('the same id with different content is 409 event_id_conflict', async (t) => {
    await api.post('/v1/events', event('e-c'));
    const r = await api.post('/v1/events', event('e-c', 'player-1', { properties: { level: 4 } }));
    t.equal(r.status, 409);
    t.equal(r.body.error.code, 'event_id_conflict');
  });

  await t.test("an event id is the environment's: sent for another customer it is event_id_conflict", async (t) => {
    const ev = event('e-env', 'player-env-1');
    const first = await api.post('/v1/events', ev);
    t.equal(first.status, 202);
    const other = await api.post('/v1/events', event('e-env', 'player-env-2'));
    t.equal(other.status, 409);
    t.match(other.body.error, { code: 'event_id_conflict', param: 'id' });
    const created = await api.get('/v1/customers?external_id=player-env-2');
    t.same(created.body.data, [], 'nothing was recorded for the second customer, not even the customer');
    const again = await api.post('/v1/events', ev);
    t.match(again.body, { id: first.body.id, duplicate: true }, 'the first customer still gets its duplicate answer');
    const batch = await api.post('/v1/events', { events: [event('e-env-b', 'player-env-3'), event('e-env-b', 'player-env-4')] });
    t.equal(batch.status, 207);
    t.match(batch.body.data, [
      { client_event_id: 'e-env-b', status: 'accepted' },
      { client_event_id: 'e-env-b', error: { code: 'event_id_conflict', param: 'events[1].id' } },
    ], 'within one batch the first item takes the id');
  });

  await t.test('sync mode answers 200 with effects', async (t) => {
    const r = await api.post('/v1/events', { ...event('e-sync'), mode: 'sync' });
    t.equal(r.status, 200);
    t.match(r.body, { id: /^evt_/, status: 'evaluated', effects: [] });
  });

  await t.test('a batch answers 207 in request order with per-item errors and no id on failures', async (t) => {
    const b1 = event('b-1', 'p-a');
    const r = await api.post('/v1/events', {
      events: [
        b1,
        { ...event('b-2', 'p-b'), name: 'Not Valid' },
        event('b-3', 'p-c'),
        { ...event('b-4', 'p-d'), occurred_at: new Date(Date.now() + 3600_000).toISOString() },
        b1,
        { ...b1, properties: { level: 9 } },
      ],
    });
    t.equal(r.status, 207);
    const d = r.body.data;
    t.equal(d.length, 6);
    t.match(d[5], { client_event_id: 'b-1', error: { code: 'event_id_conflict', param: 'events[5].id' } }, "a conflict names the item's id");
    const stray = await api.post('/v1/events', { events: [event('b-7', 'p-a')], extra: 1 });
    t.match(stray.body.error, { code: 'validation_failed', param: 'extra' }, 'a batch body is as strict as an event');
    t.match(d[0], { id: /^evt_/, client_event_id: 'b-1' });
    t.match(d[1], { client_event_id: 'b-2', error: { code: 'validation_failed', param: 'events[1].name' } });
    t.notOk('id' in d[1]);
    t.match(d[2], { id: /^evt_/, client_event_id: 'b-3' });
    t.match(d[3], { error: { code: 'occurred_at_in_future' } });
    t.match(d[4], { id: d[0].id, duplicate: true });
  });

  await t.test('events for a new external id create the customer, visible in its export', async (t) => {
    await api.post('/v1/events', event('x-1', 'fresh-player'));
    const list = await api.get('/v1/customers?external_id=fresh-player');
    t.equal(list.body.data.length, 1);
    const id = list.body.data[0].id;
    const exp = await api.get(`/v1/customers/${id}/export`);
    t.equal(exp.status, 200);
    t.match(exp.body.events, [{ name: 'level.completed', properties: { level: 3 } }]);
  });

  await t.test('error codes', async (t) => {
    const cases: Array<[string, () => Promise<{ status: number; body: any }>, number, string]> = [
      ['batch over 100', () => api.post('/v1/events', { events: Array.from({ length: 101 }, (_, i) => event(`o-${i}`)) }), 400, 'batch_too_large'],
      ['future occurred_at', () => api.post('/v1/events', event('f-1', 'p', { occurred_at: new Date(Date.now() + 600_000).toISOString() })), 400, 'occurred_at_in_future'],
      ['bad json', () => api.post('/v1/events', '{"id":'), 400, 'invalid_json'],
      ['text body', () => api.request('POST', '/v1/events', 'hello', { 'content-type': 'text/plain' }), 415, 'unsupported_media_type'],
      ['missing field', () => api.post('/v1/events', { id: 'm', name: 'a.b', occurred_at: now() }), 400, 'validation_failed'],
      ['event too large', () => api.post('/v1/events', event('big', 'p', { properties: { blob: 'x'.repeat(40_000) } })), 413, 'event_too_large'],
      ['body too large', () => api.post('/v1/events', { events: [event('huge', 'p', { properties: { blob: 'x'.repeat(1_100_000) } })] }), 413, 'body_too_large'],
      ['no credential', () => anon.post('/v1/events', event('n-1')), 401, 'authentication_required'],
      ['bad credential', () => anon.post('/v1/events', event('n-2'), { authorization: 'Bearer osk_nope' }), 401, 'invalid_credentials'],
      ['unknown event id', () => api.get('/v1/events/evt_01ZZZZZZZZZZZZZZZZZZZZZZZZ'), 404, 'resource_not_found'],
      ['unknown route', () => api.get('/v1/nope'), 404, 'route_not_found'],
      ['bad mode', () => api.post('/v1/events', { ...event('mm'), mode: 'later' }), 400, 'validation_failed'],
    ];
    for (const [name, run, status, code] of cases) {
      const r = await run();
      t.equal(r.status, status, `${name}: status`);
      t.equal(r.body?.error?.code, code, `${name}: code`);
      t.ok(r.body?.error?.request_id, `${name}: request_id`);
    }
  });

  await t.test('publishable keys: allowed events only, origins enforced, refused on secret routes', async (t) => {
    const k = await tenant.admin.post(
      '/v1/api_keys',
      { kind: 'publishable', name: 'web', allowed_events: ['page.viewed'], allowed_origins: ['https://game.example'] },
      idem(),
    );
    t.equal(k.status, 201);
    const pub = anon.with({ authorization: `Bearer ${k.body.token}`, origin: 'https://game.example' });
    // What a browser does first: a preflight without credentials.
    const preflight = await anon.request('OPTIONS', '/v1/events', undefined, {
      origin: 'https://game.example',
      'access-control-request-method': 'POST',
      'access-control-request-headers': 'authorization, content-type',
    });
    t.equal(preflight.status, 204);
    t.equal(preflight.headers.get('access-control-allow-origin'), 'https://game.example');
    t.match(preflight.headers.get('access-control-allow-headers'), /Authorization/);
    const ok = await pub.post('/v1/events', { ...event('pub-1'), name: 'page.viewed' });
    t.equal(ok.status, 202);
    t.equal(ok.headers.get('access-control-allow-origin'), 'https://game.example', 'the browser may read the answer');
    const notAllowed = await pub.post('/v1/events', event('pub-2'));
    t.equal(notAllowed.status, 403);
    t.equal(notAllowed.body.error.code, 'event_requires_secret_key', 'an event the key may not send needs a secret key');
    const badOrigin = await pub.post('/v1/events', { ...event('pub-3'), name: 'page.viewed' }, { origin: 'https://evil.example' });
    t.equal(badOrigin.body.error.code, 'origin_not_allowed');
    const secretRoute = await pub.get(`/v1/events/${ok.body.id}`);
    t.equal(secretRoute.status, 403);
    t.equal(secretRoute.body.error.code, 'event_requires_secret_key');
    const stored = await api.get(`/v1/events/${ok.body.id}`);
    t.equal(stored.body.trust, 'client_reported', 'a publishable key only reports');
    t.same(stored.body.source, { type: 'publishable_key', id: k.body.id });
  });

  await t.test('a revoked key answers credentials_revoked', async (t) => {
    const k = await tenant.admin.post('/v1/api_keys', { kind: 'secret', name: 'temp' }, idem());
    const c = anon.with({ authorization: `Bearer ${k.body.token}` });
    t.equal((await c.post('/v1/events', event('rv-1'))).status, 202);
    const rv = await tenant.admin.post(`/v1/api_keys/${k.body.id}/revoke`, {});
    t.equal(rv.status, 200);
    t.ok(rv.body.revoked_at);
    const after = await c.post('/v1/events', event('rv-2'));
    t.equal(after.status, 401);
    t.equal(after.body.error.code, 'credentials_revoked');
  });

  // Last: it publishes a rule, which would give the events of the tests above effects.
  await t.test("a repeat answers as the first did also after the customer's latest answers moved on", async (t) => {
    t.equal((await tenant.admin.post('/v1/currencies', { key: 'gems', name: 'Gems' }, idem())).status, 201);
    const definition = { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: 'level.completed' }, actions: [{ type: 'points.award', currency: 'gems', amount: 1 }] };
    const rule = await tenant.admin.post('/v1/rules', { name: 'a gem a level', definition }, idem());
    t.equal((await tenant.admin.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);
    const old = event('old-sync', 'many-sync', { mode: 'sync' });
    const first = await api.post('/v1/events', old);
    t.equal(first.status, 200);
    t.match(first.body.effects, [{ type: 'rule.fired' }, { type: 'points.awarded', amount: 1 }]);
    // The customer's actor remembers its latest 64 sync answers; 70 more push this one out.
    const later = await api.post('/v1/events', { mode: 'sync', events: Array.from({ length: 70 }, (_, i) => event(`later-${i}`, 'many-sync')) });
    t.equal(later.status, 207);
    const again = await api.post('/v1/events', old);
    t.equal(again.status, 200, 'evaluated, as the first answer was');
    t.same(again.body, { ...first.body, duplicate: true }, 'with the same effects');
    const asyncRepeat = await api.post('/v1/events', { ...old, mode: undefined });
    t.same(asyncRepeat.body, { ...first.body, duplicate: true }, 'whatever mode the repeat names');
    const notSync = event('old-async', 'many-sync');
    const accepted = await api.post('/v1/events', notSync);
    await api.post('/v1/events', { mode: 'sync', events: Array.from({ length: 70 }, (_, i) => event(`later-b-${i}`, 'many-sync')) });
    const repeat = await api.post('/v1/events', notSync);
    t.same({ status: repeat.status, body: repeat.body }, { status: 202, body: { ...accepted.body, duplicate: true } }, 'an event answered 202 is answered 202 again');
    // Merged into another customer: the survivor answers the merged customer's repeat.
    const merging = event('mrg-sync', 'sync-mergee', { mode: 'sync' });
    const answered = await api.post('/v1/events', merging);
    t.equal(answered.status, 200);
    const survivor = await api.post('/v1/customers', { external_id: 'sync-survivor' }, idem());
    t.match((await api.post(`/v1/customers/${survivor.body.id}/aliases`, { alias: 'sync-mergee' }, idem())).body, { merged_from: /^cust_/ });
    const afterMerge = await api.post('/v1/events', merging);
    t.same({ status: afterMerge.status, body: afterMerge.body }, { status: 200, body: { ...answered.body, duplicate: true } }, 'after a merge too');
  });
});

// The read tables' lag bound (PROJECTOR_LAG_MAX): here 10 records, so nearly every batch passes
// it and waits for the projector. Every event still goes in, once, and the lag comes back to 0.
t.test('ingestion held by the projection lag bound goes on as the projector catches up', async (t) => {
  const { anon } = await startForTest(t, { env: { PROJECTOR_LAG_MAX: '10', PROJECTOR_LAG_WAIT_MS: '4000' } });
  const api = (await signUp(anon)).server;
  const batches = Array.from({ length: 6 }, (_, b) => ({ events: Array.from({ length: 100 }, (_, i) => event(`lag-${b}-${i}`, `lag-player-${b}-${i}`)) }));
  // Three waves of two batches: a wave's acknowledgements pass the bound, so the next one waits.
  const answers = [];
  for (let w = 0; w < 3; w++) answers.push(...(await Promise.all(batches.slice(2 * w, 2 * w + 2).map((body) => api.post('/v1/events', body)))));
  t.same(
    answers.map((r) => r.status),
    [207, 207, 207, 207, 207, 207],
  );
  const items = answers.flatMap((r) => r.body.data as Array<{ id?: string; error?: unknown }>);
  t.equal(items.filter((d) => typeof d.id === 'string' && d.error === undefined).length, 600, 'all 600 events accepted');
  const lag = async () => Number(/^projector_lag_records (\S+)$/m.exec((await anon.get('/metrics')).body)?.[1]);
  for (const until = Date.now() + 10_000; (await lag()) !== 0 && Date.now() < until; ) await new Promise((r) => setTimeout(r, 50));
  t.equal(await lag(), 0, 'the projector caught up');
  const held = Number(/^ingest_held_total\{outcome="released"\} (\S+)$/m.exec((await anon.get('/metrics')).body)?.[1] ?? 0);
  t.ok(held > 0, `events waited for the projector (${held})`);
  const last = await api.get('/v1/customers?external_id=lag-player-5-99');
  t.equal(last.body.data.length, 1, 'the last customer is in the read tables');
  const exp = await api.get(`/v1/customers/${last.body.data[0].id}/export`);
  t.match(exp.body.events, [{ id: items[599]!.id, properties: { level: 3 } }], 'with its event');
});
