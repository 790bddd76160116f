// RFC 3339 UTC spelling of an instant, as Date.prototype.toISOString writes it.
//
// toISOString costs ~0.45 µs a call on Node 20, and answers and statements spell the same instant
// many times in a row (a match report's record and players share their created and updated times;
// a batch's rows share a cycle's time), so the last instant's spelling is kept.
let lastMs = Number.NaN;
let lastIso = '';

/** new Date(ms).toISOString() (throws the same RangeError for an invalid instant). */
export function isoTime(ms: number): string {
  if (ms !== lastMs) {
    lastIso = new Date(ms).toISOString();
    lastMs = ms;
  }
  return lastIso;
}
