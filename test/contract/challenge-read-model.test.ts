// Challenge read tables, against PostgreSQL and embedded PGlite: facts of one batch fold per row in
// fact order (progressed, completed, revoked: the row stays completed with the last count); a later
// batch never un-completes a row; enrollments come and go; a re-delivered batch changes nothing;
// lists page by (customer, period, cycle) and filter by customer and status; rows carry their
// contributions as the actor's record does (adds, revokes, merges, keyless challenges).
import t from 'tap';
import type { ChallengeFact } from '../../src/domain/challenges.js';
import { ChallengeReadModel, challengeMergeProjections, challengeProjection } from '../../src/persistence/sql/challenge-read-model.js';
import { PgReadModel, type Projection } from '../../src/persistence/sql/read-model.js';
import { sqlForTest, sqlKinds } from '../helpers/sql.js';

const T0 = Date.UTC(2030, 5, 1, 12, 0, 0, 0);
const env = 'env_a';

const progressed = (customer: string, period: string, count: number, at = T0): Projection =>
  challengeProjection(env, customer, { kind: 'challenge.progressed', challengeId: 'chl_1', periodKey: period, cycle: 1, contribution: `m${count}`, eventId: null, count, target: 2, atMs: at });
const completed = (customer: string, period: string, count: number, at = T0): Projection =>
  challengeProjection(env, customer, {
    kind: 'challenge.completed',
    challengeId: 'chl_1',
    challengeName: 'x',
    periodKey: period,
    cycle: 1,
    count,
    target: 2,
    completionActions: [],
    completions: 1,
    atMs: at,
  });
const fact = (customer: string, f: Exclude<ChallengeFact, { kind: 'challenge.merged' }>): Projection => challengeProjection(env, customer, f);

