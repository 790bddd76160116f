// Contract suite of the EventIds port (the environment-wide register of client event ids), run on
// Redis, PostgreSQL, embedded PGlite and the in-memory twin. Invariants checked: the first claim
// binds an id to its fingerprint forever; later claims (same call, later calls, concurrent callers
// through separate adapter instances, i.e. nodes) answer that first fingerprint; environments are
// separate; answers come in item order, also past one script call's chunk. Erased events: a claim
// of an id bound before the call to the item's own fingerprint answers the erased event's service
// id once (hash53(id), fingerprint) is erased; other content stays a conflict; the binding claim of
// an id never answers erased; erase is idempotent (the first service id stays).
import t, { type Test } from 'tap';
import { MemoryEventIds } from '../../src/persistence/memory/event-ids.js';
import type { EventIds } from '../../src/persistence/ports.js';
import { RedisEventIds } from '../../src/persistence/redis/redis-event-ids.js';
import { PgEventIds } from '../../src/persistence/sql/event-ids.js';
import { hash53 } from '../../src/util/canonical-json.js';
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
      const winners = new Set(answers.map((r) => r[0] as number));
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

    const erased = (id: string, fp: number, eventId: string) => ({ idHash: hash53(id), fp, eventId });

    t.test("an erased customer's event answers its service id to a claim of the same content", async (t) => {
      t.same(await a.claim('env_er', [{ id: 'gone-1', fp: 7 }, { id: 'kept-1', fp: 8 }]), [7, 8]);
      await a.erase('env_er', [erased('gone-1', 7, 'evt_01JZERASED0000000000001')]);
      t.same(await a.claim('env_er', [{ id: 'gone-1', fp: 7 }]), [{ erasedEventId: 'evt_01JZERASED0000000000001' }], 'the same content: erased');
      t.same(await b.claim('env_er', [{ id: 'gone-1', fp: 7 }]), [{ erasedEventId: 'evt_01JZERASED0000000000001' }], 'also through another node');
      t.same(await a.claim('env_er', [{ id: 'gone-1', fp: 9 }]), [7], 'other content stays a conflict');
      t.same(await a.claim('env_er', [{ id: 'kept-1', fp: 8 }, { id: 'new-1', fp: 7 }]), [8, 7], 'other ids, bound or new, are unaffected');
      t.same(
        await a.claim('env_er', [{ id: 'gone-1', fp: 9 }, { id: 'gone-1', fp: 7 }, { id: 'new-2', fp: 1 }]),
        [7, { erasedEventId: 'evt_01JZERASED0000000000001' }, 1],
        'items of one call in order',
      );
      t.same(await a.claim('env_er_other', [{ id: 'gone-1', fp: 7 }, { id: 'gone-1', fp: 7 }]), [7, 7], 'another environment is its own');
    });

    t.test('erase is idempotent: the first service id stays', async (t) => {
      t.same(await a.claim('env_er2', [{ id: 'twice', fp: 3 }]), [3]);
      await a.erase('env_er2', [erased('twice', 3, 'evt_01JZERASED0000000000002')]);
      await b.erase('env_er2', [erased('twice', 3, 'evt_01JZERASED0000000000002'), erased('twice', 3, 'evt_01JZOTHER00000000000003')]);
      await a.erase('env_er2', []);
      t.same(await a.claim('env_er2', [{ id: 'twice', fp: 3 }]), [{ erasedEventId: 'evt_01JZERASED0000000000002' }]);
    });

    t.test('an erased event whose id was never claimed: the binding claim records it, later claims answer erased', async (t) => {
      await a.erase('env_er3', [erased('unclaimed', 5, 'evt_01JZERASED0000000000004')]);
      t.same(await a.claim('env_er3', [{ id: 'unclaimed', fp: 5 }, { id: 'unclaimed', fp: 5 }]), [5, 5], 'the call that binds the id answers its fingerprint');
      t.same(await a.claim('env_er3', [{ id: 'unclaimed', fp: 5 }]), [{ erasedEventId: 'evt_01JZERASED0000000000004' }], 'bound before: erased');
    });

    t.test('a large erase and claim answer every item in order', async (t) => {
      const items = Array.from({ length: 1200 }, (_, i) => ({ id: `gone-bulk-${i}`, fp: i }));
      await a.claim('env_er_bulk', items);
      const eventIdOf = (i: number) => `evt_01JZBULK${String(i).padStart(13, '0')}`;
      await a.erase('env_er_bulk', items.filter((_, i) => i % 2 === 0).map((it, k) => erased(it.id, it.fp, eventIdOf(2 * k))));
      t.same(
        await b.claim('env_er_bulk', items),
        items.map((it, i) => (i % 2 === 0 ? { erasedEventId: eventIdOf(i) } : it.fp)),
        'the erased half answers its event ids',
      );
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
  let inserted!: (pid: number) => void;
  const didInsert = new Promise<number>((r) => (inserted = r));
  const other = sql.begin(async (tx) => {
    const [me] = await tx`select pg_backend_pid() as pid`;
    await tx`insert into event_ids (environment_id, client_event_id, fp) values ('env_race', 'late', 7)`;
    inserted(Number(me!.pid));
    await held;
  });
  const otherPid = await didInsert;
  const claim = ids.claim('env_race', [{ id: 'late', fp: 9 }, { id: 'fresh', fp: 3 }]);
  // Committed only once the claim waits on the insert (a slow box may take a while to send it).
  const waiting = async () => (await sql`select count(*)::int as n from pg_stat_activity where ${otherPid}::int = any(pg_blocking_pids(pid))`)[0]!.n as number;
  for (const until = Date.now() + 10_000; (await waiting()) === 0 && Date.now() < until; ) await new Promise((r) => setTimeout(r, 10));
  t.equal(await waiting(), 1, 'the claim waits on the uncommitted insert');
  commit();
  await other;
  t.same(await claim, [7, 3], 'the committed winner, and the other item as usual');
});
