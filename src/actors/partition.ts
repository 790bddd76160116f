// One partition: the single writer for its customers. Commands are applied synchronously (load
// first, then decide+evolve with no await), their facts go into the partition's open batch, and
// every reply waits until the batch holding everything applied before it is durable (group
// commit: one journal entry per flush, one flush in flight). If an append fails (or its batch
// cannot be encoded), memory may be ahead of the journal, so the partition is poisoned and rebuilt
// from snapshots + journal.
// Never reply before the ack; never await between load and apply.

import type { Reply as ChallengeReply } from '../domain/challenges.js';
import {
  type AliasState,
  type Command,
  type Ctx,
  type CustomerState,
  decide,
  evolve,
  type Fact,
  findCall,
  type MergeHandover,
  mergeFacts,
  mergeHandover,
  type RememberedReply,
  type Reply,
} from '../domain/customer.js';
import type { LedgerReply } from '../domain/ledger.js';
import type { MatchPlayerReply } from '../domain/match/actor.js';
import type { RewardReply } from '../domain/rewards.js';
import type { Effect } from '../domain/rule-effects.js';
import { eventId } from '../domain/seen-events.js';
import type { TierProgram } from '../domain/tiers.js';
import type { ErrorCode } from '../errors/codes.js';
import { encodePartition, newCustomerId, newId, random53 } from '../ids.js';
import { limits } from '../limits.js';
import { mailboxDepth } from '../observability/metrics.js';
import { compareOffsets, type Journal, type KeyRow, type Offset, offsetZero, type SnapshotRow, type SnapshotSave, type SnapshotStore } from '../persistence/ports.js';
import { callTag } from './calls.js';
import { decodeEntryToKeep, decodeSnapshot, encodeEntry, encodeSnapshot, type JournalRecord, type KeyFact } from './codec.js';
import { KeyFilter } from './key-filter.js';
import { type CustomerView, toView } from './views.js';

export type Target = { by: 'id'; id: string } | { by: 'key'; key: string };

export type EngineCommand =
  | Command
  /**
   * The customer as data. With `tierPrograms`, the view also says which level the customer
   * qualifies for now in those it was never placed in (qualifiedTiers).
   */
  | { kind: 'customer.view'; tierPrograms?: TierProgram[] }
  /**
   * The customer id a target names now (following merges) and its external id, without building a
   * view. An absent customer is answered at once: absence depends on nothing waiting for the journal.
   */
  | { kind: 'customer.resolve' }
  /** Binds `key` (an alias) to customerId in the key's partition; merges the key's owner if the key is its external id. */
  | { kind: 'key.claim'; customerId: string }
  | { kind: 'key.release'; customerId: string };

export interface Call {
  env: string;
  target: Target;
  command: EngineCommand;
  nowMs: number;
  /**
   * Set on a call that may reach its actor more than once (calls.ts): the same for every repeat of
   * it. A command calls.callTag remembers is then answered once applied, its repeats with that answer.
   */
  callId?: string;
}

export type ReplyView =
  | { kind: 'customer'; customer: CustomerView }
  | { kind: 'resolved'; customerId: string; externalId: string | null }
  | { kind: 'event'; id: string; clientEventId: string; duplicate: boolean; customerId: string; effects: Effect[]; evaluated?: boolean }
  | { kind: 'alias'; alias: { alias: string; kind: string; createdAtMs: number }; customerId: string; mergedFrom: string | null }
  | ({ kind: 'claimed'; mergedFrom: string | null } & MergeHandover)
  | { kind: 'ledger'; reply: LedgerReply; customerId: string }
  | { kind: 'reward'; reply: RewardReply; customerId: string }
  | { kind: 'challenge'; reply: ChallengeReply; effects: Effect[]; customerId: string }
  | { kind: 'applied'; changed: boolean }
  | MatchPlayerReply
  | { kind: 'segment_membership'; segmentId: string; member: boolean; changed: boolean }
  | { kind: 'erased'; mergedFrom: string[]; aliases: string[] }
  | { kind: 'events_to_erase'; records: number[] }
  | { kind: 'deletion_begun'; mergedFrom: string[] }
  | { kind: 'deleted'; mergedFrom: string[]; aliases: string[]; released?: string[] }
  | ({ kind: 'handover' } & MergeHandover)
  | { kind: 'merged_from'; mergedFrom: string[]; aliases: AliasState[]; attributes: Record<string, unknown> }
  | { kind: 'done' };

export type CallResult =
  | { ok: true; reply: ReplyView }
  | {
      ok: false;
      code: ErrorCode;
      message?: string;
      param?: string;
      retryAfterSeconds?: number;
      currentVersion?: number;
      /**
       * The deleted customer that refused the call (resource_not_found from its tombstone). A call
       * by a key still bound to it (a binding its delete did not get to release) has the engine
       * release that binding and run the call again: the key is free (Engine.execute).
       */
      tombstoneId?: string;
    }
  /** The target lives elsewhere (merged customer, alias of a customer on another partition). */
  | { ok: 'redirect'; customerId: string };

interface Actor {
  state: CustomerState;
  /** Facts applied; compared with savedSeq to know whether a snapshot is needed. */
  seq: number;
  savedSeq: number;
  /** Commands accepted and not yet answered (mailbox depth). */
  pending: number;
  touchedAtMs: number;
}

interface Waiter {
  resolve: (r: CallResult) => void;
  result: CallResult;
  actor: Actor | null;
}

interface Batch {
  records: JournalRecord[];
  waiters: Waiter[];
  /** Snapshot captured when this batch was sent: valid at its offset. */
  capture: Capture | null;
}

