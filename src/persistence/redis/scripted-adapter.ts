// What every script-running Redis adapter shares: its client (handed in and shared, or created from
// a URL and owned), the scripts registered on it, the key builder of its prefix, and a close() that
// quits only a client the adapter created (connection.ts).
import { createKeys, type Keys } from '../keys.js';
import { connect, quitQuietly, type RedisSource } from './connection.js';
import { type ScriptedRedis, withScripts } from './scripts.js';

export abstract class ScriptedRedisAdapter {
  protected readonly redis: ScriptedRedis;
  protected readonly keys: Keys;
  private readonly owned: boolean;

  constructor(source: RedisSource, prefix: string) {
    const { redis, owned } = connect(source);
    this.redis = withScripts(redis);
    this.owned = owned;
    this.keys = createKeys(prefix);
  }

  /** Quits the client only if this adapter created it. */
  async close(): Promise<void> {
    if (this.owned) await quitQuietly(this.redis);
  }
}
