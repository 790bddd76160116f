// Journal entry formats: format 2 (msgpack records, the current writer) round-trips whatever
// shapes an entry holds, including more distinct shapes than msgpack's record ids (64) and
// properties that look like the facts themselves; every entry decodes on its own, without the
// entries written before it; and format 1 entries (plain maps) written by earlier versions still
// decode to the same records.
import { Packr, unpack } from 'msgpackr';
import t from 'tap';
import { decodeEntry, encodeEntry, type JournalRecord } from '../../src/actors/codec.js';

const env = 'env_01JTESTENVIRONMENT0000000';
const cust = (i: number) => `cust_00A${String(i).padStart(26, '0')}`;

function newCustomerRecord(i: number, properties: Record<string, unknown>): JournalRecord {
  return [
    env,
    cust(i),
    [
      { kind: 'customer.created', id: cust(i), environmentId: env, externalId: `player-${i}`, attributes: {}, atMs: 1_795_717_814_426 + i },
      {
        kind: 'event.recorded',
        id: `evt_01M8CHYP4T6QWDG2XPM${String(i).padStart(4, '0')}`,
        clientEventId: `b-${i}`,
        name: 'level.completed',
        occurredAtMs: 1_795_687_200_000,
        receivedAtMs: 1_795_717_814_426 + i,
        properties,
        fp: 6_967_092_264_850_620 - i,
        trust: 'merchant_asserted',
        source: { type: 'secret_key', id: 'key_01M8CHYP0TCBKXET2AWD9NX640' },
      },
    ],
  ] as JournalRecord;
}

t.test('format 2 round-trips many shapes; each entry decodes alone; it is smaller than plain maps', async (t) => {
  const records: JournalRecord[] = [];
  for (let i = 0; i < 200; i++) {
    // 200 distinct property shapes (msgpack records have 64 ids), nested values, a property
    // object shaped like a fact, undefined and null values, and the routing-table records.
    const properties: Record<string, unknown> = { [`k${i}`]: i, nested: { level: i % 7, tags: ['a', `t${i}`] } };
    if (i % 3 === 0) properties.like = { kind: 'customer.created', id: 'x', attributes: {} };
    if (i % 5 === 0) properties.none = null;
    records.push(newCustomerRecord(i, properties));
    records.push([env, '', [{ kind: 'key.bound', key: `player-${i}`, customerId: cust(i) }]]);
  }
  const first = encodeEntry(records.slice(0, 10));
  const second = encodeEntry(records);
  t.same(decodeEntry(second), JSON.parse(JSON.stringify(records)), 'every value back, in order');
  t.same(decodeEntry(first), JSON.parse(JSON.stringify(records.slice(0, 10))));
  // A reader that never saw the first entry (recovery reads from a checkpoint) decodes the second.
  t.same(unpack(second), [2, JSON.parse(JSON.stringify(records))], 'a fresh unpacker decodes it');

  const same = Array.from({ length: 24 }, (_, i) => newCustomerRecord(i, { level: 3 }));
  const plain = new Packr({ useRecords: false, mapsAsObjects: true, variableMapSize: true }).pack([1, same]);
  const packed = encodeEntry(same);
  t.ok(packed.length < plain.length * 0.8, `24 new customers' events: ${packed.length} bytes, plain maps ${plain.length}`);
});

t.test('format 1 entries (plain maps, before records) still decode', async (t) => {
  const records = [newCustomerRecord(1, { level: 3 }), newCustomerRecord(2, {})];
  const v1 = new Packr({ useRecords: false, mapsAsObjects: true, variableMapSize: true }).pack([1, records]);
  t.same(decodeEntry(v1), records);
  t.throws(() => decodeEntry(new Packr({ useRecords: false }).pack([3, records])), /format 3 is not supported/);
});
