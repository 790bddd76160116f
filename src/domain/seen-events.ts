// Every event id a customer ever recorded (permanent deduplication), packed as 4 doubles per event
// in one growable array: [hash53(client event id), content fingerprint, service-id time,
// service-id random]. Snapshots write the records as float64 bytes, so a customer with thousands of
// events costs one copy, not thousands of objects. A lookup scans small sets and indexes large ones.
// Pure data structure: no clock, no randomness. Two ids with the same 53-bit hash would be taken
// for the same id (probability ~n^2 / 2^54 per customer; documented in the README).
import { hash53 } from '../util/canonical-json.js';

const stride = 4;
const indexFrom = 16;
const alphabet = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
const decode = new Int8Array(128).fill(-1);
for (let i = 0; i < alphabet.length; i++) decode[alphabet.charCodeAt(i)] = i;
/** 32 ** i, exact (powers of two); a table instead of a Math.pow call per digit. */
const pow32 = Float64Array.from({ length: 11 }, (_, i) => 32 ** i);

/** Service event ids: `evt_` + 10 chars of milliseconds + 11 chars of a 53-bit random number. */
export function eventId(timeMs: number, rand53: number): string {
  let s = 'evt_';
  for (let i = 9; i >= 0; i--) s += alphabet[Math.floor(timeMs / pow32[i]!) % 32];
  for (let i = 10; i >= 0; i--) s += alphabet[Math.floor(rand53 / pow32[i]!) % 32];
  return s;
}

/** Inverse of eventId; null when the string is not such an id. */
export function parseEventId(id: string): { timeMs: number; rand53: number } | null {
  if (id.length !== 25 || !id.startsWith('evt_')) return null;
  let t = 0;
  let r = 0;
  for (let i = 4; i < 25; i++) {
    const c = id.charCodeAt(i);
    const d = c < 128 ? decode[c]! : -1;
    if (d < 0) return null;
    if (i < 14) t = t * 32 + d;
    else r = r * 32 + d;
  }
  return { timeMs: t, rand53: r };
}

/** How many events packed records (SeenEvents.records) hold. */
export function recordCount(records: ArrayLike<number>): number {
  return records.length / stride;
}

/** The events of packed records (SeenEvents.records), `from` to `to` (record numbers, `to` excluded). */
export function recordedEvents(records: ArrayLike<number>, from: number, to: number): Array<{ idHash: number; fp: number; eventId: string }> {
  const out: Array<{ idHash: number; fp: number; eventId: string }> = [];
  for (let o = from * stride; o < to * stride; o += stride) {
    out.push({ idHash: records[o]!, fp: records[o + 1]!, eventId: eventId(records[o + 2]!, records[o + 3]!) });
  }
  return out;
}

/** Shared by every empty set (never written: the first add replaces it). */
const noRecords: number[] = Object.freeze([]) as unknown as number[];

export class SeenEvents {
  /**
   * The records, 4 numbers each, in a plain array of doubles: a customer with one event costs the
   * array and its 4 doubles (about 80 bytes), where a typed array and its buffer cost about 250.
   */
  private data: number[];
  private index: Map<number, number> | null = null;

  constructor(data?: Float64Array) {
    this.data = data === undefined || data.length === 0 ? noRecords : Array.from(data);
    if (this.size > indexFrom) this.buildIndex();
  }

  get size(): number {
    return this.data.length / stride;
  }

  /** The recorded event for a client event id: its fingerprint and service id. */
  get(clientEventId: string): { fp: number; id: string } | undefined {
    const i = this.find(hash53(clientEventId));
    if (i < 0) return undefined;
    const o = i * stride;
    return { fp: this.data[o + 1]!, id: eventId(this.data[o + 2]!, this.data[o + 3]!) };
  }

  add(clientEventId: string, fp: number, serviceId: string): void {
    const parsed = parseEventId(serviceId);
    if (parsed === null) return;
    const key = hash53(clientEventId);
    if (this.find(key) >= 0) return;
    const n = this.size;
    // The first record allocates exactly its 4 numbers; later ones grow the array.
    if (n === 0) this.data = [key, fp, parsed.timeMs, parsed.rand53];
    else this.data.push(key, fp, parsed.timeMs, parsed.rand53);
    if (this.index) this.index.set(key, n);
    else if (n + 1 > indexFrom) this.buildIndex();
  }

  /**
   * Joins another customer's records (a merge: its event ids stay deduplicated on the survivor).
   * A client event id this set already knows keeps its own record.
   */
  addRecords(records: ArrayLike<number>): void {
    for (let o = 0; o + stride <= records.length; o += stride) {
      const key = records[o]!;
      if (this.find(key) >= 0) continue;
      const n = this.size;
      if (n === 0) this.data = [key, records[o + 1]!, records[o + 2]!, records[o + 3]!];
      else this.data.push(key, records[o + 1]!, records[o + 2]!, records[o + 3]!);
      if (this.index) this.index.set(key, n);
      else if (n + 1 > indexFrom) this.buildIndex();
    }
  }

  /** The packed records (a copy) as plain numbers, for a merge fact; from the `from`th on. */
  records(from = 0): number[] {
    return this.data.slice(from * stride);
  }

  /** The packed records (a copy), for snapshots. */
  toArray(): Float64Array {
    return Float64Array.from(this.data);
  }

  private find(key: number): number {
    if (this.index) return this.index.get(key) ?? -1;
    const d = this.data;
    for (let o = 0; o < d.length; o += stride) if (d[o] === key) return o / stride;
    return -1;
  }

  private buildIndex(): void {
    this.index = new Map();
    for (let i = 0; i < this.size; i++) this.index.set(this.data[i * stride]!, i);
  }
}
