// Wire mappers: engine views (camelCase, ms numbers) to the API's snake_case JSON with RFC 3339
// timestamps, and CallResult errors to ApiError. The only place customer and event shapes are
// spelled in snake_case.
import type { CallResult, Target } from '../actors/partition.js';
import type { CustomerView } from '../actors/views.js';
import type { ChallengeEffect } from '../domain/challenge-effects.js';
import { ApiError } from '../errors/api-error.js';
import { customerIdPartition } from '../ids.js';
import type { LedgerRow } from '../persistence/sql/read-model.js';
import { isoTime } from '../util/iso-time.js';

export function iso(ms: number | null): string | null {
  return ms === null ? null : isoTime(ms);
}

export function customerWire(
  c: Pick<CustomerView, 'id' | 'externalId' | 'attributes' | 'version' | 'createdAtMs' | 'updatedAtMs' | 'deletedAtMs'>,
) {
  return {
    id: c.id,
    external_id: c.externalId,
    attributes: c.attributes,
    version: c.version,
    deleted_at: iso(c.deletedAtMs),
    created_at: iso(c.createdAtMs),
    updated_at: iso(c.updatedAtMs),
  };
}

export function aliasWire(a: { alias: string; kind: string; createdAtMs: number }, customerId: string) {
  return { alias: a.alias, kind: a.kind, customer_id: customerId, created_at: iso(a.createdAtMs) };
}

/** A customer reference from a request: the service id (cust_...) or the caller's external id. */
export function customerTarget(ref: string): Target {
  return customerIdPartition(ref) >= 0 ? { by: 'id', id: ref } : { by: 'key', key: ref };
}

/** Unwraps a successful result or throws its error as ApiError. */
export function unwrap(result: CallResult): Extract<CallResult, { ok: true }>['reply'] {
  if (result.ok === true) return result.reply;
  if (result.ok === 'redirect') throw new ApiError('internal_error');
  throw new ApiError(result.code, {
    message: result.message,
    param: result.param,
    retryAfterSeconds: result.retryAfterSeconds,
    details: result.currentVersion === undefined ? undefined : { current_version: result.currentVersion },
  });
}

/**
 * Runs `call`, an engine call whose only missing resource is a customer named by the request
 * field `param`: its resource_not_found names that field (the engine names a missing customer
 * `id`, right only when the path named it).
 */
export async function namingCustomer<T>(param: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (err instanceof ApiError && err.code === 'resource_not_found' && err.param !== param) {
      throw new ApiError('resource_not_found', { message: err.message, param });
    }
    throw err;
  }
}

export function balanceWire(b: { currency: string; available: number; pending: number; lifetimeEarned: number }) {
  return { currency: b.currency, available: b.available, pending: b.pending, lifetime_earned: b.lifetimeEarned };
}

export function ledgerEntryWire(
  e: Pick<
    LedgerRow,
    'id' | 'currency' | 'type' | 'status' | 'amount' | 'remaining' | 'expiresAtMs' | 'confirmAfterMs' | 'reason' | 'sourceType' | 'sourceId' | 'createdAtMs'
  >,
) {
  return {
    id: e.id,
    currency: e.currency,
    type: e.type,
    status: e.status,
    amount: e.amount,
    remaining: e.remaining,
    expires_at: iso(e.expiresAtMs),
    confirm_after: iso(e.confirmAfterMs),
    reason: e.reason,
    source_type: e.sourceType,
    source_id: e.sourceId,
    created_at: iso(e.createdAtMs),
  };
}

/** Challenge effects in sync event answers and reevaluate answers. */
export function challengeEffectWire(e: ChallengeEffect): Record<string, unknown> {
  switch (e.type) {
    case 'challenge.progressed':
      return { type: e.type, challenge_id: e.challengeId, period_key: e.periodKey, count: e.count, target: e.target };
    case 'challenge.completed':
      return { type: e.type, challenge_id: e.challengeId, period_key: e.periodKey, completions: e.completions };
    case 'challenge.skipped':
      return { type: e.type, challenge_id: e.challengeId, reason: e.reason };
    case 'challenge.points_awarded':
      return {
        type: e.type,
        challenge_id: e.challengeId,
        currency: e.currency,
        amount: e.amount,
        ledger_entry_id: e.entryId,
        ...(e.campaignId === undefined ? {} : { campaign_id: e.campaignId }),
      };
    case 'challenge.item_granted':
      return { type: e.type, challenge_id: e.challengeId, item: e.item, quantity: e.quantity };
    case 'challenge.reward_requested':
      return { type: e.type, challenge_id: e.challengeId, reward_id: e.rewardId, issuance_id: e.issuanceId };
    case 'challenge.action_skipped':
      return { type: e.type, challenge_id: e.challengeId, action: e.action, reason: e.reason };
  }
}
