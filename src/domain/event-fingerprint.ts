// The content fingerprint of a client event: what its id is bound to, in the environment's register
// of ids and in its customer's record of recorded ids. POST /v1/events and the rule-6 event of a
// match player both compute it here, so the same event sent either way is the same content (a
// resend is a duplicate, not event_id_conflict). Pure; no I/O.
import { canonicalJson, hash53 } from '../util/canonical-json.js';

/**
 * `customerId` is the caller's customer identifier as sent with the event (the external id), not
 * the service id; property key order does not matter.
 */
export function eventFingerprint(name: string, customerId: string, occurredAtMs: number, properties: Record<string, unknown>): number {
  return hash53(canonicalJson([name, customerId, occurredAtMs, properties]));
}
