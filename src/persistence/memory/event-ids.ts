// In-memory EventIds for unit tests: one map per environment, id -> first fingerprint. Same
// guarantees as the Redis and SQL adapters (first claim wins, in item order, never released).
import type { EventIds } from '../ports.js';

export class MemoryEventIds implements EventIds {
  private readonly bound = new Map<string, Map<string, number>>();

  async claim(environmentId: string, items: ReadonlyArray<{ id: string; fp: number }>): Promise<number[]> {
    let env = this.bound.get(environmentId);
    if (env === undefined) this.bound.set(environmentId, (env = new Map()));
    const out: number[] = [];
    for (const { id, fp } of items) {
      const first = env.get(id);
      if (first === undefined) env.set(id, fp);
      out.push(first ?? fp);
    }
    return out;
  }
}
