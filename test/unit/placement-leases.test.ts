// Lease renewal runs on its own timer: a recovery that lasts longer than the lease ttl keeps the
// leases it holds (recovering and serving ones), so no partition is recovered twice. The leases'
// time is a manual clock moved past the ttl while the recovery is held open. Recoveries run in the
// background a few at a time; a call for a partition still waiting its turn starts it at once, and
// a stop drops the waiting ones (their leases released) after the running ones finish.
import { pino } from 'pino';
import t from 'tap';
import { Engine } from '../../src/actors/engine.js';
import { ClusterPlacement } from '../../src/cluster/placement.js';
import { limits } from '../../src/limits.js';
import { MemoryMembership } from '../../src/persistence/memory/membership.js';
import { type Journal, offsetZero } from '../../src/persistence/ports.js';
import { memoryStorage } from '../helpers/memory-node.js';

async function until(what: string, cond: () => boolean): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`never happened: ${what}`);
}

function placementOver(storage: ReturnType<typeof memoryStorage>, journal: Journal, partitions: number, membership: MemoryMembership) {
  const placement = new ClusterPlacement({
    node: { nodeId: 'n1', grpcAddress: '127.0.0.1:1', startedAtMs: 0 },
    partitions,
    journal,
    snapshots: storage.snapshots,
    leases: storage.leases,
    membership,
    projector: { projectedOffset: async () => offsetZero, projectedSoFar: () => offsetZero, onAcked: () => {}, onReplayed: () => true },
    logger: pino({ level: 'silent' }),
    snapshotEveryMs: 60_000,
    activeActorsMax: 1000,
    leaseRenewEveryMs: 10,
  });
  placement.attach(new Engine(partitions, placement, null, journal));
  return placement;
}

/**
 * A journal whose reads of the gated partitions wait until `open()`; `blockedReads()` counts them,
 * `readFrom` holds every partition whose journal was read.
 */
function gatedJournal(storage: ReturnType<typeof memoryStorage>, gated: (p: number) => boolean) {
  let open!: () => void;
  const gate = new Promise<void>((r) => {
    open = r;
  });
  let blocked = 0;
  const readFrom = new Set<number>();
  const journal: Journal = Object.create(storage.journal);
  journal.read = async (p, after, count) => {
    readFrom.add(p);
    if (gated(p)) {
      blocked++;
      await gate;
    }
    return storage.journal.read(p, after, count);
  };
  return { journal, open, blockedReads: () => blocked, readFrom };
}

/**
 * A node over P partitions whose journal reads wait until `open()` (all but `ungated`), started,
 * with its first four recoveries replaying (blocked on the journal) and the others waiting.
 */
async function startedWithRecoveriesWaiting(P: number, ungated?: number) {
  const storage = memoryStorage(() => 1_000_000);
  const membership = new MemoryMembership(() => 1_000_000);
  const gated = gatedJournal(storage, (p) => p !== ungated);
  const placement = placementOver(storage, gated.journal, P, membership);
  await placement.start();
  await until('the first recoveries replaying', () => gated.blockedReads() === 4);
  return { storage, placement, ...gated };
}

t.test('leases and the heartbeat are renewed while a slow recovery runs', async (t) => {
  let now = 1_000_000;
  const clock = () => now;
  const storage = memoryStorage(clock);
  const membership = new MemoryMembership(clock);
  const P = 2;
  // Partition 1 recovers at once; partition 0's journal read waits until the test opens it.
  const { journal, open, blockedReads } = gatedJournal(storage, (p) => p === 0);
  const acquired: Array<[number, number | null]> = [];
  const acquire = storage.leases.acquire.bind(storage.leases);
  storage.leases.acquire = async (p, nodeId, ttl) => {
    const epoch = await acquire(p, nodeId, ttl);
    acquired.push([p, epoch]);
    return epoch;
  };
  let renewedAt: number[] = [];
  const renew = storage.leases.renew.bind(storage.leases);
  storage.leases.renew = async (p, nodeId, epoch, ttl) => {
    renewedAt.push(now);
    return renew(p, nodeId, epoch, ttl);
  };

  const placement = placementOver(storage, journal, P, membership);
  const started = placement.start();
  await until('partition 0 recovering', () => blockedReads() === 1);
  const epochs = (await storage.leases.list(P)).map((l) => l?.epoch);
  t.same((await storage.leases.list(P)).map((l) => l?.nodeId), ['n1', 'n1'], 'both leases taken');

  // Three steps of most of a ttl each: well past the first expiry, with the recovery still open.
  for (let step = 0; step < 3; step++) {
    now += limits.leaseTtlMs - 1000;
    renewedAt = [];
    // Both leases (the one recovering and the one already serving) are renewed at the new time.
    await until('leases renewed at the new time', () => renewedAt.filter((at) => at === now).length >= 2);
  }
  t.ok(now - 1_000_000 > limits.leaseTtlMs * 2, 'the clock moved past two ttls during the recovery');
  const held = await storage.leases.list(P);
  t.same(held.map((l) => l?.nodeId), ['n1', 'n1'], 'still held by this node');
  t.same(held.map((l) => l?.epoch), epochs, 'with the epochs taken at the start');
  t.same((await membership.alive()).map((n) => n.nodeId), ['n1'], 'the node heartbeat is alive too');
  t.equal(await storage.leases.acquire(0, 'n2', limits.leaseTtlMs), null, 'another node cannot take the recovering partition');

  open();
  await started;
  await placement.recovered();
  t.equal(placement.ownedCount, P, 'both partitions served');
  t.same(
    acquired.filter(([, e]) => e !== null).map(([p]) => p).sort(),
    [0, 1],
    'each partition acquired (and recovered) once',
  );
  await placement.stop();
  t.same(await storage.leases.list(P), [null, null], 'stop releases both leases');
});

