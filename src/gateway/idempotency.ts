// Idempotency-Key handling for creating POSTs (spec part 1, rules 1-4): key checks, the request
// fingerprint (sha256 of method, path and canonical JSON body, so key order and whitespace do not
// make a retry look different), the claim outcome as an ApiError or a stored replay, which
// results are stored and which of their headers a replay repeats. Results are stored only after
// the handler ran; a claim is released when the request failed without a storable answer, so a
// retry can run again. A running request keeps its claim alive (ClaimKeeper), so only the claim
// of a dead process goes stale and is taken over. Never stores a 5xx.
import { createHash } from 'node:crypto';
import { ApiError } from '../errors/api-error.js';
import { limits } from '../limits.js';
import type { IdempotencyRecord, IdempotencyStore } from '../persistence/ports.js';
import type { Principal } from '../tenancy/types.js';

/**
 * An in_progress claim neither made nor touched for this long belongs to a process that died;
 * a retry takes it over. A live request touches its claim every third of it (ClaimKeeper).
 */
export const idempotencyStaleAfterMs = 60_000;

/**
 * Response headers a replay repeats: what the client needs for its next call (the ETag for its
 * If-Match, the Location of what was created). Not Request-Id (each answer has its own), not
 * Retry-After (only on answers that are never stored), not Content-Type (the writer adds it).
 */
export const replayedHeaderNames: readonly string[] = ['etag', 'location'];

const timerDelayMsMax = 2 ** 31 - 1;

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

/**
 * Keys of API keys (and customer tokens) are per environment: a backend that retries with another
 * of its keys gets the replay. Keys of people (personal access tokens and sessions) are per user
 * and environment: one member never gets another's stored answer, which was decided under the
 * other's role. Open routes have no caller: they are per identity the request names (signup: its
 * email), hashed, so different people never collide and a replay reaches only someone who knows
 * the identity; 'anon' only for an open route that names none (the gateway refuses to build one).
 */
export function idempotencyScopeOf(principal: Principal | null, identity?: string): string {
  if (principal === null) {
    return identity === undefined ? 'anon' : `anon/${createHash('sha256').update(identity).digest('hex')}`;
  }
  if (principal.userId !== null && (principal.kind === 'pat' || principal.kind === 'session')) {
    return `${principal.environment?.id ?? ''}/${principal.userId}`;
  }
  return principal.environment?.id ?? principal.credentialId;
}

/**
 * The call id of every run of a request under (scope, key) with this fingerprint (RequestContext.callId):
 * a hash, so it names neither the caller nor the key, and another body under the same key is another call.
 */
export function callIdOf(scope: string, key: string, fingerprint: string): string {
  return createHash('sha256').update(scope).update('\u0000').update(key).update('\u0000').update(fingerprint).digest('base64url').slice(0, 24);
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
  staleAfterMs: number = idempotencyStaleAfterMs,
): Promise<(IdempotencyRecord & { status: number; body: string }) | null> {
  const existing = await store.claim(scope, key, fingerprint, staleAfterMs);
  if (existing === null) return null;
  if (existing.fingerprint !== fingerprint) {
    throw new ApiError('idempotency_key_reused', { param: 'Idempotency-Key' });
  }
  if (existing.state !== 'done' || existing.status === null || existing.body === null) {
    throw new ApiError('idempotency_in_progress', { param: 'Idempotency-Key', retryAfterSeconds: 1 });
  }
  return { ...existing, status: existing.status, body: existing.body };
}

/** A customer's service id: `cust_` + partition (3) + time (10) + random (16), Crockford base32. */
const customerIdPattern = /cust_[0-9A-HJKMNP-TV-Z]{29}/g;
const customerIdExact = /^cust_[0-9A-HJKMNP-TV-Z]{29}$/;

/**
 * The customers a stored answer is about, kept with it so erasing one of them forgets the answer
 * (IdempotencyStore.forget): those the handler named (Reply.customerIds: answers that need not
 * show the id, such as a ledger entry's) and every customer id the answer's text shows (a
 * creation, an alias and the customer it merged in, an issuance). Sorted, without repeats.
 */
export function answerCustomerIds(text: string, named: readonly (string | null | undefined)[] | undefined): string[] {
  const ids = new Set<string>();
  // Only ids: an owner on the previous version answers a ledger entry without its customer
  // (undefined), and an array holding undefined cannot be stored (postgres.js refuses it).
  for (const id of named ?? []) if (typeof id === 'string' && customerIdExact.test(id)) ids.add(id);
  for (const m of text.matchAll(customerIdPattern)) ids.add(m[0]);
  return [...ids].sort();
}

/** The headers of an answer that a replay must repeat (lower-case names), or null when none. */
export function replayedHeadersOf(headers: Readonly<Record<string, string>> | null): Record<string, string> | null {
  if (headers === null) return null;
  let out: Record<string, string> | null = null;
  for (const name of replayedHeaderNames) {
    const value = headers[name];
    if (value !== undefined) (out ??= {})[name] = value;
  }
  return out;
}

/**
 * Keeps the claim of a running request alive: touches it every `everyMs` (a third of the stale
 * window) until stop(), so a repeat meets idempotency_in_progress however long the handler runs,
 * and only a claim whose process died goes stale. The first touch comes after `everyMs`, so a
 * request that finishes sooner (nearly all: milliseconds) writes nothing beyond claim and
 * complete. One touch in flight at a time; a failed touch is reported and the next one is still
 * scheduled; a touch that finds no claim any more (purged) is reported and stops the keeper.
 */
export class ClaimKeeper {
  private timer: NodeJS.Timeout | null;
  private stopped = false;
  private readonly everyMs: number;

  constructor(
    private readonly store: IdempotencyStore,
    private readonly scope: string,
    private readonly key: string,
    everyMs: number,
    private readonly onProblem: (problem: 'touch_failed' | 'claim_lost', err?: unknown) => void,
  ) {
    // setTimeout fires at once for delays past 2^31-1 ms: a "never stale" window must not spin.
    this.everyMs = Math.min(Math.max(everyMs, 1), timerDelayMsMax);
    this.timer = setTimeout(this.tick, this.everyMs);
    this.timer.unref();
  }

  /** Stops touching; a touch already in flight may still land (harmless: the row is done or gone). */
  stop(): void {
    this.stopped = true;
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
  }

  private readonly tick = (): void => {
    this.timer = null;
    this.store.touch(this.scope, this.key).then(this.touched, this.failed);
  };

  private readonly touched = (alive: boolean): void => {
    if (this.stopped) return;
    if (!alive) {
      this.stopped = true;
      this.onProblem('claim_lost');
      return;
    }
    this.schedule();
  };

  private readonly failed = (err: unknown): void => {
    if (this.stopped) return;
    this.onProblem('touch_failed', err);
    this.schedule();
  };

  private schedule(): void {
    this.timer = setTimeout(this.tick, this.everyMs);
    this.timer.unref();
  }
}

/**
 * Whether an answer is final for this key: 2xx and 4xx are, except answers that ask the client
 * to come back (409 idempotency_in_progress, 429) and refusals of the caller rather than of the
 * request (401, 403: a caller given the right role or scope must be able to run it). 5xx never
 * are (the claim is released).
 */
export function isStorable(status: number, code: string | undefined): boolean {
  if (status >= 200 && status < 300) return true;
  if (status < 400 || status >= 500) return false;
  if (status === 429 || status === 401 || status === 403) return false;
  return code !== 'idempotency_in_progress';
}
