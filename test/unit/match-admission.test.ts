// Admission of a match report (spec 2.12, 3): a table per reason code (verdict, metric, value,
// limit), the check order (a player that breaks bounds, rate and outlier checks records only the
// bounds reasons; rate only inside all bounds; outliers only after the group stage), the stage
// inputs decided by the caller (duplicate_player_after_merge, event_refused) and the match status.
import t from 'tap';
import {
  admitMatch,
  checkMatchBounds,
  checkProfileOpen,
  type MatchReport,
  type PlayerContext,
  type ProfileSections,
  preAdmit,
  type RateState,
  reasonCodes,
  reasonStage,
} from '../../src/domain/match/index.js';

const minute = 60_000;
const now = Date.parse('2025-03-10T12:00:00Z');

const profile: ProfileSections & { id: string } = {
  id: 'mpf_1',
  event: 'match.completed',
  metrics: [
    { key: 'kills', minimum: 0, maximum: 50, perMinuteMaximum: 2 },
    { key: 'score', minimum: 10, maximum: 10_000, perMinuteMaximum: null },
  ],
  duration: { minimumSeconds: 300, maximumSeconds: 3600 },
  players: { minimum: 2, maximum: 4 },
  rateLimits: [{ windowSeconds: 3600, maxMatches: 2 }],
  outliers: { action: 'hold', holdMetrics: [{ key: 'score', above: 9000 }] },
};

function report(over: { minutes?: number; endedAtMs?: number; matchId?: string; players?: Record<string, number>[] } = {}): MatchReport {
  const minutes = over.minutes ?? 20;
  const endedAtMs = over.endedAtMs ?? now - minute;
  const players = over.players ?? [{ kills: 10, score: 500 }, { kills: 5, score: 300 }];
  return {
    profileKey: 'ranked',
    matchId: over.matchId ?? 'm-1',
    startedAtMs: endedAtMs - minutes * minute,
    endedAtMs,
    durationSeconds: minutes * 60,
    players: players.map((metrics, i) => ({ customer: { by: 'external_id', value: `p${i}` }, metrics, won: null })),
  };
}

const contexts = (r: MatchReport, extra: Partial<PlayerContext>[] = []): PlayerContext[] =>
  r.players.map((_, i) => ({ customerId: `cust_${i}`, groupId: `cust_${i}`, ...extra[i] }));

/** Groups where player 0 already has `n` admitted matches ending just before `endedAtMs`. */
function busyGroups(n: number, endedAtMs: number): Record<string, RateState> {
  const entries = Array.from({ length: n }, (_, i) => ({ endedAtMs: endedAtMs - (n - i) * minute, matchId: `old-${i}`, customerId: 'cust_0' }));
  return { cust_0: { [profile.id]: { entries } } };
}

function admit(r: MatchReport, groups: Record<string, RateState> = {}, extra: Partial<PlayerContext>[] = [], p = profile) {
  return admitMatch(p, r, contexts(r, extra), groups, { nowMs: now });
}

t.test('every reason code is in the table, in stage order', async (t) => {
  const stages = reasonCodes.map((c) => reasonStage[c]);
  t.same([...new Set(stages)], ['match_bounds', 'metric_bounds', 'group', 'outliers', 'event']);
});

t.test('a clean report admits every player', async (t) => {
  const a = admit(report());
  t.same(
    a.players.map((p) => p.status),
    ['admitted', 'admitted'],
  );
  t.same(a.players[0]!.reasons, []);
  t.equal(a.status, 'admitted');
  t.equal(a.rateFacts['cust_0']!.length, 1, 'admitted players are counted in their group');
});

