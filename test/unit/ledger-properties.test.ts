// Property tests of the ledger (fast-check): random command sequences over three currencies (forbid,
// allow, forbid with expiry_days), with awards with and without expiry and confirm_after, spends,
// adjustments of either sign, reversals, pending cancels and time advances with the due work.
// After every step the state is checked against an independent projection of the entry rows
// (built only from entryRowChanges), and at the end a replay (evolve only) must rebuild it exactly.
import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import { pack, unpack } from 'msgpackr';
import t from 'tap';
import {
  absorbBooks,
  balanceOf,
  type CurrencyConfig,
  decide,
  emptyLedger,
  entryRowChanges,
  type EntryStatus,
  evolve,
  type LedgerCommand,
  type LedgerEntry,
  type LedgerFact,
  type LedgerState,
  handOverBooks,
  mergeSourceType,
  nextDueMs,
} from '../../src/domain/ledger.js';

const hour = 3_600_000;
// Times move on a 6-hour grid so that "due exactly now" happens often.
const hours = (min: number, max: number) => fc.integer({ min: min / 6, max: max / 6 }).map((n) => n * 6 * hour);
const currencies: CurrencyConfig[] = [
  { key: 'pts', negativeBalance: 'forbid', expiryDays: null },
  { key: 'coins', negativeBalance: 'allow', expiryDays: null },
  { key: 'stars', negativeBalance: 'forbid', expiryDays: 2 },
];
const keys = currencies.map((c) => c.key);
const policy = (key: string) => currencies.find((c) => c.key === key)!.negativeBalance;

type Step =
  | { kind: 'advance'; ms: number }
  | { kind: 'award'; currency: string; amount: number; expiryInMs: number | null | undefined; confirmInMs: number | undefined }
  | { kind: 'adjust'; currency: string; amount: number }
  | { kind: 'spend'; currency: string; amount: number }
  | { kind: 'reverse'; currency: string; amount: number }
  | { kind: 'cancel'; pick: number }
  | { kind: 'due'; which: 'ledger.run_due' | 'ledger.confirm_due' | 'ledger.expire_due' };

const currencyArb = fc.constantFrom(...keys);
const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: hours(0, 72) }) },
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant('award' as const),
      currency: currencyArb,
      amount: fc.integer({ min: 1, max: 1000 }),
      // undefined: the currency default; null: never; a number: that long after it becomes available
      expiryInMs: fc.option(fc.option(hours(6, 120), { nil: null }), { nil: undefined }),
      confirmInMs: fc.option(hours(0, 72), { nil: undefined }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('adjust' as const),
      currency: currencyArb,
      amount: fc.integer({ min: -1500, max: 1500 }).filter((n) => n !== 0),
    }),
  },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('spend' as const), currency: currencyArb, amount: fc.integer({ min: 1, max: 1500 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('reverse' as const), currency: currencyArb, amount: fc.integer({ min: 1, max: 500 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('cancel' as const), pick: fc.nat() }) },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('due' as const),
      which: fc.constantFrom('ledger.run_due' as const, 'ledger.confirm_due' as const, 'ledger.expire_due' as const),
    }),
  },
);

function toCommand(step: Step, now: number, state: LedgerState): LedgerCommand | null {
  switch (step.kind) {
    case 'advance':
      return null;
    case 'award': {
      const confirmAfterMs = step.confirmInMs === undefined ? undefined : now + step.confirmInMs;
      const from = Math.max(now, confirmAfterMs ?? now);
      const expiresAtMs = step.expiryInMs === undefined ? undefined : step.expiryInMs === null ? null : from + step.expiryInMs;
      return { kind: 'ledger.award', currency: step.currency, amount: step.amount, reason: null, sourceType: 'rule_execution', sourceId: 'rx', expiresAtMs, confirmAfterMs };
    }
    case 'adjust':
      return { kind: 'ledger.adjust', currency: step.currency, amount: step.amount, reason: 'manual' };
    case 'spend':
      return { kind: 'ledger.spend', currency: step.currency, amount: step.amount, reason: null, sourceType: 'reward_issuance', sourceId: 'iss' };
    case 'reverse':
      return { kind: 'ledger.reverse', currency: step.currency, amount: step.amount, reversesEntryId: 'led_x', reason: null, sourceType: null, sourceId: null };
    case 'cancel': {
      const all = state.books.flatMap((b) => b.pending.map((p) => ({ currency: b.currency, id: p.entryId })));
      const p = all.length === 0 ? { currency: 'pts', id: 'led_none' } : all[step.pick % all.length]!;
      return { kind: 'ledger.cancel_pending', currency: p.currency, entryId: p.id, reason: null };
    }
    case 'due':
      return { kind: step.which };
  }
}

