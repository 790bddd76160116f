// Identifiers: prefix + time-ordered random part (Crockford base32, ULID layout: 10 chars of
// milliseconds, 16 random). Customer ids also carry their partition (3 chars after the prefix)
// so any node can route a `cust_` id without a lookup. Ids are opaque to clients.
// Domain code never calls these directly: it receives ctx.newId so replays reproduce ids.
import { randomFillSync } from 'node:crypto';

const alphabet = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
const decode = new Int8Array(128).fill(-1);
for (let i = 0; i < alphabet.length; i++) decode[alphabet.charCodeAt(i)] = i;

const pool = new Uint8Array(4096);
let poolAt = pool.length;

function randomChars(n: number): string {
  if (poolAt + n > pool.length) {
    randomFillSync(pool);
    poolAt = 0;
  }
  let s = '';
  for (let i = 0; i < n; i++) s += alphabet[pool[poolAt++]! & 31];
  return s;
}

function timeChars(ms: number): string {
  let s = '';
  for (let i = 9; i >= 0; i--) {
    const d = Math.floor(ms / 32 ** i) % 32;
    s += alphabet[d];
  }
  return s;
}

let lastMs = -1;
let lastTime = '';
let lastRandom = '';

/**
 * Ids minted in the same millisecond by this process increase (the random part of the previous
 * one plus one, as ULID's monotonic mode does), so lists ordered by id keep creation order.
 */
export function newId(prefix: string, nowMs: number = Date.now()): string {
  if (nowMs === lastMs) {
    const next = increment(lastRandom);
    if (next !== null) {
      lastRandom = next;
      return `${prefix}_${lastTime}${next}`;
    }
  }
  lastMs = nowMs;
  lastTime = timeChars(nowMs);
  lastRandom = randomChars(16);
  return `${prefix}_${lastTime}${lastRandom}`;
}

/** Base32 text plus one; null when every digit is already the greatest. */
function increment(chars: string): string | null {
  for (let i = chars.length - 1; i >= 0; i--) {
    const d = decode[chars.charCodeAt(i)]!;
    if (d < 31) return chars.slice(0, i) + alphabet[d + 1] + '0'.repeat(chars.length - i - 1);
  }
  return null;
}

export function newSecret(prefix: string, bytes = 24): string {
  return `${prefix}_${randomChars(Math.ceil((bytes * 8) / 5))}`;
}

export function encodePartition(partition: number): string {
  return alphabet[(partition >> 10) & 31]! + alphabet[(partition >> 5) & 31]! + alphabet[partition & 31]!;
}

export function newCustomerId(partition: number, nowMs: number = Date.now()): string {
  return `cust_${encodePartition(partition)}${timeChars(nowMs)}${randomChars(16)}`;
}

/** The partition a customer id was minted on, or -1 if the id is not a well-formed customer id. */
export function customerIdPartition(id: string): number {
  if (id.length !== 34 || !id.startsWith('cust_')) return -1;
  let p = 0;
  for (let i = 5; i < 8; i++) {
    const c = id.charCodeAt(i);
    const d = c < 128 ? decode[c]! : -1;
    if (d < 0) return -1;
    p = p * 32 + d;
  }
  for (let i = 8; i < 34; i++) {
    const c = id.charCodeAt(i);
    if (c >= 128 || decode[c]! < 0) return -1;
  }
  return p;
}

/** FNV-1a over environment id and routing key, separated by NUL; no string is allocated. */
export function partitionOf(environmentId: string, key: string, partitions: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < environmentId.length; i++) {
    h ^= environmentId.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= 0;
  h = Math.imul(h, 0x01000193);
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0) % partitions;
}

/** A uniformly random integer in [0, 2^53), from the crypto pool. */
export function random53(): number {
  if (poolAt + 7 > pool.length) {
    randomFillSync(pool);
    poolAt = 0;
  }
  let v = pool[poolAt++]! & 0x1f;
  for (let i = 0; i < 6; i++) v = v * 256 + pool[poolAt++]!;
  return v;
}
