// Given/when/then tests of tier programs: validation errors with wire params, placement on each
// basis, upgrades at once, downgrades at once or at the downgrade check, the check's cadence,
// titles carried by tier.changed, and the catalog guards (resource_in_use).
import fc from 'fast-check';
import t, { type Test } from 'tap';
import {
  canChangeBasis,
  canRemoveLevel,
  checkTierProgramEdit,
  cloneTiers,
  dayMs,
  evaluateTier,
  evolveTier,
  evolveTiers,
  moveOffRemovedLevel,
  reassignTier,
  scheduleDowngradeCheck,
  type TierFact,
  type TierMetrics,
  type TierProgram,
  type TierState,
  type TiersState,
  validateTierProgram,
} from '../../src/domain/tiers.js';

const levels = [
  { key: 'bronze', title: 'Bronze', threshold: 0 },
  { key: 'silver', title: 'Silver', threshold: 1000 },
  { key: 'gold', title: 'Gold', threshold: 5000 },
];

function program(over: Partial<TierProgram> = {}): TierProgram {
  return { id: 'tp_1', key: 'status', currency: 'pts', basis: 'lifetime_earned', levels, ...over };
}

const metrics = (m: Partial<TierMetrics>): TierMetrics => ({ lifetimeEarned: 0, balance: 0, ...m });

/** Evaluates and applies the facts, as the actor would. */
function when(p: TierProgram, state: TierState | null, m: TierMetrics, nowMs: number, immediate = false) {
  const ev = evaluateTier(p, state, m, { nowMs }, { immediate });
  let next = state === null ? null : { ...state };
  for (const f of ev.facts) next = evolveTier(next, f);
  return { ev, state: next };
}

/** t.match lets an actual array be longer than the pattern; lists here must match in length too. */
function matchList(t: Test, actual: unknown[], pattern: unknown[], message = 'list') {
  t.equal(actual.length, pattern.length, `${message} (length)`);
  t.match(actual, pattern, message);
}

function changedFacts(facts: TierFact[]) {
  return facts.filter((f): f is TierFact & { kind: 'tier.changed' } => f.kind === 'tier.changed');
}

// --- validation -------------------------------------------------------------------------------

t.test('given a well-formed program on each basis, validation passes', async (t) => {
  t.same(validateTierProgram(program()), { ok: true });
  t.same(validateTierProgram(program({ basis: 'balance', downgradeCheck: { everyDays: 30 } })), { ok: true });
  t.same(validateTierProgram(program({ basis: 'earned_rolling_days', rollingDays: 365 })), { ok: true });
});

t.test('given levels that do not start at 0, do not ascend, or repeat a key, validation names each level', async (t) => {
  const v = validateTierProgram(
    program({
      levels: [
        { key: 'bronze', title: 'Bronze', threshold: 10 },
        { key: 'silver', title: 'Silver', threshold: 5 },
        { key: 'silver', title: 'Silver again', threshold: 20 },
        { key: 'gold', title: '', threshold: 20 },
      ],
    }),
  );
  t.equal(v.ok, false);
  if (v.ok) return;
  t.equal(v.code, 'validation_failed');
  t.equal(v.param, 'levels[0].threshold');
  t.same(
    v.details.map((d) => d.param),
    ['levels[0].threshold', 'levels[1].threshold', 'levels[2].key', 'levels[3].title', 'levels[3].threshold'],
  );
});

t.test('given no levels, a negative or fractional threshold, validation fails on those params', async (t) => {
  const empty = validateTierProgram(program({ levels: [] }));
  t.match(empty, { ok: false, param: 'levels' });
  const bad = validateTierProgram(
    program({
      levels: [
        { key: 'a', title: 'A', threshold: 0 },
        { key: 'b', title: 'B', threshold: 1.5 },
        { key: 'c', title: 'C', threshold: -1 },
      ],
    }),
  );
  t.match(bad, { ok: false, details: [{ param: 'levels[1].threshold' }, { param: 'levels[2].threshold' }] });
});

t.test('given rolling_days missing for a rolling basis, or present on another basis, validation fails', async (t) => {
  t.match(validateTierProgram(program({ basis: 'earned_rolling_days' })), { ok: false, param: 'rolling_days' });
  t.match(validateTierProgram(program({ basis: 'earned_rolling_days', rollingDays: 0 })), { ok: false, param: 'rolling_days' });
  t.match(validateTierProgram(program({ basis: 'balance', rollingDays: 30 })), { ok: false, param: 'rolling_days' });
  t.match(validateTierProgram(program({ downgradeCheck: { everyDays: 0 } })), { ok: false, param: 'downgrade_check.every_days' });
  t.match(validateTierProgram(program({ basis: 'points' as never })), { ok: false, param: 'basis' });
});