/** The entry rows as the projector would hold them, built from entryRowChanges alone. */
interface Row {
  entry: LedgerEntry;
  remaining: number;
  status: EntryStatus;
}

class Failure extends Error {}
function check(ok: boolean, what: string): void {
  if (!ok) throw new Failure(what);
}

function runSequence(steps: Step[]): void {
  let idSeq = 0;
  const newId = (prefix: string) => `${prefix}_${String(++idSeq).padStart(6, '0')}`;
  let now = 1_000_000;
  let state = emptyLedger();
  const facts: LedgerFact[] = [];
  const rows = new Map<string, Row>();
  const debt = new Map<string, number>(keys.map((k) => [k, 0]));
  const lifetimeSeen = new Map<string, number>(keys.map((k) => [k, 0]));

  for (const step of steps) {
    if (step.kind === 'advance') {
      // The balance as of a later time equals the balance after running the due work then.
      const later = now + step.ms;
      const projected = keys.map((k) => balanceOf(state, k, later));
      const probe = decide(state, { kind: 'ledger.run_due' }, currencies, { nowMs: later, newId: () => 'probe' });
      check(probe.ok, 'run_due never fails');
      if (probe.ok) {
        const copy = structuredClone(state);
        for (const f of probe.facts) evolve(copy, f);
        check(JSON.stringify(keys.map((k) => balanceOf(copy, k))) === JSON.stringify(projected), 'balanceOf(nowMs) = balance after run_due');
      }
      now = later;
      continue;
    }
    const cmd = toCommand(step, now, state)!;
    const before = JSON.stringify(state);
    const availableBefore = 'currency' in cmd ? balanceOf(state, cmd.currency, now).available : 0;
    const d = decide(state, cmd, currencies, { nowMs: now, newId });
    check(JSON.stringify(state) === before, 'decide does not modify the state');
    if (!d.ok) {
      if (d.code === 'insufficient_balance') {
        check(cmd.kind === 'ledger.spend' || cmd.kind === 'ledger.adjust', 'only debits are refused for balance');
        const c = (cmd as { currency: string }).currency;
        const size = Math.abs((cmd as { amount: number }).amount);
        check(
          (cmd.kind === 'ledger.spend' || policy(c) === 'forbid') && size > availableBefore,
          'refused only beyond the available balance, and an adjustment only under forbid',
        );
      } else {
        check(d.code === 'invalid_state' && cmd.kind === 'ledger.cancel_pending', `unexpected failure ${d.code} ${d.message}`);
      }
      continue;
    }
    if (cmd.kind === 'ledger.spend' || (cmd.kind === 'ledger.adjust' && cmd.amount < 0)) {
      check(
        (cmd.kind === 'ledger.adjust' && policy(cmd.currency) === 'allow') || Math.abs(cmd.amount) <= availableBefore,
        'a spend, and a forbid adjustment, only within the available balance',
      );
    }

    for (const f of d.facts) {
      // Spending order: a debit consumes a prefix of the lots in their stored order.
      if (f.kind === 'ledger.entry_recorded' && f.entry.amount < 0) {
        const e = f.entry;
        const lotsNow = state.books.find((b) => b.currency === e.currency)?.lots ?? [];
        check(e.allocations.every((a, i) => a.entryId === lotsNow[i]?.entryId), 'allocations follow the lot order');
        check(e.allocations.every((a, i) => a.remainingAfter === lotsNow[i]!.remaining - a.amount), 'allocations take from the remainder');
        check(e.allocations.slice(0, -1).every((a) => a.remainingAfter === 0), 'a later lot is touched only when the earlier ones are empty');
        check(e.allocations.every((a) => a.amount > 0), 'no empty allocation');
        const covered = e.allocations.reduce((s, a) => s + a.amount, 0);
        check(covered + e.debtIncurred === -e.amount, 'a debit is covered by lots plus new debt');
        if (e.debtIncurred > 0) check(e.allocations.length === lotsNow.length, 'debt only once every lot is empty');
        if (e.type === 'expiry') check(e.expiresAtMs !== null && e.expiresAtMs <= now, 'only due lots expire');
      }
      // The independent projection.
      for (const ch of entryRowChanges(f)) {
        if (ch.op === 'insert') {
          check(!rows.has(ch.entry.id), 'entry ids are unique');
          rows.set(ch.entry.id, { entry: ch.entry, remaining: ch.entry.remaining, status: ch.entry.status });
        } else {
          const row = rows.get(ch.id);
          check(row !== undefined, 'updates name a known row');
          row!.remaining = ch.remaining;
          if (ch.status !== null) row!.status = ch.status;
        }
      }
      if (f.kind === 'ledger.entry_recorded') {
        debt.set(f.entry.currency, debt.get(f.entry.currency)! + f.entry.debtIncurred - f.entry.debtPaid);
      } else if (f.kind === 'ledger.pending_confirmed') {
        debt.set(f.currency, debt.get(f.currency)! - f.debtPaid);
      }
      state = evolve(state, f);
      facts.push(f);
    }

    // Due work of the command's currency (or every currency) is done as of now.
    const settled = 'currency' in cmd ? state.books.filter((b) => b.currency === cmd.currency) : cmd.kind === 'ledger.run_due' ? state.books : [];
    for (const b of settled) {
      check(b.pending.every((p) => p.confirmAfterMs > now), 'no due pending credit left');
      check(b.lots.every((l) => l.expiresAtMs === null || l.expiresAtMs > now), 'no due lot left');
    }
    checkInvariants(state, rows, debt, lifetimeSeen);
  }

  // Replay (evolve only, from empty, after a msgpack round trip of the facts) rebuilds the same state,
  // and the state itself survives a msgpack round trip (snapshot).
  let replayed = emptyLedger();
  for (const f of unpack(pack(facts)) as LedgerFact[]) replayed = evolve(replayed, f);
  check(isDeepStrictEqual(replayed, state), 'replay rebuilds the identical state');
  check(isDeepStrictEqual(unpack(pack(state)), state), 'the state survives a msgpack round trip');
}