t.test('table: one row per reason code', async (t) => {
  type Row = {
    name: string;
    run: () => ReturnType<typeof admit>;
    player: number;
    status: 'admitted' | 'held' | 'rejected';
    reason: Record<string, unknown>;
  };
  const rows: Row[] = [
    {
      name: 'metric_below_minimum',
      run: () => admit(report({ players: [{ kills: 1, score: 9 }, { kills: 1, score: 100 }] })),
      player: 0,
      status: 'rejected',
      reason: { code: 'metric_below_minimum', metric: 'score', value: 9, limit: 10 },
    },
    {
      name: 'metric_above_maximum',
      run: () => admit(report({ players: [{ kills: 1, score: 100 }, { kills: 1, score: 10_001 }] })),
      player: 1,
      status: 'rejected',
      reason: { code: 'metric_above_maximum', metric: 'score', value: 10_001, limit: 10_000 },
    },
    {
      name: 'metric_per_minute_exceeded (41 kills in 20 minutes > 2/min)',
      run: () => admit(report({ players: [{ kills: 41, score: 100 }, { kills: 40, score: 100 }] })),
      player: 0,
      status: 'rejected',
      reason: { code: 'metric_per_minute_exceeded', metric: 'kills', value: 2.05, limit: 2 },
    },
    {
      name: 'duration_out_of_bounds (too short)',
      run: () => admit(report({ minutes: 4 })),
      player: 1,
      status: 'rejected',
      reason: { code: 'duration_out_of_bounds', value: 240, limit: 300 },
    },
    {
      name: 'duration_out_of_bounds (started 5 minutes after it ended: a negative duration)',
      run: () => admit(report({ minutes: -5 })),
      player: 0,
      status: 'rejected',
      reason: { code: 'duration_out_of_bounds', value: -300, limit: 300, message: /started 300 seconds after it ended/ },
    },
    {
      name: 'duration_out_of_bounds (too long)',
      run: () => admit(report({ minutes: 61 })),
      player: 0,
      status: 'rejected',
      reason: { code: 'duration_out_of_bounds', value: 3660, limit: 3600 },
    },
    {
      name: 'player_count_out_of_bounds (too few)',
      run: () => admit(report({ players: [{ kills: 1, score: 100 }] })),
      player: 0,
      status: 'rejected',
      reason: { code: 'player_count_out_of_bounds', value: 1, limit: 2, message: 'The match has 1 player; the profile allows 2 to 4.' },
    },
    {
      name: 'player_count_out_of_bounds (too many)',
      run: () => admit(report({ players: Array.from({ length: 5 }, () => ({ kills: 1, score: 100 })) })),
      player: 4,
      status: 'rejected',
      reason: { code: 'player_count_out_of_bounds', value: 5, limit: 4 },
    },
    {
      name: 'rate_limited',
      run: () => admit(report(), busyGroups(2, now - minute)),
      player: 0,
      status: 'rejected',
      reason: { code: 'rate_limited', value: 2, limit: 2 },
    },
    {
      name: 'outlier, action hold',
      run: () => admit(report({ players: [{ kills: 1, score: 9001 }, { kills: 1, score: 100 }] })),
      player: 0,
      status: 'held',
      reason: { code: 'outlier', metric: 'score', value: 9001, limit: 9000 },
    },
    {
      name: 'outlier, action reject',
      run: () =>
        admit(report({ players: [{ kills: 1, score: 9001 }, { kills: 1, score: 100 }] }), {}, [], {
          ...profile,
          outliers: { action: 'reject', holdMetrics: [{ key: 'score', above: 9000 }] },
        }),
      player: 0,
      status: 'rejected',
      reason: { code: 'outlier', metric: 'score', value: 9001, limit: 9000 },
    },
    {
      name: 'event_refused',
      run: () => admit(report(), {}, [{ eventRefused: { message: 'Below the trust floor.' } }]),
      player: 0,
      status: 'rejected',
      reason: { code: 'event_refused', message: 'Below the trust floor.' },
    },
    {
      name: 'duplicate_player_after_merge',
      run: () => admit(report(), {}, [{}, { alreadyAdmittedInGroup: true }]),
      player: 1,
      status: 'rejected',
      reason: { code: 'duplicate_player_after_merge' },
    },
  ];
  const covered = new Set(rows.map((r) => r.reason.code));
  t.same([...covered].sort(), [...reasonCodes].sort(), 'every code has a row');
  for (const row of rows) {
    const a = row.run();
    const p = a.players[row.player]!;
    t.equal(p.status, row.status, `${row.name}: status`);
    t.equal(p.reasons.length, 1, `${row.name}: one reason`);
    t.match(p.reasons[0], row.reason, `${row.name}: reason`);
    t.type(p.reasons[0]!.message, 'string');
  }
});

