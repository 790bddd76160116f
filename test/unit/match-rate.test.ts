// Rate windows per ownership group (spec 2.11, 2.12): given/when/then cases (window edges,
// out-of-order reports, several limits, replays, release, pruning, merges) and fast-check
// properties: applied one report at a time, no window ever holds more than max_matches, and each
// decision equals a brute-force reference model; a replay of the facts rebuilds the state.
import fc from 'fast-check';
import t from 'tap';
import {
  busiestWindowWith,
  decideRate,
  evolveRate,
  mergeRateStates,
  type PendingVerdict,
  type RateFact,
  type RateLimit,
  type RateState,
} from '../../src/domain/match/index.js';

const minute = 60_000;
const hour = 60 * minute;
const day = 24 * hour;
const now = Date.parse('2025-03-10T12:00:00Z');
const pid = 'mpf_1';

/** Applies one count for one player, as the group's actor would; returns the new state and outcome. */
function count(state: RateState, limits: RateLimit[], matchId: string, endedAtMs: number, opts: { customerId?: string; pending?: PendingVerdict; nowMs?: number } = {}) {
  const d = decideRate(
    state,
    {
      kind: 'match_rate.count',
      profileId: pid,
      rateLimits: limits,
      matchId,
      customerId: opts.customerId ?? 'cust_a',
      endedAtMs,
      pending: opts.pending ?? 'admitted',
    },
    { nowMs: opts.nowMs ?? now },
  );
  let s = state;
  for (const f of d.facts) s = evolveRate(s, f);
  return { state: s, reply: d.reply, facts: d.facts };
}

const times = (s: RateState) => (s[pid]?.entries ?? []).map((e) => e.endedAtMs);

t.test('given max 2 per hour, the third match within an hour is rate_limited with value and limit', async (t) => {
  const limits = [{ windowSeconds: 3600, maxMatches: 2 }];
  let s: RateState = {};
  for (const [i, at] of [now - 50 * minute, now - 30 * minute].entries()) {
    const r = count(s, limits, `m${i}`, at);
    t.same(r.reply, { result: 'counted' });
    s = r.state;
  }
  const third = count(s, limits, 'm3', now - 10 * minute);
  t.match(third.reply, { result: 'rejected', reasons: [{ code: 'rate_limited', value: 2, limit: 2 }] });
  t.same(third.facts, []);
});

t.test('window edges: matches exactly window_seconds apart do not share a window', async (t) => {
  const limits = [{ windowSeconds: 3600, maxMatches: 1 }];
  const first = count({}, limits, 'a', now - hour);
  t.same(count(first.state, limits, 'b', now).reply, { result: 'counted' }, 'exactly one hour later');
  t.match(count(first.state, limits, 'b', now - 1).reply, { result: 'rejected' }, '1 ms less than an hour later');
});

t.test('out-of-order reports: a match ending before already-counted ones is limited by the windows it falls in', async (t) => {
  const limits = [{ windowSeconds: 3600, maxMatches: 2 }];
  let s: RateState = {};
  s = count(s, limits, 'late1', now - 10 * minute).state;
  s = count(s, limits, 'late2', now - 5 * minute).state;
  // Nothing ends in the hour before now-30min, but [now-30min, now+30min) would hold 3.
  t.match(count(s, limits, 'early', now - 30 * minute).reply, { result: 'rejected', reasons: [{ code: 'rate_limited' }] });
  // Far enough back, it shares no window with the two.
  t.same(count(s, limits, 'earlier', now - 70 * minute).reply, { result: 'counted' });
});

t.test('several limits: the first one broken is reported', async (t) => {
  const limits = [
    { windowSeconds: 3600, maxMatches: 3 },
    { windowSeconds: 600, maxMatches: 1 },
  ];
  const s = count({}, limits, 'a', now - 5 * minute).state;
  t.match(count(s, limits, 'b', now - 4 * minute).reply, { result: 'rejected', reasons: [{ code: 'rate_limited', limit: 1 }] });
  t.same(count(s, limits, 'c', now - 20 * minute).reply, { result: 'counted' });
});

t.test('held counts, a pending rejection passes the stage without counting; a retry is a replay', async (t) => {
  const limits = [{ windowSeconds: 3600, maxMatches: 1 }];
  const held = count({}, limits, 'a', now, { pending: 'held' });
  t.same(held.reply, { result: 'counted' });
  t.same(count(held.state, limits, 'a', now).reply, { result: 'replayed' });
  t.same(count(held.state, limits, 'a', now).facts, []);
  const rejected = count({}, limits, 'b', now, { pending: 'rejected' });
  t.same(rejected.reply, { result: 'not_counted' });
  t.same(times(rejected.state), []);
});

