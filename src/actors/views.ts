// Read-only views of actor state that cross the engine boundary (to handlers, to other nodes).
// Plain data only (msgpack-safe): no Maps, no references into live actor state.
import type { CustomerState } from '../domain/customer.js';
import { counterValue } from '../domain/counters.js';
import { inventoryList } from '../domain/inventory.js';
import { type Balance, balances } from '../domain/ledger.js';
import { asOf, type Issuance } from '../domain/rewards.js';
import { qualifiedLevel } from '../domain/rule-effects.js';
import type { TierProgram } from '../domain/tiers.js';

export interface CustomerView {
  id: string;
  environmentId: string;
  externalId: string | null;
  attributes: Record<string, unknown>;
  version: number;
  createdAtMs: number;
  updatedAtMs: number;
  deletedAtMs: number | null;
  /** A DELETE of it began and did not finish (CustomerState.deletingSinceMs). */
  deleting: boolean;
  aliases: Array<{ alias: string; kind: string; createdAtMs: number }>;
  mergedFrom: string[];
  /** Number of distinct events recorded (deduplicated). */
  eventCount: number;
  /** Per currency, as of the view's time (due confirmations and expiries counted). */
  balances: Balance[];
  tiers: Array<{ programId: string; level: string; sinceMs: number }>;
  /**
   * In the programs the view was asked with (customer.view tierPrograms) that the customer was
   * never placed in: the level it qualifies for now, from its ledger (what rules read).
   */
  qualifiedTiers: Array<{ programId: string; level: string }>;
  /**
   * Reward issuances, oldest first (the rule path's pending and refused requests are not shown), as
   * of the view's time: one past expires_at reads expired before the sweep records it (rewards.asOf).
   */
  issuances: Issuance[];
  /** The latest progress record per challenge (the period it was last counted in). */
  challenges: Array<{ challengeId: string; periodKey: string; cycle: number; count: number; target: number; status: string; completedAtMs: number | null }>;
  /** Current window's count by counter id (the handler maps ids to names). */
  counters: Record<string, number>;
  /** Items granted by rules, sorted by item key. */
  inventory: Array<{ item: string; quantity: number }>;
  /** Ids of the static segments the customer is a member of (names are resolved by the caller). */
  segmentIds: string[];
  /** Times each rule fired per limit scope ("rule|limit|scope" -> count): what simulations read. */
  ruleLimits: Record<string, number>;
}

export function toView(s: CustomerState, nowMs: number, tierPrograms: readonly TierProgram[] = []): CustomerView {
  const qualifiedTiers: CustomerView['qualifiedTiers'] = [];
  for (const p of tierPrograms) {
    if (Object.hasOwn(s.tiers, p.id)) continue;
    const level = qualifiedLevel(p, s.ledger, nowMs);
    if (level !== null) qualifiedTiers.push({ programId: p.id, level });
  }
  return {
    id: s.id,
    environmentId: s.environmentId,
    externalId: s.externalId,
    attributes: { ...s.attributes },
    version: s.version,
    createdAtMs: s.createdAtMs,
    updatedAtMs: s.updatedAtMs,
    deletedAtMs: s.deletedAtMs,
    deleting: s.deletingSinceMs !== undefined,
    aliases: s.aliases.map((a) => ({ ...a })),
    mergedFrom: [...s.mergedFrom],
    eventCount: s.events.size,
    balances: balances(s.ledger, nowMs),
    tiers: Object.values(s.tiers).map((t) => ({ programId: t.programId, level: t.level, sinceMs: t.sinceMs })),
    qualifiedTiers,
    issuances: s.rewards.issuances.filter((i) => i.status !== 'pending' && i.status !== 'refused').map((i) => ({ ...asOf(i, nowMs) })),
    challenges: Object.values(s.challenges.progress).map((p) => ({
      challengeId: p.challengeId,
      periodKey: p.periodKey,
      cycle: p.cycle,
      count: p.count,
      target: p.target,
      status: p.status,
      completedAtMs: p.completedAtMs,
    })),
    inventory: inventoryList(s.inventory),
    ruleLimits: { ...s.ruleLimits },
    counters: Object.fromEntries(Object.entries(s.counters ?? {}).map(([id, c]) => [id, counterValue(c, nowMs)])),
    segmentIds: [...(s.segmentIds ?? [])],
  };
}
