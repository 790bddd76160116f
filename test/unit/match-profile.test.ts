// Match profiles (spec 2.11): a validation table naming the failing wire param for every field and
// bound, defaults, an update that replaces only the sections it names (and bumps the revision),
// cross-section checks after an update, archive, and the profile mechanic's codes.
import t from 'tap';
import {
  applyUpdate,
  decideProfile,
  evolveProfile,
  type MatchProfile,
  type ProfileCommand,
  profileToWire,
  validateProfileCreate,
  validateProfileUpdate,
} from '../../src/domain/match/index.js';

const base = {
  key: 'ranked',
  metrics: [
    { key: 'kills', minimum: 0, maximum: 100, per_minute_maximum: 5 },
    { key: 'score', minimum: 0, maximum: 10_000 },
  ],
  duration: { minimum_seconds: 60, maximum_seconds: 3600 },
  players: { minimum: 2, maximum: 10 },
  rate_limits: [{ window_seconds: 3600, max_matches: 6 }],
  outliers: { action: 'hold', hold_metrics: [{ key: 'score', above: 9000 }] },
};

const with_ = (over: Record<string, unknown>) => ({ ...base, ...over });
const metrics = (n: number) => Array.from({ length: n }, (_, i) => ({ key: `m${i}`, minimum: 0, maximum: 1 }));

t.test('a well-formed profile validates, with defaults filled in', async (t) => {
  const v = validateProfileCreate(base);
  t.ok(v.ok);
  if (!v.ok) return;
  t.equal(v.value.event, 'match.completed');
  t.same(v.value.metrics[0], { key: 'kills', minimum: 0, maximum: 100, perMinuteMaximum: 5 });
  t.same(v.value.metrics[1], { key: 'score', minimum: 0, maximum: 10_000, perMinuteMaximum: null });
  t.same(v.value.rateLimits, [{ windowSeconds: 3600, maxMatches: 6 }]);
  t.same(v.value.outliers, { action: 'hold', holdMetrics: [{ key: 'score', above: 9000 }] });

  const minimal = validateProfileCreate({ key: 'casual', metrics: [{ key: 'kills', minimum: 0, maximum: 5 }] });
  t.ok(minimal.ok);
  if (!minimal.ok) return;
  t.same(minimal.value.duration, { minimumSeconds: 1, maximumSeconds: 86_400 });
  t.same(minimal.value.players, { minimum: 1, maximum: 100 });
  t.same(minimal.value.rateLimits, []);
  t.equal(minimal.value.outliers, null);
});

t.test('bounds at the edges pass', async (t) => {
  const cases: Record<string, unknown>[] = [
    { metrics: metrics(1), outliers: null },
    { metrics: metrics(16), outliers: null },
    { duration: { minimum_seconds: 1, maximum_seconds: 86_400 } },
    { duration: { minimum_seconds: 300, maximum_seconds: 300 } },
    { players: { minimum: 1, maximum: 100 } },
    { rate_limits: [] },
    { rate_limits: Array.from({ length: 8 }, (_, i) => ({ window_seconds: 60 + i, max_matches: 1 })) },
    { rate_limits: [{ window_seconds: 86_400, max_matches: 1 }] },
    { outliers: { action: 'reject', hold_metrics: [] } },
    { event: 'game.round_finished' },
    { metrics: [{ key: 'delta', minimum: -50, maximum: -50, per_minute_maximum: 0 }], outliers: null },
  ];
  for (const c of cases) t.ok(validateProfileCreate(with_(c)).ok, JSON.stringify(c));
});

