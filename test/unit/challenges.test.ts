// Given/when/then tests of the challenge mechanic: contribution-key deduplication, local-midnight
// rollover in a non-UTC zone, completion exactly once (property-tested), explicit enrollment,
// the schedule window and status gate, repeatable cycles, revoke, reevaluate, validation and
// status transitions, and that replaying the facts rebuilds the same state.
import fc from 'fast-check';
import t, { type Test } from 'tap';
import {
  type ChallengeConfig,
  type ChallengeFact,
  type ChallengesState,
  type Command,
  canTransitionChallenge,
  challengeLimits,
  challengesForEvent,
  decide,
  emptyChallengesState,
  joinChallenges,
  type ChallengeProgress,
  evolve,
  nextPeriodBoundaryMs,
  progressAt,
  readContribution,
  validateChallenge,
} from '../../src/domain/challenges.js';

const utc = (iso: string) => Date.parse(iso);
const T0 = utc('2026-11-23T12:00:00Z');
const berlin = 'Europe/Berlin';

function challenge(over: Partial<ChallengeConfig> = {}): ChallengeConfig {
  return {
    id: 'chl_1',
    name: 'Play 3 matches',
    qualifying: { event: 'match.completed' },
    target: 3,
    period: 'none',
    contributionKey: 'event.properties.match_id',
    enrollment: 'automatic',
    repeatable: false,
    startsAtMs: null,
    endsAtMs: null,
    status: 'active',
    completionActions: [{ type: 'points.award', currency: 'pts', amount: 100 }],
    ...over,
  };
}

/** A world that records every fact so a replay can be compared. */
class World {
  state: ChallengesState = emptyChallengesState();
  journal: ChallengeFact[] = [];
  n = 0;
  run(cmd: Command, nowMs = T0) {
    const d = decide(this.state, cmd, { nowMs });
    if (d.ok) {
      for (const f of d.facts) {
        evolve(this.state, f);
        this.journal.push(f);
      }
    }
    return d;
  }
  contribute(c: ChallengeConfig, contribution: string | null, nowMs = T0, qualifies = true, timeZone = berlin) {
    return this.run({ kind: 'challenge.contribute', challenge: c, eventId: `evt_${++this.n}`, contribution, qualifies, timeZone }, nowMs);
  }
  completions(): ChallengeFact[] {
    return this.journal.filter((f) => f.kind === 'challenge.completed');
  }
}

/** t.match lets an actual array be longer than the pattern; lists here must match in length too. */
function matchList(t: Test, actual: unknown[], pattern: unknown[], message = 'list') {
  t.equal(actual.length, pattern.length, `${message} (length)`);
  t.match(actual, pattern, message);
}

function facts(d: ReturnType<World['run']>): ChallengeFact[] {
  return d.ok ? d.facts : [];
}

function reply(d: ReturnType<World['run']>) {
  if (!d.ok) throw new Error(`expected ok, got ${d.code}`);
  return d.reply as Extract<typeof d.reply, { kind: 'contribution' }>;
}

// --- contribution and completion ---------------------------------------------------------------

t.test('given a keyed challenge, each distinct contribution value counts once', async (t) => {
  const w = new World();
  const c = challenge();
  t.match(reply(w.contribute(c, 'm1')), { outcome: 'progressed', progress: { count: 1, contributions: ['m1'], periodKey: 'all' } });
  t.match(reply(w.contribute(c, 'm1')), { outcome: 'skipped', reason: 'duplicate_contribution', progress: { count: 1 } });
  t.match(reply(w.contribute(c, 'm2')), { outcome: 'progressed', progress: { count: 2 } });
  t.same(w.state.progress['chl_1']?.contributions, ['m1', 'm2']);
});

t.test('given a keyed challenge, an event without the value makes no progress', async (t) => {
  const w = new World();
  t.match(reply(w.contribute(challenge(), null)), { outcome: 'skipped', reason: 'contribution_missing', progress: null });
  t.match(reply(w.contribute(challenge(), 'x'.repeat(challengeLimits.contributionCharsMax + 1))), { reason: 'contribution_invalid' });
});

t.test('given no contribution key, every qualifying event counts and no values are stored', async (t) => {
  const w = new World();
  const c = challenge({ contributionKey: null, target: 2 });
  w.contribute(c, 'ignored');
  const second = reply(w.contribute(c, 'ignored'));
  t.match(second, { outcome: 'completed', progress: { count: 2, status: 'completed' } });
  t.same(w.state.progress['chl_1']?.contributions, []);
});

