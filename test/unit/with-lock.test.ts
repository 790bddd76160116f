// withLock keeps its lock while `run` runs, on real time with short ttls (MemoryLocks on Date.now;
// ttls of a few hundred ms so a loaded machine's event-loop stalls stay well within ttl*2/3):
// extended every ttl/3, one extend at a time, none after the run; `run` learns through its
// LockHold when the lock may be lost: at once when an extend answers false, and once the ttl has
// passed since the last good extend when extends fail (storage errors) or hang.
import t from 'tap';
import { MemoryLocks } from '../../src/persistence/memory/locks.js';
import { type Locks, LockLostError, withLock } from '../../src/persistence/ports.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** MemoryLocks whose extend is replaced; counts extend calls and the most in flight at once. */
function withExtend(extend: Locks['extend']) {
  const shared = new MemoryLocks();
  const seen = { calls: 0, inFlight: 0, maxInFlight: 0 };
  const locks: Locks = {
    acquire: (name, ttlMs) => shared.acquire(name, ttlMs),
    release: (name, token) => shared.release(name, token),
    extend: async (name, token, ttlMs) => {
      seen.calls++;
      seen.maxInFlight = Math.max(seen.maxInFlight, ++seen.inFlight);
      try {
        return await extend.call(shared, name, token, ttlMs);
      } finally {
        seen.inFlight--;
      }
    },
  };
  return { locks, seen };
}

t.test('a run lasting several ttls keeps the lock: nobody else takes it meanwhile; no extend after the run', async (t) => {
  const { locks, seen } = withExtend(MemoryLocks.prototype.extend);
  // A longer ttl here: the check needs the lock kept alive through any stall of up to 2/3 of it.
  const ttlMs = 900;
  await withLock(locks, 'l', { ttlMs, waitMs: 0 }, async (hold) => {
    for (let i = 1; i <= 4; i++) {
      await sleep(ttlMs / 2);
      t.equal(await locks.acquire('l', ttlMs), null, `after ${(i * ttlMs) / 2} ms another acquire gets null`);
      t.ok(hold.held(), 'and the run is told it holds the lock');
    }
    hold.assertHeld();
  });
  t.ok(seen.calls >= 4, `extended along the run (${seen.calls})`);
  t.type(await locks.acquire('l', ttlMs), 'string', 'released after the run');
  const after = seen.calls;
  await sleep(ttlMs / 2);
  t.equal(seen.calls, after, 'no extend after the run (timer cleared)');
});

t.test('an extend answering false (expired or taken) makes the lock lost at once, before the ttl ran out', async (t) => {
  const { locks, seen } = withExtend(async () => false);
  const ttlMs = 300;
  await withLock(locks, 'l', { ttlMs, waitMs: 0 }, async (hold) => {
    t.ok(hold.held(), 'held after the acquire');
    await sleep((ttlMs * 2) / 3);
    t.notOk(hold.held(), 'lost after the first extend, within the ttl');
    t.throws(() => hold.assertHeld(), LockLostError);
    await sleep(ttlMs / 2);
  });
  t.equal(seen.calls, 1, 'a lost lock is not extended again');
});

t.test('extends failing with storage errors: still held within the ttl since the last good one, then lost', async (t) => {
  const { locks, seen } = withExtend(async () => {
    throw new Error('connection lost');
  });
  const ttlMs = 400;
  await withLock(locks, 'l', { ttlMs, waitMs: 0 }, async (hold) => {
    await sleep(ttlMs / 2);
    t.ok(hold.held(), 'a failed extend proves nothing: held within the ttl');
    hold.assertHeld();
    await sleep(ttlMs);
    t.notOk(hold.held(), 'lost once the ttl passed without a good extend');
    t.throws(() => hold.assertHeld(), LockLostError);
  });
  t.ok(seen.calls >= 2, `extends were tried (${seen.calls})`);
});

t.test('an extend that hangs: no second one is sent meanwhile, and the lock is lost once the ttl passed', async (t) => {
  const ttlMs = 150;
  // The first extend answers "held" only after three ttls: a timer per period would send more.
  const { locks, seen } = withExtend(async function (this: Locks, name, token, ttl) {
    await sleep(ttlMs * 3);
    return this.extend(name, token, ttl);
  });
  await withLock(locks, 'l', { ttlMs, waitMs: 0 }, async (hold) => {
    await sleep(ttlMs * 2);
    t.notOk(hold.held(), 'lost: no extend answered within the ttl');
    t.throws(() => hold.assertHeld(), LockLostError);
    await sleep(ttlMs * 2);
    t.notOk(hold.held(), 'the late answer does not make it held again');
  });
  t.equal(seen.maxInFlight, 1, 'never two extends in flight');
  t.equal(seen.calls, 1, 'nothing sent while the first hung, nor after it answered late');
});