interface Capture {
  rows: SnapshotRow[];
  actors: Array<[Actor, number]>;
  keys: KeyRow[];
  keysRemoved: Array<{ environmentId: string; key: string }>;
}

interface LoadWaiter {
  call: Call;
  resolve: (r: CallResult) => void;
}

export interface PartitionDeps {
  journal: Journal;
  snapshots: SnapshotStore;
  /** Called with every acknowledged entry, in order (projector feed). */
  onAcked(partition: number, offset: Offset, records: JournalRecord[]): void;
  /**
   * Recovery's projector feed: replayed entries past the projected offset, in order (`records`
   * null: the backlog starts before the checkpoint, so recovery does not read it). False when the
   * projector reads this partition's journal itself from now on: recovery stops feeding it.
   */
  onReplayed(partition: number, offset: Offset, records: JournalRecord[] | null): boolean;
  onFlushed(records: number, seconds: number): void;
  /** Asks the engine to call flush() soon (coalesced across partitions). */
  scheduleFlush(p: Partition): void;
  onPoisoned(p: Partition, err: unknown): void;
  /** Saves a snapshot (the snapshotter coalesces partitions' saves into one transaction). */
  saveSnapshot(save: SnapshotSave): Promise<'saved' | 'fenced'>;
  /** snapshotDue at this many dirty actors... */
  snapshotDirtyActorsMax: number;
  /** ...or at this many journal records since the last capture. */
  snapshotTailRecordsMax: number;
  /** A snapshot checkpoint was saved: the journal may be trimmed up to it (and the projector). */
  onCheckpoint(p: Partition, checkpoint: Offset): void;
  onFenced(p: Partition): void;
}

/**
 * The answer of a partition that stopped serving (handed over, dropped, fenced) to a call it did
 * not apply: nothing of the call is in the journal, so the engine routes it again to the new owner
 * (compare by identity).
 */
export const closedResult: CallResult = {
  ok: false,
  code: 'rate_limited',
  message: 'The partition is moving to another node; retry.',
  retryAfterSeconds: 1,
};

export class Partition {
  readonly actors = new Map<string, Actor>();
  /**
   * environment -> routing key -> customer id, for every binding loaded or created; `unbound` for a
   * binding released here whose stored row is not deleted yet (until the snapshot save that
   * deletes it): the key is free, and the stale row must not be looked up and bound again.
   */
  private readonly keys = new Map<string, Map<string, string>>();
  private readonly dirty = new Set<Actor>();
  /**
   * Routing-key changes since the last capture, the last one per key: environment -> key -> the
   * customer it is bound to now (a row to write), or null (released: the row to delete). One entry
   * per key, so a key bound and released in one window is deleted, not written back by the save,
   * and a key released and bound again is written, whatever order the store applies them in.
   */
  private pendingKeys = new Map<string, Map<string, string | null>>();
  private batch: Batch = { records: [], waiters: [], capture: null };
  private inFlight = false;
  private saving = false;
  private savingNow: Promise<void> | null = null;
  private captureWanted = false;
  /** Records acknowledged since the last capture (what a crash would replay, roughly). */
  private tailRecords = 0;
  private loads = new Map<string, LoadWaiter[]>();
  private loadScheduled = false;
  /** A batched lookup is awaiting storage: the next one starts only after it (see loadPending). */
  private loadRunning = false;
  private closed = false;
  lastAcked: Offset = offsetZero;
  checkpoint: Offset = offsetZero;
  private inFlightRecords = 0;
  private readonly decideCtx: DecideCtx;
  /** Keys this partition ever bound; "absent" lets a new customer skip the database lookup. */
  private readonly keyFilter: KeyFilter;
  private filterReady = false;
  private flying: Batch | null = null;
  private flightStarted = 0;
  private readonly idChars: string;

  constructor(
    readonly id: number,
    readonly epoch: number,
    private readonly deps: PartitionDeps,
    partitions = 256,
  ) {
    this.idChars = encodePartition(id);
    this.decideCtx = new DecideCtx(id);
    // About 8 MiB of filter bits in total, split over the partitions (2^18 bits each for 256).
    this.keyFilter = new KeyFilter(Math.min(22, Math.max(16, 26 - Math.ceil(Math.log2(Math.max(1, partitions))))));
  }

  /**
   * Fills the never-seen filter with the stored keys, in the background after recovery (until it
   * is ready, every unknown key costs a lookup). Keys bound meanwhile are already in it.
   */
  async loadKeyFilter(): Promise<void> {
    const rows = await this.deps.snapshots.partitionKeys(this.id);
    for (const r of rows) this.keyFilter.add(r.environmentId, r.key);
    this.filterReady = true;
  }

  get activeActors(): number {
    return this.actors.size;
  }

  // ---- recovery -----------------------------------------------------------------------------

