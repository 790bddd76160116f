// Given/when/then tests of the inventory mechanic: grants add up per item, a full inventory or a
// quantity past the safe-integer range refuses the whole grant, and quantities never go to zero
// or below (property).
import fc from 'fast-check';
import t from 'tap';
import { emptyInventory, evolveInventory, grant, inventoryFromPairs, inventoryLimits, inventoryList, inventoryPairs, type InventoryState } from '../../src/domain/inventory.js';

const ctx = { nowMs: 1_000 };

function given(grants: Array<[string, number]>): InventoryState {
  let inv = emptyInventory();
  for (const [item, quantity] of grants) {
    const d = grant(inv, item, quantity, 'rule_1', ctx);
    if (!d.ok) throw new Error(d.reason);
    inv = evolveInventory(inv, d.fact);
  }
  return inv;
}

t.test('grants of one item add up; the fact records the source and time', async (t) => {
  const inv = given([
    ['sword', 1],
    ['gem', 5],
    ['gem', 3],
  ]);
  t.same(inventoryList(inv), [
    { item: 'gem', quantity: 8 },
    { item: 'sword', quantity: 1 },
  ]);
  const d = grant(inv, 'gem', 2, 'rule_9', ctx);
  t.same(d, { ok: true, fact: { kind: 'item.granted', item: 'gem', quantity: 2, sourceId: 'rule_9', atMs: 1_000 } });
});

t.test('a full inventory refuses new items but still adds to held ones', async (t) => {
  const inv = given(Array.from({ length: inventoryLimits.itemsMax }, (_, i) => [`item_${i}`, 1] as [string, number]));
  t.same(grant(inv, 'one_more', 1, 'r', ctx), { ok: false, reason: 'inventory_full' });
  t.equal(grant(inv, 'item_0', 1, 'r', ctx).ok, true);
});

t.test('a quantity past the safe-integer range is refused whole', async (t) => {
  const inv = given([['coin_sack', Number.MAX_SAFE_INTEGER - 1]]);
  t.same(grant(inv, 'coin_sack', 2, 'r', ctx), { ok: false, reason: 'quantity_overflow' });
  t.equal(inv.coin_sack, Number.MAX_SAFE_INTEGER - 1, 'nothing applied');
});

t.test('item keys are data, never object machinery', async (t) => {
  const inv = given([
    ['__proto__', 2],
    ['constructor', 1],
  ]);
  t.same(inventoryList(inv), [
    { item: '__proto__', quantity: 2 },
    { item: 'constructor', quantity: 1 },
  ]);
  const copy = inventoryFromPairs(inventoryPairs(inv));
  t.same(inventoryList(copy), inventoryList(inv), 'the snapshot form round-trips');
  t.equal(Object.getPrototypeOf(copy), null);
});

t.test('property: every held quantity is the sum of its grants and positive', async (t) => {
  fc.assert(
    fc.property(fc.array(fc.tuple(fc.constantFrom('a', 'b', 'c', 'd'), fc.integer({ min: 1, max: 1_000_000 })), { maxLength: 60 }), (grants) => {
      const inv = given(grants);
      const sums: Record<string, number> = {};
      for (const [k, q] of grants) sums[k] = (sums[k] ?? 0) + q;
      for (const { item, quantity } of inventoryList(inv)) {
        if (quantity <= 0 || quantity !== sums[item]) return false;
      }
      return inventoryList(inv).length === Object.keys(sums).length;
    }),
  );
  t.pass('held');
});

t.test('a customer snapshot carries the inventory (pairs), and an older snapshot without it decodes empty', async (t) => {
  const { decide, evolve } = await import('../../src/domain/customer.js');
  const { decodeSnapshot, encodeSnapshot } = await import('../../src/actors/codec.js');
  const { Packr } = await import('msgpackr');
  const ids = { nowMs: 5, environmentId: 'env_1', newId: (p: string) => `${p}_1`, newCustomerId: () => 'cust_1', newEventId: () => 'evt_1' };
  const created = decide(null, { kind: 'customer.create', externalId: 'p1', attributes: {} }, ids);
  if (!created.ok) throw new Error(created.code);
  let state = evolve(null, created.facts[0]!);
  state = evolve(state, { kind: 'item.granted', item: '__proto__', quantity: 3, sourceId: 'rule_1', atMs: 5 });
  state = evolve(state, { kind: 'item.granted', item: 'sword', quantity: 1, sourceId: 'rule_1', atMs: 5 });
  const copy = decodeSnapshot(encodeSnapshot(state));
  t.same(inventoryList(copy.inventory), [
    { item: '__proto__', quantity: 3 },
    { item: 'sword', quantity: 1 },
  ]);
  // A format-1 snapshot written before inventories existed has 19 slots or fewer.
  const packr = new Packr({ useRecords: false, mapsAsObjects: true, variableMapSize: true });
  const old = (packr.unpack(encodeSnapshot(state)) as unknown[]).slice(0, 19);
  t.same(inventoryList(decodeSnapshot(packr.pack(old)).inventory), []);
});
