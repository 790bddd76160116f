// The public gRPC adapter over a real grpc-js client and server (port 0), with a fake gateway
// invoke that behaves like the HTTP pipeline: what request each RPC becomes, results in request
// order with per-item errors, HTTP errors as gRPC status + error-code trailers, and IngestStream
// acks (every correlation id once, one customer's events in order, bounded concurrency).
import { credentials, Metadata, type ServiceError, status } from '@grpc/grpc-js';
import { connect, type Settings } from 'node:http2';
import t, { type Test } from 'tap';
import { CustomersClient, type GetStateResponse } from '../../src/grpc/gen/public/v1/customers.js';
import {
  EventsClient,
  type IngestBatchRequest,
  type IngestBatchResponse,
  IngestMode,
  type IngestStreamResponse,
} from '../../src/grpc/gen/public/v1/events.js';
import { MatchesClient, type ReportRequest, type ReportResponse } from '../../src/grpc/gen/public/v1/matches.js';
import { createPublicGrpcServer, type InvokeRequest, type InvokeResponse, publicGrpcLimits } from '../../src/grpc/public-server.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function errorBody(code: string, type: string, message: string, param?: string) {
  return { error: { code, type, message, request_id: 'req_fake', ...(param ? { param } : {}) } };
}
const fail = (httpStatus: number, code: string, type: string, param?: string, headers: Record<string, string> = {}) => ({
  status: httpStatus,
  headers: { 'request-id': 'req_fake', ...headers },
  body: errorBody(code, type, `${code} happened`, param),
});

type Json = Record<string, unknown>;

/** Per-event behaviour of the fake pipeline, shared by single and batch requests. */
function fakeEvent(raw: Json, at: string, mode: unknown): { ok: true; body: Json } | { ok: false; status: number; body: Json } {
  const p = (f: string) => (at ? `${at}.${f}` : f);
  if (typeof raw.name !== 'string') return { ok: false, status: 400, body: errorBody('validation_failed', 'invalid_request', 'name: required', p('name')) };
  if (raw.properties !== undefined && (typeof raw.properties !== 'object' || raw.properties === null || Array.isArray(raw.properties))) {
    return { ok: false, status: 400, body: errorBody('validation_failed', 'invalid_request', 'expected record', p('properties')) };
  }
  if (raw.id === 'conflict') return { ok: false, status: 409, body: errorBody('event_id_conflict', 'conflict', 'different content', p('id')) };
  if (raw.id === 'busy') return { ok: false, status: 429, body: errorBody('rate_limited', 'rate_limited', 'too many commands') };
  const body: Json = { id: `evt_${String(raw.id)}`, client_event_id: raw.id, status: mode === 'sync' ? 'evaluated' : 'accepted' };
  if (mode === 'sync') body.effects = [{ kind: 'award', amount: 5 }];
  if (raw.id === 'dup') body.duplicate = true;
  return { ok: true, body };
}