t.test('match-wide bounds reject everyone and record both violations together', async (t) => {
  const a = admit(report({ minutes: 1, players: [{ kills: 1, score: 100 }] }));
  t.same(a.players[0]!.reasons.map((r) => r.code), ['duration_out_of_bounds', 'player_count_out_of_bounds']);
  t.equal(a.status, 'rejected');
  t.same(a.rateFacts, {}, 'nobody counted');
  t.same(checkMatchBounds(profile, report()), []);
});

t.test('per-player bounds record every violation of the stage', async (t) => {
  const a = admit(report({ players: [{ kills: 60, score: 5 }, { kills: 1, score: 100 }] }));
  t.same(a.players[0]!.reasons.map((r) => r.code), ['metric_above_maximum', 'metric_per_minute_exceeded', 'metric_below_minimum']);
  t.equal(a.players[1]!.status, 'admitted');
  t.equal(a.status, 'partially_admitted');
});

t.test('check order', async (t) => {
  const outlierAndOverMax = { kills: 60, score: 9500 };
  const outlierOnly = { kills: 1, score: 9500 };

  t.test('a player breaking bounds, rate and outliers records only the bounds reasons', async (t) => {
    const a = admit(report({ players: [outlierAndOverMax, { kills: 1, score: 100 }] }), busyGroups(2, now - minute));
    t.equal(a.players[0]!.status, 'rejected');
    t.same(a.players[0]!.reasons.map((r) => r.code), ['metric_above_maximum', 'metric_per_minute_exceeded']);
  });

  t.test('match-wide bounds win over metric bounds, rate and outliers', async (t) => {
    const a = admit(report({ minutes: 2, players: [outlierAndOverMax, outlierOnly] }), busyGroups(2, now - minute));
    for (const p of a.players) t.same(p.reasons.map((r) => r.code), ['duration_out_of_bounds']);
  });

  t.test('rate windows win over outliers, and a rejected player is not counted', async (t) => {
    const groups = busyGroups(2, now - minute);
    const a = admit(report({ players: [outlierOnly, { kills: 1, score: 100 }] }), groups);
    t.equal(a.players[0]!.status, 'rejected', 'rejected, not held');
    t.same(a.players[0]!.reasons.map((r) => r.code), ['rate_limited']);
    t.equal(a.groups['cust_0']![profile.id]!.entries.length, 2, 'the limited player adds nothing to its window');
  });

  t.test('rate windows are only consulted inside the bounds: a bounds rejection leaves the window untouched', async (t) => {
    const groups = busyGroups(1, now - minute);
    const a = admit(report({ players: [{ kills: 1, score: 20_000 }, { kills: 1, score: 100 }] }), groups);
    t.same(a.players[0]!.reasons.map((r) => r.code), ['metric_above_maximum']);
    t.equal(a.groups['cust_0']![profile.id]!.entries.length, 1);
    t.same(a.rateFacts['cust_0'], undefined);
  });

  t.test('duplicate_player_after_merge comes before the rate windows', async (t) => {
    const a = admit(report(), busyGroups(2, now - minute), [{ alreadyAdmittedInGroup: true }]);
    t.same(a.players[0]!.reasons.map((r) => r.code), ['duplicate_player_after_merge']);
  });

  t.test('a bounds rejection wins over duplicate_player_after_merge and event_refused', async (t) => {
    const a = admit(report({ players: [{ kills: 1, score: 20_000 }, { kills: 1, score: 100 }] }), {}, [
      { alreadyAdmittedInGroup: true, eventRefused: { message: 'x' } },
    ]);
    t.same(a.players[0]!.reasons.map((r) => r.code), ['metric_above_maximum']);
  });

  t.test('event admission runs last and only for admitted players: a held player keeps its outlier reason', async (t) => {
    const a = admit(report({ players: [outlierOnly, { kills: 1, score: 100 }] }), {}, [{ eventRefused: { message: 'x' } }]);
    t.equal(a.players[0]!.status, 'held');
    t.same(a.players[0]!.reasons.map((r) => r.code), ['outlier']);
  });

  t.test('an event refusal releases the count taken at the group stage', async (t) => {
    const a = admit(report(), {}, [{ eventRefused: { message: 'x' } }]);
    t.same(a.groups['cust_0']![profile.id]!.entries, []);
    t.same(
      a.rateFacts['cust_0']!.map((f) => f.kind),
      ['match_rate.counted', 'match_rate.released'],
    );
  });
});

