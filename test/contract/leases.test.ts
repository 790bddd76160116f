// Contract suite of the Leases port, run against Redis and the in-memory adapter. Time moves only
// through the harness: a fake clock for memory, real waiting for Redis (its own clock expires keys).
// Invariants checked: one holder at a time, epochs strictly increase per partition (also after
// expiry and release), renew/release act only for the exact holder and epoch.
import t, { type Test } from 'tap';
import { MemoryLeases } from '../../src/persistence/memory/leases.js';
import type { Leases } from '../../src/persistence/ports.js';
import { RedisLeases } from '../../src/persistence/redis/redis-leases.js';
import { redisForTest } from '../helpers/redis.js';

interface Harness {
  leases: Leases;
  /** Lets at least `ms` pass for the adapter's clock. */
  advance(ms: number): Promise<void>;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

const adapters: Array<[string, (t: Test) => Promise<Harness>]> = [
  [
    'redis',
    async (t) => {
      const { redis, prefix } = redisForTest(t, 'leases');
      return { leases: new RedisLeases(redis, prefix), advance: sleep };
    },
  ],
  [
    'memory',
    async () => {
      let now = 1_000_000;
      return {
        leases: new MemoryLeases(() => now),
        advance: async (ms) => {
          now += ms;
        },
      };
    },
  ],
];

const long = 60_000;

/**
 * Ttls and waits in ms, scaled: on Redis time is real, and a loaded box that stalls this process
 * for a few hundred ms between two steps must not move a lease past its ttl where the
 * test says it is held. The memory adapter's clock is moved by hand, so the scale costs it nothing.
 */
const ms = (n: number) => n * 5;

function leasesContract(name: string, make: (t: Test) => Promise<Harness>): void {
  t.test(`leases contract: ${name}`, async (t) => {
    t.test('one holder at a time; list shows it', async (t) => {
      const { leases } = await make(t);
      t.same(await leases.list(3), [null, null, null], 'all free at first');
      const e = await leases.acquire(1, 'node-a', long);
      t.ok(e !== null && e >= 1, 'a free partition is acquired with an epoch >= 1');
      t.equal(await leases.acquire(1, 'node-b', long), null, 'another node gets null while it is held');
      t.same(await leases.list(3), [null, { partition: 1, nodeId: 'node-a', epoch: e }, null]);
      const other = await leases.acquire(2, 'node-b', long);
      t.ok(other !== null, 'partitions are independent');
      t.same(await leases.list(3), [
        null,
        { partition: 1, nodeId: 'node-a', epoch: e },
        { partition: 2, nodeId: 'node-b', epoch: other },
      ]);
    });

    t.test('the holder re-acquiring its own lease gets a greater epoch', async (t) => {
      const { leases } = await make(t);
      const e1 = (await leases.acquire(0, 'node:with:colons', long))!;
      const e2 = await leases.acquire(0, 'node:with:colons', long);
      t.ok(e2 !== null && e2 > e1);
      t.same(await leases.list(1), [{ partition: 0, nodeId: 'node:with:colons', epoch: e2 }]);
      t.notOk(await leases.renew(0, 'node:with:colons', e1, long), 'the older epoch is no longer the lease');
    });

    t.test('after expiry another node acquires with a strictly greater epoch; the old holder is out', async (t) => {
      const { leases, advance } = await make(t);
      const ea = (await leases.acquire(4, 'node-a', ms(50)))!;
      t.ok(await leases.renew(4, 'node-a', ea, ms(50)), 'renew while held');
      await advance(ms(120));
      t.same(await leases.list(5), [null, null, null, null, null], 'an expired lease is listed as free');
      const eb = await leases.acquire(4, 'node-b', long);
      t.ok(eb !== null && eb > ea, `epoch ${eb} > ${ea}`);
      t.notOk(await leases.renew(4, 'node-a', ea, long), 'renew is false after losing the lease');
      await leases.release(4, 'node-a', ea);
      t.same((await leases.list(5))[4], { partition: 4, nodeId: 'node-b', epoch: eb }, 'a late release frees nothing');
    });

    t.test('an expired lease that nobody took is not renewable either', async (t) => {
      const { leases, advance } = await make(t);
      const e = (await leases.acquire(0, 'node-a', ms(50)))!;
      await advance(ms(120));
      t.notOk(await leases.renew(0, 'node-a', e, long));
      const again = await leases.acquire(0, 'node-a', long);
      t.ok(again !== null && again > e, 'epochs grow even though the lease key expired');
    });

    t.test('renew extends the lease and is refused for a wrong node or epoch', async (t) => {
      const { leases, advance } = await make(t);
      const e = (await leases.acquire(2, 'node-a', ms(300)))!;
      t.notOk(await leases.renew(2, 'node-b', e, ms(300)), 'other node');
      t.notOk(await leases.renew(2, 'node-a', e + 1, ms(300)), 'other epoch');
      await advance(ms(200));
      t.ok(await leases.renew(2, 'node-a', e, ms(300)));
      await advance(ms(200));
      t.equal(await leases.acquire(2, 'node-b', long), null, 'still held past the ttl of the acquire: the renew extended it');
      t.same((await leases.list(3))[2], { partition: 2, nodeId: 'node-a', epoch: e });
    });

    t.test('renewMany answers per partition, in order, and extends only what the node still holds', async (t) => {
      const { leases, advance } = await make(t);
      t.same(await leases.renewMany('node-a', [], ms(300)), [], 'nothing to renew');
      const e0 = (await leases.acquire(0, 'node-a', ms(300)))!;
      const e1 = (await leases.acquire(1, 'node-a', ms(300)))!;
      const e2 = (await leases.acquire(2, 'node-b', ms(300)))!;
      const e3 = (await leases.acquire(3, 'node-a', ms(50)))!;
      await advance(ms(120));
      const ok = await leases.renewMany(
        'node-a',
        [
          { partition: 1, epoch: e1 },
          { partition: 0, epoch: e0 + 1 },
          { partition: 2, epoch: e2 },
          { partition: 3, epoch: e3 },
          { partition: 0, epoch: e0 },
        ],
        ms(300),
      );
      t.same(ok, [true, false, false, false, true], 'held: true; wrong epoch, another node, expired: false');
      await advance(ms(250));
      const held = await leases.list(4);
      t.same(held[0], { partition: 0, nodeId: 'node-a', epoch: e0 }, 'renewed: still held past the ttl of the acquire');
      t.same(held[1], { partition: 1, nodeId: 'node-a', epoch: e1 });
      t.equal(held[2], null, "another node's lease was not extended for node-a");
      t.equal(held[3], null, 'an expired lease stays expired');
    });

    t.test('release frees the lease at once, only for the exact holder', async (t) => {
      const { leases } = await make(t);
      const e = (await leases.acquire(3, 'node-a', long))!;
      await leases.release(3, 'node-b', e);
      await leases.release(3, 'node-a', e + 1);
      t.equal(await leases.acquire(3, 'node-b', long), null, 'wrong node or epoch releases nothing');
      await leases.release(3, 'node-a', e);
      t.same(await leases.list(4), [null, null, null, null]);
      const eb = await leases.acquire(3, 'node-b', long);
      t.ok(eb !== null && eb > e);
    });

    t.test('epochs strictly increase over many acquire/release cycles', async (t) => {
      const { leases } = await make(t);
      let last = 0;
      let increasing = true;
      for (let i = 0; i < 30; i++) {
        const node = i % 2 === 0 ? 'node-a' : 'node-b';
        const e = await leases.acquire(7, node, long);
        if (e === null || e <= last) increasing = false;
        else last = e;
        await leases.release(7, node, e ?? 0);
      }
      t.ok(increasing);
      t.ok(last >= 30);
    });

    t.test('concurrent acquires: exactly one node wins', async (t) => {
      const { leases } = await make(t);
      const results = await Promise.all(
        Array.from({ length: 10 }, (_, i) => leases.acquire(9, `node-${i}`, long)),
      );
      t.equal(results.filter((r) => r !== null).length, 1);
    });
  });
}

for (const [name, make] of adapters) leasesContract(name, make);

t.test('redis leases: renewMany is one script call for every partition', async (t) => {
  const { redis, prefix } = redisForTest(t, 'leases');
  const leases = new RedisLeases(redis, prefix);
  const held = await Promise.all(Array.from({ length: 64 }, async (_, p) => ({ partition: p, epoch: (await leases.acquire(p, 'node-a', long))! })));
  // A first call loads the script into a fresh Redis (EVALSHA, then EVAL on NOSCRIPT).
  await leases.renewMany('node-a', held.slice(0, 1), long);
  const sent: string[] = [];
  const real = redis.sendCommand.bind(redis);
  redis.sendCommand = ((cmd: { name: string }, stream?: unknown) => {
    sent.push(cmd.name);
    return real(cmd as Parameters<typeof real>[0], stream as Parameters<typeof real>[1]);
  }) as typeof redis.sendCommand;
  t.teardown(() => {
    redis.sendCommand = real;
  });
  const ok = await leases.renewMany('node-a', held, long);
  redis.sendCommand = real;
  t.equal(sent.length, 1, `one command for 64 partitions (sent: ${sent.join(', ')})`);
  t.ok(ok.length === 64 && ok.every(Boolean), 'every lease renewed');
});
