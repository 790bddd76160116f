// Given/when/then tests of historical counters: each window (lifetime, rolling days, calendar
// periods in the environment's zone), the filter over event properties, late events, the
// historical base of a backfill merging with live counts, and replay through the customer
// mechanic (counter.counted journaled with the event, rules reading the count).
import t from 'tap';
import {
  applyBase,
  applyBump,
  cloneCounterState,
  type CounterDef,
  type CounterState,
  type CountersContext,
  compileCounterFilter,
  counterBumps,
  counterValue,
  dayMs,
  evolveCounters,
  hasBase,
  historicalBase,
  joinCounter,
  validateWindow,
} from '../../src/domain/counters.js';
import { type Ctx, type CustomerState, decide, evolve, type Fact } from '../../src/domain/customer.js';
import { compileRule, type RulePlan } from '../../src/domain/rules/index.js';

const t0 = Date.UTC(2026, 10, 23, 12, 0, 0); // Monday 2026-11-23 12:00 UTC

function def(over: Partial<CounterDef> = {}): CounterDef {
  return { id: 'ctr_1', name: 'purchases', event: 'purchase', window: { kind: 'lifetime' }, filter: null, status: 'ready', ...over };
}

/** Counts events as the actor would (bump at nowMs, apply), returning the counters. */
function count(defs: CounterDef[], events: Array<{ at: number; now?: number; props?: Record<string, unknown>; name?: string }>, tz = 'UTC') {
  const ctx: CountersContext = { defs, timeZone: tz };
  let counters: Record<string, CounterState> = {};
  for (const e of events) {
    const bumps = counterBumps(ctx, { name: e.name ?? 'purchase', occurredAtMs: e.at, properties: e.props ?? {} }, counters, e.now ?? e.at);
    if (bumps.length > 0) counters = evolveCounters(counters, { kind: 'counter.counted', eventId: 'evt', bumps });
  }
  return counters;
}

t.test('lifetime: every matching event counts, others do not', async (t) => {
  const c = count([def()], [{ at: t0 }, { at: t0 + 1 }, { at: t0 + 2, name: 'login' }]);
  t.equal(counterValue(c.ctr_1, t0 + 10 * 365 * dayMs), 2);
});

t.test('rolling_days: the last N UTC days, today included; older days age out and are dropped', async (t) => {
  const d = def({ window: { kind: 'rolling_days', days: 7 } });
  const c = count([d], [{ at: t0 - 6 * dayMs }, { at: t0 - 1 * dayMs }, { at: t0 }, { at: t0 }]);
  t.equal(counterValue(c.ctr_1, t0), 4, 'six days ago is inside a 7-day window');
  t.equal(counterValue(c.ctr_1, t0 + dayMs), 3, 'a day later the oldest day left the window');
  t.equal(counterValue(c.ctr_1, t0 + 7 * dayMs), 0);
  const later = count([d], [{ at: t0 - 6 * dayMs }, { at: t0 + 30 * dayMs }]);
  t.equal(later.ctr_1!.b!.length, 1, 'buckets older than the window before the newest are dropped (bounded state)');
  const late = count([d], [{ at: t0 - 8 * dayMs, now: t0 }]);
  t.same(late, {}, 'an event older than the window changes nothing');
});

t.test('period: calendar periods in the environment time zone; a new period starts from 1', async (t) => {
  const d = def({ window: { kind: 'period', period: 'day' } });
  // 23:30 UTC on the 23rd is already the 24th in Tokyo.
  const late = Date.UTC(2026, 10, 23, 23, 30);
  const tokyo = count([d], [{ at: t0 }, { at: late }], 'Asia/Tokyo');
  t.equal(counterValue(tokyo.ctr_1, late), 1, 'Tokyo: a new day began at 15:00 UTC');
  const utc = count([d], [{ at: t0 }, { at: late }], 'UTC');
  t.equal(counterValue(utc.ctr_1, late), 2);
  t.equal(counterValue(utc.ctr_1, late + dayMs), 0, 'the next day reads 0 before any event');
  const month = count([def({ window: { kind: 'period', period: 'month' } })], [{ at: t0 }, { at: Date.UTC(2026, 11, 1, 1) }]);
  t.equal(counterValue(month.ctr_1, Date.UTC(2026, 11, 2)), 1);
  t.equal(month.ctr_1!.key, '2026-12');
  const week = count([def({ window: { kind: 'period', period: 'week' } })], [{ at: t0 }, { at: t0 + 6 * dayMs }]);
  t.equal(counterValue(week.ctr_1, t0 + 6 * dayMs), 2, 'Monday to Sunday is one ISO week');
});

