// The external Locks: one string key per lock name (keys.lock) holding the current holder's
// random token with a PX ttl, so Redis itself expires the lock of a holder that died. Acquire is
// SET NX PX; release is the compare-and-delete script leases use too (delete-if-equal-1.lua).
// Never delete a lock key without comparing the token first.
import { randomUUID } from 'node:crypto';
import type { Locks } from '../ports.js';
import { ScriptedRedisAdapter } from './scripted-adapter.js';

export class RedisLocks extends ScriptedRedisAdapter implements Locks {
  async acquire(name: string, ttlMs: number): Promise<string | null> {
    const token = randomUUID();
    return (await this.redis.set(this.keys.lock(name), token, 'PX', ttlMs, 'NX')) === 'OK' ? token : null;
  }

  async release(name: string, token: string): Promise<boolean> {
    return (await this.redis.loyaltyDeleteIfEqual(this.keys.lock(name), token)) === 1;
  }
}