function makeFake() {
  const requests: InvokeRequest[] = [];
  const order = new Map<string, string[]>(); // customer -> event ids in processing order
  let running = 0;
  let maxRunning = 0;
  async function invoke(req: InvokeRequest): Promise<InvokeResponse> {
    requests.push(req);
    if (req.headers.authorization !== 'Bearer osk_good') return fail(401, 'authentication_required', 'authentication');
    // As gateway.invoke: a refusal the adapter asks for comes after the credential.
    if (req.refuseAfterAuth !== undefined) {
      return { status: req.refuseAfterAuth.status, headers: { 'request-id': 'req_fake' }, body: req.refuseAfterAuth.toBody('req_fake') };
    }
    const body = (req.body ?? {}) as Json;
    if (req.method === 'POST' && req.path === '/v1/events') {
      if (Array.isArray(body.events)) {
        if (body.events.length > 100) return fail(400, 'batch_too_large', 'invalid_request', 'events');
        const data = body.events.map((e: Json, i: number) => {
          const r = fakeEvent(e, `events[${i}]`, body.mode);
          return r.ok ? r.body : { client_event_id: e.id ?? null, ...r.body };
        });
        return { status: 207, headers: { 'request-id': 'req_fake' }, body: { data } };
      }
      running++;
      maxRunning = Math.max(maxRunning, running);
      try {
        const props = (body.properties ?? {}) as Json;
        await sleep(typeof props.delay_ms === 'number' ? props.delay_ms : 0);
        const customer = String(body.customer_id);
        order.set(customer, [...(order.get(customer) ?? []), String(body.id)]);
        const r = fakeEvent(body, '', body.mode);
        if (r.ok) return { status: 202, headers: {}, body: r.body };
        return { status: r.status, headers: r.status === 429 ? { 'retry-after': '3' } : {}, body: r.body };
      } finally {
        running--;
      }
    }
    if (req.method === 'POST' && req.path === '/v1/match_results') {
      if (body.match_id === 'archived') return fail(409, 'match_profile_archived', 'conflict');
      if (body.match_id === 'busy') return fail(409, 'idempotency_in_progress', 'idempotency');
      if (body.match_id === 'rate') return fail(429, 'rate_limited', 'rate_limited', undefined, { 'retry-after': '7' });
      const replayed = body.match_id === 'again';
      return {
        status: replayed ? 200 : 201,
        headers: {},
        body: { id: 'mr_1', match_id: body.match_id, status: 'admitted', replayed, players: body.players },
      };
    }
    const m = /^\/v1\/customers\/([^/]+)\/state$/.exec(req.path);
    if (req.method === 'GET' && m) {
      const id = decodeURIComponent(m[1]!);
      if (id === 'cust_missing') return fail(404, 'resource_not_found', 'not_found', 'id');
      if (id === 'cust_boom') throw new Error('secret internals');
      if (id === 'cust_off') return fail(501, 'capability_unavailable', 'api_error');
      if (id === 'cust_down') return fail(503, 'ai_unavailable', 'api_error');
      if (id === 'cust_own_key') {
        const param = 'players[0].metrics.properties';
        const details = [{ param, message: 'not a number' }];
        return { status: 400, headers: {}, body: { error: { code: 'validation_failed', type: 'invalid_request', message: 'bad', param, details } } };
      }
      if (id === 'cust_text' || id === 'cust_long') {
        const long = id === 'cust_long';
        const param = long ? `p${'x'.repeat(300_000)}` : 'properties.ü%';
        const details = [{ param, message: long ? 'y'.repeat(300_000) : 'ünïcode' }];
        return { status: 400, headers: {}, body: { error: { code: 'validation_failed', type: 'invalid_request', message: 'bad', param, details } } };
      }
      return { status: 200, headers: {}, body: { customer: { id }, balances: [{ currency: 'pts', available: 9007199254740991 }] } };
    }
    return fail(404, 'route_not_found', 'not_found');
  }
  return {
    invoke,
    requests,
    order,
    get maxRunning() {
      return maxRunning;
    },
  };
}

async function setup(t: Test, streamInFlightMax?: number) {
  const fake = makeFake();
  const api = createPublicGrpcServer(fake.invoke, streamInFlightMax ? { streamInFlightMax } : {});
  const port = await api.listen('127.0.0.1', 0);
  const target = `127.0.0.1:${port}`;
  const events = new EventsClient(target, credentials.createInsecure());
  const matches = new MatchesClient(target, credentials.createInsecure());
  const customers = new CustomersClient(target, credentials.createInsecure());
  t.teardown(async () => {
    events.close();
    matches.close();
    customers.close();
    await api.close(0);
  });
  return { fake, events, matches, customers };
}

function auth(token = 'osk_good'): Metadata {
  const md = new Metadata();
  md.set('authorization', `Bearer ${token}`);
  md.set('x-service-environment', 'test');
  return md;
}

function unary<Req, Res>(
  fn: (req: Req, md: Metadata, cb: (err: ServiceError | null, res: Res) => void) => unknown,
  req: Req,
  md: Metadata,
): Promise<{ err: ServiceError | null; res: Res | undefined }> {
  return new Promise((resolve) => fn(req, md, (err, res) => resolve({ err, res: err ? undefined : res })));
}

