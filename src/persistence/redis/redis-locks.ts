// The external Locks: one string key per lock name (keys.lock) holding the current holder's
// random token with a PX ttl, so Redis itself expires the lock of a holder that died. Acquire is
// SET NX PX; release and extend are the compare-and-delete and compare-and-pexpire scripts leases
// use too (delete-if-equal-1.lua, pexpire-if-equal-1.lua). Never delete a lock key or touch its
// ttl without comparing the token first.
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

  async extend(name: string, token: string, ttlMs: number): Promise<boolean> {
    return (await this.redis.loyaltyPexpireIfEqual(this.keys.lock(name), token, ttlMs)) === 1;
  }
}
