// A customer's inventory: quantities of items granted by rules (`item.grant`). Invariants: every
// quantity is a positive safe integer; a customer holds at most `inventoryLimits.itemsMax`
// distinct items; a grant that would break either is refused whole (nothing half-applied).
// Pure: decide returns facts or a refusal reason, evolve applies one fact; never throws.

export const inventoryLimits = {
  /** Distinct item keys one customer may hold. */
  itemsMax: 500,
} as const;

/**
 * Item key -> quantity held. Keys with quantity 0 are never stored. A null-prototype object, so
 * any key a rule may name (even `__proto__`) is plain data; snapshots carry it as pairs.
 */
export type InventoryState = Record<string, number>;

export type InventoryFact = {
  kind: 'item.granted';
  item: string;
  quantity: number;
  /** What granted it (rule id), for the export and audits. */
  sourceId: string;
  atMs: number;
};

export type GrantRefusal = 'inventory_full' | 'quantity_overflow';

export function emptyInventory(): InventoryState {
  return Object.create(null) as InventoryState;
}

/** Snapshot form: [item, quantity] pairs, sorted by item. */
export function inventoryPairs(inventory: InventoryState): Array<[string, number]> {
  return Object.keys(inventory)
    .sort()
    .map((item) => [item, inventory[item]!]);
}

export function inventoryFromPairs(pairs: ReadonlyArray<readonly [string, number]>): InventoryState {
  const inv = emptyInventory();
  for (const [item, quantity] of pairs) inv[item] = quantity;
  return inv;
}

/** The fact of granting `quantity` of `item`, or why it cannot be granted. */
export function grant(
  inventory: InventoryState,
  item: string,
  quantity: number,
  sourceId: string,
  ctx: { nowMs: number },
): { ok: true; fact: InventoryFact } | { ok: false; reason: GrantRefusal } {
  const held = Object.hasOwn(inventory, item) ? inventory[item]! : 0;
  if (held === 0 && Object.keys(inventory).length >= inventoryLimits.itemsMax) return { ok: false, reason: 'inventory_full' };
  if (!Number.isSafeInteger(held + quantity)) return { ok: false, reason: 'quantity_overflow' };
  return { ok: true, fact: { kind: 'item.granted', item, quantity, sourceId, atMs: ctx.nowMs } };
}

/** Applies one fact (mutates and returns the state, like the customer's evolve). */
export function evolveInventory(inventory: InventoryState, fact: InventoryFact): InventoryState {
  inventory[fact.item] = (Object.hasOwn(inventory, fact.item) ? inventory[fact.item]! : 0) + fact.quantity;
  return inventory;
}

/** Sorted by item key, for views and exports. */
export function inventoryList(inventory: InventoryState): Array<{ item: string; quantity: number }> {
  return inventoryPairs(inventory).map(([item, quantity]) => ({ item, quantity }));
}