function checkInvariants(state: LedgerState, rows: Map<string, Row>, debt: Map<string, number>, lifetimeSeen: Map<string, number>): void {
  let expectedNextDue: number | null = null;
  for (const key of keys) {
    const b = state.books.find((x) => x.currency === key);
    const bal = balanceOf(state, key);
    const lotsSum = b ? b.lots.reduce((s, l) => s + l.remaining, 0) : 0;
    const bookDebt = b ? b.debt : 0;
    const mine = [...rows.values()].filter((r) => r.entry.currency === key);

    for (const n of [bal.available, bal.pending, bal.lifetimeEarned, bookDebt, lotsSum]) check(Number.isSafeInteger(n), 'safe integers');
    check(bal.available === lotsSum - bookDebt, 'available = sum of lot remainders - debt');
    check(bookDebt >= 0 && (bookDebt === 0 || (b?.lots.length ?? 0) === 0), 'debt is never negative and only with no lot left');
    if (policy(key) === 'forbid') check(bal.available >= 0 && bookDebt === 0, 'never negative under forbid');
    check(bal.lifetimeEarned >= lifetimeSeen.get(key)!, 'lifetime earned never decreases');
    lifetimeSeen.set(key, bal.lifetimeEarned);

    // Against the projection.
    check(bookDebt === debt.get(key), 'debt = sum of debt incurred - debt paid over the entries');
    const openRows = mine.filter((r) => r.entry.amount > 0 && r.status === 'posted' && r.remaining > 0);
    check(
      JSON.stringify(openRows.map((r) => [r.entry.id, r.remaining]).sort()) ===
        JSON.stringify((b?.lots ?? []).map((l) => [l.entryId, l.remaining]).sort()),
      'the open lots are exactly the posted credit rows with a remainder',
    );
    const pendingRows = mine.filter((r) => r.status === 'pending');
    check(bal.pending === pendingRows.reduce((s, r) => s + r.entry.amount, 0), 'pending = sum of pending rows');
    // Conservation: the signed amounts of every entry that was not cancelled add up to what is held.
    const net = mine.filter((r) => r.status !== 'cancelled').reduce((s, r) => s + r.entry.amount, 0);
    check(net === bal.available + bal.pending, 'sum of entry amounts (not cancelled) = available + pending');
    // Lifetime: the posted (or later expired) awards and positive adjustments.
    const earned = mine
      .filter((r) => (r.entry.type === 'award' || r.entry.type === 'adjustment') && r.entry.amount > 0 && (r.status === 'posted' || r.status === 'expired'))
      .reduce((s, r) => s + r.entry.amount, 0);
    check(bal.lifetimeEarned === earned, 'lifetime earned = posted awards and positive adjustments');
    // Each credit row: remaining = amount - debt paid - what debits took from it.
    for (const r of mine) {
      if (r.entry.amount <= 0 || r.status !== 'posted') continue;
      const taken = mine.flatMap((d) => d.entry.allocations).filter((a) => a.entryId === r.entry.id).reduce((s, a) => s + a.amount, 0);
      const paid = r.entry.status === 'posted' ? r.entry.debtPaid : r.entry.amount - (r.remaining + taken);
      check(r.remaining === r.entry.amount - paid - taken, 'a lot row remaining = amount - debt paid - allocations');
      check(paid >= 0 && paid <= r.entry.amount, 'debt paid within the credit');
    }
    // Spending order is kept in the state.
    const lots = b?.lots ?? [];
    for (let i = 1; i < lots.length; i++) {
      const a = lots[i - 1]!;
      const c = lots[i]!;
      const ea = a.expiresAtMs ?? Number.POSITIVE_INFINITY;
      const ec = c.expiresAtMs ?? Number.POSITIVE_INFINITY;
      check(ea < ec || (ea === ec && a.createdAtMs <= c.createdAtMs), 'lots in earliest-expiry-first order');
    }
    for (const p of b?.pending ?? []) expectedNextDue = expectedNextDue === null ? p.confirmAfterMs : Math.min(expectedNextDue, p.confirmAfterMs);
    for (const l of lots) if (l.expiresAtMs !== null) expectedNextDue = expectedNextDue === null ? l.expiresAtMs : Math.min(expectedNextDue, l.expiresAtMs);
  }
  check(nextDueMs(state) === expectedNextDue, 'nextDueMs = earliest confirm_after or lot expiry');
}

