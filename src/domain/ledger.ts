// The ledger mechanic: each customer's balance per currency as lots (credits with a remaining
// balance), pending credits waiting for confirm_after, a debt (only under negative_balance 'allow',
// from negative adjustments: a spend never goes below the available balance), and lifetime earned.
// Invariants: available = sum of lot remainders - debt; debt > 0 only when no lot is left; lots are
// kept in spending order (earliest expiry first, no expiry last, then creation); lifetime earned
// never decreases; every movement is a self-contained entry fact. Pure: time is ctx.nowMs, ids come
// from ctx.newId and live in the facts. Never throws.
import type { ErrorCode } from '../errors/codes.js';

/**
 * Bounds of the ledger. amountMax keeps every sum of a customer's amounts far inside the safe
 * integer range (2^53 / 1e12 = 9007 maximal entries before sums are refused with validation_failed).
 */
export const ledgerLimits = {
  amountMinorMax: 1_000_000_000_000,
  reasonCharsMax: 500,
  sourceCharsMax: 255,
  expiryDaysMax: 36_600,
} as const;

const dayMs = 86_400_000;
/**
 * Ledger entry ids: `le_` + time-ordered random part (from ctx.newId; decisions.md fixes the
 * prefix). Entries recorded before were `led_`: ids are opaque, so nothing parses the prefix and
 * both kinds keep working wherever an entry id is read or taken as input.
 */
export const entryIdPrefix = 'le';

// ---------------------------------------------------------------------------------------------
// Configuration, state, entries

export type NegativeBalancePolicy = 'forbid' | 'allow';

/** A currency as the catalog defines it; the caller loads these before calling decide. */
export interface CurrencyConfig {
  key: string;
  negativeBalance: NegativeBalancePolicy;
  /** Default lifetime of a credit, counted from when it becomes available; null: never expires. */
  expiryDays: number | null;
}

/** The part of the actor's context the ledger uses (the customer Ctx satisfies it). */
export interface LedgerCtx {
  nowMs: number;
  newId(prefix: string): string;
}

/** An available credit (award, positive adjustment or reversal) with something left to spend. */
export interface Lot {
  entryId: string;
  amount: number;
  remaining: number;
  expiresAtMs: number | null;
  createdAtMs: number;
}

/** A credit waiting for its confirm_after; counts in `pending`, not spendable. */
export interface PendingCredit {
  entryId: string;
  /** award or adjustment (both count in lifetime earned once confirmed). */
  type: EntryType;
  amount: number;
  confirmAfterMs: number;
  expiresAtMs: number | null;
  createdAtMs: number;
}

/** One currency of one customer. Plain data (msgpack-friendly): no Maps, no classes. */
export interface CurrencyBook {
  currency: string;
  /** Open lots only (remaining > 0), in spending order. */
  lots: Lot[];
  /** In the order they were recorded. */
  pending: PendingCredit[];
  /** What a customer owes under 'allow': available = sum(lots.remaining) - debt. Credits pay it off first. */
  debt: number;
  /** Sum of posted awards and positive adjustments (not reversals); never decreases. */
  lifetimeEarned: number;
  /**
   * Earned (what lifetimeEarned adds) per UTC day it was posted: [day index, amount], ascending,
   * at most `earnedDaysKept` days back from the newest. Feeds earned_rolling_days tier programs.
   * Absent in books from before it existed (then nothing earned by date).
   */
  earned?: Array<[number, number]>;
}

/** Days of earnings by date a book keeps (the longest rolling tier window allowed). */
export const earnedDaysKept = 366;

export interface LedgerState {
  /** One book per currency the customer ever touched, in first-touch order. */
  books: CurrencyBook[];
}

/**
 * award, adjustment (manual, either sign), spend (reward redemption and the like), reversal
 * (refund of an earlier debit, a credit), expiry (a lot's remainder at its expires_at), transfer
 * (a merge: the merged customer's lots and debt moving to the survivor, source customer_merge).
 */
export type EntryType = 'award' | 'adjustment' | 'spend' | 'reversal' | 'expiry' | 'transfer';

/**
 * Credits are `pending` until confirm_after, then `posted`; a pending credit can be `cancelled`;
 * a credit whose remainder expired becomes `expired` (its row, via the expiry entry's allocation).
 * Debits (spend, negative adjustment, expiry) are `posted` when recorded and never change.
 */
export type EntryStatus = 'pending' | 'posted' | 'expired' | 'cancelled';

/** How much a debit took from one lot, and what the lot had left afterwards. */
export interface Allocation {
  entryId: string;
  amount: number;
  remainingAfter: number;
}