for (const kind of sqlKinds) {
  t.test(`challenge read tables (${kind})`, async (t) => {
    const { sql } = await sqlForTest(t, kind);
    const writer = new PgReadModel(sql);
    const reader = new ChallengeReadModel(sql);

    const batch1: Projection[] = [
      progressed('cust_a', '2030-06-01', 1),
      progressed('cust_a', '2030-06-01', 2, T0 + 1),
      completed('cust_a', '2030-06-01', 2, T0 + 1),
      fact('cust_a', { kind: 'challenge.revoked', challengeId: 'chl_1', periodKey: '2030-06-01', cycle: 1, contribution: 'm2', count: 1, atMs: T0 + 2 }),
      progressed('cust_b', '2030-06-01', 1),
      fact('cust_a', { kind: 'challenge.enrolled', challengeId: 'chl_1', atMs: T0 }),
      fact('cust_b', { kind: 'challenge.enrolled', challengeId: 'chl_1', atMs: T0 }),
    ];
    await writer.apply(0, '1-0', batch1);
    await writer.apply(0, '1-0', batch1);
    const rows = await reader.listProgress(env, 'chl_1', { customerId: null, status: null, after: null, limit: 10 });
    t.match(rows, [
      { customerId: 'cust_a', periodKey: '2030-06-01', count: 1, target: 2, status: 'completed', completedAtMs: T0 + 1, updatedAtMs: T0 + 2 },
      { customerId: 'cust_b', count: 1, status: 'active', completedAtMs: null },
    ]);
    t.equal(rows.length, 2);

    await writer.apply(0, '2-0', [
      progressed('cust_a', '2030-06-01', 2, T0 + 3),
      progressed('cust_a', '2030-06-02', 1, T0 + 86_400_000),
      fact('cust_b', { kind: 'challenge.unenrolled', challengeId: 'chl_1', atMs: T0 + 5 }),
    ]);
    const a = await reader.listProgress(env, 'chl_1', { customerId: 'cust_a', status: null, after: null, limit: 10 });
    t.match(a, [{ periodKey: '2030-06-01', count: 2, status: 'completed', completedAtMs: T0 + 1 }, { periodKey: '2030-06-02', status: 'active' }], 'a later batch never un-completes');
    const page = await reader.listProgress(env, 'chl_1', { customerId: null, status: null, after: ['cust_a', '2030-06-01', 1], limit: 10 });
    t.same(page.map((r) => [r.customerId, r.periodKey]), [['cust_a', '2030-06-02'], ['cust_b', '2030-06-01']]);
    t.same((await reader.listProgress(env, 'chl_1', { customerId: null, status: 'completed', after: null, limit: 10 })).map((r) => r.customerId), ['cust_a']);
    t.same((await reader.listEnrollments(env, 'chl_1', { after: null, limit: 10 })).map((r) => [r.customerId, r.enrolledAtMs]), [['cust_a', T0]]);
    t.same((await reader.listProgress('env_other', 'chl_1', { customerId: null, status: null, after: null, limit: 10 })), [], 'another environment sees nothing');
    t.same((await reader.customerProgress(env, 'cust_a')).map((r) => r.periodKey), ['2030-06-01', '2030-06-02']);
    t.same(
      (await reader.customerProgress(env, ['cust_a', 'cust_b'])).map((r) => [r.customerId, r.periodKey]).sort(),
      [['cust_a', '2030-06-01'], ['cust_a', '2030-06-02'], ['cust_b', '2030-06-01']],
      'several customers at once (an export: a survivor and the customers merged into it)',
    );

    // More rows than one statement carries (1,000): every one lands, enrollments too.
    const many: Projection[] = [];
    for (let i = 0; i < 2500; i++) {
      const c = `cust_m${String(i).padStart(4, '0')}`;
      many.push(progressed(c, '2030-06-03', 1), fact(c, { kind: 'challenge.enrolled', challengeId: 'chl_1', atMs: T0 }));
    }
    await writer.apply(0, '3-0', many);
    const [counts] = await sql`
      select (select count(*)::int from challenge_progress where period_key = '2030-06-03') as progress,
             (select count(*)::int from challenge_enrollments where customer_id like 'cust_m%') as enrolled`;
    t.same([counts?.progress, counts?.enrolled], [2500, 2500]);
    const unenroll: Projection[] = [];
    for (let i = 0; i < 1200; i++) unenroll.push(fact(`cust_m${String(i).padStart(4, '0')}`, { kind: 'challenge.unenrolled', challengeId: 'chl_1', atMs: T0 + 9 }));
    await writer.apply(0, '4-0', unenroll);
    const [left] = await sql`select count(*)::int as n from challenge_enrollments where customer_id like 'cust_m%'`;
    t.equal(left?.n, 1300, 'a batch of unenrollments alone, across statements');
  });
}

