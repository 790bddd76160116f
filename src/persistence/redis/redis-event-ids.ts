// The external EventIds: an environment's client event ids spread over 65,536 small hashes, so
// each stays in Redis's compact listpack encoding up to ~8M ids per environment. An id is stored as
// two independent 53-bit hashes (16 bits of the first pick the bucket): two different ids of one
// environment collide with probability ~n^2 / 2^107. One script call per claim
// (event-ids-claim-2.lua) with the items packed in one Buffer, answering only the items whose id
// is bound to other content or whose event was erased; ids are never deleted. Erased events live
// in a second hash per bucket (same bucket bytes and hash tag), field hash53(id) | fingerprint
// (16 bytes), value the service event id (event-ids-erase-1.lua): the claim script reads it only
// for an id it found bound to the item's own fingerprint.
import { hash53 } from '../../util/canonical-json.js';
import type { ErasedEvent, ErasedEventRecord, EventIds } from '../ports.js';
import { ScriptedRedisAdapter } from './scripted-adapter.js';

/** Bytes per packed claim item: bucket (2) | id hashes (16) | fingerprint (8). */
const itemBytes = 26;
/** Bytes per packed erase item: bucket (2) | id hash (8) | fingerprint (8). */
const erasedItemBytes = 18;
/** Items per script call: bounds the time one call holds Redis. */
const chunkMax = 1024;
const secondSeed = 0x9e3779b9;
const two32 = 4294967296;

function writeU53(buf: Buffer, value: number, at: number): void {
  buf.writeUInt32LE(value % two32, at);
  buf.writeUInt32LE(Math.floor(value / two32), at + 4);
}

function readU53(buf: Buffer): number {
  return buf.readUInt32LE(4) * two32 + buf.readUInt32LE(0);
}

export class RedisEventIds extends ScriptedRedisAdapter implements EventIds {
  async claim(environmentId: string, items: ReadonlyArray<{ id: string; fp: number }>): Promise<Array<number | ErasedEvent>> {
    const out: Array<number | ErasedEvent> = new Array(items.length);
    const prefix = this.keys.eventIds(environmentId);
    const erasedPrefix = this.keys.erasedEventIds(environmentId);
    for (let from = 0; from < items.length; from += chunkMax) {
      const count = Math.min(chunkMax, items.length - from);
      const packed = Buffer.allocUnsafe(count * itemBytes);
      for (let i = 0; i < count; i++) {
        const { id, fp } = items[from + i]!;
        const at = i * itemBytes;
        const h = hash53(id);
        packed.writeUInt16LE(h & 0xffff, at);
        writeU53(packed, h, at + 2);
        writeU53(packed, hash53(id, secondSeed), at + 10);
        writeU53(packed, fp, at + 18);
        out[from + i] = fp;
      }
      const reported = await this.redis.loyaltyEventIdsClaimBuffer(prefix, erasedPrefix, packed);
      for (let k = 0; k < reported.length; k += 2) {
        const item = reported[k] as number;
        const value = reported[k + 1] as Buffer;
        if (item > 0) out[from + item - 1] = readU53(value);
        else out[from - item - 1] = { erasedEventId: value.toString('latin1') };
      }
    }
    return out;
  }

  async erase(environmentId: string, records: ReadonlyArray<ErasedEventRecord>): Promise<void> {
    const erasedPrefix = this.keys.erasedEventIds(environmentId);
    for (let from = 0; from < records.length; from += chunkMax) {
      const count = Math.min(chunkMax, records.length - from);
      const packed = Buffer.allocUnsafe(count * erasedItemBytes);
      const eventIds: string[] = new Array(count);
      for (let i = 0; i < count; i++) {
        const { idHash, fp, eventId } = records[from + i]!;
        const at = i * erasedItemBytes;
        packed.writeUInt16LE(idHash & 0xffff, at);
        writeU53(packed, idHash, at + 2);
        writeU53(packed, fp, at + 10);
        eventIds[i] = eventId;
      }
      await this.redis.loyaltyEventIdsErase(erasedPrefix, packed, ...eventIds);
    }
  }
}
