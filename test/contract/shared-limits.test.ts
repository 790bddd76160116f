// Contract suite of the SharedLimits port (rule limits shared by every customer), run on
// PostgreSQL, embedded PGlite and the in-memory twin, each in its own schema. Invariants checked:
// at most `max` slots per (rule, limit, scope key); a reservation is idempotent per event id (a
// held slot is granted again with created false and takes nothing); release frees only the
// event's own slots; counts read without reserving; environments, rules, limits and keys are
// separate; long scope keys work; racing reservations for max K grant exactly K.
import t, { type Test } from 'tap';
import { MemorySharedLimits } from '../../src/persistence/memory/shared-limits.js';
import type { SharedLimits } from '../../src/persistence/ports.js';
import { openSql } from '../../src/persistence/sql/db.js';
import { PgSharedLimits } from '../../src/persistence/sql/shared-limits.js';
import { sqlForTest, sqlKinds, testDatabaseUrl } from '../helpers/sql.js';

/** Two adapter instances over the same storage: two nodes. */
type Make = (t: Test) => Promise<[SharedLimits, SharedLimits]>;

const adapters: Array<[string, Make]> = [
  [
    'memory',
    async () => {
      const s = new MemorySharedLimits();
      return [s, s];
    },
  ],
  ...sqlKinds.map((kind): [string, Make] => [
    kind,
    async (t) => {
      const { sql, schema } = await sqlForTest(t, kind);
      if (kind !== 'postgres') return [new PgSharedLimits(sql), new PgSharedLimits(sql)];
      // A second pool on the same schema: another node's connections.
      const other = openSql({ url: testDatabaseUrl, schema, max: 8 });
      t.teardown(() => other.end());
      return [new PgSharedLimits(sql), new PgSharedLimits(other)];
    },
  ]),
];

const item = (scopeKey: string, max = 1, ruleId = 'rule_1', limitId = 'per_order') => ({ ruleId, limitId, scopeKey, max });

