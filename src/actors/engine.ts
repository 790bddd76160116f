// The engine: the one dispatch facade the gateway calls. It routes a call to the partition that
// owns its customer (local partition object, or the owner node over gRPC), follows redirects
// (merged customers, aliases bound on another partition), coalesces flushes of all partitions
// into one tick, and runs the snapshot and passivation cycles. It holds no customer state itself.
import { ApiError } from '../errors/api-error.js';
import { customerIdPartition, partitionOf } from '../ids.js';
import { limits } from '../limits.js';
import type { Journal } from '../persistence/ports.js';
import { callTag, newCallId } from './calls.js';
import { ownString, packMessage, sharedEnvironmentId, unpackMessage } from './codec.js';
import { InFlight } from './in-flight.js';
import { type Call, type CallResult, closedResult, type Partition, type Target } from './partition.js';

export interface Forwarder {
  forward(address: string, payload: Uint8Array, deadlineMs?: number): Promise<Uint8Array>;
}

/** Where partitions live right now (cluster/placement.ts keeps it current). */
export interface Placement {
  local(p: number): Partition | undefined;
  /** Resolves when a partition this node is recovering becomes usable (undefined when not recovering here). */
  recovering(p: number): Promise<void> | undefined;
  /** gRPC address of the node owning p, or null when unknown (moving). */
  remote(p: number): string | null;
  /** Asks for a fresh view of owners (after a forward failed). */
  refresh(): Promise<void>;
}

/**
 * Holds ingestion while the node's read tables are too far behind (the projector implements it):
 * `ingestOpen` is read on every ingest command, so it must be a plain field or getter.
 */
export interface IngestGate {
  readonly ingestOpen: boolean;
  /** True once ingestion may go on, false when maxWaitMs passed first. */
  whenIngestOpen(maxWaitMs: number): Promise<boolean>;
}

/** A forwarded call that reached a node which no longer owns the partition. */
type WireResult = CallResult | { ok: 'moved' };

/** The journal is not keeping up with this partition: shed load instead of growing memory. */
const overloadedResult: CallResult = {
  ok: false,
  code: 'rate_limited',
  message: 'The partition is overloaded; retry.',
  retryAfterSeconds: 1,
};

/** The read tables stayed too far behind for as long as a held write may wait. */
const projectionBehindResult: CallResult = {
  ok: false,
  code: 'rate_limited',
  message: 'Writes are arriving faster than they can be projected into the read tables; retry.',
  retryAfterSeconds: 1,
};

/**
 * Commands that record an event, each with the counters context its sender read in the same tick
 * (catalog/counters.ts, withCountersContext): counted in flight until they settle (settled()).
 */
function recordsEvent(kind: string): boolean {
  return kind === 'event.record' || kind === 'match.admit' || kind === 'match.review';
}

const movedRetryMs = 50;
/** How long a forwarded call waits for the owner's answer before it is sent again. */
const forwardDeadlineMs = 5000;
const routeAttemptsMax = 60;
const redirectsMax = 4;

/** An event command counted in flight before it is sent (Engine.enterEvent). */
export interface EventEntry {
  readonly epoch: number;
  left: boolean;
}

export class Engine {
  private readonly pendingFlush = new Set<Partition>();
  private flushScheduled = false;
  /** Journal calls in flight; at most limits.journalCallsInFlightMax, later records wait and join the next. */
  private appending = 0;
  /** Event commands sent from here or forwarded here, until they settle (see settled). */
  private readonly events = new InFlight();

  constructor(
    readonly partitions: number,
    private readonly placement: Placement,
    private readonly forwarder: Forwarder | null,
    private readonly journal: Journal,
    private readonly ingest: { gate: IngestGate; maxWaitMs: number } | null = null,
  ) {}

  /**
   * Events and match players wait while the gate is shut (the projector's lag bound), at most
   * maxWaitMs, then answer 429. Other commands (reads, operators' changes) are never held.
   */
  private submit(local: Partition, call: Call): Promise<CallResult> {
    const ingest = this.ingest;
    if (ingest === null || ingest.gate.ingestOpen) return local.submit(call);
    const kind = call.command.kind;
    if (kind !== 'event.record' && kind !== 'match.admit') return local.submit(call);
    return ingest.gate.whenIngestOpen(ingest.maxWaitMs).then((open) => (open ? local.submit(call) : projectionBehindResult));
  }

