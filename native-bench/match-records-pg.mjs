// PostgreSQL's CPU per match report for the match record store alone: claims and verdicts of
// 4-player reports, written in batches of 16 on one connection, 200 batches to warm up, then three
// rounds of 300 batches (4,800 reports each), each round reporting PostgreSQL's CPU (its backend's
// /proc counters), this process's CPU and the wall time per report. A cost that grows round by
// round grows with the reports stored.
//
//   node native-bench/match-records-pg.mjs [dist root, default ./dist]
//   CUSTOM_PLANS=1 ...   every statement planned at each execution (plan_cache_mode on the connection)
//   DATABASE_URL=...     default postgres://postgres@127.0.0.1:5432/test; a schema of its own, dropped after
import { readFileSync } from 'node:fs';
import path from 'node:path';
import postgres from 'postgres';

const root = path.resolve(process.argv[2] ?? 'dist');
const { migrate, dropSchema } = await import(path.join(root, 'src/persistence/sql/db.js'));
const { MatchRecords } = await import(path.join(root, 'src/persistence/sql/match-records.js'));
const schema = `bench_mr_${process.pid}`;
const connection = { search_path: schema, ...(process.env.CUSTOM_PLANS ? { plan_cache_mode: 'force_custom_plan' } : {}) };
const sql = postgres(process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test', { max: 1, onnotice: () => {}, connection });
await migrate(sql, schema);
try {
  const [{ pid }] = await sql`select pg_backend_pid() as pid`;
  const pgCpuSeconds = () => {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(f[11]) + Number(f[12])) / 100;
  };
  const records = new MatchRecords(sql);
  const t0 = Date.now();
  let seq = 0;
  const report = () => {
    const id = `mr_${++seq}`;
    const players = [0, 1, 2, 3].map((i) => ({
      id: `mrp_${seq}_${i}`, matchResultId: id, position: i, customerRef: { by: 'external_id', value: `m${i}-${seq}` }, customerId: null,
      metrics: { score: 10 + i }, won: i === 0, status: 'pending', pendingVerdict: 'admitted', reasons: [], eventId: null,
      clientEventId: null, review: null, createdAtMs: t0, updatedAtMs: t0,
    }));
    return {
      id, matchId: `m${seq}`, profileId: 'mpf_1', profileKey: 'arena', profileRevision: 1, event: 'match.completed', fingerprint: `fp${seq}`,
      startedAtMs: t0 - 600_000, endedAtMs: t0, durationSeconds: 600, reportingKeyId: 'key_1', status: 'admitted', admissionErrors: [],
      revision: 1, createdAtMs: t0, updatedAtMs: t0, players,
    };
  };
  const batches = async (n) => {
    for (let b = 0; b < n; b++) {
      const rs = Array.from({ length: 16 }, report);
      await Promise.all(rs.map((r) => records.claim('env_1', r)));
      await Promise.all(
        rs.map((r) =>
          records.writeVerdicts({
            environmentId: 'env_1', matchResultId: r.id, admissionErrors: [], atMs: t0,
            players: r.players.map((p) => ({ id: p.id, status: 'admitted', customerId: `cust_${p.id}`, reasons: [], eventId: `evt_${p.id}`, clientEventId: null })),
          }),
        ),
      );
    }
  };
  await batches(200);
  for (let round = 1; round <= 3; round++) {
    const pg0 = pgCpuSeconds();
    const me0 = process.cpuUsage();
    const w0 = performance.now();
    await batches(300);
    const n = 300 * 16;
    const me = process.cpuUsage(me0);
    console.log(
      `round ${round}: PostgreSQL ${(((pgCpuSeconds() - pg0) * 1e6) / n).toFixed(0)} µs/report, ` +
        `client ${((me.user + me.system) / n).toFixed(0)} µs/report, wall ${(((performance.now() - w0) * 1000) / n).toFixed(0)} µs/report`,
    );
  }
} finally {
  await dropSchema(sql, schema);
  await sql.end();
}
