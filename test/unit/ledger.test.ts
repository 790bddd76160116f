// Given/when/then tests of the pure ledger mechanic: lots and spending order, pending credits,
// expiry, the negative_balance policy with debt, reversals, validation order and the queries.
import t from 'tap';
import {
  balanceOf,
  balances,
  cloneLedger,
  type CurrencyConfig,
  decide,
  emptyLedger,
  entryRowChanges,
  evolve,
  type LedgerCommand,
  type LedgerCtx,
  type LedgerEntry,
  type LedgerFact,
  type LedgerState,
  ledgerLimits,
  nextDueMs,
} from '../../src/domain/ledger.js';

const day = 86_400_000;
const pts: CurrencyConfig = { key: 'pts', negativeBalance: 'forbid', expiryDays: null };
const coins: CurrencyConfig = { key: 'coins', negativeBalance: 'allow', expiryDays: null };
const stars: CurrencyConfig = { key: 'stars', negativeBalance: 'forbid', expiryDays: 30 };
const currencies = [pts, coins, stars];

let idSeq = 0;
function ctxAt(nowMs: number): LedgerCtx {
  return { nowMs, newId: (prefix) => `${prefix}_${String(++idSeq).padStart(4, '0')}` };
}

function given(facts: LedgerFact[]): LedgerState {
  let s = emptyLedger();
  for (const f of facts) s = evolve(s, f);
  return s;
}

/** Decides at nowMs and applies the facts to the state (as the actor would after the journal append). */
function when(state: LedgerState, cmd: LedgerCommand, nowMs = 0) {
  const before = JSON.stringify(state);
  const d = decide(state, cmd, currencies, ctxAt(nowMs));
  const untouched = JSON.stringify(state) === before;
  if (d.ok) for (const f of d.facts) state = evolve(state, f);
  return { d, state, untouched };
}

/** Runs commands in order at their times; every one must succeed. */
function history(steps: [LedgerCommand, number][]): { state: LedgerState; facts: LedgerFact[]; entries: LedgerEntry[] } {
  let state = emptyLedger();
  const facts: LedgerFact[] = [];
  const entries: LedgerEntry[] = [];
  for (const [cmd, at] of steps) {
    const r = when(state, cmd, at);
    if (!r.d.ok) throw new Error(`step ${cmd.kind} failed: ${r.d.code} ${r.d.message}`);
    state = r.state;
    facts.push(...r.d.facts);
    if (r.d.reply.kind === 'ledger.entry') entries.push(r.d.reply.entry);
  }
  return { state, facts, entries };
}

type Award = Extract<LedgerCommand, { kind: 'ledger.award' }>;
type Spend = Extract<LedgerCommand, { kind: 'ledger.spend' }>;
const award = (amount: number, extra: Partial<Award> = {}): Award => ({
  kind: 'ledger.award',
  currency: 'pts',
  amount,
  reason: 'purchase',
  sourceType: 'rule_execution',
  sourceId: 'rx_1',
  ...extra,
});
const spend = (amount: number, currency = 'pts'): Spend => ({
  kind: 'ledger.spend',
  currency,
  amount,
  reason: null,
  sourceType: 'reward_issuance',
  sourceId: 'iss_1',
});
const adjust = (amount: number, currency = 'pts', extra: object = {}): LedgerCommand => ({
  kind: 'ledger.adjust',
  currency,
  amount,
  reason: 'goodwill',
  ...extra,
});

