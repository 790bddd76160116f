// The reward issuance mechanic of one customer: issued -> redeemed | cancelled | expired (spec
// part 3), plus the rule path's outbox (pending -> issued | refused). Stock is NOT counted here:
// the service reserves a unit in PostgreSQL before `reward.issue` reaches the step, because a
// customer's step is pure and cannot see other customers. Redeem spends the price in the SAME
// facts as the transition (ledger spend, earliest expiry first; refused with insufficient_balance
// when less is available, whatever the currency's negative_balance). Every fact carries the whole
// issuance after the change, so evolve and the projector need no state. Pure; never throws.
import type { ErrorCode } from '../errors/codes.js';
import * as ledger from './ledger.js';

export const issuanceIdPrefix = 'rwi';

/** pending and refused exist only on the rule path (an outbox entry and its refusal); the API never lists them. */
export type IssuanceStatus = 'pending' | 'issued' | 'redeemed' | 'cancelled' | 'expired' | 'refused';

/** What the catalog says about a reward at the moment its unit is reserved (the price is fixed then). */
export interface RewardTerms {
  id: string;
  cost: number;
  currency: string;
  /** null: never expires. */
  expiryAfterMs: number | null;
}

export interface Issuance {
  id: string;
  rewardId: string;
  status: IssuanceStatus;
  /** 'api' (POST /v1/reward_issuances) or 'rule_execution'. */
  sourceType: string;
  sourceId: string | null;
  /** Price fixed at issue (minor units of `currency`); null while pending. */
  cost: number | null;
  currency: string | null;
  costEntryId: string | null;
  expiresAtMs: number | null;
  redeemedAtMs: number | null;
  cancelledAtMs: number | null;
  /** Cancel reason, or the refusal reason of a rule request (reward_unavailable). */
  reason: string | null;
  version: number;
  createdAtMs: number;
}

export interface RewardsState {
  /** Every issuance of the customer, oldest first. */
  issuances: Issuance[];
  /** Issuance ids whose reservation was released by the reconciler: they can never be issued. */
  voided: string[];
}

export function emptyRewards(): RewardsState {
  return { issuances: [], voided: [] };
}

export type RewardCommand =
  | { kind: 'reward.issue'; issuanceId: string; terms: RewardTerms; sourceType: string; sourceId: string | null }
  | { kind: 'reward.redeem'; issuanceId: string; currencies: readonly ledger.CurrencyConfig[] }
  | { kind: 'reward.cancel'; issuanceId: string; reason: string | null }
  /** Expires every issued issuance whose expires_at <= ctx.nowMs. */
  | { kind: 'reward.expire_due' }
  /**
   * Reconciliation of a reservation: present (issued, or pending and now issued with the reserved
   * unit) or, if the step never saw the id, voided forever so the unit can be released safely.
   * `terms` is null when the reservation is to be released whatever happens (reward gone).
   */
  | { kind: 'reward.settle'; issuanceId: string; terms: RewardTerms | null }
  /** Rule path, after the service reserved (granted) or could not reserve (refused) the unit. */
  | { kind: 'reward.fulfil'; issuanceId: string; terms: RewardTerms | null; reason: string | null };

export type RewardFact =
  | { kind: 'reward.issue_requested'; issuance: Issuance }
  | { kind: 'reward.issued'; issuance: Issuance }
  | { kind: 'reward.issue_refused'; issuance: Issuance }
  | { kind: 'reward.redeemed'; issuance: Issuance }
  | { kind: 'reward.cancelled'; issuance: Issuance }
  | { kind: 'reward.expired'; issuance: Issuance }
  | { kind: 'reward.reservation_voided'; issuanceId: string; atMs: number }
  /** A merged customer's issuance, now the survivor's (version + 1; the row moves to the survivor). */
  | { kind: 'reward.taken_over'; issuance: Issuance; from: string };

export type RewardReply =
  | { kind: 'reward.issuance'; issuance: Issuance }
  | { kind: 'reward.expired'; ids: string[] }
  /** present: the issuance exists (keep the unit); voided: never issued (release it). */
  | { kind: 'reward.settled'; outcome: 'present' | 'voided'; issuance: Issuance | null };

export type RewardDecision =
  | { ok: true; facts: Array<RewardFact | ledger.LedgerFact>; reply: RewardReply }
  | { ok: false; code: ErrorCode; message?: string; param?: string };

export interface RewardCtx {
  nowMs: number;
  newId(prefix: string): string;
}

function fail(code: ErrorCode, message: string, param?: string): RewardDecision {
  return { ok: false, code, message, param };
}

export function findIssuance(state: RewardsState, id: string): Issuance | undefined {
  // Newest last; lookups are mostly for recent ones.
  for (let i = state.issuances.length - 1; i >= 0; i--) if (state.issuances[i]!.id === id) return state.issuances[i];
  return undefined;
}

