// Black-box tests of the public gRPC API (Events, Customers, Matches) against the real service:
// real Redis + PostgreSQL, the real gateway pipeline behind gateway.invoke, a grpc-js client built
// from the generated code. Checks the gRPC answers against what HTTP says about the same data
// (events by id, customer state and export) and the HTTP error codes in trailing metadata.
import { Metadata, type ServiceError, status } from '@grpc/grpc-js';
import t from 'tap';
import type { GetStateRequest, GetStateResponse } from '../../src/grpc/gen/public/v1/customers.js';
import {
  type EventsClient,
  type IngestBatchRequest,
  type IngestBatchResponse,
  IngestMode,
  type IngestStreamRequest,
  type IngestStreamResponse,
} from '../../src/grpc/gen/public/v1/events.js';
import type { ReportRequest, ReportResponse } from '../../src/grpc/gen/public/v1/matches.js';
import { bearer, ev, now, publicClients } from '../helpers/grpc.js';
import { type Client, idem, signUp, startForTest } from '../helpers/service.js';

type Json = Record<string, any>;


function unary<Req, Res>(
  fn: (req: Req, md: Metadata, cb: (err: ServiceError | null, res: Res) => void) => unknown,
  req: Req,
  md: Metadata,
): Promise<{ err: ServiceError | null; res: Res | undefined }> {
  return new Promise((resolve) => fn(req, md, (err, res) => resolve({ err, res: err ? undefined : res })));
}

const trailer = (err: ServiceError | null | undefined, key: string) => err?.metadata.get(key)[0];

async function customerIdOf(api: Client, externalId: string): Promise<string> {
  const list = await api.get(`/v1/customers?external_id=${encodeURIComponent(externalId)}`);
  if (list.status !== 200 || list.body.data.length !== 1) throw new Error(`customer ${externalId}: ${JSON.stringify(list.body)}`);
  return list.body.data[0].id as string;
}