// --- placement --------------------------------------------------------------------------------

t.test('given a new customer below the first threshold above 0, the first evaluation assigns the base level', async (t) => {
  const { ev, state } = when(program(), null, metrics({ lifetimeEarned: 200 }), 1000);
  t.same(
    ev.facts.map((f) => f.kind),
    ['tier.assigned'],
  );
  t.match(state, { programId: 'tp_1', level: 'bronze', sinceMs: 1000, nextDowngradeCheckMs: null });
});

t.test('given a new customer above a threshold, the first evaluation is a level-up from the base level', async (t) => {
  const { ev, state } = when(program(), null, metrics({ lifetimeEarned: 6000 }), 1000);
  t.same(changedFacts(ev.facts), [
    {
      kind: 'tier.changed',
      programId: 'tp_1',
      programKey: 'status',
      level: 'gold',
      levelTitle: 'Gold',
      previousLevel: 'bronze',
      previousLevelTitle: 'Bronze',
      direction: 'up',
      value: 6000,
      atMs: 1000,
      nextDowngradeCheckMs: null,
    },
  ]);
  t.equal(state?.level, 'gold');
});

t.test('given lifetime_earned basis, reaching a threshold exactly upgrades at once', async (t) => {
  const start = when(program(), null, metrics({ lifetimeEarned: 10 }), 1).state;
  const { ev, state } = when(program(), start, metrics({ lifetimeEarned: 1000 }), 2);
  matchList(t, changedFacts(ev.facts), [{ level: 'silver', previousLevel: 'bronze', direction: 'up', levelTitle: 'Silver' }]);
  t.match(state, { level: 'silver', sinceMs: 2 });
  const again = when(program(), state, metrics({ lifetimeEarned: 1500 }), 3);
  t.same(again.ev.facts, [], 'no fact without a change');
});

t.test('given balance basis without a downgrade check, spending below the threshold downgrades at once', async (t) => {
  const p = program({ basis: 'balance' });
  const gold = when(p, null, metrics({ balance: 5000, lifetimeEarned: 9000 }), 1).state;
  const { ev, state } = when(p, gold, metrics({ balance: 1200, lifetimeEarned: 9000 }), 2);
  matchList(t, changedFacts(ev.facts), [{ level: 'silver', previousLevel: 'gold', previousLevelTitle: 'Gold', direction: 'down', value: 1200 }]);
  t.equal(state?.level, 'silver');
  const negative = when(p, state, metrics({ balance: -50 }), 3);
  matchList(t, changedFacts(negative.ev.facts), [{ level: 'bronze', direction: 'down' }], 'a negative balance sits on the base level');
});

t.test('given earned_rolling_days basis, the value is what was earned inside the window', async (t) => {
  const p = program({ basis: 'earned_rolling_days', rollingDays: 30 });
  const now = 100 * dayMs;
  let askedSince = -1;
  const m = metrics({
    lifetimeEarned: 99_999,
    earnedSince: (sinceMs) => {
      askedSince = sinceMs;
      return 1100;
    },
  });
  const { ev } = when(p, null, m, now);
  t.equal(askedSince, 70 * dayMs, 'window starts rolling_days before now');
  matchList(t, changedFacts(ev.facts), [{ level: 'silver', value: 1100 }]);
  const pre = when(p, null, metrics({ earnedRolling: 5000 }), now);
  matchList(t, changedFacts(pre.ev.facts), [{ level: 'gold' }], 'a precomputed earnedRolling wins');
  const expired = when(p, pre.state, metrics({ earnedRolling: 0, lifetimeEarned: 99_999 }), now + 31 * dayMs);
  matchList(t, changedFacts(expired.ev.facts), [{ level: 'bronze', direction: 'down' }], 'earnings leaving the window downgrade');
});

// --- downgrade check --------------------------------------------------------------------------

