// Given/when/then tests of rolling-window tiers: the ledger's earnings by day (what counts, when
// a pending credit counts, the 366-day bound), placement on an earned_rolling_days program after
// credits, the downgrade at the due check (tier.run_due) once earnings age out, reassignment of a
// removed level's holders (to a named level, or the one the edit recorded), check dates for a
// check added or shortened (tier.schedule_check), and replay rebuilding identical state.
import t from 'tap';
import { type Ctx, type CustomerState, decide, evolve, type Fact } from '../../src/domain/customer.js';
import { type CurrencyConfig, earnedDaysKept, earnedInDays, emptyLedger, type LedgerState, decide as ledgerDecide, evolve as ledgerEvolve } from '../../src/domain/ledger.js';
import { dayMs, type TierProgram } from '../../src/domain/tiers.js';

const t0 = Date.UTC(2026, 10, 23, 12);
const coins: CurrencyConfig[] = [{ key: 'coins', negativeBalance: 'forbid', expiryDays: null }];
let seq = 0;
const ctxAt = (nowMs: number): Ctx => ({
  nowMs,
  environmentId: 'env_1',
  newId: (p) => `${p}_${++seq}`,
  newCustomerId: () => 'cust_1',
  newEventId: () => `evt_${++seq}`,
});

function ledgerRun(state: LedgerState, nowMs: number, command: Parameters<typeof ledgerDecide>[1]): LedgerState {
  const d = ledgerDecide(state, command, coins, ctxAt(nowMs));
  if (!d.ok) throw new Error(d.code);
  for (const f of d.facts) state = ledgerEvolve(state, f);
  return state;
}

const award = (amount: number, confirmAfterMs: number | null = null) =>
  ({ kind: 'ledger.award', currency: 'coins', amount, reason: null, sourceType: null, sourceId: null, confirmAfterMs }) as const;

t.test('earnings by day: awards and positive adjustments count on the day they post; spends do not', async (t) => {
  let book = emptyLedger();
  book = ledgerRun(book, t0 - 2 * dayMs, award(100));
  book = ledgerRun(book, t0, award(50));
  book = ledgerRun(book, t0, { kind: 'ledger.adjust', currency: 'coins', amount: 25, reason: 'gift' });
  book = ledgerRun(book, t0, { kind: 'ledger.spend', currency: 'coins', amount: 60, reason: null, sourceType: 'reward', sourceId: 'rw_1' });
  t.equal(earnedInDays(book, 'coins', 1, t0), 75, 'today only');
  t.equal(earnedInDays(book, 'coins', 3, t0), 175, 'the last three days');
  t.equal(earnedInDays(book, 'coins', 3, t0 + 3 * dayMs), 0, 'three days later nothing is in a 3-day window');
  t.equal(earnedInDays(book, 'gems', 3, t0), 0, 'a currency never touched');
});

t.test('earnings by day: a pending credit counts when it is confirmed, on that day', async (t) => {
  let book = ledgerRun(emptyLedger(), t0, award(100, t0 + 2 * dayMs));
  t.equal(earnedInDays(book, 'coins', 30, t0), 0, 'pending: not earned yet');
  book = ledgerRun(book, t0 + 2 * dayMs, { kind: 'ledger.run_due' });
  t.equal(earnedInDays(book, 'coins', 1, t0 + 2 * dayMs), 100);
});

t.test('earnings by day are bounded: at most 366 days before the newest are kept', async (t) => {
  let book = emptyLedger();
  for (let d = 0; d < 400; d += 10) book = ledgerRun(book, t0 + d * dayMs, award(1));
  const days = book.books[0]!.earned!;
  t.ok(days[days.length - 1]![0] - days[0]![0] < earnedDaysKept, 'oldest kept day is within the bound');
  t.ok(days.length <= earnedDaysKept);
});

const levels = [
  { key: 'bronze', title: 'Bronze', threshold: 0 },
  { key: 'silver', title: 'Silver', threshold: 1000 },
  { key: 'gold', title: 'Gold', threshold: 5000 },
];
const season: TierProgram = { id: 'tp_1', key: 'season', currency: 'coins', basis: 'earned_rolling_days', rollingDays: 7, levels, downgradeCheck: { everyDays: 1 } };

