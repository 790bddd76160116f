// New customers share one empty value per section they have not used (memory for a million
// customers); the first fact that changes one gives that customer its own copy. These tests hold
// the copy-on-first-write invariant: a customer's facts never reach the shared values (they are
// frozen: a missed copy throws), so they never reach another customer, and a snapshot round trip
// keeps the sharing.
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

const credit: Fact = {
  kind: 'ledger.entry_recorded',
  entry: {
    id: 'le_1',
    currency: 'coins',
    type: 'award',
    status: 'posted',
    amount: 50,
    remaining: 50,
    expiresAtMs: null,
    confirmAfterMs: null,
    reason: null,
    sourceType: null,
    sourceId: null,
    reversesEntryId: null,
    createdAtMs: 2,
    allocations: [],
    debtPaid: 0,
    debtIncurred: 0,
  },
};

/** One fact per section that starts shared, each the first write to it. */
const sectionFacts: Fact[] = [
  credit,
  { kind: 'rule.fired', ruleId: 'rule_1', versionNumber: 1, limitKeys: ['rule_1|l1|customer'], atMs: 2 },
  { kind: 'tier.assigned', programId: 'tp_1', programKey: 'status', level: 'bronze', levelTitle: 'Bronze', value: 0, atMs: 2, nextDowngradeCheckMs: null },
  { kind: 'alias.added', alias: 'a-alias', aliasKind: 'custom', mergedFrom: 'cust_m', atMs: 2 },
  { kind: 'customer.updated', attributes: { plan: 'pro' }, version: 2, externalId: 'a', createdAtMs: 1, atMs: 2 },
  { kind: 'reward.reservation_voided', issuanceId: 'ri_1', atMs: 2 },
  { kind: 'challenge.enrolled', challengeId: 'ch_1', atMs: 2 },
  { kind: 'match_rate.merged', from: { mp_1: { entries: [] } } },
  ...facts,
];

const sections = [
  'attributes',
  'aliases',
  'mergedFrom',
  'ledger',
  'ruleLimits',
  'tiers',
  'rewards',
  'challenges',
  'counters',
  'inventory',
  'matchRates',
  'segmentIds',
] as const;

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

t.test('every section of a new customer is the frozen shared empty; the first write copies it', async (t) => {
  const a = created('a');
  const b = created('b');
  for (const k of sections) {
    t.equal(a[k], sharedEmpty[k], `${k} starts shared`);
    t.ok(Object.isFrozen(sharedEmpty[k]), `${k} is frozen`);
  }
  t.ok(Object.isFrozen(sharedEmpty.ledger.books) && Object.isFrozen(sharedEmpty.rewards.issuances), 'deeply');
  t.throws(() => (sharedEmpty.aliases as unknown[]).push(1), 'a missed copy throws rather than writing for everyone');
  t.throws(() => {
    sharedEmpty.ruleLimits.x = 1;
  });
  for (const f of sectionFacts) evolve(a, f);
  for (const k of sections) {
    t.not(a[k], sharedEmpty[k], `${k} is a's own after its first write`);
    t.equal(b[k], sharedEmpty[k], `b's ${k} is still shared`);
  }
  t.same(a.ledger.books.map((bk) => bk.currency), ['coins']);
  t.same(a.ruleLimits, { 'rule_1|l1|customer': 1 });
  t.same(Object.keys(a.tiers), ['tp_1']);
  t.same(a.aliases.map((x) => x.alias), ['a-alias']);
  t.same(a.mergedFrom, ['cust_m']);
  t.same(a.attributes, { plan: 'pro' });
  t.same(Object.keys(a.challenges.enrollments), ['ch_1']);
  t.same(a.rewards.voided, ['ri_1']);
  t.same(Object.keys(a.matchRates), ['mp_1']);
  // The shared values are still empty.
  t.same(sharedEmpty.ledger, { books: [] });
  t.same([sharedEmpty.attributes, sharedEmpty.ruleLimits, sharedEmpty.tiers], [{}, {}, {}]);
  t.same([sharedEmpty.aliases, sharedEmpty.mergedFrom], [[], []]);
  // Deleting erases attributes and aliases back to the shared empties.
  evolve(a, { kind: 'customer.deleted', version: 3, atMs: 3 });
  t.equal(a.attributes, sharedEmpty.attributes);
  t.equal(a.aliases, sharedEmpty.aliases);
});

t.test('a snapshot decodes empty sections to the shared values and used ones to own copies', async (t) => {
  const fresh = decodeSnapshot(encodeSnapshot(created('c')));
  for (const k of sections) t.equal(fresh[k], sharedEmpty[k], `${k} decodes shared`);
  const a = created('a');
  for (const f of sectionFacts) evolve(a, f);
  const a2 = decodeSnapshot(encodeSnapshot(a));
  for (const k of ['attributes', 'aliases', 'mergedFrom', 'ledger', 'ruleLimits', 'tiers'] as const) {
    t.not(a2[k], sharedEmpty[k], `${k} decodes as its own value`);
    t.same(a2[k], a[k], `${k} survives the round trip`);
  }
  // Writing to the decoded customer works (its values are not frozen) and reaches nobody else.
  evolve(a2, credit);
  evolve(a2, { kind: 'rule.fired', ruleId: 'rule_1', versionNumber: 1, limitKeys: ['rule_1|l1|customer'], atMs: 3 });
  t.same(a2.ruleLimits, { 'rule_1|l1|customer': 2 });
  t.same(sharedEmpty.ruleLimits, {});
  const c = decodeSnapshot(encodeSnapshot(created('c')));
  evolve(c, credit);
  evolve(c, { kind: 'alias.added', alias: 'c2', aliasKind: 'custom', mergedFrom: null, atMs: 2 });
  t.same(c.aliases.map((x) => x.alias), ['c2']);
  t.same(sharedEmpty.ledger.books, []);
});
