// The permanent deduplication record of one customer: every event id with its fingerprint and
// service id, across the small (scanned) and large (indexed) sizes and a snapshot round trip.
import t from 'tap';
import fc from 'fast-check';
import { eventId, parseEventId, SeenEvents } from '../../src/domain/seen-events.js';

const serviceId = (i: number) => eventId(1_700_000_000_000 + i, 1_000_003 * i + 7);

t.test('ids are found with their fingerprint and service id, before and after the index, and after a round trip', async (t) => {
  const seen = new SeenEvents();
  t.equal(seen.size, 0);
  t.equal(seen.get('e0'), undefined);
  for (let i = 0; i < 40; i++) {
    seen.add(`e${i}`, i * 10 + 1, serviceId(i));
    if (i === 0 || i === 15 || i === 16 || i === 39) {
      // Small sets are scanned, larger ones indexed: every id recorded so far is found either way.
      for (let j = 0; j <= i; j++) t.same(seen.get(`e${j}`), { fp: j * 10 + 1, id: serviceId(j) }, `e${j} with ${i + 1} recorded`);
    }
  }
  t.equal(seen.size, 40);
  seen.add('e3', 999, serviceId(99));
  t.equal(seen.size, 40, 'an id already recorded is not added again');
  t.same(seen.get('e3'), { fp: 31, id: serviceId(3) }, 'and keeps its first record');
  t.equal(seen.get('e40'), undefined);
  const packed = seen.toArray();
  t.equal(packed.length, 160, '4 numbers per event');
  for (const src of [packed, packed.slice(0, 8)]) {
    const back = new SeenEvents(src);
    t.equal(back.size, src.length / 4);
    for (let j = 0; j < back.size; j++) t.same(back.get(`e${j}`), { fp: j * 10 + 1, id: serviceId(j) });
    back.add('new', 5, serviceId(500));
    t.same(back.get('new'), { fp: 5, id: serviceId(500) }, 'a decoded set takes new ids');
  }
  t.equal(seen.get('new'), undefined, 'the source is not affected');
  const empty = new SeenEvents(new Float64Array(0));
  empty.add('a', 1, serviceId(1));
  t.equal(new SeenEvents().size, 0, 'empty sets do not share what one of them added');
  t.equal(empty.size, 1);
});

t.test('service event ids: the base32 layout, and parsing gives back time and random part', async (t) => {
  // The layout every stored id has: 10 digits of milliseconds, 11 of the 53-bit random number.
  const reference = (ms: number, r: number) => {
    const a = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
    let s = 'evt_';
    for (let i = 9; i >= 0; i--) s += a[Math.floor(ms / Math.pow(32, i)) % 32];
    for (let i = 10; i >= 0; i--) s += a[Math.floor(r / Math.pow(32, i)) % 32];
    return s;
  };
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 2 ** 48 }), fc.maxSafeNat(), (ms, r) => {
      const id = eventId(ms, r);
      return id === reference(ms, r) && parseEventId(id)?.timeMs === ms && parseEventId(id)?.rand53 === r;
    }),
  );
  t.equal(eventId(0, 0), 'evt_000000000000000000000');
  t.equal(parseEventId('evt_00000000000000000000I'), null, 'a letter outside the alphabet');
});

t.test('a merge joins another set: its ids are found, ids both know keep this set’s record, sizes cross the index', async (t) => {
  const survivor = new SeenEvents();
  for (let i = 0; i < 10; i++) survivor.add(`s${i}`, i, serviceId(i));
  survivor.add('both', 1, serviceId(100));
  const merged = new SeenEvents();
  for (let i = 0; i < 12; i++) merged.add(`m${i}`, 50 + i, serviceId(200 + i));
  merged.add('both', 2, serviceId(300));
  const records = merged.records();
  t.equal(records.length, 13 * 4);
  survivor.addRecords(records);
  t.equal(survivor.size, 23, '11 + 13 - the id both knew');
  for (let i = 0; i < 12; i++) t.same(survivor.get(`m${i}`), { fp: 50 + i, id: serviceId(200 + i) });
  for (let i = 0; i < 10; i++) t.same(survivor.get(`s${i}`), { fp: i, id: serviceId(i) });
  t.same(survivor.get('both'), { fp: 1, id: serviceId(100) }, 'the survivor keeps its own record');
  survivor.addRecords(records);
  t.equal(survivor.size, 23, 'joining twice adds nothing (a replayed fact)');
  t.same(new SeenEvents(survivor.toArray()).get('m11'), { fp: 61, id: serviceId(211) }, 'through a snapshot round trip');
  records[0] = 0;
  t.same(merged.get('m0'), { fp: 50, id: serviceId(200) }, 'records() is a copy');
  const empty = new SeenEvents();
  empty.addRecords(merged.records());
  t.equal(empty.size, 13, 'an empty set takes them all');
});
