// The node budget allowance against real PostgreSQL: two allowances (two nodes) lease chunks of
// one budget concurrently; what they grant never exceeds the budget, a grant's unused part comes
// back, released chunks become leasable by the other node, and an exhausted budget grants 0.
import t from 'tap';
import { BudgetAllowances } from '../../src/catalog/campaign-budgets.js';
import { wantAll } from '../../src/domain/campaigns.js';
import { sqlForTest } from '../helpers/sql.js';

const key = 'cmp_1|coins';

t.test('two nodes never grant more than the budget', async (t) => {
  const { sql } = await sqlForTest(t, 'postgres');
  await sql`insert into campaign_budgets (environment_id, campaign_id, currency, amount) values ('env_1', 'cmp_1', 'coins', 1000)`;
  const nodes = [new BudgetAllowances(sql), new BudgetAllowances(sql)];

  // Given 2 x 200 concurrent commands wanting 7 each (2800 > 1000)
  const grants = await Promise.all(Array.from({ length: 400 }, (_, i) => nodes[i % 2]!.grant('env_1', { [key]: 7 })));
  // Then every grant is all or part of the want, and the sum never passes the budget.
  const total = grants.reduce((n, g) => n + (g[key] ?? 0), 0);
  t.ok(total <= 1000, `granted ${total} <= 1000`);
  t.ok(total >= 1000 - 7 * 2, `nearly all of the budget is granted (${total})`);
  const [row] = await sql`select reserved::float8 as reserved from campaign_budgets where campaign_id = 'cmp_1'`;
  t.equal(row!.reserved, 1000, 'reserved never passes amount');
  t.equal(total + nodes[0]!.holds('env_1', key) + nodes[1]!.holds('env_1', key), 1000, 'granted + held = reserved');

  // When node 0 gives an unused grant back and releases, node 1 can lease it.
  const g = grants.find((x, i) => i % 2 === 0 && (x[key] ?? 0) === 7)!;
  nodes[0]!.giveBack('env_1', g, { [key]: 2 });
  t.equal(nodes[0]!.holds('env_1', key) >= 5, true, 'the unused 5 is back in the node');
  const held0 = nodes[0]!.holds('env_1', key);
  await nodes[0]!.release('env_1');
  const [after] = await sql`select reserved::float8 as reserved from campaign_budgets where campaign_id = 'cmp_1'`;
  t.equal(after!.reserved, 1000 - held0, 'released chunks go back to PostgreSQL');
  const late = await new BudgetAllowances(sql, { dryRetryMs: 0 }).grant('env_1', { [key]: wantAll });
  t.equal(late[key], held0, 'another node leases what was released');
});

t.test('an exhausted budget grants 0 without asking again at once', async (t) => {
  const { sql } = await sqlForTest(t, 'postgres');
  await sql`insert into campaign_budgets (environment_id, campaign_id, currency, amount) values ('env_1', 'cmp_1', 'coins', 10)`;
  const node = new BudgetAllowances(sql);
  t.same(await node.grant('env_1', { [key]: 8 }), { [key]: 8 });
  t.same(await node.grant('env_1', { [key]: 8 }), { [key]: 2 }, 'a partial grant: the step skips an award that does not fit');
  const again = node.grant('env_1', { [key]: 8 });
  t.notOk(again instanceof Promise, 'answered synchronously while the budget is known dry');
  t.same(again, { [key]: 0 });
  t.same(await node.grant('env_1', { 'cmp_none|coins': 5 }), { 'cmp_none|coins': 0 }, 'no budget row: nothing to lease');
});

