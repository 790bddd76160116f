// Black-box tests of the gateway over real HTTP (fetch) on port 0, with test routes, a fake
// authenticate and an in-test IdempotencyStore (the in-memory twin where claims must go stale in
// real time). Every code this layer produces is exercised; invoke() is checked against HTTP
// answer for answer; close() is checked to drain.
import { createHash } from 'node:crypto';
import { connect, createServer } from 'node:net';
import { pino } from 'pino';
import t from 'tap';
import { z } from 'zod';
import { ApiError } from '../../src/errors/api-error.js';
import { errorTable } from '../../src/errors/codes.js';
import { checkIfMatch, etagHeader } from '../../src/gateway/etag.js';
import { fingerprintOf } from '../../src/gateway/idempotency.js';
import { encodeCursor, pageQuerySchema, pageRequest } from '../../src/gateway/pagination.js';
import { type AnyRoute, type AuthSpec, route } from '../../src/gateway/route.js';
import { type Authenticate, createGateway, type Gateway, type InvokeRequest } from '../../src/gateway/server.js';
import { limits } from '../../src/limits.js';
import { MemoryIdempotencyStore } from '../../src/persistence/memory/idempotency-store.js';
import type { IdempotencyRecord, IdempotencyStore } from '../../src/persistence/ports.js';
import type { Principal } from '../../src/tenancy/types.js';

/** Keeps the port's contract: atomic claim, stale takeover, touch, complete, release. */
class TestIdempotencyStore implements IdempotencyStore {
  readonly rows = new Map<string, IdempotencyRecord & { claimedAtMs: number; customerIds?: readonly string[] }>();
  async claim(scope: string, key: string, fingerprint: string, staleAfterMs: number) {
    const id = `${scope}\u0000${key}`;
    const row = this.rows.get(id);
    if (row === undefined || (row.state === 'in_progress' && Date.now() - row.claimedAtMs > staleAfterMs)) {
      this.rows.set(id, { fingerprint, state: 'in_progress', status: null, body: null, headers: null, claimedAtMs: Date.now() });
      return null;
    }
    return { fingerprint: row.fingerprint, state: row.state, status: row.status, body: row.body, headers: row.headers };
  }
  async touch(scope: string, key: string) {
    const row = this.rows.get(`${scope}\u0000${key}`);
    if (row?.state !== 'in_progress') return false;
    row.claimedAtMs = Date.now();
    return true;
  }
  async complete(
    scope: string,
    key: string,
    status: number,
    body: string,
    headers: Record<string, string> | null,
    _retentionMs: number,
    customerIds: readonly string[] = [],
  ) {
    const row = this.rows.get(`${scope}\u0000${key}`);
    if (row !== undefined) Object.assign(row, { state: 'done', status, body, headers, customerIds });
  }
  async release(scope: string, key: string) {
    this.rows.delete(`${scope}\u0000${key}`);
  }
  async forget(environmentId: string, customerIds: readonly string[]) {
    let n = 0;
    for (const [id, row] of this.rows) {
      const inEnvironment = id.startsWith(`${environmentId}\u0000`) || id.startsWith(`${environmentId}/`);
      if (inEnvironment && row.customerIds?.some((c) => customerIds.includes(c))) n += Number(this.rows.delete(id));
    }
    return n;
  }
}

function deferred<T = void>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

function principal(envId: string): Principal {
  return {
    kind: 'secret',
    credentialId: `key_${envId}`,
    organizationId: 'org_1',
    environment: {
      id: envId,
      name: 'test',
      runtimeClass: 'test',
      projectId: 'proj_1',
      organizationId: 'org_1',
      timezone: 'UTC',
    },
    userId: null,
    role: null,
    scopes: new Set(['customers:write']),
    allowedEvents: [],
    allowedOrigins: [],
    customerId: null,
  };
}

const authenticate: Authenticate = (req) => {
  switch (req.authorization) {
    case 'Bearer good':
      return principal('env_1');
    case 'Bearer other-env':
      return principal('env_2');
    case 'Bearer async':
      return Promise.resolve(principal('env_1'));
    case undefined:
      throw new ApiError('authentication_required');
    default:
      throw new ApiError('invalid_credentials');
  }
};

const cred: AuthSpec = { kind: 'credential', scopes: ['customers:write'], allow: ['secret'] };
const thingSchema = z.object({ id: z.string(), name: z.string() });
const createThing = z
  .object({
    name: z.string().min(1),
    items: z.array(z.object({ occurred_at: z.string() })).optional(),
  })
  .strict();

const customerA = `cust_000${'01J0000000'}${'A'.repeat(16)}`;
const customerB = `cust_001${'01J0000000'}${'B'.repeat(16)}`;

const state = {
  creates: 0,
  pokes: 0,
  failOnce: true,
  slowStarted: deferred(),
  slowRelease: deferred(),
  drainStarted: deferred(),
  drainRelease: deferred(),
  ready: true,
};