  /**
   * Rebuilds memory: replays the journal after the checkpoint. The projector gets the entries
   * after `projectedFrom` while it takes them; a backlog that is long or starts before the
   * checkpoint it reads from the journal itself (recovery reads only what the actors need).
   */
  async recover(projectedFrom: Offset): Promise<{ records: number }> {
    // Claim first: from now on a snapshot save by the previous owner is refused.
    this.checkpoint = await this.deps.snapshots.claim(this.id, this.epoch);
    let cursor = this.checkpoint;
    let feeding = compareOffsets(projectedFrom, this.checkpoint) >= 0 || this.deps.onReplayed(this.id, projectedFrom, null);
    this.lastAcked = cursor;
    let count = 0;
    for (;;) {
      const entries = await this.deps.journal.read(this.id, cursor, 1000);
      if (entries.length === 0) break;
      const decoded = entries.map((e) => ({ offset: e.offset, records: decodeEntryToKeep(e.payload) }));
      // Load the snapshots of the customers the tail touches, in batched queries per environment.
      // A customer whose first tail record creates it was born after the checkpoint: it has no
      // snapshot (snapshots are saved with their checkpoint), so it costs no lookup.
      const want = new Map<string, string[]>();
      const seen = new Set<string>();
      for (const e of decoded) {
        for (const [env, customerId, facts] of e.records) {
          if (customerId === '' || this.actors.has(customerId) || seen.has(customerId)) continue;
          seen.add(customerId);
          if (facts.length > 0 && facts[0]!.kind === 'customer.created') continue;
          let ids = want.get(env);
          if (!ids) want.set(env, (ids = []));
          ids.push(customerId);
        }
      }
      for (const [env, ids] of want) {
        for (let i = 0; i < ids.length; i += snapshotLoadBatch) {
          const rows = await this.deps.snapshots.load(env, ids.slice(i, i + snapshotLoadBatch));
          for (const row of rows) this.install(decodeSnapshot(row.payload), true);
        }
      }
      for (const e of decoded) {
        for (const rec of e.records) {
          this.applyRecord(rec, 0);
          count++;
        }
        if (feeding && compareOffsets(e.offset, projectedFrom) > 0) feeding = this.deps.onReplayed(this.id, e.offset, e.records);
        this.lastAcked = e.offset;
      }
      cursor = entries[entries.length - 1]!.offset;
    }
    return { records: count };
  }

  private applyRecord(rec: JournalRecord, nowMs: number): void {
    const [env, customerId, facts] = rec;
    if (customerId === '') {
      // Replayed after the checkpoint, so not in the stored keys yet: the next save writes them.
      for (const f of facts as KeyFact[]) {
        if (f.kind === 'key.bound') {
          this.bindKey(env, f.key, f.customerId);
          this.keyChanged(env, f.key, f.customerId);
        } else if (this.unbindKey(env, f.key, f.customerId)) {
          this.keyChanged(env, f.key, null);
        }
      }
      return;
    }
    let actor = this.actors.get(customerId) ?? null;
    for (const f of facts as Fact[]) {
      if (actor === null) {
        if (f.kind !== 'customer.created') continue; // history older than any snapshot: nothing to rebuild
        actor = this.install(evolve(null, f), false);
        this.afterFact(actor, f);
        continue;
      }
      evolve(actor.state, f);
      this.afterFact(actor, f);
    }
    if (actor) actor.touchedAtMs = nowMs;
  }

  private install(state: CustomerState, clean: boolean): Actor {
    const actor: Actor = { state, seq: 0, savedSeq: 0, pending: 0, touchedAtMs: 0 };
    if (!clean) actor.seq = 1;
    this.actors.set(state.id, actor);
    // A merged customer's external id routes to its survivor (bound at the merge, kept in customer_keys).
    if (state.externalId !== null && state.deletedAtMs === null && state.mergedInto === null) {
      this.bindKey(state.environmentId, state.externalId, state.id);
    }
    if (!clean) this.dirty.add(actor);
    return actor;
  }

  /** Bookkeeping after a fact: dirty marking and routing keys owned by this partition. */
  private afterFact(actor: Actor, f: Fact): void {
    actor.seq++;
    this.dirty.add(actor);
    const s = actor.state;
    if (f.kind === 'customer.created') {
      this.bindKey(s.environmentId, f.externalId, s.id);
      this.keyChanged(s.environmentId, f.externalId, s.id);
    } else if (f.kind === 'customer.deleted') {
      const envKeys = this.keys.get(s.environmentId);
      if (envKeys) {
        for (const [k, v] of envKeys) {
          if (v === s.id) {
            envKeys.set(k, unbound);
            this.keyChanged(s.environmentId, k, null);
          }
        }
      }
    }
  }

  private bindKey(env: string, key: string, customerId: string): void {
    this.keyFilter.add(env, key);
    let m = this.keys.get(env);
    if (!m) this.keys.set(env, (m = new Map()));
    m.set(key, customerId);
  }

  /** Releases a binding if it names customerId (true then); the caller queues its stored row's delete. */
  private unbindKey(env: string, key: string, customerId: string): boolean {
    const m = this.keys.get(env);
    if (m?.get(key) !== customerId) return false;
    m.set(key, unbound);
    return true;
  }

  // ---- commands -----------------------------------------------------------------------------

  /** Runs a call; resolves once its effects (and everything before them) are durable. */
  submit(call: Call): Promise<CallResult> {
    if (this.closed) return Promise.resolve(closedResult);
    return new Promise((resolve) => this.route(call, resolve));
  }

