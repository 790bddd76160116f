// New customers share one empty value per mechanic they have not used (memory for a million
// customers); the first fact that changes one gives that customer its own copy. These tests hold
// the copy-on-first-write invariant: a customer's facts never reach the shared values, so they never
// reach another customer, and a snapshot round trip keeps the sharing.
import t from 'tap';
import { decodeSnapshot, encodeSnapshot } from '../../src/actors/codec.js';
import { type CustomerState, decide, evolve, type Fact, sharedEmpty } from '../../src/domain/customer.js';
import { inventoryList } from '../../src/domain/inventory.js';

function created(externalId: string): CustomerState {
  const ctx = { nowMs: 1, environmentId: 'env_1', newId: (p: string) => `${p}_1`, newCustomerId: () => `cust_${externalId}`, newEventId: () => 'evt_1' };
  const d = decide(null, { kind: 'customer.create', externalId, attributes: {} }, ctx);
  if (!d.ok) throw new Error(d.code);
  return evolve(null, d.facts[0]!);
}

const facts: Fact[] = [
  { kind: 'item.granted', item: 'gem', quantity: 2, sourceId: 'rule_1', atMs: 2 },
  { kind: 'segment.member_added', segmentId: 'seg_1', atMs: 2 },
  { kind: 'counter.backfilled', id: 'ctr_1', base: { n: 3 } as never, atMs: 2 },
];

t.test('a customer that uses a mechanic gets its own value; the shared empties and other customers stay empty', async (t) => {
  const a = created('a');
  const b = created('b');
  t.equal(a.inventory, sharedEmpty.inventory, 'new customers share the empty inventory');
  t.equal(a.segmentIds, b.segmentIds);
  for (const f of facts) evolve(a, f);
  t.not(a.inventory, sharedEmpty.inventory, 'a owns its inventory after its first grant');
  t.same(inventoryList(a.inventory), [{ item: 'gem', quantity: 2 }]);
  t.same(a.segmentIds, ['seg_1']);
  t.ok(Object.keys(a.counters).length === 1);
  t.same(inventoryList(b.inventory), [], 'b is untouched');
  t.same(b.segmentIds, []);
  t.same(b.counters, {});
  t.same(inventoryList(sharedEmpty.inventory), []);
  t.same(sharedEmpty.segmentIds, []);
  t.same(sharedEmpty.counters, {});
  t.same(sharedEmpty.rewards, { issuances: [], voided: [] });
  t.same(sharedEmpty.challenges, { enrollments: {}, progress: {}, completions: {} });
  t.same(sharedEmpty.matchRates, {});
});

t.test('snapshots write unused mechanics as nil and decode them to the shared empties', async (t) => {
  const b = decodeSnapshot(encodeSnapshot(created('b')));
  t.equal(b.inventory, sharedEmpty.inventory);
  t.equal(b.rewards, sharedEmpty.rewards);
  t.equal(b.challenges, sharedEmpty.challenges);
  t.equal(b.counters, sharedEmpty.counters);
  t.equal(b.matchRates, sharedEmpty.matchRates);
  t.equal(b.segmentIds, sharedEmpty.segmentIds);
  const a = created('a');
  for (const f of facts) evolve(a, f);
  const a2 = decodeSnapshot(encodeSnapshot(a));
  t.same(inventoryList(a2.inventory), [{ item: 'gem', quantity: 2 }]);
  t.same(a2.segmentIds, ['seg_1']);
  t.same(a2.counters, a.counters);
  // The decoded customer evolves on its own copy too.
  evolve(a2, { kind: 'item.granted', item: 'gem', quantity: 1, sourceId: 'rule_1', atMs: 3 });
  t.same(inventoryList(sharedEmpty.inventory), []);
});