/**
 * One movement, self-contained so the projector can insert it as a row without state. `amount` is
 * signed (credits > 0, debits < 0). `remaining` is a credit's spendable remainder at recording
 * (amount while pending, amount - debtPaid once posted) and 0 for debits. Later changes to a
 * credit's row come from other facts: allocations of debits (remaining, status expired for an
 * expiry), pending_confirmed and pending_cancelled.
 */
export interface LedgerEntry {
  id: string;
  currency: string;
  type: EntryType;
  status: 'pending' | 'posted';
  amount: number;
  remaining: number;
  expiresAtMs: number | null;
  confirmAfterMs: number | null;
  reason: string | null;
  sourceType: string | null;
  sourceId: string | null;
  /** A reversal names the debit it refunds. */
  reversesEntryId: string | null;
  createdAtMs: number;
  /** Debits: the lots consumed, in spending order. Empty for credits. */
  allocations: Allocation[];
  /** Credits posted now: the part of the amount that paid off debt (not in any lot). */
  debtPaid: number;
  /** Negative adjustments (and merge transfers) under 'allow': the part no lot covered, added to the debt. */
  debtIncurred: number;
}

// ---------------------------------------------------------------------------------------------
// Commands, facts, replies

interface CreditOptions {
  /** undefined: the currency's default (expiryDays after it becomes available); null: never. */
  expiresAtMs?: number | null;
  /** A time after now makes the credit pending until then; null/undefined/past: posted now. */
  confirmAfterMs?: number | null;
}

export type LedgerCommand =
  | ({
      kind: 'ledger.award';
      currency: string;
      amount: number;
      reason: string | null;
      sourceType: string | null;
      sourceId: string | null;
    } & CreditOptions)
  | ({
      /** Manual: amount non-zero, a reason required; negative spends earliest expiry first. */
      kind: 'ledger.adjust';
      currency: string;
      amount: number;
      reason: string;
      sourceType?: string | null;
      sourceId?: string | null;
    } & CreditOptions)
  | { kind: 'ledger.spend'; currency: string; amount: number; reason: string | null; sourceType: string; sourceId: string }
  | {
      /** Refunds an earlier debit (e.g. a cancelled reward's cost) as a new lot; expiry as for awards. */
      kind: 'ledger.reverse';
      currency: string;
      amount: number;
      reversesEntryId: string;
      reason: string | null;
      sourceType: string | null;
      sourceId: string | null;
      expiresAtMs?: number | null;
    }
  | { kind: 'ledger.cancel_pending'; currency: string; entryId: string; reason: string | null }
  /** Due work at ctx.nowMs over every currency: confirm, expire, or both (confirm first). */
  | { kind: 'ledger.confirm_due' }
  | { kind: 'ledger.expire_due' }
  | { kind: 'ledger.run_due' };

export type LedgerFact =
  | { kind: 'ledger.entry_recorded'; entry: LedgerEntry }
  | {
      /** A pending credit became available: its row turns `posted` with this remaining. */
      kind: 'ledger.pending_confirmed';
      currency: string;
      entryId: string;
      type: EntryType;
      amount: number;
      remaining: number;
      debtPaid: number;
      expiresAtMs: number | null;
      createdAtMs: number;
      atMs: number;
    }
  | { kind: 'ledger.pending_cancelled'; currency: string; entryId: string; amount: number; reason: string | null; atMs: number }
  /** A merged customer's lifetime earned (and earnings by day) joined into the survivor's book; no entry row. */
  | { kind: 'ledger.earnings_merged'; currency: string; from: string; lifetimeEarned: number; earned: Array<[number, number]> };

export interface Balance {
  currency: string;
  /** Spendable now; negative only under 'allow' (then it is -debt). */
  available: number;
  pending: number;
  lifetimeEarned: number;
}

export type LedgerReply =
  /** The command's own entry (facts may also hold due work done first) and the balance after. */
  | { kind: 'ledger.entry'; entry: LedgerEntry; balance: Balance }
  | { kind: 'ledger.cancelled'; entryId: string; balance: Balance }
  /** Ids of the credits confirmed and of the expiry entries recorded; when to run again. */
  | { kind: 'ledger.settled'; confirmed: string[]; expired: string[]; nextDueMs: number | null };

export type LedgerDecision =
  | { ok: true; facts: LedgerFact[]; reply: LedgerReply }
  | { ok: false; code: ErrorCode; message?: string; param?: string };

// ---------------------------------------------------------------------------------------------
// decide

function fail(code: ErrorCode, message: string, param?: string): LedgerDecision {
  return { ok: false, code, message, param };
}

export function emptyLedger(): LedgerState {
  return { books: [] };
}

/**
 * A private copy to evolve: decide() never modifies its state, evolve() does (lots and pending
 * credits in place). cloneBook copies every field of a book; a new field of CurrencyBook, Lot or
 * PendingCredit must be copied there too (test/unit/ledger.test.ts checks that the copy is equal
 * and shares no object). Several times cheaper than structuredClone on the hot path.
 */