const routes: AnyRoute[] = [
  route({
    method: 'POST',
    path: '/v1/things',
    summary: 'Create a thing',
    tag: 'things',
    auth: cred,
    body: createThing,
    idempotent: true,
    responses: { 201: { description: 'Created.', schema: thingSchema } },
    handler: async (ctx) => {
      state.creates++;
      return { status: 201, body: { id: `thing_${state.creates}`, name: ctx.body.name } };
    },
  }),
  route({
    method: 'POST',
    path: '/v1/widgets',
    summary: 'Create a widget (answers ETag, Location and a header a replay must not repeat)',
    tag: 'things',
    auth: cred,
    body: z.object({ name: z.string() }),
    idempotent: true,
    responses: { 201: { description: 'Created.' } },
    handler: (ctx) => {
      state.creates++;
      const id = `widget_${state.creates}`;
      return {
        status: 201,
        body: { id, name: ctx.body.name },
        headers: { ...etagHeader(1), Location: `/v1/widgets/${id}`, 'X-Served-By': `node-${state.creates}` },
      };
    },
  }),
  route({
    method: 'GET',
    path: '/v1/things',
    summary: 'List things',
    tag: 'things',
    auth: cred,
    query: pageQuerySchema,
    responses: { 200: { description: 'A page.' } },
    handler: (ctx) => {
      const page = pageRequest(ctx);
      return { status: 200, body: { data: [], next_cursor: null, has_more: false, limit: page.limit } };
    },
  }),
  route({
    method: 'GET',
    path: '/v1/things/:id',
    summary: 'Get a thing',
    tag: 'things',
    auth: cred,
    params: z.object({ id: z.string().regex(/^[a-z0-9_]+$/) }),
    responses: { 200: { description: 'The thing.', schema: thingSchema } },
    handler: (ctx) => {
      if (ctx.params.id === 'boom') throw new Error('secret detail: db password hunter2');
      return { status: 200, body: { id: ctx.params.id, name: 'x', env: ctx.principal.environment?.id } };
    },
  }),
  route({
    method: 'PATCH',
    path: '/v1/things/:id',
    summary: 'Edit a thing',
    tag: 'things',
    auth: cred,
    body: z.object({ name: z.string() }),
    responses: { 200: { description: 'Edited.', schema: thingSchema } },
    handler: (ctx) => {
      checkIfMatch(ctx.headers, 3);
      return { status: 200, body: { id: ctx.params.id, name: ctx.body.name }, headers: etagHeader(4) };
    },
  }),
  route({
    method: 'POST',
    path: '/v1/things/:id/archive',
    summary: 'Archive a thing (optional body)',
    tag: 'things',
    auth: cred,
    body: z.object({ reason: z.string().optional() }),
    responses: { 200: { description: 'Archived.' } },
    handler: (ctx) => ({ status: 200, body: { id: ctx.params.id, got: ctx.body } }),
  }),
  route({
    method: 'POST',
    path: '/v1/things/:id/poke',
    summary: 'Poke a thing (an action: Idempotency-Key optional)',
    tag: 'things',
    auth: cred,
    body: z.object({ hard: z.boolean().optional() }),
    idempotent: 'optional',
    responses: { 200: { description: 'Poked.' } },
    handler: (ctx) => {
      state.pokes++;
      return { status: 200, body: { id: ctx.params.id, pokes: state.pokes }, headers: etagHeader(state.pokes) };
    },
  }),
  route({
    method: 'POST',
    path: '/v1/batch',
    summary: 'Validates its own body; docBody documents it',
    tag: 'test',
    auth: cred,
    docBody: z.object({ events: z.array(z.object({ id: z.string() })) }),
    responses: { 200: { description: 'Echo.' } },
    handler: (ctx) => ({ status: 200, body: { raw: ctx.body } }),
  }),
  route({
    method: 'DELETE',
    path: '/v1/things/:id',
    summary: 'Delete a thing',
    tag: 'things',
    auth: cred,
    responses: { 204: { description: 'Deleted.' } },
    handler: () => ({ status: 204 }),
  }),
  route({
    method: 'POST',
    path: '/v1/slow',
    summary: 'Waits for the test',
    tag: 'test',
    auth: cred,
    body: z.object({}),
    idempotent: true,
    responses: { 201: { description: 'Done.' } },
    handler: async () => {
      state.slowStarted.resolve();
      await state.slowRelease.promise;
      return { status: 201, body: { done: true } };
    },
  }),
  route({
    method: 'POST',
    path: '/v1/fail_once',
    summary: 'Throws a bug once',
    tag: 'test',
    auth: cred,
    idempotent: true,
    responses: { 201: { description: 'Done.' } },
    handler: () => {
      if (state.failOnce) {
        state.failOnce = false;
        throw new TypeError('cannot read x of undefined');
      }
      return { status: 201, body: { ok: true } };
    },
  }),
  route({
    method: 'POST',
    path: '/v1/spend',
    summary: 'Always too poor',
    tag: 'test',
    auth: cred,
    idempotent: true,
    responses: { 200: { description: 'Never.' } },
    handler: () => {
      throw new ApiError('insufficient_balance', { details: { balance: 3 } });
    },
  }),
  route({
    method: 'POST',
    path: '/v1/limited',
    summary: 'Always rate limited',
    tag: 'test',
    auth: cred,
    responses: { 200: { description: 'Never.' } },
    handler: () => {
      throw new ApiError('rate_limited', { retryAfterSeconds: 7 });
    },
  }),
  route({
    method: 'POST',
    path: '/v1/sessions',
    summary: 'Mint a session (open route, replay hides the token)',
    tag: 'test',
    auth: { kind: 'none' },
    body: z.object({ customer: z.string() }),
    idempotent: true,
    idempotencyIdentity: (body) => body.customer,
    replayTransform: (body) => ({ ...(body as object), customer_token: null }),
    responses: { 201: { description: 'Minted.' } },
    handler: (ctx) => ({ status: 201, body: { customer: ctx.body.customer, customer_token: 'ctok_secret' } }),
  }),
  route({
    method: 'POST',
    path: '/v1/entries',
    summary: 'An answer about a customer it does not show, naming another it does',
    tag: 'test',
    auth: cred,
    body: z.object({ to: z.string() }),
    idempotent: true,
    responses: { 201: { description: 'Done.' } },
    handler: (ctx) => ({
      status: 201,
      body: { id: 'le_1', note: `moved to ${ctx.body.to}`, other: 'cust_SHORT' },
      customerIds: [customerA, customerA],
    }),
  }),
  route({
    method: 'GET',
    path: '/v1/drain',
    summary: 'Waits for the test (close drains it)',
    tag: 'test',
    auth: { kind: 'none' },
    responses: { 200: { description: 'Done.' } },
    handler: async () => {
      state.drainStarted.resolve();
      await state.drainRelease.promise;
      return { status: 200, body: { drained: true } };
    },
  }),
];

const logLines: string[] = [];
const logger = pino({ level: 'info' }, { write: (line: string) => void logLines.push(line) });
const store = new TestIdempotencyStore();
const gateway: Gateway = createGateway({
  routes,
  authenticate,
  idempotency: store,
  logger,
  ready: async () => ({ ok: state.ready, checks: { storage: state.ready, partitions: state.ready ? true : '0/256' } }),
  drainTimeoutMs: 5000,
});
const port = await gateway.listen('127.0.0.1', 0);
const base = `http://127.0.0.1:${port}`;
t.ok(port > 0, 'listen resolves the bound port');

t.test('a port held by a gateway is not shared with a second one (no SO_REUSEPORT)', async (t) => {
  // uWebSockets.js shares a port between processes by default: a second service started on it
  // would take every other request, with other data behind it. (A port chosen by the kernel, as
  // 0 asks, is not shared anyway: the test names one.)
  const free = createServer();
  const fixed = await new Promise<number>((resolve) => free.listen(0, '127.0.0.1', () => resolve((free.address() as { port: number }).port)));
  await new Promise((r) => free.close(r));
  const quiet = { routes: [], authenticate, idempotency: store, logger: pino({ level: 'silent' }), ready: async () => ({ ok: true, checks: {} }) };
  const first = createGateway(quiet);
  t.equal(await first.listen('127.0.0.1', fixed), fixed);
  t.teardown(() => first.close());
  await t.rejects(createGateway(quiet).listen('127.0.0.1', fixed), /cannot listen on 127\.0\.0\.1:/, 'a second gateway cannot listen there');
  const probe = createServer();
  const err = await new Promise<NodeJS.ErrnoException | null>((resolve) => {
    probe.once('error', resolve);
    probe.listen(fixed, '127.0.0.1', () => resolve(null));
  });
  if (err === null) probe.close();
  t.equal(err?.code, 'EADDRINUSE', 'another process cannot bind it either');
});