t.test('validation table: each bad field is named by its wire param', async (t) => {
  const cases: [string, Record<string, unknown>, string][] = [
    ['key missing', { key: undefined }, 'key'],
    ['key empty', { key: '' }, 'key'],
    ['key with spaces', { key: 'ranked mode' }, 'key'],
    ['event not snake_case', { event: 'Match Completed' }, 'event'],
    ['metrics missing', { metrics: undefined }, 'metrics'],
    ['no metrics', { metrics: [], outliers: null }, 'metrics'],
    ['17 metrics', { metrics: metrics(17), outliers: null }, 'metrics'],
    ['metric key reserved match_id', { metrics: [{ key: 'match_id', minimum: 0, maximum: 1 }], outliers: null }, 'metrics[0].key'],
    ['metric key reserved match_profile', { metrics: [...metrics(2), { key: 'match_profile', minimum: 0, maximum: 1 }], outliers: null }, 'metrics[2].key'],
    ['metric key reserved won', { metrics: [{ key: 'won', minimum: 0, maximum: 1 }], outliers: null }, 'metrics[0].key'],
    ['duplicate metric key', { metrics: [...base.metrics, { key: 'kills', minimum: 0, maximum: 1 }] }, 'metrics[2].key'],
    ['bad metric key', { metrics: [{ key: '1kills', minimum: 0, maximum: 1 }], outliers: null }, 'metrics[0].key'],
    ['minimum > maximum', { metrics: [{ key: 'kills', minimum: 5, maximum: 1 }], outliers: null }, 'metrics[0].minimum'],
    ['minimum not a number', { metrics: [{ key: 'kills', minimum: '0', maximum: 1 }], outliers: null }, 'metrics[0].minimum'],
    ['maximum infinite', { metrics: [{ key: 'kills', minimum: 0, maximum: Number.POSITIVE_INFINITY }], outliers: null }, 'metrics[0].maximum'],
    ['per_minute_maximum negative', { metrics: [{ key: 'kills', minimum: 0, maximum: 1, per_minute_maximum: -1 }], outliers: null }, 'metrics[0].per_minute_maximum'],
    ['unknown metric field', { metrics: [{ key: 'kills', minimum: 0, maximum: 1, max: 3 }], outliers: null }, 'metrics[0].max'],
    ['duration min 0', { duration: { minimum_seconds: 0, maximum_seconds: 10 } }, 'duration.minimum_seconds'],
    ['duration max 86401', { duration: { minimum_seconds: 1, maximum_seconds: 86_401 } }, 'duration.maximum_seconds'],
    ['duration fractional', { duration: { minimum_seconds: 1.5, maximum_seconds: 10 } }, 'duration.minimum_seconds'],
    ['duration min > max', { duration: { minimum_seconds: 600, maximum_seconds: 60 } }, 'duration.minimum_seconds'],
    ['duration missing a bound', { duration: { minimum_seconds: 60 } }, 'duration.maximum_seconds'],
    ['players min 0', { players: { minimum: 0, maximum: 10 } }, 'players.minimum'],
    ['players max 101', { players: { minimum: 1, maximum: 101 } }, 'players.maximum'],
    ['players min > max', { players: { minimum: 5, maximum: 4 } }, 'players.minimum'],
    ['9 rate limits', { rate_limits: Array.from({ length: 9 }, (_, i) => ({ window_seconds: 60 + i, max_matches: 1 })) }, 'rate_limits'],
    ['window 59 s', { rate_limits: [{ window_seconds: 59, max_matches: 1 }] }, 'rate_limits[0].window_seconds'],
    ['window 86401 s', { rate_limits: [{ window_seconds: 86_401, max_matches: 1 }] }, 'rate_limits[0].window_seconds'],
    ['max_matches 0', { rate_limits: [{ window_seconds: 60, max_matches: 0 }] }, 'rate_limits[0].max_matches'],
    ['same window twice', { rate_limits: [{ window_seconds: 60, max_matches: 1 }, { window_seconds: 60, max_matches: 2 }] }, 'rate_limits[1].window_seconds'],
    ['outlier action', { outliers: { action: 'flag', hold_metrics: [] } }, 'outliers.action'],
    ['hold metric not a metric', { outliers: { action: 'hold', hold_metrics: [{ key: 'deaths', above: 1 }] } }, 'outliers.hold_metrics[0].key'],
    ['hold metric above not finite', { outliers: { action: 'hold', hold_metrics: [{ key: 'kills', above: 'x' }] } }, 'outliers.hold_metrics[0].above'],
    ['hold metric twice', { outliers: { action: 'hold', hold_metrics: [{ key: 'kills', above: 1 }, { key: 'kills', above: 2 }] } }, 'outliers.hold_metrics[1].key'],
    ['unknown top-level field', { colour: 'red' }, 'colour'],
  ];
  for (const [name, over, param] of cases) {
    const v = validateProfileCreate(with_(over));
    t.equal(v.ok, false, `${name}: refused`);
    if (v.ok) continue;
    t.equal(v.code, 'validation_failed', name);
    t.ok(
      v.details.some((d) => d.param === param),
      `${name}: names ${param} (got ${v.details.map((d) => d.param).join(', ')})`,
    );
    t.equal(v.param, v.details[0]!.param, `${name}: param is the first detail`);
  }
});