export function cloneLedger(state: LedgerState): LedgerState {
  return { books: state.books.map(cloneBook) };
}

/**
 * Decides one command against the state (not modified). Every command on a currency first runs the
 * due work of that currency at ctx.nowMs (confirmations, then expiries), so a spend never uses a lot
 * that has expired by now even when the scheduler is late; those facts come first. Checks, in order:
 * currency, amount, reason, source, expires_at, confirm_after, then the balance (a spend always
 * needs the available balance; a negative adjustment only under 'forbid').
 */
export function decide(state: LedgerState, cmd: LedgerCommand, currencies: readonly CurrencyConfig[], ctx: LedgerCtx): LedgerDecision {
  if (cmd.kind === 'ledger.confirm_due' || cmd.kind === 'ledger.expire_due' || cmd.kind === 'ledger.run_due') {
    const confirm = cmd.kind !== 'ledger.expire_due';
    const expire = cmd.kind !== 'ledger.confirm_due';
    const facts: LedgerFact[] = [];
    let nextDue: number | null = null;
    for (const original of state.books) {
      const due = bookNextDueMs(original);
      if (due === null || due > ctx.nowMs) {
        nextDue = minDue(nextDue, due);
        continue; // nothing due: no clone
      }
      const book = cloneBook(original);
      settleDue(book, ctx, confirm, expire, facts);
      nextDue = minDue(nextDue, bookNextDueMs(book));
    }
    const confirmed: string[] = [];
    const expired: string[] = [];
    for (const f of facts) {
      if (f.kind === 'ledger.pending_confirmed') confirmed.push(f.entryId);
      else if (f.kind === 'ledger.entry_recorded') expired.push(f.entry.id);
    }
    return { ok: true, facts, reply: { kind: 'ledger.settled', confirmed, expired, nextDueMs: nextDue } };
  }

  const currency = currencies.find((c) => c.key === cmd.currency);
  if (currency === undefined) return fail('validation_failed', `No currency with key ${JSON.stringify(cmd.currency)}.`, 'currency');
  if (!validCurrency(currency)) return fail('validation_failed', 'The currency definition is not valid.', 'currency');
  const original = findBook(state, cmd.currency);
  const book = original === undefined ? emptyBook(cmd.currency) : cloneBook(original);

  if (cmd.kind === 'ledger.cancel_pending') {
    const bad = checkText(cmd.reason, false, ledgerLimits.reasonCharsMax, 'reason');
    if (bad) return bad;
    const facts: LedgerFact[] = [];
    settleDue(book, ctx, true, true, facts);
    const p = book.pending.find((x) => x.entryId === cmd.entryId);
    if (p === undefined) return fail('invalid_state', 'No pending entry with this id (confirmed, cancelled or unknown).', 'entry_id');
    const fact: LedgerFact = {
      kind: 'ledger.pending_cancelled',
      currency: cmd.currency,
      entryId: p.entryId,
      amount: p.amount,
      reason: cmd.reason,
      atMs: ctx.nowMs,
    };
    applyToBook(book, fact);
    facts.push(fact);
    return { ok: true, facts, reply: { kind: 'ledger.cancelled', entryId: p.entryId, balance: bookBalance(book) } };
  }

  // Amount: a safe integer within bounds; sign by kind.
  const amount = cmd.amount;
  if (!Number.isSafeInteger(amount) || Math.abs(amount) > ledgerLimits.amountMinorMax) {
    return fail('validation_failed', `amount must be an integer of at most ${ledgerLimits.amountMinorMax} in minor units.`, 'amount');
  }
  if (cmd.kind === 'ledger.adjust' ? amount === 0 : amount <= 0) {
    return fail('validation_failed', cmd.kind === 'ledger.adjust' ? 'amount must not be 0.' : 'amount must be positive.', 'amount');
  }
  const reasonBad = checkText(cmd.reason, cmd.kind === 'ledger.adjust', ledgerLimits.reasonCharsMax, 'reason');
  if (reasonBad) return reasonBad;
  const sourceType = cmd.kind === 'ledger.adjust' ? (cmd.sourceType ?? null) : cmd.sourceType;
  const sourceId = cmd.kind === 'ledger.adjust' ? (cmd.sourceId ?? null) : cmd.sourceId;
  const needSource = cmd.kind === 'ledger.spend';
  const stBad = checkText(sourceType, needSource, ledgerLimits.sourceCharsMax, 'source_type');
  if (stBad) return stBad;
  const siBad = checkText(sourceId, needSource, ledgerLimits.sourceCharsMax, 'source_id');
  if (siBad) return siBad;

  const facts: LedgerFact[] = [];
  const isCredit = amount > 0 && cmd.kind !== 'ledger.spend';
  if (!isCredit) {
    if (cmd.kind === 'ledger.adjust') {
      if (cmd.expiresAtMs !== undefined && cmd.expiresAtMs !== null) return fail('validation_failed', 'A debit has no expires_at.', 'expires_at');
      if (cmd.confirmAfterMs !== undefined && cmd.confirmAfterMs !== null) return fail('validation_failed', 'A debit has no confirm_after.', 'confirm_after');
    }
    const size = Math.abs(amount);
    settleDue(book, ctx, true, true, facts);
    const available = bookAvailable(book);
    // Only a manual adjustment obeys negative_balance (spec 2.4); a spend (a reward's price) never
    // goes below what is available, whatever the policy (spec part 3: insufficient_balance).
    if ((cmd.kind === 'ledger.spend' || currency.negativeBalance === 'forbid') && available < size) {
      return fail('insufficient_balance', `Available ${available}, needed ${size}.`, 'amount');
    }
    if (!Number.isSafeInteger(book.debt + size)) return fail('validation_failed', 'The debt would leave the safe integer range.', 'amount');
    const { allocations, shortfall } = allocate(book.lots, size);
    const entry: LedgerEntry = {
      id: ctx.newId(entryIdPrefix),
      currency: cmd.currency,
      type: cmd.kind === 'ledger.spend' ? 'spend' : 'adjustment',
      status: 'posted',
      amount: -size,
      remaining: 0,
      expiresAtMs: null,
      confirmAfterMs: null,
      reason: cmd.reason,
      sourceType,
      sourceId,
      reversesEntryId: null,
      createdAtMs: ctx.nowMs,
      allocations,
      debtPaid: 0,
      debtIncurred: shortfall,
    };
    return record(book, facts, entry);
  }

  // Credits: award, positive adjustment, reversal.
  if (cmd.kind === 'ledger.reverse') {
    const bad = checkText(cmd.reversesEntryId, true, ledgerLimits.sourceCharsMax, 'entry_id');
    if (bad) return bad;
  }
  const confirmAfterIn = cmd.kind === 'ledger.reverse' ? null : (cmd.confirmAfterMs ?? null);
  const expiresAtIn = cmd.expiresAtMs;
  if (expiresAtIn !== undefined && expiresAtIn !== null && !Number.isSafeInteger(expiresAtIn)) {
    return fail('validation_failed', 'expires_at is not a valid time.', 'expires_at');
  }
  if (confirmAfterIn !== null && !Number.isSafeInteger(confirmAfterIn)) {
    return fail('validation_failed', 'confirm_after is not a valid time.', 'confirm_after');
  }
  const pending = confirmAfterIn !== null && confirmAfterIn > ctx.nowMs;
  const availableFromMs = pending ? confirmAfterIn : ctx.nowMs;
  const expiresAtMs =
    expiresAtIn === undefined ? (currency.expiryDays === null ? null : availableFromMs + currency.expiryDays * dayMs) : expiresAtIn;
  if (expiresAtMs !== null && expiresAtMs <= availableFromMs) {
    return fail('validation_failed', pending ? 'expires_at must be after confirm_after.' : 'expires_at must be in the future.', 'expires_at');
  }
  settleDue(book, ctx, true, true, facts);
  const pendingTotal = sumPending(book);
  if (!Number.isSafeInteger(sumLots(book) + pendingTotal + amount) || !Number.isSafeInteger(book.lifetimeEarned + pendingTotal + amount)) {
    return fail('validation_failed', 'The balance would leave the safe integer range.', 'amount');
  }
  const debtPaid = pending ? 0 : Math.min(book.debt, amount);
  const entry: LedgerEntry = {
    id: ctx.newId(entryIdPrefix),
    currency: cmd.currency,
    type: cmd.kind === 'ledger.award' ? 'award' : cmd.kind === 'ledger.adjust' ? 'adjustment' : 'reversal',
    status: pending ? 'pending' : 'posted',
    amount,
    remaining: amount - debtPaid,
    expiresAtMs,
    confirmAfterMs: confirmAfterIn,
    reason: cmd.reason,
    sourceType,
    sourceId,
    reversesEntryId: cmd.kind === 'ledger.reverse' ? cmd.reversesEntryId : null,
    createdAtMs: ctx.nowMs,
    allocations: [],
    debtPaid,
    debtIncurred: 0,
  };
  return record(book, facts, entry);
}

