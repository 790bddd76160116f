// In-memory SharedLimits for unit tests and the simulation: per environment, the count per
// (rule, limit, scope key) and the slots each client event id holds. Same guarantees as the SQL
// adapter (one call is atomic: nothing awaits inside it).
import type { SharedLimitItem, SharedLimits, SharedLimitSlot } from '../ports.js';

type Key = Omit<SharedLimitItem, 'max'>;

const countKey = (k: Key) => `${k.ruleId}\u0000${k.limitId}\u0000${k.scopeKey}`;

export class MemorySharedLimits implements SharedLimits {
  private readonly taken = new Map<string, Map<string, number>>();
  private readonly slots = new Map<string, Set<string>>();

  async reserve(environmentId: string, clientEventId: string, items: ReadonlyArray<SharedLimitItem>): Promise<SharedLimitSlot[]> {
    const counts = this.countsOf(environmentId);
    const slots = this.slotsOf(environmentId);
    const answered = new Map<string, SharedLimitSlot>();
    return items.map((it) => {
      const k = countKey(it);
      const again = answered.get(k);
      if (again !== undefined) return { ...again };
      const slot = `${clientEventId}\u0000${k}`;
      const n = counts.get(k) ?? 0;
      let a: SharedLimitSlot;
      if (slots.has(slot)) a = { granted: true, created: false, taken: n };
      else if (n < it.max) {
        counts.set(k, n + 1);
        slots.add(slot);
        a = { granted: true, created: true, taken: n + 1 };
      } else a = { granted: false, created: false, taken: Math.max(n, it.max) };
      answered.set(k, a);
      return { ...a };
    });
  }

  async release(environmentId: string, clientEventId: string, items: ReadonlyArray<Key>): Promise<void> {
    const counts = this.countsOf(environmentId);
    const slots = this.slotsOf(environmentId);
    for (const it of items) {
      const k = countKey(it);
      if (!slots.delete(`${clientEventId}\u0000${k}`)) continue;
      const n = counts.get(k) ?? 0;
      if (n > 0) counts.set(k, n - 1);
    }
  }

  async counts(environmentId: string, items: ReadonlyArray<Key>): Promise<number[]> {
    const counts = this.countsOf(environmentId);
    return items.map((it) => counts.get(countKey(it)) ?? 0);
  }

  private countsOf(environmentId: string): Map<string, number> {
    let m = this.taken.get(environmentId);
    if (m === undefined) this.taken.set(environmentId, (m = new Map()));
    return m;
  }

  private slotsOf(environmentId: string): Set<string> {
    let s = this.slots.get(environmentId);
    if (s === undefined) this.slots.set(environmentId, (s = new Set()));
    return s;
  }
}