t.test('a body that is not an object is refused on the body', async (t) => {
  for (const body of [null, 'x', [], 3]) {
    const v = validateProfileCreate(body);
    t.equal(v.ok, false);
    if (!v.ok) t.equal(v.param, 'body');
  }
});

// --- the mechanic -------------------------------------------------------------------------------

let seq = 0;
const ctx = (nowMs: number) => ({ nowMs, newId: (p: string) => `${p}_${++seq}` });

function created(): MatchProfile {
  const d = decideProfile(null, { kind: 'match_profile.create', body: base }, ctx(1000));
  if (!d.ok) throw new Error(d.message);
  return d.profile;
}

t.test('create: revision 1, active, id from ctx; a second create of the key is already_exists', async (t) => {
  const p = created();
  t.match(p, { key: 'ranked', revision: 1, status: 'active', createdAtMs: 1000, archivedAtMs: null });
  t.match(p.id, /^mpf_/);
  const again = decideProfile(p, { kind: 'match_profile.create', body: base }, ctx(2000));
  t.match(again, { ok: false, code: 'already_exists', param: 'key' });
  const bad = decideProfile(null, { kind: 'match_profile.create', body: with_({ key: '' }) }, ctx(2000));
  t.match(bad, { ok: false, code: 'validation_failed', param: 'key' });
});

t.test('given a profile, when an update names only players, then every other section is kept and the revision goes up', async (t) => {
  const p = created();
  const d = decideProfile(p, { kind: 'match_profile.update', body: { players: { minimum: 4, maximum: 4 } }, expectedVersion: 1 }, ctx(5000));
  t.ok(d.ok);
  if (!d.ok) return;
  t.same(d.profile.players, { minimum: 4, maximum: 4 });
  for (const k of ['event', 'metrics', 'duration', 'rateLimits', 'outliers'] as const) t.same(d.profile[k], p[k], `${k} kept`);
  t.equal(d.profile.revision, 2);
  t.equal(d.profile.updatedAtMs, 5000);
  t.equal(d.profile.createdAtMs, p.createdAtMs);
  t.same(evolveProfile(p, d.facts[0]!), d.profile, 'evolve of the fact gives the same profile');
});

t.test('update section by section: each one replaces only itself', async (t) => {
  const p = created();
  const updates: [Record<string, unknown>, keyof MatchProfile][] = [
    [{ event: 'ranked.finished' }, 'event'],
    [{ metrics: [{ key: 'score', minimum: 1, maximum: 2 }] }, 'metrics'],
    [{ duration: { minimum_seconds: 1, maximum_seconds: 2 } }, 'duration'],
    [{ rate_limits: [] }, 'rateLimits'],
    [{ outliers: null }, 'outliers'],
  ];
  for (const [body, section] of updates) {
    const u = validateProfileUpdate(body);
    t.ok(u.ok, JSON.stringify(body));
    if (!u.ok) continue;
    const r = applyUpdate(p, u.value, 9);
    t.ok(r.ok);
    if (!r.ok) continue;
    t.not(JSON.stringify(r.value[section]), JSON.stringify(p[section]), `${section} replaced`);
    for (const k of ['event', 'metrics', 'duration', 'players', 'rateLimits', 'outliers'] as const) {
      if (k !== section) t.same(r.value[k], p[k], `${section} update keeps ${k}`);
    }
    t.equal(r.value.revision, p.revision + 1);
  }
});

