// MemoryIdempotencyStore: the in-memory twin of PgIdempotencyStore for tests and simulations.
// Same semantics, checked by the same contract suite: a row past its expiry counts as absent,
// an in_progress claim neither made nor touched for more than staleAfterMs is handed to exactly
// one new claimer. Stored headers are copied in and out, never shared with the caller.
// Time comes only from the injected clock; nothing here survives the process.
import type { IdempotencyRecord, IdempotencyStore } from '../ports.js';
import { idempotencyClaimTtlMs, idempotencyPurgeBatchMax } from '../sql/idempotency-store.js';

interface Row extends IdempotencyRecord {
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
  ): Promise<void> {
    const row = this.rows.get(MemoryIdempotencyStore.id(scope, key));
    if (!row) throw new Error(`idempotency complete ${scope}/${key}: no claim`);
    row.state = 'done';
    row.status = status;
    row.body = body;
    row.headers = headers === null ? null : { ...headers };
    row.expiresAtMs = this.clock() + retentionMs;
  }

  async release(scope: string, key: string): Promise<void> {
    const id = MemoryIdempotencyStore.id(scope, key);
    if (this.rows.get(id)?.state === 'in_progress') this.rows.delete(id);
  }

  async forget(scope: string, mentioning: readonly string[]): Promise<number> {
    const prefix = MemoryIdempotencyStore.id(scope, '');
    let n = 0;
    for (const [id, row] of this.rows) {
      const body = row.body;
      if (id.startsWith(prefix) && row.state === 'done' && body !== null && mentioning.some((m) => body.includes(m))) {
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
