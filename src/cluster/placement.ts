// Partition placement: which node owns which partition. Every node heartbeats into Membership,
// computes the desired owner of each partition by rendezvous hashing over the live nodes, takes
// free leases it should hold (recovering the partition before serving it), renews what it holds,
// and hands over (flush, then release) what another live node should hold. A lease lost to
// another node closes the partition at once: the fencing epoch in the journal append makes a
// late write from here impossible anyway. The heartbeat and the lease renewals run on their own
// timer, never behind a placement tick: a tick that recovers partitions for longer than the lease
// ttl must not let the leases it already took (recovering, serving or handing over) expire.
// Recoveries run in the background, a few at a time (recoveriesRunningMax), in lease order; a call
// for a partition still waiting its turn starts that partition's recovery at once (up to
// neededRecoveriesRunningMax at a time, ahead of the others), so after a restart or a failover
// the node answers within about one partition's replay instead of every partition's (the calls
// wait for their own partition only).
import type { Logger } from 'pino';
import type { Engine, Placement } from '../actors/engine.js';
import type { JournalRecord } from '../actors/codec.js';
import { type PassivationPass, Partition } from '../actors/partition.js';
import { limits } from '../limits.js';
import {
  actorsActive,
  actorsUnsnapshotted,
  journalFlushRecords,
  journalFlushSeconds,
  partitionsOwned,
  partitionsRecovering,
  snapshotSaveSeconds,
} from '../observability/metrics.js';
import { compareOffsets, type Journal, type Leases, type Membership, type NodeInfo, type Offset, type SnapshotSave, type SnapshotStore } from '../persistence/ports.js';
import { hash53 } from '../util/canonical-json.js';
import { GroupBatcher } from '../util/group-batcher.js';

export interface ProjectorHooks {
  projectedOffset(partition: number): Promise<Offset>;
  /** Highest offset known projected; the journal is never trimmed past it. */
  projectedSoFar(partition: number): Offset;
  onAcked(partition: number, offset: Offset, records: JournalRecord[]): void;
  /** Recovery's feed (Projector.onReplayed): false once the projector reads the journal itself. */
  onReplayed(partition: number, offset: Offset, records: JournalRecord[] | null): boolean;
}

export interface PlacementOptions {
  node: NodeInfo;
  partitions: number;
  journal: Journal;
  snapshots: SnapshotStore;
  leases: Leases;
  membership: Membership;
  projector: ProjectorHooks;
  logger: Logger;
  snapshotEveryMs: number;
  /** Save early at this many dirty actors in a partition (default limits.snapshotDirtyActorsMax). */
  snapshotDirtyActorsMax?: number;
  /** Save early at this many records since a partition's last capture (default limits.snapshotTailRecordsMax). */
  snapshotTailRecordsMax?: number;
  /** How often partitions past those bounds are saved (default limits.snapshotSweepMs); tests shorten it. */
  snapshotSweepMs?: number;
  activeActorsMax: number;
  /** Heartbeat and lease renewal period (limits.leaseRenewEveryMs); tests shorten it. */
  leaseRenewEveryMs?: number;
}

/** A recovery waiting its turn: start it (its turn came, or a call needs it), or drop it (stop). */
interface QueuedRecovery {
  start(): void;
  abandon(): Promise<void>;
}

export class ClusterPlacement implements Placement {
  private readonly owned = new Map<number, Partition>();
  /** Partitions leased here and not served yet: waiting their turn or replaying. */
  private readonly recoveringNow = new Map<number, Promise<void>>();
  /** Recoveries waiting their turn, in lease order. */
  private readonly recoveryQueue = new Map<number, QueuedRecovery>();
  /** Of those, the ones a call waits for, in the order the calls came: they go first. */
  private readonly neededQueue = new Map<number, QueuedRecovery>();
  private recoveriesRunning = 0;
  /** Resolved whenever the queue and the running recoveries are both empty (recovered()). */
  private recoveryIdle: Array<() => void> = [];
  private owners: Array<string | null>;
  private addresses = new Map<string, string>();
  private engine: Engine | null = null;
  private timers: NodeJS.Timeout[] = [];
  private ticking: Promise<void> | null = null;
  private renewing: Promise<void> | null = null;
  private renewTimer: NodeJS.Timeout | null = null;
  /** Set once every lease was released on stop: renewals end. */
  private left = false;
  /**
   * Every lease this node holds, by partition: recovering, serving or handing over. The renewal
   * timer extends all of them; an entry leaves when the lease is released or found lost.
   */
  private readonly leased = new Map<number, number>();
  private stopped = false;
  /** A sweep is still capturing its partitions (in slices, one per macrotask). */
  private sweeping = false;
  /** A passivation pass is still running (in slices, one per macrotask). */
  private passivating = false;
  private refreshing: Promise<void> | null = null;
  private readonly snapshotWriter: SnapshotWriter;
  /** When each partition's snapshot cycle next comes (ms), spread over the cycle by partition id. */
  private readonly cycleDueAt = new Map<number, number>();

