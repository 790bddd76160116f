// Read-only views of actor state that cross the engine boundary (to handlers, to other nodes).
// Plain data only (msgpack-safe): no Maps, no references into live actor state.
import type { CustomerState } from '../domain/customer.js';
import { type Balance, balances } from '../domain/ledger.js';

export interface CustomerView {
  id: string;
  environmentId: string;
  externalId: string | null;
  attributes: Record<string, unknown>;
  version: number;
  createdAtMs: number;
  updatedAtMs: number;
  deletedAtMs: number | null;
  aliases: Array<{ alias: string; kind: string; createdAtMs: number }>;
  mergedFrom: string[];
  /** Number of distinct events recorded (deduplicated). */
  eventCount: number;
  /** Per currency, as of the view's time (due confirmations and expiries counted). */
  balances: Balance[];
  tiers: Array<{ programId: string; level: string; sinceMs: number }>;
  /** Ids of the static segments the customer is a member of (names are resolved by the caller). */
  segmentIds: string[];
}

export function toView(s: CustomerState, nowMs: number): CustomerView {
  return {
    id: s.id,
    environmentId: s.environmentId,
    externalId: s.externalId,
    attributes: { ...s.attributes },
    version: s.version,
    createdAtMs: s.createdAtMs,
    updatedAtMs: s.updatedAtMs,
    deletedAtMs: s.deletedAtMs,
    aliases: s.aliases.map((a) => ({ ...a })),
    mergedFrom: [...s.mergedFrom],
    eventCount: s.events.size,
    balances: balances(s.ledger, nowMs),
    tiers: Object.values(s.tiers).map((t) => ({ programId: t.programId, level: t.level, sinceMs: t.sinceMs })),
    segmentIds: [...(s.segmentIds ?? [])],
  };
}
