// The external Journal: one Redis stream per partition, appended by ONE script call per flush
// (append-2.lua) that checks the lease epoch and XADDs atomically, so a fenced node appends nothing.
// Invariants: offsets are stream ids (strictly increasing per partition, also across trims since
// the stream keeps its last id); payloads travel as binary Buffers, never as strings.
// Never build keys here (keys.ts), never read a payload as UTF-8.
import { FencedError, type Journal, type JournalEntry, type Offset, offsetZero } from '../ports.js';
import { ScriptedRedisAdapter } from './scripted-adapter.js';

/** A Buffer view of the bytes without copying them (ioredis sends only Buffers as binary). */
function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** The smallest stream id greater than `offset` (for XTRIM MINID, which keeps ids >= MINID). */
function nextId(offset: Offset): string {
  const dash = offset.indexOf('-');
  const ms = BigInt(dash < 0 ? offset : offset.slice(0, dash));
  const seq = dash < 0 ? 0n : BigInt(offset.slice(dash + 1));
  return seq === 0xffff_ffff_ffff_ffffn ? `${ms + 1n}-0` : `${ms}-${seq + 1n}`;
}

type RawEntry = [Buffer, Buffer[]];

export class RedisJournal extends ScriptedRedisAdapter implements Journal {
  /** Key strings per partition, built once: append is the hot path. */
  private readonly streamKeys: string[] = [];
  private readonly leaseKeys: string[] = [];

  /**
   * One script call. The payload is sent from the caller's memory without a copy (the socket may
   * queue it), so the caller must not change it until the promise settles.
   */
  async append(partition: number, epoch: number, payload: Uint8Array): Promise<Offset> {
    const stream = (this.streamKeys[partition] ??= this.keys.partitionStream(partition));
    const lease = (this.leaseKeys[partition] ??= this.keys.partitionLease(partition));
    try {
      return await this.redis.loyaltyJournalAppend(stream, lease, epoch, asBuffer(payload));
    } catch (err) {
      if (err instanceof Error && err.message.includes('FENCED')) throw new FencedError(partition, epoch);
      throw err;
    }
  }

  /** One script call for every item: the cross-partition group commit of a tick. */
  async appendMany(
    items: ReadonlyArray<{ partition: number; epoch: number; payload: Uint8Array }>,
  ): Promise<Array<Offset | FencedError>> {
    if (items.length === 0) return [];
    const keys: string[] = new Array(items.length * 2);
    const args: Array<number | Buffer> = new Array(items.length * 2);
    for (let i = 0; i < items.length; i++) {
      const it = items[i]!;
      keys[2 * i] = this.streamKeys[it.partition] ??= this.keys.partitionStream(it.partition);
      keys[2 * i + 1] = this.leaseKeys[it.partition] ??= this.keys.partitionLease(it.partition);
      args[2 * i] = it.epoch;
      args[2 * i + 1] = asBuffer(it.payload);
    }
    const ids = await this.redis.loyaltyJournalAppendMany(keys.length, ...keys, ...args);
    return ids.map((id, i) => (id === '' ? new FencedError(items[i]!.partition, items[i]!.epoch) : id));
  }

  async read(partition: number, after: Offset, count: number): Promise<JournalEntry[]> {
    if (count <= 0) return [];
    const start = after === offsetZero ? '-' : `(${after}`;
    const raw = (await this.redis.xrangeBuffer(
      this.keys.partitionStream(partition),
      start,
      '+',
      'COUNT',
      count,
    )) as unknown as RawEntry[];
    const out: JournalEntry[] = new Array(raw.length);
    for (let i = 0; i < raw.length; i++) {
      const [id, fields] = raw[i]!;
      const payload = fields[1];
      if (!payload) throw new Error(`journal partition ${partition}: entry ${id.toString()} has no payload field`);
      out[i] = { offset: id.toString('latin1'), payload };
    }
    return out;
  }

  async trim(partition: number, upTo: Offset): Promise<void> {
    if (upTo === offsetZero) return;
    // Exact trim (no `~`): callers and tests may rely on entries <= upTo being gone at once.
    await this.redis.xtrim(this.keys.partitionStream(partition), 'MINID', nextId(upTo));
  }

  async last(partition: number): Promise<Offset> {
    const raw = await this.redis.xrevrange(this.keys.partitionStream(partition), '+', '-', 'COUNT', 1);
    return raw[0]?.[0] ?? offsetZero;
  }
}