  private route(call: Call, resolve: (r: CallResult) => void): undefined {
    const { target } = call;
    if (target.by === 'id') {
      const actor = this.actors.get(target.id);
      // Ids are global, actors are not shared: another environment's customer does not exist here.
      if (actor) return actor.state.environmentId === call.env ? this.run(call, actor, resolve) : this.reply(notFound, null, resolve);
      return this.enqueueLoad(`i\u0000${call.env}\u0000${target.id}`, call, resolve);
    }
    const customerId = this.keys.get(call.env)?.get(target.key);
    if (customerId !== undefined && customerId !== unbound) {
      const cmd = call.command;
      // The key's binding lives here even when its customer (an alias's survivor) lives elsewhere.
      if ((cmd.kind === 'key.release' || cmd.kind === 'key.claim') && !this.owns(customerId)) {
        return this.runForeignKeyCommand(call.env, target.key, cmd, customerId, resolve);
      }
      const actor = this.actors.get(customerId);
      if (actor) return this.run(call, actor, resolve);
      if (!this.owns(customerId)) return this.reply({ ok: 'redirect', customerId }, null, resolve);
      return this.enqueueLoad(`i\u0000${call.env}\u0000${customerId}`, { ...call, target: { by: 'id', id: customerId } }, resolve, call);
    }
    // Never seen here (or released here) and nothing queued for it: a new customer, no lookup.
    if (customerId === unbound || (this.filterReady && !this.keyFilter.mayContain(call.env, target.key))) {
      if (this.loads.size === 0) return this.runAbsent(call, resolve);
      const loadKey = `k\u0000${call.env}\u0000${target.key}`;
      if (!this.loads.has(loadKey)) return this.runAbsent(call, resolve);
      return this.enqueueLoad(loadKey, call, resolve);
    }
    return this.enqueueLoad(`k\u0000${call.env}\u0000${target.key}`, call, resolve);
  }

  private owns(customerId: string): boolean {
    // Customer ids carry their partition in characters 5-7 (see ids.ts).
    return customerId.length === 34 && this.idChars === customerId.slice(5, 8);
  }

  private enqueueLoad(loadKey: string, call: Call, resolve: (r: CallResult) => void, original?: Call): undefined {
    let waiters = this.loads.get(loadKey);
    if (!waiters) this.loads.set(loadKey, (waiters = []));
    if (waiters.length >= limits.mailboxDepthMax) {
      resolve({ ok: false, code: 'rate_limited', message: 'Too many commands for this customer.', retryAfterSeconds: 1 });
      return;
    }
    waiters.push({ call: original ?? call, resolve });
    if (!this.loadScheduled) {
      this.loadScheduled = true;
      if (!this.loadRunning) setImmediate(() => void this.loadPending());
    }
  }

  /**
   * One batched lookup for every key and id that missed in this tick, then the waiting calls in
   * order. Lookups run one at a time: a second one overlapping the first would find a key the
   * first already bound but whose snapshot is still loading, and take the customer for absent.
   */
  private async loadPending(): Promise<void> {
    this.loadScheduled = false;
    this.loadRunning = true;
    try {
      await this.runLoads();
    } finally {
      this.loadRunning = false;
      if (this.loadScheduled) setImmediate(() => void this.loadPending());
    }
  }

  private async runLoads(): Promise<void> {
    const loads = this.loads;
    this.loads = new Map();
    const idsByEnv = new Map<string, Set<string>>();
    const keysByEnv = new Map<string, Set<string>>();
    for (const loadKey of loads.keys()) {
      const [kind, env, value] = loadKey.split('\u0000') as [string, string, string];
      const m = kind === 'i' ? idsByEnv : keysByEnv;
      let s = m.get(env);
      if (!s) m.set(env, (s = new Set()));
      s.add(value);
    }
    try {
      for (const [env, keys] of keysByEnv) {
        const rows = await this.deps.snapshots.lookupKeys(env, [...keys]);
        for (const row of rows) {
          // A binding created in memory meanwhile wins over the stored one; one released here
          // meanwhile makes the stored row stale (its delete is not saved yet).
          const bound = this.keys.get(env)?.get(row.key);
          if (bound === unbound) continue;
          if (bound === undefined) this.bindKey(env, row.key, row.customerId);
          const customerId = bound ?? row.customerId;
          if (this.owns(customerId) && !this.actors.has(customerId)) {
            let s = idsByEnv.get(env);
            if (!s) idsByEnv.set(env, (s = new Set()));
            s.add(customerId);
          }
        }
      }
      for (const [env, ids] of idsByEnv) {
        const missing = [...ids].filter((id) => !this.actors.has(id) && this.owns(id));
        if (missing.length === 0) continue;
        const rows = await this.deps.snapshots.load(env, missing);
        for (const row of rows) if (!this.actors.has(row.customerId)) this.install(decodeSnapshot(row.payload), true);
      }
    } catch (err) {
      for (const waiters of loads.values()) {
        for (const w of waiters) w.resolve({ ok: false, code: 'internal_error', message: 'Storage is unavailable; retry.' });
      }
      this.deps.onPoisoned(this, err);
      return;
    }
    if (this.closed) {
      for (const waiters of loads.values()) for (const w of waiters) w.resolve(closedResult);
      return;
    }
    for (const [loadKey, waiters] of loads) {
      const byId = loadKey.charCodeAt(0) === 105; /* 'i' */
      for (const w of waiters) {
        const { call } = w;
        if (byId || call.target.by === 'id') {
          const id = call.target.by === 'id' ? call.target.id : (this.keys.get(call.env)?.get(call.target.key) ?? '');
          const actor = this.actors.get(id);
          if (actor && actor.state.environmentId === call.env) this.run(call, actor, w.resolve);
          else if (actor) this.reply(notFound, null, w.resolve);
          else this.runAbsent(call, w.resolve);
          continue;
        }
        const customerId = this.keys.get(call.env)?.get(call.target.key);
        if (customerId === undefined || customerId === unbound) {
          this.runAbsent(call, w.resolve);
          continue;
        }
        const actor = this.actors.get(customerId);
        if (actor) this.run(call, actor, w.resolve);
        else if (!this.owns(customerId)) this.reply({ ok: 'redirect', customerId }, null, w.resolve);
        else this.runAbsent(call, w.resolve);
      }
    }
  }

  /** The decision context, reused: decide is synchronous, so one instance per partition serves every call. */
  private ctx(call: Call): Ctx {
    this.decideCtx.nowMs = call.nowMs;
    this.decideCtx.environmentId = call.env;
    return this.decideCtx;
  }