/** Issued and past its expires_at (the sweep may not have run yet): treated as expired. */
export function lapsed(i: Issuance, nowMs: number): boolean {
  return i.status === 'issued' && i.expiresAtMs !== null && i.expiresAtMs <= nowMs;
}

/**
 * The issuance as its expiry records it (the sweep's reward.expire_due, a delete): expired, one
 * version on, nothing else changed (the moment of expiry is its expires_at).
 */
export function expiredOf(i: Issuance): Issuance {
  return { ...i, status: 'expired', version: i.version + 1 };
}

/**
 * The issuance as of nowMs, as every read and answer shows it: a lapsed one (issued, past
 * expires_at, its expiry not recorded yet) is shown exactly as the sweep will record it, so a read
 * before the sweep and one after it answer the same. The reward_issuances read table applies the
 * same rule in SQL (ReadModel.listIssuances).
 */
export function asOf(i: Issuance, nowMs: number): Issuance {
  return lapsed(i, nowMs) ? expiredOf(i) : i;
}

function issuedFrom(base: Pick<Issuance, 'id' | 'sourceType' | 'sourceId' | 'createdAtMs' | 'version'>, terms: RewardTerms, nowMs: number): Issuance {
  return {
    id: base.id,
    rewardId: terms.id,
    status: 'issued',
    sourceType: base.sourceType,
    sourceId: base.sourceId,
    cost: terms.cost,
    currency: terms.currency,
    costEntryId: null,
    expiresAtMs: terms.expiryAfterMs === null ? null : nowMs + terms.expiryAfterMs,
    redeemedAtMs: null,
    cancelledAtMs: null,
    reason: null,
    version: base.version,
    createdAtMs: base.createdAtMs,
  };
}

/** A rule's request for a reward (the outbox entry), journaled with the event that fired the rule. */
export function requested(
  rewardId: string,
  sourceId: string,
  ctx: RewardCtx,
  sourceType: 'rule_execution' | 'challenge_completion' = 'rule_execution',
): RewardFact & { kind: 'reward.issue_requested' } {
  return {
    kind: 'reward.issue_requested',
    issuance: {
      id: ctx.newId(issuanceIdPrefix),
      rewardId,
      status: 'pending',
      sourceType,
      sourceId,
      cost: null,
      currency: null,
      costEntryId: null,
      expiresAtMs: null,
      redeemedAtMs: null,
      cancelledAtMs: null,
      reason: null,
      version: 1,
      createdAtMs: ctx.nowMs,
    },
  };
}

/**
 * Decides one command. Checks in order: the issuance exists, its state allows the command, then
 * (redeem) the balance. `book` is the customer's ledger (not modified).
 */
