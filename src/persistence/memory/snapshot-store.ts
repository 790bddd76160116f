// In-memory twin of SnapshotStore for unit tests and simulations. Same guarantees as the
// PostgreSQL adapter (checked by the same contract suite): save is all-or-nothing, checkpoints
// only move forward, missing rows are simply absent. Holds copies, never caller references.
import { compareOffsets, type KeyRow, type Offset, offsetZero, type SnapshotRow, type SnapshotSave, type SnapshotStore } from '../ports.js';

export class MemorySnapshotStore implements SnapshotStore {
  private readonly rows = new Map<string, SnapshotRow>();
  private readonly keyRows = new Map<string, KeyRow>();
  private readonly checkpoints = new Map<number, Offset>();
  private readonly epochs = new Map<number, number>();
  /** Test hook: make the next save fail (simulates a database error). */
  failNextSave = false;

  async save(
    partition: number,
    checkpoint: Offset,
    rows: SnapshotRow[],
    keys: KeyRow[],
    keysRemoved: Array<{ environmentId: string; key: string }>,
  ): Promise<void> {
    await Promise.resolve();
    if (this.failNextSave) {
      this.failNextSave = false;
      throw new Error('simulated snapshot save failure');
    }
    this.apply(partition, checkpoint, rows, keys, keysRemoved);
  }

  private apply(
    partition: number,
    checkpoint: Offset,
    rows: SnapshotRow[],
    keys: KeyRow[],
    keysRemoved: Array<{ environmentId: string; key: string }>,
  ): void {
    for (const r of rows) this.rows.set(`${r.environmentId}\u0000${r.customerId}`, { ...r, payload: r.payload.slice() });
    for (const k of keysRemoved) this.keyRows.delete(`${k.environmentId}\u0000${k.key}`);
    for (const k of keys) this.keyRows.set(`${k.environmentId}\u0000${k.key}`, { ...k });
    const current = this.checkpoints.get(partition) ?? offsetZero;
    if (compareOffsets(checkpoint, current) > 0) this.checkpoints.set(partition, checkpoint);
  }

  async saveMany(items: ReadonlyArray<SnapshotSave>): Promise<Array<'saved' | 'fenced'>> {
    await Promise.resolve();
    if (this.failNextSave) {
      this.failNextSave = false;
      throw new Error('simulated snapshot save failure');
    }
    const outcome = items.map((it) => (it.epoch < (this.epochs.get(it.partition) ?? 0) ? 'fenced' : 'saved'));
    for (let i = 0; i < items.length; i++) {
      const it = items[i]!;
      if (outcome[i] === 'saved') this.apply(it.partition, it.checkpoint, it.rows, it.keys, it.keysRemoved);
    }
    return outcome;
  }

  async claim(partition: number, epoch: number): Promise<Offset> {
    await Promise.resolve();
    if (epoch > (this.epochs.get(partition) ?? 0)) this.epochs.set(partition, epoch);
    return this.checkpoints.get(partition) ?? offsetZero;
  }

  async load(environmentId: string, customerIds: string[]): Promise<SnapshotRow[]> {
    await Promise.resolve();
    const out: SnapshotRow[] = [];
    for (const id of customerIds) {
      const r = this.rows.get(`${environmentId}\u0000${id}`);
      if (r) out.push({ ...r, payload: r.payload.slice() });
    }
    return out;
  }

  async lookupKeys(environmentId: string, keys: string[]): Promise<KeyRow[]> {
    await Promise.resolve();
    const out: KeyRow[] = [];
    for (const key of keys) {
      const r = this.keyRows.get(`${environmentId}\u0000${key}`);
      if (r) out.push({ ...r });
    }
    return out;
  }

  async partitionKeys(partition: number): Promise<Array<{ environmentId: string; key: string }>> {
    await Promise.resolve();
    return [...this.keyRows.values()].filter((k) => k.partition === partition).map((k) => ({ environmentId: k.environmentId, key: k.key }));
  }

  async checkpoint(partition: number): Promise<Offset> {
    await Promise.resolve();
    return this.checkpoints.get(partition) ?? offsetZero;
  }
}
