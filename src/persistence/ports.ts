// The storage ports. Everything above persistence/ talks to storage only through these
// interfaces; each has an external adapter (Redis / PostgreSQL), an embedded adapter (fsynced
// file / PGlite) and, where useful, an in-memory twin, and all of them pass the same contract suite
// in test/contract. Guarantees are stated per method; an adapter that cannot keep one must throw.

/** Journal offsets are opaque strings, totally ordered per partition by compareOffsets. '0' is before everything. */
export type Offset = string;
export const offsetZero: Offset = '0';

/** Redis stream ids ("<ms>-<seq>") and file-journal ids ("0-<n>") share this order. */
export function compareOffsets(a: Offset, b: Offset): number {
  const ia = a.indexOf('-');
  const ib = b.indexOf('-');
  const ma = BigInt(ia < 0 ? a : a.slice(0, ia));
  const mb = BigInt(ib < 0 ? b : b.slice(0, ib));
  if (ma !== mb) return ma < mb ? -1 : 1;
  const sa = ia < 0 ? 0n : BigInt(a.slice(ia + 1));
  const sb = ib < 0 ? 0n : BigInt(b.slice(ib + 1));
  return sa === sb ? 0 : sa < sb ? -1 : 1;
}

export interface JournalEntry {
  offset: Offset;
  payload: Uint8Array;
}

/** Thrown by Journal.append when the epoch is not the partition's current lease epoch. */
export class FencedError extends Error {
  constructor(
    readonly partition: number,
    readonly epoch: number,
  ) {
    super(`partition ${partition}: lease epoch ${epoch} is no longer current`);
    this.name = 'FencedError';
  }
}

export interface Journal {
  /**
   * Appends ONE entry (one group-commit flush of one partition) if `epoch` is the partition's
   * current lease epoch, checked atomically with the append; otherwise rejects with FencedError
   * and appends nothing. Resolves with the entry's offset only once the entry is durable
   * (Redis acknowledged it / the file is fsynced). Offsets increase per partition.
   * Calls for one partition resolve in call order.
   */
  append(partition: number, epoch: number, payload: Uint8Array): Promise<Offset>;
  /**
   * Group commit across partitions: one entry per item (distinct partitions), each with append's
   * guarantees, in as few round trips as the adapter can. Resolves per item with the offset or a
   * FencedError (that partition got nothing); rejects as a whole only if the outcome of every item
   * is unknown (connection lost), in which case the caller must treat each as failed-and-unknown.
   */
  appendMany(items: ReadonlyArray<{ partition: number; epoch: number; payload: Uint8Array }>): Promise<Array<Offset | FencedError>>;
  /** Entries with offset strictly greater than `after`, oldest first, at most `count`. */
  read(partition: number, after: Offset, count: number): Promise<JournalEntry[]>;
  /** Removes entries with offset <= `upTo` (may keep some: trimming is allowed to be lazy). */
  trim(partition: number, upTo: Offset): Promise<void>;
  /** The offset of the newest entry, or offsetZero. */
  last(partition: number): Promise<Offset>;
  close(): Promise<void>;
}

export interface Lease {
  partition: number;
  nodeId: string;
  epoch: number;
}

export interface Leases {
  /**
   * Takes the partition's lease for nodeId when nobody holds it or the holder's lease expired.
   * Every successful acquire returns a strictly greater epoch than any before it for that
   * partition; that epoch is what Journal.append checks. Returns null when another node holds it.
   */
  acquire(partition: number, nodeId: string, ttlMs: number): Promise<number | null>;
  /** Extends the lease; false if nodeId/epoch no longer holds it (then stop writing). */
  renew(partition: number, nodeId: string, epoch: number, ttlMs: number): Promise<boolean>;
  /** renew for many partitions in one round trip: one answer per item, in order. */
  renewMany(nodeId: string, items: ReadonlyArray<{ partition: number; epoch: number }>, ttlMs: number): Promise<boolean[]>;
  /** Gives the lease up at once (graceful shutdown) if still held with that epoch. */
  release(partition: number, nodeId: string, epoch: number): Promise<void>;
  /** Current holders of partitions 0..partitions-1 (null where free or expired). */
  list(partitions: number): Promise<Array<Lease | null>>;
}

export interface NodeInfo {
  nodeId: string;
  /** host:port of the node's gRPC server. */
  grpcAddress: string;
  startedAtMs: number;
}

export interface Membership {
  /** Registers or refreshes the node; it counts as alive for ttlMs after the last heartbeat. */
  heartbeat(node: NodeInfo, ttlMs: number): Promise<void>;
  leave(nodeId: string): Promise<void>;
  /** Nodes alive now, sorted by nodeId. */
  alive(): Promise<NodeInfo[]>;
}