  /** The target does not exist: only creating commands and key claims proceed. */
  private runAbsent(call: Call, resolve: (r: CallResult) => void): undefined {
    const cmd = call.command;
    if (cmd.kind === 'key.claim') {
      if (call.target.by !== 'key') return this.reply(notFound, null, resolve);
      this.bindKey(call.env, call.target.key, cmd.customerId);
      this.keyChanged(call.env, call.target.key, cmd.customerId);
      this.batch.records.push([call.env, '', [{ kind: 'key.bound', key: call.target.key, customerId: cmd.customerId }]]);
      return this.reply({ ok: true, reply: { kind: 'claimed', mergedFrom: null } }, null, resolve);
    }
    if (cmd.kind === 'key.release') return this.reply({ ok: true, reply: { kind: 'done' } }, null, resolve);
    if (cmd.kind === 'customer.view') return this.reply(notFound, null, resolve);
    if (cmd.kind === 'customer.resolve') {
      resolve(notFound);
      return;
    }
    if ((cmd.kind === 'customer.create' || cmd.kind === 'event.record' || cmd.kind === 'match.admit') && call.target.by === 'key') {
      const d = decide(null, cmd, this.ctx(call));
      if (!d.ok) return this.reply(refusal(d), null, resolve);
      const facts = call.callId === undefined ? d.facts : remembering(d.facts, call, call.callId, d.reply);
      let actor: Actor | null = null;
      for (const f of facts) {
        if (actor === null) actor = this.install(evolve(null, f), false);
        else evolve(actor.state, f);
        this.afterFact(actor, f);
      }
      this.batch.records.push([call.env, actor!.state.id, facts]);
      return this.reply({ ok: true, reply: this.view(d.reply, actor!, call.nowMs) }, actor, resolve);
    }
    return this.reply(notFound, null, resolve);
  }

  private run(call: Call, actor: Actor, resolve: (r: CallResult) => void): undefined {
    const state = actor.state;
    const cmd = call.command;
    actor.touchedAtMs = call.nowMs;
    if (actor.pending >= limits.mailboxDepthMax) {
      resolve({ ok: false, code: 'rate_limited', message: 'Too many commands for this customer.', retryAfterSeconds: 1 });
      return;
    }
    // A key command is about the key's binding, whoever it names (a merged customer's alias stays
    // bound to it): answered here, never redirected, so its answer does not depend on placement.
    if (cmd.kind === 'key.claim' || cmd.kind === 'key.release') return this.runKeyCommand(call, cmd, actor, resolve);
    // A repeat of a call applied here (its answer was lost on the way, or its request runs again)
    // is answered as the first was: asked before a merge or delete since then would redirect or refuse it.
    if (call.callId !== undefined) {
      const tag = callTag(cmd);
      // By the real clock, as the answer was remembered (remembering): a test clock moved forward
      // must not forget it while its Idempotency-Key claim (real time) can still run it again.
      const seen = tag === null ? undefined : findCall(state.recentCalls, `${tag} ${call.callId}`, Date.now());
      if (seen !== undefined) {
        const reply: ReplyView = seen.reply.kind === 'customer' ? { kind: 'customer', customer: toView(state, call.nowMs) } : seen.reply;
        return this.reply({ ok: true, reply }, actor, resolve);
      }
    }
    // A merged customer answers as its survivor, unless it was erased with it: then it is a
    // tombstone of its own (a key still bound to it is released, not sent to the survivor).
    if (
      state.mergedInto !== null &&
      state.deletedAtMs === null &&
      cmd.kind !== 'customer.erase_merged' &&
      cmd.kind !== 'customer.handover' &&
      cmd.kind !== 'customer.merged_from'
    ) {
      return this.reply({ ok: 'redirect', customerId: state.mergedInto }, null, resolve);
    }
    if (cmd.kind === 'customer.view') {
      if (state.deletedAtMs !== null) return this.reply(tombstone(notFound, state.id), null, resolve);
      return this.reply({ ok: true, reply: { kind: 'customer', customer: toView(state, call.nowMs, cmd.tierPrograms) } }, actor, resolve);
    }
    if (cmd.kind === 'customer.resolve') {
      if (state.deletedAtMs !== null) return this.reply(tombstone(notFound, state.id), null, resolve);
      // After everything applied before it is durable: the id may be stored by the caller.
      return this.reply({ ok: true, reply: { kind: 'resolved', customerId: state.id, externalId: state.externalId } }, actor, resolve);
    }
    const d = decide(state, cmd, this.ctx(call));
    if (!d.ok) {
      const r = refusal(d);
      return this.reply(d.code === 'resource_not_found' && state.deletedAtMs !== null ? tombstone(r, state.id) : r, actor, resolve);
    }
    if (d.facts.length > 0) {
      const facts = call.callId === undefined ? d.facts : remembering(d.facts, call, call.callId, d.reply);
      for (const f of facts) {
        evolve(state, f);
        this.afterFact(actor, f);
      }
      this.batch.records.push([call.env, state.id, facts]);
    }
    this.reply({ ok: true, reply: this.view(d.reply, actor, call.nowMs) }, actor, resolve);
  }

