// In-memory EventIds for unit tests: one map per environment, id -> first fingerprint, and one of
// erased events, "hash53(id):fp" -> service id. Same guarantees as the Redis and SQL adapters
// (first claim wins, in item order, never released; erased only for ids bound before the call).
import { hash53 } from '../../util/canonical-json.js';
import type { ErasedEvent, ErasedEventRecord, EventIds } from '../ports.js';

export class MemoryEventIds implements EventIds {
  private readonly bound = new Map<string, Map<string, number>>();
  private readonly erased = new Map<string, Map<string, string>>();

  async claim(environmentId: string, items: ReadonlyArray<{ id: string; fp: number }>): Promise<Array<number | ErasedEvent>> {
    let env = this.bound.get(environmentId);
    if (env === undefined) this.bound.set(environmentId, (env = new Map()));
    const erased = this.erased.get(environmentId);
    const fresh = new Set<string>();
    const out: Array<number | ErasedEvent> = [];
    for (const { id, fp } of items) {
      const first = env.get(id);
      if (first === undefined) {
        env.set(id, fp);
        fresh.add(id);
      }
      const erasedEventId = first === fp && !fresh.has(id) ? erased?.get(`${hash53(id)}:${fp}`) : undefined;
      out.push(erasedEventId !== undefined ? { erasedEventId } : (first ?? fp));
    }
    return out;
  }

  async erase(environmentId: string, records: ReadonlyArray<ErasedEventRecord>): Promise<void> {
    let env = this.erased.get(environmentId);
    if (env === undefined) this.erased.set(environmentId, (env = new Map()));
    for (const { idHash, fp, eventId } of records) {
      const key = `${idHash}:${fp}`;
      if (!env.has(key)) env.set(key, eventId);
    }
  }
}