/**
 * Named cluster-wide mutual exclusion with a ttl: a holder that dies frees its lock when the ttl
 * runs out. Not fenced: a holder still working after its ttl may overlap the next holder. withLock
 * therefore extends the lock while its work runs and lets the work check, before each step, that
 * it still holds it; what stays open is a holder frozen for longer than the ttl between such a
 * check and the step it then runs (or cut off from the lock's storage for that long while the
 * step is in flight). Names are free-form.
 */
export interface Locks {
  /**
   * Takes the lock when it is free or expired and returns a token unique to this acquisition;
   * null, at once, while another token holds it. Never waits.
   */
  acquire(name: string, ttlMs: number): Promise<string | null>;
  /**
   * Frees the lock if `token` still holds it. False when it had expired or another token holds
   * it now (a late release never frees someone else's lock).
   */
  release(name: string, token: string): Promise<boolean>;
  /**
   * Resets the lock's ttl to ttlMs from now if `token` still holds it, atomically with the check.
   * False, changing nothing, when it had expired or another token holds it now (a late extend
   * never keeps someone else's lock alive, nor revives an expired one).
   */
  extend(name: string, token: string, ttlMs: number): Promise<boolean>;
}

/**
 * The environment-wide register of client event ids (permanent deduplication across customers):
 * each id is bound, forever, to the content fingerprint it was first claimed with. It also keeps
 * the events of erased customers (erase), so that a resend of such an event is answered as the
 * duplicate it is instead of recording it again for a new customer of the same external id.
 */
export interface EventIds {
  /**
   * Binds each item's id in `environmentId` to its fingerprint if the id is new, atomically per
   * item, and answers, per item in order, the fingerprint the id is bound to now (its own for a
   * new id; the first claimer's otherwise, also between items of one call and concurrent callers
   * on any node). Ids are never released. An item whose id was bound to its own fingerprint
   * before this call and whose (hash53(id), fingerprint) was erased answers ErasedEvent instead:
   * the event is recorded, as that id, for a customer since erased. The claim that binds an id
   * never answers ErasedEvent (a new id costs no look-up of erased events).
   */
  claim(environmentId: string, items: ReadonlyArray<{ id: string; fp: number }>): Promise<Array<number | ErasedEvent>>;
  /**
   * Remembers, for good, that the event with client id hash `idHash` (hash53 of the id, as
   * SeenEvents keeps it) and fingerprint `fp` is recorded as `eventId` for a customer being or
   * since erased. Idempotent: the first event id written for an (idHash, fp) stays.
   */
  erase(environmentId: string, records: ReadonlyArray<ErasedEventRecord>): Promise<void>;
}

/** EventIds.claim's answer for an id bound to the item's content whose customer was erased. */
export interface ErasedEvent {
  /** The service id (evt_...) the event was recorded as. */
  erasedEventId: string;
}

/** One recorded event of an erased customer (EventIds.erase). */
export interface ErasedEventRecord {
  idHash: number;
  fp: number;
  eventId: string;
}

/** One shared limit slot of an event: rule, limit, scope key (computed from the event) and the limit's max. */
export interface SharedLimitItem {
  ruleId: string;
  limitId: string;
  scopeKey: string;
  max: number;
}

/** SharedLimits.reserve's answer for one item. */
export interface SharedLimitSlot {
  granted: boolean;
  /** True only when this call took the slot (and counted it); a slot the event held already is false. */
  created: boolean;
  /** Firings counted for (rule, limit, scope key), this event's included when granted. */
  taken: number;
}

/**
 * Rule limits shared by every customer of an environment (scopes without a customer path),
 * counted on every partition and node: at most `max` slots per (rule, limit, scope key), each
 * held by one client event id. Counts change only through guarded statements (never
 * read-modify-write), so racing reservations for max K grant exactly K.
 */
export interface SharedLimits {
  /**
   * Answers per item in item order. Idempotent per (environment, event id, rule, limit, scope
   * key): a slot this event holds already is granted with created false and takes nothing more;
   * otherwise a slot is taken (created true) while fewer than `max` are taken, else refused
   * (granted false, taken: the count that refused it). Items repeated in one call share an answer.
   */
  reserve(environmentId: string, clientEventId: string, items: ReadonlyArray<SharedLimitItem>): Promise<SharedLimitSlot[]>;
  /** Frees the slots of these items that this event holds (each freed slot decrements its count); others are untouched. */
  release(environmentId: string, clientEventId: string, items: ReadonlyArray<Omit<SharedLimitItem, 'max'>>): Promise<void>;
  /** The taken count per item, in item order (0 when none); reserves nothing (simulate). */
  counts(environmentId: string, items: ReadonlyArray<Omit<SharedLimitItem, 'max'>>): Promise<number[]>;
}