t.test('given lots of 100 (day 10) and 50 (day 5), when 70 is spent, then 50 comes from the day-5 lot and 20 from the day-10 lot', async (t) => {
  const { state, entries } = history([
    [award(100, { expiresAtMs: 10 * day }), 0],
    [award(50, { expiresAtMs: 5 * day }), 0],
  ]);
  const [lot100, lot50] = entries;
  const r = when(state, spend(70), day);
  t.ok(r.d.ok);
  if (!r.d.ok || r.d.reply.kind !== 'ledger.entry') return;
  t.equal(r.untouched, true, 'decide does not modify the state');
  t.same(r.d.reply.entry.allocations, [
    { entryId: lot50!.id, amount: 50, remainingAfter: 0 },
    { entryId: lot100!.id, amount: 20, remainingAfter: 80 },
  ]);
  t.match(r.d.reply.entry, { type: 'spend', status: 'posted', amount: -70, remaining: 0, sourceId: 'iss_1' });
  t.same(r.d.reply.balance, { currency: 'pts', available: 80, pending: 0, lifetimeEarned: 150 });
  t.same(
    r.state.books[0]!.lots.map((l) => [l.entryId, l.remaining]),
    [[lot100!.id, 80]],
    'the emptied lot is gone, the other keeps its remainder',
  );
});

t.test('new entry ids start with le_ (decisions.md); a book recorded under the old led_ prefix keeps working by those ids', async (t) => {
  const recorded = (id: string, amount: number, extra: Partial<LedgerEntry> = {}): LedgerFact => ({
    kind: 'ledger.entry_recorded',
    entry: {
      id,
      currency: 'pts',
      type: 'award',
      status: 'posted',
      amount,
      remaining: amount,
      expiresAtMs: null,
      confirmAfterMs: null,
      reason: null,
      sourceType: null,
      sourceId: null,
      reversesEntryId: null,
      createdAtMs: 0,
      allocations: [],
      debtPaid: 0,
      debtIncurred: 0,
      ...extra,
    },
  });
  const state = given([recorded('led_OLDLOT', 30), recorded('led_OLDPENDING', 10, { status: 'pending', confirmAfterMs: 100 * day })]);

  const a = when(state, award(5), 1);
  if (!a.d.ok || a.d.reply.kind !== 'ledger.entry') return t.fail('award failed');
  t.match(a.d.reply.entry.id, /^le_/);
  t.notMatch(a.d.reply.entry.id, /^led_/);

  const s = when(state, spend(20), 1);
  if (!s.d.ok || s.d.reply.kind !== 'ledger.entry') return t.fail('spend failed');
  t.match(s.d.reply.entry.id, /^le_/);
  t.same(s.d.reply.entry.allocations, [{ entryId: 'led_OLDLOT', amount: 20, remainingAfter: 10 }], 'an old lot is spent by its id');

  const c = when(state, { kind: 'ledger.cancel_pending', currency: 'pts', entryId: 'led_OLDPENDING', reason: null }, 1);
  t.match(c.d, { ok: true, reply: { kind: 'ledger.cancelled', entryId: 'led_OLDPENDING' } }, 'an old pending credit is cancelled by its id');

  const r = when(state, { kind: 'ledger.reverse', currency: 'pts', amount: 5, reversesEntryId: 'led_OLDSPEND', reason: null, sourceType: null, sourceId: null }, 1);
  t.match(r.d, { ok: true, reply: { entry: { id: /^le_/, reversesEntryId: 'led_OLDSPEND' } } }, 'a reversal names an old debit');
});

t.test('lots without expiry are spent last; equal expiries go in creation order', async (t) => {
  const { state, entries } = history([
    [award(10, { expiresAtMs: null }), 0],
    [award(10, { expiresAtMs: 7 * day }), 1],
    [award(10, { expiresAtMs: 7 * day }), 2],
    [award(10, { expiresAtMs: 3 * day }), 3],
  ]);
  const r = when(state, spend(35), 4);
  if (!r.d.ok || r.d.reply.kind !== 'ledger.entry') return t.fail('spend failed');
  t.same(
    r.d.reply.entry.allocations.map((a) => [a.entryId, a.amount]),
    [
      [entries[3]!.id, 10],
      [entries[1]!.id, 10],
      [entries[2]!.id, 10],
      [entries[0]!.id, 5],
    ],
  );
});

