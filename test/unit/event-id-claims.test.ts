// The events handler's environment-wide id claims: claims made in one round of the event loop go
// to storage as one call per environment, answers reach each caller in order, a storage failure
// fails every waiting caller, and the handler refuses an id bound to other content before the
// customer's actor sees the event.
import t from 'tap';
import type { Engine } from '../../src/actors/engine.js';
import type { CallResult } from '../../src/actors/partition.js';
import { ApiError } from '../../src/errors/api-error.js';
import { EventIdClaims } from '../../src/gateway/event-id-claims.js';
import { eventRoutes } from '../../src/gateway/handlers/events.js';
import type { RequestContext } from '../../src/gateway/route.js';
import { MemoryEventIds } from '../../src/persistence/memory/event-ids.js';
import type { EventIds } from '../../src/persistence/ports.js';
import { eventFingerprint } from '../../src/domain/event-fingerprint.js';
import { hash53 } from '../../src/util/canonical-json.js';

/** A store that records each call and answers through the memory twin (or fails). */
function recording(fail = false): EventIds & { calls: Array<{ env: string; ids: string[] }> } {
  const inner = new MemoryEventIds();
  const calls: Array<{ env: string; ids: string[] }> = [];
  return {
    calls,
    claim: async (env, items) => {
      calls.push({ env, ids: items.map((i) => i.id) });
      if (fail) throw new Error('redis is down');
      return inner.claim(env, items);
    },
    erase: (env, records) => inner.erase(env, records),
  };
}

t.test('claims of one round go to storage once per environment, answered in order', async (t) => {
  const store = recording();
  const claims = new EventIdClaims(store);
  const answers = await Promise.all([
    claims.claim('env_a', 'e1', 1),
    claims.claim('env_b', 'e1', 2),
    claims.claim('env_a', 'e2', 3),
    claims.claim('env_a', 'e1', 4),
  ]);
  t.same(answers, [1, 2, 3, 1], 'each caller gets the fingerprint its id is bound to');
  t.same(store.calls, [
    { env: 'env_a', ids: ['e1', 'e2', 'e1'] },
    { env: 'env_b', ids: ['e1'] },
  ]);
  t.same(await claims.claim('env_a', 'e2', 9), 3, 'a later round sees the earlier binding');
  t.equal(store.calls.length, 3);
});

t.test('a storage failure rejects every claim of the round', async (t) => {
  const claims = new EventIdClaims(recording(true));
  const settled = await Promise.allSettled([claims.claim('env_a', 'e1', 1), claims.claim('env_a', 'e2', 2)]);
  t.same(
    settled.map((s) => s.status),
    ['rejected', 'rejected'],
  );
});

type Handler = (c: RequestContext) => Promise<{ status: number; body: Record<string, unknown> }>;

function eventsPost(store: EventIds, onExecute: () => void) {
  const stored: CallResult = {
    ok: true,
    reply: { kind: 'event', id: 'evt_1', clientEventId: 'order-7', customerId: 'cust_1', effects: [], duplicate: false },
  };
  const engine = {
    execute: async () => {
      onExecute();
      return stored;
    },
  } as unknown as Engine;
  const routes = eventRoutes({
    engine,
    eventIds: new EventIdClaims(store),
    readModel: { getEvent: async () => null, eventAnswer: async () => null },
    drainProjector: async () => {},
    nowMs: () => Date.now(),
    rules: () => null,
  });
  const post = routes.find((r) => r.method === 'POST' && r.path === '/v1/events')!;
  return (body: Record<string, unknown>) =>
    (post.handler as Handler)({
      body,
      rawBody: Buffer.from(JSON.stringify(body)),
      principal: { kind: 'secret', credentialId: 'key_1', environment: { id: 'env_1', timezone: 'UTC' } },
    } as unknown as RequestContext);
}

const event = (customer: string) => ({ id: 'order-7', name: 'order.paid', customer_id: customer, occurred_at: '2026-01-01T00:00:00Z', properties: {} });

t.test('an id already bound to another customer is event_id_conflict, and no actor sees it', async (t) => {
  let executed = 0;
  const post = eventsPost(new MemoryEventIds(), () => executed++);
  t.equal((await post(event('alice'))).status, 202);
  t.equal((await post(event('alice'))).status, 202, 'the same content goes on to the actor (which answers the duplicate)');
  t.equal(executed, 2);
  await t.rejects(post(event('bob')), { code: 'event_id_conflict', param: 'id' }, 'the same id for another customer');
  t.equal(executed, 2, 'the conflicting event never reached an actor');
  const batch = await post({ events: [event('carol'), { ...event('alice'), id: 'order-8' }] });
  const items = batch.body.data as Array<Record<string, unknown>>;
  t.match(items[0], { client_event_id: 'order-7', error: { code: 'event_id_conflict', param: 'events[0].id' } }, 'a batch item names its index');
  t.match(items[1], { client_event_id: 'order-7' }, 'the other item is recorded (the stub actor answers order-7)');
  t.match(items[1], { id: 'evt_1', status: 'accepted' });
  t.notOk('error' in items[1]!, 'and carries no error');
  t.equal(executed, 3);
});

t.test("an erased customer's event is answered by the register as a duplicate, and no actor sees it", async (t) => {
  let executed = 0;
  const store = new MemoryEventIds();
  const post = eventsPost(store, () => executed++);
  t.equal((await post(event('alice'))).status, 202);
  await store.erase('env_1', [{ idHash: hash53('order-7'), fp: eventFingerprint('order.paid', 'alice', Date.parse('2026-01-01T00:00:00Z'), {}), eventId: 'evt_1' }]);
  t.same(await post(event('alice')), { status: 202, body: { id: 'evt_1', client_event_id: 'order-7', status: 'accepted', duplicate: true } });
  t.equal(executed, 1, 'only the first reached the actor');
  await t.rejects(post(event('bob')), { code: 'event_id_conflict' }, 'other content stays a conflict');
});

t.test('when the register cannot be reached the event is refused, not recorded unchecked', async (t) => {
  let executed = 0;
  const post = eventsPost(recording(true), () => executed++);
  const err = await post(event('alice')).catch((e: unknown) => e);
  t.ok(err instanceof ApiError && err.code === 'internal_error', 'internal_error (retryable)');
  t.equal(executed, 0);
});
