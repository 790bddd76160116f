// Binary formats of the engine: journal entries (one per partition flush) and actor snapshots.
// Both are msgpack with a leading format version so old data stays readable after changes; a
// decoder for every version ever written stays here. Never put class instances or Maps on the
// wire: snapshots turn Maps into arrays explicitly.
import { Packr } from 'msgpackr';
import { type CustomerState, type Fact, isEmptyRecord, sharedEmpty } from '../domain/customer.js';
import type { LedgerState } from '../domain/ledger.js';
import { inventoryFromPairs, inventoryPairs } from '../domain/inventory.js';
import { boundLimitCounts } from '../domain/rule-effects.js';
import { SeenEvents } from '../domain/seen-events.js';
import type { RewardsState } from '../domain/rewards.js';

const packr = new Packr({ useRecords: false, mapsAsObjects: true, variableMapSize: true });

/** Facts about the partition's routing table rather than one customer. */
export type KeyFact =
  | { kind: 'key.bound'; key: string; customerId: string }
  | { kind: 'key.released'; key: string; customerId: string };

/** One journal record: facts of one customer (customerId set) or of the routing table (''). */
export type JournalRecord = [environmentId: string, customerId: string, facts: Array<Fact | KeyFact>];

const journalFormat = 1;

export function encodeEntry(records: JournalRecord[]): Uint8Array {
  return packr.pack([journalFormat, records]);
}

export function decodeEntry(payload: Uint8Array): JournalRecord[] {
  const [format, records] = packr.unpack(payload) as [number, JournalRecord[]];
  if (format !== journalFormat) throw new Error(`journal entry format ${format} is not supported`);
  return records;
}

/**
 * msgpackr (with msgpackr-extract) decodes a run of strings at once and hands out slices of it,
 * so one decoded id kept in long-lived state keeps the whole run alive (in recovery, the string
 * data of a whole journal entry per actor). Strings that actors keep get their own copy; an
 * environment id, repeated in every actor, one shared copy per environment.
 */
export function ownString(s: string): string {
  return JSON.parse(JSON.stringify(s)) as string;
}

const environmentIds = new Map<string, string>();

export function sharedEnvironmentId(s: string): string {
  let own = environmentIds.get(s);
  if (own === undefined) {
    own = ownString(s);
    environmentIds.set(own, own);
  }
  return own;
}

/**
 * decodeEntry for records whose identity strings outlive the entry (recovery builds actors and
 * routing keys from them): environment, customer and external ids and routing keys are copied.
 */
export function decodeEntryToKeep(payload: Uint8Array): JournalRecord[] {
  const records = decodeEntry(payload);
  for (const rec of records) {
    rec[0] = sharedEnvironmentId(rec[0]);
    if (rec[1] !== '') rec[1] = ownString(rec[1]);
    for (const f of rec[2]) {
      if (f.kind === 'customer.created') {
        f.id = rec[1];
        f.environmentId = rec[0];
        f.externalId = ownString(f.externalId);
      } else if (f.kind === 'call.answered') {
        f.call = ownString(f.call);
      } else if (f.kind === 'key.bound') {
        f.key = ownString(f.key);
        f.customerId = ownString(f.customerId);
      }
    }
  }
  return records;
}

const snapshotFormat = 1;

type SnapshotV1 = [
  format: 1,
  id: string,
  environmentId: string,
  externalId: string | null,
  attributes: Record<string, unknown>,
  version: number,
  createdAtMs: number,
  updatedAtMs: number,
  deletedAtMs: number | null,
  aliases: CustomerState['aliases'],
  mergedInto: string | null,
  mergedFrom: string[],
  /** SeenEvents records: little-endian float64, 4 per event. */
  events: Uint8Array,
  /** Added with the ledger; absent in older snapshots (then empty). */
  ledger?: LedgerState,
  /** Added with rules; absent in older snapshots (then empty). */
  ruleLimits?: Record<string, number>,
  /** Added with tiers; absent in older snapshots (then empty). */
  tiers?: CustomerState['tiers'],
  /** Added with rewards; absent in older snapshots (then empty). */
  rewards?: RewardsState | null,
  /** Added with challenges; absent in older snapshots (then empty). */
  challenges?: CustomerState['challenges'] | null,
  /** Added with counters; absent in older snapshots (then empty). */
  counters?: CustomerState['counters'] | null,
  /** Added with item.grant: [item, quantity] pairs; absent in older snapshots (then empty). */
  inventory?: Array<[string, number]> | null,
  /** Added with match results; absent in older snapshots (then empty). */
  matchRates?: CustomerState['matchRates'] | null,
  /** Added with segments; absent in older snapshots (then empty). */
  segmentIds?: string[] | null,
  /** Added with replayed sync answers; absent in older snapshots (then empty). */
  recentAnswers?: CustomerState['recentAnswers'] | null,
  /** Added with ledger transfers at merges; absent in older snapshots (then null). */
  handedOver?: CustomerState['handedOver'],
  /** Added with two-step deletes: when a delete began (null or absent: none did). */
  deletingSinceMs?: number | null,
  /** Added with call ids: the remembered answers of calls (null or absent: none). */
  recentCalls?: CustomerState['recentCalls'] | null,
];