t.test('ledger invariants hold over random command sequences', async (t) => {
  const result = fc.check(
    fc.property(fc.array(stepArb, { minLength: 1, maxLength: 80 }), (steps) => {
      runSequence(steps);
    }),
    { numRuns: 400 },
  );
  if (result.failed) t.fail(`${fc.defaultReportMessage(result) ?? 'property failed'}\n${String(result.errorInstance)}`);
  else t.pass(`${result.numRuns} random sequences`);
});

t.test('the generators reach the interesting states (debt, expiry, confirmation, refusal, cancel)', async (t) => {
  const seen = { debt: 0, expiry: 0, confirmed: 0, refused: 0, cancelled: 0 };
  fc.assert(
    fc.property(fc.array(stepArb, { minLength: 20, maxLength: 80 }), (steps) => {
      let idSeq = 0;
      built(steps, (p) => `${p}_${++idSeq}`, {
        refused: (code) => {
          if (code === 'insufficient_balance') seen.refused++;
        },
        fact: (f) => {
          if (f.kind === 'ledger.entry_recorded' && f.entry.debtIncurred > 0) seen.debt++;
          if (f.kind === 'ledger.entry_recorded' && f.entry.type === 'expiry') seen.expiry++;
          if (f.kind === 'ledger.pending_confirmed') seen.confirmed++;
          if (f.kind === 'ledger.pending_cancelled') seen.cancelled++;
        },
      });
    }),
    { numRuns: 100, seed: 42 },
  );
  for (const [k, n] of Object.entries(seen)) t.ok(n > 0, `${k} happens (${n})`);
});

/**
 * A ledger built by random steps (refused commands skipped, `observe.refused` told their code;
 * `observe.fact` sees each fact before it is applied); returns it and its clock.
 */