t.test('the currency expiry_days is the default expires_at; null means never; the first due lot is the next wake-up', async (t) => {
  const { state, entries } = history([
    [{ ...award(10), currency: 'stars' }, 1000],
    [{ ...award(10, { expiresAtMs: null }), currency: 'stars' }, 2000],
  ]);
  t.equal(entries[0]!.expiresAtMs, 1000 + 30 * day);
  t.equal(entries[1]!.expiresAtMs, null);
  t.equal(nextDueMs(state), 1000 + 30 * day);
});

t.test('an award with confirm_after is pending until the due work confirms it', async (t) => {
  const { state, entries } = history([[award(40, { confirmAfterMs: 5000 }), 1000]]);
  t.match(entries[0], { status: 'pending', amount: 40, remaining: 40, confirmAfterMs: 5000 });
  t.same(balanceOf(state, 'pts'), { currency: 'pts', available: 0, pending: 40, lifetimeEarned: 0 }, 'lifetime counts at confirmation');
  t.equal(nextDueMs(state), 5000);

  const early = when(state, spend(10), 4999);
  t.match(early.d, { ok: false, code: 'insufficient_balance' }, 'pending is not spendable');

  const due = when(state, { kind: 'ledger.run_due' }, 5000);
  if (!due.d.ok) return t.fail('run_due failed');
  t.same(due.d.reply, { kind: 'ledger.settled', confirmed: [entries[0]!.id], expired: [], nextDueMs: null });
  t.same(balanceOf(due.state, 'pts'), { currency: 'pts', available: 40, pending: 0, lifetimeEarned: 40 });
  t.same(entryRowChanges(due.d.facts[0]!), [{ op: 'update', id: entries[0]!.id, remaining: 40, status: 'posted' }]);
});

t.test('a pending award with the default expiry expires expiry_days after confirm_after', async (t) => {
  const { entries } = history([[{ ...award(5, { confirmAfterMs: 10 * day }), currency: 'stars' }, 0]]);
  t.equal(entries[0]!.expiresAtMs, 40 * day);
});

t.test('expiry takes the remainder of each due lot with one expiry entry per lot, and marks the lot row expired', async (t) => {
  const { state, entries } = history([
    [award(100, { expiresAtMs: 10 * day }), 0],
    [award(30, { expiresAtMs: 20 * day }), 0],
    [spend(60), day],
  ]);
  const lot = entries[0]!;
  const r = when(state, { kind: 'ledger.expire_due' }, 10 * day);
  if (!r.d.ok) return t.fail('expire failed');
  t.equal(r.d.facts.length, 1);
  const f = r.d.facts[0]!;
  if (f.kind !== 'ledger.entry_recorded') return t.fail('not an entry');
  t.match(f.entry, { type: 'expiry', status: 'posted', amount: -40, expiresAtMs: 10 * day, sourceType: 'ledger_entry', sourceId: lot.id });
  t.same(entryRowChanges(f)[1], { op: 'update', id: lot.id, remaining: 0, status: 'expired' });
  t.same(balanceOf(r.state, 'pts'), { currency: 'pts', available: 30, pending: 0, lifetimeEarned: 130 }, 'lifetime is not reduced');
  t.equal(nextDueMs(r.state), 20 * day);
});

t.test('a command runs the due work of its currency first, so a late scheduler never lets an expired lot be spent', async (t) => {
  const { state } = history([
    [award(50, { expiresAtMs: 5 * day }), 0],
    [award(20), 0],
  ]);
  t.same(balanceOf(state, 'pts', 6 * day).available, 20, 'the balance as of now already leaves out the expired lot');
  t.same(balanceOf(state, 'pts').available, 70, 'and the state itself is untouched');
  t.match(when(state, spend(30), 6 * day).d, { ok: false, code: 'insufficient_balance' });
  const r = when(state, spend(20), 6 * day);
  if (!r.d.ok) return t.fail('spend failed');
  t.same(
    r.d.facts.map((f) => (f.kind === 'ledger.entry_recorded' ? f.entry.type : f.kind)),
    ['expiry', 'spend'],
  );
  t.equal(balanceOf(r.state, 'pts').available, 0);
});

