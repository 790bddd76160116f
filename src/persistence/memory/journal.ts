// In-memory Journal for tests and simulations: same offsets ("0-<seq>") and fencing rule as the
// file journal (append is refused unless epoch === currentEpoch(partition) at the call).
// Invariants: seqs strictly increase per partition and are never reused, also after trim; stored
// payloads are private copies. Never durable: a process exit loses everything.
import { appendEach } from '../append-each.js';
import { FencedError, type Journal, type JournalEntry, type Offset, offsetZero } from '../ports.js';
import { firstAfter, seqAfter, seqOffset } from '../file/seq-offset.js';

class PartitionLog {
  seqs: number[] = [];
  payloads: Uint8Array[] = [];
  /** Index of the first untrimmed entry; the arrays are compacted when the dead head grows. */
  head = 0;
  lastSeq = 0;
}

export class MemoryJournal implements Journal {
  private readonly logs = new Map<number, PartitionLog>();
  private closed = false;

  /** `currentEpoch` is the fence, e.g. MemoryLeases.currentEpoch. */
  constructor(private readonly currentEpoch: (partition: number) => number) {}

  private log(partition: number): PartitionLog {
    let l = this.logs.get(partition);
    if (!l) this.logs.set(partition, (l = new PartitionLog()));
    return l;
  }

  appendMany(items: ReadonlyArray<{ partition: number; epoch: number; payload: Uint8Array }>): Promise<Array<Offset | FencedError>> {
    return appendEach((p, e, b) => this.append(p, e, b), items);
  }

  async append(partition: number, epoch: number, payload: Uint8Array): Promise<Offset> {
    if (this.closed) throw new Error('journal is closed');
    if (epoch !== this.currentEpoch(partition)) throw new FencedError(partition, epoch);
    const l = this.log(partition);
    const seq = ++l.lastSeq;
    l.seqs.push(seq);
    l.payloads.push(payload.slice());
    return seqOffset(seq);
  }

  async read(partition: number, after: Offset, count: number): Promise<JournalEntry[]> {
    const l = this.logs.get(partition);
    if (!l || count <= 0) return [];
    const from = firstAfter(l.seqs, l.head, seqAfter(after));
    const to = Math.min(l.seqs.length, from + count);
    const out: JournalEntry[] = [];
    for (let i = from; i < to; i++) out.push({ offset: seqOffset(l.seqs[i]!), payload: l.payloads[i]! });
    return out;
  }

  async trim(partition: number, upTo: Offset): Promise<void> {
    const l = this.logs.get(partition);
    if (!l) return;
    l.head = firstAfter(l.seqs, l.head, seqAfter(upTo));
    if (l.head > 1024 && l.head * 2 > l.seqs.length) {
      l.seqs = l.seqs.slice(l.head);
      l.payloads = l.payloads.slice(l.head);
      l.head = 0;
    }
  }

  async last(partition: number): Promise<Offset> {
    const l = this.logs.get(partition);
    return l && l.head < l.seqs.length ? seqOffset(l.seqs[l.seqs.length - 1]!) : offsetZero;
  }

  async close(): Promise<void> {
    this.closed = true;
  }
}
