// Canonical JSON (object keys sorted, no whitespace) and a 53-bit content hash over it.
// Used for "same content" checks (event dedup, idempotency fingerprints) so that key order in a
// client's JSON never turns a retry into a conflict. Pure; no I/O.
//
// On the hot path (every event's fingerprint, every match report's): primitives are written
// without JSON.stringify where the spelling is the same (numbers, booleans), and a key that needs
// no escaping is quoted by hand. The output is exactly JSON.stringify's spelling of the sorted
// value (test/unit/canonical-json.test.ts checks it against that definition on arbitrary values):
// fingerprints already stored stay valid.

/** A key JSON.stringify writes as-is between quotes: no quote, backslash, control or surrogate. */
function plainKey(k: string): boolean {
  for (let i = 0; i < k.length; i++) {
    const c = k.charCodeAt(i);
    if (c < 0x20 || c === 0x22 || c === 0x5c || (c >= 0xd800 && c <= 0xdfff)) return false;
  }
  return true;
}

export function canonicalJson(value: unknown): string {
  switch (typeof value) {
    case 'string':
      return JSON.stringify(value);
    case 'number':
      return Number.isFinite(value) ? String(value) : 'null';
    case 'boolean':
      return value ? 'true' : 'false';
    case 'object':
      break;
    default:
      return JSON.stringify(value) ?? 'null';
  }
  if (value === null) return 'null';
  if (Array.isArray(value)) {
    let s = '[';
    for (let i = 0; i < value.length; i++) s += (i ? ',' : '') + canonicalJson(value[i]);
    return s + ']';
  }
  const keys = Object.keys(value);
  if (keys.length > 1) keys.sort();
  let s = '{';
  let first = true;
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i]!;
    const v = (value as Record<string, unknown>)[k];
    if (v === undefined) continue;
    s += (first ? '' : ',') + (plainKey(k) ? `"${k}"` : JSON.stringify(k)) + ':' + canonicalJson(v);
    first = false;
  }
  return s + '}';
}

/** cyrb53: fast, well-distributed 53-bit string hash (not cryptographic). */
export function hash53(str: string, seed = 0): number {
  let h1 = 0xdeadbeef ^ seed;
  let h2 = 0x41c6ce57 ^ seed;
  for (let i = 0; i < str.length; i++) {
    const ch = str.charCodeAt(i);
    h1 = Math.imul(h1 ^ ch, 2654435761);
    h2 = Math.imul(h2 ^ ch, 1597334677);
  }
  return finish53(h1, h2);
}

/** hash53(str, seedA) and hash53(str, seedB) in one pass over the string (long texts). */
export function hash53Pair(str: string, seedA: number, seedB: number): [number, number] {
  let a1 = 0xdeadbeef ^ seedA;
  let a2 = 0x41c6ce57 ^ seedA;
  let b1 = 0xdeadbeef ^ seedB;
  let b2 = 0x41c6ce57 ^ seedB;
  for (let i = 0; i < str.length; i++) {
    const ch = str.charCodeAt(i);
    a1 = Math.imul(a1 ^ ch, 2654435761);
    a2 = Math.imul(a2 ^ ch, 1597334677);
    b1 = Math.imul(b1 ^ ch, 2654435761);
    b2 = Math.imul(b2 ^ ch, 1597334677);
  }
  return [finish53(a1, a2), finish53(b1, b2)];
}

function finish53(h1: number, h2: number): number {
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507);
  h1 ^= Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507);
  h2 ^= Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return 4294967296 * (2097151 & h2) + (h1 >>> 0);
}