t.test('public gRPC API against the real service', async (t) => {
  const { service, anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  const { events, customers, matches } = publicClients(t, service.publicGrpcPort);
  const ingestBatch = (req: IngestBatchRequest, md: Metadata) =>
    unary<IngestBatchRequest, IngestBatchResponse>(events.ingestBatch.bind(events), req, md);
  const getState = (req: GetStateRequest, md: Metadata) => unary<GetStateRequest, GetStateResponse>(customers.getState.bind(customers), req, md);
  const secret = () => bearer(tenant.secretKey);

  await t.test('IngestBatch: results in request order, evt_ ids found over HTTP, the same batch again is duplicate', async (t) => {
    const batch: IngestBatchRequest = {
      mode: IngestMode.INGEST_MODE_UNSPECIFIED,
      events: [ev('gb-1', 'g-alice'), ev('gb-2', 'g-bob', { name: 'match.won' }), ev('gb-3', 'g-alice', { propertiesJson: '' })],
    };
    const first = await ingestBatch(batch, secret());
    t.equal(first.err, null);
    const r = first.res!.results;
    t.equal(r.length, 3);
    t.same(
      r.map((x) => x.clientEventId),
      ['gb-1', 'gb-2', 'gb-3'],
      'one result per event, in request order',
    );
    for (const [i, x] of r.entries()) {
      t.match(x.accepted, { id: /^evt_/, clientEventId: `gb-${i + 1}`, status: 'accepted', duplicate: false, fallback: false });
      t.equal(x.error, undefined);
      const got = await api.get(`/v1/events/${x.accepted!.id}`);
      t.equal(got.status, 200, `GET /v1/events/${x.accepted!.id}`);
      t.match(got.body, { id: x.accepted!.id, client_event_id: `gb-${i + 1}`, name: batch.events[i]!.name });
    }

    const again = await ingestBatch(batch, secret());
    t.equal(again.err, null);
    t.same(
      again.res!.results.map((x) => [x.accepted?.id, x.accepted?.duplicate]),
      r.map((x) => [x.accepted!.id, true]),
      'the same batch again: the same ids, duplicate: true',
    );

    // The same answer as HTTP gives for one of those events.
    const http = await api.post('/v1/events', {
      id: 'gb-2',
      name: 'match.won',
      customer_id: 'g-bob',
      occurred_at: batch.events[1]!.occurredAt,
      properties: { level: 3 },
    });
    t.equal(http.status, 202);
    t.match(http.body, { id: r[1]!.accepted!.id, duplicate: true });

    const conflict = await ingestBatch({ mode: 0, events: [ev('gb-1', 'g-alice', { propertiesJson: '{"level":4}' })] }, secret());
    t.match(conflict.res?.results[0]?.error, { code: 'event_id_conflict', type: 'conflict' }, 'different content: event_id_conflict');
  });

  await t.test('IngestBatch: per-item errors while the other items succeed', async (t) => {
    const future = new Date(Date.now() + 3600_000).toISOString();
    const { err, res } = await ingestBatch(
      {
        mode: 0,
        events: [
          ev('pe-1', 'g-carol'),
          ev('pe-2', 'g-carol', { name: 'Not Valid' }),
          ev('pe-3', 'g-dave', { occurredAt: future }),
          ev('pe-4', 'g-dave', { propertiesJson: '{not json' }),
          ev('pe-5', 'g-erin'),
        ],
      },
      secret(),
    );
    t.equal(err, null);
    const r = res!.results;
    t.equal(r.length, 5);
    t.match(r[0], { clientEventId: 'pe-1', accepted: { id: /^evt_/ } });
    t.match(r[1], { clientEventId: 'pe-2', error: { code: 'validation_failed', type: 'invalid_request', param: 'events[1].name' } });
    t.equal(r[1]!.accepted, undefined);
    t.match(r[2], { clientEventId: 'pe-3', error: { code: 'occurred_at_in_future', param: 'events[2].occurred_at' } });
    t.match(r[3], {
      clientEventId: 'pe-4',
      error: { code: 'validation_failed', param: 'events[3].properties_json', message: 'properties_json is not valid JSON.' },
    });
    t.match(r[4], { clientEventId: 'pe-5', accepted: { id: /^evt_/ } });
    // Nothing of the failed items was journaled: carol has only pe-1.
    const carol = await api.get(`/v1/customers/${await customerIdOf(api, 'g-carol')}/export`);
    t.same(
      carol.body.events.map((e: Json) => e.id),
      [r[0]!.accepted!.id],
    );
    // g-dave's only events failed: no customer was created.
    t.equal((await api.get('/v1/customers?external_id=g-dave')).body.data.length, 0);
  });

  await t.test('IngestBatch: call-level errors are gRPC status codes with the HTTP code in trailers', async (t) => {
    const many = Array.from({ length: 101 }, (_, i) => ev(`big-${i}`, 'g-many'));
    const tooMany = await ingestBatch({ mode: 0, events: many }, secret());
    t.equal(tooMany.err?.code, status.INVALID_ARGUMENT);
    t.equal(trailer(tooMany.err, 'error-code'), 'batch_too_large');
    t.equal(trailer(tooMany.err, 'error-param'), 'events');
    t.match(trailer(tooMany.err, 'request-id'), /^req_/);
    t.equal((await api.get('/v1/customers?external_id=g-many')).body.data.length, 0, 'nothing of it was journaled');

    const hundred = await ingestBatch({ mode: 0, events: many.slice(0, 100) }, secret());
    t.equal(hundred.err, null, '100 events are accepted');
    t.equal(hundred.res?.results.filter((x) => x.accepted).length, 100);

    const empty = await ingestBatch({ mode: 0, events: [] }, secret());
    t.equal(empty.err?.code, status.INVALID_ARGUMENT);
    t.equal(trailer(empty.err, 'error-code'), 'validation_failed');

    const none = await ingestBatch({ mode: 0, events: [ev('na-1', 'g-x')] }, new Metadata());
    t.equal(none.err?.code, status.UNAUTHENTICATED);
    t.equal(trailer(none.err, 'error-code'), 'authentication_required');
    t.equal(trailer(none.err, 'error-type'), 'authentication');

    const bad = await ingestBatch({ mode: 0, events: [ev('na-2', 'g-x')] }, bearer('osk_nope'));
    t.equal(bad.err?.code, status.UNAUTHENTICATED);
    t.equal(trailer(bad.err, 'error-code'), 'invalid_credentials');

    const notBearer = await ingestBatch({ mode: 0, events: [ev('na-3', 'g-x')] }, (() => {
      const md = new Metadata();
      md.set('authorization', tenant.secretKey);
      return md;
    })());
    t.equal(notBearer.err?.code, status.UNAUTHENTICATED);
    const httpNotBearer = await anon.post('/v1/events', { id: 'na-3', name: 'a.b', customer_id: 'g-x', occurred_at: now() }, { authorization: tenant.secretKey });
    t.equal(trailer(notBearer.err, 'error-code'), httpNotBearer.body.error.code, 'the same code as HTTP for a non-Bearer authorization');

    // A PAT needs x-service-environment, as over HTTP (403 environment_required).
    const patNoEnv = await ingestBatch({ mode: 0, events: [ev('na-4', 'g-x')] }, bearer(tenant.pat));
    t.equal(patNoEnv.err?.code, status.PERMISSION_DENIED);
    t.equal(trailer(patNoEnv.err, 'error-code'), 'environment_required');
    const patEnv = await ingestBatch({ mode: 0, events: [ev('na-5', 'g-pat')] }, bearer(tenant.pat, { 'x-service-environment': tenant.testEnv }));
    t.equal(patEnv.err, null);
    t.match(patEnv.res?.results[0], { accepted: { id: /^evt_/ } });
  });

  await t.test('a publishable key: allowed events pass, others are refused (batch item and stream ack)', async (t) => {
    const k = await tenant.admin.post(
      '/v1/api_keys',
      { kind: 'publishable', name: 'web', allowed_events: ['page.viewed'], allowed_origins: ['https://game.example'] },
      idem(),
    );
    t.equal(k.status, 201);
    const md = () => bearer(k.body.token, { origin: 'https://game.example' });
    const { err, res } = await ingestBatch(
      { mode: 0, events: [ev('pk-1', 'g-web', { name: 'page.viewed' }), ev('pk-2', 'g-web', { name: 'level.completed' })] },
      md(),
    );
    t.equal(err, null);
    t.match(res!.results[0], { accepted: { id: /^evt_/ } });
    t.match(res!.results[1], { clientEventId: 'pk-2', error: { code: 'event_requires_secret_key', param: 'events[1].name' } });

    const badOrigin = await ingestBatch({ mode: 0, events: [ev('pk-3', 'g-web', { name: 'page.viewed' })] }, bearer(k.body.token, { origin: 'https://evil.example' }));
    t.equal(badOrigin.err?.code, status.PERMISSION_DENIED);
    t.equal(trailer(badOrigin.err, 'error-code'), 'origin_not_allowed');

    // One event on the stream: the refusal is the ack's error (HTTP: 403 event_requires_secret_key).
    const acks = await streamAll(events, md(), [{ correlationId: 'c-1', event: ev('pk-4', 'g-web'), mode: 0 }]);
    t.equal(acks.length, 1);
    t.match(acks[0], { correlationId: 'c-1', result: { clientEventId: 'pk-4', error: { code: 'event_requires_secret_key', param: 'name' } } });
    const http = await anon.post(
      '/v1/events',
      { id: 'pk-4', name: 'level.completed', customer_id: 'g-web', occurred_at: now() },
      { authorization: `Bearer ${k.body.token}`, origin: 'https://game.example' },
    );
    t.equal(http.status, 403);
    t.equal(http.body.error.code, 'event_requires_secret_key');

    // A publishable key may not read state.
    const id = await customerIdOf(api, 'g-web');
    const read = await getState({ customerId: id }, md());
    t.equal(read.err?.code, status.PERMISSION_DENIED);
    const httpRead = await anon.get(`/v1/customers/${id}/state`, { authorization: `Bearer ${k.body.token}`, origin: 'https://game.example' });
    t.equal(trailer(read.err, 'error-code'), httpRead.body.error.code, 'the same code as HTTP');
  });

  await t.test('IngestStream: 50 messages for 5 customers, one ack each, per-customer order kept, recorded once', async (t) => {
    const customersN = 5;
    const perCustomer = 10;
    const msgs: IngestStreamRequest[] = [];
    for (let i = 0; i < customersN * perCustomer; i++) {
      const c = i % customersN;
      const seq = Math.floor(i / customersN);
      msgs.push({
        correlationId: `corr-${i}`,
        event: ev(`st-${c}-${seq}`, `g-stream-${c}`, { name: 'round.played', propertiesJson: JSON.stringify({ seq }) }),
        mode: 0,
      });
    }
    const acks = await streamAll(events, secret(), msgs);
    t.equal(acks.length, 50, 'one ack per message');
    const byCorr = new Map(acks.map((a) => [a.correlationId, a]));
    t.equal(byCorr.size, 50, 'every correlation id exactly once');
    for (const [i, m] of msgs.entries()) {
      const a = byCorr.get(`corr-${i}`);
      t.match(a?.result, { clientEventId: m.event!.id, accepted: { id: /^evt_/, clientEventId: m.event!.id, duplicate: false } }, `ack of corr-${i}`);
    }
    // Acks of one customer arrive in the order its events were sent.
    for (let c = 0; c < customersN; c++) {
      const order = acks.filter((a) => a.result?.clientEventId.startsWith(`st-${c}-`)).map((a) => a.result!.clientEventId);
      t.same(
        order,
        Array.from({ length: perCustomer }, (_, s) => `st-${c}-${s}`),
        `customer ${c}: acks in send order`,
      );
    }
    // The customer export: all 10 events of each customer, once, received in send order.
    for (let c = 0; c < customersN; c++) {
      const id = await customerIdOf(api, `g-stream-${c}`);
      const ex = await api.get(`/v1/customers/${id}/export`);
      t.equal(ex.status, 200);
      const evs = ex.body.events as Json[];
      t.equal(evs.length, perCustomer, `customer ${c}: ${perCustomer} events recorded`);
      const ackIds = acks.filter((a) => a.result?.clientEventId.startsWith(`st-${c}-`)).map((a) => a.result!.accepted!.id);
      t.same(new Set(evs.map((e) => e.id)), new Set(ackIds), `customer ${c}: the acknowledged ids, each once`);
      const bySeq = [...evs].sort((a, b) => a.properties.seq - b.properties.seq);
      t.same(
        bySeq.map((e) => e.properties.seq),
        Array.from({ length: perCustomer }, (_, s) => s),
      );
      for (let s = 1; s < perCustomer; s++) {
        t.ok(Date.parse(bySeq[s]!.received_at) >= Date.parse(bySeq[s - 1]!.received_at), `customer ${c}: seq ${s} received after ${s - 1}`);
      }
    }

    // The same 50 again: every ack says duplicate with the first id, nothing recorded twice.
    const again = await streamAll(events, secret(), msgs);
    t.equal(again.length, 50);
    const firstIds = new Map(acks.map((a) => [a.correlationId, a.result?.accepted?.id]));
    t.ok(
      again.every((a) => a.result?.accepted?.duplicate === true && a.result.accepted.id === firstIds.get(a.correlationId)),
      'resending the stream: duplicate: true with the same ids',
    );
    const id0 = await customerIdOf(api, 'g-stream-0');
    t.equal((await api.get(`/v1/customers/${id0}/export`)).body.events.length, perCustomer);
  });

  await t.test('IngestStream: more customers than the in-flight bound (reading pauses, then resumes)', async (t) => {
    const n = 300;
    const msgs: IngestStreamRequest[] = Array.from({ length: n }, (_, i) => ({
      correlationId: `w-${i}`,
      event: ev(`sw-${i}`, `g-wide-${i % 150}`, { propertiesJson: JSON.stringify({ i }) }),
      mode: 0,
    }));
    const acks = await streamAll(events, secret(), msgs);
    t.equal(acks.length, n, 'one ack per message');
    t.equal(new Set(acks.map((a) => a.correlationId)).size, n, 'every correlation id once');
    t.equal(acks.filter((a) => a.result?.accepted?.id.startsWith('evt_')).length, n, 'all accepted');
    const id = await customerIdOf(api, 'g-wide-7');
    t.equal((await api.get(`/v1/customers/${id}/export`)).body.events.length, 2);
  });

  await t.test('IngestStream: a client that stops reading its acks stops being read; when it reads, all are acked once, in order', async (t) => {
    // Acks of ~540 bytes (the 240-character event id twice): the client library and the HTTP/2
    // windows (64 KiB) take in ~150 of them, the server holds at most 64 more; then it stops
    // reading, so nothing else runs and nothing piles up in its memory.
    const n = 1500;
    const customersN = 3;
    const idOf = (i: number) => `bp-${String(i).padStart(5, '0')}-${'y'.repeat(230)}`;
    const journaled = async () => {
      let sum = 0;
      for (let c = 0; c < customersN; c++) {
        const list = await api.get(`/v1/customers?external_id=g-bp-${c}`);
        const id = list.body.data?.[0]?.id as string | undefined;
        if (id !== undefined) sum += ((await api.get(`/v1/customers/${id}/export`)).body.events as Json[]).length;
      }
      return sum;
    };
    const call = events.ingestStream(secret());
    const acks: IngestStreamResponse[] = [];
    const ended = new Promise<void>((resolve, reject) => {
      call.on('end', resolve);
      call.on('error', reject);
    });
    call.on('data', (a: IngestStreamResponse) => acks.push(a));
    call.pause(); // reads no ack until resumed
    let i = 0;
    const pump = () => {
      while (i < n) {
        const ok = call.write({ correlationId: `bp-${i}`, event: ev(idOf(i), `g-bp-${i % customersN}`, { propertiesJson: JSON.stringify({ i }) }), mode: 0 });
        i++;
        if (!ok) return void call.once('drain', pump);
      }
      call.end();
    };
    pump();
    // Until the count of journaled events stops moving (1.5 s without a change).
    let count = await journaled();
    for (let quiet = 0, tries = 0; quiet < 6 && tries < 120; tries++) {
      await new Promise((r) => setTimeout(r, 250));
      const now = await journaled();
      quiet = now === count ? quiet + 1 : 0;
      count = now;
    }
    t.equal(acks.length, 0, 'the client read nothing');
    t.ok(count < 500, `the server stopped reading: ${count} of ${n} events journaled`);

    call.resume();
    await ended;
    t.equal(acks.length, n, 'once the client reads, every message is acknowledged');
    t.equal(new Set(acks.map((a) => a.correlationId)).size, n, 'each once');
    t.equal(acks.filter((a) => a.result?.accepted?.id.startsWith('evt_') && !a.result.accepted.duplicate).length, n, 'all accepted, none a duplicate');
    for (let c = 0; c < customersN; c++) {
      const sent = Array.from({ length: n }, (_, k) => k).filter((k) => k % customersN === c);
      const mine = acks.filter((a) => Number(a.correlationId.slice(3)) % customersN === c);
      t.same(
        mine.map((a) => a.result?.clientEventId),
        sent.map(idOf),
        `customer ${c}: acks in send order`,
      );
      const id = await customerIdOf(api, `g-bp-${c}`);
      const evs = (await api.get(`/v1/customers/${id}/export`)).body.events as Json[];
      t.equal(evs.length, sent.length, `customer ${c}: every event journaled once`);
      t.same(new Set(evs.map((e) => e.id)), new Set(mine.map((a) => a.result?.accepted?.id)), `customer ${c}: the acknowledged ids`);
    }
  });

  await t.test('IngestBatch: size limits as over HTTP (body_too_large, event_too_large per item)', async (t) => {
    const blob = 'x'.repeat(12_000);
    const big = Array.from({ length: 100 }, (_, i) => ev(`sz-${i}`, 'g-size', { propertiesJson: JSON.stringify({ blob }) }));
    const tooBig = await ingestBatch({ mode: 0, events: big }, secret());
    t.equal(tooBig.err?.code, status.INVALID_ARGUMENT);
    t.equal(trailer(tooBig.err, 'error-code'), 'body_too_large');
    const one = await ingestBatch(
      { mode: 0, events: [ev('sz-a', 'g-size'), ev('sz-b', 'g-size', { propertiesJson: JSON.stringify({ blob: 'x'.repeat(40_000) }) })] },
      secret(),
    );
    t.equal(one.err, null);
    t.match(one.res?.results[0], { accepted: { id: /^evt_/ } });
    t.match(one.res?.results[1], { clientEventId: 'sz-b', error: { code: 'event_too_large' } });
    const acks = await streamAll(events, secret(), [
      { correlationId: 's', event: ev('sz-c', 'g-size', { propertiesJson: JSON.stringify({ blob: 'x'.repeat(40_000) }) }), mode: 0 },
    ]);
    t.match(acks[0]?.result?.error, { code: 'event_too_large' });
  });

  await t.test('IngestBatch: sync mode evaluates before answering', async (t) => {
    const { err, res } = await ingestBatch({ mode: IngestMode.INGEST_MODE_SYNC, events: [ev('sy-1', 'g-sync')] }, secret());
    t.equal(err, null);
    const a = res!.results[0]!.accepted!;
    t.ok(a.status === 'evaluated' || a.fallback, 'evaluated, or fallback');
    if (a.status === 'evaluated') t.same(JSON.parse(a.effectsJson), [], 'no rules yet: no effects');
    const http = await api.post('/v1/events', { id: 'sy-2', name: 'level.completed', customer_id: 'g-sync', occurred_at: now(), mode: 'sync' });
    t.equal(http.status, 200);
    t.same(http.body.effects, [], 'HTTP: the same effects');
  });

  await t.test('IngestStream: an empty stream ends OK; a cancelled one leaves the service serving', async (t) => {
    t.same(await streamAll(events, secret(), []), [], 'no messages, no acks, status OK');
    const acked = await new Promise<IngestStreamResponse[]>((resolve) => {
      const call = events.ingestStream(secret());
      const got: IngestStreamResponse[] = [];
      call.on('data', (a: IngestStreamResponse) => {
        got.push(a);
        if (got.length === 1) call.cancel();
      });
      call.on('error', (e: ServiceError) => {
        t.equal(e.code, status.CANCELLED);
        resolve(got);
      });
      call.on('end', () => resolve(got));
      for (let i = 0; i < 20; i++) call.write({ correlationId: `k-${i}`, event: ev(`sk-${i}`, 'g-cancel'), mode: 0 });
    });
    t.ok(acked.length >= 1);
    const after = await streamAll(events, secret(), [{ correlationId: 'after', event: ev('sk-after', 'g-cancel'), mode: 0 }]);
    t.match(after, [{ correlationId: 'after', result: { accepted: { id: /^evt_/ } } }]);
    const id = await customerIdOf(api, 'g-cancel');
    const ids = new Set(((await api.get(`/v1/customers/${id}/export`)).body.events as Json[]).map((e) => e.id));
    for (const a of acked) t.ok(ids.has(a.result!.accepted!.id), `acknowledged ${a.correlationId} is recorded`);
  });

  await t.test('IngestStream: failed items are acked with errors; a refused credential fails the call', async (t) => {
    const acks = await streamAll(events, secret(), [
      { correlationId: 'x-1', event: ev('sx-1', 'g-sx', { name: 'Bad Name' }), mode: 0 },
      { correlationId: 'x-2', event: ev('sx-2', 'g-sx', { occurredAt: new Date(Date.now() + 3600_000).toISOString() }), mode: 0 },
      { correlationId: 'x-3', event: ev('sx-3', 'g-sx'), mode: IngestMode.INGEST_MODE_SYNC },
    ]);
    t.equal(acks.length, 3);
    const by = new Map(acks.map((a) => [a.correlationId, a.result]));
    t.match(by.get('x-1'), { clientEventId: 'sx-1', error: { code: 'validation_failed', param: 'name' } });
    t.match(by.get('x-2'), { clientEventId: 'sx-2', error: { code: 'occurred_at_in_future', param: 'occurred_at' } });
    t.match(by.get('x-3'), { clientEventId: 'sx-3', accepted: { id: /^evt_/ } });
    const sync = by.get('x-3')!.accepted!;
    t.ok(sync.status === 'evaluated' || sync.fallback, 'sync mode: evaluated, or fallback');

    // A refused credential fails the call itself (as HTTP answers 401), not each message.
    for (const [md, code] of [
      [new Metadata(), 'authentication_required'],
      [bearer('osk_not_a_key'), 'invalid_credentials'],
    ] as const) {
      const failed = await streamAll(
        events,
        md,
        Array.from({ length: 200 }, (_, i) => ({ correlationId: `u-${i}`, event: ev(`su-${code}-${i}`, `g-su-${i % 7}`), mode: 0 })),
      ).then(
        () => null,
        (e: ServiceError) => e,
      );
      t.equal(failed?.code, status.UNAUTHENTICATED, code);
      t.equal(trailer(failed, 'error-code'), code);
      t.match(trailer(failed, 'request-id'), /^req_/);
    }
    t.equal((await api.get('/v1/customers?external_id=g-su-0')).body.data.length, 0, 'nothing was recorded');
  });

  await t.test('properties_json: large integers and nested objects round-trip exactly', async (t) => {
    const props = '{"max":9007199254740991,"min":-9007199254740991,"neg":-42,"f":2.5,"nested":{"a":[1,{"b":null,"c":true}],"s":"é\\"x"},"empty":{}}';
    const { res } = await ingestBatch({ mode: 0, events: [ev('pj-1', 'g-props', { propertiesJson: props })] }, secret());
    const id = res!.results[0]!.accepted!.id;
    const got = await api.get(`/v1/events/${id}`);
    t.equal(got.status, 200);
    t.same(got.body.properties, JSON.parse(props), 'batch: the same values, exactly');
    const acks = await streamAll(events, secret(), [{ correlationId: 'p', event: ev('pj-2', 'g-props', { propertiesJson: props }), mode: 0 }]);
    const got2 = await api.get(`/v1/events/${acks[0]!.result!.accepted!.id}`);
    t.same(got2.body.properties, JSON.parse(props), 'stream: the same values, exactly');
    // Stored as HTTP stores it (jsonb key order, non-ASCII text): the same JSON text.
    const mixed = '{"z":1,"a":{"y":[2,3],"b":"Zo\\u00eb \\ud83c\\udfc6"}}';
    const viaGrpc = await ingestBatch({ mode: 0, events: [ev('pj-6', 'g-props', { propertiesJson: mixed })] }, secret());
    const viaHttp = await api.request('POST', '/v1/events', `{"id":"pj-7","name":"level.completed","customer_id":"g-props","occurred_at":"${now()}","properties":${mixed}}`);
    t.equal(viaHttp.status, 202);
    const textOf = async (eventId: string) => JSON.stringify((await api.get(`/v1/events/${eventId}`)).body.properties);
    t.equal(await textOf(viaGrpc.res!.results[0]!.accepted!.id), await textOf(viaHttp.body.id), 'the same stored JSON as over HTTP');
    // Text PostgreSQL cannot store is refused on both transports, named at properties_json.
    const withNul = '{"a":{"b":"x\\u0000y"}}';
    // A body the gateway refuses whole (like invalid JSON) fails the whole call.
    const nulGrpc = await ingestBatch({ mode: 0, events: [ev('pj-8', 'g-props', { propertiesJson: withNul })] }, secret());
    t.equal(nulGrpc.err?.code, status.INVALID_ARGUMENT);
    t.equal(trailer(nulGrpc.err, 'error-code'), 'validation_failed');
    const nulHttp = await api.request('POST', '/v1/events', `{"id":"pj-9","name":"level.completed","customer_id":"g-props","occurred_at":"${now()}","properties":${withNul}}`);
    t.match([nulHttp.status, nulHttp.body.error?.param], [400, 'properties.a.b']);
    // So is a number JSON cannot carry back (1e400 parses as Infinity), through the same check.
    const infGrpc = await ingestBatch({ mode: 0, events: [ev('pj-10', 'g-props'), ev('pj-11', 'g-props', { propertiesJson: '{"x":1e400}' })] }, secret());
    t.equal(infGrpc.err?.code, status.INVALID_ARGUMENT);
    t.equal(trailer(infGrpc.err, 'error-code'), 'validation_failed');
    t.equal(trailer(infGrpc.err, 'error-param'), 'events[1].properties_json.x');
    t.match(JSON.parse(String(trailer(infGrpc.err, 'error-details') ?? 'null')), [{ param: 'events[1].properties_json.x' }], 'details name the field as sent too');
    const infAcks = await streamAll(events, secret(), [{ correlationId: 'inf', event: ev('pj-12', 'g-props', { propertiesJson: '{"a":[-1e400]}' }), mode: 0 }]);
    t.match(infAcks[0]?.result?.error, { code: 'validation_failed', param: 'properties_json.a[0]' }, 'a stream message too');
    t.match(JSON.parse(infAcks[0]?.result?.error?.detailsJson ?? 'null'), [{ param: 'properties_json.a[0]' }], "and its details_json");
    t.equal((await ingestBatch({ mode: 0, events: [ev('pj-11', 'g-props', { propertiesJson: '{"x":1}' })] }, secret())).res?.results[0]?.accepted?.duplicate, false, 'nothing was recorded');

    // Beyond 2^53 JSON numbers are doubles on both transports: gRPC keeps what HTTP keeps.
    const huge = '{"n":123456789012345678901}';
    const g = await ingestBatch({ mode: 0, events: [ev('pj-3', 'g-props', { propertiesJson: huge })] }, secret());
    const h = await api.request('POST', '/v1/events', `{"id":"pj-4","name":"level.completed","customer_id":"g-props","occurred_at":"${now()}","properties":${huge}}`);
    t.equal(h.status, 202);
    const gp = (await api.get(`/v1/events/${g.res!.results[0]!.accepted!.id}`)).body.properties;
    const hp = (await api.get(`/v1/events/${h.body.id}`)).body.properties;
    t.same(gp, hp, 'the same value as over HTTP');

    const notObject = await ingestBatch({ mode: 0, events: [ev('pj-5', 'g-props', { propertiesJson: '[1,2]' })] }, secret());
    t.match(notObject.res?.results[0]?.error, { code: 'validation_failed', param: /^events\[0\]\.properties_json/ });
  });

  await t.test('Customers.GetState: the HTTP state view; another tenant\'s id is NOT_FOUND', async (t) => {
    await ingestBatch({ mode: 0, events: [ev('gs-1', 'g-state', { name: 'match.won', propertiesJson: '{"kills":3}' })] }, secret());
    const id = await customerIdOf(api, 'g-state');
    const { err, res } = await getState({ customerId: id }, secret());
    t.equal(err, null);
    const state = JSON.parse(res!.stateJson) as Json;
    const http = await api.get(`/v1/customers/${id}/state`);
    t.equal(http.status, 200);
    t.same(state, http.body, 'state_json is the HTTP body');
    t.match(state, { customer: { id, external_id: 'g-state' }, balances: [], tiers: [], segments: [], aliases: [] });

    const viaPat = await getState({ customerId: id }, bearer(tenant.pat, { 'x-service-environment': tenant.testEnv }));
    t.equal(viaPat.err, null);
    t.same(JSON.parse(viaPat.res!.stateJson), http.body, 'a PAT with x-service-environment reads the same');

    const other = await signUp(anon);
    const foreign = await getState({ customerId: id }, bearer(other.secretKey));
    t.equal(foreign.err?.code, status.NOT_FOUND);
    t.equal(trailer(foreign.err, 'error-code'), 'resource_not_found');
    const foreignHttp = await other.server.get(`/v1/customers/${id}/state`);
    t.equal(foreignHttp.status, 404);
    t.equal(foreignHttp.body.error.code, 'resource_not_found');

    const liveEnv = await getState({ customerId: id }, bearer(tenant.pat, { 'x-service-environment': tenant.liveEnv }));
    t.equal(liveEnv.err?.code, status.NOT_FOUND, 'the same tenant, the other environment: not found');
    t.equal(trailer(liveEnv.err, 'error-code'), 'resource_not_found');

    const unknown = await getState({ customerId: 'cust_000000000000000000000000000000' }, secret());
    t.equal(unknown.err?.code, status.NOT_FOUND);
    t.equal(trailer(unknown.err, 'error-code'), 'resource_not_found');

    const weird = await getState({ customerId: '../events' }, secret());
    t.equal(weird.err?.code, status.NOT_FOUND, 'a path-like id stays one path segment');
    t.equal(trailer(weird.err, 'error-code'), 'resource_not_found');

    const missing = await getState({ customerId: '' }, secret());
    t.equal(missing.err?.code, status.INVALID_ARGUMENT);
    t.equal(trailer(missing.err, 'error-code'), 'validation_failed');
    t.equal(trailer(missing.err, 'error-param'), 'customer_id');

    const noAuth = await getState({ customerId: id }, new Metadata());
    t.equal(noAuth.err?.code, status.UNAUTHENTICATED);
    t.equal(trailer(noAuth.err, 'error-code'), 'authentication_required');
  });

  await t.test('Matches.Report goes through the same path as POST /v1/match_results', async (t) => {
    const cs = await api.post(
      '/v1/change_sets',
      { commands: [{ type: 'match_profile.create', key: 'ranked', metrics: [{ key: 'kills', minimum: 0, maximum: 50 }], outliers: { action: 'hold', hold_metrics: [{ key: 'kills', above: 40 }] } }] },
      idem(),
    );
    t.equal((await api.post('/v1/change_set_applications', { change_set_id: cs.body.id }, idem())).status, 201);
    const req: ReportRequest = {
      profile: 'ranked',
      matchId: 'm-1',
      startedAt: new Date(Date.now() - 20 * 60_000).toISOString(),
      endedAt: new Date(Date.now() - 10 * 60_000).toISOString(),
      players: [
        { customer: { externalId: 'g-m1' }, metrics: { kills: 3 }, won: true },
        { customer: { externalId: 'g-m2' }, metrics: { kills: 45 } },
      ],
    };
    const report = (r: ReportRequest, md: Metadata) => unary<ReportRequest, ReportResponse>(matches.report.bind(matches), r, md);
    const first = await report(req, secret());
    t.equal(first.err, null);
    t.match(first.res, { id: /^mr_/, status: 'held', replayed: false });
    const result = JSON.parse(first.res!.resultJson) as Json;
    t.match(result.players, [{ status: 'admitted', won: true, event_id: /^evt_/ }, { status: 'held', won: null, reasons: [{ code: 'outlier' }] }]);
    const http = await api.get('/v1/match_results/m-1');
    t.equal(http.body.id, first.res!.id, 'the same record over HTTP');
    const again = await report(req, secret());
    t.match(again.res, { id: first.res!.id, replayed: true });
    const httpAgain = await api.post('/v1/match_results', {
      profile: 'ranked',
      match_id: 'm-1',
      started_at: req.startedAt,
      ended_at: req.endedAt,
      players: [
        { customer: { external_id: 'g-m1' }, metrics: { kills: 3 }, won: true },
        { customer: { external_id: 'g-m2' }, metrics: { kills: 45 } },
      ],
    });
    t.equal(httpAgain.status, 200, 'an identical HTTP report is a replay of the gRPC one');
    t.equal(httpAgain.body.replayed, true);
    const changed = await report({ ...req, players: [{ ...req.players[0]!, won: false }, req.players[1]!] }, secret());
    t.equal(trailer(changed.err, 'error-code'), 'idempotency_key_reused');
    const pk = await tenant.admin.post('/v1/api_keys', { kind: 'publishable', name: 'web', allowed_events: ['match.completed'] }, idem());
    const refused = await report({ ...req, matchId: 'm-2' }, bearer(pk.body.token));
    t.equal(refused.err?.code, status.PERMISSION_DENIED);
    t.equal(trailer(refused.err, 'error-code'), 'event_requires_secret_key');
    const invalid = await report({ ...req, matchId: 'm-3', players: [] }, secret());
    t.equal(trailer(invalid.err, 'error-code'), 'validation_failed');
    t.match(trailer(invalid.err, 'request-id'), /^req_/);
  });
});

/** Writes every message, half-closes, and collects every ack until the server ends the call. */
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