type Json = any;

interface Answer {
  status: number;
  headers: Headers;
  text: string;
  json: Json;
}

const seenRequestIds = new Set<string>();

/** fetch + the invariant of every response: a fresh req_ Request-Id. */
async function call(
  method: string,
  path: string,
  opts: { headers?: Record<string, string>; body?: string | Uint8Array; auth?: string | null } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  if (opts.auth !== null) headers.authorization = opts.auth ?? 'Bearer good';
  if (typeof opts.body === 'string' && headers['content-type'] === undefined) headers['content-type'] = 'application/json';
  const init: RequestInit = { method, headers };
  if (opts.body !== undefined) init.body = opts.body as BodyInit;
  const res = await fetch(base + path, init);
  const text = await res.text();
  const rid = res.headers.get('request-id');
  if (rid === null || !/^req_[0-9A-Z]{26}$/.test(rid) || seenRequestIds.has(rid)) {
    throw new Error(`bad or repeated Request-Id ${rid} on ${method} ${path}`);
  }
  seenRequestIds.add(rid);
  let json: unknown;
  try {
    json = text.length > 0 ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  if (res.status >= 400 && path !== '/readyz' && method !== 'HEAD') {
    // Every error: the exact wire shape, request_id equal to the header (a replay keeps the
    // stored body byte for byte, so it names the original request).
    const e = (json as { error: Record<string, unknown> }).error;
    const keys = Object.keys(e).sort();
    const allowed = ['code', 'details', 'message', 'param', 'request_id', 'type'];
    const replayed = res.headers.get('idempotent-replayed') === 'true';
    if (!keys.every((k) => allowed.includes(k)) || (e.request_id !== rid && !replayed)) {
      throw new Error(`bad error shape on ${method} ${path}: ${text}`);
    }
    const entry = errorTable[e.code as keyof typeof errorTable];
    if (entry === undefined || entry.status !== res.status || entry.type !== e.type) {
      throw new Error(`code/status/type mismatch on ${method} ${path}: ${res.status} ${text}`);
    }
  }
  return { status: res.status, headers: res.headers, text, json };
}

t.test('route_not_found for unknown paths and methods, with Request-Id', async (t) => {
  for (const [m, p] of [
    ['GET', '/v1/nope'],
    ['PUT', '/v1/things'],
    ['GET', '/'],
    ['GET', '/v1/things/'],
    ['POST', '/healthz'],
  ] as const) {
    const r = await call(m, p);
    t.equal(r.status, 404, `${m} ${p}`);
    t.equal(r.json.error.code, 'route_not_found');
    t.equal(r.json.error.type, 'not_found');
  }
});

t.test('a known path with a method it does not take: 404 route_not_found naming the methods, with Allow', async (t) => {
  const r = await call('PUT', '/v1/things');
  t.equal(r.status, 404);
  t.equal(r.json.error.code, 'route_not_found');
  t.equal(r.headers.get('allow'), 'GET, POST, HEAD, OPTIONS');
  t.match(r.json.error.message, 'it takes GET, POST, HEAD, OPTIONS');
  t.equal((await call('PUT', '/v1/nope')).headers.get('allow'), null, 'an unknown path names none');
});

t.test('OPTIONS answers the methods of a path; a CORS preflight gets what a browser needs', async (t) => {
  const plain = await call('OPTIONS', '/v1/things/t1', { auth: null });
  t.equal(plain.status, 204);
  t.equal(plain.headers.get('allow'), 'GET, PATCH, DELETE, HEAD, OPTIONS');
  t.equal(plain.headers.get('access-control-allow-origin'), null, 'no Origin, no CORS headers');
  const pre = await call('OPTIONS', '/v1/things', {
    auth: null,
    headers: { origin: 'https://shop.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' },
  });
  t.equal(pre.status, 204, 'a preflight needs no credentials');
  t.equal(pre.headers.get('access-control-allow-origin'), 'https://shop.example');
  t.equal(pre.headers.get('access-control-allow-methods'), 'GET, POST, HEAD, OPTIONS');
  t.match(pre.headers.get('access-control-allow-headers'), /Authorization.*Content-Type.*Idempotency-Key/);
  t.equal(pre.headers.get('access-control-max-age'), '600');
  t.equal(pre.headers.get('vary'), 'Origin');
  const unknown = await call('OPTIONS', '/v1/nope', { auth: null, headers: { origin: 'https://shop.example', 'access-control-request-method': 'GET' } });
  t.equal(unknown.status, 404, 'an unknown path is still route_not_found');
});

t.test('a response to a request with an Origin names it and exposes Request-Id and ETag; errors too', async (t) => {
  const origin = { origin: 'https://shop.example' };
  const ok = await call('GET', '/v1/things/t1', { headers: origin });
  t.equal(ok.status, 200);
  t.equal(ok.headers.get('access-control-allow-origin'), 'https://shop.example');
  t.match(ok.headers.get('access-control-expose-headers'), /Request-Id.*ETag/);
  t.equal(ok.headers.get('access-control-allow-credentials'), null, 'bearer tokens only: never credentials');
  const denied = await call('GET', '/v1/things/t1', { auth: null, headers: origin });
  t.equal(denied.status, 401);
  t.equal(denied.headers.get('access-control-allow-origin'), 'https://shop.example', 'a browser can read the error');
  const none = await call('GET', '/v1/things/t1');
  t.equal(none.headers.get('access-control-allow-origin'), null);
});

t.test('HEAD is GET without the body', async (t) => {
  const get = await call('GET', '/healthz', { auth: null });
  const head = await call('HEAD', '/healthz', { auth: null });
  t.equal(head.status, 200);
  t.equal(head.text, '');
  t.equal(head.headers.get('content-length'), String(Buffer.byteLength(get.text)), 'the length GET would send');
  const list = await call('HEAD', '/v1/things/t1');
  t.equal(list.status, 200);
  t.equal(list.text, '');
  t.equal((await call('HEAD', '/v1/things/t1', { auth: null })).status, 401, 'with the same checks as GET');
});

t.test('healthz and readyz', async (t) => {
  const h = await call('GET', '/healthz', { auth: null });
  t.equal(h.status, 200);
  t.same(h.json, { status: 'ok' });
  const r1 = await call('GET', '/readyz', { auth: null });
  t.equal(r1.status, 200);
  t.same(r1.json, { status: 'ok', checks: { storage: true, partitions: true } });
  state.ready = false;
  const r2 = await call('GET', '/readyz', { auth: null });
  state.ready = true;
  t.equal(r2.status, 503);
  t.same(r2.json, { status: 'unavailable', checks: { storage: false, partitions: '0/256' } });
});

t.test('auth: missing and bad credentials; sync and async authenticate', async (t) => {
  const none = await call('GET', '/v1/things/t1', { auth: null });
  t.equal(none.status, 401);
  t.equal(none.json.error.code, 'authentication_required');
  const bad = await call('GET', '/v1/things/t1', { auth: 'Bearer nope' });
  t.equal(bad.json.error.code, 'invalid_credentials');
  const sync = await call('GET', '/v1/things/t1');
  t.same(sync.json, { id: 't1', name: 'x', env: 'env_1' });
  const asyncAuth = await call('GET', '/v1/things/t1', { auth: 'Bearer async' });
  t.same(asyncAuth.json, sync.json);
});

t.test('body_too_large: by Content-Length, and by streamed size without a length', async (t) => {
  const big = 'x'.repeat(limits.bodyBytesMax + 1);
  const r = await call('POST', '/v1/things', { body: big, headers: { 'idempotency-key': 'big' } });
  t.equal(r.status, 413);
  t.equal(r.json.error.code, 'body_too_large');

  // An endless chunked upload: only a server that stops reading at the cap can answer it. Sent on
  // a raw socket that keeps writing until the answer arrives: a fetch() upload cut off by the
  // server's close can fail with a reset before it reads the answer (seen once in a full run).
  const answer = await new Promise<string>((resolve, reject) => {
    const s = connect(port, '127.0.0.1');
    const chunk = Buffer.alloc(256 * 1024, 32);
    const frame = Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n')]);
    let got = '';
    let answered = false;
    const pump = () => {
      while (!answered && !s.destroyed && s.write(frame));
    };
    s.on('connect', () => {
      s.write(
        'POST /v1/things HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer good\r\nContent-Type: application/json\r\n' +
          'Idempotency-Key: big2\r\nTransfer-Encoding: chunked\r\n\r\n',
      );
      pump();
    });
    s.on('drain', pump);
    s.on('data', (d) => {
      answered = true;
      got += d.toString('latin1');
      const head = got.indexOf('\r\n\r\n');
      const length = /content-length: (\d+)/i.exec(got)?.[1];
      if (head >= 0 && length !== undefined && got.length >= head + 4 + Number(length)) {
        s.destroy();
        resolve(got);
      }
    });
    // Writes after the server closed fail with EPIPE/ECONNRESET; the answer read before counts.
    s.on('error', (err) => (answered ? undefined : reject(err)));
    s.on('close', () => (answered ? resolve(got) : reject(new Error('closed without an answer'))));
  });
  t.match(answer, /^HTTP\/1\.1 413 /, 'answered 413 while the upload was still going');
  t.equal(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)).error.code, 'body_too_large');
  // Both 413s count under the route they were sent to, as over invoke(); an unknown path's under "unmatched".
  const viaInvoke = await gateway.invoke({
    method: 'POST',
    path: '/v1/things',
    headers: { authorization: 'Bearer good', 'content-type': 'application/json', 'idempotency-key': 'big3' },
    body: big,
  });
  t.equal(viaInvoke.status, 413);
  t.equal((await call('POST', '/v1/nowhere', { body: big })).status, 413);
  const metrics = (await call('GET', '/metrics', { auth: null })).text;
  t.match(metrics, /http_request_duration_seconds_count\{method="POST",route="\/v1\/things",status="413"\} 2\n/);
  t.match(metrics, /public_grpc_request_duration_seconds_count\{method="POST",route="\/v1\/things",status="413"\} 1\n/);
  t.match(metrics, /http_request_duration_seconds_count\{method="POST",route="unmatched",status="413"\} 1\n/);
});

