// Contract suite of the Locks port, run against Redis and the in-memory adapter. Time moves only
// through the harness: a fake clock for memory, real waiting for Redis (its own clock expires keys).
// Invariants checked: at most one live token per name (also among concurrent acquirers), release
// and extend only by the holding token, expiry after the ttl (or the last extend), and withLock's
// wait bound and release.
import t, { type Test } from 'tap';
import { MemoryLocks } from '../../src/persistence/memory/locks.js';
import { LockBusyError, type Locks, withLock } from '../../src/persistence/ports.js';
import { RedisLocks } from '../../src/persistence/redis/redis-locks.js';
import { redisForTest } from '../helpers/redis.js';

interface Harness {
  locks: Locks;
  /** Lets at least `ms` pass for the adapter's clock. */
  advance(ms: number): Promise<void>;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

const adapters: Array<[string, (t: Test) => Promise<Harness>]> = [
  [
    'redis',
    async (t) => {
      const { redis, prefix } = redisForTest(t, 'locks');
      return { locks: new RedisLocks(redis, prefix), advance: sleep };
    },
  ],
  [
    'memory',
    async () => {
      let now = 1_000_000;
      return {
        locks: new MemoryLocks(() => now),
        advance: async (ms) => {
          now += ms;
        },
      };
    },
  ],
];

const long = 60_000;

/**
 * Ttls and waits in ms, scaled: on Redis time is real, and a loaded box that stalls this process
 * for a few hundred ms between two steps must not move a lock past its ttl where the
 * test says it is held. The memory adapter's clock is moved by hand, so the scale costs it nothing.
 */
const ms = (n: number) => n * 5;

function locksContract(name: string, make: (t: Test) => Promise<Harness>): void {
  t.test(`locks contract: ${name}`, async (t) => {
    t.test('mutual exclusion: one token at a time per name; names are independent', async (t) => {
      const { locks } = await make(t);
      const a = await locks.acquire('merge:env_1', long);
      t.type(a, 'string', 'a free lock is taken with a token');
      t.equal(await locks.acquire('merge:env_1', long), null, 'a second acquire gets null while it is held');
      const b = await locks.acquire('merge:env_2', long);
      t.type(b, 'string', 'another name is free');
      t.not(a, b, 'tokens differ');
      t.ok(await locks.release('merge:env_1', a!), 'the holder releases');
      const c = await locks.acquire('merge:env_1', long);
      t.type(c, 'string', 'free again after the release');
      t.not(c, a, 'each acquisition gets its own token');
    });

    t.test('release acts only for the token that holds the lock', async (t) => {
      const { locks } = await make(t);
      const a = (await locks.acquire('l', long))!;
      t.notOk(await locks.release('l', 'not-the-token'), 'a wrong token releases nothing');
      t.notOk(await locks.release('other', a), 'a token of another name releases nothing');
      t.equal(await locks.acquire('l', long), null, 'still held');
      t.ok(await locks.release('l', a));
      t.notOk(await locks.release('l', a), 'a second release is false');
      t.notOk(await locks.release('never-taken', a), 'releasing a free lock is false');
    });

    t.test('the lock expires after its ttl; the late holder cannot release the next one', async (t) => {
      const { locks, advance } = await make(t);
      const a = (await locks.acquire('l', ms(50)))!;
      t.equal(await locks.acquire('l', long), null, 'held within the ttl');
      await advance(ms(120));
      const b = await locks.acquire('l', long);
      t.type(b, 'string', 'taken by another after expiry');
      t.notOk(await locks.release('l', a), 'the expired holder releases nothing');
      t.equal(await locks.acquire('l', long), null, "the new holder's lock is still live");
      t.ok(await locks.release('l', b!));
    });

    t.test('an expired lock nobody took is free and its token is void', async (t) => {
      const { locks, advance } = await make(t);
      const a = (await locks.acquire('l', ms(50)))!;
      await advance(ms(120));
      t.notOk(await locks.release('l', a));
      t.type(await locks.acquire('l', long), 'string');
    });

    t.test('extend keeps a held lock alive past its original ttl, for the new ttl only', async (t) => {
      const { locks, advance } = await make(t);
      const a = (await locks.acquire('l', ms(200)))!;
      await advance(ms(130));
      t.ok(await locks.extend('l', a, ms(200)), 'the holder extends');
      await advance(ms(130));
      t.equal(await locks.acquire('l', long), null, 'still held after the original ttl');
      t.ok(await locks.extend('l', a, ms(200)), 'and extends again');
      await advance(ms(260));
      t.type(await locks.acquire('l', long), 'string', 'free once the extended ttl ran out');
      t.notOk(await locks.release('l', a), 'the expired holder releases nothing');
    });

    t.test('extend with a token that does not hold the lock answers false and changes nothing', async (t) => {
      const { locks, advance } = await make(t);
      const a = (await locks.acquire('l', ms(200)))!;
      t.notOk(await locks.extend('l', 'not-the-token', long), 'a wrong token extends nothing');
      t.notOk(await locks.extend('other', a, long), 'a token of another name extends nothing');
      t.notOk(await locks.extend('never-taken', a, long), 'extending a free lock is false');
      t.type(await locks.acquire('never-taken', long), 'string', 'and does not take it');
      await advance(ms(260));
      t.type(await locks.acquire('l', long), 'string', "the holder's ttl was not extended");
    });

    t.test('extend after expiry answers false: it neither revives the lock nor extends the next holder', async (t) => {
      const { locks, advance } = await make(t);
      const a = (await locks.acquire('l', ms(50)))!;
      await advance(ms(120));
      t.notOk(await locks.extend('l', a, long), 'the expired token extends nothing');
      const b = await locks.acquire('l', ms(50));
      t.type(b, 'string', 'free: the late extend did not revive it');
      t.notOk(await locks.extend('l', a, long), "the late extend does not touch the next holder's lock");
      await advance(ms(120));
      t.type(await locks.acquire('l', long), 'string', "the next holder's lock expired on its own ttl");
    });

    t.test('concurrent acquirers: at most one token', async (t) => {
      const { locks } = await make(t);
      for (let round = 0; round < 5; round++) {
        const tokens = await Promise.all(Array.from({ length: 20 }, () => locks.acquire(`race-${round}`, long)));
        t.equal(tokens.filter((x) => x !== null).length, 1, `round ${round}: exactly one of 20 got a token`);
      }
    });

    t.test('withLock runs callers one at a time and releases after each, also after a failure', async (t) => {
      const { locks } = await make(t);
      let inside = 0;
      let overlapped = false;
      const order: number[] = [];
      const bounds = { ttlMs: long, waitMs: 5000 };
      const runs = Array.from({ length: 6 }, (_, i) =>
        withLock(locks, 'w', bounds, async () => {
          inside++;
          if (inside > 1) overlapped = true;
          await sleep(5);
          order.push(i);
          inside--;
          if (i === 2) throw new Error('boom');
          return i;
        }),
      );
      const settled = await Promise.allSettled(runs);
      t.notOk(overlapped, 'never two inside');
      t.equal(order.length, 6, 'every caller ran');
      t.same(
        settled.map((s) => s.status),
        ['fulfilled', 'fulfilled', 'rejected', 'fulfilled', 'fulfilled', 'fulfilled'],
        'a failure reaches its caller only',
      );
      const after = await locks.acquire('w', long);
      t.type(after, 'string', 'released at the end');
    });

    t.test('withLock gives up after waitMs without running', async (t) => {
      const { locks } = await make(t);
      const held = (await locks.acquire('busy', long))!;
      let ran = false;
      const started = Date.now();
      await t.rejects(
        withLock(locks, 'busy', { ttlMs: long, waitMs: 150 }, async () => {
          ran = true;
        }),
        LockBusyError,
      );
      const waited = Date.now() - started;
      // The upper bound is a sanity check only (it gave up, it did not hang): a loaded box answers late.
      t.ok(waited >= 140 && waited < 10_000, `waited ${waited} ms for a 150 ms bound`);
      t.notOk(ran);
      t.ok(await locks.release('busy', held), "the holder's lock was left alone");
    });
  });
}

for (const [name, make] of adapters) locksContract(name, make);