t.test('given the target is reached, the period completes with the completion actions in the same decision', async (t) => {
  const w = new World();
  const c = challenge();
  w.contribute(c, 'm1');
  w.contribute(c, 'm2');
  const d = w.contribute(c, 'm3', T0 + 5);
  t.ok(d.ok);
  if (!d.ok) return;
  t.same(
    d.facts.map((f) => f.kind),
    ['challenge.progressed', 'challenge.completed'],
  );
  t.same(d.facts[1], {
    kind: 'challenge.completed',
    challengeId: 'chl_1',
    challengeName: 'Play 3 matches',
    periodKey: 'all',
    cycle: 1,
    count: 3,
    target: 3,
    completionActions: [{ type: 'points.award', currency: 'pts', amount: 100 }],
    completions: 1,
    atMs: T0 + 5,
  });
  t.match(w.state.progress['chl_1'], { status: 'completed', completedAtMs: T0 + 5, count: 3 });
  t.match(reply(w.contribute(c, 'm4')), { outcome: 'skipped', reason: 'already_completed' }, 'not repeatable: never again');
  t.equal(w.completions().length, 1);
});

t.test('given a non-qualifying event (conditions failed in the caller), nothing progresses', async (t) => {
  const w = new World();
  t.match(reply(w.contribute(challenge(), 'm1', T0, false)), { outcome: 'skipped', reason: 'not_qualifying' });
  t.same(w.journal, []);
});

// --- periods ----------------------------------------------------------------------------------

t.test('given a daily challenge in Berlin, progress rolls over at local midnight, not UTC midnight', async (t) => {
  const w = new World();
  const c = challenge({ period: 'daily', repeatable: true, target: 2 });
  const beforeMidnight = utc('2026-11-23T22:59:00Z'); // 23:59 CET
  const afterMidnight = utc('2026-11-23T23:01:00Z'); // 00:01 CET the 24th, still the 23rd in UTC
  t.match(reply(w.contribute(c, 'm1', beforeMidnight)), { progress: { periodKey: '2026-11-23', count: 1 } });
  t.match(reply(w.contribute(c, 'm1', afterMidnight)), { outcome: 'progressed', progress: { periodKey: '2026-11-24', count: 1, contributions: ['m1'] } }, 'same value counts again in a new period');
  t.equal(nextPeriodBoundaryMs(c, afterMidnight, berlin), utc('2026-11-24T23:00:00Z'));
});

t.test('given a repeatable daily challenge, it completes once per day and again the next day', async (t) => {
  const w = new World();
  const c = challenge({ period: 'daily', repeatable: true, target: 1 });
  t.match(reply(w.contribute(c, 'a', utc('2026-11-23T10:00:00Z'))), { outcome: 'completed' });
  t.match(reply(w.contribute(c, 'b', utc('2026-11-23T11:00:00Z'))), { outcome: 'skipped', reason: 'period_completed' });
  t.match(reply(w.contribute(c, 'c', utc('2026-11-24T10:00:00Z'))), { outcome: 'completed', progress: { periodKey: '2026-11-24' } });
  t.same(
    w.completions().map((f) => (f.kind === 'challenge.completed' ? [f.periodKey, f.completions] : [])),
    [
      ['2026-11-23', 1],
      ['2026-11-24', 2],
    ],
  );
});

t.test('given a non-repeatable daily challenge, a completion ends it for good', async (t) => {
  const w = new World();
  const c = challenge({ period: 'daily', repeatable: false, target: 1 });
  w.contribute(c, 'a', utc('2026-11-23T10:00:00Z'));
  t.match(reply(w.contribute(c, 'b', utc('2026-11-25T10:00:00Z'))), { reason: 'already_completed' });
});

t.test('given a repeatable challenge of period none, each completion starts a new cycle from 0', async (t) => {
  const w = new World();
  const c = challenge({ repeatable: true, target: 2 });
  w.contribute(c, 'm1');
  t.match(reply(w.contribute(c, 'm2')), { outcome: 'completed', progress: { cycle: 1, count: 2 } });
  t.match(w.state.progress['chl_1'], { status: 'completed' }, 'shows completed until the next event');
  t.match(reply(w.contribute(c, 'm1')), { outcome: 'progressed', progress: { cycle: 2, count: 1, status: 'active' } });
  t.same(w.state.progress['chl_1']?.contributions, ['m1'], 'values reset with the cycle');
  t.match(reply(w.contribute(c, 'm3')), { outcome: 'completed', progress: { cycle: 2 } });
  t.same(
    w.completions().map((f) => (f.kind === 'challenge.completed' ? f.cycle : 0)),
    [1, 2],
  );
});

