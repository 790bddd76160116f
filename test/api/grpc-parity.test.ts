// The public gRPC API against HTTP, where the adapter (src/grpc/public-server.ts) or the
// transport-free pipeline it runs on (gateway.invoke) could answer differently from HTTP: the order
// of checks (the credential before anything about the request), error metadata a client can read
// whatever the text, Retry-After on a stream acknowledgement, request ids, and the credential kinds
// and customer states HTTP already covers. Real service, real Redis + PostgreSQL.
import { Metadata, type ServiceError, status } from '@grpc/grpc-js';
import t from 'tap';
import type { GetStateRequest, GetStateResponse } from '../../src/grpc/gen/public/v1/customers.js';
import type {
  EventsClient,
  IngestBatchRequest,
  IngestBatchResponse,
  IngestStreamRequest,
  IngestStreamResponse,
} from '../../src/grpc/gen/public/v1/events.js';
import type { ReportRequest, ReportResponse } from '../../src/grpc/gen/public/v1/matches.js';
import { limits } from '../../src/limits.js';
import { bearer, ev, now, publicClients } from '../helpers/grpc.js';
import { type Client, idem, signUp, startForTest } from '../helpers/service.js';


/** A unary call: its error, its answer, and the trailing metadata of the call (also on success). */
function unary<Req, Res>(
  fn: (req: Req, md: Metadata, cb: (err: ServiceError | null, res: Res) => void) => { on(e: 'status', l: (s: { metadata: Metadata }) => void): unknown },
  req: Req,
  md: Metadata,
): Promise<{ err: ServiceError | null; res: Res | undefined; trailers: Metadata }> {
  return new Promise((resolve) => {
    let out: { err: ServiceError | null; res: Res | undefined } | null = null;
    let trailers: Metadata | null = null;
    const settle = () => {
      if (out !== null && trailers !== null) resolve({ ...out, trailers });
    };
    const call = fn(req, md, (err, res) => {
      out = { err, res: err ? undefined : res };
      settle();
    });
    call.on('status', (s) => {
      trailers = s.metadata;
      settle();
    });
  });
}

function streamAll(client: EventsClient, md: Metadata, msgs: IngestStreamRequest[]): Promise<IngestStreamResponse[]> {
  return new Promise((resolve, reject) => {
    const call = client.ingestStream(md);
    const acks: IngestStreamResponse[] = [];
    call.on('data', (a: IngestStreamResponse) => acks.push(a));
    call.on('error', reject);
    call.on('end', () => resolve(acks));
    for (const m of msgs) call.write(m);
    call.end();
  });
}

const trailer = (err: ServiceError | null | undefined, key: string) => err?.metadata.get(key)[0];

/** A public_grpc_request_duration_seconds count by its labels (0 when absent). */
async function grpcCount(anon: Client, method: string, route: string, code: number): Promise<number> {
  const text = (await anon.get('/metrics')).body as string;
  const line = text
    .split('\n')
    .find((l) => l.startsWith(`public_grpc_request_duration_seconds_count{method="${method}",route="${route}",status="${code}"}`));
  return line === undefined ? 0 : Number(line.split(' ').pop());
}