t.test('given a rolling program, when credits arrive and days pass, then the customer rises at once and falls at the due check; replay agrees', async (t) => {
  const journal: Fact[][] = [];
  let state: CustomerState | null = null;
  const run = (nowMs: number, cmd: Parameters<typeof decide>[1]) => {
    const d = decide(state, cmd, ctxAt(nowMs));
    if (!d.ok) throw new Error(d.code);
    journal.push(d.facts);
    for (const f of d.facts) state = evolve(state, f);
    return d.facts;
  };
  run(t0, { kind: 'customer.create', externalId: 'p1', attributes: {} });
  const credit = (nowMs: number, amount: number) => run(nowMs, { kind: 'ledger.run', command: award(amount), currencies: coins, tierPrograms: [season] });

  credit(t0, 600);
  t.equal(state!.tiers.tp_1!.level, 'bronze');
  const up = credit(t0 + 3 * dayMs, 600);
  t.match(up.find((f) => f.kind === 'tier.changed'), { level: 'silver', direction: 'up', value: 1200 });

  // Not due yet: nothing happens.
  t.same(run(t0 + 3 * dayMs + 1000, { kind: 'tier.run_due', tierPrograms: [season] }), []);
  // Day 8: the first 600 aged out; the due check drops the customer.
  const down = run(t0 + 8 * dayMs, { kind: 'tier.run_due', tierPrograms: [season] });
  t.match(down, [{ kind: 'tier.changed', level: 'bronze', direction: 'down', value: 600 }]);
  // Day 9: still qualifies for bronze only; the check just moves on.
  t.match(run(t0 + 9 * dayMs + 5, { kind: 'tier.run_due', tierPrograms: [season] }), [{ kind: 'tier.downgrade_check_scheduled' }]);

  // A removed level's holders are moved to reassign_to.
  credit(t0 + 9 * dayMs + 10, 6000);
  t.equal(state!.tiers.tp_1!.level, 'gold');
  const edited: TierProgram = { ...season, levels: levels.slice(0, 2) };
  t.match(run(t0 + 9 * dayMs + 20, { kind: 'tier.reassign', program: edited, toLevel: 'silver' }), [
    { kind: 'tier.changed', previousLevel: 'gold', level: 'silver', direction: 'down' },
  ]);
  t.same(run(t0 + 9 * dayMs + 30, { kind: 'tier.reassign', program: edited, toLevel: 'bronze' }), [], 'a level the program keeps is not moved');
  // A move owed by an edit names no level: the removed level's record says where (reassign_to).
  t.equal(state!.tiers.tp_1!.level, 'silver');
  const noSilver: TierProgram = {
    ...season,
    levels: [levels[0]!, levels[2]!],
    retiredLevels: [{ key: 'silver', title: 'Silver', threshold: 1000, reassignTo: 'gold' }],
    downgradeCheck: { everyDays: 30 },
  };
  const at = t0 + 9 * dayMs + 50;
  t.match(run(at, { kind: 'tier.reassign', program: noSilver, toLevel: null }), [
    { kind: 'tier.changed', previousLevel: 'silver', previousLevelTitle: 'Silver', level: 'gold', direction: 'up', nextDowngradeCheckMs: at + 30 * dayMs },
  ]);
  t.same(run(at + 10, { kind: 'tier.reassign', program: noSilver, toLevel: null }), [], 'a repeat moves nobody');

  // The check shortened to 1 day: the holder's next check moves earlier, once.
  const daily: TierProgram = { ...noSilver, retiredLevels: null, downgradeCheck: { everyDays: 1 } };
  t.same(run(at + 20, { kind: 'tier.schedule_check', program: daily }), [
    { kind: 'tier.downgrade_check_scheduled', programId: 'tp_1', nextDowngradeCheckMs: at + 20 + dayMs, atMs: at + 20 },
  ]);
  t.same(run(at + 30, { kind: 'tier.schedule_check', program: daily }), [], 'a repeat changes nothing');
  t.equal(state!.tiers.tp_1!.nextDowngradeCheckMs, at + 20 + dayMs);

  let replayed: CustomerState | null = null;
  for (const facts of journal) for (const f of structuredClone(facts)) replayed = evolve(replayed, f);
  t.same(replayed!.tiers, state!.tiers, 'replay rebuilds identical tiers');
  t.same(replayed!.ledger, state!.ledger, 'and identical earnings by day');
});