t.test('given a downgrade check every 30 days, a drop waits for the check and then downgrades to the qualified level', async (t) => {
  const p = program({ basis: 'balance', downgradeCheck: { everyDays: 30 } });
  const gold = when(p, null, metrics({ balance: 6000 }), 0).state!;
  t.equal(gold.nextDowngradeCheckMs, 30 * dayMs);

  const early = when(p, gold, metrics({ balance: 0 }), 10 * dayMs);
  t.same(early.ev.facts, [], 'no downgrade before the check');
  t.equal(early.ev.level, 'gold');
  t.equal(early.ev.qualifiedLevel, 'bronze');

  const due = when(p, early.state, metrics({ balance: 10 }), 30 * dayMs);
  matchList(t, changedFacts(due.ev.facts), [{ level: 'bronze', previousLevel: 'gold', direction: 'down', nextDowngradeCheckMs: 60 * dayMs }], 'straight down two levels');
  t.match(due.state, { level: 'bronze', sinceMs: 30 * dayMs, nextDowngradeCheckMs: 60 * dayMs });
});

t.test('given a due check that keeps the level, the next check moves forward on the original cadence', async (t) => {
  const p = program({ basis: 'balance', downgradeCheck: { everyDays: 30 } });
  const gold = when(p, null, metrics({ balance: 6000 }), 0).state!;
  const kept = when(p, gold, metrics({ balance: 7000 }), 75 * dayMs);
  t.same(kept.ev.facts, [{ kind: 'tier.downgrade_check_scheduled', programId: 'tp_1', nextDowngradeCheckMs: 90 * dayMs, atMs: 75 * dayMs }]);
  t.match(kept.state, { level: 'gold', sinceMs: 0, nextDowngradeCheckMs: 90 * dayMs });
});

t.test('given a downgrade check, an upgrade applies at once and restarts the check window', async (t) => {
  const p = program({ basis: 'balance', downgradeCheck: { everyDays: 30 } });
  const silver = when(p, null, metrics({ balance: 1000 }), 0).state!;
  const up = when(p, silver, metrics({ balance: 5000 }), 20 * dayMs);
  matchList(t, changedFacts(up.ev.facts), [{ level: 'gold', direction: 'up', nextDowngradeCheckMs: 50 * dayMs }]);
  const atOldDate = when(p, up.state, metrics({ balance: 0 }), 30 * dayMs);
  t.same(atOldDate.ev.facts, [], 'the old check date no longer applies');
});

t.test('given immediate reevaluation (a basis change), a downgrade applies before the check is due', async (t) => {
  const p = program({ basis: 'balance', downgradeCheck: { everyDays: 30 } });
  const gold = when(p, null, metrics({ balance: 6000 }), 0).state!;
  const { ev } = when(p, gold, metrics({ balance: 0 }), dayMs, true);
  matchList(t, changedFacts(ev.facts), [{ level: 'bronze', direction: 'down' }]);
});

t.test('given the check was removed from the program, the stale schedule is cleared and drops apply at once', async (t) => {
  const withCheck = program({ basis: 'balance', downgradeCheck: { everyDays: 30 } });
  const gold = when(withCheck, null, metrics({ balance: 6000 }), 0).state!;
  const p = program({ basis: 'balance' });
  const kept = when(p, gold, metrics({ balance: 6000 }), dayMs);
  matchList(t, kept.ev.facts, [{ kind: 'tier.downgrade_check_scheduled', nextDowngradeCheckMs: null }]);
  const dropped = when(p, kept.state, metrics({ balance: 0 }), 2 * dayMs);
  matchList(t, changedFacts(dropped.ev.facts), [{ direction: 'down', nextDowngradeCheckMs: null }]);
});

t.test('given a held level the program no longer has, the customer is re-placed at once', async (t) => {
  const state: TierState = { programId: 'tp_1', level: 'platinum', sinceMs: 0, nextDowngradeCheckMs: null };
  const { ev } = when(program(), state, metrics({ lifetimeEarned: 1000 }), 5);
  matchList(t, changedFacts(ev.facts), [{ previousLevel: 'platinum', previousLevelTitle: 'platinum', level: 'silver', direction: 'down' }]);
});

t.test('given reassign_to, the customer moves to that level with a direction by threshold', async (t) => {
  const state: TierState = { programId: 'tp_1', level: 'bronze', sinceMs: 0, nextDowngradeCheckMs: null };
  matchList(t, reassignTier(program(), state, 'gold', 0, { nowMs: 9 }), [{ kind: 'tier.changed', level: 'gold', direction: 'up', atMs: 9 }]);
  t.same(reassignTier(program(), state, 'bronze', 0, { nowMs: 9 }), []);
  t.same(reassignTier(program(), state, 'nope', 0, { nowMs: 9 }), []);
});

// An edit removed silver (threshold 1000) with reassign_to gold; its move has not reached everyone.
const withoutSilver = (over: Partial<TierProgram> = {}) =>
  program({
    levels: [levels[0]!, levels[2]!],
    retiredLevels: [{ key: 'silver', title: 'Silver', threshold: 1000, reassignTo: 'gold' }],
    ...over,
  });