  constructor(private readonly opts: PlacementOptions) {
    this.owners = new Array(opts.partitions).fill(null);
    this.snapshotWriter = new SnapshotWriter(opts.snapshots);
  }

  attach(engine: Engine): void {
    this.engine = engine;
  }

  local(p: number): Partition | undefined {
    return this.owned.get(p);
  }

  /** The recovery of a partition leased here and not served yet; one still waiting its turn starts now. */
  recovering(p: number): Promise<void> | undefined {
    const queued = this.recoveryQueue.get(p);
    if (queued !== undefined && !this.neededQueue.has(p)) {
      this.neededQueue.set(p, queued);
      this.nextRecoveries();
    }
    return this.recoveringNow.get(p);
  }

  /** Partitions leased here and not served yet (waiting their turn or replaying). */
  get recoveringCount(): number {
    return this.recoveringNow.size;
  }

  /** Resolves once no recovery is waiting or running (every partition leased so far is served or given up). */
  recovered(): Promise<void> {
    if (this.recoveryQueue.size === 0 && this.recoveriesRunning === 0) return Promise.resolve();
    return new Promise((resolve) => this.recoveryIdle.push(resolve));
  }

  remote(p: number): string | null {
    const nodeId = this.owners[p];
    if (!nodeId || nodeId === this.opts.node.nodeId) return null;
    return this.addresses.get(nodeId) ?? null;
  }

  refresh(): Promise<void> {
    this.refreshing ??= this.readOwners().finally(() => {
      this.refreshing = null;
    });
    return this.refreshing;
  }

  get ownedCount(): number {
    return this.owned.size;
  }

  get activeActors(): number {
    let n = 0;
    for (const p of this.owned.values()) n += p.activeActors;
    return n;
  }

  /**
   * Joins the cluster and takes this node's share of partitions (their leases) before resolving;
   * their recoveries go on in the background (recovered() waits for them).
   */
  async start(): Promise<void> {
    await this.renew();
    // Renewals run from here on, also while the first tick recovers partitions.
    this.renewTimer = setInterval(() => void this.renew(), this.opts.leaseRenewEveryMs ?? limits.leaseRenewEveryMs);
    this.renewTimer.unref();
    await this.tick();
    this.timers.push(setInterval(() => void this.tick(), limits.placementTickEveryMs));
    const sweepMs = Math.min(this.opts.snapshotSweepMs ?? limits.snapshotSweepMs, this.opts.snapshotEveryMs);
    this.timers.push(setInterval(() => this.snapshotSweep(), sweepMs));
    this.timers.push(setInterval(() => this.passivate(), 1000));
    for (const t of this.timers) t.unref();
  }

