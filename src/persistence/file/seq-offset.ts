// Offsets of the journals that number entries per partition (file journal, in-memory twin):
// "0-<seq>" with seq = 1, 2, 3... so compareOffsets orders them like Redis stream ids.
// Invariant: seqAfter(o) is the largest seq that is <= o; entries with a greater seq come after o.
// Never accept a malformed offset silently: a bad cursor would skip or repeat entries.

export function seqOffset(seq: number): string {
  return `0-${seq}`;
}

const shape = /^(\d+)(?:-(\d+))?$/;

/** The largest sequence number not after `offset` (Infinity for ids past every "0-n"). */
export function seqAfter(offset: string): number {
  const m = shape.exec(offset);
  if (!m) throw new Error(`not a journal offset: ${JSON.stringify(offset)}`);
  if (BigInt(m[1]!) > 0n) return Number.POSITIVE_INFINITY;
  const seq = m[2] === undefined ? 0 : Number(m[2]);
  return Number.isSafeInteger(seq) ? seq : Number.POSITIVE_INFINITY;
}

/** Index of the first element of the ascending `seqs[from..]` that is greater than `seq`. */
export function firstAfter(seqs: readonly number[], from: number, seq: number): number {
  let lo = from;
  let hi = seqs.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (seqs[mid]! <= seq) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
