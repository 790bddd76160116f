// A Bloom filter of the routing keys (environment + external id or alias) a partition has ever
// bound. "Absent" is certain, so a brand-new customer is created without a database lookup;
// "maybe" falls back to the lookup. Fixed size per partition (typed array, no per-key objects);
// when more keys than planned arrive the false-positive rate rises, which only costs lookups.
import { hash53 } from '../util/canonical-json.js';

const probes = 7;

export class KeyFilter {
  private readonly bits: Uint32Array;
  private readonly mask: number;

  /** bitsLog2: the filter holds 2^bitsLog2 bits (~bits/9.6 keys at 1% false positives). */
  constructor(bitsLog2: number) {
    this.bits = new Uint32Array(Math.max(1, 2 ** (bitsLog2 - 5)));
    this.mask = 2 ** bitsLog2 - 1;
  }

  add(env: string, key: string): void {
    const [h1, h2] = hashes(env, key);
    for (let i = 0; i < probes; i++) {
      const bit = (h1 + i * h2) & this.mask;
      this.bits[bit >>> 5]! |= 1 << (bit & 31);
    }
  }

  mayContain(env: string, key: string): boolean {
    const [h1, h2] = hashes(env, key);
    for (let i = 0; i < probes; i++) {
      const bit = (h1 + i * h2) & this.mask;
      if ((this.bits[bit >>> 5]! & (1 << (bit & 31))) === 0) return false;
    }
    return true;
  }
}

const pair: [number, number] = [0, 0];
function hashes(env: string, key: string): [number, number] {
  const h = hash53(key, hash53(env) >>> 0);
  pair[0] = h >>> 0;
  pair[1] = (Math.floor(h / 4294967296) | 1) >>> 0;
  return pair;
}