  /** Graceful leave: flush, snapshot, release leases, deregister. */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const t of this.timers) clearInterval(t);
    await this.ticking;
    // Recoveries not begun are dropped (their leases released); those running finish first.
    await Promise.all([...this.recoveryQueue.values()].map((q) => q.abandon()));
    await this.recovered();
    // Renewals go on while the partitions drain and snapshot, until their leases are released.
    const held = [...this.owned.values()];
    for (const p of held) p.requestSnapshot();
    await waitIdle(held, 3000);
    // A snapshot taken at the last flush is saved before the lease goes: less to replay next time.
    await settledWithin(Promise.all(held.map((p) => p.saved())), 3000);
    for (const p of held) {
      p.close();
      this.owned.delete(p.id);
      await this.release(p.id, p.epoch);
    }
    this.left = true;
    if (this.renewTimer !== null) clearInterval(this.renewTimer);
    await this.renewing;
    await this.opts.membership.leave(this.opts.node.nodeId).catch(() => {});
  }

  private tick(): Promise<void> {
    if (this.ticking || this.stopped) return this.ticking ?? Promise.resolve();
    this.ticking = this.runTick()
      .catch((err: unknown) => this.opts.logger.warn({ err }, 'placement tick failed'))
      .finally(() => {
        this.ticking = null;
      });
    return this.ticking;
  }

  /** Heartbeat and lease renewals (one round at a time; a round still running is not doubled). */
  private renew(): Promise<void> {
    if (this.renewing || this.left) return this.renewing ?? Promise.resolve();
    this.renewing = this.runRenew()
      .catch((err: unknown) => this.opts.logger.warn({ err }, 'lease renewal failed'))
      .finally(() => {
        this.renewing = null;
      });
    return this.renewing;
  }

  private async runRenew(): Promise<void> {
    const { node, leases, membership } = this.opts;
    // Every lease in one round trip (256 partitions: one script call, not 256 every second).
    const held = [...this.leased].map(([partition, epoch]) => ({ partition, epoch }));
    const renewals = leases.renewMany(node.nodeId, held, limits.leaseTtlMs).then(
      (ok) => {
        for (let i = 0; i < held.length; i++) if (!ok[i]) this.leaseLost(held[i]!.partition, held[i]!.epoch);
      },
      (err: unknown) => this.opts.logger.warn({ err, partitions: held.length }, 'lease renewal failed'),
    );
    await Promise.all([membership.heartbeat(node, limits.nodeHeartbeatTtlMs), renewals]);
  }

  /**
   * Another node may be writing the partition now: a serving partition stops at once; a
   * recovering one is discarded when its recovery ends, and one waiting its turn is dropped; a
   * hand-over just has nothing to release.
   */
  private leaseLost(p: number, epoch: number): void {
    if (this.leased.get(p) !== epoch) return;
    // A recovery still waiting its turn is dropped (its callers route again, to the new owner).
    void this.recoveryQueue.get(p)?.abandon();
    this.leased.delete(p);
    const part = this.owned.get(p);
    if (part !== undefined && part.epoch === epoch) this.drop(part, 'lease lost');
  }

  private async release(p: number, epoch: number): Promise<void> {
    if (this.leased.get(p) === epoch) this.leased.delete(p);
    await this.opts.leases.release(p, this.opts.node.nodeId, epoch).catch(() => {});
  }

  private async runTick(): Promise<void> {
    const { node, membership, partitions } = this.opts;
    const alive = await membership.alive();
    await this.readOwners(alive);
    const aliveIds = alive.map((n) => n.nodeId);
    if (!aliveIds.includes(node.nodeId)) aliveIds.push(node.nodeId);
    const toAcquire: number[] = [];
    for (let p = 0; p < partitions; p++) {
      const desired = desiredOwner(p, aliveIds);
      const owner = this.owners[p];
      if (desired === node.nodeId) {
        if (!this.owned.has(p) && !this.recoveringNow.has(p) && (owner === null || owner === node.nodeId)) toAcquire.push(p);
      } else if (this.owned.has(p)) {
        await this.handOver(this.owned.get(p)!);
      } else {
        // Leased here but not replayed yet: nothing to hand over, the lease goes back at once.
        await this.recoveryQueue.get(p)?.abandon();
      }
    }
    await runLimited(toAcquire, 16, (p) => this.acquire(p));
    actorsActive.set(this.activeActors);
  }

  private async readOwners(alive?: NodeInfo[]): Promise<void> {
    const [list, nodes] = await Promise.all([
      this.opts.leases.list(this.opts.partitions),
      alive ? Promise.resolve(alive) : this.opts.membership.alive(),
    ]);
    this.owners = list.map((l) => l?.nodeId ?? null);
    this.addresses = new Map(nodes.map((n) => [n.nodeId, n.grpcAddress]));
  }

  private async acquire(p: number): Promise<void> {
    const { node, leases } = this.opts;
    const epoch = await leases.acquire(p, node.nodeId, limits.leaseTtlMs);
    if (epoch === null) return;
    this.leased.set(p, epoch);
    this.owners[p] = node.nodeId;
    this.recover(p, epoch, false);
  }

  /**
   * Registers the recovery of a partition leased here: started at once (`now`, or when a call
   * needs the partition: recovering()) or when its turn comes (at most recoveriesRunningMax run).
   */
  private recover(p: number, epoch: number, now: boolean): void {
    let resolve: () => void = () => {};
    const done = new Promise<void>((r) => {
      resolve = r;
    });
    const finish = () => {
      if (this.recoveringNow.get(p) === done) this.recoveringNow.delete(p);
      resolve();
    };
    const queued: QueuedRecovery = {
      start: () => {
        if (this.recoveryQueue.get(p) !== queued) return;
        this.recoveryQueue.delete(p);
        this.neededQueue.delete(p);
        this.recoveriesRunning++;
        void this.runRecovery(p, epoch).finally(() => {
          this.recoveriesRunning--;
          finish();
          this.nextRecoveries();
        });
      },
      abandon: async () => {
        if (this.recoveryQueue.get(p) !== queued) return;
        this.recoveryQueue.delete(p);
        this.neededQueue.delete(p);
        finish();
        await this.release(p, epoch);
      },
    };
    this.recoveryQueue.set(p, queued);
    this.recoveringNow.set(p, done);
    if (now) queued.start();
    else this.nextRecoveries();
  }

  /** The partition gauges of /metrics (also refreshed after every passivation pass). */
  private reportPartitions(): void {
    partitionsOwned.set(this.owned.size);
    partitionsRecovering.set(this.recoveringNow.size);
  }

  /**
   * Starts waiting recoveries: those a call waits for first (while fewer than
   * neededRecoveriesRunningMax run), then the others, oldest lease first (while fewer than
   * recoveriesRunningMax run).
   */
  private nextRecoveries(): void {
    if (!this.stopped) {
      for (const q of this.neededQueue.values()) {
        if (this.recoveriesRunning >= neededRecoveriesRunningMax) break;
        q.start();
      }
      for (const q of this.recoveryQueue.values()) {
        if (this.recoveriesRunning >= recoveriesRunningMax) break;
        q.start();
      }
    }
    this.reportPartitions();
    if (this.recoveryQueue.size === 0 && this.recoveriesRunning === 0) {
      const idle = this.recoveryIdle;
      this.recoveryIdle = [];
      for (const r of idle) r();
    }
  }

  private runRecovery(p: number, epoch: number): Promise<void> {
    const run = (async () => {
      const partition = new Partition(
        p,
        epoch,
        {
        journal: this.opts.journal,
        snapshots: this.opts.snapshots,
        onAcked: (id, offset, records) => this.opts.projector.onAcked(id, offset, records),
        onReplayed: (id, offset, records) => this.opts.projector.onReplayed(id, offset, records),
        onFlushed: (records, seconds) => {
          journalFlushRecords.observe(records);
          journalFlushSeconds.observe(seconds);
        },
        scheduleFlush: (part) => this.engine?.scheduleFlush(part),
        onPoisoned: (part, err) => {
          this.opts.logger.error({ err, partition: part.id }, 'partition poisoned; rebuilding from the journal');
          this.drop(part, 'poisoned');
          if (!this.stopped) this.recover(part.id, part.epoch, true);
        },
        onFenced: (part) => {
          if (this.leased.get(part.id) === part.epoch) this.leased.delete(part.id);
          this.drop(part, 'fenced');
        },
        saveSnapshot: (save) => this.snapshotWriter.save(save),
        snapshotDirtyActorsMax: this.opts.snapshotDirtyActorsMax ?? limits.snapshotDirtyActorsMax,
        snapshotTailRecordsMax: this.opts.snapshotTailRecordsMax ?? limits.snapshotTailRecordsMax,
        onCheckpoint: (part, checkpoint) => {
          const projected = this.opts.projector.projectedSoFar(part.id);
          const upTo = compareOffsets(projected, checkpoint) < 0 ? projected : checkpoint;
          if (upTo !== '0') void this.opts.journal.trim(part.id, upTo).catch(() => {});
        },
        },
        this.opts.partitions,
      );
      for (let attempt = 0; ; attempt++) {
        try {
          const projected = await this.opts.projector.projectedOffset(p);
          await partition.recover(projected);
          break;
        } catch (err) {
          if (attempt >= 5 || this.stopped) throw err;
          this.opts.logger.warn({ err, partition: p }, 'partition recovery failed; retrying');
          await new Promise((r) => setTimeout(r, 200 * (attempt + 1)));
        }
      }
      if (this.leased.get(p) !== epoch) {
        // The lease went while recovering: whoever holds it now serves the partition.
        partition.close();
        this.opts.logger.warn({ partition: p }, 'lease lost during recovery; partition not served');
        return;
      }
      this.owned.set(p, partition);
      partition.loadKeyFilter().catch((err: unknown) => {
        this.opts.logger.warn({ err, partition: p }, 'key filter not loaded; unknown keys are looked up');
      });
    })();
    return run.catch((err: unknown) => {
      this.opts.logger.error({ err, partition: p }, 'partition recovery gave up; releasing the lease');
      void this.release(p, epoch);
    });
  }

  private drop(p: Partition, why: string): void {
    if (this.owned.get(p.id) === p) this.owned.delete(p.id);
    p.close();
    this.opts.logger.info({ partition: p.id, why }, 'partition dropped');
  }

  private async handOver(p: Partition): Promise<void> {
    this.owned.delete(p.id);
    p.close();
    await waitIdle([p], 2000);
    // A snapshot save begun before the close (at the last flush) must land before the lease goes:
    // landing after the next owner read the checkpoint, it overwrites that owner's newer rows and
    // trims the journal under its recovery.
    await settledWithin(p.saved(), 3000);
    await this.release(p.id, p.epoch);
    this.opts.logger.info({ partition: p.id }, 'partition handed over');
  }

  /**
   * Saves the partitions whose cycle came (every snapshotEveryMs, phases spread over the partition
   * ids, so each sweep captures a slice rather than every dirty actor of the node) and those past
   * their bounds. The captures run in at most sweepSlicesMax macrotasks (setImmediate), of at least
   * sliceActorsMin dirty actors each: after a burst a sweep can have a thousand actors to encode,
   * and requests go on between the slices instead of waiting for all of them, while under load
   * (thousands of dirty actors a sweep) a sweep still ends within a few turns of the loop, so
   * captures, saves and passivation keep pace. The saves of a sweep leave together (SnapshotWriter).
   */
  private snapshotSweep(): void {
    let unsaved = 0;
    for (const p of this.owned.values()) unsaved += p.dirtyActors;
    actorsUnsnapshotted.set(unsaved);
    if (this.sweeping) return;
    const now = Date.now();
    const every = this.opts.snapshotEveryMs;
    const due: Array<{ p: Partition; cycle: boolean }> = [];
    let dirty = 0;
    for (const p of this.owned.values()) {
      let dueAt = this.cycleDueAt.get(p.id);
      if (dueAt === undefined) {
        dueAt = now + (every * (p.id + 1)) / this.opts.partitions;
        this.cycleDueAt.set(p.id, dueAt);
      }
      const cycle = now >= dueAt;
      if (!cycle && !p.snapshotDue) continue;
      due.push({ p, cycle });
      dirty += p.dirtyActors;
    }
    if (due.length === 0) return;
    const sliceActors = Math.max(sliceActorsMin, Math.ceil(dirty / sweepSlicesMax));
    this.sweeping = true;
    this.snapshotWriter.cork();
    let i = 0;
    const slice = () => {
      try {
        let captured = 0;
        while (i < due.length && captured < sliceActors) {
          const { p, cycle } = due[i++]!;
          captured += p.dirtyActors;
          // A save still running keeps the turn: the next sweep asks again.
          if (!this.stopped && p.requestSnapshot() && cycle) this.cycleDueAt.set(p.id, Date.now() + every);
        }
      } finally {
        if (i < due.length) setImmediate(slice);
        else {
          this.sweeping = false;
          this.snapshotWriter.uncork();
        }
      }
    };
    slice();
  }

  /**
   * Drops idle, snapshotted actors: first those idle for limits.actorIdleMs, then, while the node
   * holds more than activeActorsMax, clean ones idle for a second, spread across partitions. The
   * passes run in slices of at most passivateSliceActors actors examined per macrotask (with a
   * hundred thousand actors in memory, one pass over all of them held the loop for up to ~50 ms in
   * a CPU profile); a timer tick while a pass runs does nothing.
   */
  private passivate(): void {
    if (this.passivating) return;
    this.passivating = true;
    const now = Date.now();
    let parts = [...this.owned.values()];
    let perPartition = Number.POSITIVE_INFINITY;
    let idleBeforeMs = now - limits.actorIdleMs;
    let capped = false;
    let i = 0;
    let pass: PassivationPass | null = null;
    const slice = () => {
      try {
        let budget = passivateSliceActors;
        while (budget > 0 && i < parts.length) {
          const p = parts[i]!;
          if (this.stopped || this.owned.get(p.id) !== p) {
            i++;
            pass = null;
            continue;
          }
          pass ??= p.passivation(idleBeforeMs, perPartition);
          const r = p.passivateSlice(pass, budget);
          budget -= r.examined;
          if (r.done) {
            i++;
            pass = null;
          }
        }
        if (i < parts.length) {
          setImmediate(slice);
          return;
        }
        const active = this.activeActors;
        if (!capped && !this.stopped && active > this.opts.activeActorsMax) {
          // Over the cap: a second pass, over clean actors idle for more than a second.
          capped = true;
          parts = [...this.owned.values()];
          perPartition = Math.ceil((active - this.opts.activeActorsMax) / Math.max(1, parts.length));
          idleBeforeMs = now - 1000;
          i = 0;
          setImmediate(slice);
          return;
        }
        this.passivating = false;
        actorsActive.set(active);
        this.reportPartitions();
      } catch (err) {
        this.passivating = false;
        this.opts.logger.error({ err }, 'passivation failed');
      }
    };
    slice();
  }
}