export function decide(state: RewardsState, book: ledger.LedgerState, cmd: RewardCommand, ctx: RewardCtx): RewardDecision {
  switch (cmd.kind) {
    case 'reward.issue': {
      const existing = findIssuance(state, cmd.issuanceId);
      // A retried command (same reservation) answers with the issuance it made, as it is now.
      if (existing !== undefined) return { ok: true, facts: [], reply: { kind: 'reward.issuance', issuance: asOf(existing, ctx.nowMs) } };
      if (state.voided.includes(cmd.issuanceId)) return fail('reward_unavailable', 'The reservation of this issuance was released.', 'reward_id');
      const issuance = issuedFrom(
        { id: cmd.issuanceId, sourceType: cmd.sourceType, sourceId: cmd.sourceId, createdAtMs: ctx.nowMs, version: 1 },
        cmd.terms,
        ctx.nowMs,
      );
      return { ok: true, facts: [{ kind: 'reward.issued', issuance }], reply: { kind: 'reward.issuance', issuance } };
    }
    case 'reward.redeem': {
      const i = findIssuance(state, cmd.issuanceId);
      if (i === undefined || i.status === 'pending' || i.status === 'refused') return fail('resource_not_found', 'No reward issuance with this id.', 'id');
      if (lapsed(i, ctx.nowMs)) return fail('invalid_state', 'The issuance expired; only an issued issuance can be redeemed.', 'id');
      if (i.status !== 'issued') return fail('invalid_state', `The issuance is ${i.status}; only an issued issuance can be redeemed.`, 'id');
      const facts: Array<RewardFact | ledger.LedgerFact> = [];
      let costEntryId: string | null = null;
      if (i.cost !== null && i.cost > 0 && i.currency !== null) {
        const d = ledger.decide(
          book,
          { kind: 'ledger.spend', currency: i.currency, amount: i.cost, reason: `reward ${i.rewardId}`, sourceType: 'reward_issuance', sourceId: i.id },
          cmd.currencies,
          ctx,
        );
        if (!d.ok) return d.code === 'insufficient_balance' ? fail('insufficient_balance', d.message ?? 'Balance too low.', 'id') : d;
        for (const f of d.facts) facts.push(f);
        if (d.reply.kind === 'ledger.entry') costEntryId = d.reply.entry.id;
      }
      const issuance: Issuance = { ...i, status: 'redeemed', costEntryId, redeemedAtMs: ctx.nowMs, version: i.version + 1 };
      facts.push({ kind: 'reward.redeemed', issuance });
      return { ok: true, facts, reply: { kind: 'reward.issuance', issuance } };
    }
    case 'reward.cancel': {
      const i = findIssuance(state, cmd.issuanceId);
      if (i === undefined || i.status === 'pending' || i.status === 'refused') return fail('resource_not_found', 'No reward issuance with this id.', 'id');
      if (lapsed(i, ctx.nowMs)) return fail('invalid_state', 'The issuance expired; only an issued issuance can be cancelled.', 'id');
      if (i.status !== 'issued') return fail('invalid_state', `The issuance is ${i.status}; only an issued issuance can be cancelled.`, 'id');
      // Nothing was paid while issued (the price is spent at redeem), so there is nothing to refund.
      const issuance: Issuance = { ...i, status: 'cancelled', cancelledAtMs: ctx.nowMs, reason: cmd.reason, version: i.version + 1 };
      return { ok: true, facts: [{ kind: 'reward.cancelled', issuance }], reply: { kind: 'reward.issuance', issuance } };
    }
    case 'reward.expire_due': {
      const facts: RewardFact[] = [];
      const ids: string[] = [];
      for (const i of state.issuances) {
        if (!lapsed(i, ctx.nowMs)) continue;
        facts.push({ kind: 'reward.expired', issuance: expiredOf(i) });
        ids.push(i.id);
      }
      return { ok: true, facts, reply: { kind: 'reward.expired', ids } };
    }
    case 'reward.settle': {
      const i = findIssuance(state, cmd.issuanceId);
      if (i !== undefined && i.status !== 'pending' && i.status !== 'refused') {
        return { ok: true, facts: [], reply: { kind: 'reward.settled', outcome: 'present', issuance: i } };
      }
      if (i !== undefined && i.status === 'pending' && cmd.terms !== null) {
        // The unit is reserved for this request: deliver it now.
        const issuance = issuedFrom({ ...i, version: i.version + 1 }, cmd.terms, ctx.nowMs);
        return { ok: true, facts: [{ kind: 'reward.issued', issuance }], reply: { kind: 'reward.settled', outcome: 'present', issuance } };
      }
      if (i !== undefined && i.status === 'pending') {
        const issuance: Issuance = { ...i, status: 'refused', reason: 'reward_unavailable', version: i.version + 1 };
        return { ok: true, facts: [{ kind: 'reward.issue_refused', issuance }], reply: { kind: 'reward.settled', outcome: 'voided', issuance } };
      }
      if (state.voided.includes(cmd.issuanceId) || i !== undefined) {
        return { ok: true, facts: [], reply: { kind: 'reward.settled', outcome: 'voided', issuance: null } };
      }
      return {
        ok: true,
        facts: [{ kind: 'reward.reservation_voided', issuanceId: cmd.issuanceId, atMs: ctx.nowMs }],
        reply: { kind: 'reward.settled', outcome: 'voided', issuance: null },
      };
    }
    case 'reward.fulfil': {
      const i = findIssuance(state, cmd.issuanceId);
      if (i === undefined) return fail('resource_not_found', 'No reward request with this id.', 'id');
      if (i.status !== 'pending') return { ok: true, facts: [], reply: { kind: 'reward.issuance', issuance: i } };
      if (cmd.terms === null) {
        const issuance: Issuance = { ...i, status: 'refused', reason: cmd.reason ?? 'reward_unavailable', version: i.version + 1 };
        return { ok: true, facts: [{ kind: 'reward.issue_refused', issuance }], reply: { kind: 'reward.issuance', issuance } };
      }
      const issuance = issuedFrom({ ...i, version: i.version + 1 }, cmd.terms, ctx.nowMs);
      return { ok: true, facts: [{ kind: 'reward.issued', issuance }], reply: { kind: 'reward.issuance', issuance } };
    }
  }
}

/** Why a deleted customer's open issuances ended (the cancel or refusal reason they record). */
export const deletedReason = 'customer_deleted';

/**
 * A customer's open issuances, ended when it is deleted (in the delete's journal record): an issued
 * issuance past its expires_at expires, as the sweep would have made it (no unit back); any other
 * issued one is cancelled and a rule's pending request refused, both with reason customer_deleted.
 * `released`: the ids whose unit (if one was reserved) goes back to its reward.
 */
