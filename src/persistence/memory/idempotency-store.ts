// MemoryIdempotencyStore: the in-memory twin of PgIdempotencyStore for tests and simulations.
// Same semantics, checked by the same contract suite: a row past its expiry counts as absent,
// an in_progress claim neither made nor touched for more than staleAfterMs is handed to exactly
// one new claimer. Stored headers are copied in and out, never shared with the caller.
// Time comes only from the injected clock; nothing here survives the process.
import type { IdempotencyRecord, IdempotencyStore } from '../ports.js';
import { idempotencyClaimTtlMs, idempotencyPurgeBatchMax } from '../sql/idempotency-store.js';

interface Row extends IdempotencyRecord {
  scope: string;
  /** The customers a done answer is about (complete's customerIds). */
  customerIds: readonly string[];
  /** Claimed or last touched: the claim's last sign of life. */
  touchedAtMs: number;
  expiresAtMs: number;
}

export class MemoryIdempotencyStore implements IdempotencyStore {
  private readonly rows = new Map<string, Row>();

  constructor(private readonly clock: () => number = Date.now) {}

  private static id(scope: string, key: string): string {
    return `${scope.length}:${scope}${key}`;
  }

  async claim(scope: string, key: string, fingerprint: string, staleAfterMs: number): Promise<IdempotencyRecord | null> {
    const nowMs = this.clock();
    const id = MemoryIdempotencyStore.id(scope, key);
    const row = this.rows.get(id);
    const free =
      !row || row.expiresAtMs < nowMs || (row.state === 'in_progress' && row.touchedAtMs < nowMs - staleAfterMs);
    if (free) {
      this.rows.set(id, {
        scope,
        customerIds: [],
        fingerprint,
        state: 'in_progress',
        status: null,
        body: null,
        headers: null,
        touchedAtMs: nowMs,
        expiresAtMs: nowMs + idempotencyClaimTtlMs,
      });
      return null;
    }
    const headers = row.headers === null ? null : { ...row.headers };
    return { fingerprint: row.fingerprint, state: row.state, status: row.status, body: row.body, headers };
  }

  async touch(scope: string, key: string): Promise<boolean> {
    const nowMs = this.clock();
    const row = this.rows.get(MemoryIdempotencyStore.id(scope, key));
    if (row?.state !== 'in_progress' || row.expiresAtMs < nowMs) return false;
    row.touchedAtMs = nowMs;
    return true;
  }

  async complete(
    scope: string,
    key: string,
    status: number,
    body: string,
    headers: Record<string, string> | null,
    retentionMs: number,
    customerIds: readonly string[] = [],
  ): Promise<void> {
    const row = this.rows.get(MemoryIdempotencyStore.id(scope, key));
    if (!row) throw new Error(`idempotency complete ${scope}/${key}: no claim`);
    row.state = 'done';
    row.customerIds = [...customerIds];
    row.status = status;
    row.body = body;
    row.headers = headers === null ? null : { ...headers };
    row.expiresAtMs = this.clock() + retentionMs;
  }

  async release(scope: string, key: string): Promise<void> {
    const id = MemoryIdempotencyStore.id(scope, key);
    if (this.rows.get(id)?.state === 'in_progress') this.rows.delete(id);
  }

  async forget(environmentId: string, customerIds: readonly string[]): Promise<number> {
    const people = `${environmentId}/`;
    let n = 0;
    for (const [id, row] of this.rows) {
      if (row.state !== 'done' || (row.scope !== environmentId && !row.scope.startsWith(people))) continue;
      if (row.customerIds.some((c) => customerIds.includes(c))) {
        this.rows.delete(id);
        n++;
      }
    }
    return n;
  }

  /** Deletes up to idempotencyPurgeBatchMax expired rows; returns how many it deleted. */
  async purgeExpired(): Promise<number> {
    const nowMs = this.clock();
    let n = 0;
    for (const [id, row] of this.rows) {
      if (n >= idempotencyPurgeBatchMax) break;
      if (row.expiresAtMs < nowMs) {
        this.rows.delete(id);
        n++;
      }
    }
    return n;
  }
}
