// The projector: acknowledged journal entries -> PostgreSQL read tables (customers, aliases,
// events), at least once and idempotent (the read model ignores what it already has). It is fed
// in memory right after each ack; if it falls too far behind it drops the in-memory queue and
// catches up from the journal, so memory stays bounded. While it keeps up, the lag is the cycle
// interval plus one write. When writes come faster than PostgreSQL takes them, the lag is bounded
// in records: past `lagRecordsMax` records acknowledged here and not yet projected, ingestion
// waits (the Engine's ingest gate) until the lag is back to 80 % of it, so the writers slow down
// instead of the backlog (and the journal, trimmed only up to what was projected) growing without
// end. It never decides anything: it only copies facts into rows.
import type { Logger } from 'pino';
import { decodeEntry, type JournalRecord } from '../actors/codec.js';
import type { Fact } from '../domain/customer.js';
import { entryRowChanges } from '../domain/ledger.js';
import { limits } from '../limits.js';
import { ingestHeld, projectorCatchUps, projectorLagRecords } from '../observability/metrics.js';
import { compareOffsets, type Journal, type Offset, offsetZero } from '../persistence/ports.js';
import type { Projection } from '../persistence/sql/read-model.js';
import { challengeMergeProjections, challengeProjection } from '../persistence/sql/challenge-read-model.js';

export interface ReadModelWriter {
  /** Many partitions in one transaction. */
  applyMany(batches: Array<{ partition: number; offset: Offset; projections: Projection[] }>): Promise<void>;
  projectedOffset(partition: number): Promise<Offset>;
}

interface Lane {
  partition: number;
  entries: Array<{ offset: Offset; records: JournalRecord[] }>;
  queuedRecords: number;
  /** Set when the in-memory queue was dropped: read from the journal after `projected`. */
  catchUp: boolean;
  projected: Offset;
  /**
   * Set by an ack that arrives during a catch-up (such acks are not queued), cleared before each
   * journal read. An empty read ends the catch-up only if no ack came in while it was out, so an
   * entry appended just after the read is not skipped.
   */
  ackedDuringRead: boolean;
  /** Records acknowledged here and not yet projected (see Projector.lagRecords). */
  unprojected: number;
}

const laneRecordsMax = 50_000;
/**
 * Records of one partition that recovery may queue; a longer backlog is read from the journal
 * by the lane itself, so a restart does not hold its backlog in memory while it rebuilds actors.
 */
const replayedLaneRecordsMax = 2_000;
/**
 * Across all lanes: beyond it a lane drops its queue and catches up from the journal (bounded
 * memory). At 100k, 1M new customers arriving faster than PostgreSQL took them peaked at up to
 * 1.1 GB RSS with ~96k records queued here; at 40k, 593-715 MB at the same rate.
 */
const totalRecordsMax = 40_000;
const catchUpEntries = 500;
/**
 * Lanes catching up together: their pages are read at once and written in one transaction. Under
 * sustained overload every lane ends up catching up, and one transaction per lane per pass (256
 * of them, each with its offset lock, offset update and commit) cost more than the rows. At most
 * this many pages of catchUpEntries are in memory at once.
 */
const catchUpLanesPerTransaction = 8;

export class Projector {
  private readonly lanes = new Map<number, Lane>();
  /**
   * The same lanes in an array (lanes are never removed): a cycle runs every cycleMs over every
   * partition and most find nothing to do, so it walks them by index, allocating nothing.
   */
  private readonly laneList: Lane[] = [];
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private waiters: Array<() => void> = [];
  /** Records queued in memory across all lanes. */
  private queuedTotal = 0;
  /** How many times a lane fell behind and switched to catching up from the journal. */
  catchUps = 0;
  /** Sum of the lanes' `unprojected`. */
  private unprojectedTotal = 0;
  /** Set when the lag passed lagMax; cleared when it is back to lagResume. */
  private ingestShut = false;
  private ingestWaiters: Array<(open: boolean) => void> = [];

  private readonly laneMax: number;
  private readonly totalMax: number;
  private readonly cycleMs: number;
  private readonly lagMax: number;
  /** Held writers go on at this lag: close enough to the bound that a wait is short. */
  private readonly lagResume: number;