t.test('a lease lost during recovery is not served', async (t) => {
  const clock = () => 1_000_000;
  const storage = memoryStorage(clock);
  const membership = new MemoryMembership(clock);
  const { journal, open, blockedReads } = gatedJournal(storage, () => true);
  let refused = 0;
  const renew = storage.leases.renew.bind(storage.leases);
  storage.leases.renew = async (p, nodeId, epoch, ttl) => {
    const ok = await renew(p, nodeId, epoch, ttl);
    if (!ok) refused++;
    return ok;
  };
  const placement = placementOver(storage, journal, 1, membership);
  const started = placement.start();
  await until('recovering', () => blockedReads() === 1);
  // Another node takes the lease over (e.g. this node was paused past the ttl).
  const lease = (await storage.leases.list(1))[0]!;
  await storage.leases.release(0, 'n1', lease.epoch);
  const other = await storage.leases.acquire(0, 'n2', limits.leaseTtlMs);
  t.ok(other !== null && other > lease.epoch, 'n2 took the lease');
  await until('the loss is noticed by a renewal', () => refused > 0);
  open();
  await started;
  await placement.recovered();
  t.equal(placement.ownedCount, 0, 'the recovered partition is discarded, not served');
  t.equal((await storage.leases.list(1))[0]?.nodeId, 'n2', 'n2 keeps its lease');
  await placement.stop();
});

t.test('recoveries run a few at a time, and a call starts its waiting partition at once', async (t) => {
  const P = 8;
  const wanted = 6;
  // Every partition but the one the call needs replays only once the test opens the journal.
  const { storage, placement, open, readFrom } = await startedWithRecoveriesWaiting(P, wanted);
  t.same((await storage.leases.list(P)).map((l) => l?.nodeId), new Array(P).fill('n1'), 'every lease taken at start');
  t.equal(placement.ownedCount, 0, 'nothing served while the running recoveries replay');
  t.equal(placement.recoveringCount, P, 'every leased partition is recovering (running or waiting its turn)');
  t.same([...readFrom].sort(), [0, 1, 2, 3], 'four run at once, in lease order; the others wait their turn');

  await placement.recovering(wanted);
  t.ok(placement.local(wanted), 'the partition a call needs is served as soon as its own replay ends');
  t.equal(placement.ownedCount, 1, 'while the recoveries ahead of it still replay');
  t.notOk(readFrom.has(4) || readFrom.has(5) || readFrom.has(7), 'and the ones still waiting were not started by it');

  open();
  await placement.recovered();
  t.equal(placement.ownedCount, P, 'every partition served once the queue drains');
  t.equal(placement.recoveringCount, 0);
  await placement.stop();
});

t.test('a stop drops the recoveries still waiting and releases their leases', async (t) => {
  const P = 8;
  const { storage, placement, open, blockedReads, readFrom } = await startedWithRecoveriesWaiting(P);
  const waiting = placement.recovering(7);
  await until('a call started partition 7 out of turn', () => blockedReads() === 5);
  const stopped = placement.stop();
  await until('the waiting leases released', () => placement.recoveringCount === 5);
  t.same(
    (await storage.leases.list(P)).map((l) => l?.nodeId ?? null),
    ['n1', 'n1', 'n1', 'n1', null, null, null, 'n1'],
    'leases of the recoveries never started go back at once; the running ones are kept',
  );
  open();
  await stopped;
  await waiting;
  t.same([...readFrom].sort(), [0, 1, 2, 3, 7], 'the dropped partitions were never read');
  t.same(await storage.leases.list(P), new Array(P).fill(null), 'stop releases every lease once the running recoveries end');
  t.equal(placement.ownedCount, 0);
});

t.test('calls start at most sixteen recoveries at once, ahead of the others', async (t) => {
  const P = 32;
  const { placement, open, blockedReads, readFrom } = await startedWithRecoveriesWaiting(P);
  // Calls for the last 20 partitions, newest lease first.
  const needed = Array.from({ length: 20 }, (_, i) => P - 1 - i);
  const waits = needed.map((p) => placement.recovering(p));
  await until('sixteen replaying', () => blockedReads() === 16);
  await new Promise((r) => setTimeout(r, 50));
  t.equal(blockedReads(), 16, 'no more than sixteen replay at once');
  t.same(
    [...readFrom].sort((a, b) => a - b),
    [0, 1, 2, 3, ...needed.slice(0, 12).sort((a, b) => a - b)],
    'the four running kept on; the partitions calls wait for took the other twelve slots, in the order of the calls',
  );
  open();
  await Promise.all(waits);
  for (const p of needed) t.ok(placement.local(p), `partition ${p} served`);
  await placement.recovered();
  t.equal(placement.ownedCount, P);
  await placement.stop();
});

t.test('a lease lost while its recovery waits its turn drops that recovery', async (t) => {
  const P = 8;
  const { storage, placement, open, readFrom } = await startedWithRecoveriesWaiting(P);
  // Another node takes partition 6's lease over (e.g. this node was paused past the ttl).
  const lease = (await storage.leases.list(P))[6]!;
  await storage.leases.release(6, 'n1', lease.epoch);
  t.ok((await storage.leases.acquire(6, 'n2', limits.leaseTtlMs)) !== null, 'n2 took the lease');
  await until('the waiting recovery dropped', () => placement.recoveringCount === P - 1);
  t.equal(placement.recovering(6), undefined, 'a call for it no longer waits here');
  open();
  await placement.recovered();
  t.notOk(readFrom.has(6), 'its journal was never read here');
  t.equal(placement.ownedCount, P - 1, 'the others are served');
  t.equal((await storage.leases.list(P))[6]?.nodeId, 'n2', 'n2 keeps its lease');
  await placement.stop();
});