t.test('under forbid, a spend or negative adjustment beyond the available balance is insufficient_balance and records nothing', async (t) => {
  const { state } = history([[award(50), 0]]);
  const s = when(state, spend(51), 1);
  t.match(s.d, { ok: false, code: 'insufficient_balance', param: 'amount' });
  t.match(when(state, adjust(-51), 1).d, { ok: false, code: 'insufficient_balance' });
  const ok = when(state, adjust(-50), 1);
  if (!ok.d.ok || ok.d.reply.kind !== 'ledger.entry') return t.fail('adjust failed');
  t.match(ok.d.reply.entry, { type: 'adjustment', amount: -50, reason: 'goodwill', debtIncurred: 0 });
  t.same(ok.d.reply.balance, { currency: 'pts', available: 0, pending: 0, lifetimeEarned: 50 });
});

t.test('under allow, debits beyond the lots become debt, and later credits pay the debt off first', async (t) => {
  const { state, entries } = history([
    [{ ...award(30), currency: 'coins' }, 0],
    [adjust(-50, 'coins'), 1],
  ]);
  t.match(entries[1], { amount: -50, debtIncurred: 20, allocations: [{ entryId: entries[0]!.id, amount: 30, remainingAfter: 0 }] });
  t.same(balanceOf(state, 'coins'), { currency: 'coins', available: -20, pending: 0, lifetimeEarned: 30 });
  t.equal(state.books[0]!.lots.length, 0, 'debt only with no lot left');

  const more = when(state, adjust(-5, 'coins'), 2);
  t.ok(more.d.ok, 'allow lets the debt grow');
  const paid = when(more.state, { ...award(40), currency: 'coins' }, 3);
  if (!paid.d.ok || paid.d.reply.kind !== 'ledger.entry') return t.fail('award failed');
  t.match(paid.d.reply.entry, { amount: 40, debtPaid: 25, remaining: 15 });
  t.same(paid.d.reply.balance, { currency: 'coins', available: 15, pending: 0, lifetimeEarned: 70 });
  t.equal(paid.state.books[0]!.debt, 0);
});

t.test('a spend never goes below the available balance, even under allow (only manual adjustments follow negative_balance)', async (t) => {
  const { state } = history([[{ ...award(30), currency: 'coins' }, 0]]);
  const over = when(state, spend(31, 'coins'), 1);
  t.match(over.d, { ok: false, code: 'insufficient_balance', param: 'amount' });
  t.ok(over.untouched);
  const exact = when(state, spend(30, 'coins'), 1);
  if (!exact.d.ok || exact.d.reply.kind !== 'ledger.entry') return t.fail('spend failed');
  t.match(exact.d.reply.entry, { type: 'spend', amount: -30, debtIncurred: 0 });
  t.same(exact.d.reply.balance, { currency: 'coins', available: 0, pending: 0, lifetimeEarned: 30 });

  const { state: inDebt } = history([[adjust(-10, 'coins'), 0]]);
  t.equal(balanceOf(inDebt, 'coins').available, -10, 'a manual adjustment may go negative under allow');
  t.match(when(inDebt, spend(1, 'coins'), 1).d, { ok: false, code: 'insufficient_balance' }, 'nothing is spendable while in debt');
});

t.test('a pending credit confirmed while in debt pays the debt first', async (t) => {
  const { state } = history([
    [{ ...award(10, { confirmAfterMs: 100 }), currency: 'coins' }, 0],
    [adjust(-4, 'coins'), 1],
  ]);
  const r = when(state, { kind: 'ledger.confirm_due' }, 100);
  if (!r.d.ok) return t.fail('confirm failed');
  t.match(r.d.facts[0], { kind: 'ledger.pending_confirmed', debtPaid: 4, remaining: 6 });
  t.same(balanceOf(r.state, 'coins'), { currency: 'coins', available: 6, pending: 0, lifetimeEarned: 10 });
});