/** Actors a passivation slice examines before the loop turns (~0.1-0.5 ms of work). */
const passivateSliceActors = 2048;

/**
 * Recoveries replaying at once in the background. Replay is CPU-bound: more at once only slows
 * each one, and a partition a call needs waits behind fewer slices (a few keep the journal and
 * snapshot reads of one overlapping another's replay).
 */
const recoveriesRunningMax = 4;
/**
 * Recoveries replaying at once while calls wait for them (a flood of calls right after a restart
 * needs every partition): bounded, as the first tick's recoveries were, so the journal pages read
 * at once stay bounded too.
 */
const neededRecoveriesRunningMax = 16;

/** A sweep's captures take at most this many macrotasks... */
const sweepSlicesMax = 16;
/** ...of at least this many dirty actors each (a few milliseconds of encoding). */
const sliceActorsMin = 64;

/** Partition saves in one write (a node owns at most a few hundred partitions). */
const snapshotSavesPerWriteMax = 256;

/**
 * Coalesces snapshot saves into few transactions (SnapshotStore.saveMany): the saves a sweep asks
 * for are held until its last partition is captured (cork/uncork), and saves asked for in one
 * tick or while a write is out leave together as the next write (one at a time; GroupBatcher), so
 * a sweep whose captures are spread over many ticks still costs one commit. A failed write is
 * retried save by save, so only a bad one fails.
 */
