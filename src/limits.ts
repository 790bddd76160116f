// Every numeric bound of the service, in one place, unit in the name.
// Spec part 8 values are fixed; values the spec leaves open are our choices (see README "Limits").
// Nothing here reads the environment: configuration overrides live in config.ts.

export const limits = {
  pageLimitMin: 1,
  pageLimitMax: 200,
  pageLimitDefault: 50,
  cursorCharsMax: 2048,
  idempotencyKeyCharsMax: 255,
  idempotencyRetentionMs: 24 * 3600_000,
  eventsPerBatchMax: 100,
  /** Whole request body. */
  bodyBytesMax: 1024 * 1024,
  /** Objects and arrays nested in a request body (deeper ones overflow recursive readers). */
  jsonDepthMax: 64,
  /** One event, serialized as received. */
  eventBytesMax: 32 * 1024,
  eventIdCharsMax: 255,
  eventNameCharsMax: 128,
  externalIdCharsMax: 255,
  attributeKeysMax: 100,
  /**
   * A customer's attributes, serialized as JSON: as much as one event. The whole map lives in its
   * actor, in every snapshot and journaled update, the state view and the export.
   */
  attributesBytesMax: 32 * 1024,
  /**
   * Aliases a customer holds, its own and those reaching it through merges (the state view lists
   * them all). A merge may take it past the bound (the merged customer's come along); adding one
   * more is refused then.
   */
  aliasesPerCustomerMax: 100,
  emailCharsMax: 254,
  nameCharsMax: 120,
  timezoneCharsMax: 64,
  idTokenCharsMin: 20,
  idTokenCharsMax: 8192,
  sessionLifetimeMs: 30 * 24 * 3600_000,
  customerTokenLifetimeMsDefault: 15 * 60_000,
  customerTokenLifetimeMsMax: 24 * 3600_000,
  occurredAtFutureSkewMs: 5 * 60_000,
  webhookSignatureToleranceSeconds: 300,
  /** Customer actor mailbox: commands waiting behind the one being applied. */
  mailboxDepthMax: 1000,
  /** Sync-mode events: how long the gateway waits for evaluation before answering 202 fallback. */
  syncEvaluationWaitMs: 2000,
  /** Recent event results kept in full per customer; older ids keep a 64-bit fingerprint only. */
  recentEventResultsPerCustomer: 64,
  /**
   * Answers of calls with a call id remembered per customer (CustomerState.recentCalls): a repeat
   * of a forward whose answer was lost, or of a request re-run under its Idempotency-Key, finds
   * its first answer instead of applying again. Only commands whose repeat would not be harmless
   * carry one: those actors/calls.ts (callTag) lists.
   */
  recentCallsPerCustomer: 32,
  /** ...and for as long as an Idempotency-Key is kept (a request is re-run at most that late). */
  recentCallsRetentionMs: 24 * 3600_000,
  /** Records applied but not yet durable per partition before new commands are shed (429). */
  partitionBacklogRecordsMax: 16_384,
  partitionsDefault: 256,
  /**
   * Group-commit journal calls out at once across all partitions. One: records arriving while a
   * call is out go together in the next (2026-11-25 A/B on the bench: 5-10 % less server CPU per
   * event than a call per event-loop turn, from far fewer socket writes).
   */
  journalCallsInFlightMax: 1,
  leaseTtlMs: 5000,
  /** Heartbeat and lease renewals, on their own timer (never behind a placement tick). */
  leaseRenewEveryMs: 1000,
  /** Placement ticks: read owners, acquire and recover, hand over. */
  placementTickEveryMs: 1000,
  nodeHeartbeatTtlMs: 5000,
  /**
   * Embedded mode's lock on DATA_DIR (src/persistence/file/data-dir-lock.ts): its holder refreshes
   * it every dataDirLockRefreshMs, from a thread of its own; one not refreshed for
   * dataDirLockStaleMs belongs to a process that died, and the next start takes it over.
   */
  dataDirLockStaleMs: 5000,
  dataDirLockRefreshMs: 1000,
  credentialCacheTtlMs: 60_000,
  revocationPropagationMs: 1000,
  /**
   * Snapshot cycle: every partition saves its dirty actors at least this often. A partition also
   * saves at the next sweep (every snapshotSweepMs) once it holds snapshotDirtyActorsMax dirty
   * actors (they cannot be passivated until saved: bounds memory) or snapshotTailRecordsMax journal
   * records since its last capture (bounds the replay after a crash). A hot customer is thus
   * rewritten every 10 s while its partition stays below both bounds (the cycle was 2 s).
   */
  snapshotEveryMs: 10_000,
  snapshotDirtyActorsMax: 128,
  snapshotTailRecordsMax: 2048,
  /**
   * How often partitions are checked against those two bounds and their cycle; the cycle's phases
   * are spread over the partitions, so a sweep captures a slice of them, never the whole node in
   * one tick (that stalled the event loop for tens of milliseconds with 10k dirty customers).
   * A sweep's saves share one transaction.
   */
  snapshotSweepMs: 1000,
  /**
   * Projection cycle. Each cycle has a fixed cost per partition it moves (its offset row), so fewer,
   * larger cycles cost less per event: 100 ms instead of 20 ms saved ~10 % of server CPU per single
   * event (docs/bench/2026-11-25-projector-cycle.md). Local reads drain the projector first.
   */
  projectorCycleMs: 100,
  /**
   * Records acknowledged on a node and not yet projected before its ingestion (events, match
   * players) waits: a few seconds of writes at the rates this service reaches on a small box.
   * Writes go on once the lag is back to 80 % of it.
   */
  projectorLagRecordsMax: 50_000,
  /**
   * How long a held write waits for the projector before it is answered 429 rate_limited: long
   * enough for a projector that moves at all (it brings the lag back from the bound to 80 % of it,
   * 10k records, in about a second on a small box), short enough that a stalled database is
   * reported rather than waited on, and below the 5 s deadline of a call forwarded from another
   * node (config allows at most 4 s).
   */
  projectorLagWaitMs: 2000,
  /** Active actors kept in memory before the idle, clean ones are passivated. */
  activeActorsMax: 100_000,
  actorIdleMs: 60_000,
  projectorBatchRecordsMax: 2000,
  /**
   * The environment's cluster-wide merge lock (alias additions). Extended every ttl/3 while the
   * merge runs (withLock), so its ttl need not outlast the merge, only a stall of the holder
   * between checking the lock and running the step after it; the merge stops before a step once
   * its extends failed for this long. A node that dies holding it blocks merges of that
   * environment for at most this long.
   */
  mergeLockTtlMs: 10_000,
  /** How long an alias addition waits for the merge lock before answering 429 rate_limited. */
  mergeLockWaitMs: 5000,
} as const;

export type Limits = typeof limits;