  /**
   * A key command for a key bound to a customer of another partition (an alias or a merged
   * customer's external id): a release unbinds it if it still names that customer; a claim by
   * that customer is a no-op, by anyone else a conflict (only a customer's own external id merges).
   */
  private runForeignKeyCommand(
    env: string,
    key: string,
    cmd: { kind: 'key.claim' | 'key.release'; customerId: string },
    boundTo: string,
    resolve: (r: CallResult) => void,
  ): undefined {
    if (cmd.kind === 'key.release') {
      if (this.unbindKey(env, key, cmd.customerId)) {
        this.keyChanged(env, key, null);
        this.batch.records.push([env, '', [{ kind: 'key.released', key, customerId: cmd.customerId }]]);
      }
      return this.reply({ ok: true, reply: { kind: 'done' } }, null, resolve);
    }
    if (boundTo === cmd.customerId) return this.reply({ ok: true, reply: { kind: 'claimed', mergedFrom: null } }, null, resolve);
    return this.reply({ ok: false, code: 'alias_conflict', message: 'The alias belongs to another customer.', param: 'alias' }, null, resolve);
  }

  /** Alias binding at the key's partition. `actor` is the key's current owner. */
  private runKeyCommand(
    call: Call,
    cmd: { kind: 'key.claim' | 'key.release'; customerId: string },
    actor: Actor,
    resolve: (r: CallResult) => void,
  ): undefined {
    const key = call.target.by === 'key' ? call.target.key : '';
    const owner = actor.state;
    if (cmd.kind === 'key.release') {
      if (this.unbindKey(call.env, key, cmd.customerId)) {
        this.keyChanged(call.env, key, null);
        this.batch.records.push([call.env, '', [{ kind: 'key.released', key, customerId: cmd.customerId }]]);
      }
      return this.reply({ ok: true, reply: { kind: 'done' } }, null, resolve);
    }
    if (owner.id === cmd.customerId) return this.reply({ ok: true, reply: { kind: 'claimed', mergedFrom: null } }, null, resolve);
    if (owner.deletedAtMs !== null) {
      // Still bound to an erased customer (its delete did not get to release it): the key is free.
      this.bindKey(call.env, key, cmd.customerId);
      this.keyChanged(call.env, key, cmd.customerId);
      this.batch.records.push([call.env, '', [{ kind: 'key.bound', key, customerId: cmd.customerId }]]);
      return this.reply({ ok: true, reply: { kind: 'claimed', mergedFrom: null } }, null, resolve);
    }
    // The key is another customer's external id: that customer is merged into the claimer.
    if (owner.externalId === key && owner.mergedInto === null) {
      const facts = mergeFacts(owner, cmd.customerId, this.ctx(call));
      for (const f of facts) {
        evolve(owner, f);
        this.afterFact(actor, f);
      }
      this.bindKey(call.env, key, cmd.customerId);
      this.keyChanged(call.env, key, cmd.customerId);
      this.batch.records.push([call.env, owner.id, facts]);
      this.batch.records.push([call.env, '', [{ kind: 'key.bound', key, customerId: cmd.customerId }]]);
      // What it hands over (its ledger, issuances, rate books, event ids...) travels to the survivor.
      return this.reply({ ok: true, reply: { kind: 'claimed', mergedFrom: owner.id, ...mergeHandover(owner) } }, actor, resolve);
    }
    return this.reply(
      { ok: false, code: 'alias_conflict', message: 'The alias belongs to another customer.', param: 'alias' },
      null,
      resolve,
    );
  }

  private view(reply: Reply, actor: Actor, nowMs: number): ReplyView {
    switch (reply.kind) {
      case 'ledger':
      case 'reward':
      case 'challenge':
        return reply;
      case 'customer':
        return { kind: 'customer', customer: toView(actor.state, nowMs) };
      case 'event':
        return reply;
      case 'alias':
        return reply;
      case 'applied':
      case 'match_player':
      case 'segment_membership':
      case 'erased':
      case 'events_to_erase':
      case 'handover':
      case 'merged_from':
      case 'deletion_begun':
      case 'deleted':
        return reply;
    }
  }

  /** Answers after everything applied so far is durable. */
  private reply(result: CallResult, actor: Actor | null, resolve: (r: CallResult) => void): undefined {
    if (!this.inFlight && this.batch.records.length === 0) {
      resolve(result);
      return;
    }
    if (actor) {
      actor.pending++;
      mailboxDepth.observe(actor.pending);
    }
    this.batch.waiters.push({ resolve, result, actor });
    this.deps.scheduleFlush(this);
  }

  /** Records waiting or in flight: the engine sheds load above a bound. */
  get backlog(): number {
    return this.batch.records.length + this.inFlightRecords;
  }

  // ---- group commit -------------------------------------------------------------------------

  /**
   * Takes the open batch for one journal write: the engine appends the returned payloads of all
   * partitions in one call (group commit across partitions) and reports back with endFlush.
   * Returns null when there is nothing to write or this partition's previous write is in flight.
   */
  beginFlush(): { partition: number; epoch: number; payload: Uint8Array } | null {
    if (this.inFlight) return null;
    const batch = this.batch;
    if (this.closed) {
      // Never written, so never applied: the callers retry against the new owner.
      this.batch = { records: [], waiters: [], capture: null };
      for (const w of batch.waiters) w.resolve(closedResult);
      return null;
    }
    if (batch.records.length === 0) {
      if (batch.waiters.length > 0) {
        this.batch = { records: [], waiters: [], capture: null };
        settle(batch.waiters);
      }
      return null;
    }
    this.batch = { records: [], waiters: [], capture: null };
    let payload: Uint8Array;
    try {
      if (this.captureWanted && !this.saving) {
        // Memory now equals the state after this batch: a snapshot taken here is valid at its offset.
        batch.capture = this.capture();
        this.captureWanted = false;
      }
      payload = encodeEntry(batch.records);
    } catch (err) {
      // The batch's facts are applied in memory but cannot be written: nothing of it is acknowledged,
      // and the partition is rebuilt from durable state (like a failed append), not the process ended.
      for (const w of batch.waiters) w.resolve(unwritable);
      this.deps.onPoisoned(this, err);
      return null;
    }
    this.inFlight = true;
    this.inFlightRecords = batch.records.length;
    this.flying = batch;
    this.flightStarted = performance.now();
    return { partition: this.id, epoch: this.epoch, payload };
  }