  constructor(
    private readonly readModel: ReadModelWriter,
    private readonly journal: Journal,
    private readonly logger: Logger,
    bounds: { laneRecordsMax?: number; totalRecordsMax?: number; cycleMs?: number; lagRecordsMax?: number } = {},
  ) {
    this.cycleMs = bounds.cycleMs ?? limits.projectorCycleMs;
    this.laneMax = bounds.laneRecordsMax ?? laneRecordsMax;
    this.totalMax = bounds.totalRecordsMax ?? totalRecordsMax;
    this.lagMax = bounds.lagRecordsMax ?? limits.projectorLagRecordsMax;
    this.lagResume = Math.floor(this.lagMax * 0.8);
  }

  /**
   * Records acknowledged on this node and not yet in the read tables, whether queued in memory or
   * left to a catch-up from the journal. A backlog this node found at recovery, older than its own
   * acknowledgements, is projected from the journal without being counted.
   */
  get lagRecords(): number {
    return this.unprojectedTotal;
  }

  /** False while ingestion should wait: the lag passed its bound and is not yet back to 80 % of it. */
  get ingestOpen(): boolean {
    return !this.ingestShut;
  }

  /** Resolves true as soon as ingestion may go on (at once when it may), false after maxWaitMs. */
  whenIngestOpen(maxWaitMs: number): Promise<boolean> {
    if (!this.ingestShut) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        const i = this.ingestWaiters.indexOf(done);
        if (i >= 0) this.ingestWaiters.splice(i, 1);
        ingestHeld.inc({ outcome: 'refused' });
        resolve(false);
      }, maxWaitMs);
      const done = (open: boolean) => {
        clearTimeout(timer);
        ingestHeld.inc({ outcome: open ? 'released' : 'refused' });
        resolve(open);
      };
      this.ingestWaiters.push(done);
    });
  }

  private counted(lane: Lane, records: number): void {
    lane.unprojected += records;
    this.unprojectedTotal += records;
    if (!this.ingestShut && this.unprojectedTotal > this.lagMax) {
      this.ingestShut = true;
      // Writers wait from now on: project at once rather than at the next tick.
      void this.cycle();
    }
  }

  /** `records` of the lane are in the read tables (or were found there already). */
  private uncounted(lane: Lane, records: number): void {
    // Entries of a backlog found at recovery were never counted: the lane's count stays >= 0.
    const d = Math.min(records, lane.unprojected);
    lane.unprojected -= d;
    this.unprojectedTotal -= d;
    if (this.ingestShut && this.unprojectedTotal <= this.lagResume) this.openIngest(true);
  }

  /**
   * A lane with nothing queued and no catch-up has nothing unprojected: whatever its count still
   * says (entries another owner projected and trimmed before this node's catch-up read them) is
   * dropped, so a miscount can never hold ingestion for good.
   */
  private settled(lane: Lane): void {
    if (lane.entries.length === 0 && !lane.catchUp && lane.unprojected > 0) this.uncounted(lane, lane.unprojected);
  }

  /** Lets the held writers go: on (true) or with a 429 (false, when stopping). */
  private openIngest(open: boolean): void {
    this.ingestShut = false;
    const waiters = this.ingestWaiters;
    this.ingestWaiters = [];
    for (const w of waiters) w(open);
  }

  start(): void {
    this.timer = setInterval(() => void this.cycle(), this.cycleMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.drain().catch(() => {});
    // Writers still held are answered 429 at once: this node is going away.
    this.openIngest(false);
  }

  async projectedOffset(partition: number): Promise<Offset> {
    const offset = await this.readModel.projectedOffset(partition);
    const lane = this.lane(partition);
    this.queuedTotal -= lane.queuedRecords;
    lane.entries = [];
    lane.queuedRecords = 0;
    lane.catchUp = false;
    lane.projected = offset;
    lane.ackedDuringRead = false;
    this.uncounted(lane, lane.unprojected);
    return offset;
  }

  /**
   * Recovery's feed. A replayed entry is queued like an ack while the partition's backlog stays
   * small; past replayedLaneRecordsMax (or with `records` null: the backlog starts before what
   * recovery reads) the lane catches up from the journal instead. False once it does: the caller
   * stops feeding this partition.
   */
  onReplayed(partition: number, offset: Offset, records: JournalRecord[] | null): boolean {
    const lane = this.lane(partition);
    if (lane.catchUp) return false;
    if (records === null || lane.queuedRecords + records.length > replayedLaneRecordsMax) {
      this.startCatchUp(lane);
      return false;
    }
    this.onAcked(partition, offset, records);
    return !lane.catchUp;
  }

  /** Highest offset of a partition known to be in the read tables (trimming stays at or below it). */
  projectedSoFar(partition: number): Offset {
    return this.lanes.get(partition)?.projected ?? offsetZero;
  }

  onAcked(partition: number, offset: Offset, records: JournalRecord[]): void {
    const lane = this.lane(partition);
    this.counted(lane, records.length);
    if (lane.catchUp) {
      lane.ackedDuringRead = true;
      return;
    }
    if (lane.queuedRecords + records.length > this.laneMax || this.queuedTotal + records.length > this.totalMax) {
      // No read is out yet: the catch-up's first read covers this entry.
      this.startCatchUp(lane);
      return;
    }
    lane.entries.push({ offset, records });
    lane.queuedRecords += records.length;
    this.queuedTotal += records.length;
  }

  /** Drops the lane's queue: from now on it reads the journal after `projected`. */
  private startCatchUp(lane: Lane): void {
    this.queuedTotal -= lane.queuedRecords;
    lane.entries = [];
    lane.queuedRecords = 0;
    lane.catchUp = true;
    this.catchUps++;
    projectorCatchUps.inc();
  }

  /** Resolves once everything acknowledged before the call is in the read tables. */
  drain(): Promise<void> {
    if (!this.pending() && this.running === null) return Promise.resolve();
    return new Promise((resolve) => {
      this.waiters.push(resolve);
      void this.cycle();
    });
  }

  private lane(partition: number): Lane {
    let lane = this.lanes.get(partition);
    if (!lane) {
      this.lanes.set(
        partition,
        (lane = { partition, entries: [], queuedRecords: 0, catchUp: false, projected: offsetZero, ackedDuringRead: false, unprojected: 0 }),
      );
      this.laneList.push(lane);
    }
    return lane;
  }

  /** True while some lane has entries queued or is catching up. */
  private pending(): boolean {
    const lanes = this.laneList;
    for (let i = 0; i < lanes.length; i++) {
      const l = lanes[i]!;
      if (l.entries.length > 0 || l.catchUp) return true;
    }
    return false;
  }

  private cycle(): Promise<void> {
    if (this.running) return this.running;
    this.running = this.runCycle()
      .catch((err: unknown) => this.logger.warn({ err }, 'projection cycle failed; retrying'))
      .finally(() => {
        this.running = null;
        if (!this.pending()) {
          const waiters = this.waiters;
          this.waiters = [];
          for (const w of waiters) w();
        } else if (this.waiters.length > 0 || this.ingestShut) {
          // Someone waits for the read tables (a drain, or writers held by the lag bound): go on at once.
          setImmediate(() => void this.cycle());
        }
      });
    return this.running;
  }

  private async runCycle(): Promise<void> {
    // Lanes fed in memory: one transaction for all of them.
    const batches: Array<{ partition: number; offset: Offset; projections: Projection[] }> = [];
    const taken: Array<{ lane: Lane; entries: Lane['entries']; records: number }> = [];
    const lanes = this.laneList;
    for (let i = 0; i < lanes.length; i++) {
      const lane = lanes[i]!;
      if (lane.catchUp || lane.entries.length === 0) continue;
      // Take the queue (entries acked meanwhile go to a fresh array); put it back if the write fails.
      const entries = lane.entries;
      const records = lane.queuedRecords;
      this.queuedTotal -= records;
      lane.entries = [];
      lane.queuedRecords = 0;
      const projections: Projection[] = [];
      for (const e of entries) {
        if (compareOffsets(e.offset, lane.projected) <= 0) continue;
        toProjections(e.records, projections);
      }
      batches.push({ partition: lane.partition, offset: entries[entries.length - 1]!.offset, projections });
      taken.push({ lane, entries, records });
    }
    if (batches.length > 0) {
      try {
        await this.readModel.applyMany(batches);
      } catch (err) {
        for (const { lane, entries } of taken) {
          if (lane.catchUp) continue;
          lane.entries = entries.concat(lane.entries);
          this.queuedTotal -= lane.queuedRecords;
          lane.queuedRecords = lane.entries.reduce((n, e) => n + e.records.length, 0);
          this.queuedTotal += lane.queuedRecords;
        }
        throw err;
      }
      for (let i = 0; i < taken.length; i++) {
        const { lane, records } = taken[i]!;
        const offset = batches[i]!.offset;
        if (compareOffsets(offset, lane.projected) > 0) lane.projected = offset;
        this.uncounted(lane, records);
        this.settled(lane);
      }
    }
    // Lanes that fell behind catch up from the journal, a page each per cycle, a few lanes per
    // transaction.
    let group: Lane[] = [];
    for (let i = 0; i < lanes.length; i++) {
      const lane = lanes[i]!;
      if (!lane.catchUp) continue;
      group.push(lane);
      if (group.length === catchUpLanesPerTransaction) {
        await this.catchUp(group);
        group = [];
      }
    }
    if (group.length > 0) await this.catchUp(group);
    projectorLagRecords.set(this.unprojectedTotal);
  }

  /** One page of the journal for each lane, read at once, projected in one transaction. */
  private async catchUp(group: Lane[]): Promise<void> {
    // Only acks that arrive while the reads are out can be missing from an empty answer.
    for (const lane of group) lane.ackedDuringRead = false;
    const pages = await Promise.all(group.map((lane) => this.journal.read(lane.partition, lane.projected, catchUpEntries)));
    const batches: Array<{ partition: number; offset: Offset; projections: Projection[] }> = [];
    const read: Array<{ lane: Lane; records: number }> = [];
    for (let i = 0; i < group.length; i++) {
      const lane = group[i]!;
      const entries = pages[i]!;
      if (entries.length === 0) {
        // Caught up, unless an ack came in while the read was out: then read again next cycle.
        if (!lane.ackedDuringRead) {
          lane.catchUp = false;
          this.settled(lane);
        }
        continue;
      }
      const projections: Projection[] = [];
      let records = 0;
      for (const e of entries) {
        const decoded = decodeEntry(e.payload);
        records += decoded.length;
        toProjections(decoded, projections);
      }
      batches.push({ partition: lane.partition, offset: entries[entries.length - 1]!.offset, projections });
      read.push({ lane, records });
    }
    if (batches.length === 0) return;
    await this.readModel.applyMany(batches);
    for (let i = 0; i < read.length; i++) {
      const { lane, records } = read[i]!;
      lane.projected = batches[i]!.offset;
      this.uncounted(lane, records);
    }
  }
}