export function closeForDeletion(state: RewardsState, nowMs: number): { facts: RewardFact[]; released: string[] } {
  const facts: RewardFact[] = [];
  const released: string[] = [];
  for (const i of state.issuances) {
    if (lapsed(i, nowMs)) {
      facts.push({ kind: 'reward.expired', issuance: expiredOf(i) });
    } else if (i.status === 'issued') {
      facts.push({ kind: 'reward.cancelled', issuance: { ...i, status: 'cancelled', cancelledAtMs: nowMs, reason: deletedReason, version: i.version + 1 } });
      released.push(i.id);
    } else if (i.status === 'pending') {
      facts.push({ kind: 'reward.issue_refused', issuance: { ...i, status: 'refused', reason: deletedReason, version: i.version + 1 } });
      released.push(i.id);
    }
  }
  return { facts, released };
}

/** Cancel and fulfil read no balance. */
const emptyBook = ledger.emptyLedger();

/**
 * The reward commands a deleted customer still takes (null: none, it answers 404), so that an
 * issuance it held never stays open: a delete made before deletes ended them (closeForDeletion)
 * left them issued. The due expiry ends all of them as a delete now does; cancel works as for a
 * live customer (its unit goes back); a request being fulfilled is refused.
 */
export function decideDeleted(state: RewardsState, cmd: RewardCommand, ctx: RewardCtx): RewardDecision | null {
  switch (cmd.kind) {
    case 'reward.expire_due': {
      const { facts } = closeForDeletion(state, ctx.nowMs);
      const ids = facts.filter((f) => f.kind === 'reward.expired').map((f) => (f as { issuance: Issuance }).issuance.id);
      return { ok: true, facts, reply: { kind: 'reward.expired', ids } };
    }
    case 'reward.cancel':
      return decide(state, emptyBook, cmd, ctx);
    case 'reward.fulfil': {
      const i = findIssuance(state, cmd.issuanceId);
      if (i === undefined || i.status !== 'pending') return decide(state, emptyBook, cmd, ctx);
      const issuance: Issuance = { ...i, status: 'refused', reason: deletedReason, version: i.version + 1 };
      return { ok: true, facts: [{ kind: 'reward.issue_refused', issuance }], reply: { kind: 'reward.issuance', issuance } };
    }
    default:
      return null;
  }
}

/** Applies one reward fact (mutates and returns the state, like the other mechanics). */
export function evolve(state: RewardsState, fact: RewardFact): RewardsState {
  if (fact.kind === 'reward.reservation_voided') {
    if (!state.voided.includes(fact.issuanceId)) state.voided.push(fact.issuanceId);
    return state;
  }
  const next = fact.issuance;
  const at = state.issuances.findIndex((i) => i.id === next.id);
  if (at >= 0) state.issuances[at] = { ...next };
  else if (fact.kind === 'reward.taken_over') {
    // Oldest first, also for issuances taken over from a merged customer.
    let k = state.issuances.length;
    while (k > 0 && state.issuances[k - 1]!.createdAtMs > next.createdAtMs) k--;
    state.issuances.splice(k, 0, { ...next });
  } else state.issuances.push({ ...next });
  return state;
}

/**
 * The survivor's side of a merge: the merged customer's issuances (every status, the rule path's
 * pending requests included) become its own, and its voided reservation ids stay voided here.
 * Issuances it already has are not taken twice, nor ones voided here.
 */
export function takeOver(state: RewardsState, handed: RewardsState, fromId: string, ctx: { nowMs: number }): RewardFact[] {
  const facts: RewardFact[] = [];
  for (const i of handed.issuances) {
    // Voided here meanwhile (a stale reservation settled while the issuance was in transit): its
    // unit went back, so it is not taken (never oversold).
    if (findIssuance(state, i.id) !== undefined || state.voided.includes(i.id)) continue;
    facts.push({ kind: 'reward.taken_over', issuance: { ...i, version: i.version + 1 }, from: fromId });
  }
  for (const id of handed.voided) {
    if (!state.voided.includes(id)) facts.push({ kind: 'reward.reservation_voided', issuanceId: id, atMs: ctx.nowMs });
  }
  return facts;
}

/** A reward's expiry_after: `<n>d` (days) or `<n>h` (hours), n a positive integer of at most 6 digits. */
export const expiryAfterPattern = /^([1-9][0-9]{0,5})([dh])$/;

/** Parses `<n>d` or `<n>h` (n a positive integer) into milliseconds; null when malformed. */
export function parseExpiryAfter(s: string): number | null {
  const m = expiryAfterPattern.exec(s);
  if (m === null) return null;
  const n = Number(m[1]);
  return n * (m[2] === 'd' ? 86_400_000 : 3_600_000);
}