t.test('a reversal refunds a debit as a new lot that does not count as earned', async (t) => {
  const { state, entries } = history([
    [award(100), 0],
    [spend(60), 1],
  ]);
  const r = when(
    state,
    { kind: 'ledger.reverse', currency: 'pts', amount: 60, reversesEntryId: entries[1]!.id, reason: 'reward cancelled', sourceType: 'reward_issuance', sourceId: 'iss_1' },
    2,
  );
  if (!r.d.ok || r.d.reply.kind !== 'ledger.entry') return t.fail('reverse failed');
  t.match(r.d.reply.entry, { type: 'reversal', status: 'posted', amount: 60, remaining: 60, reversesEntryId: entries[1]!.id });
  t.same(r.d.reply.balance, { currency: 'pts', available: 100, pending: 0, lifetimeEarned: 100 });
});

t.test('cancel_pending removes a pending credit; once confirmed it is invalid_state', async (t) => {
  const { state, entries } = history([[award(40, { confirmAfterMs: 100 }), 0]]);
  const id = entries[0]!.id;
  const c = when(state, { kind: 'ledger.cancel_pending', currency: 'pts', entryId: id, reason: 'order returned' }, 50);
  if (!c.d.ok) return t.fail('cancel failed');
  t.same(c.d.reply, { kind: 'ledger.cancelled', entryId: id, balance: { currency: 'pts', available: 0, pending: 0, lifetimeEarned: 0 } });
  t.same(entryRowChanges(c.d.facts[0]!), [{ op: 'update', id, remaining: 0, status: 'cancelled' }]);
  t.equal(nextDueMs(c.state), null);
  t.match(when(state, { kind: 'ledger.cancel_pending', currency: 'pts', entryId: id, reason: null }, 100).d, {
    ok: false,
    code: 'invalid_state',
  });
});

t.test('validation failures name the parameter, checked in order: currency, amount, reason, source, expires_at, confirm_after', async (t) => {
  const s = given([]);
  const cases: [string, LedgerCommand, string][] = [
    ['unknown currency first, even with a bad amount', { ...award(0), currency: 'nope' }, 'currency'],
    ['award of 0', award(0), 'amount'],
    ['negative award', award(-5), 'amount'],
    ['fractional amount', award(1.5), 'amount'],
    ['NaN amount', award(Number.NaN), 'amount'],
    ['amount above the bound', award(ledgerLimits.amountMinorMax + 1), 'amount'],
    ['spend of 0', spend(0), 'amount'],
    ['adjustment of 0', adjust(0), 'amount'],
    ['adjustment without a reason', { kind: 'ledger.adjust', currency: 'pts', amount: 5, reason: '' }, 'reason'],
    ['reason too long', award(5, { reason: 'x'.repeat(ledgerLimits.reasonCharsMax + 1) }), 'reason'],
    ['spend without a source id', { ...spend(5), sourceId: '' }, 'source_id'],
    ['expires_at in the past', award(5, { expiresAtMs: 999 }), 'expires_at'],
    ['expires_at at now', award(5, { expiresAtMs: 1000 }), 'expires_at'],
    ['expires_at before confirm_after', award(5, { expiresAtMs: 2000, confirmAfterMs: 3000 }), 'expires_at'],
    ['expires_at not an integer', award(5, { expiresAtMs: 2000.5 }), 'expires_at'],
    ['confirm_after not an integer', award(5, { confirmAfterMs: Number.POSITIVE_INFINITY }), 'confirm_after'],
    ['a debit with expires_at', adjust(-5, 'pts', { expiresAtMs: 5000 }), 'expires_at'],
    ['a debit with confirm_after', adjust(-5, 'pts', { confirmAfterMs: 5000 }), 'confirm_after'],
  ];
  for (const [name, cmd, param] of cases) {
    t.match(when(s, cmd, 1000).d, { ok: false, code: 'validation_failed', param }, name);
  }
  const badCurrency: CurrencyConfig = { key: 'bad', negativeBalance: 'forbid', expiryDays: -1 };
  t.match(decide(s, { ...award(5), currency: 'bad' }, [badCurrency], ctxAt(0)), { ok: false, param: 'currency' }, 'a bad currency config');
});

