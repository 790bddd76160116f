// SnapshotStore contract, run against real PostgreSQL and embedded PGlite: upsert/load, routing
// keys (including a key moved between customers in one save), forward-only checkpoints in offset
// order (not string order), and atomicity (a failed save leaves nothing behind).
// Also the embedded server itself: startup parameters honoured, sessions not leaking, data kept on restart.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { startEmbeddedPostgres } from '../../src/persistence/embedded-pg.js';
import { compareOffsets, type KeyRow, type SnapshotRow } from '../../src/persistence/ports.js';
import { migrate, openSql } from '../../src/persistence/sql/db.js';
import { MemorySnapshotStore } from '../../src/persistence/memory/snapshot-store.js';
import { PgSnapshotStore } from '../../src/persistence/sql/snapshot-store.js';
import { sqlForTest, sqlKinds, uniqueSchema } from '../helpers/sql.js';

const bytes = (...xs: number[]) => new Uint8Array(xs);
const snap = (customerId: string, partition: number, payload: Uint8Array, environmentId = 'env_a'): SnapshotRow => ({
  environmentId,
  customerId,
  partition,
  payload,
});
const key = (k: string, customerId: string, partition = 1, environmentId = 'env_a'): KeyRow => ({
  environmentId,
  key: k,
  customerId,
  partition,
});
const byCustomer = (a: SnapshotRow, b: SnapshotRow) => a.customerId.localeCompare(b.customerId);
const plain = (rows: SnapshotRow[]) => rows.sort(byCustomer).map((r) => ({ ...r, payload: [...r.payload] }));

