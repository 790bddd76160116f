// Call ids: which commands are remembered by their call id so that a repeat is answered, not
// applied again. A call can reach its actor twice: the engine forwards it to the owner node and
// sends it again when the forward failed without an answer (a deadline passed, the stream broke,
// the owner moved), though the owner may have applied it; and the gateway runs a request again
// under the same Idempotency-Key when the first run's answer was never stored (a 5xx, a store
// write that failed). Every command is listed here with why its repeat is harmless or not.
import { randomBytes } from 'node:crypto';
import type { EngineCommand } from './partition.js';

/**
 * The tag a command is remembered under (with its call id), or null when a repeat of it is
 * harmless: it changes nothing the first did not, and answers as the first did (or as a client
 * retry of its own would be answered, which the API documents).
 *
 * Harmless (null):
 * - reads: customer.view, customer.resolve, customer.get, customer.merged_from, customer.handover;
 * - event.record: deduplicated by the client's event id (a repeat is the duplicate, answered with
 *   the first answer's effects when it was a sync one); match.admit and match.review record the
 *   event `<match id>:<player>` once the same way, and count a player's rate once per match;
 * - customer.delete_begin (a delete begun is not checked again), customer.erase_merged (an erased
 *   merged customer answers as erased), key.claim (the same claimer: a no-op; the alias route
 *   finds an unfinished merge itself), key.release, alias.add (an alias held is answered as held;
 *   a merged customer is taken over once; the alias route's status comes from its claim);
 * - counter.backfill (one base per counter and source), tier.* (placed from the state as it is),
 *   ledger due work (confirm/expire what is due now), reward.expire_due, reward.settle,
 *   reward.fulfil (settle a pending request once), challenge.reevaluate.
 *
 * Remembered:
 * - ledger.adjust, ledger.award, ledger.spend, ledger.reverse: a second entry otherwise;
 *   ledger.cancel_pending: answered invalid_state otherwise;
 * - reward.issue: a re-run request reserves and issues under a new issuance id; reward.redeem,
 *   reward.cancel: invalid_state otherwise;
 * - challenge.revoke: takes a second unit off an unkeyed challenge's count; challenge.enroll,
 *   challenge.unenroll, challenge.contribute: answered "already enrolled", 404 or skipped otherwise;
 * - customer.create: 409 already_exists otherwise; customer.update: a stale_write (If-Match), or
 *   the patch applied again over a later change; customer.delete: 404 from the tombstone;
 * - segment.add_member, segment.remove_member: answered "unchanged" (200, not 201) otherwise.
 */
export function callTag(cmd: EngineCommand): string | null {
  switch (cmd.kind) {
    case 'customer.create':
    case 'customer.update':
    case 'customer.delete':
    case 'segment.add_member':
    case 'segment.remove_member':
      return cmd.kind;
    case 'ledger.run': {
      const k = cmd.command.kind;
      return k === 'ledger.confirm_due' || k === 'ledger.expire_due' || k === 'ledger.run_due' ? null : k;
    }
    case 'reward.run': {
      const k = cmd.command.kind;
      return k === 'reward.issue' || k === 'reward.redeem' || k === 'reward.cancel' ? k : null;
    }
    case 'challenge.run':
      return cmd.command.kind === 'challenge.reevaluate' ? null : cmd.command.kind;
    default:
      return null;
  }
}

/** A fresh call id, for a call that may be sent more than once and has none from its request. */
export function newCallId(): string {
  return randomBytes(12).toString('base64url');
}