t.test('release frees the slot; releasing twice changes nothing', async (t) => {
  const limits = [{ windowSeconds: 3600, maxMatches: 1 }];
  const s = count({}, limits, 'a', now).state;
  const d = decideRate(s, { kind: 'match_rate.release', profileId: pid, matchId: 'a', customerId: 'cust_a' }, { nowMs: now });
  t.equal(d.facts.length, 1);
  const freed = evolveRate(s, d.facts[0]!);
  t.same(times(freed), []);
  t.same(count(freed, limits, 'b', now).reply, { result: 'counted' });
  t.same(decideRate(freed, { kind: 'match_rate.release', profileId: pid, matchId: 'a', customerId: 'cust_a' }, { nowMs: now }).facts, []);
});

t.test('pruning drops entries no report that passes the ended_at window can reach', async (t) => {
  const limits = [{ windowSeconds: 3600, maxMatches: 5 }];
  let s = count({}, limits, 'old', now - 8 * day, { nowMs: now - 2 * day }).state;
  s = count(s, limits, 'kept', now - 7 * day - 30 * minute, { nowMs: now - day }).state;
  t.same(times(s), [now - 8 * day, now - 7 * day - 30 * minute], 'nothing pruned yet a day ago');
  s = count(s, limits, 'new', now).state;
  t.same(times(s), [now - 7 * day - 30 * minute, now], 'older than 7 days + the widest window is gone');
});

t.test('profiles keep separate books', async (t) => {
  const limits = [{ windowSeconds: 3600, maxMatches: 1 }];
  const s = count({}, limits, 'a', now).state;
  const other = decideRate(
    s,
    { kind: 'match_rate.count', profileId: 'mpf_2', rateLimits: limits, matchId: 'b', customerId: 'cust_a', endedAtMs: now, pending: 'admitted' },
    { nowMs: now },
  );
  t.same(other.reply, { result: 'counted' });
});

t.test('merged customers share their windows', async (t) => {
  const limits = [{ windowSeconds: 3600, maxMatches: 2 }];
  const a = count({}, limits, 'x', now - 20 * minute, { customerId: 'cust_a' }).state;
  const b = count({}, limits, 'y', now - 10 * minute, { customerId: 'cust_b' }).state;
  const merged = mergeRateStates(a, b);
  t.same(times(merged), [now - 20 * minute, now - 10 * minute]);
  t.match(count(merged, limits, 'z', now, { customerId: 'cust_a' }).reply, { result: 'rejected', reasons: [{ code: 'rate_limited' }] });
  t.same(mergeRateStates(merged, b), merged, 'merging again adds nothing');
});

t.test('a match both merged customers played counts once in their windows', async (t) => {
  const limits = [{ windowSeconds: 3600, maxMatches: 2 }];
  const a = count({}, limits, 'g1', now - 20 * minute, { customerId: 'cust_a' }).state;
  const b = count({}, limits, 'g1', now - 20 * minute, { customerId: 'cust_b' }).state;
  const merged = mergeRateStates(a, b);
  t.equal(merged[pid]!.entries.length, 2, 'each player keeps its entry (retries and releases find their own)');
  const g2 = count(merged, limits, 'g2', now - 10 * minute, { customerId: 'cust_a' });
  t.same(g2.reply, { result: 'counted' }, 'one match in the hour (g1), not two');
  t.match(count(g2.state, limits, 'g3', now, { customerId: 'cust_b' }).reply, { result: 'rejected', reasons: [{ code: 'rate_limited', value: 2, limit: 2 }] });
  const released = decideRate(merged, { kind: 'match_rate.release', profileId: pid, matchId: 'g1', customerId: 'cust_b' }, { nowMs: now });
  t.same(released.facts.reduce(evolveRate, merged)[pid]!.entries.map((e) => e.customerId), ['cust_a'], "a release frees only that player's entry");
});

t.test('concurrency: N simultaneous reports for one player, applied one at a time, admit exactly max_matches', async (t) => {
  for (const max of [1, 3, 10]) {
    const limits = [{ windowSeconds: 3600, maxMatches: max }];
    let s: RateState = {};
    let counted = 0;
    for (let i = 0; i < 50; i++) {
      const r = count(s, limits, `burst-${i}`, now - (i % 7) * 1000);
      s = r.state;
      if (r.reply.result === 'counted') counted++;
    }
    t.equal(counted, max, `max ${max}`);
  }
});

// --- properties ----------------------------------------------------------------------------------

/** Brute force: the largest number of times in any half-open window of `windowMs`. */
function busiest(ts: number[], windowMs: number): number {
  let best = 0;
  for (const a of ts) best = Math.max(best, ts.filter((x) => x >= a && x < a + windowMs).length);
  return best;
}