const ev = (id: string, extra: Partial<{ name: string; customerId: string; propertiesJson: string }> = {}) => ({
  id,
  name: 'level.completed',
  customerId: 'player-1',
  occurredAt: '2030-01-01T00:00:00Z',
  propertiesJson: '',
  ...extra,
});

t.test('IngestBatch: one result per event in request order, per-item errors kept', async (t) => {
  const { fake, events } = await setup(t);
  const req: IngestBatchRequest = {
    mode: IngestMode.INGEST_MODE_SYNC,
    events: [
      ev('a', { propertiesJson: '{"n": 1, "big": 12345678901, "nested": {"x": [1, 2.5]}}' }),
      ev('b', { name: '' }),
      ev('dup'),
      ev('c', { propertiesJson: '{not json' }),
      ev('conflict'),
    ],
  };
  const { err, res } = await unary<IngestBatchRequest, IngestBatchResponse>(events.ingestBatch.bind(events), req, auth());
  t.equal(err, null);
  const sent = fake.requests[0]!;
  t.equal(sent.method, 'POST');
  t.equal(sent.path, '/v1/events');
  t.equal(sent.headers.authorization, 'Bearer osk_good');
  t.equal(sent.headers['x-service-environment'], 'test');
  const body = sent.body as { mode: string; events: Json[] };
  t.equal(body.mode, 'sync');
  t.same(body.events[0], {
    id: 'a',
    name: 'level.completed',
    customer_id: 'player-1',
    occurred_at: '2030-01-01T00:00:00Z',
    properties: { n: 1, big: 12345678901, nested: { x: [1, 2.5] } },
  });
  t.notOk('name' in body.events[1]!, 'an empty string is "not sent"');

  const r = res!.results;
  t.equal(r.length, 5);
  t.same(r[0], {
    accepted: { id: 'evt_a', clientEventId: 'a', status: 'evaluated', duplicate: false, effectsJson: '[{"kind":"award","amount":5}]', fallback: false },
    clientEventId: 'a',
  });
  t.equal(r[1]!.error?.code, 'validation_failed');
  t.equal(r[1]!.error?.param, 'events[1].name');
  t.equal(r[1]!.clientEventId, 'b');
  t.equal(r[2]!.accepted?.duplicate, true);
  t.same(r[3]!.error, {
    code: 'validation_failed',
    type: 'invalid_request',
    message: 'properties_json is not valid JSON.',
    param: 'events[3].properties_json',
    detailsJson: '',
    retryAfterSeconds: 0,
  });
  t.equal(r[4]!.error?.code, 'event_id_conflict');
  t.equal(r[4]!.error?.type, 'conflict');
});

t.test('IngestBatch: call-level errors become gRPC status with error-code trailers', async (t) => {
  const { fake, events } = await setup(t);
  const ingest = events.ingestBatch.bind(events);
  const noAuth = await unary<IngestBatchRequest, IngestBatchResponse>(ingest, { events: [ev('a')], mode: 0 }, new Metadata());
  t.equal(noAuth.err?.code, status.UNAUTHENTICATED);
  t.equal(noAuth.err?.details, 'authentication_required happened');
  t.same(noAuth.err?.metadata.get('error-code'), ['authentication_required']);
  t.same(noAuth.err?.metadata.get('error-type'), ['authentication']);
  t.same(noAuth.err?.metadata.get('request-id'), ['req_fake']);
  t.notOk('authorization' in fake.requests[0]!.headers);

  const many = Array.from({ length: 101 }, (_, i) => ev(`e${i}`));
  const tooMany = await unary<IngestBatchRequest, IngestBatchResponse>(ingest, { events: many, mode: 0 }, auth());
  t.equal(tooMany.err?.code, status.INVALID_ARGUMENT);
  t.same(tooMany.err?.metadata.get('error-code'), ['batch_too_large']);
  t.same(tooMany.err?.metadata.get('error-param'), ['events']);
  t.notOk('mode' in (fake.requests[1]!.body as Json), 'the default mode is not sent');
});