t.test('unsupported_media_type and invalid_json', async (t) => {
  const plain = await call('POST', '/v1/things', {
    body: '{"name":"a"}',
    headers: { 'content-type': 'text/plain', 'idempotency-key': 'mt1' },
  });
  t.equal(plain.status, 415);
  t.equal(plain.json.error.code, 'unsupported_media_type');
  const none = await call('POST', '/v1/things', {
    body: new TextEncoder().encode('{"name":"a"}'),
    headers: { 'idempotency-key': 'mt2', 'content-type': 'application/jsonx' },
  });
  t.equal(none.status, 415);
  const charset = await call('POST', '/v1/things', {
    body: '{"name":"charset"}',
    headers: { 'content-type': 'application/json; charset=utf-8', 'idempotency-key': 'mt3' },
  });
  t.equal(charset.status, 201);
  const bad = await call('POST', '/v1/things', { body: '{"name":', headers: { 'idempotency-key': 'bj' } });
  t.equal(bad.status, 400);
  t.equal(bad.json.error.code, 'invalid_json');
});

t.test('validation_failed with the param path; not stored under the key', async (t) => {
  const body = JSON.stringify({ name: 'a', items: [{ occurred_at: 'x' }, { occurred_at: 5 }] });
  const r = await call('POST', '/v1/things', { body, headers: { 'idempotency-key': 'v1' } });
  t.equal(r.status, 400);
  t.equal(r.json.error.code, 'validation_failed');
  t.equal(r.json.error.param, 'items[1].occurred_at');
  t.same(
    r.json.error.details.map((d: { param: string }) => d.param),
    ['items[1].occurred_at'],
  );
  // Validation ran before the claim: the same key with a good body runs the request.
  const ok = await call('POST', '/v1/things', { body: '{"name":"fixed"}', headers: { 'idempotency-key': 'v1' } });
  t.equal(ok.status, 201);
  t.equal(ok.json.name, 'fixed');

  const params = await call('GET', '/v1/things/BAD-ID');
  t.equal(params.status, 400);
  t.equal(params.json.error.param, 'id');

  const limit = await call('GET', '/v1/things?limit=500');
  t.equal(limit.json.error.code, 'validation_failed');
  t.equal(limit.json.error.param, 'limit');
  const page = await call('GET', '/v1/things?limit=7');
  t.equal(page.json.limit, 7);
});

t.test('docBody routes get the parsed JSON unvalidated', async (t) => {
  const r = await call('POST', '/v1/batch', { body: '{"events":[{"id":5}]}' });
  t.equal(r.status, 200);
  t.same(r.json, { raw: { events: [{ id: 5 }] } });
});

