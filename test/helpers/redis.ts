// Real Redis for tests: redisForTest(t) hands out a client (auto-pipelining on, as in production)
// and a unique key prefix; the test's teardown deletes every `prefix*` key (SCAN) and quits.
// A test must use only keys under its prefix, so parallel test files never see each other.
// Never FLUSHDB here: other test files share the server.
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { createRedis } from '../../src/persistence/redis/connection.js';

export const testRedisUrl = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

interface Teardown {
  teardown(fn: () => unknown): void;
}

export function uniquePrefix(label = 't'): string {
  return `test:${label}:${Date.now().toString(36)}${randomBytes(4).toString('hex')}`;
}

/** Every key under the prefix (SCAN, never KEYS). */
export async function keysUnder(redis: Redis, prefix: string): Promise<string[]> {
  const found: string[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    found.push(...keys);
    cursor = next;
  } while (cursor !== '0');
  return found;
}

export function redisForTest(t: Teardown, label?: string): { redis: Redis; prefix: string } {
  const redis = createRedis(testRedisUrl);
  const prefix = uniquePrefix(label);
  t.teardown(async () => {
    const keys = await keysUnder(redis, prefix);
    for (let i = 0; i < keys.length; i += 500) await redis.unlink(...keys.slice(i, i + 500));
    await redis.quit();
  });
  return { redis, prefix };
}