/** Facts -> read-model rows. Pure. */
export function toProjections(records: JournalRecord[], out: Projection[]): void {
  for (const [environmentId, customerId, facts] of records) {
    if (customerId === '') continue;
    // The record's event row, for the facts journaled after it that mark it (event.answered).
    let event: Extract<Projection, { kind: 'event.insert' }> | null = null;
    for (const f of facts as Fact[]) {
      switch (f.kind) {
        case 'customer.created':
          out.push({
            kind: 'customer.upsert',
            environmentId,
            id: f.id,
            externalId: f.externalId,
            attributes: f.attributes,
            version: 1,
            createdAtMs: f.atMs,
            updatedAtMs: f.atMs,
          });
          break;
        case 'customer.updated':
          out.push({
            kind: 'customer.upsert',
            environmentId,
            id: customerId,
            externalId: f.externalId,
            attributes: f.attributes,
            version: f.version,
            createdAtMs: f.createdAtMs,
            updatedAtMs: f.atMs,
          });
          break;
        case 'customer.deleted':
          out.push({ kind: 'customer.erase', environmentId, id: customerId, deletedAtMs: f.atMs, version: f.version });
          break;
        case 'event.recorded':
          event = {
            kind: 'event.insert',
            environmentId,
            id: f.id,
            clientEventId: f.clientEventId,
            customerId,
            name: f.name,
            occurredAtMs: f.occurredAtMs,
            receivedAtMs: f.receivedAtMs,
            properties: f.properties,
            status: 'evaluated',
            trust: f.trust ?? null,
            sourceType: f.source?.type ?? null,
            sourceId: f.source?.id ?? null,
          };
          out.push(event);
          break;
        case 'event.answered':
          // Journaled after the event's other facts: the row keeps the sync answer's effects.
          if (event !== null && event.clientEventId === f.clientEventId) event.effects = f.effects;
          break;
        case 'alias.added':
          out.push({ kind: 'alias.upsert', environmentId, alias: f.alias, customerId, aliasKind: f.aliasKind, createdAtMs: f.atMs });
          break;
        case 'customer.merged':
          out.push({ kind: 'customer.merge', environmentId, id: customerId, into: f.into });
          break;
        case 'reward.reservation_voided':
        case 'item.granted':
          break;
        case 'reward.issue_requested':
        case 'reward.issued':
        case 'reward.issue_refused':
        case 'reward.redeemed':
        case 'reward.cancelled':
        case 'reward.expired':
        case 'reward.taken_over': {
          const i = f.issuance;
          out.push({
            kind: 'issuance.upsert',
            environmentId,
            id: i.id,
            rewardId: i.rewardId,
            customerId,
            status: i.status,
            sourceType: i.sourceType,
            sourceId: i.sourceId,
            costEntryId: i.costEntryId,
            expiresAtMs: i.expiresAtMs,
            redeemedAtMs: i.redeemedAtMs,
            cancelledAtMs: i.cancelledAtMs,
            reason: i.reason,
            version: i.version,
            createdAtMs: i.createdAtMs,
          });
          break;
        }
        case 'challenge.enrolled':
        case 'challenge.unenrolled':
        case 'challenge.progressed':
        case 'challenge.completed':
        case 'challenge.revoked':
          out.push(challengeProjection(environmentId, customerId, f));
          break;
        case 'challenge.merged':
          for (const p of challengeMergeProjections(environmentId, customerId, f)) out.push(p);
          break;
        case 'counter.counted': {
          // Journaled right after its event.recorded: mark that row (no extra statement).
          const last = out[out.length - 1];
          if (last?.kind === 'event.insert' && last.id === f.eventId) last.counted = f.bumps.map((b) => b.id);
          break;
        }
        case 'tier.assigned':
        case 'tier.changed':
          out.push({
            kind: 'tier.set',
            environmentId,
            customerId,
            programId: f.programId,
            level: f.level,
            sinceMs: f.atMs,
            nextCheckMs: f.nextDowngradeCheckMs,
          });
          break;
        case 'tier.downgrade_check_scheduled':
          out.push({ kind: 'tier.set', environmentId, customerId, programId: f.programId, level: null, sinceMs: null, nextCheckMs: f.nextDowngradeCheckMs });
          break;
        case 'segment.member_added':
        case 'segment.member_removed':
          out.push({
            kind: 'segment_member.set',
            environmentId,
            segmentId: f.segmentId,
            customerId,
            member: f.kind === 'segment.member_added',
            atMs: f.atMs,
          });
          break;
        case 'campaign.spent':
          out.push({ kind: 'campaign.spent', environmentId, campaignId: f.campaignId, currency: f.currency, amount: f.amount });
          break;
        case 'ledger.entry_recorded':
        case 'ledger.pending_confirmed':
        case 'ledger.pending_cancelled':
          for (const change of entryRowChanges(f)) {
            if (change.op === 'update') {
              out.push({ kind: 'ledger.update', environmentId, id: change.id, remaining: change.remaining, status: change.status });
            } else {
              const e = change.entry;
              out.push({
                kind: 'ledger.insert',
                environmentId,
                customerId,
                id: e.id,
                currency: e.currency,
                type: e.type,
                status: e.status,
                amount: e.amount,
                remaining: e.remaining,
                expiresAtMs: e.expiresAtMs,
                confirmAfterMs: e.confirmAfterMs,
                reason: e.reason,
                sourceType: e.sourceType,
                sourceId: e.sourceId,
                reversesEntryId: e.reversesEntryId,
                createdAtMs: e.createdAtMs,
              });
            }
          }
          break;
      }
    }
  }
}
