// The external Locks: one string key per lock name (keys.lock) holding the current holder's
// random token with a PX ttl, so Redis itself expires the lock of a holder that died. Acquire is
// SET NX PX, release a compare-and-delete, both Lua scripts. Never delete a lock key without
// comparing the token first.
import { randomUUID } from 'node:crypto';
import { createKeys, type Keys } from '../keys.js';
import type { Locks } from '../ports.js';
import { connect, quitQuietly, type RedisSource } from './connection.js';
import { type ScriptedRedis, withScripts } from './scripts.js';

export class RedisLocks implements Locks {
  private readonly redis: ScriptedRedis;
  private readonly owned: boolean;
  private readonly keys: Keys;

  constructor(source: RedisSource, prefix: string) {
    const { redis, owned } = connect(source);
    this.redis = withScripts(redis);
    this.owned = owned;
    this.keys = createKeys(prefix);
  }

  async acquire(name: string, ttlMs: number): Promise<string | null> {
    const token = randomUUID();
    return (await this.redis.loyaltyLockAcquire(this.keys.lock(name), token, ttlMs)) === 1 ? token : null;
  }

  async release(name: string, token: string): Promise<boolean> {
    return (await this.redis.loyaltyLockRelease(this.keys.lock(name), token)) === 1;
  }

  /** Quits the client only if this adapter created it. */
  async close(): Promise<void> {
    if (this.owned) await quitQuietly(this.redis);
  }
}
