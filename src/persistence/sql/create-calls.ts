// Which resource each creating request made, by its call id (gateway/idempotency.ts callIdOf: a
// hash of the Idempotency-Key's scope, the key and the request's fingerprint). A create records it
// in the transaction that inserts the resource, so a run again of the request (its answer was never
// stored: the claim went stale, or a 5xx released it) finds the first run's resource and answers it
// instead of creating a second. A call id names one caller's scope, key and body, so a record is
// never found by another environment, person or body. Without a call id nothing is recorded or found.
//
// A record answers only runs of the same request: those within createCallsLiveMs (a claim's life,
// limits.idempotencyRetentionMs) of its last run, as the actors remember their calls. The same key
// and body after that are a new request (the key's stored answer expires that long after the last
// run completed, later still), with the same call id: the old record is ignored, never refreshed,
// and the new request's create takes it over.
import { ApiError } from '../../errors/api-error.js';
import { limits } from '../../limits.js';
import type { Sql, Tx } from './db.js';

/** Rows deleted per purgeCreateCalls call; call again while it returns this many. */
export const createCallsPurgeBatchMax = 10_000;

/**
 * How long after a request's last run its record still answers a run again: an Idempotency-Key's
 * stored answer lives this long after the run that stored it, so a run with the same key and body
 * after that is a new request, not a run again. (A run again after a 5xx or a lost answer comes
 * while the key has no stored answer; one that waits longer than this makes another resource.)
 */
export const createCallsLiveMs = limits.idempotencyRetentionMs;

/** How long a record is kept unused: past createCallsLiveMs it answers nothing; the hour is slack. */
export const createCallsKeptMs = createCallsLiveMs + 3600_000;

const liveSecs = createCallsLiveMs / 1000;

/** Thrown inside a creating transaction (rolling it back) when a run of the same call recorded first. */
export class CreatedEarlier extends Error {
  constructor(readonly resourceId: string) {
    super(`created earlier: ${resourceId}`);
  }
}

/**
 * The id of what an earlier run of `callId` created, or null (none, no call id, or a record of an
 * earlier request: unused for createCallsLiveMs). Marks a live record used now, so it keeps
 * answering runs again for createCallsLiveMs more.
 */
export async function createdEarlier(db: Sql | Tx, callId: string | undefined): Promise<string | null> {
  if (callId === undefined) return null;
  const rows = await db`
    update create_calls set used_at = now()
    where call_id = ${callId} and used_at > now() - make_interval(secs => ${liveSecs})
    returning resource_id`;
  return rows.length === 0 ? null : (rows[0]!.resource_id as string);
}

/**
 * In the creating transaction, before the resource is inserted: records that `callId` creates
 * `resourceId` (taking over a record of an earlier request, past createCallsLiveMs). A run of the
 * same call whose transaction recorded first (committed while this one waited on the row) wins:
 * CreatedEarlier names its resource, and this transaction must roll back.
 */
export async function recordCreate(tx: Tx, callId: string | undefined, resourceId: string): Promise<void> {
  if (callId === undefined) return;
  const rows = await tx`
    insert into create_calls (call_id, resource_id, used_at) values (${callId}, ${resourceId}, now())
    on conflict (call_id) do update set resource_id = excluded.resource_id, used_at = excluded.used_at
    where create_calls.used_at <= now() - make_interval(secs => ${liveSecs})
    returning 1`;
  if (rows.length === 1) return;
  const earlier = await createdEarlier(tx, callId);
  // Live a moment ago (the insert found it so), so still live: `??` only satisfies the type.
  throw new CreatedEarlier(earlier ?? resourceId);
}

/** How a run again of a create is answered (createOncePerCall). */
export interface RunAgain<T> {
  /**
   * The resource the first run made, as it is now (after the side effects a first run that died
   * may have skipped, such as a cache invalidation); resource_not_found when it is gone.
   */
  found: (resourceId: string) => Promise<T>;
  /**
   * The caller's permission now, checked as the create checks it before `found` answers: a run
   * again answers only a caller who could make the request now (a demoted admin is refused).
   */
  allowed?: (resourceId: string) => Promise<void>;
  /** The message of resource_not_found when `found` says the resource is gone; default: created, then deleted. */
  gone?: (resourceId: string) => string;
}

const deletedSince = (id: string) => `An earlier run of this request created ${id}, which was deleted since.`;

/**
 * Runs a create once per call. `create` inserts the resource in a transaction that calls
 * recordCreate first; a run again is answered by `again` (a function: its `found`), whether the
 * record is seen before (createdEarlier), inside the transaction, or after `create` failed (a
 * check made before the transaction can refuse what the first run, finishing meanwhile, made: a
 * cap it filled, a name it took). A resource gone since is resource_not_found: the request did
 * make it, and must not make another.
 */
export async function createOncePerCall<T>(
  db: Sql,
  callId: string | undefined,
  again: RunAgain<T> | RunAgain<T>['found'],
  create: () => Promise<T>,
): Promise<T> {
  if (callId === undefined) return create();
  const { found, allowed, gone = deletedSince } = typeof again === 'function' ? { found: again } : again;
  let earlier = await createdEarlier(db, callId);
  if (earlier === null) {
    try {
      return await create();
    } catch (err) {
      if (err instanceof CreatedEarlier) earlier = err.resourceId;
      else {
        // A failure to look answers the create's own error.
        earlier = await createdEarlier(db, callId).catch(() => null);
        if (earlier === null) throw err;
      }
    }
  }
  if (allowed !== undefined) await allowed(earlier);
  try {
    return await found(earlier);
  } catch (err) {
    if (err instanceof ApiError && err.code === 'resource_not_found') {
      throw new ApiError('resource_not_found', { message: gone(earlier) });
    }
    throw err;
  }
}

/**
 * Deletes up to createCallsPurgeBatchMax records unused for keptMs; returns how many it deleted.
 * Rows another purge (another node's) holds are skipped, not waited for: two purges never deadlock.
 */
export async function purgeCreateCalls(sql: Sql, keptMs: number = createCallsKeptMs): Promise<number> {
  const gone = await sql`
    delete from create_calls
    where call_id in (
      select call_id from create_calls
      where used_at < now() - make_interval(secs => ${keptMs / 1000})
      limit ${createCallsPurgeBatchMax}
      for update skip locked
    )
    returning 1`;
  return gone.length;
}