t.test('an empty POST body counts as {} when the schema accepts it', async (t) => {
  const ok = await call('POST', '/v1/things/t1/archive', { headers: {} });
  t.equal(ok.status, 200);
  t.same(ok.json, { id: 't1', got: {} });
  const required = await call('POST', '/v1/things', { headers: { 'idempotency-key': 'empty' } });
  t.equal(required.status, 400);
  t.equal(required.json.error.param, 'name');
});

t.test('invalid_cursor from pagination, for an empty or overlong cursor too', async (t) => {
  for (const cursor of ['not-a-cursor!', '', 'A'.repeat(limits.cursorCharsMax + 1), encodeCursor(['a\u0000'], 'any-scope')]) {
    const r = await call('GET', `/v1/things?cursor=${cursor}`);
    t.equal(r.status, 400, cursor.slice(0, 20));
    t.equal(r.json.error.code, 'invalid_cursor', cursor.slice(0, 20));
    t.equal(r.json.error.param, 'cursor');
  }
});

t.test('idempotency: key required, replay, reuse, scope per environment', async (t) => {
  const missing = await call('POST', '/v1/things', { body: '{"name":"a"}' });
  t.equal(missing.status, 400);
  t.equal(missing.json.error.code, 'idempotency_key_required');
  const tooLong = await call('POST', '/v1/things', {
    body: '{"name":"a"}',
    headers: { 'idempotency-key': 'k'.repeat(256) },
  });
  t.equal(tooLong.json.error.code, 'idempotency_key_required');

  const before = state.creates;
  const first = await call('POST', '/v1/things', {
    body: '{"name":"a","items":[]}',
    headers: { 'idempotency-key': 'idem-1' },
  });
  t.equal(first.status, 201);
  t.equal(first.headers.get('idempotent-replayed'), null);
  // Same request with other key order and whitespace: a replay, byte for byte.
  const again = await call('POST', '/v1/things', {
    body: '{ "items": [], "name": "a" }',
    headers: { 'idempotency-key': 'idem-1' },
  });
  t.equal(again.status, 201);
  t.equal(again.text, first.text);
  t.equal(again.headers.get('idempotent-replayed'), 'true');
  t.equal(state.creates, before + 1, 'the handler ran once');

  const reused = await call('POST', '/v1/things', { body: '{"name":"b"}', headers: { 'idempotency-key': 'idem-1' } });
  t.equal(reused.status, 422);
  t.equal(reused.json.error.code, 'idempotency_key_reused');

  const otherEnv = await call('POST', '/v1/things', {
    body: '{"name":"b"}',
    headers: { 'idempotency-key': 'idem-1' },
    auth: 'Bearer other-env',
  });
  t.equal(otherEnv.status, 201, 'keys are scoped per environment');
  t.equal(otherEnv.json.name, 'b');
});

t.test('an optional Idempotency-Key: sent, it claims, stores and replays; absent, the request runs each time', async (t) => {
  const before = state.pokes;
  const plain = [await call('POST', '/v1/things/t1/poke', { body: '{}' }), await call('POST', '/v1/things/t1/poke', { body: '{}' })];
  t.same(
    plain.map((r) => [r.status, r.headers.get('idempotent-replayed')]),
    [
      [200, null],
      [200, null],
    ],
  );
  t.equal(state.pokes, before + 2, 'no key: ran twice');
  const first = await call('POST', '/v1/things/t1/poke', { body: '{"hard":true}', headers: { 'idempotency-key': 'poke-1' } });
  const again = await call('POST', '/v1/things/t1/poke', { body: '{ "hard": true }', headers: { 'idempotency-key': 'poke-1' } });
  t.equal(again.headers.get('idempotent-replayed'), 'true');
  t.equal(again.text, first.text, 'the stored answer, byte for byte');
  t.equal(again.headers.get('etag'), first.headers.get('etag'), 'with its ETag');
  t.equal(state.pokes, before + 3, 'a key: ran once');
  const reused = await call('POST', '/v1/things/t1/poke', { body: '{}', headers: { 'idempotency-key': 'poke-1' } });
  t.same([reused.status, reused.json.error.code], [422, 'idempotency_key_reused']);
  for (const bad of ['', 'k'.repeat(256)]) {
    const r = await call('POST', '/v1/things/t1/poke', { body: '{}', headers: { 'idempotency-key': bad } });
    t.same([r.status, r.json.error.code], [400, 'idempotency_key_required'], `a key of ${bad.length} characters is refused, not ignored`);
  }
  t.equal(state.pokes, before + 3);
  const viaInvoke = await gateway.invoke({
    method: 'POST',
    path: '/v1/things/t1/poke',
    headers: { authorization: 'Bearer good', 'idempotency-key': 'poke-1' },
    body: { hard: true },
  });
  t.same([viaInvoke.status, viaInvoke.headers['idempotent-replayed']], [200, 'true'], 'invoke() (gRPC) replays too');
});

t.test('idempotency_in_progress while the first request runs, then a replay', async (t) => {
  const firstP = call('POST', '/v1/slow', { body: '{}', headers: { 'idempotency-key': 'slow-1' } });
  await state.slowStarted.promise;
  const second = await call('POST', '/v1/slow', { body: '{}', headers: { 'idempotency-key': 'slow-1' } });
  t.equal(second.status, 409);
  t.equal(second.json.error.code, 'idempotency_in_progress');
  t.equal(second.headers.get('retry-after'), '1');
  state.slowRelease.resolve();
  const first = await firstP;
  t.equal(first.status, 201);
  const third = await call('POST', '/v1/slow', { body: '{}', headers: { 'idempotency-key': 'slow-1' } });
  t.equal(third.status, 201);
  t.equal(third.headers.get('idempotent-replayed'), 'true');
  t.equal(third.text, first.text);
});