for (const kind of [...sqlKinds, 'memory'] as const) {
  t.test(`snapshot store on ${kind}`, async (t) => {
    const memory = kind === 'memory' ? new MemorySnapshotStore() : null;
    const sql = kind === 'memory' ? null : (await sqlForTest(t, kind)).sql;
    const store = memory ?? new PgSnapshotStore(sql!);
    /** PostgreSQL refuses NUL in text (the tests' way to make a save fail); the twin is told to fail. */
    const breakNextSave = () => {
      if (memory) memory.failNextSave = true;
    };

    t.test('a fresh store knows nothing', async (t) => {
      t.equal(await store.checkpoint(7), '0');
      t.same(await store.load('env_a', ['nobody']), []);
      t.same(await store.lookupKeys('env_a', ['nothing']), []);
      t.same(await store.load('env_a', []), []);
      t.same(await store.lookupKeys('env_a', []), []);
    });

    t.test('save then load: payload bytes round trip, upserts replace, environments are separate', async (t) => {
      const all = new Uint8Array(256).map((_, i) => i);
      await store.save(1, '100-0', [snap('c1', 1, all), snap('c2', 1, bytes()), snap('c1', 1, bytes(9), 'env_b')], [], []);
      t.same(plain(await store.load('env_a', ['c1', 'c2', 'c3'])), [
        { environmentId: 'env_a', customerId: 'c1', partition: 1, payload: [...all] },
        { environmentId: 'env_a', customerId: 'c2', partition: 1, payload: [] },
      ]);
      const loaded = await store.load('env_a', ['c1']);
      t.ok(loaded[0]?.payload instanceof Uint8Array, 'payload is a Uint8Array');

      await store.save(1, '101-0', [snap('c1', 1, bytes(1, 2, 3))], [], []);
      t.same(plain(await store.load('env_a', ['c1'])), [snap('c1', 1, bytes(1, 2, 3))].map((r) => ({ ...r, payload: [1, 2, 3] })));
      t.same(plain(await store.load('env_b', ['c1', 'c2'])), [{ environmentId: 'env_b', customerId: 'c1', partition: 1, payload: [9] }]);
    });

    t.test('the same customer twice in one save: the last row wins', async (t) => {
      await store.save(2, '5-0', [snap('dup', 2, bytes(1)), snap('dup', 2, bytes(2))], [key('k-dup', 'x', 2), key('k-dup', 'dup', 2)], []);
      t.same(plain(await store.load('env_a', ['dup'])).map((r) => r.payload), [[2]]);
      t.same(await store.lookupKeys('env_a', ['k-dup']), [key('k-dup', 'dup', 2)]);
    });

    t.test('keys: upsert, lookup, remove, and a key moved between customers in one save', async (t) => {
      const odd = ['ext-1', 'NULL', 'a"b\\c,{}', 'ünï cødé', ''];
      await store.save(3, '10-0', [], odd.map((k, i) => key(k, `c${i}`, 3)), []);
      const found = await store.lookupKeys('env_a', [...odd, 'missing']);
      t.same(
        found.sort((a, b) => a.key.localeCompare(b.key)),
        odd.map((k, i) => key(k, `c${i}`, 3)).sort((a, b) => a.key.localeCompare(b.key)),
        'odd key strings survive the array parameters',
      );
      t.same(await store.lookupKeys('env_b', odd), [], 'keys are per environment');

      // A merge: 'ext-1' leaves c0 (keysRemoved) and joins c9 (keys) in the same save.
      await store.save(3, '11-0', [], [key('ext-1', 'c9', 4)], [{ environmentId: 'env_a', key: 'ext-1' }, { environmentId: 'env_a', key: 'NULL' }]);
      t.same(await store.lookupKeys('env_a', ['ext-1', 'NULL']), [key('ext-1', 'c9', 4)]);
    });

    t.test('checkpoint only moves forward, in offset order rather than string order', async (t) => {
      await store.save(4, '9-5', [], [], []);
      t.equal(await store.checkpoint(4), '9-5');
      await store.save(4, '10-0', [], [], []);
      t.equal(await store.checkpoint(4), '10-0', "'10-0' is after '9-5' although it sorts before it as a string");
      await store.save(4, '9-9', [snap('late', 4, bytes(7))], [], []);
      t.equal(await store.checkpoint(4), '10-0', 'an older checkpoint does not move it back');
      t.equal((await store.load('env_a', ['late'])).length, 1, 'the rows of that save are still stored');
      await store.save(4, '10-0', [], [], []);
      t.equal(await store.checkpoint(4), '10-0');
      await store.save(4, '10-1', [], [], []);
      t.equal(await store.checkpoint(4), '10-1', 'the sequence part counts');
      await store.save(4, '18446744073709551615-18446744073709551615', [], [], []);
      t.equal(await store.checkpoint(4), '18446744073709551615-18446744073709551615', 'unsigned 64-bit parts');
      t.equal(await store.checkpoint(5), '0', 'checkpoints are per partition');

      // The SQL order agrees with compareOffsets on a table of pairs.
      const offsets = ['0', '0-1', '0-2', '1-0', '2', '9-99', '10-0', '10-10', '10-9', '100-0'];
      let fresh = 1000;
      for (const a of offsets) {
        for (const b of offsets) {
          const p = fresh++;
          await store.save(p, a, [], [], []);
          await store.save(p, b, [], [], []);
          const want = compareOffsets(b, a) > 0 ? b : a;
          const got = await store.checkpoint(p);
          if (got !== want) t.fail(`save ${a} then ${b}: checkpoint ${got}, want ${want}`);
        }
      }
      t.pass('SQL offset order matches compareOffsets');
    });

    t.test('a failed save leaves nothing: no snapshot, no key, no removal, no checkpoint', async (t) => {
      await store.save(8, '50-0', [snap('keep', 8, bytes(1))], [key('kept-key', 'keep', 8)], []);
      // PostgreSQL text cannot hold NUL, so the key insert (after the snapshot upsert) fails.
      breakNextSave();
      await t.rejects(
        store.save(8, '60-0', [snap('keep', 8, bytes(2)), snap('new', 8, bytes(3))], [key('ok', 'new', 8), key('bad\u0000key', 'new', 8)], [
          { environmentId: 'env_a', key: 'kept-key' },
        ]),
      );
      t.same(plain(await store.load('env_a', ['keep', 'new'])).map((r) => [r.customerId, r.payload]), [['keep', [1]]]);
      t.same(await store.lookupKeys('env_a', ['kept-key', 'ok']), [key('kept-key', 'keep', 8)]);
      t.equal(await store.checkpoint(8), '50-0');
    });

    t.test('a save of many statements (rows, and payloads past the document bound) is whole, or nothing when its last fails', async (t) => {
      // 1,200 small rows and 4 payloads of 150 KB: several pipelined statements per table, split
      // by rows and by document bytes; every row must come back with its own bytes.
      const large = (i: number) => new Uint8Array(150_000).map((_, j) => (i * 7 + j) % 251);
      const rows = [
        ...Array.from({ length: 1200 }, (_, i) => snap(`many-${i}`, 45, bytes(i % 256, i >> 8))),
        ...Array.from({ length: 4 }, (_, i) => snap(`large-${i}`, 45, large(i))),
      ];
      const keys = Array.from({ length: 1200 }, (_, i) => key(`many-key-${i}`, `many-${i}`, 45));
      breakNextSave();
      await t.rejects(store.save(45, '70-0', rows, [...keys, key('bad\u0000key', 'many-0', 45)], []));
      t.same(await store.load('env_a', ['many-0', 'many-1199', 'large-3']), [], 'a failure in the last statement: no row');
      t.same(await store.lookupKeys('env_a', ['many-key-0']), [], 'and no key');
      t.equal(await store.checkpoint(45), '0');

      await store.save(45, '70-0', rows, keys, []);
      const ids = rows.map((r) => r.customerId);
      t.same(plain(await store.load('env_a', ids)), plain(rows.map((r) => ({ ...r }))), 'every row with its own bytes');
      t.equal((await store.lookupKeys('env_a', keys.map((k) => k.key))).length, 1200);
      t.equal(await store.checkpoint(45), '70-0');
    });

    t.test('saveMany: several partitions in one transaction, forward-only checkpoints each, keys listed per partition', async (t) => {
      await store.saveMany([
        { partition: 20, epoch: 1, checkpoint: '300-0', rows: [snap('m1', 20, bytes(1))], keys: [key('km1', 'm1', 20)], keysRemoved: [] },
        { partition: 21, epoch: 1, checkpoint: '301-0', rows: [snap('m2', 21, bytes(2))], keys: [key('km2', 'm2', 21)], keysRemoved: [] },
        { partition: 20, epoch: 1, checkpoint: '299-0', rows: [], keys: [], keysRemoved: [] },
      ]);
      t.equal(await store.checkpoint(20), '300-0', 'the greatest checkpoint of a partition wins');
      t.equal(await store.checkpoint(21), '301-0');
      t.same(plain(await store.load('env_a', ['m1', 'm2'])).map((r) => r.customerId), ['m1', 'm2']);
      t.same(await store.partitionKeys(21), [{ environmentId: 'env_a', key: 'km2' }]);
      await store.saveMany([{ partition: 21, epoch: 1, checkpoint: '200-0', rows: [], keys: [], keysRemoved: [] }]);
      t.equal(await store.checkpoint(21), '301-0', 'never backwards');
      breakNextSave();
      const failing = store.saveMany([
        { partition: 22, epoch: 1, checkpoint: '400-0', rows: [snap('m3', 22, bytes(3))], keys: [], keysRemoved: [] },
        { partition: 23, epoch: 1, checkpoint: '401-0', rows: [snap('bad\u0000id', 23, bytes(4))], keys: [], keysRemoved: [] },
      ]);
      await t.rejects(failing);
      t.equal(await store.checkpoint(22), '0', 'all or nothing');
      t.same(await store.load('env_a', ['m3']), []);
    });

    t.test('fencing: after a claim under a greater epoch, saves under older epochs write nothing', async (t) => {
      t.equal(await store.claim(30, 2), '0');
      const out = await store.saveMany([
        { partition: 30, epoch: 1, checkpoint: '500-0', rows: [snap('f-old', 30, bytes(1))], keys: [key('kf-old', 'f-old', 30)], keysRemoved: [] },
        { partition: 31, epoch: 1, checkpoint: '501-0', rows: [snap('f-ok', 31, bytes(2))], keys: [], keysRemoved: [] },
      ]);
      t.same(out, ['fenced', 'saved']);
      t.equal(await store.checkpoint(30), '0', 'the fenced checkpoint did not move');
      t.same(await store.load('env_a', ['f-old']), [], 'nor did its rows land');
      t.same(await store.lookupKeys('env_a', ['kf-old']), []);
      t.equal(await store.checkpoint(31), '501-0', 'the other partition was saved');
      t.same(await store.saveMany([{ partition: 30, epoch: 2, checkpoint: '502-0', rows: [], keys: [], keysRemoved: [] }]), ['saved']);
      t.equal(await store.claim(30, 1), '502-0', 'a claim never lowers the epoch and returns the checkpoint');
      t.same(await store.saveMany([{ partition: 30, epoch: 1, checkpoint: '503-0', rows: [], keys: [], keysRemoved: [] }]), ['fenced']);
    });

    t.test('thousands of rows in one save, across statement chunks', async (t) => {
      const n = 12_001;
      const rows = Array.from({ length: n }, (_, i) => snap(`bulk-${i}`, 9, bytes(i % 256, (i >> 8) % 256)));
      const keys = Array.from({ length: n }, (_, i) => key(`bulk-key-${i}`, `bulk-${i}`, 9));
      await store.save(9, '70-0', rows, keys, []);
      const ids = [0, 4999, 5000, 10_000, 12_000].map((i) => `bulk-${i}`);
      const loaded = await store.load('env_a', ids);
      t.same(
        plain(loaded).map((r) => [r.customerId, r.payload]),
        [0, 10_000, 12_000, 4999, 5000].map((i) => [`bulk-${i}`, [i % 256, (i >> 8) % 256]]),
      );
      if (sql) {
        const [count] = await sql`select count(*)::int as n from actor_snapshots where partition = 9`;
        t.equal(count?.n, n);
      }
      const found = await store.lookupKeys('env_a', ['bulk-key-0', 'bulk-key-12000']);
      t.equal(found.length, 2);
    });
  });
}

