// Match report validation (spec 4.9 rules 1, 3, 4): the count and each-player-once rules, exactly
// the profile's metrics as finite numbers, the ended_at window at its edges, started_at at or
// after ended_at left to the duration bounds, and the fingerprint that tells a replay from
// idempotency_key_reused.
import fc from 'fast-check';
import t from 'tap';
import {
  checkReportMetrics,
  checkResolvedPlayers,
  compareRepeat,
  type MatchReport,
  parseReport,
  reportFingerprint,
  validateReport,
} from '../../src/domain/match/index.js';

const now = Date.parse('2025-03-10T12:00:00Z');
const profile = { metrics: [{ key: 'kills', minimum: 0, maximum: 100, perMinuteMaximum: null }, { key: 'score', minimum: 0, maximum: 1e6, perMinuteMaximum: null }] };
const iso = (ms: number) => new Date(ms).toISOString();

const player = (id: string, over: Record<string, unknown> = {}) => ({ customer: { external_id: id }, metrics: { kills: 3, score: 1200 }, ...over });
const body = (over: Record<string, unknown> = {}) => ({
  profile: 'ranked',
  match_id: 'm-1',
  started_at: iso(now - 20 * 60_000),
  ended_at: iso(now - 60_000),
  players: [player('alice'), player('bob', { won: true })],
  ...over,
});

t.test('a valid report parses into ms instants, duration and normalized players', async (t) => {
  const v = validateReport(body(), profile, now);
  t.ok(v.ok);
  if (!v.ok) return;
  t.match(v.value, { profileKey: 'ranked', matchId: 'm-1', startedAtMs: now - 20 * 60_000, endedAtMs: now - 60_000, durationSeconds: 19 * 60 });
  t.same(v.value.players[0], { customer: { by: 'external_id', value: 'alice' }, metrics: { kills: 3, score: 1200 }, won: null });
  t.same(v.value.players[1]!.won, true);
  const byId = validateReport(body({ players: [{ customer: { id: 'cust_1' }, metrics: { kills: 0, score: 0 }, won: null }] }), profile, now);
  t.ok(byId.ok);
  if (byId.ok) t.same(byId.value.players[0]!.customer, { by: 'id', value: 'cust_1' });
});

t.test('validation table: each rule names its param', async (t) => {
  const hundredOne = Array.from({ length: 101 }, (_, i) => player(`p${i}`));
  const cases: [string, unknown, string][] = [
    ['no players', body({ players: [] }), 'players'],
    ['101 players', body({ players: hundredOne }), 'players'],
    ['same external_id twice', body({ players: [player('a'), player('b'), player('a')] }), 'players[2]'],
    ['same id twice', body({ players: [{ customer: { id: 'cust_1' }, metrics: {} }, { customer: { id: 'cust_1' }, metrics: {} }] }), 'players[1]'],
    ['customer with both refs', body({ players: [{ customer: { id: 'c', external_id: 'x' }, metrics: {} }] }), 'players[0].customer'],
    ['customer missing', body({ players: [{ metrics: {} }] }), 'players[0].customer'],
    ['won not boolean', body({ players: [player('a', { won: 'yes' })] }), 'players[0].won'],
    ['unknown player field', body({ players: [player('a', { team: 1 })] }), 'players[0].team'],
    ['missing metric', body({ players: [player('a'), player('b', { metrics: { kills: 1 } })] }), 'players[1].metrics.score'],
    ['extra metric', body({ players: [player('a', { metrics: { kills: 1, score: 1, deaths: 0 } })] }), 'players[0].metrics.deaths'],
    ['metric a string', body({ players: [player('a', { metrics: { kills: '1', score: 1 } })] }), 'players[0].metrics.kills'],
    ['metric NaN', body({ players: [player('a', { metrics: { kills: Number.NaN, score: 1 } })] }), 'players[0].metrics.kills'],
    ['metric Infinity', body({ players: [player('a', { metrics: { kills: 1, score: Number.POSITIVE_INFINITY } })] }), 'players[0].metrics.score'],
    ['metric null', body({ players: [player('a', { metrics: { kills: null, score: 1 } })] }), 'players[0].metrics.kills'],
    ['ended_at 5 min + 1 ms ahead', body({ ended_at: iso(now + 300_001) }), 'ended_at'],
    ['ended_at 7 days + 1 ms old', body({ started_at: iso(now - 8 * 86_400_000), ended_at: iso(now - 7 * 86_400_000 - 1) }), 'ended_at'],
    ['ended_at not a timestamp', body({ ended_at: 'yesterday' }), 'ended_at'],
    ['ended_at without offset', body({ ended_at: '2025-03-10T11:00:00' }), 'ended_at'],
    ['match_id empty', body({ match_id: '' }), 'match_id'],
    ['match_id with spaces', body({ match_id: 'm 1' }), 'match_id'],
    ['match_id too long', body({ match_id: 'x'.repeat(201) }), 'match_id'],
    ['profile missing', body({ profile: undefined }), 'profile'],
    ['unknown field', body({ region: 'eu' }), 'region'],
    ['not an object', [], 'body'],
  ];
  for (const [name, b, param] of cases) {
    const v = validateReport(b, profile, now);
    t.equal(v.ok, false, `${name}: refused`);
    if (v.ok) continue;
    t.equal(v.code, 'validation_failed');
    t.ok(
      v.details.some((d) => d.param === param),
      `${name}: names ${param} (got ${v.details.map((d) => d.param).join(', ')})`,
    );
  }
});

