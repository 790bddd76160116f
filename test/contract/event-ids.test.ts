// Contract suite of the EventIds port (the environment-wide register of client event ids), run on
// Redis, PostgreSQL, embedded PGlite and the in-memory twin. Invariants checked: the first claim
// binds an id to its fingerprint forever; later claims (same call, later calls, concurrent callers
// through separate adapter instances, i.e. nodes) answer that first fingerprint; environments are
// separate; answers come in item order, also past one script call's chunk.
import t, { type Test } from 'tap';
import { MemoryEventIds } from '../../src/persistence/memory/event-ids.js';
import type { EventIds } from '../../src/persistence/ports.js';
import { RedisEventIds } from '../../src/persistence/redis/redis-event-ids.js';
import { PgEventIds } from '../../src/persistence/sql/event-ids.js';
import { redisForTest, testRedisUrl } from '../helpers/redis.js';
import { sqlForTest, sqlKinds } from '../helpers/sql.js';

/** Two adapter instances over the same storage: two nodes. */
type Make = (t: Test) => Promise<[EventIds, EventIds]>;

const adapters: Array<[string, Make]> = [
  [
    'memory',
    async () => {
      const ids = new MemoryEventIds();
      return [ids, ids];
    },
  ],
  [
    'redis',
    async (t) => {
      const { redis, prefix } = redisForTest(t, 'eventids');
      return [new RedisEventIds(redis, prefix), new RedisEventIds(testRedisUrl, prefix)];
    },
  ],
  ...sqlKinds.map((kind): [string, Make] => [
    kind,
    async (t) => {
      const { sql } = await sqlForTest(t, kind);
      return [new PgEventIds(sql), new PgEventIds(sql)];
    },
  ]),
];

const maxFp = 2 ** 53 - 1;

for (const [name, make] of adapters) {
  t.test(`event ids contract: ${name}`, async (t) => {
    const [a, b] = await make(t);
    t.teardown(async () => {
      for (const ids of [a, b]) await (ids as { close?: () => Promise<void> }).close?.();
    });

    t.test('the first claim binds an id to its fingerprint for good', async (t) => {
      t.same(await a.claim('env_1', [{ id: 'order-1', fp: 11 }]), [11], 'a new id answers its own fingerprint');
      t.same(await a.claim('env_1', [{ id: 'order-1', fp: 11 }]), [11], 'a repeat of the same content');
      t.same(await b.claim('env_1', [{ id: 'order-1', fp: 22 }]), [11], 'other content, through another node, answers the first');
      t.same(await a.claim('env_1', [{ id: 'order-1', fp: 11 }]), [11], 'the losing claim changed nothing');
      t.same(await a.claim('env_1', [{ id: 'big', fp: maxFp }, { id: 'zero', fp: 0 }]), [maxFp, 0], '53-bit fingerprints round-trip exactly');
    });

    t.test('items are claimed in order; environments and near-identical ids are separate', async (t) => {
      t.same(
        await a.claim('env_2', [
          { id: 'x', fp: 1 },
          { id: 'x', fp: 2 },
          { id: 'X', fp: 3 },
          { id: 'x ', fp: 4 },
          { id: 'ж-✓', fp: 5 },
        ]),
        [1, 1, 3, 4, 5],
        'a repeated id later in one call sees the earlier item; case and spaces count',
      );
      t.same(await a.claim('env_3', [{ id: 'x', fp: 9 }]), [9], 'the same id in another environment is its own');
      t.same(await a.claim('env_2', [{ id: 'ж-✓', fp: 6 }]), [5]);
      t.same(await a.claim('env_2', []), [], 'an empty claim answers nothing');
    });

    t.test('concurrent claims of one id through two nodes agree on one winner', async (t) => {
      const answers = await Promise.all(
        Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? a : b).claim('env_race', [{ id: 'contested', fp: 100 + i }])),
      );
      const winners = new Set(answers.map((r) => r[0]));
      t.equal(winners.size, 1, 'every claimer sees the same fingerprint');
      const [winner] = winners;
      t.ok(winner! >= 100 && winner! < 120, 'the winner is one of the claimers');
    });

    t.test('a large claim answers every item in order', async (t) => {
      const items = Array.from({ length: 1200 }, (_, i) => ({ id: `bulk-${i}`, fp: i }));
      t.same(await a.claim('env_bulk', items), items.map((it) => it.fp), 'new ids');
      const again = items.map((it) => ({ id: it.id, fp: it.fp + 1 }));
      t.same(await b.claim('env_bulk', again), items.map((it) => it.fp), 'all bound to the first claim');
    });
  });
}

// PostgreSQL only (PGlite serves one connection): a claim that meets another claimer's insert not
// yet committed waits for it, skips its own insert and, its snapshot being older than that insert,
// must read the winner again after it committed.
t.test('event ids on postgres: a claim racing an uncommitted insert of the same id answers the winner', async (t) => {
  const { sql } = await sqlForTest(t, 'postgres');
  const ids = new PgEventIds(sql);
  let commit!: () => void;
  const held = new Promise<void>((r) => (commit = r));
  let inserted!: () => void;
  const didInsert = new Promise<void>((r) => (inserted = r));
  const other = sql.begin(async (tx) => {
    await tx`insert into event_ids (environment_id, client_event_id, fp) values ('env_race', 'late', 7)`;
    inserted();
    await held;
  });
  await didInsert;
  const claim = ids.claim('env_race', [{ id: 'late', fp: 9 }, { id: 'fresh', fp: 3 }]);
  await new Promise((r) => setTimeout(r, 100));
  commit();
  await other;
  t.same(await claim, [7, 3], 'the committed winner, and the other item as usual');
});