  /** The outcome of the write begun by beginFlush: its offset, or the error. */
  endFlush(result: Offset | Error): void {
    const batch = this.flying;
    if (batch === null) return;
    this.flying = null;
    this.inFlight = false;
    this.inFlightRecords = 0;
    if (typeof result === 'string') {
      this.lastAcked = result;
      this.deps.onFlushed(batch.records.length, (performance.now() - this.flightStarted) / 1000);
      settle(batch.waiters);
      this.deps.onAcked(this.id, result, batch.records);
      if (batch.capture) void this.save(result, batch.capture);
      this.tailRecords += batch.records.length;
      if (this.batch.records.length > 0 || this.batch.waiters.length > 0) this.deps.scheduleFlush(this);
      return;
    }
    // Fenced: another node owns the partition now. Anything else: the outcome is unknown, so
    // memory may be ahead of the journal; the partition is rebuilt from durable state.
    const fenced = result.name === 'FencedError';
    const failed: CallResult = fenced
      ? closedResult
      : { ok: false, code: 'internal_error', message: 'The journal did not acknowledge the write; retry.' };
    for (const w of batch.waiters) w.resolve(failed);
    for (const w of this.batch.waiters) w.resolve(failed);
    this.batch = { records: [], waiters: [], capture: null };
    if (fenced) this.deps.onFenced(this);
    else this.deps.onPoisoned(this, result);
  }

  // ---- snapshots and passivation --------------------------------------------------------------

  /** Actors changed since their last capture. */
  get dirtyActors(): number {
    return this.dirty.size;
  }

  /** True when this partition should save before the snapshot cycle (dirty actors or records past the bounds). */
  get snapshotDue(): boolean {
    return this.dirty.size >= this.deps.snapshotDirtyActorsMax || this.tailRecords >= this.deps.snapshotTailRecordsMax;
  }

  /**
   * Snapshot dirty actors now if memory equals durable state, else at the next flush. False when
   * it cannot (a save is still running, or the partition is closed): ask again later.
   */
  requestSnapshot(): boolean {
    if (this.saving || this.closed) return false;
    if (this.dirty.size === 0 && this.pendingKeys.size === 0) return true;
    if (!this.inFlight && this.batch.records.length === 0) {
      void this.save(this.lastAcked, this.capture());
    } else {
      this.captureWanted = true;
    }
    return true;
  }

  /** Records a routing-key change for the next save (see pendingKeys): bound to customerId, or released (null). */
  private keyChanged(environmentId: string, key: string, customerId: string | null): void {
    let changes = this.pendingKeys.get(environmentId);
    if (changes === undefined) this.pendingKeys.set(environmentId, (changes = new Map()));
    changes.set(key, customerId);
  }

  private capture(): Capture {
    const rows: SnapshotRow[] = [];
    const actors: Array<[Actor, number]> = [];
    for (const actor of this.dirty) {
      rows.push({
        environmentId: actor.state.environmentId,
        customerId: actor.state.id,
        partition: this.id,
        payload: encodeSnapshot(actor.state),
      });
      actors.push([actor, actor.seq]);
    }
    this.dirty.clear();
    this.tailRecords = 0;
    const keys: KeyRow[] = [];
    const keysRemoved: Array<{ environmentId: string; key: string }> = [];
    for (const [environmentId, changes] of this.pendingKeys) {
      for (const [key, customerId] of changes) {
        if (customerId === null) keysRemoved.push({ environmentId, key });
        else keys.push({ environmentId, key, customerId, partition: this.id });
      }
    }
    this.pendingKeys = new Map();
    return { rows, actors, keys, keysRemoved };
  }

  /** Resolves when the snapshot save in progress (if any) has finished. */
  saved(): Promise<void> {
    return this.savingNow ?? Promise.resolve();
  }

  private save(offset: Offset, cap: Capture): Promise<void> {
    this.savingNow = this.runSave(offset, cap).finally(() => {
      this.savingNow = null;
    });
    return this.savingNow;
  }

  private async runSave(offset: Offset, cap: Capture): Promise<void> {
    this.saving = true;
    try {
      const outcome = await this.deps.saveSnapshot({
        partition: this.id,
        epoch: this.epoch,
        checkpoint: offset,
        rows: cap.rows,
        keys: cap.keys,
        keysRemoved: cap.keysRemoved,
      });
      if (outcome === 'fenced') {
        // A new owner claimed the partition: nothing was written, and this partition must stop.
        this.deps.onFenced(this);
        return;
      }
      for (const [actor, seq] of cap.actors) if (actor.savedSeq < seq) actor.savedSeq = seq;
      // The released bindings' rows are deleted now: a later lookup may go to storage again.
      for (const { environmentId, key } of cap.keysRemoved) {
        const m = this.keys.get(environmentId);
        if (m?.get(key) === unbound) m.delete(key);
      }
      this.checkpoint = offset;
      this.deps.onCheckpoint(this, offset);
    } catch {
      // Not saved: everything captured is dirty again and retried next cycle.
      for (const [actor] of cap.actors) this.dirty.add(actor);
      // The captured key changes came first: they go under what changed since.
      const since = this.pendingKeys;
      this.pendingKeys = new Map();
      for (const k of cap.keys) this.keyChanged(k.environmentId, k.key, k.customerId);
      for (const k of cap.keysRemoved) this.keyChanged(k.environmentId, k.key, null);
      for (const [environmentId, changes] of since) for (const [key, customerId] of changes) this.keyChanged(environmentId, key, customerId);
    } finally {
      this.saving = false;
    }
  }