t.test('an update that removes a metric a hold threshold names fails on the hold metric; bad sections fail on their param', async (t) => {
  const p = created();
  const d = decideProfile(p, { kind: 'match_profile.update', body: { metrics: [{ key: 'kills', minimum: 0, maximum: 1 }] }, expectedVersion: null }, ctx(1));
  t.match(d, { ok: false, code: 'validation_failed', param: 'outliers.hold_metrics[0].key' });
  const both = decideProfile(
    p,
    { kind: 'match_profile.update', body: { metrics: [{ key: 'kills', minimum: 0, maximum: 1 }], outliers: null }, expectedVersion: null },
    ctx(1),
  );
  t.ok(both.ok, 'naming outliers in the same update resolves it');
  const bad = decideProfile(p, { kind: 'match_profile.update', body: { players: { minimum: 0, maximum: 1 } }, expectedVersion: null }, ctx(1));
  t.match(bad, { ok: false, code: 'validation_failed', param: 'players.minimum' });
  const unknown = decideProfile(p, { kind: 'match_profile.update', body: { colour: 1 }, expectedVersion: null }, ctx(1));
  t.match(unknown, { ok: false, code: 'validation_failed', param: 'colour' });
});

t.test('codes of update and archive', async (t) => {
  const p = created();
  const table: [string, MatchProfile | null, ProfileCommand, string | null][] = [
    ['update unknown profile', null, { kind: 'match_profile.update', body: {}, expectedVersion: null }, 'resource_not_found'],
    ['archive unknown profile', null, { kind: 'match_profile.archive', expectedVersion: null }, 'resource_not_found'],
    ['update stale', p, { kind: 'match_profile.update', body: {}, expectedVersion: 7 }, 'stale_write'],
    ['archive stale', p, { kind: 'match_profile.archive', expectedVersion: 7 }, 'stale_write'],
    ['update without expected_version', p, { kind: 'match_profile.update', body: {}, expectedVersion: null }, null],
    ['archive at the version', p, { kind: 'match_profile.archive', expectedVersion: 1 }, null],
  ];
  for (const [name, state, cmd, code] of table) {
    const d = decideProfile(state, cmd, ctx(1));
    if (code === null) t.ok(d.ok, name);
    else t.match(d, { ok: false, code }, name);
    if (code === 'stale_write') t.match(d, { currentVersion: 1 }, `${name}: the stored version`);
  }
});

t.test('archive: status archived, revision up; again is a no-op; an update of an archived profile is invalid_state', async (t) => {
  const p = created();
  const d = decideProfile(p, { kind: 'match_profile.archive', expectedVersion: null }, ctx(7000));
  t.ok(d.ok);
  if (!d.ok) return;
  t.equal(d.facts.length, 1);
  const archived = evolveProfile(p, d.facts[0]!)!;
  t.match(archived, { status: 'archived', revision: 2, archivedAtMs: 7000 });
  t.same(archived.metrics, p.metrics, 'sections are kept');
  const again = decideProfile(archived, { kind: 'match_profile.archive', expectedVersion: null }, ctx(8000));
  t.match(again, { ok: true, facts: [] });
  const upd = decideProfile(archived, { kind: 'match_profile.update', body: { event: 'x.y' }, expectedVersion: null }, ctx(8000));
  t.match(upd, { ok: false, code: 'invalid_state' });
});

t.test('profileToWire round-trips through validation', async (t) => {
  const p = created();
  const w = profileToWire(p);
  t.equal(w.version, 1);
  const { id: _id, version: _v, status: _s, createdAtMs: _c, updatedAtMs: _u, archivedAtMs: _a, ...body } = w;
  const v = validateProfileCreate(body);
  t.ok(v.ok);
  if (v.ok) t.same({ ...p, ...v.value }, p);
});