t.test('remaining: what an event on this node could be granted, read without leasing', async (t) => {
  for (const kind of ['postgres', 'pglite'] as const) {
    const { sql } = await sqlForTest(t, kind);
    await sql`insert into campaign_budgets (environment_id, campaign_id, currency, amount) values ('env_1', 'cmp_1', 'coins', 100), ('env_1', 'cmp_1', 'gems', 5)`;
    const node = new BudgetAllowances(sql, { chunkDivisor: 4 });
    const other = new BudgetAllowances(sql, { chunkDivisor: 4 });
    const reserved = async () => (await sql`select reserved::float8 as r from campaign_budgets where currency = 'coins'`)[0]!.r as number;
    t.same(await node.remaining('env_1', [key, 'cmp_1|gems', 'cmp_none|coins']), { [key]: 100, 'cmp_1|gems': 5, 'cmp_none|coins': 0 }, `${kind}: nothing leased yet`);
    t.equal(await reserved(), 0, `${kind}: reading leases nothing`);
    // Given this node holds the rest of a chunk and another node holds one, then this node counts
    // its own chunk and what is unreserved, never the other node's.
    t.same(await node.grant('env_1', { [key]: 10 }), { [key]: 10 });
    t.same(await other.grant('env_1', { [key]: 10 }), { [key]: 10 });
    const held = node.holds('env_1', key);
    t.same(await node.remaining('env_1', [key]), { [key]: held + (100 - (await reserved())) }, `${kind}: held ${held} + unreserved`);
    t.equal((await node.remaining('env_1', [key]))[key], 100 - 10 - 10 - other.holds('env_1', key), `${kind}: granted and the other node's chunk are not available here`);
    t.same(await node.remaining('env_1', []), {});
  }
});

t.test('remaining counts a lease in flight once: neither in both places nor in neither', async (t) => {
  // A lease first reserves in PostgreSQL, then adds the chunk to the node; a read between the two
  // must not see the budget twice (the simulate of campaigns.test.ts once read 60 of 50 left).
  const { sql } = await sqlForTest(t, 'postgres');
  // The read of PostgreSQL's free part answers late, as on a busy pool of several connections.
  const slowReads = new Proxy(sql, {
    apply(target, self, args: [TemplateStringsArray, ...unknown[]]) {
      const q = Reflect.apply(target, self, args) as Promise<unknown>;
      return args[0].join('').includes(' as free ') ? q.then((rows) => new Promise((r) => setTimeout(() => r(rows), 30))) : q;
    },
  });
  const node = new BudgetAllowances(slowReads);
  for (let i = 0; i < 5; i++) {
    const k = `cmp_${i}|coins`;
    await sql`insert into campaign_budgets (environment_id, campaign_id, currency, amount) values ('env_1', ${`cmp_${i}`}, 'coins', 150)`;
    // Given a grant of 100 that leaves the node under a quarter of its chunk: a top-up of 10 starts in the background
    t.same(await node.grant('env_1', { [k]: 100 }), { [k]: 100 });
    // Then reads at any moment of the top-up find the 50 not granted
    const reads = await Promise.all([node.remaining('env_1', [k]), new Promise((r) => setImmediate(r)).then(() => node.remaining('env_1', [k]))]);
    t.same(reads, [{ [k]: 50 }, { [k]: 50 }], `try ${i}`);
    t.equal(node.holds('env_1', k), 10, 'the top-up landed');
  }
  // A key this node had never leased, first leased while a read is under way: read again too.
  await sql`insert into campaign_budgets (environment_id, campaign_id, currency, amount) values ('env_1', 'cmp_new', 'coins', 150)`;
  const reading = node.remaining('env_1', ['cmp_new|coins']);
  t.same(await node.grant('env_1', { 'cmp_new|coins': 100 }), { 'cmp_new|coins': 100 });
  t.same(await reading, { 'cmp_new|coins': 50 }, 'the grant made during the read is not counted as free');
  // Reading keeps no record of keys the node never leased.
  await node.remaining('env_1', Array.from({ length: 100 }, (_, i) => `cmp_read_only_${i}|coins`));
  t.equal((node as unknown as { held: Map<string, unknown> }).held.size, 6, 'only the leased keys are held');
});
