// Contract suite of the Bus port, run against Redis pub/sub and the in-process bus. Two bus
// instances stand for two nodes (same Redis prefix / same hub). Checked: every subscriber of a
// channel gets each message, in publish order, channels are separate, and close() stops delivery.
import t, { type Test } from 'tap';
import { MemoryBus, MemoryBusHub } from '../../src/persistence/memory/bus.js';
import type { Bus } from '../../src/persistence/ports.js';
import { RedisBus } from '../../src/persistence/redis/redis-bus.js';
import { redisForTest, testRedisUrl } from '../helpers/redis.js';

interface Harness {
  a: Bus;
  b: Bus;
}

const adapters: Array<[string, (t: Test) => Promise<Harness>]> = [
  [
    'redis',
    async (t) => {
      const { redis, prefix } = redisForTest(t, 'bus');
      // One bus on a shared client, one that owns its connection (from a URL).
      const a = new RedisBus(redis, prefix);
      const b = new RedisBus(testRedisUrl, prefix);
      t.teardown(async () => {
        await a.close();
        await b.close();
      });
      return { a, b };
    },
  ],
  [
    'memory',
    async (t) => {
      const hub = new MemoryBusHub();
      const a = new MemoryBus(hub);
      const b = new MemoryBus(hub);
      t.teardown(async () => {
        await a.close();
        await b.close();
      });
      return { a, b };
    },
  ],
];

/** Resolves once `got` has `n` messages; rejects after a generous bound (delivery is async). */
async function until(got: string[], n: number, boundMs = 10_000): Promise<void> {
  const start = Date.now();
  while (got.length < n) {
    if (Date.now() - start > boundMs) throw new Error(`got ${got.length} of ${n} messages`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Gives in-flight deliveries a chance to arrive (used before asserting that nothing came). */
const settle = () => new Promise((r) => setTimeout(r, 100));

function busContract(name: string, make: (t: Test) => Promise<Harness>): void {
  t.test(`bus contract: ${name}`, async (t) => {
    t.test('every subscriber of a channel gets each message, in publish order', async (t) => {
      const { a, b } = await make(t);
      const gotA: string[] = [];
      const gotB: string[] = [];
      const gotB2: string[] = [];
      await a.subscribe('invalidate', (m) => gotA.push(m));
      await b.subscribe('invalidate', (m) => gotB.push(m));
      await b.subscribe('invalidate', (m) => gotB2.push(m));
      const sent = Array.from({ length: 20 }, (_, i) => `env_${i}:ü✓`);
      for (const m of sent) await a.publish('invalidate', m);
      await until(gotA, 20);
      await until(gotB, 20);
      await until(gotB2, 20);
      t.same(gotA, sent, 'the publisher itself is a subscriber too');
      t.same(gotB, sent);
      t.same(gotB2, sent, 'two handlers on one bus both get it');
    });

    t.test('channels are separate', async (t) => {
      const { a, b } = await make(t);
      const revocations: string[] = [];
      const invalidations: string[] = [];
      await b.subscribe('revoke', (m) => revocations.push(m));
      await b.subscribe('invalidate', (m) => invalidations.push(m));
      await a.publish('revoke', 'key_1');
      await a.publish('nobody-listens', 'x');
      await until(revocations, 1);
      await settle();
      t.same(revocations, ['key_1']);
      t.same(invalidations, []);
    });

    t.test('after close a bus gets nothing more; the other keeps working', async (t) => {
      const { a, b } = await make(t);
      const gotA: string[] = [];
      const gotB: string[] = [];
      await a.subscribe('c', (m) => gotA.push(m));
      await b.subscribe('c', (m) => gotB.push(m));
      await b.close();
      await a.publish('c', 'm1');
      await until(gotA, 1);
      await settle();
      t.same(gotA, ['m1']);
      t.same(gotB, []);
      await t.rejects(b.publish('c', 'late'));
    });

    t.test('a throwing handler does not stop delivery to the others', async (t) => {
      const { a, b } = await make(t);
      const got: string[] = [];
      await b.subscribe('c', () => {
        throw new Error('handler bug');
      });
      await b.subscribe('c', (m) => got.push(m));
      await a.publish('c', 'one');
      await a.publish('c', 'two');
      await until(got, 2);
      t.same(got, ['one', 'two']);
    });
  });
}

for (const [name, make] of adapters) busContract(name, make);

t.test('redis bus: different prefixes do not hear each other', async (t) => {
  const one = redisForTest(t, 'bus');
  const two = redisForTest(t, 'bus');
  const a = new RedisBus(one.redis, one.prefix);
  const b = new RedisBus(two.redis, two.prefix);
  t.teardown(async () => {
    await a.close();
    await b.close();
  });
  const got: string[] = [];
  const mine: string[] = [];
  await b.subscribe('c', (m) => got.push(m));
  await a.subscribe('c', (m) => mine.push(m));
  await a.publish('c', 'hello');
  await until(mine, 1);
  await settle();
  t.same(got, []);
});