  /**
   * A passivation pass over this partition (see passivateSlice): clean actors idle since
   * `idleBeforeMs` are dropped (snapshotted: reloaded on demand).
   */
  passivation(idleBeforeMs: number, max: number): PassivationPass {
    return { idleBeforeMs, max, evicted: 0, cursor: this.actors.entries() };
  }

  /**
   * One slice of a passivation pass, oldest actors first: drops clean actors last touched before
   * the pass's idleBeforeMs (at most its max in the whole pass), examining at most examineMax
   * actors now; a later call resumes where this one stopped. Returns how many it examined, and
   * whether the pass is over (every actor seen, or max dropped).
   */
  passivateSlice(pass: PassivationPass, examineMax: number): { examined: number; done: boolean } {
    const cursor = pass.cursor as IterableIterator<[string, Actor]>;
    let examined = 0;
    while (examined < examineMax) {
      if (pass.evicted >= pass.max) return { examined, done: true };
      const next = cursor.next();
      if (next.done === true) return { examined, done: true };
      examined++;
      const [id, actor] = next.value;
      if (actor.pending > 0 || actor.savedSeq !== actor.seq || this.dirty.has(actor)) continue;
      if (actor.touchedAtMs > pass.idleBeforeMs) continue;
      this.actors.delete(id);
      const s = actor.state;
      // Its own binding only (a merged customer's external id now names the survivor).
      const ext = s.externalId;
      const m = ext === null ? undefined : this.keys.get(s.environmentId);
      if (ext !== null && m?.get(ext) === s.id) m.delete(ext);
      pass.evicted++;
    }
    return { examined, done: false };
  }

  /** Stops taking commands; pending loads and the open batch are answered with a retryable error. */
  close(): void {
    this.closed = true;
    for (const waiters of this.loads.values()) for (const w of waiters) w.resolve(closedResult);
    this.loads.clear();
    if (!this.inFlight) {
      for (const w of this.batch.waiters) w.resolve(closedResult);
      this.batch = { records: [], waiters: [], capture: null };
    }
  }

  /** True when nothing is waiting to be written. */
  get idle(): boolean {
    return !this.inFlight && this.batch.records.length === 0;
  }
}

/** A passivation pass in progress over one partition (Partition.passivation, passivateSlice). */
export interface PassivationPass {
  idleBeforeMs: number;
  max: number;
  evicted: number;
  /** Where the pass stopped (an iterator over the partition's actors, oldest first). */
  cursor: unknown;
}

/** Customer ids per snapshot query during recovery. */
const snapshotLoadBatch = 2000;

/** A binding released in memory whose stored row is not deleted yet (see Partition.keys). */
const unbound = '';

const notFound: CallResult & { ok: false } = { ok: false, code: 'resource_not_found', message: 'No customer with this id.', param: 'id' };
/** A refusal from a deleted customer, naming it (see CallResult.tombstoneId). */
function tombstone(r: CallResult & { ok: false }, customerId: string): CallResult {
  return { ...r, tombstoneId: customerId };
}

/** A decision's refusal as a call's answer (currentVersion only where the decision set one: stale_write). */
function refusal(d: Extract<ReturnType<typeof decide>, { ok: false }>): CallResult & { ok: false } {
  const r: CallResult & { ok: false } = { ok: false, code: d.code, message: d.message, param: d.param };
  if (d.currentVersion !== undefined) r.currentVersion = d.currentVersion;
  return r;
}

/**
 * The facts of a call with a call id, followed by its answer (call.answered) when its command is
 * remembered (calls.ts): in the same record, so the answer is durable exactly when they are. Its
 * time is the real clock's, not the environment's (call.nowMs, a test clock in test environments):
 * the retention matches the stored Idempotency-Key answers', which use the real clock.
 */
function remembering(facts: Fact[], call: Call, callId: string, reply: Reply): Fact[] {
  const tag = callTag(call.command);
  if (tag === null) return facts;
  return [...facts, { kind: 'call.answered', call: `${tag} ${callId}`, atMs: Date.now(), reply: remembered(reply) }];
}

/** What is kept of an answer: a customer's as its kind (answered as it is then); a delete's without its aliases (erased). */
function remembered(reply: Reply): RememberedReply {
  if (reply.kind === 'customer') return { kind: 'customer' };
  if (reply.kind === 'deleted') return { ...reply, aliases: [] };
  return reply;
}

/** A batch the journal's encoding refused (beginFlush): nothing of it was written or kept. */
const unwritable: CallResult = { ok: false, code: 'internal_error', message: 'The change could not be written to the journal; nothing was applied.' };

function settle(waiters: Waiter[]): void {
  for (const w of waiters) {
    if (w.actor) w.actor.pending--;
    w.resolve(w.result);
  }
}

/** Ids and time for decide: fresh ids are recorded in the facts, so replay never calls these. */
class DecideCtx implements Ctx {
  nowMs = 0;
  environmentId = '';

  constructor(private readonly partition: number) {}

  newId(prefix: string): string {
    return newId(prefix, this.nowMs);
  }

  newCustomerId(): string {
    return newCustomerId(this.partition, this.nowMs);
  }

  newEventId(): string {
    return eventId(this.nowMs, random53());
  }
}