  partitionOfTarget(env: string, target: Target): number {
    if (target.by === 'key') return partitionOf(env, target.key, this.partitions);
    const p = customerIdPartition(target.id);
    if (p < 0 || p >= this.partitions) throw new ApiError('resource_not_found', { message: 'No customer with this id.', param: 'id' });
    return p;
  }

  /**
   * Runs a call wherever its customer lives; follows redirects. Never rejects for domain errors.
   * A call by a key that is still bound to a deleted customer (a delete that stopped before
   * releasing it, or a merge into a customer deleted meanwhile) releases that binding and runs
   * again, once: the key is free after a delete, so an event for it creates a new customer
   * instead of answering 404 for good.
   */
  execute(call: Call, entered?: EventEntry): Promise<CallResult> {
    if (!recordsEvent(call.command.kind)) {
      if (entered !== undefined) this.leaveEvent(entered);
      return this.dispatch(call);
    }
    let leave: () => void;
    if (entered === undefined) {
      const epoch = this.events.enter();
      leave = () => this.events.leave(epoch);
    } else {
      leave = () => this.leaveEvent(entered);
    }
    let pending: Promise<CallResult>;
    try {
      pending = this.dispatch(call);
    } catch (err) {
      leave();
      throw err;
    }
    pending.then(leave, leave);
    return pending;
  }

  /**
   * Counts an event command in flight from now, ahead of its execute(call, entry): for a sender
   * that must read its counters context before it can send (a match review reads it before its
   * transaction, which may hold the only SQL connection). Pass the entry to execute, or to
   * leaveEvent when the command is not sent.
   */
  enterEvent(): EventEntry {
    return { epoch: this.events.enter(), left: false };
  }

  /** Ends an entry of enterEvent (once: later calls do nothing). */
  leaveEvent(entry: EventEntry): void {
    if (entry.left) return;
    entry.left = true;
    this.events.leave(entry.epoch);
  }

  /**
   * Resolves once every event command this node had in flight when called has settled: sent from
   * here (whoever owns its customer) or forwarded here by another node, and answered, so
   * journaled unless it failed. The barrier of a new counter definition (cluster/counters-barrier.ts):
   * the commands it waits for are those whose counters context may predate the definition.
   */
  settled(): Promise<void> {
    return this.events.settled();
  }

  /** Event commands in flight on this node (tests). */
  get eventsInFlight(): number {
    return this.events.size;
  }

  private dispatch(call: Call): Promise<CallResult> {
    // Fast path: a local partition, no redirect (one promise, no async frames).
    const local = this.placement.local(this.partitionOfTarget(call.env, call.target));
    if (local === undefined) return this.executeRouted(call, true);
    if (local.backlog > limits.partitionBacklogRecordsMax) return Promise.resolve(overloadedResult);
    return this.submit(local, call).then((r) =>
      r.ok === true ? r : r.ok === 'redirect' || r === closedResult ? this.executeRouted(call, true) : r.tombstoneId !== undefined ? this.unbindTombstone(call, r) : r,
    );
  }

  private async executeRouted(call: Call, releaseTombstone: boolean): Promise<CallResult> {
    // Routed calls may be sent more than once (route): one whose repeat is not harmless carries a
    // call id, so its owner answers a repeat with the first answer instead of applying it again.
    const sent = call.callId === undefined && callTag(call.command) !== null ? { ...call, callId: newCallId() } : call;
    let current = sent;
    for (let hop = 0; hop <= redirectsMax; hop++) {
      const result = await this.route(current);
      if (result.ok === false && result.tombstoneId !== undefined && releaseTombstone) return this.unbindTombstone(sent, result);
      if (result.ok !== 'redirect') return result;
      current = { ...current, target: { by: 'id', id: result.customerId } };
    }
    return { ok: false, code: 'internal_error', message: 'Customer redirects do not settle.' };
  }

  /** See execute: `refused` came from the deleted customer `refused.tombstoneId`. */
  private async unbindTombstone(call: Call, refused: CallResult & { ok: false }): Promise<CallResult> {
    const { tombstoneId, ...answer } = refused;
    if (call.target.by !== 'key' || tombstoneId === undefined) return answer;
    const released = await this.executeRouted({ ...call, command: { kind: 'key.release', customerId: tombstoneId } }, false);
    if (released.ok !== true) return answer;
    return this.executeRouted(call, false);
  }