t.test('filter: a condition over event.properties.* in the rule language', async (t) => {
  const ok = compileCounterFilter('purchase', { all: [{ path: 'event.properties.sku', op: 'eq', value: 'gem_pack' }] });
  t.equal(ok.ok, true);
  const filter = ok.ok ? ok.plan : null;
  const c = count([def({ filter })], [{ at: t0, props: { sku: 'gem_pack' } }, { at: t0, props: { sku: 'coin_pack' } }, { at: t0 }]);
  t.equal(counterValue(c.ctr_1, t0), 1);

  const badPath = compileCounterFilter('purchase', { path: 'customer.attributes.country', op: 'eq', value: 'FR' });
  t.same(badPath, { ok: false, issues: [{ param: 'filter.path', message: "A counter filter reads only event.properties.<name>; got 'customer.attributes.country'." }] });
  // A path the rule language does not know either is named the same way (not with the rules' prefixes).
  const unknownPath = compileCounterFilter('purchase', { all: [{ path: 'event.nope', op: 'eq', value: 1 }, { path: 'event.properties.sku', op: 'eq', value: 'x' }] });
  t.same(unknownPath, { ok: false, issues: [{ param: 'filter.all[0].path', message: "A counter filter reads only event.properties.<name>; got 'event.nope'." }] });
  const badOp = compileCounterFilter('purchase', { all: [{ path: 'event.properties.sku', op: 'nope', value: 1 }] });
  t.match(badOp, { ok: false, issues: [{ param: 'filter.all[0].op' }] });
});

t.test('windows are validated with the wire param', async (t) => {
  t.equal(validateWindow({ kind: 'lifetime' }), null);
  t.equal(validateWindow({ kind: 'rolling_days', days: 365 }), null);
  t.match(validateWindow({ kind: 'rolling_days', days: 0 }), { param: 'window.days' });
  t.match(validateWindow({ kind: 'rolling_days', days: 366 }), { param: 'window.days' });
  t.match(validateWindow({ kind: 'period', period: 'year' }), { param: 'window.period' });
  t.match(validateWindow({ kind: 'forever' }), { param: 'window.kind' });
  t.match(validateWindow('lifetime'), { param: 'window' });
});

t.test('historical base: counted like live events, merged once with the live count', async (t) => {
  const d = def({ window: { kind: 'rolling_days', days: 3 } });
  const past = [
    { name: 'purchase', occurredAtMs: t0 - 5 * dayMs, properties: {} },
    { name: 'purchase', occurredAtMs: t0 - dayMs, properties: {} },
    { name: 'purchase', occurredAtMs: t0 - dayMs, properties: {} },
  ];
  const base = historicalBase(d, past, 'UTC', t0)!;
  t.equal(counterValue(base, t0), 2, 'only the days inside the window');
  const live = count([d], [{ at: t0 }]);
  const merged = applyBase(live.ctr_1, base);
  t.equal(counterValue(merged, t0), 3);
  t.equal(merged.based, true);
  t.equal(historicalBase(d, [{ name: 'purchase', occurredAtMs: t0 - 10 * dayMs, properties: {} }], 'UTC', t0), null);
  const lifetime = historicalBase(def(), past, 'UTC', t0)!;
  t.equal(counterValue(applyBase(undefined, lifetime), t0), 3);
});

// ---- through the customer mechanic ------------------------------------------------------------

function ctxAt(nowMs: number): Ctx {
  let n = 0;
  return { nowMs, environmentId: 'env_1', newId: (p) => `${p}_${++n}`, newCustomerId: () => 'cust_1', newEventId: () => `evt_${nowMs}_${++n}` };
}

function plan(counterName: string, min: number): RulePlan {
  return compileRule(
    {
      schema: 'service.rule/v2',
      trigger: { kind: 'customer_event', event: 'purchase' },
      conditions: { path: `customer.counters.${counterName}`, op: 'gte', value: min },
      actions: [{ type: 'points.award', currency: 'coins', amount: 10 }],
    },
    { ruleId: 'rule_1', versionNumber: 1, priority: 0 },
  );
}