t.test('given the clock stepped back into the previous day, progress stays in the latest period', async (t) => {
  const w = new World();
  const c = challenge({ period: 'daily', repeatable: true, target: 5 });
  w.contribute(c, 'a', utc('2026-11-24T10:00:00Z'));
  t.match(reply(w.contribute(c, 'b', utc('2026-11-23T10:00:00Z'))), { progress: { periodKey: '2026-11-24', count: 2 } });
});

t.test('given a rolled-over period, progressAt shows a fresh record for the current period', async (t) => {
  const w = new World();
  const c = challenge({ period: 'daily', repeatable: true });
  t.equal(progressAt(w.state, c, T0, berlin), null);
  w.contribute(c, 'a', utc('2026-11-23T10:00:00Z'));
  t.match(progressAt(w.state, c, utc('2026-11-23T20:00:00Z'), berlin), { periodKey: '2026-11-23', count: 1 });
  const rolled = progressAt(w.state, c, utc('2026-11-24T10:00:00Z'), berlin);
  t.match(rolled, { periodKey: '2026-11-24', count: 0, status: 'active' });
  t.same(rolled?.contributions, []);
});

// --- gates ------------------------------------------------------------------------------------

t.test('given explicit enrollment, progress waits for enrollment and stops after unenrollment', async (t) => {
  const w = new World();
  const c = challenge({ enrollment: 'explicit' });
  t.match(reply(w.contribute(c, 'm1')), { outcome: 'skipped', reason: 'not_enrolled' });
  const e = w.run({ kind: 'challenge.enroll', challenge: c }, T0 + 1);
  t.match(e, { ok: true, reply: { kind: 'enrollment', created: true, enrollment: { challengeId: 'chl_1', enrolledAtMs: T0 + 1 } } });
  const again = w.run({ kind: 'challenge.enroll', challenge: c }, T0 + 2);
  t.match(again, { ok: true, reply: { created: false, enrollment: { enrolledAtMs: T0 + 1 } } }, 'enrolling twice answers the first');
  t.same(facts(again), []);
  t.match(reply(w.contribute(c, 'm1')), { outcome: 'progressed' });
  t.match(w.run({ kind: 'challenge.unenroll', challengeId: 'chl_1' }), { ok: true });
  t.match(reply(w.contribute(c, 'm2')), { reason: 'not_enrolled', progress: { count: 1 } }, 'progress kept but frozen');
  t.match(w.run({ kind: 'challenge.unenroll', challengeId: 'chl_1' }), { ok: false, code: 'resource_not_found' });
});

t.test('given an ended challenge, enrollment is invalid_state', async (t) => {
  const w = new World();
  t.match(w.run({ kind: 'challenge.enroll', challenge: challenge({ status: 'ended' }) }), { ok: false, code: 'invalid_state' });
  t.match(w.run({ kind: 'challenge.enroll', challenge: challenge({ endsAtMs: T0 }) }, T0), { ok: false, code: 'invalid_state' });
  t.match(w.run({ kind: 'challenge.enroll', challenge: challenge({ status: 'draft' }) }), { ok: true }, 'drafts accept enrollments');
});

t.test('given a schedule window, events before starts_at and from ends_at on make no progress', async (t) => {
  const w = new World();
  const c = challenge({ startsAtMs: T0, endsAtMs: T0 + 1000 });
  t.match(reply(w.contribute(c, 'a', T0 - 1)), { reason: 'challenge_not_started' });
  t.match(reply(w.contribute(c, 'a', T0)), { outcome: 'progressed' });
  t.match(reply(w.contribute(c, 'b', T0 + 999)), { outcome: 'progressed' });
  t.match(reply(w.contribute(c, 'c', T0 + 1000)), { reason: 'challenge_ended' });
});

t.test('given a challenge that is not active, nothing progresses and the gates run in order', async (t) => {
  const w = new World();
  for (const status of ['draft', 'paused', 'ended'] as const) {
    t.match(reply(w.contribute(challenge({ status }), 'a')), { reason: 'challenge_not_active' }, status);
  }
  // Status is checked before the window, the window before enrollment, enrollment before qualification.
  t.match(reply(w.contribute(challenge({ status: 'paused', startsAtMs: T0 + 1 }), 'a')), { reason: 'challenge_not_active' });
  t.match(reply(w.contribute(challenge({ startsAtMs: T0 + 1, enrollment: 'explicit' }), 'a')), { reason: 'challenge_not_started' });
  t.match(reply(w.contribute(challenge({ enrollment: 'explicit' }), null, T0, false)), { reason: 'not_enrolled' });
  t.same(w.journal, []);
});