export function encodeSnapshot(s: CustomerState): Uint8Array {
  const packed = s.events.toArray();
  const events = new Uint8Array(packed.buffer, packed.byteOffset, packed.byteLength);
  const v1: SnapshotV1 = [
    snapshotFormat,
    s.id,
    s.environmentId,
    s.externalId,
    s.attributes,
    s.version,
    s.createdAtMs,
    s.updatedAtMs,
    s.deletedAtMs,
    s.aliases,
    s.mergedInto,
    s.mergedFrom,
    events,
    s.ledger,
    s.ruleLimits,
    s.tiers,
    // Mechanics the customer never used are written as nil (decoded back to the shared empties).
    s.rewards === sharedEmpty.rewards ? null : s.rewards,
    s.challenges === sharedEmpty.challenges ? null : s.challenges,
    s.counters === sharedEmpty.counters ? null : s.counters,
    s.inventory === sharedEmpty.inventory ? null : inventoryPairs(s.inventory),
    s.matchRates === sharedEmpty.matchRates ? null : s.matchRates,
    s.segmentIds === sharedEmpty.segmentIds ? null : s.segmentIds,
    s.recentAnswers === sharedEmpty.recentAnswers ? null : s.recentAnswers,
    s.handedOver,
    s.deletingSinceMs ?? null,
    s.recentCalls.length === 0 ? null : s.recentCalls,
  ];
  return packr.pack(v1);
}

export function decodeSnapshot(payload: Uint8Array): CustomerState {
  const v = packr.unpack(payload) as SnapshotV1;
  if (v[0] !== 1) throw new Error(`snapshot format ${v[0]} is not supported`);
  // Copy into an aligned buffer: the decoded bytes may start at any offset.
  const bytes = v[12];
  const events = new SeenEvents(new Float64Array(new Uint8Array(bytes).buffer));
  return {
    // Kept for as long as the actor lives: own copies, not slices of the payload's strings.
    id: ownString(v[1]),
    environmentId: sharedEnvironmentId(v[2]),
    externalId: v[3] === null ? null : ownString(v[3]),
    attributes: isEmptyRecord(v[4]) ? sharedEmpty.attributes : v[4],
    version: v[5],
    createdAtMs: v[6],
    updatedAtMs: v[7],
    deletedAtMs: v[8],
    aliases: v[9].length === 0 ? sharedEmpty.aliases : v[9],
    mergedInto: v[10],
    mergedFrom: v[11].length === 0 ? sharedEmpty.mergedFrom : v[11],
    events,
    ledger: v[13] == null || v[13].books.length === 0 ? sharedEmpty.ledger : v[13],
    // Keys written before long scope values were hashed are read under today's key (boundLimitKey).
    ruleLimits: v[14] == null || isEmptyRecord(v[14]) ? sharedEmpty.ruleLimits : boundLimitCounts(v[14]),
    tiers: v[15] == null || isEmptyRecord(v[15]) ? sharedEmpty.tiers : v[15],
    rewards: v[16] == null || (v[16].issuances.length === 0 && (v[16].voided?.length ?? 0) === 0) ? sharedEmpty.rewards : { ...v[16], voided: v[16].voided ?? [] },
    challenges:
      v[17] == null || (isEmptyRecord(v[17].enrollments) && isEmptyRecord(v[17].progress) && isEmptyRecord(v[17].completions)) ? sharedEmpty.challenges : v[17],
    counters: v[18] == null || isEmptyRecord(v[18]) ? sharedEmpty.counters : v[18],
    inventory: v[19] == null || v[19].length === 0 ? sharedEmpty.inventory : inventoryFromPairs(v[19]),
    matchRates: v[20] == null || isEmptyRecord(v[20]) ? sharedEmpty.matchRates : v[20],
    segmentIds: v[21] == null || v[21].length === 0 ? sharedEmpty.segmentIds : v[21],
    recentAnswers: v[22] == null || v[22].length === 0 ? sharedEmpty.recentAnswers : v[22],
    handedOver: v[23] ?? null,
    recentCalls: v[25] == null || v[25].length === 0 ? sharedEmpty.recentCalls : v[25],
    ...(v[24] == null ? {} : { deletingSinceMs: v[24] }),
  };
}

/** Forwarded calls between nodes reuse the same packer. */
export function packMessage(value: unknown): Uint8Array {
  return packr.pack(value);
}

export function unpackMessage<T>(payload: Uint8Array): T {
  return packr.unpack(payload) as T;
}