t.test('a confirm_after that is not in the future posts the credit now', async (t) => {
  const { entries, state } = history([[award(7, { confirmAfterMs: 500 }), 1000]]);
  t.match(entries[0], { status: 'posted', confirmAfterMs: 500 });
  t.equal(balanceOf(state, 'pts').available, 7);
});

t.test('balances lists every touched currency by key; run_due covers all currencies', async (t) => {
  const { state } = history([
    [{ ...award(5, { confirmAfterMs: 100 }), currency: 'stars' }, 0],
    [{ ...award(3, { expiresAtMs: 50 }), currency: 'coins' }, 0],
    [award(9), 0],
  ]);
  t.same(
    balances(state).map((b) => [b.currency, b.available, b.pending]),
    [
      ['coins', 3, 0],
      ['pts', 9, 0],
      ['stars', 0, 5],
    ],
  );
  t.equal(nextDueMs(state), 50);
  const r = when(state, { kind: 'ledger.run_due' }, 100);
  if (!r.d.ok || r.d.reply.kind !== 'ledger.settled') return t.fail('run_due failed');
  t.equal(r.d.reply.confirmed.length, 1);
  t.equal(r.d.reply.expired.length, 1);
  t.equal(r.d.reply.nextDueMs, 100 + 30 * day, 'the confirmed stars lot expires 30 days after confirmation');
  t.same(
    balances(r.state).map((b) => [b.currency, b.available, b.pending]),
    [
      ['coins', 0, 0],
      ['pts', 9, 0],
      ['stars', 5, 0],
    ],
  );
});

t.test('replaying the facts through evolve alone rebuilds the identical state', async (t) => {
  const { state, facts } = history([
    [award(100, { expiresAtMs: 10 * day }), 0],
    [award(20, { confirmAfterMs: 2 * day }), 0],
    [{ ...award(30), currency: 'coins' }, 0],
    [adjust(-45, 'coins'), day],
    [spend(70), day],
    [{ kind: 'ledger.run_due' }, 11 * day],
    [{ ...award(50), currency: 'coins' }, 12 * day],
  ]);
  const replayed = given(structuredClone(facts));
  t.strictSame(replayed, state);
  t.same(balances(replayed), [
    { currency: 'coins', available: 35, pending: 0, lifetimeEarned: 80 },
    { currency: 'pts', available: 20, pending: 0, lifetimeEarned: 120 },
  ]);
});

/** Every object reachable from v (arrays included). */
function objectsOf(v: unknown, into = new Set<object>()): Set<object> {
  if (v !== null && typeof v === 'object' && !into.has(v)) {
    into.add(v);
    for (const x of Object.values(v)) objectsOf(x, into);
  }
  return into;
}

t.test('cloneLedger: an equal copy that shares no object; evolving it leaves the original as it was', async (t) => {
  const { state } = history([
    [award(40, { confirmAfterMs: 5000 }), 1000],
    [award(25), 2000],
    [{ ...award(10), currency: 'stars' }, 3 * day],
  ]);
  const before = JSON.stringify(state);
  const copy = cloneLedger(state);
  t.same(copy, state);
  t.ok(state.books.some((b) => b.pending.length > 0 && b.lots.length > 0 && (b.earned?.length ?? 0) > 0), 'lots, pending credits and earned days');
  const shared = [...objectsOf(copy)].filter((o) => objectsOf(state).has(o));
  t.same(shared, [], 'no object in common');
  const d = decide(copy, { kind: 'ledger.spend', currency: 'pts', amount: 20, reason: 'shop', sourceType: 'reward', sourceId: 'rw_1' } as Spend, currencies, ctxAt(6000));
  t.ok(d.ok);
  let evolved = copy;
  if (d.ok) for (const f of d.facts) evolved = evolve(evolved, f);
  t.not(JSON.stringify(evolved), before, 'the copy moved');
  t.equal(JSON.stringify(state), before, 'the original did not');
});