t.test('the ended_at window is inclusive at both edges; 100 players pass', async (t) => {
  t.ok(validateReport(body({ ended_at: iso(now + 300_000) }), profile, now).ok, 'exactly 5 minutes ahead');
  t.ok(validateReport(body({ started_at: iso(now - 8 * 86_400_000), ended_at: iso(now - 7 * 86_400_000) }), profile, now).ok, 'exactly 7 days old');
  t.ok(validateReport(body({ players: Array.from({ length: 100 }, (_, i) => player(`p${i}`)) }), profile, now).ok);
  t.ok(validateReport(body({ ended_at: '2025-03-10T13:59:00+02:00' }), profile, now).ok, 'any offset');
  const zero = parseReport(body({ started_at: iso(now - 60_000) }), now);
  t.match(zero, { ok: true, value: { durationSeconds: 0 } }, 'a zero-length match is left to the duration bounds');
  const reversed = validateReport(body({ started_at: iso(now), ended_at: iso(now - 90_500) }), profile, now);
  t.match(reversed, { ok: true, value: { durationSeconds: -90.5 } }, 'started_at after ended_at too: a negative duration');
  t.equal(parseReport(body({ started_at: iso(now - 8 * 86_400_000), ended_at: iso(now - 7 * 86_400_000 - 1) }), now, { window: false }).ok, true, 'a repeat skips the window');
});

t.test('metric keys that are not identifiers are named quoted', async (t) => {
  const v = checkReportMetrics(
    { profileKey: 'p', matchId: 'm', startedAtMs: 0, endedAtMs: 1000, durationSeconds: 1, players: [{ customer: { by: 'id', value: 'c' }, metrics: { kills: 1, score: 1, 'a.b': 1 }, won: null }] },
    profile,
  );
  t.match(v, { ok: false, param: 'players[0].metrics["a.b"]' });
});

t.test('after resolution, two references to one customer name the second player', async (t) => {
  t.ok(checkResolvedPlayers(['cust_1', 'cust_2']).ok);
  t.match(checkResolvedPlayers(['cust_1', 'cust_2', 'cust_1']), { ok: false, code: 'validation_failed', param: 'players[2]' });
});

// --- rule 4 --------------------------------------------------------------------------------------

function parsed(b: unknown): MatchReport {
  const v = validateReport(b, profile, now);
  if (!v.ok) throw new Error(v.message);
  return v.value;
}

t.test('rule 4: an identical repeat is a replay, whatever the key order, timestamp spelling or player order', async (t) => {
  const first = parsed(body());
  const fp = reportFingerprint(first);
  t.match(fp, /^[0-9a-f]{28}$/);
  const same = [
    body(),
    { players: body().players, ended_at: body().ended_at, started_at: body().started_at, match_id: 'm-1', profile: 'ranked' },
    body({ ended_at: iso(now - 60_000).replace('Z', '+00:00') }),
    body({ ended_at: '2025-03-10T13:59:00.000+02:00' }),
    body({ players: [player('bob', { won: true }), player('alice')] }),
    body({ players: [player('alice', { won: null }), player('bob', { won: true, metrics: { score: 1200, kills: 3 } })] }),
  ];
  for (const b of same) t.same(compareRepeat(fp, parsed(b)), { ok: true, replay: true }, JSON.stringify(b));
});

t.test('rule 4: any other difference, a different won included, is idempotency_key_reused', async (t) => {
  const fp = reportFingerprint(parsed(body()));
  const different = [
    body({ players: [player('alice', { won: false }), player('bob', { won: true })] }),
    body({ players: [player('alice'), player('bob', { won: false })] }),
    body({ players: [player('alice'), player('bob')] }),
    body({ players: [player('alice', { metrics: { kills: 4, score: 1200 } }), player('bob', { won: true })] }),
    body({ players: [player('alice')] }),
    body({ players: [{ customer: { id: 'alice' }, metrics: { kills: 3, score: 1200 } }, player('bob', { won: true })] }),
    body({ started_at: iso(now - 21 * 60_000) }),
    body({ ended_at: iso(now - 59_000) }),
    body({ profile: 'casual' }),
  ];
  for (const b of different) {
    t.match(compareRepeat(fp, parsed(b)), { ok: false, code: 'idempotency_key_reused', param: 'match_id' }, JSON.stringify(b));
  }
});

t.test('property: the fingerprint ignores player order and changes with any metric', async (t) => {
  fc.assert(
    fc.property(
      fc.uniqueArray(fc.string({ minLength: 1, maxLength: 8 }), { minLength: 1, maxLength: 8 }),
      fc.array(fc.integer({ min: 0, max: 100 }), { minLength: 8, maxLength: 8 }),
      fc.nat(),
      (ids, kills, pick) => {
        const players = ids.map((id, i) => player(id, { metrics: { kills: kills[i]!, score: 1 } }));
        const r = parsed(body({ players }));
        const shuffled = parsed(body({ players: [...players].reverse() }));
        if (reportFingerprint(r) !== reportFingerprint(shuffled)) return false;
        const i = pick % players.length;
        const changed = players.map((p, j) => (j === i ? { ...p, metrics: { kills: kills[i]! + 1, score: 1 } } : p));
        return reportFingerprint(parsed(body({ players: changed }))) !== reportFingerprint(r);
      },
    ),
  );
  t.pass('holds');
});

t.test('parseReport alone does not need the profile', async (t) => {
  const r = parseReport(body({ players: [player('a', { metrics: { anything: 1 } })] }), now);
  t.ok(r.ok);
});