t.test('public gRPC API: parity with HTTP', async (t) => {
  const { service, anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  const { events, customers, matches } = publicClients(t, service.publicGrpcPort);
  const ingestBatch = (req: IngestBatchRequest, md: Metadata) =>
    unary<IngestBatchRequest, IngestBatchResponse>(events.ingestBatch.bind(events), req, md);
  const getState = (req: GetStateRequest, md: Metadata) => unary<GetStateRequest, GetStateResponse>(customers.getState.bind(customers), req, md);
  const report = (r: ReportRequest, md: Metadata) => unary<ReportRequest, ReportResponse>(matches.report.bind(matches), r, md);
  const secret = () => bearer(tenant.secretKey);

  await t.test('GetState without customer_id: the credential is checked first, and the call is counted', async (t) => {
    const before = await grpcCount(anon, 'GET', '/v1/customers/:id/state', 401);
    const none = await getState({ customerId: '' }, new Metadata());
    t.equal(none.err?.code, status.UNAUTHENTICATED, 'no credential: UNAUTHENTICATED, not a complaint about the request');
    t.equal(trailer(none.err, 'error-code'), 'authentication_required');
    t.match(trailer(none.err, 'request-id'), /^req_/);
    t.equal(await grpcCount(anon, 'GET', '/v1/customers/:id/state', 401), before + 1, 'counted under the state route');
    const unknown = await getState({ customerId: '' }, bearer('osk_not_a_key'));
    t.equal(trailer(unknown.err, 'error-code'), 'invalid_credentials');
    const pk = await tenant.admin.post('/v1/api_keys', { kind: 'publishable', name: 'web', allowed_events: ['page.viewed'] }, idem());
    const publishable = await getState({ customerId: '' }, bearer(pk.body.token));
    const httpPublishable = await anon.get('/v1/customers/cust_x/state', { authorization: `Bearer ${pk.body.token}` });
    t.equal(publishable.err?.code, status.PERMISSION_DENIED);
    t.equal(trailer(publishable.err, 'error-code'), httpPublishable.body.error.code, 'a credential the route refuses: its HTTP code');
    const patNoEnv = await getState({ customerId: '' }, bearer(tenant.pat));
    t.equal(trailer(patNoEnv.err, 'error-code'), 'environment_required');
    const missing = await getState({ customerId: '' }, secret());
    t.equal(missing.err?.code, status.INVALID_ARGUMENT, 'an accepted credential: then customer_id is required');
    t.equal(trailer(missing.err, 'error-code'), 'validation_failed');
    t.equal(trailer(missing.err, 'error-param'), 'customer_id');
  });

  await t.test('a body nested too deep: the credential first (as HTTP), one message of a stream, counted under its route', async (t) => {
    const deep = (n: number) => `{"a":${'['.repeat(n)}${']'.repeat(n)}}`;
    const http = await anon.request('POST', '/v1/events', `{"id":"dp-0","name":"a.b","customer_id":"g-deep","occurred_at":"${now()}","properties":${deep(100)}}`);
    t.equal(http.status, 401, 'HTTP checks the credential before the body');
    const unmatched = await grpcCount(anon, 'POST', 'unmatched', 400);
    const routed = await grpcCount(anon, 'POST', '/v1/events', 401);
    for (const n of [100, 200_000]) {
      const none = await ingestBatch({ mode: 0, events: [ev(`dp-${n}`, 'g-deep', { propertiesJson: deep(n) })] }, new Metadata());
      t.equal(none.err?.code, status.UNAUTHENTICATED, `depth ${n}, no credential: UNAUTHENTICATED`);
      t.equal(trailer(none.err, 'error-code'), 'authentication_required');
      const bad = await ingestBatch({ mode: 0, events: [ev(`dp-${n}`, 'g-deep', { propertiesJson: deep(n) })] }, secret());
      t.equal(bad.err?.code, status.INVALID_ARGUMENT, `depth ${n}, a secret key: the body is refused`);
      t.equal(trailer(bad.err, 'error-code'), 'validation_failed');
      t.equal(trailer(bad.err, 'error-param'), 'body');
    }
    t.equal(await grpcCount(anon, 'POST', '/v1/events', 401), routed + 2, 'counted under POST /v1/events');
    t.equal(await grpcCount(anon, 'POST', 'unmatched', 400), unmatched, 'never as an unmatched route');
    const acks = await streamAll(events, secret(), [
      { correlationId: 'deep', event: ev('dp-s1', 'g-deep', { propertiesJson: deep(100) }), mode: 0 },
      { correlationId: 'fine', event: ev('dp-s2', 'g-deep'), mode: 0 },
    ]);
    const by = new Map(acks.map((a) => [a.correlationId, a.result]));
    t.match(by.get('deep'), { error: { code: 'validation_failed', param: 'body' } }, 'a stream acks that message with the error');
    t.match(by.get('fine'), { accepted: { id: /^evt_/ } }, 'and goes on');
  });

  await t.test('error-param and error-details are readable metadata whatever the text (percent-encoded)', async (t) => {
    const props = '{"ü":1e400}';
    const g = await ingestBatch({ mode: 0, events: [ev('na-1', 'g-nonascii', { propertiesJson: props })] }, secret());
    const h = await api.request('POST', '/v1/events', `{"id":"na-1","name":"level.completed","customer_id":"g-nonascii","occurred_at":"${now()}","properties":${props}}`);
    t.equal(h.status, 400);
    t.equal(g.err?.code, status.INVALID_ARGUMENT, 'INVALID_ARGUMENT, as HTTP 400 (not INTERNAL)');
    t.equal(trailer(g.err, 'error-code'), h.body.error.code);
    const param = trailer(g.err, 'error-param') as string;
    t.equal(param, 'events[0].properties_json.%C3%BC', 'percent-encoded UTF-8');
    t.equal(decodeURIComponent(param), 'events[0].properties_json.ü');
    t.same(JSON.parse(decodeURIComponent(trailer(g.err, 'error-details') as string)), [
      { param: 'events[0].properties_json.ü', message: h.body.error.details[0].message },
    ], 'the HTTP details, as JSON, each param named as sent over gRPC');

    // A match report's metrics: NaN (gRPC only), under a non-ASCII name; refused before the profile is read.
    const at = (m: number) => new Date(Date.now() - m * 60_000).toISOString();
    const r = await report({ profile: 'duel', matchId: 'na-m1', startedAt: at(20), endedAt: at(10), players: [{ customer: { externalId: 'g-na-p' }, metrics: { ü: Number.NaN } }] }, secret());
    t.equal(r.err?.code, status.INVALID_ARGUMENT);
    t.equal(trailer(r.err, 'error-code'), 'validation_failed');
    t.equal(decodeURIComponent(trailer(r.err, 'error-param') as string), 'players[0].metrics.ü');

    // Several problems at once: every one of them, as HTTP lists them.
    const bad: ReportRequest = { profile: '', matchId: 'x y', startedAt: 'soon', endedAt: at(10), players: [] };
    const gr = await report(bad, secret());
    // An empty proto3 string is "not sent": HTTP's equivalent leaves profile out.
    const hr = await api.post('/v1/match_results', { match_id: 'x y', started_at: 'soon', ended_at: bad.endedAt, players: [] });
    t.equal(hr.status, 400);
    t.ok(Array.isArray(hr.body.error.details) && hr.body.error.details.length > 1, 'HTTP lists several problems');
    t.equal(trailer(gr.err, 'error-param'), hr.body.error.param);
    t.same(JSON.parse(decodeURIComponent(trailer(gr.err, 'error-details') as string)), hr.body.error.details, 'gRPC: the same details');

    const plain = await ingestBatch({ mode: 0, events: [] }, secret());
    t.equal(trailer(plain.err, 'error-param'), 'events', 'a plain ASCII param is unchanged');
  });

  await t.test('a stream acknowledgement carries Retry-After as retry_after_seconds', async (t) => {
    t.equal((await api.post('/v1/events', { id: 'ra-0', name: 'level.completed', customer_id: 'g-busy', occurred_at: now() })).status, 202);
    // A full mailbox for every customer: the actor answers rate_limited (retry after 1 s).
    const saved = limits.mailboxDepthMax;
    (limits as { mailboxDepthMax: number }).mailboxDepthMax = 0;
    const busy = ev('ra-2', 'g-busy');
    let acks: IngestStreamResponse[];
    let http: Awaited<ReturnType<Client['post']>>;
    try {
      http = await api.post('/v1/events', { id: 'ra-1', name: 'level.completed', customer_id: 'g-busy', occurred_at: now() });
      acks = await streamAll(events, secret(), [{ correlationId: 'busy', event: busy, mode: 0 }]);
    } finally {
      (limits as { mailboxDepthMax: number }).mailboxDepthMax = saved;
    }
    t.equal(http.status, 429);
    t.equal(http.headers.get('retry-after'), '1');
    t.match(acks[0]?.result?.error, { code: 'rate_limited', retryAfterSeconds: 1 }, 'the ack says when to resend');
    const later = await streamAll(events, secret(), [{ correlationId: 'again', event: busy, mode: 0 }]);
    t.match(later[0]?.result, { accepted: { id: /^evt_/, duplicate: false } }, 'resent later: accepted');
    t.equal(later[0]?.result?.error, undefined);
  });

  await t.test('a successful call carries request-id in its trailing metadata, as every HTTP answer does', async (t) => {
    const b = await ingestBatch({ mode: 0, events: [ev('rq-1', 'g-rq')] }, secret());
    t.equal(b.err, null);
    t.match(b.trailers.get('request-id')[0], /^req_/, 'IngestBatch');
    const id = (await api.get('/v1/customers?external_id=g-rq')).body.data[0].id as string;
    const s = await getState({ customerId: id }, secret());
    t.equal(s.err, null);
    t.match(s.trailers.get('request-id')[0], /^req_/, 'GetState');
    const cs = await api.post('/v1/change_sets', { commands: [{ type: 'match_profile.create', key: 'rq', metrics: [{ key: 'kills', minimum: 0, maximum: 50 }] }] }, idem());
    t.equal((await api.post('/v1/change_set_applications', { change_set_id: cs.body.id }, idem())).status, 201);
    const at = (m: number) => new Date(Date.now() - m * 60_000).toISOString();
    const r = await report({ profile: 'rq', matchId: 'rq-1', startedAt: at(20), endedAt: at(10), players: [{ customer: { externalId: 'g-rq' }, metrics: { kills: 2 } }] }, secret());
    t.equal(r.err, null);
    t.match(r.trailers.get('request-id')[0], /^req_/, 'Report');
  });

  await t.test('credential kinds and customer states: the same answers as HTTP', async (t) => {
    await ingestBatch({ mode: 0, events: [ev('ck-1', 'g-own'), ev('ck-2', 'g-other')] }, secret());
    const own = (await api.get('/v1/customers?external_id=g-own')).body.data[0].id as string;
    const other = (await api.get('/v1/customers?external_id=g-other')).body.data[0].id as string;
    const k = await tenant.admin.post('/v1/api_keys', { kind: 'secret', name: 'minter', scopes: ['customer_sessions:write', 'customers:read', 'events:write'] }, idem());
    const minted = await anon.post(`/v1/customers/${own}/client_token`, {}, { authorization: `Bearer ${k.body.token}` });
    t.equal(minted.status, 200);
    const token = minted.body.customer_token as string;
    const asCustomer = anon.with({ authorization: `Bearer ${token}` });

    const mine = await getState({ customerId: own }, bearer(token));
    t.equal(mine.err, null, 'a customer token reads its own state');
    t.same(JSON.parse(mine.res!.stateJson), (await asCustomer.get(`/v1/customers/${own}/state`)).body);
    const theirs = await getState({ customerId: other }, bearer(token));
    t.equal(theirs.err?.code, status.PERMISSION_DENIED);
    t.equal(trailer(theirs.err, 'error-code'), (await asCustomer.get(`/v1/customers/${other}/state`)).body.error.code);
    const send = await ingestBatch({ mode: 0, events: [ev('ck-3', 'g-own')] }, bearer(token));
    const sendHttp = await asCustomer.post('/v1/events', { id: 'ck-3', name: 'level.completed', customer_id: 'g-own', occurred_at: now() });
    t.equal(send.err?.code, status.PERMISSION_DENIED);
    t.equal(trailer(send.err, 'error-code'), sendHttp.body.error.code, 'a customer token sends no events, on either transport');

    // Revoked: the minted customer token dies with its key; the key itself fails a stream.
    t.equal((await tenant.admin.post(`/v1/api_keys/${k.body.id}/revoke`, {}, idem())).status, 200);
    const revoked = await getState({ customerId: own }, bearer(token));
    t.equal(revoked.err?.code, status.UNAUTHENTICATED);
    t.equal(trailer(revoked.err, 'error-code'), (await asCustomer.get(`/v1/customers/${own}/state`)).body.error.code);
    const stream = await streamAll(events, bearer(k.body.token), [{ correlationId: 'r', event: ev('ck-4', 'g-own'), mode: 0 }]).then(
      () => null,
      (e: ServiceError) => e,
    );
    t.equal(stream?.code, status.UNAUTHENTICATED);
    t.equal(trailer(stream, 'error-code'), 'credentials_revoked');

    // A PAT naming an environment it cannot reach: HTTP's answer.
    const foreign = await signUp(anon);
    const wrongEnv = await getState({ customerId: own }, bearer(tenant.pat, { 'x-service-environment': foreign.testEnv }));
    const wrongEnvHttp = await anon.get(`/v1/customers/${own}/state`, { authorization: `Bearer ${tenant.pat}`, 'x-service-environment': foreign.testEnv });
    t.equal(trailer(wrongEnv.err, 'error-code'), wrongEnvHttp.body.error.code);
    t.equal(wrongEnv.err?.code, status.NOT_FOUND);

    // Merged: the merged-away id reads as HTTP reads it; deleted: the same code as HTTP.
    const survivor = (await api.post('/v1/customers', { external_id: 'g-survivor' }, idem())).body.id as string;
    t.equal((await api.post(`/v1/customers/${survivor}/aliases`, { alias: 'g-other' }, idem())).status, 201);
    for (const id of [survivor, other]) {
      const g = await getState({ customerId: id }, secret());
      const h = await api.get(`/v1/customers/${id}/state`);
      if (h.status === 200) t.same(JSON.parse(g.res!.stateJson), h.body, `${id === survivor ? 'survivor' : 'merged'}: the HTTP state`);
      else t.equal(trailer(g.err, 'error-code'), h.body.error.code, `${id === survivor ? 'survivor' : 'merged'}: the HTTP code`);
    }
    t.equal((await api.delete(`/v1/customers/${own}`)).status, 204);
    const gone = await getState({ customerId: own }, secret());
    const goneHttp = await api.get(`/v1/customers/${own}/state`);
    t.equal(trailer(gone.err, 'error-code'), goneHttp.body.error.code, 'a deleted customer: the HTTP code');
  });
});