class SnapshotWriter {
  private readonly batcher: GroupBatcher<SnapshotSave, 'saved' | 'fenced'>;
  private held: Array<{ save: SnapshotSave; resolve: (outcome: 'saved' | 'fenced') => void; reject: (err: unknown) => void }> | null = null;

  constructor(store: SnapshotStore) {
    this.batcher = new GroupBatcher(async (saves) => {
      const started = performance.now();
      const outcome = await store.saveMany(saves);
      snapshotSaveSeconds.observe((performance.now() - started) / 1000);
      return saves.map((_, i) => outcome[i] ?? 'fenced');
    }, { itemsMax: snapshotSavesPerWriteMax });
  }

  save(save: SnapshotSave): Promise<'saved' | 'fenced'> {
    const held = this.held;
    if (held === null) return this.batcher.submit(save);
    return new Promise((resolve, reject) => held.push({ save, resolve, reject }));
  }

  /** Holds saves until uncork (a sweep in progress). */
  cork(): void {
    this.held ??= [];
  }

  /** Sends the held saves, together. */
  uncork(): void {
    const held = this.held ?? [];
    this.held = null;
    for (const h of held) this.batcher.submit(h.save).then(h.resolve, h.reject);
  }
}

export function desiredOwner(p: number, nodeIds: string[]): string {
  let best = '';
  let bestScore = -1;
  for (const id of nodeIds) {
    const score = hash53(`${id}:${p}`);
    if (score > bestScore || (score === bestScore && id < best)) {
      best = id;
      bestScore = score;
    }
  }
  return best;
}

/**
 * Waits for `work` (its outcome ignored) or `ms`, whichever comes first. The timer is cleared when
 * the work settles first: a stopped node's process exits at once instead of seconds later.
 */
async function settledWithin(work: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
  });
  try {
    await Promise.race([work.then(noop, noop), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function noop(): void {}

async function waitIdle(parts: Partition[], timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until && parts.some((p) => !p.idle)) await new Promise((r) => setTimeout(r, 10));
}

async function runLimited<T>(items: T[], concurrency: number, fn: (item: T) => Promise<void>): Promise<void> {
  let i = 0;
  const workers = Array.from({ length: Math.min(concurrency, items.length) }, async () => {
    while (i < items.length) await fn(items[i++]!);
  });
  await Promise.all(workers);
}
