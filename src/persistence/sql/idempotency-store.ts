// PgIdempotencyStore: the IdempotencyStore port on PostgreSQL or embedded PGlite.
// A claim is ONE statement (insert, or take over an expired/abandoned row, under the row lock),
// so of concurrent claimers exactly one gets null. A row past expires_at counts as absent; an
// in_progress row is abandoned once its last sign of life (touched_at, else created_at for rows
// claimed before that column) is older than the stale window. Headers are stored as JSON text,
// the customers an answer is about as a text[] (migration 030), which the erasure deletes by.
// Time comes from the injected clock (ms), not the database's now(), so the contract suite
// drives every adapter with the same fake clock; node clocks only need to agree within seconds.
import { limits } from '../../limits.js';
import type { IdempotencyRecord, IdempotencyStore } from '../ports.js';
import type { Sql } from './db.js';

/** How long an in_progress claim lives at most before purgeExpired may drop it. */
export const idempotencyClaimTtlMs = limits.idempotencyRetentionMs;
/** Rows deleted per purgeExpired call; call again while it returns this many. */
export const idempotencyPurgeBatchMax = 10_000;

const claimAttemptsMax = 5;

export class PgIdempotencyStore implements IdempotencyStore {
  constructor(
    private readonly sql: Sql,
    private readonly clock: () => number = Date.now,
  ) {}

  async claim(scope: string, key: string, fingerprint: string, staleAfterMs: number): Promise<IdempotencyRecord | null> {
    // A loop only because the row can vanish between the claim and the read (release, purge);
    // then the next attempt claims it.
    for (let attempt = 0; attempt < claimAttemptsMax; attempt++) {
      const nowMs = this.clock();
      // Clamped: a huge staleAfterMs ("never stale") must not produce an out-of-range timestamp.
      const staleBeforeMs = Math.max(nowMs - staleAfterMs, 0);
      const claimed = await this.sql`
        insert into idempotency_keys as i (scope, key, fingerprint, state, status, body, headers, created_at, touched_at, expires_at)
        values (${scope}, ${key}, ${fingerprint}, 'in_progress', null, null, null,
                to_timestamp(${nowMs}::float8 / 1000), to_timestamp(${nowMs}::float8 / 1000),
                to_timestamp(${nowMs + idempotencyClaimTtlMs}::float8 / 1000))
        on conflict (scope, key) do update
        set fingerprint = excluded.fingerprint, state = 'in_progress', status = null, body = null, headers = null,
            customer_ids = null, created_at = excluded.created_at, touched_at = excluded.touched_at, expires_at = excluded.expires_at
        where i.expires_at < to_timestamp(${nowMs}::float8 / 1000)
           or (i.state = 'in_progress'
               and coalesce(i.touched_at, i.created_at) < to_timestamp(${staleBeforeMs}::float8 / 1000))
        returning 1`;
      if (claimed.length === 1) return null;
      const [row] = await this.sql`
        select fingerprint, state, status, body, headers from idempotency_keys
        where scope = ${scope} and key = ${key} and expires_at >= to_timestamp(${nowMs}::float8 / 1000)`;
      if (row) {
        return {
          fingerprint: row.fingerprint as string,
          state: row.state as IdempotencyRecord['state'],
          status: row.status as number | null,
          body: row.body as string | null,
          headers: row.headers === null ? null : (JSON.parse(row.headers as string) as Record<string, string>),
        };
      }
    }
    throw new Error(`idempotency claim ${scope}/${key}: row kept changing under ${claimAttemptsMax} attempts`);
  }

  async touch(scope: string, key: string): Promise<boolean> {
    const nowMs = this.clock();
    const touched = await this.sql`
      update idempotency_keys set touched_at = to_timestamp(${nowMs}::float8 / 1000)
      where scope = ${scope} and key = ${key} and state = 'in_progress'
        and expires_at >= to_timestamp(${nowMs}::float8 / 1000)
      returning 1`;
    return touched.length === 1;
  }

  async complete(
    scope: string,
    key: string,
    status: number,
    body: string,
    headers: Record<string, string> | null,
    retentionMs: number,
    customerIds: readonly string[] = [],
  ): Promise<void> {
    const nowMs = this.clock();
    const done = await this.sql`
      update idempotency_keys
      set state = 'done', status = ${status}, body = ${body}, headers = ${headers === null ? null : JSON.stringify(headers)},
          customer_ids = ${customerIds as string[]}::text[],
          expires_at = to_timestamp(${nowMs + retentionMs}::float8 / 1000)
      where scope = ${scope} and key = ${key}
      returning 1`;
    // Only a caller that claimed may complete; a missing row means the claim was released or
    // purged, and storing an answer without its fingerprint would break reuse detection.
    if (done.length === 0) throw new Error(`idempotency complete ${scope}/${key}: no claim`);
  }

  async release(scope: string, key: string): Promise<void> {
    await this.sql`delete from idempotency_keys where scope = ${scope} and key = ${key} and state = 'in_progress'`;
  }

  async forget(environmentId: string, customerIds: readonly string[]): Promise<number> {
    if (customerIds.length === 0) return 0;
    const ids = customerIds as string[];
    // Every scope of the environment: its API keys' (the environment id) and each person's
    // (`env/user`). An environment id holds no '/', so the prefix names its scopes only.
    const labelled = await this.sql`
      delete from idempotency_keys
      where customer_ids && ${ids}::text[] and state = 'done'
        and (scope = ${environmentId} or starts_with(scope, ${`${environmentId}/`}))
      returning 1`;
    // Answers stored before customer_ids (null) are found by the id in their body; strpos, not
    // LIKE: an id is matched as it is, with no pattern characters to escape.
    const unlabelled = await this.sql`
      delete from idempotency_keys
      where customer_ids is null and state = 'done'
        and (scope = ${environmentId} or starts_with(scope, ${`${environmentId}/`}))
        and exists (select 1 from unnest(${ids}::text[]) as m(s) where strpos(body, m.s) > 0)
      returning 1`;
    return labelled.length + unlabelled.length;
  }

  /** Deletes up to idempotencyPurgeBatchMax expired rows; returns how many it deleted. */
  async purgeExpired(): Promise<number> {
    const nowMs = this.clock();
    const gone = await this.sql`
      delete from idempotency_keys
      where (scope, key) in (
        select scope, key from idempotency_keys
        where expires_at < to_timestamp(${nowMs}::float8 / 1000)
        limit ${idempotencyPurgeBatchMax}
      )
      returning 1`;
    return gone.length;
  }
}
