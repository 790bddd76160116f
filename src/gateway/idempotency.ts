// Idempotency-Key handling for creating POSTs (spec part 1, rules 1-4): key checks, the request
// fingerprint (sha256 of method, path and canonical JSON body, so key order and whitespace do not
// make a retry look different), the claim outcome as an ApiError or a stored replay, and which
// results are stored. Results are stored only after the handler ran; a claim is released when
// the request failed without a storable answer, so a retry can run again. Never stores a 5xx.
import { createHash } from 'node:crypto';
import { ApiError } from '../errors/api-error.js';
import { limits } from '../limits.js';
import type { IdempotencyRecord, IdempotencyStore } from '../persistence/ports.js';
import type { Principal } from '../tenancy/types.js';

/** An in_progress claim older than this belongs to a request that died; a retry takes it over. */
export const idempotencyStaleAfterMs = 60_000;

/** The Idempotency-Key header value, or idempotency_key_required when absent or out of 1..255. */
export function idempotencyKeyOf(headers: Record<string, string>): string {
  const key = headers['idempotency-key'];
  if (key === undefined || key.length === 0 || key.length > limits.idempotencyKeyCharsMax) {
    throw new ApiError('idempotency_key_required', { param: 'Idempotency-Key' });
  }
  return key;
}

/** JSON with object keys sorted at every depth; arrays keep their order. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') {
    return JSON.stringify(value) ?? 'null';
  }
  if (Array.isArray(value)) {
    let out = '[';
    for (let i = 0; i < value.length; i++) {
      if (i > 0) out += ',';
      const item: unknown = value[i];
      out += item === undefined ? 'null' : canonicalJson(item);
    }
    return out + ']';
  }
  const obj = value as Record<string, unknown>;
  const keys = Object.keys(obj).sort();
  let out = '{';
  let first = true;
  for (const k of keys) {
    const v = obj[k];
    if (v === undefined) continue;
    if (!first) out += ',';
    first = false;
    out += JSON.stringify(k) + ':' + canonicalJson(v);
  }
  return out + '}';
}

export function fingerprintOf(method: string, path: string, body: unknown): string {
  return createHash('sha256')
    .update(method)
    .update('\n')
    .update(path)
    .update('\n')
    .update(canonicalJson(body ?? {}))
    .digest('hex');
}

/** Keys are per environment; management calls without one per credential; open routes share 'anon'. */
export function idempotencyScopeOf(principal: Principal | null): string {
  if (principal === null) return 'anon';
  return principal.environment?.id ?? principal.credentialId;
}

/**
 * Claims (scope, key). Resolves null when the caller must run the request, or the stored
 * record to replay; throws idempotency_in_progress (Retry-After: 1) or idempotency_key_reused.
 */
export async function claimIdempotency(
  store: IdempotencyStore,
  scope: string,
  key: string,
  fingerprint: string,
): Promise<(IdempotencyRecord & { status: number; body: string }) | null> {
  const existing = await store.claim(scope, key, fingerprint, idempotencyStaleAfterMs);
  if (existing === null) return null;
  if (existing.fingerprint !== fingerprint) {
    throw new ApiError('idempotency_key_reused', { param: 'Idempotency-Key' });
  }
  if (existing.state !== 'done' || existing.status === null || existing.body === null) {
    throw new ApiError('idempotency_in_progress', { param: 'Idempotency-Key', retryAfterSeconds: 1 });
  }
  return { ...existing, status: existing.status, body: existing.body };
}

/**
 * Whether an answer is final for this key: 2xx and 4xx are, except answers that ask the client
 * to come back (409 idempotency_in_progress, 429). 5xx never are (the claim is released).
 */
export function isStorable(status: number, code: string | undefined): boolean {
  if (status >= 200 && status < 300) return true;
  if (status < 400 || status >= 500) return false;
  if (status === 429) return false;
  return code !== 'idempotency_in_progress';
}