// --- revoke and reevaluate --------------------------------------------------------------------

t.test('given a contribution, revoke removes it and it may count again', async (t) => {
  const w = new World();
  const c = challenge();
  w.contribute(c, 'm1');
  w.contribute(c, 'm2');
  const r = w.run({ kind: 'challenge.revoke', challenge: c, contribution: 'm1' }, T0 + 9);
  t.match(r, { ok: true, reply: { kind: 'progress', progress: { count: 1, updatedAtMs: T0 + 9 } } });
  matchList(t, facts(r), [{ kind: 'challenge.revoked', contribution: 'm1', count: 1 }]);
  t.match(w.state.progress['chl_1'], { count: 1 });
  t.same(w.state.progress['chl_1']?.contributions, ['m2']);
  t.match(reply(w.contribute(c, 'm1')), { outcome: 'progressed', progress: { count: 2 } });
});

t.test('given an unknown contribution or no progress, revoke is resource_not_found', async (t) => {
  const w = new World();
  const c = challenge();
  t.match(w.run({ kind: 'challenge.revoke', challenge: c, contribution: 'm1' }), { ok: false, code: 'resource_not_found', param: 'customer_id' });
  w.contribute(c, 'm1');
  t.match(w.run({ kind: 'challenge.revoke', challenge: c, contribution: 'zz' }), { ok: false, code: 'resource_not_found', param: 'contribution' });
  t.match(w.run({ kind: 'challenge.revoke', challenge: c, contribution: 'm1', periodKey: '2020-01-01' }), { ok: false, code: 'resource_not_found' });
});

t.test('given a completed period, revoke lowers the count but never undoes the completion', async (t) => {
  const w = new World();
  const c = challenge({ period: 'daily', repeatable: true, target: 2 });
  w.contribute(c, 'm1');
  w.contribute(c, 'm2');
  const r = w.run({ kind: 'challenge.revoke', challenge: c, contribution: 'm2' });
  t.match(r, { ok: true, reply: { progress: { count: 1, status: 'completed' } } });
  t.match(reply(w.contribute(c, 'm3')), { reason: 'period_completed' }, 'the period still accepts nothing');
  t.equal(w.completions().length, 1);
  t.equal(w.state.completions['chl_1'], 1);
});

t.test('given the target was lowered, reevaluate completes the current period once', async (t) => {
  const w = new World();
  const c = challenge({ target: 5 });
  w.contribute(c, 'm1');
  w.contribute(c, 'm2');
  const lowered = { ...c, target: 2 };
  const first = w.run({ kind: 'challenge.reevaluate', challenge: lowered, timeZone: berlin }, T0 + 1);
  t.match(first, { ok: true, reply: { kind: 'reevaluated', completed: 1 } });
  matchList(t, facts(first), [{ kind: 'challenge.completed', count: 2, target: 2 }]);
  const second = w.run({ kind: 'challenge.reevaluate', challenge: lowered, timeZone: berlin }, T0 + 2);
  t.match(second, { ok: true, reply: { completed: 0, reason: 'already_completed' } });
  t.same(facts(second), []);
  const below = new World();
  below.contribute(c, 'm1');
  const notYet = below.run({ kind: 'challenge.reevaluate', challenge: c, timeZone: berlin });
  t.match(notYet, { ok: true, reply: { completed: 0, reason: null } });
  t.same(facts(notYet), []);
});

t.test("given progress of an earlier period only, reevaluate answers no current record, not the old one", async (t) => {
  const daily = challenge({ period: 'daily', repeatable: true, target: 5 });
  const w = new World();
  w.contribute(daily, 'm1', utc('2026-11-23T10:00:00Z'));
  const nextDay = w.run({ kind: 'challenge.reevaluate', challenge: { ...daily, target: 1 }, timeZone: berlin }, utc('2026-11-24T10:00:00Z'));
  t.match(nextDay, { ok: true, reply: { completed: 0, reason: null, progress: null } });
  t.same(facts(nextDay), []);
  const weekly = w.run({ kind: 'challenge.reevaluate', challenge: { ...daily, period: 'weekly', target: 1 }, timeZone: berlin }, utc('2026-11-23T11:00:00Z'));
  t.match(weekly, { ok: true, reply: { completed: 0, progress: null } }, 'after the period kind changed');
  const sameDay = w.run({ kind: 'challenge.reevaluate', challenge: daily, timeZone: berlin }, utc('2026-11-23T12:00:00Z'));
  t.match(sameDay, { ok: true, reply: { completed: 0, progress: { periodKey: '2026-11-23', count: 1 } } }, 'the current period is shown');
});