  private async route(call: Call): Promise<CallResult> {
    const p = this.partitionOfTarget(call.env, call.target);
    for (let attempt = 0; attempt < routeAttemptsMax; attempt++) {
      const local = this.placement.local(p);
      if (local) {
        if (local.backlog > limits.partitionBacklogRecordsMax) return overloadedResult;
        const result = await this.submit(local, call);
        // The partition closed under the call without applying it: route again (new owner).
        if (result !== closedResult) return result;
        await sleep(movedRetryMs);
        continue;
      }
      const recovering = this.placement.recovering(p);
      if (recovering) {
        await recovering;
        continue;
      }
      const address = this.placement.remote(p);
      if (address !== null && this.forwarder) {
        try {
          const wire = unpackMessage<WireResult>(await this.forwarder.forward(address, packMessage(call), forwardDeadlineMs));
          if (wire.ok !== 'moved') return wire;
        } catch {
          // Owner unreachable (dying or gone), or no answer within the deadline: the owner may
          // have applied the call all the same. Sent again (to whoever owns the partition then):
          // a call whose repeat is not harmless carries a call id, and its owner answers the
          // repeat as it answered the first (calls.ts), from memory that recovery rebuilds.
        }
      }
      await this.placement.refresh();
      await sleep(movedRetryMs);
    }
    return { ok: false, code: 'rate_limited', message: 'The customer partition is moving between nodes; retry.', retryAfterSeconds: 1 };
  }

  /** Entry point for calls forwarded by other nodes. */
  async executeForwarded(payload: Uint8Array): Promise<Uint8Array> {
    const call = unpackMessage<Call>(payload);
    if (!recordsEvent(call.command.kind)) return this.runForwarded(call);
    // In flight here from its arrival to its answer (settled()).
    const epoch = this.events.enter();
    try {
      return await this.runForwarded(call);
    } finally {
      this.events.leave(epoch);
    }
  }

  private async runForwarded(call: Call): Promise<Uint8Array> {
    // A customer created here keeps these strings: own copies, not slices of the message (codec.ts).
    call.env = sharedEnvironmentId(call.env);
    const target = call.target;
    if (target.by === 'key') target.key = ownString(target.key);
    // Kept in the actor's remembered calls (a copy: the message's strings are slices of one run).
    if (call.callId !== undefined) call.callId = ownString(call.callId);
    const cmd = call.command;
    if ('externalId' in cmd && typeof cmd.externalId === 'string') {
      // An event's external id is usually its routing key: one copy serves both.
      cmd.externalId = target.by === 'key' && cmd.externalId === target.key ? target.key : ownString(cmd.externalId);
    }
    const p = this.partitionOfTarget(call.env, call.target);
    let local = this.placement.local(p);
    if (!local) {
      const recovering = this.placement.recovering(p);
      if (recovering) {
        await recovering;
        local = this.placement.local(p);
      }
    }
    const result: WireResult = local ? await this.submit(local, call) : { ok: 'moved' };
    // Closed under the call without applying it: the caller routes it again, as for 'moved'.
    return packMessage(result === closedResult ? { ok: 'moved' } : result);
  }

  /** Partitions call this when they have something to write; all flush together next tick. */
  scheduleFlush(p: Partition): void {
    this.pendingFlush.add(p);
    if (!this.flushScheduled && this.appending < limits.journalCallsInFlightMax) {
      this.flushScheduled = true;
      setImmediate(this.flushAll);
    }
  }

  /**
   * Group commit across partitions: one journal call for every partition with records. While
   * limits.journalCallsInFlightMax calls are out, records collect and go in the call after (bigger
   * batches, far fewer socket writes; each partition still has one write in flight at most).
   */
  private readonly flushAll = (): void => {
    this.flushScheduled = false;
    if (this.appending >= limits.journalCallsInFlightMax) return;
    const parts: Partition[] = [];
    const items: Array<{ partition: number; epoch: number; payload: Uint8Array }> = [];
    for (const p of this.pendingFlush) {
      const item = p.beginFlush();
      if (item !== null) {
        parts.push(p);
        items.push(item);
      }
    }
    this.pendingFlush.clear();
    if (items.length === 0) return;
    this.appending++;
    this.journal.appendMany(items).then(
      (results) => {
        this.appended();
        for (let i = 0; i < parts.length; i++) parts[i]!.endFlush(results[i]!);
      },
      (err: unknown) => {
        this.appended();
        const e = err instanceof Error ? err : new Error(String(err));
        for (const p of parts) p.endFlush(e);
      },
    );
  };

  private appended(): void {
    this.appending--;
    if (this.pendingFlush.size > 0 && !this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(this.flushAll);
    }
  }
}



function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