t.test('a replay repeats the ETag and Location of the first answer, and no other header', async (t) => {
  const body = '{"name":"w"}';
  const first = await call('POST', '/v1/widgets', { body, headers: { 'idempotency-key': 'w-1' } });
  t.equal(first.status, 201);
  t.equal(first.headers.get('etag'), '"1"');
  const location = first.headers.get('location');
  t.equal(location, `/v1/widgets/${first.json.id}`);
  t.ok(first.headers.get('x-served-by'));
  const replay = await call('POST', '/v1/widgets', { body, headers: { 'idempotency-key': 'w-1' } });
  t.equal(replay.status, 201);
  t.equal(replay.text, first.text);
  t.equal(replay.headers.get('idempotent-replayed'), 'true');
  t.equal(replay.headers.get('etag'), '"1"', 'the ETag for the next If-Match');
  t.equal(replay.headers.get('location'), location);
  t.equal(replay.headers.get('x-served-by'), null, 'only the headers a replay must repeat are stored');
  t.same(store.rows.get('env_1\u0000w-1')?.headers, { etag: '"1"', location }, 'stored with lower-case names');
  const viaInvoke = await gateway.invoke({
    method: 'POST',
    path: '/v1/widgets',
    headers: { authorization: 'Bearer good', 'idempotency-key': 'w-1' },
    body: { name: 'w' },
  });
  t.match(viaInvoke.headers, { etag: '"1"', location, 'idempotent-replayed': 'true' }, 'invoke() (gRPC) replays them too');
  t.not(viaInvoke.headers['request-id'], first.headers.get('request-id'));
});

t.test('an answer stored before headers were stored still replays, without them', async (t) => {
  store.rows.set('env_1\u0000w-old', {
    fingerprint: fingerprintOf('POST', '/v1/widgets', { name: 'old' }),
    state: 'done',
    status: 201,
    body: '{"id":"widget_old","name":"old"}',
    headers: null,
    claimedAtMs: Date.now(),
  });
  const before = state.creates;
  const r = await call('POST', '/v1/widgets', { body: '{"name":"old"}', headers: { 'idempotency-key': 'w-old' } });
  t.equal(r.status, 201);
  t.same(r.json, { id: 'widget_old', name: 'old' });
  t.equal(r.headers.get('idempotent-replayed'), 'true');
  t.equal(r.headers.get('etag'), null);
  t.equal(state.creates, before, 'not run again');
});

t.test('a request running past the stale window keeps its claim; a dead claim is still taken over', async (t) => {
  // A short window so the test runs in real time: touches every 500 ms (wide enough that a loaded
  // CI box delaying a timer by a few hundred ms does not make a live claim look dead).
  const staleAfterMs = 1500;
  const touches: string[] = [];
  class CountingStore extends MemoryIdempotencyStore {
    override async touch(scope: string, key: string): Promise<boolean> {
      touches.push(key);
      return super.touch(scope, key);
    }
  }
  const memory = new CountingStore();
  let runs = 0;
  let started = deferred();
  let release = deferred();
  const long = route({
    method: 'POST',
    path: '/v1/long',
    summary: 'Runs until the test releases it',
    tag: 'test',
    auth: cred,
    body: z.object({}),
    idempotent: true,
    responses: { 201: { description: 'Done.' } },
    handler: async () => {
      runs++;
      started.resolve();
      await release.promise;
      return { status: 201, body: { run: runs } };
    },
  });
  const g = createGateway({
    routes: [long],
    authenticate,
    idempotency: memory,
    idempotencyStaleAfterMs: staleAfterMs,
    logger,
    ready: async () => ({ ok: true, checks: {} }),
  });
  t.teardown(() => g.close());
  const post = (key: string) =>
    g.invoke({ method: 'POST', path: '/v1/long', headers: { authorization: 'Bearer good', 'idempotency-key': key }, body: {} });
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  const fast = post('fast');
  await started.promise;
  release.resolve();
  t.equal((await fast).status, 201);
  t.same(touches, [], 'a request that ends within a third of the window writes no touch');

  started = deferred();
  release = deferred();
  const first = post('slow');
  await started.promise;
  await sleep(staleAfterMs * 3);
  const repeatP = post('slow');
  // A repeat that took the claim over would run the handler and wait for the release too.
  const repeat = await Promise.race([repeatP, sleep(2000).then(() => null)]);
  t.equal(runs, 2, 'the handler did not run again');
  t.equal(repeat?.status, 409, 'three windows later the first request still holds the key');
  t.match(repeat?.body, { error: { code: 'idempotency_in_progress' } });
  t.ok(touches.filter((k) => k === 'slow').length >= 5, `touched while running (${touches.length})`);
  release.resolve();
  await repeatP;
  t.same((await first).body, { run: 2 });
  const touchesAtEnd = touches.length;
  await sleep(staleAfterMs);
  t.equal(touches.length, touchesAtEnd, 'no touch after the answer was stored');
  const replay = await post('slow');
  t.equal(replay.headers['idempotent-replayed'], 'true');
  t.same(replay.body, { run: 2 });

  // A claim left by a process that died is never touched: it goes stale and a repeat runs.
  t.equal(await memory.claim('env_1', 'orphan', fingerprintOf('POST', '/v1/long', {}), staleAfterMs), null);
  const early = await post('orphan');
  t.equal(early.status, 409, 'not stale yet');
  await sleep(staleAfterMs + 50);
  started = deferred();
  release = deferred();
  release.resolve();
  const taken = await post('orphan');
  t.equal(taken.status, 201, 'the dead claim is taken over');
  t.same(taken.body, { run: 3 });
});

t.test('a 4xx from the handler is stored and replayed; a 500 is released and retried', async (t) => {
  const a = await call('POST', '/v1/spend', { headers: { 'idempotency-key': 'spend-1' } });
  t.equal(a.status, 409);
  t.equal(a.json.error.code, 'insufficient_balance');
  t.same(a.json.error.details, { balance: 3 });
  const b = await call('POST', '/v1/spend', { headers: { 'idempotency-key': 'spend-1' } });
  t.equal(b.status, 409);
  t.equal(b.headers.get('idempotent-replayed'), 'true');
  t.equal(b.text, a.text, 'the stored error body, original request_id included');
  t.not(b.headers.get('request-id'), a.headers.get('request-id'), 'the replay has its own Request-Id');

  const f1 = await call('POST', '/v1/fail_once', { headers: { 'idempotency-key': 'fo-1' } });
  t.equal(f1.status, 500);
  const f2 = await call('POST', '/v1/fail_once', { headers: { 'idempotency-key': 'fo-1' } });
  t.equal(f2.status, 201);
  t.equal(f2.headers.get('idempotent-replayed'), null, 'ran again after the release');
});

t.test('a stored answer keeps the customers it is about: those the handler named and those it shows', async (t) => {
  const r = await call('POST', '/v1/entries', { body: JSON.stringify({ to: customerB }), headers: { 'idempotency-key': 'about-1' } });
  t.equal(r.status, 201);
  t.same(store.rows.get('env_1\u0000about-1')?.customerIds, [customerA, customerB].sort(), 'named once, shown, sorted; not a malformed id');
  t.equal(await store.forget('env_1', [customerA]), 1, 'forgotten with the customer it does not show');
  const again = await call('POST', '/v1/entries', { body: JSON.stringify({ to: customerB }), headers: { 'idempotency-key': 'about-1' } });
  t.equal(again.headers.get('idempotent-replayed'), null, 'the repeat runs again');
});