function built(
  steps: Step[],
  newId: (prefix: string) => string,
  observe: { fact?(f: LedgerFact): void; refused?(code: string): void } = {},
): { state: LedgerState; now: number } {
  let now = 1_000_000;
  let state = emptyLedger();
  for (const step of steps) {
    if (step.kind === 'advance') {
      now += step.ms;
      continue;
    }
    const d = decide(state, toCommand(step, now, state)!, currencies, { nowMs: now, newId });
    if (!d.ok) {
      observe.refused?.(d.code);
      continue;
    }
    for (const f of d.facts) {
      observe.fact?.(f);
      state = evolve(state, f);
    }
  }
  return { state, now };
}

t.test('a merge moves the whole ledger: the survivor holds both, the merged customer nothing, nothing made or lost', async (t) => {
  const result = fc.check(
    fc.property(fc.array(stepArb, { maxLength: 60 }), fc.array(stepArb, { maxLength: 60 }), hours(0, 72), (mSteps, sSteps, later) => {
      let idSeq = 0;
      const newId = (prefix: string) => `${prefix}_${String(++idSeq).padStart(6, '0')}`;
      const m = built(mSteps, newId);
      const s = built(sSteps, newId);
      const at = Math.max(m.now, s.now) + later;
      const ctx = { nowMs: at, newId };
      const mBefore = keys.map((k) => balanceOf(m.state, k, at));
      const sBefore = keys.map((k) => balanceOf(s.state, k, at));

      const out = handOverBooks(m.state, 'cust_S', ctx);
      const mFacts = unpack(pack(out.facts)) as LedgerFact[];
      let mAfter = structuredClone(m.state);
      for (const f of mFacts) mAfter = evolve(mAfter, f);
      const sFacts = absorbBooks(s.state, unpack(pack(out.handover)), 'cust_M', ctx);
      let sAfter = structuredClone(s.state);
      for (const f of unpack(pack(sFacts)) as LedgerFact[]) sAfter = evolve(sAfter, f);

      keys.forEach((k, i) => {
        const mb = balanceOf(mAfter, k, at);
        check(mb.available === 0 && mb.pending === 0, `the merged customer holds nothing of ${k}`);
        check(mb.lifetimeEarned === mBefore[i]!.lifetimeEarned, 'its lifetime earned stays (never decreases)');
        const sb = balanceOf(sAfter, k, at);
        check(sb.available === sBefore[i]!.available + mBefore[i]!.available, `available of ${k} adds up`);
        check(sb.pending === sBefore[i]!.pending + mBefore[i]!.pending, `pending of ${k} adds up`);
        check(sb.lifetimeEarned === sBefore[i]!.lifetimeEarned + mBefore[i]!.lifetimeEarned, `lifetime earned of ${k} adds up`);
        const book = sAfter.books.find((b) => b.currency === k);
        check((book?.debt ?? 0) === 0 || (book?.lots.length ?? 0) === 0, 'debt only with no lot left');
        if (policy(k) === 'forbid') check(sb.available >= 0, 'never negative under forbid');
        // Each lot the merged customer held (after its due work) is a transfer credit with the same expiry.
        const handed = (out.handover.find((h) => h.currency === k)?.lots ?? []).map((l) => [l.remaining, l.expiresAtMs]);
        const credited = sFacts.flatMap((f) =>
          f.kind === 'ledger.entry_recorded' && f.entry.currency === k && f.entry.type === 'transfer' && f.entry.amount > 0 ? [[f.entry.amount, f.entry.expiresAtMs]] : [],
        );
        check(JSON.stringify(credited) === JSON.stringify(handed), 'transfer credits carry the lots and their expiry');
      });
      for (const f of [...out.facts, ...sFacts]) {
        if (f.kind !== 'ledger.entry_recorded' || f.entry.type !== 'transfer') continue;
        check(f.entry.sourceType === mergeSourceType, 'transfers name the merge as their source');
        check(f.entry.sourceId === (out.facts.includes(f) ? 'cust_S' : 'cust_M'), 'and the other customer');
      }
    }),
    { numRuns: 300 },
  );
  if (result.failed) t.fail(`${fc.defaultReportMessage(result) ?? 'property failed'}\n${String(result.errorInstance)}`);
  else t.pass(`${result.numRuns} random pairs of ledgers merged`);
});
