// The match record store, against PostgreSQL and embedded PGlite: claims of concurrent reports
// leave together and each learns whether it inserted (a stored match_id, or the same match_id twice
// in one batch, inserts once); one claim that PostgreSQL refuses fails alone while the others of its
// batch are stored; verdicts are written only for players still pending (a second write changes
// nothing), keep a customer id already stored and fill in one that was not; a pending player
// counts as its reserved verdict in the derived status; reads and lists.
import t from 'tap';
import { type MatchRow, MatchRecords, type PlayerRow } from '../../src/persistence/sql/match-records.js';
import { openSql } from '../../src/persistence/sql/db.js';
import { sqlForTest, sqlKinds, testDatabaseUrl } from '../helpers/sql.js';

const T0 = Date.UTC(2030, 5, 1, 12, 0, 0, 0);
const env = 'env_a';
let seq = 0;

function record(matchId: string, players: Array<{ ext: string; customerId?: string | null }>): MatchRow {
  const id = `mr_${String(++seq).padStart(4, '0')}`;
  return {
    id,
    matchId,
    profileId: 'mpf_1',
    profileKey: 'arena',
    profileRevision: 1,
    event: 'match.completed',
    fingerprint: `fp-${matchId}`,
    startedAtMs: T0 - 600_000,
    endedAtMs: T0,
    durationSeconds: 600,
    reportingKeyId: 'key_1',
    status: 'admitted',
    admissionErrors: [],
    revision: 1,
    createdAtMs: T0,
    updatedAtMs: T0,
    players: players.map(
      (p, i): PlayerRow => ({
        id: `mrp_${seq}_${i}`,
        matchResultId: id,
        position: i,
        customerRef: { by: 'external_id', value: p.ext },
        customerId: p.customerId ?? null,
        metrics: { kills: i },
        won: i === 0 ? true : null,
        status: 'pending',
        pendingVerdict: 'admitted',
        reasons: [],
        eventId: null,
        clientEventId: p.customerId ? `${matchId}:${p.customerId}` : null,
        review: null,
        createdAtMs: T0,
        updatedAtMs: T0,
      }),
    ),
  };
}

