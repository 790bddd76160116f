// Which environments have time-based work due, each by its OWN clock: the real clock plus the
// environment's test clock offset (environments.clock_offset_ms, 0 for live environments and for
// test environments never advanced). The sweeps of the due-work scheduler pick environments with
// this, so an advanced test environment's due work runs on the next sweep as a live one's does
// (picking by the real clock alone left it until real time caught up with the offset).
import type postgres from 'postgres';
import type { Sql } from './db.js';

type Fragment = postgres.PendingQuery<postgres.Row[]>;

/**
 * The environments of `table` (which has an environment_id) with a row for which `due(at)` holds,
 * `at` being the environment's now as a timestamptz expression; `due` names the table's columns
 * as `x.<column>`. The first part is the plain scan by the real clock (every environment's clock
 * is at or ahead of it, so what is due by it is due everywhere; it uses the table's due index),
 * the second probes only the environments whose clock runs ahead.
 */
export async function environmentsDue(sql: Sql, realNowMs: number, table: string, due: (at: Fragment) => Fragment): Promise<string[]> {
  const rows = await sql`
    select distinct x.environment_id as id from ${sql(table)} x
    where ${due(sql`to_timestamp(${realNowMs}::float8 / 1000)`)}
    union
    select e.id from environments e
    where e.clock_offset_ms > 0 and exists (
      select 1 from ${sql(table)} x
      where x.environment_id = e.id and ${due(sql`to_timestamp((${realNowMs}::float8 + e.clock_offset_ms) / 1000)`)})`;
  return rows.map((r) => r.id as string);
}