function record(book: CurrencyBook, facts: LedgerFact[], entry: LedgerEntry): LedgerDecision {
  const fact: LedgerFact = { kind: 'ledger.entry_recorded', entry };
  applyToBook(book, fact);
  facts.push(fact);
  return { ok: true, facts, reply: { kind: 'ledger.entry', entry, balance: bookBalance(book) } };
}

function checkText(value: string | null | undefined, required: boolean, max: number, param: string): LedgerDecision | null {
  if (value === null || value === undefined || value === '') {
    return required ? fail('validation_failed', `${param} is required.`, param) : null;
  }
  if (typeof value !== 'string' || value.length > max) return fail('validation_failed', `${param} is at most ${max} characters.`, param);
  return null;
}

function validCurrency(c: CurrencyConfig): boolean {
  if (c.negativeBalance !== 'forbid' && c.negativeBalance !== 'allow') return false;
  if (c.expiryDays === null) return true;
  return Number.isSafeInteger(c.expiryDays) && c.expiryDays > 0 && c.expiryDays <= ledgerLimits.expiryDaysMax;
}

/** Takes `size` from the lots in their (spending) order; what they cannot cover is the shortfall. */
function allocate(lots: readonly Lot[], size: number): { allocations: Allocation[]; shortfall: number } {
  const allocations: Allocation[] = [];
  let left = size;
  for (const lot of lots) {
    if (left === 0) break;
    const take = Math.min(lot.remaining, left);
    allocations.push({ entryId: lot.entryId, amount: take, remainingAfter: lot.remaining - take });
    left -= take;
  }
  return { allocations, shortfall: left };
}

