// Trust levels of an event, ordered lowest first. A v2 rule's `trust.minimum` names one of them
// and skips events of a lower level. Unknown levels rank below every named one (they never pass
// a minimum). Pure data; the gateway decides which level an incoming event carries.
// Only levels some event can carry are listed: a minimum no event reaches would make a rule that
// never fires, so validation refuses it (see unreachableTrustLevels).

/**
 * - `client_reported`: sent with a publishable key or a customer token (a browser or app the
 *   customer controls): the customer could forge it.
 * - `merchant_asserted`: sent server-side with a secret key, or derived from a match result
 *   (spec 4.9 rule 6): the merchant vouches for it.
 */
export const trustLevels = ['client_reported', 'merchant_asserted'] as const;
export type TrustLevel = (typeof trustLevels)[number];

/**
 * Levels a client might expect above merchant_asserted that no event carries: the service feeds
 * none of its own facts (tier changes, challenge completions) to rules, so nothing is stamped
 * `service_verified`. A rule naming one is refused with a message that says so.
 */
export const unreachableTrustLevels: readonly string[] = ['service_verified'];

/** Rank of a trust level (0 is lowest); -1 for an unknown level. */
export function trustRank(level: string): number {
  switch (level) {
    case 'client_reported':
      return 0;
    case 'merchant_asserted':
      return 1;
    default:
      return -1;
  }
}
