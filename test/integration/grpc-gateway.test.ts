// The public gRPC adapter on top of the REAL gateway pipeline (createGateway().invoke) with test
// routes and a fake authenticate: metadata reaches authentication, bodies reach handlers as
// JSON, ApiErrors thrown by handlers come back as gRPC status + error-code/request-id trailers,
// and per-item errors of a batch stay in its results. The real handlers are tested elsewhere.
import { credentials, Metadata, type ServiceError, status } from '@grpc/grpc-js';
import { pino } from 'pino';
import t from 'tap';
import { ApiError } from '../../src/errors/api-error.js';
import { type AnyRoute, route } from '../../src/gateway/route.js';
import { type Authenticate, createGateway } from '../../src/gateway/server.js';
import { CustomersClient, type GetStateResponse } from '../../src/grpc/gen/public/v1/customers.js';
import { EventsClient, type IngestBatchResponse } from '../../src/grpc/gen/public/v1/events.js';
import { MatchesClient, type ReportResponse } from '../../src/grpc/gen/public/v1/matches.js';
import { createPublicGrpcServer } from '../../src/grpc/public-server.js';
import { MemoryIdempotencyStore } from '../../src/persistence/memory/idempotency-store.js';
import type { Principal } from '../../src/tenancy/types.js';

const principal: Principal = {
  kind: 'secret',
  credentialId: 'key_1',
  organizationId: 'org_1',
  environment: { id: 'env_1', name: 'test', runtimeClass: 'test', projectId: 'proj_1', organizationId: 'org_1', timezone: 'UTC' },
  userId: null,
  role: null,
  scopes: new Set(['events:write', 'customers:read']),
  allowedEvents: [],
  allowedOrigins: [],
  customerId: null,
};

const authenticate: Authenticate = (req) => {
  if (req.authorization === undefined) throw new ApiError('authentication_required');
  if (req.authorization !== 'Bearer osk_good') throw new ApiError('invalid_credentials');
  return principal;
};

const isObject = (v: unknown) => typeof v === 'object' && v !== null && !Array.isArray(v);

const routes: AnyRoute[] = [
  route({
    method: 'POST',
    path: '/v1/events',
    summary: 'test events',
    tag: 'test',
    auth: { kind: 'credential', scopes: ['events:write'], allow: ['secret'] },
    responses: { 207: { description: 'batch' } },
    handler: async (ctx) => {
      const events = (ctx.body as { events: Array<Record<string, unknown>> }).events;
      const data = events.map((e, i) =>
        isObject(e.properties)
          ? { id: `evt_${String(e.id)}`, client_event_id: e.id, status: 'accepted', seen: e.properties }
          : {
              client_event_id: e.id,
              ...new ApiError('validation_failed', { param: `events[${i}].properties` }).toBody(ctx.requestId),
            },
      );
      return { status: 207, body: { data } };
    },
  }),
  route({
    method: 'POST',
    path: '/v1/match_results',
    summary: 'test matches',
    tag: 'test',
    auth: { kind: 'credential', scopes: ['events:write'], allow: ['secret'] },
    responses: { 201: { description: 'created' } },
    handler: async (ctx) => {
      const b = ctx.body as { profile: string; match_id: string };
      if (b.profile === 'old') throw new ApiError('match_profile_archived');
      return { status: 201, body: { id: 'mr_1', match_id: b.match_id, status: 'held', replayed: false } };
    },
  }),
  route({
    method: 'GET',
    path: '/v1/customers/:id/state',
    summary: 'test state',
    tag: 'test',
    auth: { kind: 'credential', scopes: ['customers:read'], allow: ['secret'] },
    responses: { 200: { description: 'state' } },
    handler: async (ctx) => {
      if (ctx.params.id === 'cust_missing') throw new ApiError('resource_not_found', { param: 'id' });
      return { status: 200, body: { customer: { id: ctx.params.id }, counters: { wins: 3 } } };
    },
  }),
];