t.test('Matches.Report: body mapping, replay, conflicts and rate limits', async (t) => {
  const { fake, matches } = await setup(t);
  const report = matches.report.bind(matches);
  const req: ReportRequest = {
    profile: 'ranked',
    matchId: 'm-1',
    startedAt: '2030-01-01T00:00:00Z',
    endedAt: '2030-01-01T00:10:00Z',
    players: [
      { customer: { externalId: 'p1' }, metrics: { kills: 3, accuracy: 0.5 }, won: true },
      { customer: { id: 'cust_2' }, metrics: { kills: 0, accuracy: 0 } },
    ],
  };
  const ok = await unary<ReportRequest, ReportResponse>(report, req, auth());
  t.equal(ok.err, null);
  t.equal(fake.requests[0]!.path, '/v1/match_results');
  t.same(fake.requests[0]!.body, {
    profile: 'ranked',
    match_id: 'm-1',
    started_at: '2030-01-01T00:00:00Z',
    ended_at: '2030-01-01T00:10:00Z',
    players: [
      { customer: { external_id: 'p1' }, metrics: { kills: 3, accuracy: 0.5 }, won: true },
      { customer: { id: 'cust_2' }, metrics: { kills: 0, accuracy: 0 } },
    ],
  });
  t.equal(ok.res?.id, 'mr_1');
  t.equal(ok.res?.status, 'admitted');
  t.equal(ok.res?.replayed, false);
  t.equal((JSON.parse(ok.res!.resultJson) as Json).match_id, 'm-1');

  const again = await unary<ReportRequest, ReportResponse>(report, { ...req, matchId: 'again' }, auth());
  t.equal(again.res?.replayed, true);

  const archived = await unary<ReportRequest, ReportResponse>(report, { ...req, matchId: 'archived' }, auth());
  t.equal(archived.err?.code, status.FAILED_PRECONDITION);
  t.same(archived.err?.metadata.get('error-code'), ['match_profile_archived']);

  const busy = await unary<ReportRequest, ReportResponse>(report, { ...req, matchId: 'busy' }, auth());
  t.equal(busy.err?.code, status.ABORTED);

  const rate = await unary<ReportRequest, ReportResponse>(report, { ...req, matchId: 'rate' }, auth());
  t.equal(rate.err?.code, status.RESOURCE_EXHAUSTED);
  t.same(rate.err?.metadata.get('retry-after'), ['7']);
});

t.test('Customers.GetState: state as JSON and the error mapping', async (t) => {
  const { fake, customers } = await setup(t);
  const get = (customerId: string) =>
    unary<{ customerId: string }, GetStateResponse>(customers.getState.bind(customers), { customerId }, auth());

  const ok = await get('cust_1');
  t.equal(fake.requests[0]!.method, 'GET');
  t.equal(fake.requests[0]!.path, '/v1/customers/cust_1/state');
  t.same(JSON.parse(ok.res!.stateJson), { customer: { id: 'cust_1' }, balances: [{ currency: 'pts', available: 9007199254740991 }] });

  await get('a/b');
  t.equal(fake.requests[1]!.path, '/v1/customers/a%2Fb/state', 'the id cannot escape its path segment');

  const missing = await get('cust_missing');
  t.equal(missing.err?.code, status.NOT_FOUND);
  t.same(missing.err?.metadata.get('error-code'), ['resource_not_found']);

  const boom = await get('cust_boom');
  t.equal(boom.err?.code, status.INTERNAL);
  t.same(boom.err?.metadata.get('error-code'), ['internal_error']);
  t.notMatch(boom.err?.details ?? '', /secret internals/, 'a crash does not leak its message');

  t.equal((await get('cust_off')).err?.code, status.UNIMPLEMENTED);
  t.equal((await get('cust_down')).err?.code, status.UNAVAILABLE);

  const empty = await get('');
  t.equal(empty.err?.code, status.INVALID_ARGUMENT);
  t.same(empty.err?.metadata.get('error-param'), ['customer_id']);
  const sent = fake.requests.at(-1)!;
  t.equal(sent.path, '/v1/customers/_/state', 'an empty id runs the route\'s credential checks');
  t.match(sent.refuseAfterAuth, { code: 'validation_failed', param: 'customer_id' }, 'and is refused after them');
  const noAuth = await unary<{ customerId: string }, GetStateResponse>(customers.getState.bind(customers), { customerId: '' }, auth('osk_bad'));
  t.equal(noAuth.err?.code, status.UNAUTHENTICATED, 'the credential first');
});

