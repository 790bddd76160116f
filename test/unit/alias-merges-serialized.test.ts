// Alias additions (merges) of one environment run one after the other on a node: the second
// resolves its survivor only after the first merged. Interleaved (view, view, claim, claim), two
// merges in opposite directions would each merge the other's customer: a cycle. Other
// environments are not held up. Each merge holds the environment's cluster-wide lock across the
// whole sequence, waits while another node holds it, and answers 429 when it stays taken, or when
// it lost the lock midway (then before its next step).
import t from 'tap';
import type { Engine } from '../../src/actors/engine.js';
import type { Call, CallResult } from '../../src/actors/partition.js';
import { ApiError } from '../../src/errors/api-error.js';
import { customerRoutes } from '../../src/gateway/handlers/customers.js';
import type { RequestContext } from '../../src/gateway/route.js';
import { MemoryLocks } from '../../src/persistence/memory/locks.js';
import type { Locks } from '../../src/persistence/ports.js';

const A = 'cust_00001M84KXN2SAE60B7HZ04F81HQ7';
const B = 'cust_00001M84KXN2SAE60B7HZ04F81HQ8';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** `step` runs inside every engine call; by default it takes a few turns, as a journal write would. */
function harness(opts: { locks?: Locks; waitMs?: number; ttlMs?: number; step?: (kind: string) => Promise<void> } = {}) {
  const log: string[] = [];
  const shared = opts.locks ?? new MemoryLocks();
  // Logs lock moves into the same log as the engine calls.
  const locks: Locks = {
    acquire: async (name, ttlMs) => {
      const token = await shared.acquire(name, ttlMs);
      if (token !== null) log.push(`lock ${name}`);
      return token;
    },
    release: async (name, token) => {
      const released = await shared.release(name, token);
      if (released) log.push(`unlock ${name}`);
      return released;
    },
    extend: (name, token, ttlMs) => shared.extend(name, token, ttlMs),
  };
  const engine = {
    execute: async (call: Call): Promise<CallResult> => {
      const who = call.target.by === 'id' ? call.target.id.slice(-3) : call.target.key;
      log.push(`${call.env}:${call.command.kind}:${who}`);
      await (opts.step?.(call.command.kind) ?? sleep(5));
      switch (call.command.kind) {
        case 'customer.view':
          return { ok: true, reply: { kind: 'customer', customer: { id: call.target.by === 'id' ? call.target.id : '', environmentId: call.env, aliases: [], mergedFrom: [] } } } as unknown as CallResult;
        case 'key.claim':
          return { ok: true, reply: { kind: 'claimed', mergedFrom: null } };
        default:
          return { ok: true, reply: { kind: 'alias', alias: { alias: 'x', kind: 'anonymous', createdAtMs: 0 }, customerId: '', mergedFrom: null } };
      }
    },
  } as unknown as Engine;
  const routes = customerRoutes({
    engine,
    now: () => 0,
    checkAttributes: async () => {},
    readModel: { listCustomers: async () => [] } as never,
    tiers: { all: async () => [] },
    drainProjector: async () => {},
    mintCustomerToken: async () => ({ token: '', expiresAtMs: 0 }),
    eraseEventIds: async () => {},
    mergeLock: { locks, ttlMs: opts.ttlMs ?? 10_000, waitMs: opts.waitMs ?? 5000 },
  });
  const route = routes.find((r) => r.method === 'POST' && r.path === '/v1/customers/:id/aliases')!;
  const add = (env: string, id: string, alias: string) =>
    (route.handler as (c: RequestContext) => Promise<unknown>)({
      params: { id },
      body: { alias, kind: 'anonymous' },
      principal: { kind: 'secret', environment: { id: env } },
    } as unknown as RequestContext);
  return { log, add };
}

