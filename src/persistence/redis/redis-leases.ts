// The external Leases: one key per partition holding "<nodeId>:<epoch>" with a PX ttl, plus a
// per-partition epoch counter INCR'd on every successful acquire and never reset, so epochs
// strictly increase even after the lease key expired. Acquire/renew/release are Lua scripts.
// Never change a lease without comparing the full "<nodeId>:<epoch>" value first.
import type { Lease, Leases } from '../ports.js';
import { ScriptedRedisAdapter } from './scripted-adapter.js';

/** Parses "<nodeId>:<epoch>"; node ids may themselves contain ':' so split at the last one. */
export function parseLease(partition: number, value: string | null): Lease | null {
  if (value === null) return null;
  const colon = value.lastIndexOf(':');
  if (colon < 0) return null;
  const epoch = Number(value.slice(colon + 1));
  if (!Number.isSafeInteger(epoch)) return null;
  return { partition, nodeId: value.slice(0, colon), epoch };
}

export class RedisLeases extends ScriptedRedisAdapter implements Leases {
  async acquire(partition: number, nodeId: string, ttlMs: number): Promise<number | null> {
    const epoch = await this.redis.loyaltyLeaseAcquire(
      this.keys.partitionLease(partition),
      this.keys.partitionEpoch(partition),
      nodeId,
      ttlMs,
    );
    return epoch === null ? null : Number(epoch);
  }

  async renew(partition: number, nodeId: string, epoch: number, ttlMs: number): Promise<boolean> {
    return (await this.redis.loyaltyPexpireIfEqual(this.keys.partitionLease(partition), `${nodeId}:${epoch}`, ttlMs)) === 1;
  }

  async renewMany(nodeId: string, items: ReadonlyArray<{ partition: number; epoch: number }>, ttlMs: number): Promise<boolean[]> {
    if (items.length === 0) return [];
    const args: Array<string | number> = items.map((it) => this.keys.partitionLease(it.partition));
    args.push(ttlMs);
    for (const it of items) args.push(`${nodeId}:${it.epoch}`);
    const replies = await this.redis.loyaltyLeaseRenewMany(items.length, ...args);
    return items.map((_, i) => replies[i] === 1);
  }

  async release(partition: number, nodeId: string, epoch: number): Promise<void> {
    await this.redis.loyaltyDeleteIfEqual(this.keys.partitionLease(partition), `${nodeId}:${epoch}`);
  }

  async list(partitions: number): Promise<Array<Lease | null>> {
    // One pipeline of GETs rather than MGET: lease keys live in different cluster slots.
    const pipe = this.redis.pipeline();
    for (let p = 0; p < partitions; p++) pipe.get(this.keys.partitionLease(p));
    const replies = (await pipe.exec()) ?? [];
    const out: Array<Lease | null> = new Array(partitions);
    for (let p = 0; p < partitions; p++) {
      const [err, value] = replies[p] ?? [new Error('missing reply'), null];
      if (err) throw err;
      out[p] = parseLease(p, value as string | null);
    }
    return out;
  }
}