const onSilver: TierState = { programId: 'tp_1', level: 'silver', sinceMs: 0, nextDowngradeCheckMs: null };

t.test('given a removed level recorded with the edit, reassign_to a higher level is a move up with the old title', async (t) => {
  matchList(t, reassignTier(withoutSilver(), onSilver, 'gold', 1200, { nowMs: 9 }), [
    { kind: 'tier.changed', previousLevel: 'silver', previousLevelTitle: 'Silver', level: 'gold', levelTitle: 'Gold', direction: 'up' },
  ]);
  matchList(t, reassignTier(withoutSilver(), onSilver, 'bronze', 1200, { nowMs: 9 }), [{ level: 'bronze', direction: 'down' }]);
  // A level the program never knew still counts as above.
  matchList(t, reassignTier(program({ levels: [levels[0]!, levels[2]!] }), onSilver, 'gold', 0, { nowMs: 9 }), [{ previousLevelTitle: 'silver', direction: 'down' }]);
});

t.test('given a holder still on a removed level, an evaluation moves it as the edit would have, up or down by thresholds', async (t) => {
  // Qualified above the old level: up, not down.
  matchList(t, changedFacts(when(withoutSilver(), onSilver, metrics({ lifetimeEarned: 6000 }), 5).ev.facts), [
    { previousLevel: 'silver', previousLevelTitle: 'Silver', level: 'gold', direction: 'up' },
  ]);
  // Without a downgrade check the qualified level wins at once.
  matchList(t, changedFacts(when(withoutSilver(), onSilver, metrics({ lifetimeEarned: 10 }), 5).ev.facts), [{ level: 'bronze', direction: 'down' }]);
  // With one, the customer lands on reassign_to (gold, above silver: up) and a drop waits for the check.
  const checked = when(withoutSilver({ downgradeCheck: { everyDays: 30 } }), onSilver, metrics({ lifetimeEarned: 10 }), 5);
  matchList(t, changedFacts(checked.ev.facts), [{ level: 'gold', direction: 'up', nextDowngradeCheckMs: 5 + 30 * dayMs }]);
  t.equal(checked.ev.qualifiedLevel, 'bronze');
});

t.test('given a move owed by an edit, moveOffRemovedLevel moves only holders of removed levels', async (t) => {
  const m = metrics({ lifetimeEarned: 10 });
  matchList(t, moveOffRemovedLevel(withoutSilver(), onSilver, null, m, { nowMs: 3 }), [{ level: 'gold', direction: 'up' }], "to the retired level's reassign_to");
  matchList(t, moveOffRemovedLevel(withoutSilver(), onSilver, 'bronze', m, { nowMs: 3 }), [{ level: 'bronze', direction: 'down' }], 'to a named level');
  const noTarget = withoutSilver({ retiredLevels: [{ key: 'silver', title: 'Silver', threshold: 1000, reassignTo: null }] });
  matchList(t, moveOffRemovedLevel(noTarget, onSilver, null, m, { nowMs: 3 }), [{ level: 'bronze', direction: 'down' }], 'no target: re-placed by its metric');
  t.same(moveOffRemovedLevel(withoutSilver(), { ...onSilver, level: 'gold' }, null, m, { nowMs: 3 }), [], 'a kept level is not moved (a repeat)');
});

t.test('given a downgrade check added or shortened, holders get a check date unless theirs is earlier', async (t) => {
  const p = program({ downgradeCheck: { everyDays: 2 } });
  const held: TierState = { programId: 'tp_1', level: 'gold', sinceMs: 0, nextDowngradeCheckMs: null };
  t.same(scheduleDowngradeCheck(p, held, { nowMs: 100 }), [{ kind: 'tier.downgrade_check_scheduled', programId: 'tp_1', nextDowngradeCheckMs: 100 + 2 * dayMs, atMs: 100 }]);
  matchList(t, scheduleDowngradeCheck(p, { ...held, nextDowngradeCheckMs: 30 * dayMs }, { nowMs: 100 }), [{ nextDowngradeCheckMs: 100 + 2 * dayMs }], 'a later date moves earlier');
  t.same(scheduleDowngradeCheck(p, { ...held, nextDowngradeCheckMs: dayMs }, { nowMs: 100 }), [], 'an earlier date stays');
  t.same(scheduleDowngradeCheck(program(), held, { nowMs: 100 }), [], 'no check, no date');
});