t.test('embedded server: startup search_path, fresh session per connection, data kept across restart', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'pglite-restart-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const schema = uniqueSchema();

  const first = await startEmbeddedPostgres(dir);
  const sqlA = openSql({ url: first.url, schema, max: 1 });
  await migrate(sqlA, schema);
  const [sp] = await sqlA`show search_path`;
  t.equal(sp?.search_path, schema, 'search_path comes from the startup message');
  await new PgSnapshotStore(sqlA).save(0, '3-0', [snap('c', 0, bytes(4, 2))], [key('k', 'c', 0)], []);
  await sqlA`select ${1}::int as marker_statement`; // a named prepared statement in the session
  const [before] = await sqlA.unsafe("select count(*)::int as n from pg_prepared_statements where statement like '%marker_statement%'");
  t.equal(before?.n, 1, 'the first connection prepared it');
  // The driver features the other SQL code relies on, through the socket: sql(rows), jsonb, rollback.
  await sqlA`create table probe (id int primary key, doc jsonb, raw bytea)`;
  await sqlA`insert into probe ${sqlA([
    { id: 1, doc: sqlA.json({ a: [1, 'x'] }), raw: Buffer.from([0, 255]) },
    { id: 2, doc: null, raw: null },
  ])}`;
  await t.rejects(
    sqlA.begin(async (tx) => {
      await tx`insert into probe (id) values (3)`;
      await tx`insert into probe (id) values (1)`; // duplicate key: the whole transaction goes
    }),
  );
  const probe = await sqlA`select id, doc, raw from probe order by id`;
  t.same(
    probe.map((r) => [r.id, r.doc, r.raw === null ? null : [...(r.raw as Buffer)]]),
    [
      [1, { a: [1, 'x'] }, [0, 255]],
      [2, null, null],
    ],
  );
  await sqlA.end();

  const sqlB = openSql({ url: first.url, schema, max: 1 });
  const [after] = await sqlB.unsafe("select count(*)::int as n from pg_prepared_statements where statement like '%marker_statement%'");
  t.equal(after?.n, 0, 'a new connection does not inherit the previous prepared statements');
  await sqlB.end();
  await first.close();

  const second = await startEmbeddedPostgres(dir);
  t.teardown(() => second.close());
  const sqlC = openSql({ url: second.url, schema, max: 1 });
  t.teardown(() => sqlC.end());
  t.same(await migrate(sqlC, schema), [], 'already migrated');
  const store = new PgSnapshotStore(sqlC);
  t.equal(await store.checkpoint(0), '3-0');
  t.same(plain(await store.load('env_a', ['c'])).map((r) => r.payload), [[4, 2]]);
  t.same(await store.lookupKeys('env_a', ['k']), [key('k', 'c', 0)]);
});
