// Which resource each creating request made, by its call id (gateway/idempotency.ts callIdOf: a
// hash of the Idempotency-Key's scope, the key and the request's fingerprint). A create records it
// in the transaction that inserts the resource, so a run again of the request (its answer was never
// stored: the claim went stale, or a 5xx released it) finds the first run's resource and answers it
// instead of creating a second. A call id names one caller's scope, key and body, so a record is
// never found by another environment, person or body. Without a call id nothing is recorded or found.
import { ApiError } from '../../errors/api-error.js';
import { limits } from '../../limits.js';
import type { Sql, Tx } from './db.js';

/** Rows deleted per purgeCreateCalls call; call again while it returns this many. */
export const createCallsPurgeBatchMax = 10_000;

/** Thrown inside a creating transaction (rolling it back) when a run of the same call recorded first. */
export class CreatedEarlier extends Error {
  constructor(readonly resourceId: string) {
    super(`created earlier: ${resourceId}`);
  }
}

/**
 * The id of what an earlier run of `callId` created, or null (none, or no call id). Marks the
 * record used now: it is kept while runs of its request can still come (purgeCreateCalls).
 */
export async function createdEarlier(db: Sql | Tx, callId: string | undefined): Promise<string | null> {
  if (callId === undefined) return null;
  const rows = await db`update create_calls set used_at = now() where call_id = ${callId} returning resource_id`;
  return rows.length === 0 ? null : (rows[0]!.resource_id as string);
}

/**
 * In the creating transaction, before the resource is inserted: records that `callId` creates
 * `resourceId`. A run of the same call whose transaction recorded first (committed while this one
 * waited on the row) wins: CreatedEarlier names its resource, and this transaction must roll back.
 */
export async function recordCreate(tx: Tx, callId: string | undefined, resourceId: string): Promise<void> {
  if (callId === undefined) return;
  const rows = await tx`
    insert into create_calls (call_id, resource_id, used_at) values (${callId}, ${resourceId}, now())
    on conflict (call_id) do nothing
    returning 1`;
  if (rows.length === 1) return;
  const earlier = await createdEarlier(tx, callId);
  // Recorded, so not gone: a purge takes only records unused for a day.
  throw new CreatedEarlier(earlier ?? resourceId);
}

/**
 * Runs a create once per call. `create` inserts the resource in a transaction that calls
 * recordCreate first; `found` answers a run again with what the first run created (the resource as
 * it is now, after the side effects a first run that died may have skipped, such as a cache
 * invalidation), whether the record is seen before (createdEarlier) or inside the transaction. A
 * resource deleted since is resource_not_found: the request did create it, and must not make another.
 */
export async function createOncePerCall<T>(
  db: Sql,
  callId: string | undefined,
  found: (resourceId: string) => Promise<T>,
  create: () => Promise<T>,
): Promise<T> {
  if (callId === undefined) return create();
  let earlier = await createdEarlier(db, callId);
  if (earlier === null) {
    try {
      return await create();
    } catch (err) {
      if (!(err instanceof CreatedEarlier)) throw err;
      earlier = err.resourceId;
    }
  }
  try {
    return await found(earlier);
  } catch (err) {
    if (err instanceof ApiError && err.code === 'resource_not_found') {
      throw new ApiError('resource_not_found', { message: `An earlier run of this request created ${earlier}, which was deleted since.` });
    }
    throw err;
  }
}

/**
 * How long a record is kept unused: an Idempotency-Key claim lives limits.idempotencyRetentionMs
 * since it was made (or taken over), a run again needs a live claim, and every run marks its record
 * used just after its claim; the hour covers clocks of nodes and database that disagree.
 */
export const createCallsKeptMs = limits.idempotencyRetentionMs + 3600_000;

/** Deletes up to createCallsPurgeBatchMax records unused for keptMs; returns how many it deleted. */
export async function purgeCreateCalls(sql: Sql, keptMs: number = createCallsKeptMs): Promise<number> {
  const gone = await sql`
    delete from create_calls
    where call_id in (
      select call_id from create_calls
      where used_at < now() - make_interval(secs => ${keptMs / 1000})
      limit ${createCallsPurgeBatchMax}
    )
    returning 1`;
  return gone.length;
}