for (const [name, make] of adapters) {
  t.test(`shared limits contract: ${name}`, async (t) => {
    const [a, b] = await make(t);

    t.test('at most max slots per scope key; other keys, limits, rules and environments are separate', async (t) => {
      t.same(await a.reserve('env_1', 'e1', [item('s:o1', 2)]), [{ granted: true, created: true, taken: 1 }]);
      t.same(await b.reserve('env_1', 'e2', [item('s:o1', 2)]), [{ granted: true, created: true, taken: 2 }], 'another node counts the same');
      t.same(await a.reserve('env_1', 'e3', [item('s:o1', 2)]), [{ granted: false, created: false, taken: 2 }], 'the third is refused');
      t.same(await a.reserve('env_1', 'e3', [item('s:o2', 2)]), [{ granted: true, created: true, taken: 1 }], 'another scope key');
      t.same(await a.reserve('env_1', 'e3', [item('s:o1', 2, 'rule_1', 'other')]), [{ granted: true, created: true, taken: 1 }], 'another limit');
      t.same(await a.reserve('env_1', 'e3', [item('s:o1', 2, 'rule_2')]), [{ granted: true, created: true, taken: 1 }], 'another rule');
      t.same(await a.reserve('env_2', 'e3', [item('s:o1', 2)]), [{ granted: true, created: true, taken: 1 }], 'another environment');
      t.same(await a.counts('env_1', [item('s:o1'), item('s:o2'), item('s:none')]), [2, 1, 0]);
      t.same(await a.reserve('env_1', 'e4', [item('s:o1', 3)]), [{ granted: true, created: true, taken: 3 }], 'a raised max lets one more in');
      t.same(await a.reserve('env_1', 'e5', [item('s:o1', 3)]), [{ granted: false, created: false, taken: 3 }]);
    });

    t.test('idempotent per event: a held slot is granted again, created false, and takes nothing', async (t) => {
      t.same(await a.reserve('env_i', 'first', [item('k', 1)]), [{ granted: true, created: true, taken: 1 }]);
      t.same(await b.reserve('env_i', 'first', [item('k', 1)]), [{ granted: true, created: false, taken: 1 }], 'the repeat holds the same slot');
      t.same(await a.reserve('env_i', 'second', [item('k', 1)]), [{ granted: false, created: false, taken: 1 }]);
      t.same(await a.counts('env_i', [item('k')]), [1]);
      // Several items in one call, one repeated: answered in item order, the repeat sharing its answer.
      const answers = await a.reserve('env_i', 'multi', [item('x', 1), item('k', 1), item('x', 1), item('y', 5, 'rule_9', 'l')]);
      t.same(answers, [
        { granted: true, created: true, taken: 1 },
        { granted: false, created: false, taken: 1 },
        { granted: true, created: true, taken: 1 },
        { granted: true, created: true, taken: 1 },
      ]);
      t.same(await a.counts('env_i', [item('x'), item('y', 5, 'rule_9', 'l')]), [1, 1], 'a repeated item counts once');
      t.same(await a.reserve('env_i', 'none', []), [], 'an empty reservation answers nothing');
      t.same(await a.counts('env_i', []), []);
    });

    t.test("release frees only the event's own slots", async (t) => {
      await a.reserve('env_r', 'holder', [item('k', 1)]);
      await a.release('env_r', 'intruder', [item('k')]);
      t.same(await a.counts('env_r', [item('k')]), [1], "another event's release frees nothing");
      await b.release('env_r', 'holder', [item('k'), item('never-held')]);
      t.same(await a.counts('env_r', [item('k'), item('never-held')]), [0, 0], 'the holder frees its slot; a slot never held stays at 0');
      await a.release('env_r', 'holder', [item('k')]);
      t.same(await a.counts('env_r', [item('k')]), [0], 'a second release frees nothing more');
      t.same(await a.reserve('env_r', 'next', [item('k', 1)]), [{ granted: true, created: true, taken: 1 }], 'the freed slot is taken again');
      t.same(await a.reserve('env_r', 'holder', [item('k', 1)]), [{ granted: false, created: false, taken: 1 }], 'the old holder has no slot any more');
      await a.release('env_r', 'holder', []);
    });

    t.test('long and unusual scope keys', async (t) => {
      const long = `s:${'x'.repeat(5000)}`;
      const long2 = `s:${'x'.repeat(4999)}y`;
      t.same(await a.reserve('env_l', 'e1', [item(long, 1)]), [{ granted: true, created: true, taken: 1 }]);
      t.same(await a.reserve('env_l', 'e2', [item(long, 1)]), [{ granted: false, created: false, taken: 1 }]);
      t.same(await a.reserve('env_l', 'e2', [item(long2, 1)]), [{ granted: true, created: true, taken: 1 }], 'a key differing at its end is another key');
      t.same(await a.counts('env_l', [item(long), item('s:ж|n:1|-')]), [1, 0]);
      await a.release('env_l', 'e1', [item(long)]);
      t.same(await a.counts('env_l', [item(long)]), [0]);
    });

    t.test('racing reservations of many events for max K: exactly K granted', async (t) => {
      const K = 7;
      const answers = await Promise.all(Array.from({ length: 60 }, (_, i) => (i % 2 === 0 ? a : b).reserve('env_race', `ev-${i}`, [item('s:hot', K)])));
      t.equal(answers.filter(([x]) => x!.granted).length, K, 'K granted');
      t.ok(answers.every(([x]) => x!.granted === x!.created), 'every grant created its slot');
      t.same(await a.counts('env_race', [item('s:hot')]), [K]);
      // Duplicates of granted events racing each other take nothing more.
      const granted = answers.map(([x], i) => (x!.granted ? `ev-${i}` : null)).filter((x): x is string => x !== null);
      const repeats = await Promise.all(granted.flatMap((id) => [a.reserve('env_race', id, [item('s:hot', K)]), b.reserve('env_race', id, [item('s:hot', K)])]));
      t.ok(repeats.every(([x]) => x!.granted && !x!.created), 'repeats are granted, not created');
      t.same(await a.counts('env_race', [item('s:hot')]), [K]);
      // A new event racing with its own duplicate: one slot, counted once.
      await Promise.all(granted.map((id) => a.release('env_race', id, [item('s:hot')])));
      const pair = await Promise.all([a.reserve('env_race', 'twin', [item('s:hot', K)]), b.reserve('env_race', 'twin', [item('s:hot', K)])]);
      t.equal(pair.filter(([x]) => x!.created).length, 1, 'one of the twins created the slot');
      t.ok(pair.every(([x]) => x!.granted));
      t.same(await a.counts('env_race', [item('s:hot')]), [1]);
    });
  });
}