for (const kind of sqlKinds) {
  t.test(`match records (${kind})`, async (t) => {
    const { sql, schema } = await sqlForTest(t, kind);
    const records = new MatchRecords(sql);

    await t.test('concurrent claims: each learns whether it inserted; a bad claim fails alone', async (t) => {
      const a = record('m-a', [{ ext: 'p1' }, { ext: 'p2', customerId: 'cust_2' }]);
      const b = record('m-b', [{ ext: 'p3' }]);
      const twin = record('m-a', [{ ext: 'p9' }]);
      // PostgreSQL refuses \u0000 in jsonb: this claim cannot be stored, whatever it is batched with.
      const bad = record('m-bad', [{ ext: 'nul\u0000byte' }]);
      const results = await Promise.allSettled([records.claim(env, a), records.claim(env, bad), records.claim(env, b), records.claim(env, twin)]);
      t.same(
        results.map((r) => r.status),
        ['fulfilled', 'rejected', 'fulfilled', 'fulfilled'],
      );
      t.same(
        results.map((r) => (r.status === 'fulfilled' ? r.value : null)),
        [true, null, true, false],
        'the same match_id twice in one batch is inserted once',
      );
      const stored = await records.load(env, { matchId: 'm-a' });
      t.equal(stored?.id, a.id);
      t.same(
        stored?.players.map((p) => [p.id, p.customerId, p.status, p.customerRef.value, p.won, p.clientEventId]),
        [
          [a.players[0]!.id, null, 'pending', 'p1', true, null],
          [a.players[1]!.id, 'cust_2', 'pending', 'p2', null, 'm-a:cust_2'],
        ],
      );
      t.match(stored, { startedAtMs: T0 - 600_000, endedAtMs: T0, durationSeconds: 600, revision: 1, status: 'admitted', admissionErrors: [] });
      t.equal(await records.load(env, { matchId: 'm-bad' }), null, 'nothing of the refused claim is stored');
      t.equal((await records.load(env, { matchId: 'm-b' }))?.players.length, 1);
      t.equal(await records.claim(env, record('m-b', [{ ext: 'p3' }])), false, 'a stored match_id is a conflict');
      t.equal(await records.claim('env_other', record('m-b', [{ ext: 'p3' }])), true, 'match ids are per environment');
    });

    await t.test('strings with quotes, backslashes, braces, commas and the word NULL are stored as sent', async (t) => {
      const awkward = ['a"b', 'back\\slash', '{x,y}', 'NULL', '', ' spaced ', 'ünï😀'];
      const m = record('m-"\\{,}NULL', awkward.map((ext) => ({ ext, customerId: ext === '' ? null : ext })));
      m.reportingKeyId = 'NULL';
      t.equal(await records.claim(env, m), true);
      const written = await records.writeVerdicts({
        environmentId: env,
        matchResultId: m.id,
        admissionErrors: [],
        atMs: T0 + 1000,
        players: m.players.map((p, i) => ({ id: p.id, status: 'admitted' as const, customerId: null, reasons: [], eventId: `evt_"${i}\\`, clientEventId: null })),
      });
      t.same(written, { revision: 2, status: 'admitted' });
      const stored = await records.load(env, { matchId: m.matchId });
      t.equal(stored?.matchId, m.matchId);
      t.equal(stored?.reportingKeyId, 'NULL');
      t.same(stored?.players.map((p) => p.customerRef.value), awkward);
      t.same(stored?.players.map((p) => p.customerId), awkward.map((ext) => (ext === '' ? null : ext)), 'NULL as a string is a string; null is NULL');
      t.same(stored?.players.map((p) => p.eventId), m.players.map((_, i) => `evt_"${i}\\`));
    });

    await t.test('verdicts: only pending players, customer ids filled in, never overwritten', async (t) => {
      const m = record('m-v', [{ ext: 'v1' }, { ext: 'v2', customerId: 'cust_v2' }]);
      t.equal(await records.claim(env, m), true);
      const [p1, p2] = m.players;
      const written = await records.writeVerdicts({
        environmentId: env,
        matchResultId: m.id,
        admissionErrors: [],
        atMs: T0 + 1000,
        players: [
          { id: p1!.id, status: 'admitted', customerId: 'cust_v1', reasons: [], eventId: 'evt_1', clientEventId: 'm-v:cust_v1' },
          { id: p2!.id, status: 'rejected', customerId: 'cust_other', reasons: [{ code: 'rate_limited', message: 'x', limit: 3, value: 3 }], eventId: null, clientEventId: 'm-v:cust_other' },
        ],
      });
      t.same(written, { revision: 2, status: 'partially_admitted' }, 'the status is derived from the stored players');
      // A late writer with other verdicts (a concurrent repeat) changes no player that is no longer pending.
      const again = await records.writeVerdicts({
        environmentId: env,
        matchResultId: m.id,
        admissionErrors: [{ player_id: p1!.id, customer_id: null, code: 'internal_error', message: 'x' }],
        atMs: T0 + 2000,
        players: [{ id: p1!.id, status: 'rejected', customerId: 'cust_zzz', reasons: [], eventId: null, clientEventId: null }],
      });
      t.same(again, { revision: 3, status: 'partially_admitted' }, 'the late writer changed no player, so neither the status');
      const stored = await records.load(env, { id: m.id });
      t.match(stored?.players[0], { customerId: 'cust_v1', status: 'admitted', eventId: 'evt_1', clientEventId: 'm-v:cust_v1', updatedAtMs: T0 + 1000 });
      t.match(stored?.players[1], { customerId: 'cust_v2', status: 'rejected', reasons: [{ code: 'rate_limited' }], eventId: null }, 'a stored customer id is kept');
      t.match(stored, { status: 'partially_admitted', revision: 3, updatedAtMs: T0 + 2000 });
      t.same(stored?.admissionErrors, [], "an error for a player another writer already completed is not kept against its verdict");
      // An error for a player still pending stays listed (rule 5), the others of the same write go.
      const m2 = record('m-v2', [{ ext: 'w1' }, { ext: 'w2' }]);
      t.equal(await records.claim(env, m2), true);
      await records.writeVerdicts({
        environmentId: env,
        matchResultId: m2.id,
        admissionErrors: [
          { player_id: m2.players[0]!.id, customer_id: null, code: 'rate_limited', message: 'busy' },
          { player_id: 'mrp_elsewhere', customer_id: null, code: 'internal_error', message: 'x' },
        ],
        atMs: T0 + 3000,
        players: [{ id: m2.players[1]!.id, status: 'admitted', customerId: 'cust_w2', reasons: [], eventId: 'evt_w2', clientEventId: 'm-v2:cust_w2' }],
      });
      t.match((await records.load(env, { id: m2.id }))?.admissionErrors, [{ player_id: m2.players[0]!.id, code: 'rate_limited' }]);
      t.equal((await records.load(env, { id: m2.id }))?.admissionErrors.length, 1);
      t.equal(
        await records.writeVerdicts({ environmentId: env, matchResultId: 'mr_missing', admissionErrors: [], atMs: T0, players: [] }),
        null,
        'no record, no revision',
      );
    });

    await t.test('verdict statements are planned at each execution, never from a cached generic plan', async (t) => {
      // A generic plan built while the match tables were small made PostgreSQL's cost per report
      // grow with every report stored (docs/bench/2026-11-28-match-records.md). One connection, so
      // pg_prepared_statements (per session) sees every write; PGlite has one anyway.
      const one = kind === 'postgres' ? openSql({ url: testDatabaseUrl, schema, max: 1 }) : sql;
      if (one !== sql) t.teardown(() => one.end());
      const store = new MatchRecords(one);
      for (let i = 0; i < 12; i++) {
        const m = record(`m-plan-${i}`, [{ ext: `plan-${i}` }]);
        t.equal(await store.claim(env, m), true);
        const w = await store.writeVerdicts({
          environmentId: env,
          matchResultId: m.id,
          admissionErrors: [],
          atMs: T0,
          players: [{ id: m.players[0]!.id, status: 'admitted', customerId: `cust_plan_${i}`, reasons: [], eventId: `evt_plan_${i}`, clientEventId: null }],
        });
        t.same(w, { revision: 2, status: 'admitted' });
      }
      const plans = await one`
        select statement, generic_plans::int as generic, custom_plans::int as custom from pg_prepared_statements
        where (statement like '%update match_result%' or statement like '%for update of r%') and statement not like '%pg_prepared_statements%'`;
      t.equal(plans.length, 3, 'the lock and the two updates');
      for (const p of plans) {
        t.equal(p.generic, 0, `never a generic plan: ${String(p.statement).trim().slice(0, 40)}`);
        t.ok((p.custom as number) >= 12, 'planned at each of the twelve writes');
      }
    });

    await t.test('a pending player counts as its reserved verdict in the derived status (as the claim stored it)', async (t) => {
      const base = record('m-pv', [{ ext: 'pv1', customerId: 'cust_pv1' }, { ext: 'pv2', customerId: 'cust_pv2' }, { ext: 'pv3' }]);
      const verdicts = ['held', 'admitted', 'admitted'] as const;
      const m: MatchRow = { ...base, status: 'held', players: base.players.map((p, i) => ({ ...p, pendingVerdict: verdicts[i]! })) };
      t.equal(await records.claim(env, m), true);
      const [p1, p2, p3] = m.players;
      // The admission of the second player finished; the first (held) and the third are still pending.
      const written = await records.writeVerdicts({
        environmentId: env,
        matchResultId: m.id,
        admissionErrors: [],
        atMs: T0 + 1000,
        players: [{ id: p2!.id, status: 'admitted', customerId: null, reasons: [], eventId: 'evt_pv2', clientEventId: null }],
      });
      t.same(written, { revision: 2, status: 'held' }, 'still held: the pending held player counts as held');
      // Status pending fills in only the customer id of a player that stays pending (rule 2's customer while its admission is blocked).
      const kept = await records.writeVerdicts({
        environmentId: env,
        matchResultId: m.id,
        admissionErrors: [{ player_id: p3!.id, customer_id: 'cust_pv3', code: 'credentials_revoked', message: 'x' }],
        atMs: T0 + 2000,
        players: [{ id: p3!.id, status: 'pending', customerId: 'cust_pv3', reasons: [], eventId: null, clientEventId: 'm-pv:cust_pv3' }],
      });
      t.same(kept, { revision: 3, status: 'held' });
      const stored = await records.load(env, { id: m.id });
      t.match(stored?.players[2], { status: 'pending', pendingVerdict: 'admitted', customerId: 'cust_pv3', clientEventId: 'm-pv:cust_pv3', eventId: null });
      t.match(stored?.admissionErrors, [{ player_id: p3!.id, code: 'credentials_revoked' }], 'listed while it stays pending');
      // A review of the held player (still pending) settles the status from the stored players.
      const status = await sql.begin(async (txn) => {
        const tx = txn as unknown as typeof sql;
        const locked = await records.lockPlayer(tx, env, p1!.id);
        return records.writeReview(tx, env, m.id, { ...locked!, status: 'rejected' }, T0 + 3000);
      });
      t.equal(status, 'partially_admitted', 'rejected, admitted, and a pending admitted player');
    });

    await t.test('two reviews of one match at once: the second waits for the first and the status counts both', async (t) => {
      const base = record('m-r2', [{ ext: 'r1', customerId: 'cust_r1' }, { ext: 'r2', customerId: 'cust_r2' }]);
      const m: MatchRow = { ...base, status: 'held', players: base.players.map((p) => ({ ...p, status: 'held', pendingVerdict: 'held' })) };
      t.equal(await records.claim(env, m), true);
      const [p1, p2] = m.players;
      const order: string[] = [];
      let releaseFirst!: () => void;
      const firstMayCommit = new Promise<void>((r) => {
        releaseFirst = r;
      });
      let firstLocked!: () => void;
      const firstHasLock = new Promise<void>((r) => {
        firstLocked = r;
      });
      const review = (p: PlayerRow, status: 'admitted' | 'rejected', hold: Promise<void> | null) =>
        sql.begin(async (txn) => {
          const tx = txn as unknown as typeof sql;
          const locked = await records.lockPlayer(tx, env, p.id);
          order.push(`${status} locked`);
          if (hold) {
            firstLocked();
            await hold;
          }
          const out = await records.writeReview(tx, env, m.id, { ...locked!, status }, T0 + 5000);
          order.push(`${status} wrote ${out}`);
          return out;
        });
      const first = review(p1!, 'admitted', firstMayCommit);
      await firstHasLock;
      const second = review(p2!, 'rejected', null);
      // Give the second review time to reach its lock: it must not get past it while the first holds the record.
      await new Promise((r) => setTimeout(r, 200));
      t.same(order, ['admitted locked'], 'the second review waits on the record lock');
      releaseFirst();
      t.equal(await first, 'held', 'after the first review one player is still held');
      t.equal(await second, 'partially_admitted', 'the second review derives the status from both decisions');
      const stored = await records.load(env, { id: m.id });
      t.equal(stored?.status, 'partially_admitted');
      t.same(
        stored?.players.map((p) => p.status),
        ['admitted', 'rejected'],
      );
      t.equal(stored?.updatedAtMs, T0 + 5000, "the record's updated_at is the reviews' time (the environment's clock), as its players'");
      t.same(
        stored?.players.map((p) => p.updatedAtMs),
        [T0 + 5000, T0 + 5000],
      );
    });

    await t.test('lists: the review queue oldest first, others newest first', async (t) => {
      const held1 = { ...record('m-h1', [{ ext: 'h1' }]), status: 'held' };
      const held2 = { ...record('m-h2', [{ ext: 'h2' }]), status: 'held' };
      t.equal(await records.claim(env, held1), true);
      t.equal(await records.claim(env, held2), true);
      const queue = await records.list(env, { status: 'held', limit: 10, after: null });
      t.same(
        queue.map((m) => m.id),
        [held1.id, held2.id],
      );
      t.equal(queue[0]!.players.length, 1);
      const all = await records.list(env, { status: null, limit: 2, after: null });
      t.ok(all[0]!.id > all[1]!.id);
    });
  });
}