const gateway = createGateway({
  routes,
  authenticate,
  idempotency: new MemoryIdempotencyStore(),
  logger: pino({ level: 'silent' }),
  ready: async () => ({ ok: true, checks: {} }),
});
const api = createPublicGrpcServer(gateway.invoke);
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

function md(token?: string): Metadata {
  const m = new Metadata();
  if (token !== undefined) m.set('authorization', `Bearer ${token}`);
  return m;
}

function settle<T>(run: (cb: (err: ServiceError | null, res: T) => void) => unknown) {
  return new Promise<{ err: ServiceError | null; res: T | undefined }>((resolve) =>
    run((err, res) => resolve({ err, res: err ? undefined : res })),
  );
}

t.test('IngestBatch through the gateway: results in order, per-item errors, integers kept', async (t) => {
  const { err, res } = await settle<IngestBatchResponse>((cb) =>
    events.ingestBatch(
      {
        mode: 0,
        events: [
          { id: 'a', name: 'x.y', customerId: 'p', occurredAt: '2030-01-01T00:00:00Z', propertiesJson: '{"n":7}' },
          { id: 'b', name: 'x.y', customerId: 'p', occurredAt: '2030-01-01T00:00:00Z', propertiesJson: '[1]' },
        ],
      },
      md('osk_good'),
      cb,
    ),
  );
  t.equal(err, null);
  t.equal(res?.results[0]?.accepted?.id, 'evt_a');
  t.equal(res?.results[1]?.error?.code, 'validation_failed');
  t.equal(res?.results[1]?.error?.param, 'events[1].properties_json', 'named as the gRPC field');
  t.equal(res?.results[1]?.clientEventId, 'b');
});

t.test('authentication errors from the real pipeline', async (t) => {
  const none = await settle<IngestBatchResponse>((cb) => events.ingestBatch({ mode: 0, events: [] }, md(), cb));
  t.equal(none.err?.code, status.UNAUTHENTICATED);
  t.same(none.err?.metadata.get('error-code'), ['authentication_required']);
  t.match(String(none.err?.metadata.get('request-id')[0]), /^req_/, 'the gateway request id is reported');

  const bad = await settle<GetStateResponse>((cb) => customers.getState({ customerId: 'cust_1' }, md('osk_nope'), cb));
  t.equal(bad.err?.code, status.UNAUTHENTICATED);
  t.same(bad.err?.metadata.get('error-code'), ['invalid_credentials']);
});

t.test('Report and GetState through the gateway', async (t) => {
  const report = {
    profile: 'ranked',
    matchId: 'm1',
    startedAt: '2030-01-01T00:00:00Z',
    endedAt: '2030-01-01T00:05:00Z',
    players: [{ customer: { externalId: 'p1' }, metrics: { kills: 1 } }],
  };
  const ok = await settle<ReportResponse>((cb) => matches.report(report, md('osk_good'), cb));
  t.equal(ok.res?.id, 'mr_1');
  t.equal(ok.res?.status, 'held');

  const old = await settle<ReportResponse>((cb) => matches.report({ ...report, profile: 'old' }, md('osk_good'), cb));
  t.equal(old.err?.code, status.FAILED_PRECONDITION);
  t.same(old.err?.metadata.get('error-code'), ['match_profile_archived']);
  t.same(old.err?.metadata.get('error-type'), ['conflict']);

  const state = await settle<GetStateResponse>((cb) => customers.getState({ customerId: 'cust_1' }, md('osk_good'), cb));
  t.same(JSON.parse(state.res!.stateJson), { customer: { id: 'cust_1' }, counters: { wins: 3 } });

  const missing = await settle<GetStateResponse>((cb) => customers.getState({ customerId: 'cust_missing' }, md('osk_good'), cb));
  t.equal(missing.err?.code, status.NOT_FOUND);
  t.same(missing.err?.metadata.get('error-param'), ['id']);
});