t.test('held and reject-outlier players: held counts toward the window, rejected does not', async (t) => {
  const held = admit(report({ players: [{ kills: 1, score: 9500 }, { kills: 1, score: 100 }] }));
  t.equal(held.groups['cust_0']![profile.id]!.entries.length, 1);
  t.equal(held.status, 'held');
  const rejecting = { ...profile, outliers: { action: 'reject' as const, holdMetrics: [{ key: 'score', above: 9000 }] } };
  const rej = admit(report({ players: [{ kills: 1, score: 9500 }, { kills: 1, score: 100 }] }), {}, [], rejecting);
  t.same(rej.groups['cust_0'] ?? {}, {});
  t.equal(rej.status, 'partially_admitted');
});

t.test('preAdmit: final rejections and pending verdicts without touching any group', async (t) => {
  const pre = preAdmit(profile, report({ players: [{ kills: 60, score: 100 }, { kills: 1, score: 9500 }, { kills: 1, score: 100 }] }));
  t.match(pre, [
    { stage: 'final', verdict: { status: 'rejected' } },
    { stage: 'group', pending: 'held', outlierReasons: [{ code: 'outlier' }] },
    { stage: 'group', pending: 'admitted', outlierReasons: [] },
  ]);
});

t.test('no outliers section and no rate limits: only bounds apply', async (t) => {
  const open = { ...profile, outliers: null, rateLimits: [] };
  const a = admit(report({ players: [{ kills: 1, score: 9999 }, { kills: 1, score: 9999 }] }), busyGroups(50, now - minute), [], open);
  t.same(
    a.players.map((p) => p.status),
    ['admitted', 'admitted'],
  );
});

t.test('a retried report replays its counts: players are admitted again without counting twice', async (t) => {
  const first = admit(report());
  const again = admit(report(), first.groups);
  t.same(
    again.players.map((p) => p.status),
    ['admitted', 'admitted'],
  );
  t.same(again.rateFacts, {}, 'no new facts');
  t.equal(again.groups['cust_0']![profile.id]!.entries.length, 1);
});

t.test('after a merge, a second player of the same group in one match is duplicate_player_after_merge', async (t) => {
  const r = report();
  // Merged before the group stage ran: both players now belong to group g.
  const both = admitMatch(profile, r, [{ customerId: 'cust_0', groupId: 'g' }, { customerId: 'cust_1', groupId: 'g' }], {}, { nowMs: now });
  t.equal(both.players[0]!.status, 'admitted');
  t.same(both.players[1]!.reasons.map((x) => x.code), ['duplicate_player_after_merge']);
  t.equal(both.status, 'partially_admitted');

  // Interrupted after p0 was counted in g; p1 was merged into g before the retry completed it.
  const interrupted = admitMatch(profile, r, [{ customerId: 'cust_0', groupId: 'g' }, { customerId: 'cust_1', groupId: 'h' }], {}, { nowMs: now });
  const retry = admitMatch(
    profile,
    r,
    [{ customerId: 'cust_0', groupId: 'g' }, { customerId: 'cust_1', groupId: 'g' }],
    { g: interrupted.groups['g']! },
    { nowMs: now },
  );
  t.equal(retry.players[0]!.status, 'admitted', 'p0 replays');
  t.same(retry.players[1]!.reasons.map((x) => x.code), ['duplicate_player_after_merge']);
});

t.test('an archived profile refuses new reports with match_profile_archived', async (t) => {
  t.same(checkProfileOpen({ key: 'ranked', status: 'active' }), { ok: true });
  t.match(checkProfileOpen({ key: 'ranked', status: 'archived' }), { ok: false, code: 'match_profile_archived', param: 'profile' });
});
