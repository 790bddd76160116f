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

/**
 * Deletes every key under the prefix (SCAN, never KEYS). Keys are handled as bytes: the event-id
 * register's keys end in raw bytes, which a string round trip would turn into other names (they
 * were left behind by every test run before).
 */
export async function deleteKeysUnder(redis: Redis, prefix: string): Promise<number> {
  let deleted = 0;
  let cursor = '0';
  do {
    const [next, keys] = await redis.scanBuffer(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = String(next);
    if (keys.length > 0) deleted += await redis.unlink(...keys);
  } while (cursor !== '0');
  return deleted;
}

export function redisForTest(t: Teardown, label?: string): { redis: Redis; prefix: string } {
  const redis = createRedis(testRedisUrl);
  const prefix = uniquePrefix(label);
  t.teardown(async () => {
    await deleteKeysUnder(redis, prefix);
    await redis.quit();
  });
  return { redis, prefix };
}
