// Environment-wide event id claims for the events handler: every claim made while the event loop
// handles one round of requests goes to storage in ONE call per environment (setImmediate), so a
// 100-event batch, or many single events arriving together, cost one round trip. A claim answers
// the fingerprint the id is bound to: the caller's own, or the first content ever sent with it; or,
// for the caller's own content recorded for a customer since erased, that event (ErasedEvent).
import type { ErasedEvent, EventIds } from '../persistence/ports.js';

interface Queued {
  items: Array<{ id: string; fp: number }>;
  waiters: Array<{ resolve: (bound: number | ErasedEvent) => void; reject: (err: unknown) => void }>;
}

export class EventIdClaims {
  private queued = new Map<string, Queued>();
  private scheduled = false;

  constructor(private readonly store: EventIds) {}

  claim(environmentId: string, id: string, fp: number): Promise<number | ErasedEvent> {
    let q = this.queued.get(environmentId);
    if (q === undefined) this.queued.set(environmentId, (q = { items: [], waiters: [] }));
    q.items.push({ id, fp });
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.flush());
    }
    const waiters = q.waiters;
    return new Promise((resolve, reject) => waiters.push({ resolve, reject }));
  }

  private flush(): void {
    const queued = this.queued;
    this.queued = new Map();
    this.scheduled = false;
    for (const [env, q] of queued) {
      this.store.claim(env, q.items).then(
        (bound) => {
          for (let i = 0; i < q.waiters.length; i++) q.waiters[i]!.resolve(bound[i]!);
        },
        (err: unknown) => {
          for (const w of q.waiters) w.reject(err);
        },
      );
    }
  }
}