t.test('replayTransform on an open route (scope: the hash of its identity)', async (t) => {
  const body = '{"customer":"c1"}';
  const first = await call('POST', '/v1/sessions', { body, auth: null, headers: { 'idempotency-key': 'cs-1' } });
  t.same(first.json, { customer: 'c1', customer_token: 'ctok_secret' });
  const replay = await call('POST', '/v1/sessions', { body, auth: null, headers: { 'idempotency-key': 'cs-1' } });
  t.equal(replay.status, 201);
  t.same(replay.json, { customer: 'c1', customer_token: null });
  t.equal(replay.headers.get('idempotent-replayed'), 'true');
  t.ok(store.rows.has(`anon/${createHash('sha256').update('c1').digest('hex')}\u0000cs-1`), 'the identity is stored hashed');
  const other = await call('POST', '/v1/sessions', { body: '{"customer":"c2"}', auth: null, headers: { 'idempotency-key': 'cs-1' } });
  t.equal(other.status, 201, 'another identity with the same key is not key reuse');
  t.same(other.json, { customer: 'c2', customer_token: 'ctok_secret' });
  t.equal(other.headers.get('idempotent-replayed'), null);
});

t.test('an open idempotent route must name its identity', async (t) => {
  const open = route({
    method: 'POST',
    path: '/v1/open',
    summary: 'Open and idempotent, with no identity',
    tag: 'test',
    auth: { kind: 'none' },
    idempotent: true,
    responses: { 201: { description: 'Never built.' } },
    handler: () => ({ status: 201, body: {} }),
  });
  t.throws(
    () => createGateway({ routes: [open], authenticate, idempotency: new MemoryIdempotencyStore(), logger, ready: async () => ({ ok: true, checks: {} }) }),
    /idempotencyIdentity/,
  );
});

t.test('stale_write via If-Match; ETag on success; 204 has no body', async (t) => {
  const stale = await call('PATCH', '/v1/things/t1', { body: '{"name":"n"}', headers: { 'if-match': '"2"' } });
  t.equal(stale.status, 409);
  t.equal(stale.json.error.code, 'stale_write');
  const ok = await call('PATCH', '/v1/things/t1', { body: '{"name":"n"}', headers: { 'if-match': '"3"' } });
  t.equal(ok.status, 200);
  t.equal(ok.headers.get('etag'), '"4"');
  const garbage = await call('PATCH', '/v1/things/t1', { body: '{"name":"n"}', headers: { 'if-match': 'three' } });
  t.equal(garbage.json.error.code, 'validation_failed');
  t.equal(garbage.json.error.param, 'If-Match');
  const del = await call('DELETE', '/v1/things/t1');
  t.equal(del.status, 204);
  t.equal(del.text, '');
});

t.test('internal_error does not leak; the stack is logged; Retry-After from ApiError', async (t) => {
  const r = await call('GET', '/v1/things/boom');
  t.equal(r.status, 500);
  t.equal(r.json.error.code, 'internal_error');
  t.equal(r.json.error.message, errorTable.internal_error.message);
  t.notMatch(r.text, /hunter2|secret detail/);
  const logged = logLines.find((l) => l.includes('hunter2'));
  t.ok(logged, 'the error was logged');
  t.match(JSON.parse(logged!), { level: 50, request_id: r.json.error.request_id, err: { stack: /Error: secret/ } });

  const limited = await call('POST', '/v1/limited', { body: '{}' });
  t.equal(limited.status, 429);
  t.equal(limited.json.error.code, 'rate_limited');
  t.equal(limited.headers.get('retry-after'), '7');
});

t.test('/metrics: the request histogram is labelled by route pattern', async (t) => {
  await call('GET', '/v1/things/t42');
  // The public gRPC API's work goes through invoke(): its own histogram, the same labels.
  await gateway.invoke({ method: 'GET', path: '/v1/things/t43', headers: { authorization: 'Bearer good' } });
  await gateway.invoke({ method: 'GET', path: '/v1/nope', headers: {} });
  const r = await call('GET', '/metrics', { auth: null });
  t.match(r.text, /public_grpc_request_duration_seconds_count\{method="GET",route="\/v1\/things\/:id",status="200"\} 1\n/);
  t.match(r.text, /public_grpc_request_duration_seconds_count\{method="GET",route="unmatched",status="404"\} 1\n/);
  t.notMatch(r.text, /route="\/v1\/things\/t43"/, 'never the raw path');
  t.equal(r.status, 200);
  t.match(r.headers.get('content-type') ?? '', /^text\/plain/);
  t.match(r.text, /http_request_duration_seconds_count\{method="GET",route="\/v1\/things\/:id",status="200"\} \d+/);
  t.match(r.text, /http_request_duration_seconds_count\{method="PUT",route="unmatched",status="404"\} \d+/);
  t.notMatch(r.text, /route="\/v1\/things\/t42"/, 'never the raw path');
  for (const name of [
    'journal_flush_records',
    'journal_flush_seconds',
    'actors_active',
    'actors_unsnapshotted',
    'mailbox_depth',
    'projector_lag_records',
    'ingest_held_total',
    'snapshot_save_seconds',
    'partitions_owned',
    'partitions_recovering',
    'process_cpu_user_seconds_total',
  ]) {
    t.match(r.text, new RegExp(`# TYPE ${name} `), name);
  }
});

