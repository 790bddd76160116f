// Trust levels of an event, ordered lowest first. A v2 rule's `trust.minimum` names one of them
// and skips events of a lower level. Unknown levels rank below every named one (they never pass
// a minimum). Pure data; the gateway decides which level an incoming event carries.

/**
 * - `client_reported`: sent with a publishable key or a customer token (a browser or app the
 *   customer controls): the customer could forge it.
 * - `merchant_asserted`: sent server-side with a secret key, or derived from a match result
 *   (spec 4.9 rule 6): the merchant vouches for it.
 * - `service_verified`: produced by the service itself from facts it holds (tier changes,
 *   challenge completions, internal domain events): nobody outside could forge it.
 */
export const trustLevels = ['client_reported', 'merchant_asserted', 'service_verified'] as const;
export type TrustLevel = (typeof trustLevels)[number];

/** Rank of a trust level (0 is lowest); -1 for an unknown level. */
export function trustRank(level: string): number {
  switch (level) {
    case 'client_reported':
      return 0;
    case 'merchant_asserted':
      return 1;
    case 'service_verified':
      return 2;
    default:
      return -1;
  }
}