t.test('Call errors: error-param and error-details percent-encoded, left out when too long', async (t) => {
  const { customers } = await setup(t);
  const get = (customerId: string) =>
    new Promise<ServiceError | null>((resolve) =>
      customers.getState({ customerId }, auth(), { deadline: Date.now() + 5000 }, (err) => resolve(err)),
    );
  const text = await get('cust_text');
  t.equal(text?.code, status.INVALID_ARGUMENT, 'not INTERNAL: the text is no metadata value as it is');
  t.same(text?.metadata.get('error-param'), ['properties_json.%C3%BC%25'], 'UTF-8 bytes and % as %XX');
  t.same(JSON.parse(decodeURIComponent(String(text?.metadata.get('error-details')[0]))), [{ param: 'properties_json.ü%', message: 'ünïcode' }]);
  const ownKey = await get('cust_own_key');
  t.same(ownKey?.metadata.get('error-param'), ['players[0].metrics.properties'], "a caller's own key named properties is not renamed");
  t.same(JSON.parse(String(ownKey?.metadata.get('error-details')[0])), [{ param: 'players[0].metrics.properties', message: 'not a number' }]);
  const long = await get('cust_long');
  t.equal(long?.code, status.INVALID_ARGUMENT, 'answered (a trailer of 300 KB may stall the call)');
  t.same(long?.metadata.get('error-code'), ['validation_failed']);
  t.same(long?.metadata.get('error-param'), [], 'a param past 8192 characters is left out');
  t.same(long?.metadata.get('error-details'), [], 'so are details');
});

t.test('IngestStream: every message acked once, one customer in order, concurrency bounded', async (t) => {
  const inFlightMax = 4;
  const { fake, events } = await setup(t, inFlightMax);
  const stream = events.ingestStream(auth());
  const acks: IngestStreamResponse[] = [];
  const finished = new Promise<void>((resolve, reject) => {
    stream.on('data', (a: IngestStreamResponse) => acks.push(a));
    stream.on('end', resolve);
    stream.on('error', reject);
  });

  // Ten customers, so only the stream's bound (not per-customer ordering) can cap concurrency.
  const customersIds = Array.from({ length: 10 }, (_, i) => `c${i + 1}`);
  const sent: Array<{ correlationId: string; customer: string; id: string }> = [];
  for (let i = 0; i < 30; i++) {
    const customer = customersIds[i % customersIds.length]!;
    const id = i === 7 ? 'conflict' : `e${i}`;
    // Earlier events are slower: without per-customer ordering they would finish last.
    const delay = 30 - i;
    sent.push({ correlationId: `k${i}`, customer, id });
    stream.write({
      correlationId: `k${i}`,
      mode: IngestMode.INGEST_MODE_UNSPECIFIED,
      event: ev(id, { customerId: customer, propertiesJson: JSON.stringify({ delay_ms: delay }) }),
    });
  }
  stream.write({ correlationId: 'bad-json', mode: 0, event: ev('x', { customerId: 'other', propertiesJson: '[' }) });
  stream.write({ correlationId: 'busy', mode: 0, event: ev('busy', { customerId: 'other' }) });
  stream.end();
  await finished;

  t.equal(acks.length, 32, 'one ack per message');
  t.same(new Set(acks.map((a) => a.correlationId)).size, 32, 'each correlation id acked once');
  for (const c of customersIds) {
    const expected = sent.filter((s) => s.customer === c).map((s) => s.id);
    t.same(fake.order.get(c), expected, `${c}: processed in arrival order`);
    const ackOrder = acks.filter((a) => sent.find((s) => s.correlationId === a.correlationId)?.customer === c);
    t.same(
      ackOrder.map((a) => a.correlationId),
      sent.filter((s) => s.customer === c).map((s) => s.correlationId),
      `${c}: acked in arrival order`,
    );
  }
  t.ok(fake.maxRunning > 1, 'different customers run concurrently');
  t.ok(fake.maxRunning <= inFlightMax, `at most ${inFlightMax} at once (saw ${fake.maxRunning})`);

  const byId = new Map(acks.map((a) => [a.correlationId, a.result]));
  t.equal(byId.get('k0')?.accepted?.id, 'evt_e0');
  t.equal(byId.get('k7')?.error?.code, 'event_id_conflict', 'a failed event is acked with its error');
  t.equal(byId.get('k7')?.clientEventId, 'conflict');
  t.equal(byId.get('bad-json')?.error?.param, 'properties_json');
  t.equal(byId.get('k7')?.error?.retryAfterSeconds, 0, 'no Retry-After, 0');
  t.match(byId.get('busy')?.error, { code: 'rate_limited', retryAfterSeconds: 3 }, "HTTP's Retry-After on the ack");
});

