// A node of the engine over the in-memory twins (journal, snapshots, leases, membership) with the
// real ClusterPlacement: what unit tests of the engine, recovery and fencing start. Several nodes
// share one `MemoryStorage`, so a second node recovers what the first journaled and snapshotted.
import { pino } from 'pino';
import { Engine, type IngestGate } from '../../src/actors/engine.js';
import type { CallResult } from '../../src/actors/partition.js';
import { ClusterPlacement, type PlacementOptions } from '../../src/cluster/placement.js';
import { MemoryJournal } from '../../src/persistence/memory/journal.js';
import { MemoryLeases } from '../../src/persistence/memory/leases.js';
import { MemoryMembership } from '../../src/persistence/memory/membership.js';
import { MemorySnapshotStore } from '../../src/persistence/memory/snapshot-store.js';
import { type Journal, offsetZero } from '../../src/persistence/ports.js';

export interface MemoryStorage {
  journal: Journal;
  snapshots: MemorySnapshotStore;
  leases: MemoryLeases;
}

/** `leaseClock`: the leases' time (a frozen clock keeps leases live however long a test blocks the loop). */
export function memoryStorage(leaseClock: () => number = Date.now): MemoryStorage {
  const leases = new MemoryLeases(leaseClock);
  return { leases, journal: new MemoryJournal((p) => leases.currentEpoch(p)), snapshots: new MemorySnapshotStore() };
}

/** Starts a node owning every partition it can take; `acked` collects the record count of each acknowledged entry. */
export async function memoryNode(
  storage: MemoryStorage,
  nodeId: string,
  partitions: number,
  membership = new MemoryMembership(),
  options: Partial<
    Pick<PlacementOptions, 'snapshotEveryMs' | 'snapshotDirtyActorsMax' | 'snapshotTailRecordsMax' | 'snapshotSweepMs' | 'activeActorsMax'>
  > & { ingest?: { gate: IngestGate; maxWaitMs: number } } = {},
) {
  const { ingest, ...placementOptions } = options;
  const acked: number[] = [];
  const placement = new ClusterPlacement({
    node: { nodeId, grpcAddress: '127.0.0.1:1', startedAtMs: 0 },
    partitions,
    journal: storage.journal,
    snapshots: storage.snapshots,
    leases: storage.leases,
    membership,
    projector: { projectedOffset: async () => offsetZero, projectedSoFar: () => offsetZero, onAcked: (_p, _o, records) => acked.push(records.length),
      onReplayed: (_p, _o, records) => {
        if (records !== null) acked.push(records.length);
        return true;
      },
    },
    logger: pino({ level: 'silent' }),
    snapshotEveryMs: 60_000,
    activeActorsMax: 1000,
    ...placementOptions,
  });
  const engine = new Engine(partitions, placement, null, storage.journal, ingest ?? null);
  placement.attach(engine);
  await placement.start();
  // Started = recovered here: tests read `acked` and the actors right after.
  await placement.recovered();
  return { engine, placement, acked };
}

/** The reply of a call that must succeed; throws with the whole result otherwise. */
export function ok(r: CallResult) {
  if (r.ok !== true) throw new Error(`expected ok, got ${JSON.stringify(r)}`);
  return r.reply;
}