// Contributions (spec 2.8 progress.contributions[]): the row mirrors the actor's record, in the
// order counted, revoked values removed; a merge sets the adopted record's list; [] without a key.
for (const kind of sqlKinds) {
  t.test(`challenge progress rows carry their contributions (${kind})`, async (t) => {
    const { sql } = await sqlForTest(t, kind);
    const writer = new PgReadModel(sql);
    const reader = new ChallengeReadModel(sql);
    const p = (customer: string, value: string | null, count: number, cycle = 1): Projection =>
      fact(customer, { kind: 'challenge.progressed', challengeId: 'chl_c', periodKey: 'all', cycle, contribution: value, eventId: null, count, target: 9, atMs: T0 + count });
    const revoke = (customer: string, value: string, count: number): Projection =>
      fact(customer, { kind: 'challenge.revoked', challengeId: 'chl_c', periodKey: 'all', cycle: 1, contribution: value, count, atMs: T0 + 100 + count });
    const list = async (customer: string) =>
      (await reader.listProgress(env, 'chl_c', { customerId: customer, status: null, after: null, limit: 10 })).map((r) => [r.cycle, r.count, r.contributions]);

    // One batch: counted, revoked, counted again (moves last), another revoked; a keyless challenge.
    await writer.apply(0, '1-0', [p('cust_k', 'a', 1), p('cust_k', 'b', 2), p('cust_k', 'c', 3), revoke('cust_k', 'a', 2), p('cust_k', 'a', 3), revoke('cust_k', 'b', 2), p('cust_n', null, 1), p('cust_n', null, 2), revoke('cust_n', 'x', 1)]);
    t.same(await list('cust_k'), [[1, 2, ['c', 'a']]], 'as the actor: c, then a counted again');
    t.same(await list('cust_n'), [[1, 1, []]], 'no contribution_key: no values, a revoke takes only a count off');

    // Later batches build on the stored list; a completion leaves it; a new cycle starts empty.
    await writer.apply(0, '2-0', [p('cust_k', 'd', 3), p('cust_k', 'b', 4)]);
    await writer.apply(0, '3-0', [
      fact('cust_k', { kind: 'challenge.completed', challengeId: 'chl_c', challengeName: 'c', periodKey: 'all', cycle: 1, count: 4, target: 4, completionActions: [], completions: 1, atMs: T0 + 9 }),
      p('cust_k', 'a', 1, 2),
    ]);
    t.same(await list('cust_k'), [[1, 4, ['c', 'a', 'd', 'b']], [2, 1, ['a']]]);
    t.same(
      (await reader.customerProgress(env, 'cust_k')).map((r) => [r.cycle, r.contributions]).sort((x, y) => Number(x[0]) - Number(y[0])),
      [
        [1, ['c', 'a', 'd', 'b']],
        [2, ['a']],
      ],
      'the export reads them too',
    );

    // The same folded changes applied again (another offset) change nothing more.
    const again = [p('cust_k', 'e', 5), revoke('cust_k', 'c', 4)];
    await writer.apply(0, '4-0', again);
    await writer.apply(0, '5-0', again);
    t.same((await list('cust_k'))[0], [1, 4, ['a', 'd', 'b', 'e']]);

    // A merge adopts a record whole: its list replaces the row's, later changes build on it.
    const adopted = { challengeId: 'chl_c', periodKey: 'all', cycle: 1, count: 2, target: 9, status: 'active' as const, contributions: ['m1', 'm2'], completedAtMs: null, updatedAtMs: T0 + 50 };
    await writer.apply(0, '6-0', [
      ...challengeMergeProjections(env, 'cust_n', { kind: 'challenge.merged', from: 'cust_gone', enrollments: [], progress: [adopted], completions: {}, atMs: T0 + 50 }),
      p('cust_n', 'm3', 3),
    ]);
    t.same(await list('cust_n'), [[1, 3, ['m1', 'm2', 'm3']]]);

    // Statements carry at most 1,000 values: 3 rows of a 700-value merge each, all land.
    const big = Array.from({ length: 700 }, (_, i) => `v${i}`);
    const merges: Projection[] = [];
    for (const c of ['cust_b1', 'cust_b2', 'cust_b3']) {
      merges.push(...challengeMergeProjections(env, c, { kind: 'challenge.merged', from: 'cust_gone', enrollments: [], progress: [{ ...adopted, contributions: big }], completions: {}, atMs: T0 }));
    }
    await writer.apply(0, '7-0', merges);
    for (const c of ['cust_b1', 'cust_b2', 'cust_b3']) t.same((await list(c))[0]?.[2], big, `${c}: every value, in order`);

    // Erasing a customer erases its values (event data), also those counted in the same batch.
    await writer.apply(0, '8-0', [p('cust_k', 'late', 5), { kind: 'customer.erase', environmentId: env, id: 'cust_k', deletedAtMs: T0 + 999, version: 2 }]);
    t.same(
      (await list('cust_k')).map((r) => r[2]),
      [[], []],
      'no values left on any of its rows',
    );
    t.same((await list('cust_n'))[0]?.[2], ['m1', 'm2', 'm3'], "another customer's are kept");
  });
}