t.test('IngestStream: a refused credential fails the call with UNAUTHENTICATED and the error trailers', async (t) => {
  const { events } = await setup(t);
  const stream = events.ingestStream(auth('osk_bad'));
  const acks: IngestStreamResponse[] = [];
  const failed = new Promise<ServiceError | null>((resolve) => {
    stream.on('data', (a: IngestStreamResponse) => acks.push(a));
    stream.on('end', () => resolve(null));
    stream.on('error', (e: ServiceError) => resolve(e));
  });
  stream.write({ correlationId: 'only', mode: 0, event: ev('a') });
  stream.end();
  const err = await failed;
  t.equal(err?.code, status.UNAUTHENTICATED);
  t.equal(err?.metadata.get('error-code')[0], 'authentication_required');
  t.same(acks, [], 'no message is acknowledged');
});

t.test('IngestStream: a refused credential still acknowledges the messages already running', async (t) => {
  const ran: string[] = [];
  // Customer "slow" is journaled after 150 ms; "refused" meets a revoked credential at once.
  const invoke = async (req: InvokeRequest): Promise<InvokeResponse> => {
    const body = req.body as Json;
    const id = String(body.id);
    ran.push(id);
    if (body.customer_id === 'refused') return fail(401, 'credentials_revoked', 'authentication');
    if (body.customer_id === 'slow') await sleep(150);
    return { status: 202, headers: {}, body: { id: `evt_${id}`, client_event_id: id, status: 'accepted' } };
  };
  const api = createPublicGrpcServer(invoke);
  const port = await api.listen('127.0.0.1', 0);
  const events = new EventsClient(`127.0.0.1:${port}`, credentials.createInsecure());
  t.teardown(async () => {
    events.close();
    await api.close(0);
  });
  const acks: IngestStreamResponse[] = [];
  const err = await new Promise<ServiceError | null>((resolve) => {
    const stream = events.ingestStream(auth());
    stream.on('data', (a: IngestStreamResponse) => acks.push(a));
    stream.on('error', (e: ServiceError) => resolve(e));
    stream.on('end', () => resolve(null));
    stream.write({ correlationId: 'c-slow', mode: 0, event: ev('e-slow', { customerId: 'slow' }) });
    stream.write({ correlationId: 'c-refused', mode: 0, event: ev('e-refused', { customerId: 'refused' }) });
    // Read after the refusal (or never): not run.
    setTimeout(() => {
      stream.write({ correlationId: 'c-late', mode: 0, event: ev('e-late', { customerId: 'late' }) });
      stream.end();
    }, 50);
  });
  t.equal(err?.code, status.UNAUTHENTICATED, 'the call fails with the credential status');
  t.same(err?.metadata.get('error-code'), ['credentials_revoked']);
  t.match(acks, [{ correlationId: 'c-slow', result: { accepted: { id: 'evt_e-slow' } } }], 'the message running when the refusal came is acknowledged');
  t.equal(acks.length, 1, 'the refused message gets no ack');
  t.same(ran, ['e-slow', 'e-refused'], 'nothing after the refusal runs');
});