t.test('given several programs, evolveTiers keeps one state per program', async (t) => {
  const tiers: TiersState = {};
  const a = evaluateTier(program(), null, metrics({ lifetimeEarned: 6000 }), { nowMs: 1 });
  const b = evaluateTier(program({ id: 'tp_2', basis: 'balance' }), null, metrics({ balance: 0 }), { nowMs: 1 });
  for (const f of [...a.facts, ...b.facts]) evolveTiers(tiers, f);
  t.same(Object.keys(tiers).sort(), ['tp_1', 'tp_2']);
  t.equal(tiers['tp_1']?.level, 'gold');
  t.equal(tiers['tp_2']?.level, 'bronze');
});

t.test('property: without a check the held level is always the qualified one, and direction matches thresholds', async (t) => {
  const p = program({ basis: 'balance' });
  fc.assert(
    fc.property(fc.array(fc.integer({ min: -1000, max: 10_000 }), { minLength: 1, maxLength: 30 }), (balances) => {
      let state: TierState | null = null;
      let now = 0;
      for (const balance of balances) {
        const before: string | null = state?.level ?? null;
        const r = when(p, state, metrics({ balance }), ++now);
        state = r.state;
        if (state?.level !== r.ev.qualifiedLevel) return false;
        for (const f of changedFacts(r.ev.facts)) {
          const from = levels.findIndex((l) => l.key === f.previousLevel);
          const to = levels.findIndex((l) => l.key === f.level);
          if ((f.direction === 'up') !== to > from) return false;
          if (before !== null && f.previousLevel !== before) return false;
        }
      }
      return true;
    }),
  );
  t.pass('held');
});

// --- guards -----------------------------------------------------------------------------------

t.test('given a level held by customers, removing it without reassign_to is resource_in_use', async (t) => {
  t.match(canRemoveLevel(program(), 'silver', 3), { ok: false, code: 'resource_in_use', param: 'levels' });
  t.same(canRemoveLevel(program(), 'silver', 0), { ok: true }, 'an unheld level may go');
  t.same(canRemoveLevel(program(), 'silver', 3, 'bronze'), { ok: true });
  t.match(canRemoveLevel(program(), 'silver', 3, 'silver'), { ok: false, code: 'validation_failed', param: 'reassign_to' });
  t.match(canRemoveLevel(program(), 'silver', 3, 'diamond'), { ok: false, code: 'validation_failed', param: 'reassign_to' });
});

t.test('given a basis or rolling window change, it needs reevaluate: true', async (t) => {
  const p = program();
  t.match(canChangeBasis(p, { basis: 'balance' }, false), { ok: false, code: 'resource_in_use', param: 'basis' });
  t.same(canChangeBasis(p, { basis: 'balance' }, true), { ok: true });
  t.same(canChangeBasis(p, { basis: 'lifetime_earned' }, false), { ok: true }, 'same basis');
  const rolling = program({ basis: 'earned_rolling_days', rollingDays: 30 });
  t.match(canChangeBasis(rolling, { basis: 'earned_rolling_days', rollingDays: 60 }, false), { ok: false, param: 'rolling_days' });
});

t.test('given a whole program edit, the guards run basis first, then each removed held level', async (t) => {
  const before = program();
  const after = program({ basis: 'balance', levels: [levels[0]!, levels[2]!] });
  t.match(checkTierProgramEdit(before, after, { silver: 2 }), { ok: false, param: 'basis' });
  t.match(checkTierProgramEdit(before, after, { silver: 2 }, { reevaluate: true }), { ok: false, code: 'resource_in_use', param: 'levels' });
  t.same(checkTierProgramEdit(before, after, { silver: 2 }, { reevaluate: true, reassignTo: 'gold' }), { ok: true });
  t.same(checkTierProgramEdit(before, program({ levels: [levels[0]!, levels[2]!] }), {}), { ok: true }, 'nobody holds silver');
});

t.test('cloneTiers: a check date moved on the copy leaves the original as it was', async (t) => {
  const held: Record<string, TierState> = { tp_1: { programId: 'tp_1', level: 'gold', sinceMs: 1, nextDowngradeCheckMs: 10 } };
  const copy = evolveTiers(cloneTiers(held), { kind: 'tier.downgrade_check_scheduled', programId: 'tp_1', nextDowngradeCheckMs: 20, atMs: 2 });
  t.equal(copy.tp_1?.nextDowngradeCheckMs, 20);
  t.equal(held.tp_1?.nextDowngradeCheckMs, 10);
});
