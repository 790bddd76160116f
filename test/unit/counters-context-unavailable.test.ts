// An event command whose counter definitions cannot be read as it is sent (withCountersContext: a
// storage failure after the cache was dropped, or definitions that keep changing) is not sent: it
// answers countersUnavailable, a retryable 429, so the budget grant and shared limit slots taken
// for it go back (only internal_error, an outcome that may have been journaled, keeps them).
import t from 'tap';
import type { Engine } from '../../src/actors/engine.js';
import type { CallResult } from '../../src/actors/partition.js';
import { countersUnavailable, withCountersContext } from '../../src/catalog/counters.js';
import { settleGrant } from '../../src/catalog/event-grants.js';
import type { CountersContext } from '../../src/domain/counters.js';
import { ApiError } from '../../src/errors/api-error.js';
import { EventIdClaims } from '../../src/gateway/event-id-claims.js';
import { eventRoutes } from '../../src/gateway/handlers/events.js';
import type { RequestContext } from '../../src/gateway/route.js';
import { MemoryEventIds } from '../../src/persistence/memory/event-ids.js';

const sent: CallResult = { ok: true, reply: { kind: 'event' } } as unknown as CallResult;

t.test('a load failure: nothing is sent, the answer is the unavailable one', async (t) => {
  // Given a catalog whose load fails
  let sends = 0;
  // When an event is sent with it
  const r = await withCountersContext(
    () => Promise.reject(new Error('connection lost')),
    async () => {
      sends++;
      return sent;
    },
    countersUnavailable,
  );
  // Then it is not sent, and the answer is retryable
  t.equal(sends, 0);
  t.same(r, { ok: false, code: 'rate_limited', message: 'The counter definitions could not be read; retry.', retryAfterSeconds: 1 });
});

t.test('definitions that keep changing: nothing is sent after the last round', async (t) => {
  let reads = 0;
  let sends = 0;
  const r = await withCountersContext(
    () => {
      reads++;
      return Promise.resolve(null);
    },
    async () => {
      sends++;
      return sent;
    },
    countersUnavailable,
  );
  t.equal(sends, 0);
  t.ok(reads > 1, 'read again each round');
  t.equal(r, countersUnavailable);
});

t.test('a cached context: sent at once with it', async (t) => {
  const ctx = { defs: [], timeZone: 'UTC' } as unknown as CountersContext;
  let got: unknown;
  const r = await withCountersContext(
    () => ctx,
    async (c) => {
      got = c;
      return sent;
    },
    countersUnavailable,
  );
  t.equal(got, ctx);
  t.equal(r, sent);
});

t.test('the budget grant taken for an unsent event goes back', async (t) => {
  const givenBack: unknown[] = [];
  const allowance = { grant: () => ({}), giveBack: (_env: string, grant: unknown, used: unknown) => givenBack.push([grant, used]) };
  const grant = { camp_1: { coins: 10 } };
  const pending = withCountersContext(() => Promise.reject(new Error('connection lost')), async () => sent, countersUnavailable);
  settleGrant(allowance, 'env_1', grant as never, pending);
  await pending;
  await new Promise((resolve) => setImmediate(resolve));
  t.same(givenBack, [[grant, {}]], 'all of it, nothing used');
});

t.test('POST /v1/events: a failed second read answers 429 with Retry-After, not a bare 500', async (t) => {
  // Given a catalog that loads for the first read and fails on the read as the event is sent
  let reads = 0;
  let executed = 0;
  const engine = {
    execute: async () => {
      executed++;
      return sent;
    },
  } as unknown as Engine;
  const routes = eventRoutes({
    engine,
    eventIds: new EventIdClaims(new MemoryEventIds()),
    readModel: { event: async () => null } as never,
    drainProjector: async () => {},
    nowMs: () => Date.now(),
    rules: () => null,
    counters: () => (++reads === 1 ? Promise.resolve(null) : Promise.reject(new Error('connection lost'))),
  });
  const post = routes.find((r) => r.method === 'POST' && r.path === '/v1/events')!;
  const body = { id: 'e-1', name: 'level.completed', customer_id: 'p-1', occurred_at: new Date().toISOString(), properties: {} };
  const ctx = {
    body,
    rawBody: Buffer.from(JSON.stringify(body)),
    principal: { kind: 'secret', environment: { id: 'env_1', timezone: 'UTC' } },
  } as unknown as RequestContext;
  // When the event is posted
  const err = await (post.handler as (c: RequestContext) => Promise<unknown>)(ctx).then(
    () => null,
    (e: unknown) => e,
  );
  // Then it was never sent, and the client is told to retry
  t.equal(executed, 0);
  t.ok(err instanceof ApiError, 'an API error');
  t.match(err, { code: 'rate_limited', retryAfterSeconds: 1 });
});
