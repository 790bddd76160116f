// In-memory Locks for unit tests and embedded single-process mode (one node: the lock only has to
// exclude this process's own callers). Same guarantees as the Redis adapter: one live token per
// name, a lock is live while clock() < expiry, release and extend only by the token that holds it.
// Time comes only from the injected clock.
import { randomUUID } from 'node:crypto';
import type { Locks } from '../ports.js';

interface Held {
  readonly token: string;
  expiresAtMs: number;
}

export class MemoryLocks implements Locks {
  private readonly held = new Map<string, Held>();

  constructor(private readonly clock: () => number = Date.now) {}

  private live(name: string): Held | null {
    const h = this.held.get(name);
    if (h === undefined) return null;
    if (this.clock() >= h.expiresAtMs) {
      this.held.delete(name);
      return null;
    }
    return h;
  }

  async acquire(name: string, ttlMs: number): Promise<string | null> {
    if (this.live(name) !== null) return null;
    const token = randomUUID();
    this.held.set(name, { token, expiresAtMs: this.clock() + ttlMs });
    return token;
  }

  async release(name: string, token: string): Promise<boolean> {
    if (this.live(name)?.token !== token) return false;
    this.held.delete(name);
    return true;
  }

  async extend(name: string, token: string, ttlMs: number): Promise<boolean> {
    const h = this.live(name);
    if (h?.token !== token) return false;
    h.expiresAtMs = this.clock() + ttlMs;
    return true;
  }
}
