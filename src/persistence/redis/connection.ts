// Who owns a Redis connection: adapters accept either a shared ioredis client (the caller owns it
// and closes it) or a URL (the adapter creates the client and quits it in close()).
// Clients we create send each command at once (no auto-pipelining): the engine already gathers a
// tick's appends of every partition into one script call (group commit), so ioredis's pipeline
// per tick only added a deferral and its bookkeeping (A/B: 100-event batches 28.7 -> 25.0 us of
// server CPU per event, docs/bench/2026-11-25-snapshots-redis.md). ioredis still pipelines on the
// connection: a command never waits for the previous reply. Never quit a client we were handed.
import { Redis } from 'ioredis';

export type RedisSource = Redis | string;

export interface Connection {
  redis: Redis;
  /** True when we created the client and must quit it. */
  owned: boolean;
}

/** A client for the hot path. Pass one of these to several adapters to share the connection. */
export function createRedis(url: string): Redis {
  return new Redis(url, { enableAutoPipelining: false, lazyConnect: false });
}

export function connect(source: RedisSource): Connection {
  return typeof source === 'string' ? { redis: createRedis(source), owned: true } : { redis: source, owned: false };
}

/** Quits a client, falling back to disconnect when it is not connected (quit would wait). */
export async function quitQuietly(redis: Redis): Promise<void> {
  if (redis.status === 'end') return;
  if (redis.status !== 'ready') {
    redis.disconnect();
    return;
  }
  try {
    await redis.quit();
  } catch {
    redis.disconnect();
  }
}