/** Thrown by withLock when the lock stayed taken for the whole wait. */
export class LockBusyError extends Error {
  constructor(readonly lockName: string) {
    super(`lock ${lockName} is held elsewhere`);
    this.name = 'LockBusyError';
  }
}

/** Thrown by LockHold.assertHeld once the lock may belong to someone else. */
export class LockLostError extends Error {
  constructor(readonly lockName: string) {
    super(`lock ${lockName} was lost`);
    this.name = 'LockLostError';
  }
}

/** What withLock hands its `run`: whether the lock it runs under is still held. */
export interface LockHold {
  /**
   * True while the lock is known to be held: no extend answered false, and less than the ttl has
   * passed since the start of the last call that answered held (the acquire or an extend; an
   * extend that failed with a storage error proves nothing). Once false, false for good.
   */
  held(): boolean;
  /** Throws LockLostError unless held(): call it right before each step the lock guards. */
  assertHeld(): void;
}

/**
 * Runs `run` holding the lock `name`: retries acquire with short growing pauses (10 ms doubling
 * to 100 ms, jittered so waiters on several nodes do not move in step) for at most waitMs, then
 * rejects with LockBusyError without running it. While `run` runs, the lock is extended every
 * ttl/3 (keepHeld) and `run` can ask whether it still holds it; it is never interrupted, so it
 * decides what a lost lock means. Releases in finally; a failed or late release changes nothing
 * for the caller (the ttl frees the lock).
 */
export async function withLock<T>(
  locks: Locks,
  name: string,
  bounds: { ttlMs: number; waitMs: number },
  run: (hold: LockHold) => Promise<T>,
): Promise<T> {
  const giveUpAtMs = Date.now() + bounds.waitMs;
  let pauseMs = 10;
  let askedAtMs = Date.now();
  let token = await locks.acquire(name, bounds.ttlMs);
  while (token === null) {
    const leftMs = giveUpAtMs - Date.now();
    if (leftMs <= 0) throw new LockBusyError(name);
    await new Promise((r) => setTimeout(r, Math.min(leftMs, pauseMs * (0.5 + Math.random()))));
    pauseMs = Math.min(pauseMs * 2, 100);
    askedAtMs = Date.now();
    token = await locks.acquire(name, bounds.ttlMs);
  }
  const kept = keepHeld(locks, name, token, bounds.ttlMs, askedAtMs);
  try {
    return await run(kept.hold);
  } finally {
    kept.stop();
    await locks.release(name, token).catch(() => false);
  }
}

/**
 * Extends the lock `token` took at heldSinceMs every ttl/3 until stopped, on an unref'd timer that
 * is armed only once the previous extend answered (never two in flight; the next one is due ttl/3
 * after the previous was sent, at once if that already passed). The ttl counts from when a call
 * was sent, so held() never outlives the key. A lock once lost is not extended again.
 */