t.test('given a counter and a rule reading it, when events arrive, then the count journals with the event and replay rebuilds it', async (t) => {
  let state: CustomerState | null = null;
  const journal: Fact[][] = [];
  const send = (id: string, status: 'ready' | 'backfilling', nowMs: number) => {
    const d = decide(
      state,
      {
        kind: 'event.record',
        externalId: 'p1',
        clientEventId: id,
        name: 'purchase',
        occurredAtMs: nowMs,
        properties: {},
        fp: 1,
        trust: 'merchant_asserted', source: { type: 'secret_key', id: 'key_test' },
        rules: { plans: [plan('purchases', 2)], currencies: [{ key: 'coins', negativeBalance: 'forbid', expiryDays: null }], tierPrograms: [] },
        counters: { defs: [def({ status })], timeZone: 'UTC' },
      },
      ctxAt(nowMs),
    );
    if (!d.ok) throw new Error(d.code);
    journal.push(d.facts);
    for (const f of d.facts) state = evolve(state, f);
    return d.reply.kind === 'event' ? d.reply.effects : [];
  };
  t.match(send('e1', 'backfilling', t0), [{ type: 'rule.skipped', reason: 'counter_not_ready', detail: /purchases/ }]);
  t.match(send('e2', 'ready', t0 + 1), [{ type: 'rule.fired' }, { type: 'points.awarded', amount: 10 }], 'the rule sees the count including this event');
  t.ok(journal[1]!.some((f) => f.kind === 'counter.counted'), 'the bump is in the same journal entry as the event');
  t.equal(counterValue(state!.counters.ctr_1, t0 + 1), 2);

  let replayed: CustomerState | null = null;
  for (const facts of journal) for (const f of structuredClone(facts)) replayed = evolve(replayed, f);
  t.same(replayed!.counters, state!.counters, 'replay rebuilds identical counters');

  // A backfill base applies once; a second one is refused.
  const b1 = decide(state, { kind: 'counter.backfill', counterId: 'ctr_1', base: { n: 5 } }, ctxAt(t0 + 2));
  t.match(b1, { ok: true, reply: { kind: 'applied', changed: true } });
  for (const f of b1.ok ? b1.facts : []) state = evolve(state, f);
  t.equal(counterValue(state!.counters.ctr_1, t0 + 2), 7);
  const b2 = decide(state, { kind: 'counter.backfill', counterId: 'ctr_1', base: { n: 5 } }, ctxAt(t0 + 3));
  t.match(b2, { ok: true, facts: [], reply: { kind: 'applied', changed: false } });
});

t.test("joinCounter: a merged customer's counts join the survivor's like a historical base; the bases it held move with them", async (t) => {
  t.same(joinCounter({ n: 2 }, { n: 3, based: true }, 'm'), { n: 5, basedFrom: ['m'] }, "lifetime adds; the survivor's own base is still to come, m's is in");
  t.same(joinCounter({ n: 1, based: true }, { n: 3 }, 'm'), { n: 4, based: true });
  t.same(joinCounter(undefined, { n: 3, based: true }, 'm'), { n: 3, basedFrom: ['m'] }, 'a counter only the merged customer had');
  t.same(joinCounter({ n: 1, basedFrom: ['a'] }, { n: 3, based: true, basedFrom: ['b'] }, 'm'), { n: 4, basedFrom: ['a', 'b', 'm'] }, 'through earlier merges');
  t.same(joinCounter({ n: 2, key: '2026-11-25', endMs: 10 }, { n: 3, key: '2026-11-25', endMs: 10 }, 'm'), { n: 5, key: '2026-11-25', endMs: 10 }, 'the same period adds');
  t.same(joinCounter({ n: 2, key: '2026-11-24', endMs: 5 }, { n: 3, key: '2026-11-25', endMs: 10 }, 'm'), { n: 3, key: '2026-11-25', endMs: 10 }, 'a later period wins');
});

t.test("a backfill base is taken once per customer that recorded the events: the survivor's own and each merged customer's", async (t) => {
  const base = { n: 2 };
  let s = evolveCounters({}, { kind: 'counter.backfilled', id: 'c', base, atMs: 1 });
  t.ok(hasBase(s.c, 's', 's'));
  t.notOk(hasBase(s.c, 's', 'm'), "a merged customer's base is still to come");
  s = evolveCounters(s, { kind: 'counter.backfilled', id: 'c', base: { n: 3 }, atMs: 2, from: 'm' });
  t.same(s.c, { n: 5, based: true, basedFrom: ['m'] });
  t.ok(hasBase(s.c, 's', 'm'));
  const copy = cloneCounterState(s.c!);
  copy.basedFrom!.push('x');
  t.same(s.c!.basedFrom, ['m'], 'a copy shares no list with the original');
});

t.test('cloneCounterState: bumping the copy leaves the original (day buckets included) as it was', async (t) => {
  const rolling: CounterState = { n: 0, days: 7, b: [[100, 2], [101, 1]] };
  const period: CounterState = { n: 3, key: '2030-06-01', endMs: 5 };
  const r = applyBump(cloneCounterState(rolling), { id: 'c', w: 'r', d: 101, days: 7 });
  const p = applyBump(cloneCounterState(period), { id: 'c', w: 'p', key: '2030-06-01', endMs: 5 });
  t.same(rolling, { n: 0, days: 7, b: [[100, 2], [101, 1]] });
  t.same(period, { n: 3, key: '2030-06-01', endMs: 5 });
  t.same(r.b, [[100, 2], [101, 2]]);
  t.equal(p.n, 4);
  t.notOk('b' in cloneCounterState(period), 'no field the original lacks');
});
