// In-memory Leases for tests, simulations and embedded single-process mode (where its
// currentEpoch feeds the file journal's fence). Time comes only from the injected clock.
// Invariants as the Redis adapter: epochs per partition strictly increase and are never reused,
// a lease is live while clock() < expiry, a node re-acquiring its own lease gets a new epoch.
import type { Lease, Leases } from '../ports.js';

interface Held {
  nodeId: string;
  epoch: number;
  expiresAtMs: number;
}

export class MemoryLeases implements Leases {
  private readonly held = new Map<number, Held>();
  /** Last epoch handed out per partition; survives expiry and release, like the Redis counter. */
  private readonly epochs = new Map<number, number>();

  constructor(private readonly clock: () => number = Date.now) {}

  private live(partition: number): Held | null {
    const h = this.held.get(partition);
    if (!h) return null;
    if (this.clock() >= h.expiresAtMs) {
      this.held.delete(partition);
      return null;
    }
    return h;
  }

  /** Epoch of the live lease of the partition, or 0 when free or expired (0 is never granted). */
  currentEpoch(partition: number): number {
    return this.live(partition)?.epoch ?? 0;
  }

  async acquire(partition: number, nodeId: string, ttlMs: number): Promise<number | null> {
    const h = this.live(partition);
    if (h && h.nodeId !== nodeId) return null;
    const epoch = (this.epochs.get(partition) ?? 0) + 1;
    this.epochs.set(partition, epoch);
    this.held.set(partition, { nodeId, epoch, expiresAtMs: this.clock() + ttlMs });
    return epoch;
  }

  async renew(partition: number, nodeId: string, epoch: number, ttlMs: number): Promise<boolean> {
    const h = this.live(partition);
    if (!h || h.nodeId !== nodeId || h.epoch !== epoch) return false;
    h.expiresAtMs = this.clock() + ttlMs;
    return true;
  }

  async renewMany(nodeId: string, items: ReadonlyArray<{ partition: number; epoch: number }>, ttlMs: number): Promise<boolean[]> {
    return Promise.all(items.map((it) => this.renew(it.partition, nodeId, it.epoch, ttlMs)));
  }

  async release(partition: number, nodeId: string, epoch: number): Promise<void> {
    const h = this.live(partition);
    if (h && h.nodeId === nodeId && h.epoch === epoch) this.held.delete(partition);
  }

  async list(partitions: number): Promise<Array<Lease | null>> {
    const out: Array<Lease | null> = new Array(partitions);
    for (let p = 0; p < partitions; p++) {
      const h = this.live(p);
      out[p] = h ? { partition: p, nodeId: h.nodeId, epoch: h.epoch } : null;
    }
    return out;
  }
}
