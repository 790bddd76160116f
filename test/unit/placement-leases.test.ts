// Lease renewal runs on its own timer: a recovery that lasts longer than the lease ttl keeps the
// leases it holds (recovering and serving ones), so no partition is recovered twice. The leases'
// time is a manual clock moved past the ttl while the recovery is held open.
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

/** A journal whose reads of the gated partitions wait until `open()`; `blockedReads()` counts them. */
function gatedJournal(storage: ReturnType<typeof memoryStorage>, gated: (p: number) => boolean) {
  let open!: () => void;
  const gate = new Promise<void>((r) => {
    open = r;
  });
  let blocked = 0;
  const journal: Journal = Object.create(storage.journal);
  journal.read = async (p, after, count) => {
    if (gated(p)) {
      blocked++;
      await gate;
    }
    return storage.journal.read(p, after, count);
  };
  return { journal, open, blockedReads: () => blocked };
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
  t.equal(placement.ownedCount, 0, 'the recovered partition is discarded, not served');
  t.equal((await storage.leases.list(1))[0]?.nodeId, 'n2', 'n2 keeps its lease');
  await placement.stop();
});