t.test('two merges of one environment run one after the other, each holding the lock throughout', async (t) => {
  const { log, add } = harness();
  await Promise.all([add('env_1', A, 'ext-b'), add('env_1', B, 'ext-a')]);
  t.same(log, [
    'lock merge:env_1',
    'env_1:customer.view:HQ7',
    'env_1:key.claim:ext-b',
    'env_1:alias.add:HQ7',
    'unlock merge:env_1',
    'lock merge:env_1',
    'env_1:customer.view:HQ8',
    'env_1:key.claim:ext-a',
    'env_1:alias.add:HQ8',
    'unlock merge:env_1',
  ]);
});

t.test("a merge waits while another node holds the environment's lock", async (t) => {
  const locks = new MemoryLocks();
  const { log, add } = harness({ locks });
  const other = (await locks.acquire('merge:env_1', 10_000))!;
  const merge = add('env_1', A, 'ext-b');
  await sleep(60);
  t.same(log, [], 'nothing ran while the other node held the lock');
  await locks.release('merge:env_1', other);
  await merge;
  t.equal(log[0], 'lock merge:env_1');
  t.equal(log.at(-1), 'unlock merge:env_1');
  t.ok(log.includes('env_1:alias.add:HQ7'));
});

t.test('a lock that stays taken answers 429 rate_limited with Retry-After, running nothing', async (t) => {
  const locks = new MemoryLocks();
  const { log, add } = harness({ locks, waitMs: 100 });
  await locks.acquire('merge:env_1', 10_000);
  const err = await add('env_1', A, 'ext-b').catch((e: unknown) => e);
  t.ok(err instanceof ApiError);
  t.equal((err as ApiError).code, 'rate_limited');
  t.equal((err as ApiError).status, 429);
  t.equal((err as ApiError).retryAfterSeconds, 1);
  t.same(log, []);
  await add('env_2', B, 'ext-c');
  t.ok(log.includes('env_2:alias.add:HQ8'), 'another environment is not held up');
});

t.test('a failed merge does not block the next; other environments run alongside', async (t) => {
  const { log, add } = harness();
  const bad = add('env_1', 'not-a-customer-id', 'x');
  const next = add('env_1', A, 'ext-b');
  const other = add('env_2', B, 'ext-c');
  await t.rejects(bad);
  await next;
  await other;
  t.equal(log.filter((l) => !l.includes('lock '))[0], 'env_2:customer.view:HQ8', 'env_2 did not wait for env_1');
  t.ok(log.includes('env_1:alias.add:HQ7'), 'the merge after the failed one ran');
  t.equal(log.filter((l) => l === 'lock merge:env_1').length, 2, 'both env_1 merges took the lock');
  t.equal(log.filter((l) => l === 'unlock merge:env_1').length, 2, 'the failed merge released it too');
});

t.test('a merge whose lock expired during a step stops before its next one: 429 to retry, and the repeat runs', async (t) => {
  let now = 0;
  const locks = new MemoryLocks(() => now);
  const ttlMs = 300;
  let stalled = false;
  const { log, add } = harness({
    locks,
    ttlMs,
    step: async (kind) => {
      if (kind !== 'key.claim' || stalled) return sleep(5);
      stalled = true;
      // The claim stalls past the ttl: the lock expires, and the extend due meanwhile finds it gone.
      now += ttlMs;
      await sleep(ttlMs / 2);
    },
  });
  const err = await add('env_1', A, 'ext-b').catch((e: unknown) => e);
  t.ok(err instanceof ApiError);
  t.equal((err as ApiError).code, 'rate_limited');
  t.equal((err as ApiError).message, 'The merge lost its lock; retry.');
  t.equal((err as ApiError).retryAfterSeconds, 1);
  t.same(log, ['lock merge:env_1', 'env_1:customer.view:HQ7', 'env_1:key.claim:ext-b'], 'no alias.add after the lock was lost');
  log.length = 0;
  await add('env_1', A, 'ext-b');
  t.same(
    log,
    ['lock merge:env_1', 'env_1:customer.view:HQ7', 'env_1:key.claim:ext-b', 'env_1:alias.add:HQ7', 'unlock merge:env_1'],
    'the repeat takes the lock again and runs every step',
  );
});