function keepHeld(
  locks: Locks,
  name: string,
  token: string,
  ttlMs: number,
  heldSinceMs: number,
): { hold: LockHold; stop(): void } {
  let lastSentAtMs = heldSinceMs;
  let heldUntilMs = heldSinceMs + ttlMs;
  let lost = false;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const held = () => {
    if (Date.now() >= heldUntilMs) lost = true;
    return !lost;
  };
  const extend = async () => {
    const sentAtMs = Date.now();
    lastSentAtMs = sentAtMs;
    try {
      if (await locks.extend(name, token, ttlMs)) heldUntilMs = sentAtMs + ttlMs;
      else lost = true;
    } catch {
      // A storage error: the lock counts as held until heldUntilMs, as if this extend never ran.
    }
    arm();
  };
  const arm = () => {
    if (stopped || !held()) return;
    timer = setTimeout(() => void extend(), Math.max(0, lastSentAtMs + ttlMs / 3 - Date.now())).unref();
  };
  arm();
  return {
    hold: {
      held,
      assertHeld: () => {
        if (!held()) throw new LockLostError(name);
      },
    },
    stop: () => {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

/** Broadcast to every node (cache invalidation, revocations). At most once, best effort, fast. */
export interface Bus {
  publish(channel: string, message: string): Promise<void>;
  subscribe(channel: string, handler: (message: string) => void): Promise<void>;
  close(): Promise<void>;
}

/** What the engine persists for one customer actor. payload is the versioned actor codec. */
export interface SnapshotRow {
  environmentId: string;
  customerId: string;
  partition: number;
  payload: Uint8Array;
}

/** A routing key (external id or alias) of a customer, persisted for passivated actors. */
export interface KeyRow {
  environmentId: string;
  key: string;
  customerId: string;
  partition: number;
}

export interface SnapshotSave {
  partition: number;
  /** The writer's lease epoch: refused when the partition was claimed under a greater one. */
  epoch: number;
  checkpoint: Offset;
  rows: SnapshotRow[];
  keys: KeyRow[];
  keysRemoved: Array<{ environmentId: string; key: string }>;
}

export interface SnapshotStore {
  /**
   * In ONE transaction: upserts the snapshots and key rows (deleting the keys in `keysRemoved`),
   * then records the partition's checkpoint (only ever moves forward). After it resolves, a
   * restart that replays the journal after the checkpoint rebuilds exactly the in-memory state.
   */
  save(
    partition: number,
    checkpoint: Offset,
    rows: SnapshotRow[],
    keys: KeyRow[],
    keysRemoved: Array<{ environmentId: string; key: string }>,
  ): Promise<void>;
  /**
   * save() for several partitions in ONE transaction (the snapshotter coalesces a cycle's saves),
   * fenced: an item whose epoch is below the partition's claimed epoch writes nothing and is
   * answered 'fenced'; the others are written together (all or nothing).
   */
  saveMany(items: ReadonlyArray<SnapshotSave>): Promise<Array<'saved' | 'fenced'>>;
  /**
   * A new owner's first step: raises the partition's claimed epoch to `epoch` (never lowers it),
   * so saves under older epochs are refused from now on, and returns the checkpoint.
   */
  claim(partition: number, epoch: number): Promise<Offset>;
  /** Snapshots by customer id; missing ones are simply absent from the result. */
  load(environmentId: string, customerIds: string[]): Promise<SnapshotRow[]>;
  /** Key rows for the given keys of one environment; missing ones are absent. */
  lookupKeys(environmentId: string, keys: string[]): Promise<KeyRow[]>;
  checkpoint(partition: number): Promise<Offset>;
  /** Every routing key stored for the partition (to build its never-seen filter). */
  partitionKeys(partition: number): Promise<Array<{ environmentId: string; key: string }>>;
}

/** Stored result of a creating POST (spec part 1, idempotency rules 1-4). */
export interface IdempotencyRecord {
  /** sha256 of method, path and body: a different request under the same key is a reuse. */
  fingerprint: string;
  state: 'in_progress' | 'done';
  status: number | null;
  body: string | null;
  /**
   * Response headers a replay repeats (etag, location), lower-case names; null while in progress
   * and for answers stored before headers were (they replay without them).
   */
  headers: Record<string, string> | null;
}

export interface IdempotencyStore {
  /**
   * Atomically claims (scope, key) for a request with `fingerprint`: returns null when the claim
   * is new (the caller runs the request, then calls complete), or the existing record. An
   * in_progress claim neither made nor touched for more than staleAfterMs counts as abandoned
   * (its process died) and is handed to the new caller (null).
   */
  claim(scope: string, key: string, fingerprint: string, staleAfterMs: number): Promise<IdempotencyRecord | null>;
  /**
   * Marks the in_progress claim of (scope, key) alive now: a request still running touches its
   * claim well within staleAfterMs, so it is never taken over. Returns false when there is no
   * in_progress claim any more (completed, released, purged). One statement; no read first.
   */
  touch(scope: string, key: string): Promise<boolean>;
  /**
   * Stores the final answer with the headers a replay repeats (null: none), kept at least
   * retentionMs, and the customers (cust_ ids) it is about, whether or not its body shows them
   * (forget deletes by them; default none).
   */
  complete(
    scope: string,
    key: string,
    status: number,
    body: string,
    headers: Record<string, string> | null,
    retentionMs: number,
    customerIds?: readonly string[],
  ): Promise<void>;
  /** Drops an in_progress claim whose request failed before changing anything (5xx, validation). */
  release(scope: string, key: string): Promise<void>;
  /**
   * Deletes the stored answers about any of `customerIds` (erased customers: a replay must not
   * hand their data back) in every scope of the environment: `environmentId` itself (API keys)
   * and `environmentId/...` (people). An answer is about the customers complete() named; one
   * stored before answers named them, about those its body mentions. Returns how many it deleted.
   */
  forget(environmentId: string, customerIds: readonly string[]): Promise<number>;
}