t.test('/v1/openapi.json describes every route from the same schemas', async (t) => {
  const r = await call('GET', '/v1/openapi.json', { auth: null });
  t.equal(r.status, 200);
  const doc = r.json;
  t.equal(doc.openapi, '3.1.0');
  for (const rt of routes) {
    const p = rt.path.replace(/:([a-z_]+)/g, '{$1}');
    const op = doc.paths[p]?.[rt.method.toLowerCase()];
    t.ok(op, `${rt.method} ${p} documented`);
    t.equal(op?.summary, rt.summary);
    t.same(op?.security, rt.auth.kind === 'credential' ? [{ bearer: [] }] : []);
    const names = (op?.parameters ?? []).map((x: { name: string }) => x.name);
    for (const m of rt.path.matchAll(/:([a-z_]+)/g)) t.ok(names.includes(m[1]), `path param ${m[1]}`);
    t.equal(names.includes('Idempotency-Key'), rt.idempotent === true || rt.idempotent === 'optional', `Idempotency-Key on ${rt.path}`);
    const key = (op?.parameters ?? []).find((x: { name: string }) => x.name === 'Idempotency-Key');
    if (key !== undefined) t.equal(key.required, rt.idempotent === true, `Idempotency-Key required on ${rt.path}: only on creating POSTs`);
  }
  for (const p of ['/healthz', '/readyz', '/metrics', '/v1/openapi.json']) t.ok(doc.paths[p]?.get, p);
  const create = doc.paths['/v1/things'].post;
  t.same(create.requestBody.content['application/json'].schema.required, ['name']);
  t.equal(create.requestBody.required, true);
  t.equal(doc.paths['/v1/things/{id}/archive'].post.requestBody.required, false);
  t.same(doc.paths['/v1/batch'].post.requestBody.content['application/json'].schema.required, ['events']);
  t.same(
    doc.paths['/v1/things'].get.parameters.map((x: { name: string }) => x.name),
    ['limit', 'cursor'],
  );
  t.match(
    doc.paths['/v1/things'].get.parameters[1].schema,
    { type: 'string', minLength: 1, maxLength: limits.cursorCharsMax },
    'the cursor bounds stay documented though decodeCursor checks them',
  );
  t.same(doc.paths['/v1/things/{id}'].get.responses['200'].content['application/json'].schema.required, ['id', 'name']);
  t.same(doc.components.schemas.Error.properties.error.properties.code.enum.sort(), Object.keys(errorTable).sort());
  t.same(doc.components.securitySchemes.bearer, { type: 'http', scheme: 'bearer', description: 'API key or token.' });
  // Every $ref resolves inside the document.
  const refs: string[] = [];
  JSON.stringify(doc, (k, v) => {
    if (k === '$ref') refs.push(v);
    return v;
  });
  t.ok(refs.length > 0);
  for (const ref of refs) {
    const target = ref
      .slice(2)
      .split('/')
      .reduce((o: Json, k: string) => o?.[k], doc);
    t.ok(target, `${ref} resolves`);
  }
  const again = await call('GET', '/v1/openapi.json', { auth: null });
  t.equal(again.text, r.text, 'cached and stable');
});

t.test('invoke() answers exactly like HTTP', async (t) => {
  let n = 0;
  const cases: Array<() => InvokeRequest> = [
    () => ({ method: 'GET', path: '/v1/nope', headers: {} }),
    () => ({ method: 'GET', path: '/v1/things/t1', headers: {} }),
    () => ({ method: 'GET', path: '/v1/things/t1', headers: { authorization: 'Bearer good' } }),
    () => ({ method: 'GET', path: '/v1/things', query: 'cursor=zz!', headers: { authorization: 'Bearer good' } }),
    () => ({ method: 'GET', path: '/v1/things', query: 'limit=0', headers: { authorization: 'Bearer good' } }),
    () => ({ method: 'GET', path: '/v1/things/boom', headers: { authorization: 'Bearer good' } }),
    () => ({
      method: 'POST',
      path: '/v1/things',
      headers: { authorization: 'Bearer good', 'content-type': 'application/json' },
      body: '{"name":"x"}',
    }),
    () => ({
      method: 'POST',
      path: '/v1/things',
      headers: { authorization: 'Bearer good', 'content-type': 'application/json', 'idempotency-key': `inv-${n++}` },
      body: '{"name":',
    }),
    () => ({
      method: 'POST',
      path: '/v1/things',
      headers: { authorization: 'Bearer good', 'content-type': 'application/json', 'idempotency-key': `inv-${n++}` },
      body: '{"name":"x","items":[{}]}',
    }),
    () => ({
      method: 'POST',
      path: '/v1/things',
      headers: { authorization: 'Bearer good', 'content-type': 'text/plain', 'idempotency-key': `inv-${n++}` },
      body: '{"name":"x"}',
    }),
    () => ({
      method: 'POST',
      path: '/v1/limited',
      headers: { authorization: 'Bearer good', 'content-type': 'application/json' },
      body: '{}',
    }),
    () => ({
      method: 'PATCH',
      path: '/v1/things/t1',
      headers: { authorization: 'Bearer good', 'content-type': 'application/json', 'if-match': '"1"' },
      body: '{"name":"n"}',
    }),
    () => ({ method: 'GET', path: '/healthz', headers: {} }),
    () => ({
      method: 'POST',
      path: '/v1/things',
      headers: { authorization: 'Bearer good', 'content-type': 'application/json', 'idempotency-key': 'x' },
      body: 'y'.repeat(limits.bodyBytesMax + 1),
    }),
  ];
  const strip = (body: Json) => {
    if (body?.error) return { ...body, error: { ...body.error, request_id: '*' } };
    return body;
  };
  const pick = (h: (k: string) => string | null | undefined) =>
    ['content-type', 'retry-after', 'etag', 'idempotent-replayed'].map((k) => h(k) ?? null);
  for (const make of cases) {
    const reqH = make();
    const reqI = make();
    const http = await call(reqH.method, reqH.path + (reqH.query ? `?${reqH.query}` : ''), {
      headers: reqH.headers,
      auth: reqH.headers.authorization ?? null,
      ...(reqH.body === undefined ? {} : { body: reqH.body as string }),
    });
    const inv = await gateway.invoke(reqI);
    const label = `${reqH.method} ${reqH.path}`;
    t.equal(inv.status, http.status, label);
    t.same(strip(inv.body), strip(http.json), label);
    t.same(
      pick((k) => inv.headers[k]),
      pick((k) => http.headers.get(k)),
      label,
    );
    t.match(inv.headers['request-id'], /^req_/);
    if (inv.status >= 400) t.equal((inv.body as Json).error.request_id, inv.headers['request-id']);
  }
  // invoke() with an already-parsed body (the gRPC path).
  const parsed = await gateway.invoke({
    method: 'POST',
    path: '/v1/things',
    headers: { authorization: 'Bearer good', 'idempotency-key': 'inv-obj' },
    body: { name: 'from-grpc' },
  });
  t.equal(parsed.status, 201);
  t.match(parsed.body, { name: 'from-grpc' });
});

t.test('close() drains an in-flight request and stops accepting', async (t) => {
  const inflight = call('GET', '/v1/drain', { auth: null });
  await state.drainStarted.promise;
  let closed = false;
  const closing = gateway.close().then(() => {
    closed = true;
  });
  await new Promise((r) => setTimeout(r, 50));
  t.equal(closed, false, 'close() waits for the in-flight request');
  const refused = await new Promise<string>((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve('connected');
    });
    s.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'));
  });
  t.equal(refused, 'ECONNREFUSED', 'new connections are refused');
  state.drainRelease.resolve();
  const r = await inflight;
  t.equal(r.status, 200);
  t.same(r.json, { drained: true });
  await closing;
  t.equal(closed, true);
});