// --- replay and invariants --------------------------------------------------------------------

t.test('given the journal, replaying only evolve rebuilds the same state', async (t) => {
  const w = new World();
  const c = challenge({ period: 'daily', repeatable: true, target: 2, enrollment: 'explicit' });
  w.run({ kind: 'challenge.enroll', challenge: c });
  w.contribute(c, 'a', utc('2026-11-23T10:00:00Z'));
  w.contribute(c, 'b', utc('2026-11-23T11:00:00Z'));
  w.run({ kind: 'challenge.revoke', challenge: c, contribution: 'a' }, utc('2026-11-23T12:00:00Z'));
  w.contribute(c, 'a', utc('2026-11-24T10:00:00Z'));
  const replayed = emptyChallengesState();
  for (const f of structuredClone(w.journal)) evolve(replayed, f);
  t.same(replayed, w.state);
});

const anyChallenge = fc.record({
  period: fc.constantFrom('none' as const, 'daily' as const, 'weekly' as const),
  repeatable: fc.boolean(),
  target: fc.integer({ min: 1, max: 4 }),
  keyed: fc.boolean(),
});
const anyStep = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant('contribute' as const), value: fc.constantFrom('a', 'b', 'c', 'd', 'e'), qualifies: fc.boolean(), advanceMs: fc.integer({ min: 0, max: 12 * 3_600_000 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('revoke' as const), value: fc.constantFrom('a', 'b', 'c', 'd', 'e') }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('reevaluate' as const) }) },
);

t.test('property: any sequence of contributions, revokes and reevaluations completes at most once per period and cycle', async (t) => {
  fc.assert(
    fc.property(anyChallenge, fc.array(anyStep, { maxLength: 60 }), (shape, steps) => {
      const c = challenge({ period: shape.period, repeatable: shape.repeatable, target: shape.target, contributionKey: shape.keyed ? 'event.properties.id' : null });
      const w = new World();
      let now = T0;
      for (const step of steps) {
        if (step.kind === 'contribute') {
          now += step.advanceMs;
          w.contribute(c, step.value, now, step.qualifies);
        } else if (step.kind === 'revoke') {
          w.run({ kind: 'challenge.revoke', challenge: c, contribution: step.value }, now);
        } else {
          w.run({ kind: 'challenge.reevaluate', challenge: c, timeZone: berlin }, now);
        }
        const rec = w.state.progress['chl_1'];
        if (rec !== undefined) {
          if (rec.count > c.target || rec.count < 0) return false;
          if (new Set(rec.contributions).size !== rec.contributions.length) return false;
          if (shape.keyed && rec.contributions.length !== rec.count) return false;
        }
      }
      const done = w.completions().map((f) => (f.kind === 'challenge.completed' ? `${f.periodKey}#${f.cycle}` : ''));
      if (new Set(done).size !== done.length) return false;
      if (!shape.repeatable && done.length > 1) return false;
      if (shape.period !== 'none' && done.some((d) => !d.endsWith('#1'))) return false;
      // completions only grow, and the state agrees with the journal
      return (w.state.completions['chl_1'] ?? 0) === done.length;
    }),
    { numRuns: 300 },
  );
  t.pass('held');
});

// --- helpers, validation, transitions ---------------------------------------------------------

t.test('given an event, readContribution reads the path and stringifies scalars', async (t) => {
  const root = { event: { id: 'evt_1', name: 'm', properties: { match_id: 'x1', n: 7, ok: true, o: { a: 1 }, z: null } }, customer: { attributes: { team: 'red' } } };
  t.equal(readContribution('event.properties.match_id', root), 'x1');
  t.equal(readContribution('event.properties.n', root), '7');
  t.equal(readContribution('event.properties.ok', root), 'true');
  t.equal(readContribution('event.properties.o', root), null);
  t.equal(readContribution('event.properties.z', root), null);
  t.equal(readContribution('event.properties.missing', root), null);
  t.equal(readContribution('event.properties.__proto__', root), null);
  t.equal(readContribution('customer.attributes.team', root), 'red');
  t.equal(readContribution(null, root), null);
});