/** Polls until `count()` has not changed for `quietMs` (or `maxMs` passed); the last value. */
async function settled(count: () => number, quietMs = 600, maxMs = 15_000): Promise<number> {
  const until = Date.now() + maxMs;
  let last = count();
  let since = Date.now();
  while (Date.now() < until) {
    await sleep(100);
    const now = count();
    if (now !== last) {
      last = now;
      since = Date.now();
    } else if (Date.now() - since >= quietMs) break;
  }
  return last;
}

t.test('IngestStream: a client that stops reading its acks stops the stream being read (acks not taken count)', async (t) => {
  const { fake, events } = await setup(t);
  // A client whose acks the server cannot hand over (it stopped reading: HTTP/2 flow control
  // holds them back) must not make the server keep running its messages and holding their acks.
  const n = 3000;
  const customersN = 5;
  // ~620-byte acks: the client library and the HTTP/2 windows take in ~150 of them before the
  // flow control stops the server's writes.
  const idOf = (i: number) => `${String(i).padStart(6, '0')}-${'x'.repeat(200)}`;
  const stream = events.ingestStream(auth());
  const acks: IngestStreamResponse[] = [];
  const ended = new Promise<void>((resolve, reject) => {
    stream.on('end', resolve);
    stream.on('error', reject);
  });
  stream.on('data', (a: IngestStreamResponse) => acks.push(a));
  stream.pause(); // reads nothing until resumed
  let i = 0;
  const pump = () => {
    while (i < n) {
      const ok = stream.write({ correlationId: `p${i}`, mode: 0, event: ev(idOf(i), { customerId: `c${i % customersN}` }) });
      i++;
      if (!ok) return void stream.once('drain', pump);
    }
    stream.end();
  };
  pump();
  const ran = await settled(() => fake.requests.length);
  t.equal(acks.length, 0, 'the client read nothing');
  // 64 in the window, the rest taken by the client (its library reads ahead 16, and the HTTP/2
  // windows, 64 KiB, hold ~100 of these acks): far from the 3000 sent.
  t.ok(ran < 600, `the server stopped reading: ${ran} of ${n} messages ran`);

  stream.resume();
  await ended;
  t.equal(acks.length, n, 'once the client reads, every message is acknowledged');
  t.equal(new Set(acks.map((a) => a.correlationId)).size, n, 'each once');
  t.equal(fake.requests.length, n, 'each message ran once');
  for (let c = 0; c < customersN; c++) {
    const expected = Array.from({ length: n }, (_, k) => k)
      .filter((k) => k % customersN === c)
      .map(idOf);
    t.same(fake.order.get(`c${c}`), expected, `c${c}: run in arrival order`);
    t.same(
      acks.filter((a) => Number(a.correlationId.slice(1)) % customersN === c).map((a) => a.result?.accepted?.id),
      expected.map((id) => `evt_${id}`),
      `c${c}: acknowledged in arrival order`,
    );
  }
});

t.test('one connection may open at most streamsPerConnectionMax calls at once (HTTP/2 SETTINGS)', async (t) => {
  // Each IngestStream may hold its window of messages; the connection's stream count bounds how
  // many windows one client connection holds.
  const api = createPublicGrpcServer(makeFake().invoke);
  const port = await api.listen('127.0.0.1', 0);
  t.teardown(() => api.close(0));
  const session = connect(`http://127.0.0.1:${port}`);
  t.teardown(() => session.close());
  const settings = await new Promise<Settings>((resolve, reject) => {
    session.once('remoteSettings', resolve);
    session.once('error', reject);
  });
  t.equal(settings.maxConcurrentStreams, publicGrpcLimits.streamsPerConnectionMax);
  t.equal(publicGrpcLimits.streamsPerConnectionMax, 100);
});
