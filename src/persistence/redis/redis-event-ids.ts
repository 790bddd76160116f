// The external EventIds: an environment's client event ids spread over 65,536 small hashes
// (keys.eventIds), so each stays in Redis's compact listpack encoding up to ~8M ids per
// environment. An id is stored as 106 bits of two independent hashes (16 pick the bucket, 90 name
// the field): two different ids of one environment collide with probability ~n^2 / 2^107.
// One script call per claim (event-ids-claim-n.lua), chunked; ids are never deleted.
import { hash53 } from '../../util/canonical-json.js';
import { createKeys, type Keys } from '../keys.js';
import type { EventIds } from '../ports.js';
import { connect, quitQuietly, type RedisSource } from './connection.js';
import { type ScriptedRedis, withScripts } from './scripts.js';

const buckets = 65_536;
/** Items per script call: bounds the arguments of one EVALSHA. */
const chunkMax = 512;
const secondSeed = 0x9e3779b9;

export class RedisEventIds implements EventIds {
  private readonly redis: ScriptedRedis;
  private readonly owned: boolean;
  private readonly keys: Keys;

  constructor(source: RedisSource, prefix: string) {
    const { redis, owned } = connect(source);
    this.redis = withScripts(redis);
    this.owned = owned;
    this.keys = createKeys(prefix);
  }

  async claim(environmentId: string, items: ReadonlyArray<{ id: string; fp: number }>): Promise<number[]> {
    const out: number[] = [];
    for (let from = 0; from < items.length; from += chunkMax) {
      const chunk = items.slice(from, from + chunkMax);
      const keys: string[] = new Array(chunk.length);
      const args: string[] = new Array(chunk.length * 2);
      for (let i = 0; i < chunk.length; i++) {
        const { id, fp } = chunk[i]!;
        const h = hash53(id);
        keys[i] = this.keys.eventIds(environmentId, h % buckets);
        args[2 * i] = `${Math.floor(h / buckets).toString(36)}.${hash53(id, secondSeed).toString(36)}`;
        args[2 * i + 1] = String(fp);
      }
      const bound = await this.redis.loyaltyEventIdsClaim(keys.length, ...keys, ...args);
      for (const b of bound) out.push(Number(b));
    }
    return out;
  }

  /** Quits the client only if this adapter created it. */
  async close(): Promise<void> {
    if (this.owned) await quitQuietly(this.redis);
  }
}