const limitArb = fc.record({ windowSeconds: fc.integer({ min: 60, max: 7200 }), maxMatches: fc.integer({ min: 1, max: 5 }) });
const limitsArb = fc.uniqueArray(limitArb, { minLength: 1, maxLength: 3, selector: (l) => l.windowSeconds });
// Reports over four hours on a 30-second grid (so equal and edge-distance times happen often).
const reportArb = fc.record({
  at: fc.integer({ min: 0, max: 480 }).map((n) => now - n * 30_000),
  pending: fc.constantFrom<PendingVerdict>('admitted', 'admitted', 'held', 'rejected'),
});

t.test('property: one at a time, every window holds at most max_matches, and each decision matches a reference model', async (t) => {
  fc.assert(
    fc.property(limitsArb, fc.array(reportArb, { maxLength: 60 }), (limits, reports) => {
      let s: RateState = {};
      const model: number[] = [];
      const facts: RateFact[] = [];
      for (const [i, r] of reports.entries()) {
        const d = count(s, limits, `m${i}`, r.at, { pending: r.pending });
        const wouldBreak = limits.some((l) => busiest([...model, r.at], l.windowSeconds * 1000) > l.maxMatches);
        const expected = wouldBreak ? 'rejected' : r.pending === 'rejected' ? 'not_counted' : 'counted';
        if (d.reply.result !== expected) return false;
        if (expected === 'counted') model.push(r.at);
        s = d.state;
        facts.push(...d.facts);
        for (const l of limits) if (busiest(times(s), l.windowSeconds * 1000) > l.maxMatches) return false;
      }
      const sorted = [...model].sort((a, b) => a - b);
      if (JSON.stringify(times(s)) !== JSON.stringify(sorted)) return false;
      // Replay (evolve only) rebuilds the same state.
      return JSON.stringify(facts.reduce(evolveRate, {} as RateState)) === JSON.stringify(s);
    }),
    { numRuns: 300 },
  );
  t.pass('holds');
});

t.test('property: busiestWindowWith equals brute force', async (t) => {
  fc.assert(
    fc.property(fc.array(fc.integer({ min: 0, max: 100 }), { maxLength: 30 }), fc.integer({ min: 0, max: 100 }), fc.integer({ min: 1, max: 40 }), (xs, at, w) => {
      const entries = [...xs].sort((a, b) => a - b).map((x, i) => ({ endedAtMs: x, matchId: `m${i}`, customerId: 'c' }));
      const brute = (() => {
        let best = 0;
        // Every window [a, a + w) that contains `at`.
        for (let a = at - w + 1; a <= at; a++) best = Math.max(best, xs.filter((x) => x >= a && x < a + w).length + 1);
        return best;
      })();
      return busiestWindowWith(entries, at, w) === brute;
    }),
    { numRuns: 500 },
  );
  t.pass('holds');
});

t.test('property: busiestWindowWith counts distinct matches when merged customers share some', async (t) => {
  // Matches on a small grid; each played by one or two customers of the group (two: a merge).
  const matchArb = fc.record({ at: fc.integer({ min: 0, max: 100 }), players: fc.integer({ min: 1, max: 2 }) });
  fc.assert(
    fc.property(fc.array(matchArb, { maxLength: 30 }), fc.integer({ min: 0, max: 100 }), fc.integer({ min: 1, max: 40 }), (ms, at, w) => {
      let state: RateState = {};
      for (const [i, m] of ms.entries()) {
        for (let p = 0; p < m.players; p++) {
          const fact: RateFact = { kind: 'match_rate.counted', profileId: pid, matchId: `m${i}`, customerId: `c${p}`, endedAtMs: m.at, pruneBeforeMs: 0 };
          state = mergeRateStates(state, evolveRate({}, fact));
        }
      }
      let brute = 0;
      for (let a = at - w + 1; a <= at; a++) brute = Math.max(brute, ms.filter((m) => m.at >= a && m.at < a + w).length + 1);
      return busiestWindowWith(state[pid]?.entries ?? [], at, w) === brute;
    }),
    { numRuns: 500 },
  );
  t.pass('holds');
});

t.test('property: interleaved players of one group (after a merge) still never exceed max_matches', async (t) => {
  fc.assert(
    fc.property(
      limitsArb,
      fc.array(fc.record({ at: reportArb.map((r) => r.at), who: fc.constantFrom('cust_a', 'cust_b', 'cust_c') }), { maxLength: 60 }),
      (limits, reports) => {
        let s: RateState = {};
        for (const [i, r] of reports.entries()) s = count(s, limits, `m${i}`, r.at, { customerId: r.who }).state;
        return limits.every((l) => busiest(times(s), l.windowSeconds * 1000) <= l.maxMatches);
      },
    ),
    { numRuns: 200 },
  );
  t.pass('holds');
});