/**
 * Due work of one book at ctx.nowMs, applied to `book` (a clone) and appended to `facts`:
 * confirmations in confirm_after order (each pays off debt first), then one expiry entry per lot
 * whose expires_at <= now, earliest first.
 */
function settleDue(book: CurrencyBook, ctx: LedgerCtx, confirm: boolean, expire: boolean, facts: LedgerFact[]): void {
  const now = ctx.nowMs;
  if (confirm) {
    const due = book.pending.filter((p) => p.confirmAfterMs <= now);
    due.sort((a, b) => a.confirmAfterMs - b.confirmAfterMs); // stable: ties keep recording order
    for (const p of due) {
      const debtPaid = Math.min(book.debt, p.amount);
      const fact: LedgerFact = {
        kind: 'ledger.pending_confirmed',
        currency: book.currency,
        entryId: p.entryId,
        type: p.type,
        amount: p.amount,
        remaining: p.amount - debtPaid,
        debtPaid,
        expiresAtMs: p.expiresAtMs,
        createdAtMs: p.createdAtMs,
        atMs: now,
      };
      applyToBook(book, fact);
      facts.push(fact);
    }
  }
  if (expire) {
    const due = book.lots.filter((l) => l.expiresAtMs !== null && l.expiresAtMs <= now);
    for (const lot of due) {
      const entry: LedgerEntry = {
        id: ctx.newId(entryIdPrefix),
        currency: book.currency,
        type: 'expiry',
        status: 'posted',
        amount: -lot.remaining,
        remaining: 0,
        expiresAtMs: lot.expiresAtMs,
        confirmAfterMs: null,
        reason: null,
        sourceType: 'ledger_entry',
        sourceId: lot.entryId,
        reversesEntryId: null,
        createdAtMs: now,
        allocations: [{ entryId: lot.entryId, amount: lot.remaining, remainingAfter: 0 }],
        debtPaid: 0,
        debtIncurred: 0,
      };
      const fact: LedgerFact = { kind: 'ledger.entry_recorded', entry };
      applyToBook(book, fact);
      facts.push(fact);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Merges: a merged customer's ledger moves to its survivor

/** Source type of the transfer entries of a merge; the source id names the other customer. */
export const mergeSourceType = 'customer_merge';

/** What one currency of a merged customer hands to its survivor (what its transfer facts moved out). */
export interface BookHandover {
  currency: string;
  /** The open lots, in spending order: what was left of each and when it expires. */
  lots: Array<{ remaining: number; expiresAtMs: number | null }>;
  /** The credits still pending, in recording order. */
  pending: Array<{ type: EntryType; amount: number; confirmAfterMs: number; expiresAtMs: number | null }>;
  debt: number;
  lifetimeEarned: number;
  /** Earnings by UTC day (feeds the survivor's rolling tier windows). */
  earned: Array<[number, number]>;
}

/**
 * The merged customer's side of a merge, per currency: its due work first (nothing expired or due
 * is handed over as it was), then one transfer debit of every open lot, each pending credit
 * cancelled, and a transfer credit paying off its debt, so it holds nothing afterwards. Its own
 * lifetime earned stays (it never decreases); the handover carries it to the survivor as well.
 */
export function handOverBooks(state: LedgerState, survivorId: string, ctx: LedgerCtx): { facts: LedgerFact[]; handover: BookHandover[] } {
  const facts: LedgerFact[] = [];
  const handover: BookHandover[] = [];
  const reason = `Merged into ${survivorId}.`;
  for (const original of state.books) {
    const book = cloneBook(original);
    settleDue(book, ctx, true, true, facts);
    if (book.lots.length === 0 && book.pending.length === 0 && book.debt === 0 && book.lifetimeEarned === 0) continue;
    handover.push({
      currency: book.currency,
      lots: book.lots.map((l) => ({ remaining: l.remaining, expiresAtMs: l.expiresAtMs })),
      pending: book.pending.map((p) => ({ type: p.type, amount: p.amount, confirmAfterMs: p.confirmAfterMs, expiresAtMs: p.expiresAtMs })),
      debt: book.debt,
      lifetimeEarned: book.lifetimeEarned,
      earned: (book.earned ?? []).map((d): [number, number] => [d[0], d[1]]),
    });
    const held = sumLots(book);
    if (held > 0) {
      const { allocations } = allocate(book.lots, held);
      push(book, facts, transferEntry(ctx, book.currency, -held, null, reason, survivorId, { allocations }));
    }
    for (const p of [...book.pending]) {
      const fact: LedgerFact = { kind: 'ledger.pending_cancelled', currency: book.currency, entryId: p.entryId, amount: p.amount, reason, atMs: ctx.nowMs };
      applyToBook(book, fact);
      facts.push(fact);
    }
    if (book.debt > 0) push(book, facts, transferEntry(ctx, book.currency, book.debt, null, reason, survivorId, { debtPaid: book.debt }));
  }
  return { facts, handover };
}

/**
 * The survivor's side: per currency, a transfer credit for each lot the merged customer held
 * (same remainder and expiry; it pays off the survivor's debt first, like any credit), its pending
 * credits again (same kind, confirm_after and expiry), a transfer debit of its debt (spent from
 * the survivor's lots, the rest owed), and its earnings joined (lifetime earned, earnings by day).
 */
export function absorbBooks(state: LedgerState, handover: readonly BookHandover[], fromId: string, ctx: LedgerCtx): LedgerFact[] {
  const facts: LedgerFact[] = [];
  const reason = `Merged from ${fromId}.`;
  for (const h of handover) {
    const original = findBook(state, h.currency);
    const book = original === undefined ? emptyBook(h.currency) : cloneBook(original);
    settleDue(book, ctx, true, true, facts);
    for (const lot of h.lots) {
      const debtPaid = Math.min(book.debt, lot.remaining);
      push(book, facts, transferEntry(ctx, h.currency, lot.remaining, lot.expiresAtMs, reason, fromId, { debtPaid }));
    }
    for (const p of h.pending) {
      const entry: LedgerEntry = {
        ...transferEntry(ctx, h.currency, p.amount, p.expiresAtMs, reason, fromId, {}),
        type: p.type,
        status: 'pending',
        confirmAfterMs: p.confirmAfterMs,
      };
      push(book, facts, entry);
    }
    if (h.debt > 0) {
      const { allocations, shortfall } = allocate(book.lots, h.debt);
      push(book, facts, transferEntry(ctx, h.currency, -h.debt, null, reason, fromId, { allocations, debtIncurred: shortfall }));
    }
    if (h.lifetimeEarned > 0 || h.earned.length > 0) {
      const fact: LedgerFact = { kind: 'ledger.earnings_merged', currency: h.currency, from: fromId, lifetimeEarned: h.lifetimeEarned, earned: h.earned };
      applyToBook(book, fact);
      facts.push(fact);
    }
  }
  return facts;
}

/** A posted transfer entry: a credit (amount > 0, its remainder after debtPaid) or a debit with its allocations. */
function transferEntry(
  ctx: LedgerCtx,
  currency: string,
  amount: number,
  expiresAtMs: number | null,
  reason: string,
  otherCustomerId: string,
  parts: { allocations?: Allocation[]; debtPaid?: number; debtIncurred?: number },
): LedgerEntry {
  const debtPaid = parts.debtPaid ?? 0;
  return {
    id: ctx.newId(entryIdPrefix),
    currency,
    type: 'transfer',
    status: 'posted',
    amount,
    remaining: amount > 0 ? amount - debtPaid : 0,
    expiresAtMs,
    confirmAfterMs: null,
    reason,
    sourceType: mergeSourceType,
    sourceId: otherCustomerId,
    reversesEntryId: null,
    createdAtMs: ctx.nowMs,
    allocations: parts.allocations ?? [],
    debtPaid,
    debtIncurred: parts.debtIncurred ?? 0,
  };
}

function push(book: CurrencyBook, facts: LedgerFact[], entry: LedgerEntry): void {
  const fact: LedgerFact = { kind: 'ledger.entry_recorded', entry };
  applyToBook(book, fact);
  facts.push(fact);
}

// ---------------------------------------------------------------------------------------------
// evolve

/**
 * Applies one fact, trusting its numbers (decide computed them). Mutates and returns the state,
 * like the customer mechanic: the engine owns the only reference.
 */
export function evolve(state: LedgerState, fact: LedgerFact): LedgerState {
  const currency = fact.kind === 'ledger.entry_recorded' ? fact.entry.currency : fact.currency;
  let book = findBook(state, currency);
  if (book === undefined) {
    book = emptyBook(currency);
    state.books.push(book);
  }
  applyToBook(book, fact);
  return state;
}

export function isLedgerFact(fact: { kind: string }): fact is LedgerFact {
  return (
    fact.kind === 'ledger.entry_recorded' ||
    fact.kind === 'ledger.pending_confirmed' ||
    fact.kind === 'ledger.pending_cancelled' ||
    fact.kind === 'ledger.earnings_merged'
  );
}

function applyToBook(book: CurrencyBook, fact: LedgerFact): void {
  switch (fact.kind) {
    case 'ledger.entry_recorded': {
      const e = fact.entry;
      if (e.status === 'pending') {
        book.pending.push({
          entryId: e.id,
          type: e.type,
          amount: e.amount,
          confirmAfterMs: e.confirmAfterMs ?? e.createdAtMs,
          expiresAtMs: e.expiresAtMs,
          createdAtMs: e.createdAtMs,
        });
        return;
      }
      if (e.amount > 0) {
        postCredit(book, e.id, e.type, e.amount, e.remaining, e.debtPaid, e.expiresAtMs, e.createdAtMs, e.createdAtMs);
        return;
      }
      let emptied = false;
      for (const a of e.allocations) {
        const lot = book.lots.find((l) => l.entryId === a.entryId);
        if (lot === undefined) continue;
        lot.remaining = a.remainingAfter;
        if (lot.remaining === 0) emptied = true;
      }
      if (emptied) book.lots = book.lots.filter((l) => l.remaining > 0);
      book.debt += e.debtIncurred;
      return;
    }
    case 'ledger.pending_confirmed': {
      book.pending = book.pending.filter((p) => p.entryId !== fact.entryId);
      postCredit(book, fact.entryId, fact.type, fact.amount, fact.remaining, fact.debtPaid, fact.expiresAtMs, fact.createdAtMs, fact.atMs);
      return;
    }
    case 'ledger.pending_cancelled':
      book.pending = book.pending.filter((p) => p.entryId !== fact.entryId);
      return;
    case 'ledger.earnings_merged':
      book.lifetimeEarned += fact.lifetimeEarned;
      for (const [day, amount] of fact.earned) addEarned(book, day, amount);
      return;
  }
}

function postCredit(
  book: CurrencyBook,
  entryId: string,
  type: EntryType,
  amount: number,
  remaining: number,
  debtPaid: number,
  expiresAtMs: number | null,
  createdAtMs: number,
  postedAtMs: number,
): void {
  book.debt -= debtPaid;
  if (type === 'award' || type === 'adjustment') {
    book.lifetimeEarned += amount;
    addEarned(book, Math.floor(postedAtMs / dayMs), amount);
  }
  if (remaining > 0) insertLot(book.lots, { entryId, amount, remaining, expiresAtMs, createdAtMs });
}

/** Adds to the day's earnings and drops days older than earnedDaysKept before the newest. */
function addEarned(book: CurrencyBook, day: number, amount: number): void {
  const e = (book.earned ??= []);
  let i = e.length;
  while (i > 0 && e[i - 1]![0] > day) i--;
  if (i > 0 && e[i - 1]![0] === day) e[i - 1]![1] += amount;
  else e.splice(i, 0, [day, amount]);
  const newest = e[e.length - 1]![0];
  let drop = 0;
  while (drop < e.length && e[drop]![0] <= newest - earnedDaysKept) drop++;
  if (drop > 0) e.splice(0, drop);
}

/**
 * What a customer earned in one currency over the last `days` UTC days, today included (as of
 * nowMs). `days` beyond earnedDaysKept counts only the days kept.
 */
export function earnedInDays(state: LedgerState, currency: string, days: number, nowMs: number): number {
  const b = findBook(state, currency);
  if (b?.earned === undefined) return 0;
  const from = Math.floor(nowMs / dayMs) - days;
  let sum = 0;
  for (const [day, amount] of b.earned) if (day > from) sum += amount;
  return sum;
}

/** Spending order: expiry ascending, no expiry last, then creation time; equal keys keep insertion order. */
function lotBefore(a: Lot, b: Lot): boolean {
  const ea = a.expiresAtMs ?? Number.POSITIVE_INFINITY;
  const eb = b.expiresAtMs ?? Number.POSITIVE_INFINITY;
  if (ea !== eb) return ea < eb;
  return a.createdAtMs < b.createdAtMs;
}

function insertLot(lots: Lot[], lot: Lot): void {
  // Upper bound: after every lot that is not strictly after the new one.
  let lo = 0;
  let hi = lots.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (lotBefore(lot, lots[mid]!)) hi = mid;
    else lo = mid + 1;
  }
  lots.splice(lo, 0, lot);
}

// ---------------------------------------------------------------------------------------------
// Queries

function findBook(state: LedgerState, currency: string): CurrencyBook | undefined {
  return state.books.find((b) => b.currency === currency);
}

function emptyBook(currency: string): CurrencyBook {
  return { currency, lots: [], pending: [], debt: 0, lifetimeEarned: 0 };
}

function cloneBook(b: CurrencyBook): CurrencyBook {
  return {
    currency: b.currency,
    lots: b.lots.map((l) => ({ ...l })),
    pending: b.pending.map((p) => ({ ...p })),
    debt: b.debt,
    lifetimeEarned: b.lifetimeEarned,
    ...(b.earned === undefined ? {} : { earned: b.earned.map((d): [number, number] => [d[0], d[1]]) }),
  };
}

function sumLots(b: CurrencyBook): number {
  let s = 0;
  for (const l of b.lots) s += l.remaining;
  return s;
}

function sumPending(b: CurrencyBook): number {
  let s = 0;
  for (const p of b.pending) s += p.amount;
  return s;
}

function bookAvailable(b: CurrencyBook): number {
  return sumLots(b) - b.debt;
}

function bookBalance(b: CurrencyBook): Balance {
  return { currency: b.currency, available: bookAvailable(b), pending: sumPending(b), lifetimeEarned: b.lifetimeEarned };
}

function bookNextDueMs(b: CurrencyBook): number | null {
  let next: number | null = null;
  for (const p of b.pending) next = minDue(next, p.confirmAfterMs);
  // Lots are in expiry order with the no-expiry ones last: the first one decides.
  const first = b.lots[0];
  if (first !== undefined && first.expiresAtMs !== null) next = minDue(next, first.expiresAtMs);
  return next;
}

function minDue(a: number | null, b: number | null): number | null {
  if (a === null) return b;
  if (b === null) return a;
  return Math.min(a, b);
}

const noIds: LedgerCtx['newId'] = () => '';

/** As the book would be after the due work at nowMs (state untouched). */
function bookAt(b: CurrencyBook, nowMs: number | undefined): CurrencyBook {
  if (nowMs === undefined) return b;
  const due = bookNextDueMs(b);
  if (due === null || due > nowMs) return b;
  const copy = cloneBook(b);
  settleDue(copy, { nowMs, newId: noIds }, true, true, []);
  return copy;
}

/**
 * Balances of every currency the customer touched, by currency key. With nowMs, as of that time
 * (due confirmations and expiries counted even if the scheduler has not run them yet).
 */
export function balances(state: LedgerState, nowMs?: number): Balance[] {
  const out = state.books.map((b) => bookBalance(bookAt(b, nowMs)));
  out.sort((a, b) => (a.currency < b.currency ? -1 : a.currency > b.currency ? 1 : 0));
  return out;
}

/** One currency's balance (zeros for a currency never touched). */
export function balanceOf(state: LedgerState, currency: string, nowMs?: number): Balance {
  const b = findBook(state, currency);
  return b === undefined ? bookBalance(emptyBook(currency)) : bookBalance(bookAt(b, nowMs));
}

/** The earliest confirm_after or lot expiry over all currencies: when the scheduler should wake the actor. */
export function nextDueMs(state: LedgerState): number | null {
  let next: number | null = null;
  for (const b of state.books) next = minDue(next, bookNextDueMs(b));
  return next;
}

// ---------------------------------------------------------------------------------------------
// Projection: what each fact does to the ledger_entries rows

export type EntryRowChange =
  | { op: 'insert'; entry: LedgerEntry }
  /** Sets the row's remaining and, when given, its status. */
  | { op: 'update'; id: string; remaining: number; status: EntryStatus | null };

/** Row changes for the projector, from the fact alone. */
export function entryRowChanges(fact: LedgerFact): EntryRowChange[] {
  switch (fact.kind) {
    case 'ledger.entry_recorded': {
      const out: EntryRowChange[] = [{ op: 'insert', entry: fact.entry }];
      const expiry = fact.entry.type === 'expiry';
      for (const a of fact.entry.allocations) {
        out.push({ op: 'update', id: a.entryId, remaining: a.remainingAfter, status: expiry ? 'expired' : null });
      }
      return out;
    }
    case 'ledger.pending_confirmed':
      return [{ op: 'update', id: fact.entryId, remaining: fact.remaining, status: 'posted' }];
    case 'ledger.pending_cancelled':
      return [{ op: 'update', id: fact.entryId, remaining: 0, status: 'cancelled' }];
    case 'ledger.earnings_merged':
      return [];
  }
}
