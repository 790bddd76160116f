// The embedded Journal: one fsynced append-only log shared by ALL partitions, in segment files
// under one directory. Appends made within one tick are written with ONE write and ONE fdatasync
// (group commit across partitions); only then do they resolve. Survives a process crash (kill -9)
// and, with fsync on, power loss; a torn tail is cut off at the first bad frame on open.
// Limits: ONE process owns the directory (fencing is the in-process currentEpoch, e.g. MemoryLeases),
// the index of every live entry is kept in memory. Never resolve an append before its fdatasync.
import { appendEach } from '../append-each.js';
import { open as openFile, type FileHandle, mkdir, readdir, readFile, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { FencedError, type Journal, type JournalEntry, type Offset, offsetZero } from '../ports.js';
import { firstAfter, seqAfter, seqOffset } from './seq-offset.js';

/*
 * On-disk format, version 1 (all integers little endian):
 *   segment-<12 digits>.log  frames back to back:
 *     u32 payload length | u32 crc32(bytes 8..end of frame) | u32 partition | u32 seq low | u32 seq high | payload
 *   meta.json  {"version":1,"watermarks":{"<partition>":<seq>}}: entries with seq <= watermark are
 *              trimmed; replaced atomically (write tmp, fsync, rename, fsync dir).
 * Seqs count 1, 2, 3... per partition and are never reused: on open the next seq is one past the
 * larger of the last seq found and the watermark, so trimming everything does not restart at 1.
 */

const headerBytes = 20;
/** Sanity bound for one entry: a length above it in a header can only be a torn or corrupt frame. */
const payloadBytesMax = 128 * 1024 * 1024;
const segmentBytesDefault = 64 * 1024 * 1024;
/** Linux IOV_MAX: beyond it one writev would become several writes, so we concatenate instead. */
const iovecsMax = 1024;
/** Reads of adjacent frames are merged up to this size. */
const readRunBytesMax = 1024 * 1024;
const metaName = 'meta.json';
const segmentPattern = /^segment-(\d{12})\.log$/;

export interface FileJournalOptions {
  /** The fence: an append is refused unless its epoch equals this at flush time. */
  currentEpoch: (partition: number) => number;
  /** fdatasync every group (default true). Off only for throwaway benchmarks (EMBEDDED_FSYNC). */
  fsync?: boolean;
  /** Start a new segment when a group would grow the current one past this (default 64 MiB). */
  segmentBytesMax?: number;
}

interface Segment {
  no: number;
  fh: FileHandle;
  /** Bytes of valid frames; the next group is written here. */
  size: number;
  /** Untrimmed entries still in the file; at 0 (and not the active segment) the file is deleted. */
  live: number;
}

/** Untrimmed entries of one partition, oldest first, as parallel arrays (one object per entry would cost more). */
class PartitionIndex {
  seqs: number[] = [];
  segments: number[] = [];
  positions: number[] = [];
  lengths: number[] = [];
  head = 0;
  /** Last seq handed out (durable or in flight). */
  lastSeq = 0;

  push(seq: number, segment: number, position: number, length: number): void {
    this.seqs.push(seq);
    this.segments.push(segment);
    this.positions.push(position);
    this.lengths.push(length);
  }

  /** Drops the dead head once it is large, so trimmed entries do not pin memory. */
  compact(): void {
    if (this.head < 1024 || this.head * 2 < this.seqs.length) return;
    this.seqs = this.seqs.slice(this.head);
    this.segments = this.segments.slice(this.head);
    this.positions = this.positions.slice(this.head);
    this.lengths = this.lengths.slice(this.head);
    this.head = 0;
  }
}

interface Pending {
  partition: number;
  epoch: number;
  payload: Buffer;
  resolve: (offset: Offset) => void;
  reject: (err: Error) => void;
}

function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function segmentName(no: number): string {
  return `segment-${String(no).padStart(12, '0')}.log`;
}

function frameCrc(frame: Buffer, at: number, payloadLength: number): number {
  return crc32(frame.subarray(at + 8, at + headerBytes + payloadLength));
}

async function syncDir(dir: string): Promise<void> {
  const fh = await openFile(dir, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** Writes every buffer at `position`: one writev, falling back to a loop only on a short write. */
async function writeAll(fh: FileHandle, bufs: Buffer[], total: number, position: number): Promise<void> {
  if (bufs.length > iovecsMax) bufs = [Buffer.concat(bufs, total)];
  const { bytesWritten } = await fh.writev(bufs, position);
  if (bytesWritten === total) return;
  const rest = Buffer.concat(bufs, total).subarray(bytesWritten);
  let done = 0;
  while (done < rest.length) {
    const r = await fh.write(rest, done, rest.length - done, position + bytesWritten + done);
    if (r.bytesWritten <= 0) throw new Error('journal write made no progress');
    done += r.bytesWritten;
  }
}

export class FileJournal implements Journal {
  private readonly segments = new Map<number, Segment>();
  private readonly index = new Map<number, PartitionIndex>();
  private readonly watermarks = new Map<number, number>();
  private pending: Pending[] = [];
  private scheduled = false;
  private flushing: Promise<void> | null = null;
  /** Set when a write or fdatasync failed: the file state is unknown, so every later append fails. */
  private failed: Error | null = null;
  private closed = false;
  private metaWriting: Promise<void> | null = null;
  private metaNext: Promise<void> | null = null;
  private readsInFlight = 0;
  private deletionWanted = false;
  private readonly fsync: boolean;
  private readonly segmentBytesMax: number;
  private readonly currentEpoch: (partition: number) => number;

  private constructor(
    private readonly dir: string,
    private active: Segment,
    opts: FileJournalOptions,
  ) {
    this.fsync = opts.fsync ?? true;
    this.segmentBytesMax = opts.segmentBytesMax ?? segmentBytesDefault;
    this.currentEpoch = opts.currentEpoch;
  }

  /**
   * Opens (creating if needed) the journal in `dir`: reads the watermarks, scans every segment to
   * rebuild the index and cuts a torn tail off the last segment. A bad frame in an earlier segment
   * is corruption, not a crash artefact, and makes open throw rather than lose acked entries.
   */
  static async open(dir: string, opts: FileJournalOptions): Promise<FileJournal> {
    await mkdir(dir, { recursive: true });
    const fsync = opts.fsync ?? true;
    await rm(join(dir, `${metaName}.tmp`), { force: true });
    const watermarks = await readWatermarks(dir);

    const names = (await readdir(dir)).filter((n) => segmentPattern.test(n)).sort();
    const scanned: Segment[] = [];
    const index = new Map<number, PartitionIndex>();
    const indexOf = (p: number): PartitionIndex => {
      let ix = index.get(p);
      if (!ix) index.set(p, (ix = new PartitionIndex()));
      return ix;
    };
    try {
      for (let i = 0; i < names.length; i++) {
        const no = Number(segmentPattern.exec(names[i]!)![1]);
        const path = join(dir, names[i]!);
        const fh = await openFile(path, 'r+');
        const seg: Segment = { no, fh, size: 0, live: 0 };
        scanned.push(seg);
        const data = await fh.readFile();
        let pos = 0;
        while (pos + headerBytes <= data.length) {
          const length = data.readUInt32LE(pos);
          if (length > payloadBytesMax || pos + headerBytes + length > data.length) break;
          if (data.readUInt32LE(pos + 4) !== frameCrc(data, pos, length)) break;
          const partition = data.readUInt32LE(pos + 8);
          const seq = data.readUInt32LE(pos + 12) + data.readUInt32LE(pos + 16) * 2 ** 32;
          const ix = indexOf(partition);
          if (seq <= ix.lastSeq) {
            throw new Error(`journal ${path}: partition ${partition} seq ${seq} at ${pos} does not increase`);
          }
          ix.lastSeq = seq;
          if (seq > (watermarks.get(partition) ?? 0)) {
            ix.push(seq, no, pos, length);
            seg.live++;
          }
          pos += headerBytes + length;
        }
        if (pos < data.length) {
          if (i !== names.length - 1) {
            throw new Error(`journal ${path}: bad frame at ${pos} in a segment that is not the last one`);
          }
          // A torn tail: the group being written when the process died; none of it was acked.
          await fh.truncate(pos);
          if (fsync) await fh.datasync();
        }
        seg.size = pos;
      }
    } catch (err) {
      await Promise.all(scanned.map((s) => s.fh.close()));
      throw err;
    }

    let active = scanned[scanned.length - 1];
    if (!active) {
      active = { no: 1, fh: await openFile(join(dir, segmentName(1)), 'wx+'), size: 0, live: 0 };
      if (fsync) await syncDir(dir);
      scanned.push(active);
    }
    const journal = new FileJournal(dir, active, opts);
    for (const s of scanned) journal.segments.set(s.no, s);
    for (const [p, w] of watermarks) {
      journal.watermarks.set(p, w);
      const ix = indexOf(p);
      if (w > ix.lastSeq) ix.lastSeq = w;
    }
    for (const [p, ix] of index) journal.index.set(p, ix);
    await journal.deleteDeadSegments();
    return journal;
  }

  private indexOf(partition: number): PartitionIndex {
    let ix = this.index.get(partition);
    if (!ix) this.index.set(partition, (ix = new PartitionIndex()));
    return ix;
  }

  /**
   * Durable once resolved. The payload is written from the caller's memory without a copy, so the
   * caller must not change it until the promise settles.
   */
  appendMany(items: ReadonlyArray<{ partition: number; epoch: number; payload: Uint8Array }>): Promise<Array<Offset | FencedError>> {
    return appendEach((p, e, b) => this.append(p, e, b), items);
  }

  append(partition: number, epoch: number, payload: Uint8Array): Promise<Offset> {
    if (this.closed) return Promise.reject(new Error('journal is closed'));
    if (this.failed) return Promise.reject(this.failed);
    if (!Number.isInteger(partition) || partition < 0 || partition > 0xffff_ffff) {
      return Promise.reject(new RangeError(`partition out of range: ${partition}`));
    }
    if (payload.byteLength > payloadBytesMax) {
      return Promise.reject(new RangeError(`journal entry of ${payload.byteLength} bytes exceeds ${payloadBytesMax}`));
    }
    if (epoch !== this.currentEpoch(partition)) return Promise.reject(new FencedError(partition, epoch));
    return new Promise<Offset>((resolve, reject) => {
      this.pending.push({ partition, epoch, payload: asBuffer(payload), resolve, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.flushing || this.pending.length === 0) return;
    this.scheduled = true;
    // setImmediate, not nextTick: appends issued from promise continuations of this tick join the group.
    setImmediate(() => {
      this.scheduled = false;
      this.flushing = this.flush().finally(() => {
        this.flushing = null;
        this.schedule();
      });
    });
  }

  private async flush(): Promise<void> {
    const batch = this.pending;
    this.pending = [];
    if (this.failed) {
      for (const b of batch) b.reject(this.failed);
      return;
    }
    // The fence is checked here again, synchronously right before seqs are assigned: an epoch that
    // lost its lease after the append call appends nothing.
    const accepted: Pending[] = [];
    let total = 0;
    for (const b of batch) {
      if (b.epoch !== this.currentEpoch(b.partition)) b.reject(new FencedError(b.partition, b.epoch));
      else {
        accepted.push(b);
        total += headerBytes + b.payload.length;
      }
    }
    if (accepted.length === 0) return;

    try {
      if (this.active.size > 0 && this.active.size + total > this.segmentBytesMax) await this.rotate();
      const seg = this.active;
      const headers = Buffer.allocUnsafe(headerBytes * accepted.length);
      const bufs: Buffer[] = [];
      const seqs: number[] = new Array(accepted.length);
      for (let i = 0; i < accepted.length; i++) {
        const b = accepted[i]!;
        const seq = ++this.indexOf(b.partition).lastSeq;
        seqs[i] = seq;
        const at = i * headerBytes;
        headers.writeUInt32LE(b.payload.length, at);
        headers.writeUInt32LE(b.partition, at + 8);
        headers.writeUInt32LE(seq >>> 0, at + 12);
        headers.writeUInt32LE(Math.floor(seq / 2 ** 32), at + 16);
        let crc = crc32(headers.subarray(at + 8, at + headerBytes));
        // Guarded: Node 20's crc32 returns 0 for an empty view with a non-zero initial value.
        if (b.payload.length > 0) crc = crc32(b.payload, crc);
        headers.writeUInt32LE(crc, at + 4);
        bufs.push(headers.subarray(at, at + headerBytes));
        if (b.payload.length > 0) bufs.push(b.payload);
      }
      const start = seg.size;
      await writeAll(seg.fh, bufs, total, start);
      if (this.fsync) await seg.fh.datasync();
      seg.size = start + total;

      let pos = start;
      for (let i = 0; i < accepted.length; i++) {
        const b = accepted[i]!;
        const seq = seqs[i]!;
        // A trim may already cover an entry whose offset was never returned; then it is dead on arrival.
        if (seq > (this.watermarks.get(b.partition) ?? 0)) {
          this.indexOf(b.partition).push(seq, seg.no, pos, b.payload.length);
          seg.live++;
        }
        pos += headerBytes + b.payload.length;
      }
      for (let i = 0; i < accepted.length; i++) accepted[i]!.resolve(seqOffset(seqs[i]!));
    } catch (err) {
      // After a failed write or fdatasync the kernel may have dropped dirty pages: nothing written
      // since the last good fdatasync can be trusted, so stop accepting appends (reopen to recover).
      this.failed = err instanceof Error ? err : new Error(String(err));
      for (const b of accepted) b.reject(this.failed);
      const rest = this.pending;
      this.pending = [];
      for (const b of rest) b.reject(this.failed);
    }
  }

  private async rotate(): Promise<void> {
    const no = this.active.no + 1;
    const fh = await openFile(join(this.dir, segmentName(no)), 'wx+');
    // The new file's directory entry must be durable before anything acked lives in it.
    if (this.fsync) await syncDir(this.dir);
    const seg: Segment = { no, fh, size: 0, live: 0 };
    this.segments.set(no, seg);
    this.active = seg;
    this.deletionWanted = true;
  }

  async read(partition: number, after: Offset, count: number): Promise<JournalEntry[]> {
    // An entry whose fence check passed before this call is visible to it (as with the atomic
    // Redis script): wait for the group in flight.
    if (this.flushing) await this.flushing;
    if (this.closed) throw new Error('journal is closed');
    const ix = this.index.get(partition);
    if (!ix || count <= 0) return [];
    const from = firstAfter(ix.seqs, ix.head, seqAfter(after));
    const to = Math.min(ix.seqs.length, from + count);
    if (from >= to) return [];
    const out: JournalEntry[] = new Array(to - from);
    const runs: Array<Promise<void>> = [];
    // Captured now: compaction replaces the arrays (it never mutates them), pushes only append.
    const seqs = ix.seqs;
    const lengths = ix.lengths;
    this.readsInFlight++;
    try {
      let i = from;
      while (i < to) {
        const segNo = ix.segments[i]!;
        const start = ix.positions[i]!;
        let end = start + headerBytes + ix.lengths[i]!;
        let j = i + 1;
        while (j < to && ix.segments[j] === segNo && ix.positions[j] === end && end - start < readRunBytesMax) {
          end += headerBytes + ix.lengths[j]!;
          j++;
        }
        runs.push(this.readRun(partition, seqs, lengths, segNo, start, end, i, j, out, i - from));
        i = j;
      }
      await Promise.all(runs);
    } finally {
      this.readsInFlight--;
      if (this.readsInFlight === 0 && this.deletionWanted) void this.deleteDeadSegments().catch(() => {});
    }
    return out;
  }

  /** Reads entries [i, j) of the index, which lie back to back in one segment from `start` to `end`. */
  private async readRun(
    partition: number,
    seqs: readonly number[],
    lengths: readonly number[],
    segNo: number,
    start: number,
    end: number,
    i: number,
    j: number,
    out: JournalEntry[],
    outAt: number,
  ): Promise<void> {
    const seg = this.segments.get(segNo);
    if (!seg) throw new Error(`journal segment ${segNo} is gone`);
    const buf = Buffer.allocUnsafe(end - start);
    const { bytesRead } = await seg.fh.read(buf, 0, buf.length, start);
    if (bytesRead !== buf.length) throw new Error(`journal segment ${segNo}: short read at ${start}`);
    let at = 0;
    for (let k = i; k < j; k++) {
      const length = lengths[k]!;
      const seq = seqs[k]!;
      if (
        buf.readUInt32LE(at) !== length ||
        buf.readUInt32LE(at + 4) !== frameCrc(buf, at, length) ||
        buf.readUInt32LE(at + 8) !== partition ||
        buf.readUInt32LE(at + 12) + buf.readUInt32LE(at + 16) * 2 ** 32 !== seq
      ) {
        throw new Error(`journal segment ${segNo}: entry ${seqOffset(seq)} of partition ${partition} is corrupt`);
      }
      out[outAt + (k - i)] = { offset: seqOffset(seq), payload: buf.subarray(at + headerBytes, at + headerBytes + length) };
      at += headerBytes + length;
    }
  }

  async trim(partition: number, upTo: Offset): Promise<void> {
    if (this.closed) throw new Error('journal is closed');
    const ix = this.index.get(partition);
    if (!ix) return;
    // Never past the last seq handed out: a watermark ahead of it would hide future entries.
    const target = Math.min(seqAfter(upTo), ix.lastSeq);
    if (target <= (this.watermarks.get(partition) ?? 0)) return;
    this.watermarks.set(partition, target);
    const newHead = firstAfter(ix.seqs, ix.head, target);
    for (let k = ix.head; k < newHead; k++) {
      const seg = this.segments.get(ix.segments[k]!);
      if (seg && --seg.live === 0) this.deletionWanted = true;
    }
    ix.head = newHead;
    ix.compact();
    // The watermark must be durable before any file goes: otherwise a restart could find neither
    // the entries nor the watermark and hand out their seqs again.
    await this.persistMeta();
    if (this.readsInFlight === 0) await this.deleteDeadSegments();
  }

  async last(partition: number): Promise<Offset> {
    if (this.flushing) await this.flushing;
    if (this.closed) throw new Error('journal is closed');
    const ix = this.index.get(partition);
    return ix && ix.head < ix.seqs.length ? seqOffset(ix.seqs[ix.seqs.length - 1]!) : offsetZero;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // Appends accepted before close still complete.
    while (this.flushing || this.scheduled || this.pending.length > 0) {
      if (this.flushing) await this.flushing;
      else await new Promise((r) => setImmediate(r));
    }
    while (this.metaWriting || this.metaNext) await (this.metaNext ?? this.metaWriting);
    await Promise.all([...this.segments.values()].map((s) => s.fh.close()));
    this.segments.clear();
  }

  /** Coalesces watermark writes: at most one in flight, and one more that covers every later change. */
  private persistMeta(): Promise<void> {
    if (!this.metaWriting) {
      this.metaWriting = this.writeMeta().finally(() => {
        this.metaWriting = null;
      });
      return this.metaWriting;
    }
    if (!this.metaNext) {
      const next = this.metaWriting
        .catch(() => {})
        .then(() => {
          this.metaNext = null;
          return this.persistMeta();
        });
      this.metaNext = next;
    }
    return this.metaNext;
  }

  private async writeMeta(): Promise<void> {
    const watermarks: Record<string, number> = {};
    for (const [p, w] of this.watermarks) watermarks[String(p)] = w;
    const body = JSON.stringify({ version: 1, watermarks });
    const tmp = join(this.dir, `${metaName}.tmp`);
    const fh = await openFile(tmp, 'w');
    try {
      await fh.writeFile(body);
      if (this.fsync) await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, join(this.dir, metaName));
    if (this.fsync) await syncDir(this.dir);
  }

  /** Deletes every segment, other than the active one, whose entries are all trimmed. */
  private async deleteDeadSegments(): Promise<void> {
    this.deletionWanted = false;
    for (const seg of [...this.segments.values()]) {
      if (seg === this.active || seg.live > 0) continue;
      this.segments.delete(seg.no);
      await seg.fh.close();
      await rm(join(this.dir, segmentName(seg.no)), { force: true });
    }
  }
}

async function readWatermarks(dir: string): Promise<Map<number, number>> {
  let text: string;
  try {
    text = await readFile(join(dir, metaName), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return new Map();
    throw err;
  }
  const meta = JSON.parse(text) as { version: number; watermarks: Record<string, number> };
  if (meta.version !== 1) throw new Error(`journal ${dir}: unknown meta version ${meta.version}`);
  const out = new Map<number, number>();
  for (const [p, w] of Object.entries(meta.watermarks)) out.set(Number(p), w);
  return out;
}
