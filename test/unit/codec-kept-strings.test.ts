// Recovery keeps decoded identity strings in actors for as long as they live. msgpackr (with
// msgpackr-extract) hands out slices of one string holding a whole run of an entry's strings, so
// decodeEntryToKeep must give those fields their own copies: kept ids cost their own bytes, not
// the entry's. Measured with forced collections, the way a leak would show in production.
import v8 from 'node:v8';
import vm from 'node:vm';
import t from 'tap';
import { decodeEntry, decodeEntryToKeep, decodeSnapshot, encodeEntry, encodeSnapshot, type JournalRecord } from '../../src/actors/codec.js';
import { evolve } from '../../src/domain/customer.js';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

const customerId = (i: number) => `cust_00A${String(i).padStart(26, '0')}`;
const entry = (i: number): Uint8Array =>
  encodeEntry([
    [
      'env_01JTESTENVIRONMENT0000000',
      customerId(i),
      [
        { kind: 'customer.created', id: customerId(i), environmentId: 'env_01JTESTENVIRONMENT0000000', externalId: `player-${i}-abcdefghijkl`, attributes: {}, atMs: 1 },
        {
          kind: 'event.recorded',
          id: 'evt_0000000000000000000000',
          clientEventId: `ev-${i}`,
          name: 'level.completed',
          occurredAtMs: 1,
          receivedAtMs: 2,
          properties: Object.fromEntries(Array.from({ length: 10 }, (_, k) => [`p${k}`, `${'v'.repeat(150)}${i}`])),
          fp: 1,
        },
      ],
    ],
    ['env_01JTESTENVIRONMENT0000000', '', [{ kind: 'key.bound', key: `player-${i}-abcdefghijkl`, customerId: customerId(i) }]],
  ] as JournalRecord[]);

/** Heap bytes per entry still held after keeping the identity strings of `n` decoded entries. */
function keptBytesPerEntry(decode: (payload: Uint8Array) => JournalRecord[], n: number): { bytes: number; kept: string[] } {
  gc();
  const before = process.memoryUsage().heapUsed;
  const kept: string[] = [];
  for (let i = 0; i < n; i++) {
    const [customer, key] = decode(entry(i));
    const created = customer![2][0] as { id: string; externalId: string };
    const bound = key![2][0] as { key: string; customerId: string };
    kept.push(customer![0], customer![1], created.id, created.externalId, bound.key, bound.customerId);
  }
  gc();
  return { bytes: (process.memoryUsage().heapUsed - before) / n, kept };
}

t.test('decodeEntryToKeep: the same values, and kept ids do not hold the entry’s other strings', async (t) => {
  const n = 2000;
  const own = keptBytesPerEntry(decodeEntryToKeep, n);
  const plain = keptBytesPerEntry(decodeEntry, n);
  t.same(own.kept, plain.kept, 'identical values');
  t.ok(own.bytes < 700, `kept strings cost ${own.bytes.toFixed(0)} bytes per entry (plain decode: ${plain.bytes.toFixed(0)})`);
});

t.test('decodeSnapshot: the identity strings an activated actor keeps do not hold the snapshot’s other strings', async (t) => {
  const n = 2000;
  const snapshot = (i: number) =>
    encodeSnapshot(
      evolve(null, {
        kind: 'customer.created',
        id: customerId(i),
        environmentId: 'env_01JTESTENVIRONMENT0000000',
        externalId: `player-${i}-abcdefghijkl`,
        attributes: Object.fromEntries(Array.from({ length: 10 }, (_, k) => [`a${k}`, `${'v'.repeat(150)}${i}`])),
        atMs: 1,
      }),
    );
  gc();
  const before = process.memoryUsage().heapUsed;
  const kept: string[] = [];
  for (let i = 0; i < n; i++) {
    const s = decodeSnapshot(snapshot(i));
    kept.push(s.id, s.environmentId, s.externalId ?? '');
  }
  gc();
  const bytes = (process.memoryUsage().heapUsed - before) / n;
  t.equal(kept[3], customerId(1), 'the same values');
  t.ok(bytes < 700, `kept ids cost ${bytes.toFixed(0)} bytes per snapshot`);
});