t.test('given challenges, challengesForEvent keeps the active ones for the event name', async (t) => {
  const list = [challenge(), challenge({ id: 'chl_2', status: 'paused' }), challenge({ id: 'chl_3', qualifying: { event: 'other' } })];
  t.same(
    challengesForEvent(list, 'match.completed').map((c) => c.id),
    ['chl_1'],
  );
});

t.test('given a definition, validation names each bad field', async (t) => {
  const { id: _id, ...ok } = challenge();
  t.same(validateChallenge(ok), { ok: true });
  const v = validateChallenge({
    ...ok,
    name: '',
    target: 0,
    period: 'hourly' as never,
    contributionKey: 'properties.match_id',
    enrollment: 'manual' as never,
    startsAtMs: 10,
    endsAtMs: 5,
  });
  t.match(v, { ok: false, code: 'validation_failed', param: 'name' });
  if (v.ok) return;
  t.same(
    v.details.map((d) => d.param),
    ['name', 'contribution_key', 'target', 'period', 'enrollment', 'ends_at'],
  );
  t.match(validateChallenge({ ...ok, target: challengeLimits.keyedTargetMax + 1 }), { ok: false, param: 'target' });
  t.same(validateChallenge({ ...ok, contributionKey: null, target: challengeLimits.keyedTargetMax + 1 }), { ok: true });
});

t.test('given challenge statuses, transitions follow draft -> active <-> paused -> ended', async (t) => {
  t.same(canTransitionChallenge('draft', 'active'), { ok: true });
  t.same(canTransitionChallenge('active', 'paused'), { ok: true });
  t.same(canTransitionChallenge('paused', 'active'), { ok: true });
  t.same(canTransitionChallenge('paused', 'ended'), { ok: true });
  t.same(canTransitionChallenge('active', 'active'), { ok: true });
  t.match(canTransitionChallenge('ended', 'active'), { ok: false, code: 'invalid_state' });
  t.match(canTransitionChallenge('active', 'draft'), { ok: false, code: 'invalid_state' });
});

t.test("joinChallenges: a merged customer's challenges join the survivor's without completing anything or completing a period twice", async (t) => {
  const rec = (challengeId: string, periodKey: string, count: number, completed = false, cycle = 1): ChallengeProgress => ({
    challengeId,
    periodKey,
    cycle,
    count,
    target: 5,
    status: completed ? 'completed' : 'active',
    contributions: [],
    completedAtMs: completed ? 10 : null,
    updatedAtMs: 10,
  });
  const state = (progress: ChallengeProgress[], completions: Record<string, number> = {}, enrolled: string[] = []): ChallengesState => ({
    enrollments: Object.fromEntries(enrolled.map((id) => [id, { challengeId: id, enrolledAtMs: 1 }])),
    progress: Object.fromEntries(progress.map((p) => [p.challengeId, p])),
    completions,
  });
  const survivor = state([rec('a', '2026-11-25', 3), rec('b', '2026-11-25', 2), rec('c', '2026-11-25', 5, true), rec('d', '2026-11-24', 4), rec('e', 'all', 1, false, 2)], { c: 1 }, ['x']);
  const merged = state(
    [rec('a', '2026-11-25', 4), rec('b', '2026-11-25', 1), rec('c', '2026-11-25', 2), rec('d', '2026-11-25', 1), rec('e', 'all', 5, true, 1), rec('f', '2026-11-25', 5, true)],
    { f: 1, e: 1 },
    ['x', 'y'],
  );
  const fact = joinChallenges(survivor, merged, 'cust_M', { nowMs: 99 });
  t.ok(fact);
  if (fact === null || fact.kind !== 'challenge.merged') return;
  t.same(fact.enrollments.map((e) => e.challengeId), ['y'], 'enrollments the survivor lacks');
  t.same(
    fact.progress.map((p) => p.challengeId),
    ['a', 'd', 'f'],
    'same period: the higher count (a) not the lower (b), never over a completed one (c); a later period (d); a record only it has (f); an earlier cycle is not (e)',
  );
  t.same(fact.completions, { f: 1, e: 1 });
  let s = structuredClone(survivor);
  s = evolve(s, fact as ChallengeFact);
  t.same(s.completions, { c: 1, f: 1, e: 1 }, 'completions add up');
  t.equal(s.progress.a?.count, 4);
  t.equal(s.progress.b?.count, 2);
  t.same(joinChallenges(s, state([]), 'cust_M', { nowMs: 100 }), null, 'nothing to join: no fact');
});
