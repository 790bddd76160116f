// The tests' own cleanup: every key under a test's prefix goes at teardown, also keys whose names
// end in raw bytes (the event-id register's), which a string round trip would rename and miss.
import t from 'tap';
import { createRedis } from '../../src/persistence/redis/connection.js';
import { deleteKeysUnder, testRedisUrl, uniquePrefix } from '../helpers/redis.js';

t.test('deleteKeysUnder removes text and binary key names under the prefix only', async (t) => {
  const redis = createRedis(testRedisUrl);
  t.teardown(() => redis.quit());
  const prefix = uniquePrefix('cleanup');
  const other = uniquePrefix('cleanup-other');
  const binary = Buffer.concat([Buffer.from(`${prefix}:{env}:eids:`), Buffer.from([0xff, 0x00, 0x9c])]);
  await redis.set(`${prefix}:plain`, '1');
  await redis.hset(binary, 'f', '1');
  await redis.set(`${other}:kept`, '1');
  t.equal(await deleteKeysUnder(redis, prefix), 2, 'both keys under the prefix deleted');
  t.equal(await redis.exists(binary), 0, 'the binary-named key is gone');
  t.equal(await redis.get(`${other}:kept`), '1', 'a key under another prefix is kept');
  await deleteKeysUnder(redis, other);
});
