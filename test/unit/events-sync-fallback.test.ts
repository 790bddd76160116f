// Sync-mode events past their wait bound answer 202 with fallback: true, but only once the event
// is journaled (202 means stored): the actor's answer comes with the journal's ack. An event that
// could not be stored answers its error, never a 202.
import t from 'tap';
import type { CallResult } from '../../src/actors/partition.js';
import type { Engine } from '../../src/actors/engine.js';
import { ApiError } from '../../src/errors/api-error.js';
import { EventIdClaims } from '../../src/gateway/event-id-claims.js';
import { eventRoutes } from '../../src/gateway/handlers/events.js';
import type { RequestContext } from '../../src/gateway/route.js';
import { limits } from '../../src/limits.js';
import { MemoryEventIds } from '../../src/persistence/memory/event-ids.js';

const mutable = limits as { syncEvaluationWaitMs: number };
const savedWait = mutable.syncEvaluationWaitMs;
t.teardown(() => {
  mutable.syncEvaluationWaitMs = savedWait;
});
mutable.syncEvaluationWaitMs = 20;

const stored: CallResult = {
  ok: true,
  reply: { kind: 'event', id: 'evt_1', clientEventId: 'e-1', customerId: 'cust_1', effects: [], duplicate: false },
} as unknown as CallResult;

function handlerWith(execute: () => Promise<CallResult>) {
  const engine = { execute } as unknown as Engine;
  const routes = eventRoutes({
    engine,
    eventIds: new EventIdClaims(new MemoryEventIds()),
    readModel: { event: async () => null } as never,
    drainProjector: async () => {},
    nowMs: () => Date.now(),
    rules: () => null,
  });
  const post = routes.find((r) => r.method === 'POST' && r.path === '/v1/events')!;
  const body = { id: 'e-1', name: 'level.completed', customer_id: 'p-1', occurred_at: new Date().toISOString(), properties: {}, mode: 'sync' };
  const ctx = {
    body,
    rawBody: Buffer.from(JSON.stringify(body)),
    principal: { kind: 'secret', environment: { id: 'env_1', timezone: 'UTC' } },
  } as unknown as RequestContext;
  return () => (post.handler as (c: RequestContext) => Promise<{ status: number; body: Record<string, unknown> }>)(ctx);
}

t.test('a slow journal: the fallback waits for the ack and carries the stored id', async (t) => {
  let acked = false;
  const run = handlerWith(
    () =>
      new Promise((resolve) =>
        setTimeout(() => {
          acked = true;
          resolve(stored);
        }, 120),
      ),
  );
  const out = await run();
  t.ok(acked, 'answered only after the journal acknowledged the event');
  t.equal(out.status, 202);
  t.same(out.body, { id: 'evt_1', client_event_id: 'e-1', status: 'accepted', fallback: true });
});

t.test('within the bound: 200 with effects', async (t) => {
  const out = await handlerWith(async () => stored)();
  t.equal(out.status, 200);
  t.match(out.body, { id: 'evt_1', status: 'evaluated', effects: [] });
  t.notOk('fallback' in out.body);
});

t.test('a journal that fails after the bound: the error, not a 202', async (t) => {
  const run = handlerWith(
    () =>
      new Promise((resolve) =>
        setTimeout(() => resolve({ ok: false, code: 'internal_error', message: 'The journal write failed.' } as CallResult), 80),
      ),
  );
  const err = await run().then(
    () => null,
    (e: unknown) => e,
  );
  t.ok(err instanceof ApiError, 'an API error');
  t.equal((err as ApiError).code, 'internal_error');
});
