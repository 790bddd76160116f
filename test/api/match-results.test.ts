// Black-box API tests of match results (spec 2.12, 3, 4.9): reporting with every reason code in
// check order, players' event ids claimed in the environment's register as POST /v1/events claims
// them, replay and idempotency_key_reused, ended_at window, unknown customers, archived
// profiles, secret-key-only access, the review queue and reviews (admit, reject, replay,
// invalid_state, revoked reporting key, deleted customer), reports an interrupted request left
// pending (shown by their reserved verdict, completed by a repeat or a review, also after the
// reporting key was revoked), the rule-6 event running through published rules, and
// rate windows under concurrency (N simultaneous reports for one player never admit more than
// max_matches).
import t from 'tap';
import type { Reason } from '../../src/domain/match/reasons.js';
import { parseReport, reportFingerprint } from '../../src/domain/match/report.js';
import { deriveMatchStatus, type PlayerStatus } from '../../src/domain/match/verdict.js';
import { newId } from '../../src/ids.js';
import { openSql } from '../../src/persistence/sql/db.js';
import { type MatchRow, MatchRecords, type PlayerRow } from '../../src/persistence/sql/match-records.js';
import { type Client, databaseUrl, idem, signUp, startForTest } from '../helpers/service.js';

const minutesAgo = (m: number) => new Date(Date.now() - m * 60_000).toISOString();

export const arena = {
  type: 'match_profile.create',
  key: 'arena',
  metrics: [
    { key: 'kills', minimum: 0, maximum: 100, per_minute_maximum: 10 },
    { key: 'score', minimum: 0, maximum: 100000 },
  ],
  duration: { minimum_seconds: 60, maximum_seconds: 3600 },
  players: { minimum: 1, maximum: 10 },
  rate_limits: [{ window_seconds: 3600, max_matches: 3 }],
  outliers: { action: 'hold', hold_metrics: [{ key: 'score', above: 50000 }] },
};

export async function applyCommands(api: Client, commands: unknown[]): Promise<void> {
  const cs = await api.post('/v1/change_sets', { commands }, idem());
  if (cs.status !== 201) throw new Error(`change set: ${cs.status} ${JSON.stringify(cs.body)}`);
  const ap = await api.post('/v1/change_set_applications', { change_set_id: cs.body.id }, idem());
  if (ap.status !== 201) throw new Error(`apply: ${ap.status} ${JSON.stringify(ap.body)}`);
}

let matchCounter = 0;
function report(players: Array<{ ext?: string; id?: string; kills?: number; score?: number; won?: boolean }>, over: Record<string, unknown> = {}) {
  // One instant for both ends: the duration is exactly 600 s (two clock reads could be 1 ms apart).
  const now = Date.now();
  return {
    profile: 'arena',
    match_id: `m-${process.pid}-${++matchCounter}`,
    started_at: new Date(now - 20 * 60_000).toISOString(),
    ended_at: new Date(now - 10 * 60_000).toISOString(),
    players: players.map((p) => ({
      customer: p.id !== undefined ? { id: p.id } : { external_id: p.ext ?? 'p' },
      metrics: { kills: p.kills ?? 5, score: p.score ?? 1000 },
      ...(p.won !== undefined ? { won: p.won } : {}),
    })),
    ...over,
  };
}

t.test('match results over the API', async (t) => {
  const { anon, config } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  await applyCommands(api, [arena]);
  // Only to stage what an interrupted request leaves behind (a player still pending).
  const sql = openSql({ url: databaseUrl, schema: config.DB_SCHEMA, max: 1 });
  t.teardown(() => sql.end());

  await t.test('a clean report admits every player and records the rule-6 event', async (t) => {
    const body = report([{ ext: 'alice', won: true }, { ext: 'bob', won: false }]);
    const r = await api.post('/v1/match_results', body);
    t.equal(r.status, 201, JSON.stringify(r.body));
    t.match(r.body, {
      id: /^mr_/,
      match_id: body.match_id,
      profile: 'arena',
      match_profile_id: /^mpf_/,
      profile_revision: 1,
      event: 'match.completed',
      status: 'admitted',
      replayed: false,
      admission_errors: [],
      duration_seconds: 600,
    });
    const [a] = r.body.players;
    t.match(a, { id: /^mrp_/, customer_id: /^cust_/, status: 'admitted', reasons: [], event_id: /^evt_/, review: null, won: true });
    t.equal(a.client_event_id, `${body.match_id}:${a.customer_id}`);
    const ev = await tenant.admin.get(`/v1/events/${a.event_id}`);
    t.equal(ev.status, 200);
    t.match(ev.body, { name: 'match.completed', occurred_at: new Date(Date.parse(body.ended_at)).toISOString(), properties: { kills: 5, score: 1000, match_id: body.match_id, match_profile: 'arena', won: true } });
    // Rule 6: trust merchant_asserted, source the reporting secret key.
    t.equal(ev.body.trust, 'merchant_asserted');
    t.same(ev.body.source, { type: 'secret_key', id: tenant.secretKeyId });
  });

  await t.test('an identical repeat is a replay; another body is idempotency_key_reused', async (t) => {
    const body = report([{ ext: 'rep-1', won: true }, { ext: 'rep-2', won: false }]);
    const first = await api.post('/v1/match_results', body);
    t.equal(first.status, 201);
    const again = await api.post('/v1/match_results', body);
    t.equal(again.status, 200);
    t.equal(again.body.replayed, true);
    t.equal(again.body.id, first.body.id);
    t.same(again.body.players.map((p: { event_id: string }) => p.event_id), first.body.players.map((p: { event_id: string }) => p.event_id));
    // Players are a set and timestamps may be spelled differently: still the same report.
    const reordered = { ...body, players: [body.players[1], body.players[0]], ended_at: body.ended_at.replace('Z', '+00:00') };
    t.equal((await api.post('/v1/match_results', reordered)).status, 200);
    const otherWon = { ...body, players: [body.players[0], { ...body.players[1], won: true }] };
    const reused = await api.post('/v1/match_results', otherWon);
    t.equal(reused.status, 422);
    t.equal(reused.body.error.code, 'idempotency_key_reused');
    t.equal(reused.body.error.param, 'match_id');
  });

  await t.test('a repeat is answered from the stored record after its ended_at left the 7-day window', async (t) => {
    // Its own tenant: the test clock it moves is the environment's.
    const other = (await signUp(anon)).server;
    await applyCommands(other, [arena]);
    const body = report([{ ext: 'late-1' }, { ext: 'late-2' }]);
    const first = await other.post('/v1/match_results', body);
    t.equal(first.status, 201);
    t.equal((await other.post('/v1/test_clock/advance', { seconds: 8 * 86_400 })).status, 200);
    const again = await other.post('/v1/match_results', body);
    t.equal(again.status, 200, 'rule 4 before the ended_at window');
    t.match(again.body, { id: first.body.id, replayed: true });
    const changed = await other.post('/v1/match_results', { ...body, players: [body.players[0]] });
    t.match(changed.body.error, { code: 'idempotency_key_reused', param: 'match_id' });
    const fresh = await other.post('/v1/match_results', { ...body, match_id: 'late-new' });
    t.match(fresh.body.error, { code: 'validation_failed', param: 'ended_at' }, 'a new report is still held to the window');
  });

  await t.test('a zero-length match is rejected by the profile duration bounds, not refused as invalid', async (t) => {
    // One instant for both ends (two calls can fall in different milliseconds: a 0.001 s match).
    const at = minutesAgo(5);
    const r = await api.post('/v1/match_results', report([{ ext: 'zero-1' }], { started_at: at, ended_at: at }));
    t.equal(r.status, 201);
    t.match(r.body, { duration_seconds: 0, status: 'rejected', players: [{ status: 'rejected', reasons: [{ code: 'duration_out_of_bounds' }] }] });
  });

  await t.test('started_at after ended_at is a stored result rejected for everyone with duration_out_of_bounds, not refused as invalid', async (t) => {
    const now = Date.now();
    const body = report([{ ext: 'neg-1' }, { ext: 'neg-2' }], { started_at: new Date(now - 5 * 60_000).toISOString(), ended_at: new Date(now - 10 * 60_000).toISOString() });
    const r = await api.post('/v1/match_results', body);
    t.equal(r.status, 201, JSON.stringify(r.body));
    const reason = { code: 'duration_out_of_bounds', value: -300, limit: 60 };
    t.match(r.body, { duration_seconds: -300, status: 'rejected', players: [{ status: 'rejected', reasons: [reason], event_id: null }, { status: 'rejected', reasons: [reason] }] });
    const read = await api.get(`/v1/match_results/${body.match_id}`);
    t.match(read.body, { id: r.body.id, duration_seconds: -300, status: 'rejected', players: [{ reasons: [reason] }] }, 'the read side keeps the negative duration');
    t.match((await api.post('/v1/match_results', body)).body, { id: r.body.id, replayed: true, duration_seconds: -300 });
  });

  await t.test('rule 2 whatever the verdict: a player rejected before admission by a new external id becomes a customer', async (t) => {
    const body = report([{ ext: 'rej-new-1', kills: -1 }, { ext: 'rej-new-2' }], { match_id: 'rej-new' });
    const r = await api.post('/v1/match_results', body);
    t.equal(r.status, 201);
    const [bad, good] = r.body.players;
    t.match(bad, { status: 'rejected', reasons: [{ code: 'metric_below_minimum' }], event_id: null, customer_id: /^cust_/, client_event_id: `rej-new:${bad.customer_id}` });
    t.match(good, { status: 'admitted', customer_id: /^cust_/ });
    const found = await api.get('/v1/customers?external_id=rej-new-1');
    t.equal(found.body.data[0]?.id, bad.customer_id, 'the customer exists, under the id the verdict names');
    const stored = await api.get(`/v1/match_results/${r.body.id}`);
    t.equal(stored.body.players[0].customer_id, bad.customer_id, 'and the stored record names it');
    const again = await api.post('/v1/match_results', body);
    t.equal(again.status, 200);
    t.equal(again.body.players[0].customer_id, bad.customer_id, 'a repeat creates nobody else');
  });

  await t.test('one row per reason code, through the API', async (t) => {
    const cases: Array<{ name: string; body: ReturnType<typeof report>; status: string; code: string; everyone?: boolean }> = [
      { name: 'metric_below_minimum', body: report([{ ext: 'r-below', kills: -1 }, { ext: 'r-ok1' }]), status: 'rejected', code: 'metric_below_minimum' },
      { name: 'metric_above_maximum', body: report([{ ext: 'r-above', kills: 101 }, { ext: 'r-ok2' }]), status: 'rejected', code: 'metric_above_maximum' },
      {
        name: 'metric_per_minute_exceeded',
        body: report([{ ext: 'r-ppm', kills: 60 }], { started_at: minutesAgo(15), ended_at: minutesAgo(10) }),
        status: 'rejected',
        code: 'metric_per_minute_exceeded',
      },
      {
        name: 'duration_out_of_bounds',
        body: report([{ ext: 'r-dur1' }, { ext: 'r-dur2' }], { started_at: new Date(Date.now() - 10 * 60_000 - 30_000).toISOString() }),
        status: 'rejected',
        code: 'duration_out_of_bounds',
        everyone: true,
      },
      {
        name: 'player_count_out_of_bounds',
        body: report(Array.from({ length: 11 }, (_, i) => ({ ext: `r-count-${i}` }))),
        status: 'rejected',
        code: 'player_count_out_of_bounds',
        everyone: true,
      },
      { name: 'outlier (hold)', body: report([{ ext: 'r-outlier', score: 60000 }, { ext: 'r-ok3' }]), status: 'held', code: 'outlier' },
    ];
    for (const c of cases) {
      const r = await api.post('/v1/match_results', c.body);
      t.equal(r.status, 201, c.name);
      const p = r.body.players[0];
      t.equal(p.status, c.status, `${c.name}: verdict`);
      t.equal(p.reasons[0]?.code, c.code, `${c.name}: reason`);
      t.equal(p.event_id, null, `${c.name}: no event`);
      if (c.everyone) t.ok(r.body.players.every((x: { status: string }) => x.status === 'rejected'), `${c.name}: everyone rejected`);
      else if (r.body.players.length > 1) t.equal(r.body.players[1].status, 'admitted', `${c.name}: the other player is admitted`);
    }
    const below = await api.post('/v1/match_results', report([{ ext: 'r-shape', kills: -1 }]));
    t.match(below.body.players[0].reasons[0], { code: 'metric_below_minimum', message: String, metric: 'kills', value: -1, limit: 0 });
    t.equal(below.body.status, 'rejected');
    const mixed = await api.post('/v1/match_results', report([{ ext: 'r-mixed', kills: -1 }, { ext: 'r-ok4' }]));
    t.equal(mixed.body.status, 'partially_admitted');
    const held = await api.post('/v1/match_results', report([{ ext: 'r-held', score: 70000 }, { ext: 'r-ok5' }]));
    t.equal(held.body.status, 'held');
    const read = await api.get(`/v1/match_results/${held.body.id}`);
    t.equal(JSON.stringify(read.body.players[0].reasons), JSON.stringify(held.body.players[0].reasons), 'read back byte for byte as reported (keys in the same order)');

    // rate_limited: the fourth admitted or held match within the hour.
    const verdicts: string[] = [];
    for (let i = 0; i < 4; i++) {
      const r = await api.post('/v1/match_results', report([{ ext: 'r-rate', score: i === 0 ? 60000 : 10 }], { ended_at: minutesAgo(10 - i) }));
      verdicts.push(r.body.players[0].status);
      if (i === 3) t.match(r.body.players[0].reasons, [{ code: 'rate_limited', limit: 3, value: 3 }]);
    }
    t.same(verdicts, ['held', 'admitted', 'admitted', 'rejected'], 'a held match counts toward the window');

    // A bounds rejection is never counted: the window is untouched.
    for (let i = 0; i < 3; i++) await api.post('/v1/match_results', report([{ ext: 'r-order', kills: 101 }]));
    const stillFree = await api.post('/v1/match_results', report([{ ext: 'r-order' }]));
    t.equal(stillFree.body.players[0].status, 'admitted', 'rate windows are only consulted inside the bounds');
  });

  await t.test("a player's event id is the environment's: claimed with the content POST /v1/events would send", async (t) => {
    const playerEvent = (m: ReturnType<typeof report>, i: number, customerId: string, over: Record<string, unknown> = {}) => ({
      id: `${m.match_id}:${customerId}`,
      name: 'match.completed',
      customer_id: (m.players[i]!.customer as { external_id: string }).external_id,
      occurred_at: m.ended_at,
      properties: { ...m.players[i]!.metrics, match_id: m.match_id, match_profile: 'arena' },
      ...over,
    });

    // After the match: an exact resend of a player's event is a duplicate; other content, or the
    // same id for another customer, is 409 (before: recorded for the other customer).
    const body = report([{ ext: 'id-1' }, { ext: 'id-2' }]);
    const r = await api.post('/v1/match_results', body);
    t.equal(r.body.status, 'admitted');
    const [p1, p2] = r.body.players;
    const resend = await api.post('/v1/events', playerEvent(body, 0, p1.customer_id));
    t.equal(resend.status, 202, JSON.stringify(resend.body));
    t.match(resend.body, { id: p1.event_id, client_event_id: p1.client_event_id, duplicate: true });
    const other = await api.post('/v1/events', playerEvent(body, 0, p1.customer_id, { properties: { kills: 99 } }));
    t.equal(other.status, 409);
    t.match(other.body.error, { code: 'event_id_conflict', param: 'id' });
    const elsewhere = await api.post('/v1/events', playerEvent(body, 1, p2.customer_id, { customer_id: 'id-someone-else' }));
    t.equal(elsewhere.status, 409, 'the same id for another customer');
    t.equal((await api.get('/v1/customers?external_id=id-someone-else')).body.data.length, 0, 'which creates nobody');

    // A player named by a new external id: its id names the customer its admission created.
    const fresh = report([{ ext: `id-new-${process.pid}` }]);
    const f = (await api.post('/v1/match_results', fresh)).body.players[0];
    t.match(f, { status: 'admitted', event_id: /^evt_/ });
    t.equal((await api.post('/v1/events', playerEvent(fresh, 0, f.customer_id, { name: 'match.lost' }))).status, 409);
    t.match((await api.post('/v1/events', playerEvent(fresh, 0, f.customer_id))).body, { id: f.event_id, duplicate: true });

    // A player named by id: the fingerprint is that of the event sent with its external id.
    const c = await api.post('/v1/customers', { external_id: 'id-by-id' }, idem());
    const byId = report([{ id: c.body.id }]);
    const b = (await api.post('/v1/match_results', byId)).body.players[0];
    t.match(b, { status: 'admitted', event_id: /^evt_/ });
    t.match((await api.post('/v1/events', playerEvent(byId, 0, c.body.id, { customer_id: 'id-by-id' }))).body, { id: b.event_id, duplicate: true });
  });

  await t.test('a client event sent first with the id a match derives: that player is rejected with event_refused, the others are admitted', async (t) => {
    const other = await api.post('/v1/customers', { external_id: 'pre-1' }, idem());
    const same = await api.post('/v1/customers', { external_id: 'pre-2' }, idem());
    const body = report([{ ext: 'pre-1' }, { id: same.body.id }, { ext: 'pre-3' }]);
    // For another customer (it did not stop the match event before), and for the player's own customer.
    const first = [
      { id: `${body.match_id}:${other.body.id}`, name: 'match.completed', customer_id: 'pre-someone-else', occurred_at: minutesAgo(1) },
      { id: `${body.match_id}:${same.body.id}`, name: 'match.completed', customer_id: 'pre-2', occurred_at: minutesAgo(1) },
    ];
    for (const ev of first) t.equal((await api.post('/v1/events', ev)).status, 202);
    const r = await api.post('/v1/match_results', body);
    t.equal(r.status, 201);
    const [a, b, c] = r.body.players;
    t.match(a, { customer_id: other.body.id, status: 'rejected', event_id: null, client_event_id: `${body.match_id}:${other.body.id}` });
    t.match(a.reasons, [{ code: 'event_refused', message: /already received with different content/ }]);
    t.match(b, { customer_id: same.body.id, status: 'rejected', event_id: null, reasons: [{ code: 'event_refused' }] });
    t.match(c, { status: 'admitted', event_id: /^evt_/ });
    t.same(r.body.admission_errors, []);
    // Nothing reached the actor: the player's rate window is untouched, no event was recorded.
    for (let i = 0; i < 3; i++) {
      const next = await api.post('/v1/match_results', report([{ ext: 'pre-1' }], { ended_at: minutesAgo(9 - i) }));
      t.equal(next.body.players[0].status, 'admitted', `window slot ${i + 1} of 3 was free`);
    }
    // The verdicts are final: a repeat replays them.
    const again = await api.post('/v1/match_results', body);
    t.equal(again.status, 200);
    t.same(again.body.players.map((p: { status: string }) => p.status), ['rejected', 'rejected', 'admitted']);
    t.same(again.body.players[2].event_id, c.event_id);
  });

  await t.test("a review admit claims the held player's event id: bound to other content meanwhile, 409 and the player stays held", async (t) => {
    const held = report([{ ext: 'pre-held', score: 60000 }]);
    const h = (await api.post('/v1/match_results', held)).body.players[0];
    t.equal(h.status, 'held');
    t.equal((await api.post('/v1/events', { id: h.client_event_id, name: 'match.completed', customer_id: 'pre-held', occurred_at: minutesAgo(1) })).status, 202);
    const admit = await tenant.admin.post(`/v1/match_result_players/${h.id}/reviews`, { decision: 'admit' }, idem());
    t.equal(admit.status, 409);
    t.equal(admit.body.error.code, 'event_id_conflict');
    t.equal((await api.get(`/v1/match_results/${held.match_id}`)).body.players[0].status, 'held');
    t.equal((await tenant.admin.post(`/v1/match_result_players/${h.id}/reviews`, { decision: 'reject' }, idem())).body.player.status, 'rejected');
  });

  await t.test('outliers with action reject', async (t) => {
    await applyCommands(api, [{ ...arena, key: 'strict', rate_limits: [{ window_seconds: 3600, max_matches: 1 }], outliers: { action: 'reject', hold_metrics: [{ key: 'score', above: 50000 }] } }]);
    const r = await api.post('/v1/match_results', { ...report([{ ext: 'o-rej', score: 60000 }]), profile: 'strict' });
    t.match(r.body.players[0], { status: 'rejected', reasons: [{ code: 'outlier', metric: 'score', value: 60000, limit: 50000 }] });
    const next = await api.post('/v1/match_results', { ...report([{ ext: 'o-rej' }]), profile: 'strict' });
    t.equal(next.body.players[0].status, 'admitted', 'a rejected outlier does not count toward the window');
  });

  await t.test('report errors', async (t) => {
    const future = await api.post('/v1/match_results', report([{ ext: 'e-1' }], { started_at: minutesAgo(1), ended_at: new Date(Date.now() + 6 * 60_000).toISOString() }));
    t.equal(future.status, 400);
    t.match(future.body.error, { code: 'validation_failed', param: 'ended_at' });
    const old = await api.post('/v1/match_results', report([{ ext: 'e-1' }], { started_at: minutesAgo(8 * 24 * 60 + 10), ended_at: minutesAgo(8 * 24 * 60) }));
    t.match(old.body.error, { code: 'validation_failed', param: 'ended_at' });
    const unknownCustomer = await api.post('/v1/match_results', report([{ ext: 'e-1' }, { id: 'cust_00001M84KXN2SAE60B7HZ04F81HQ7' }]));
    t.equal(unknownCustomer.status, 404);
    t.match(unknownCustomer.body.error, { code: 'resource_not_found', param: 'players[1].customer.id' });
    const unknownProfile = await api.post('/v1/match_results', { ...report([{ ext: 'e-1' }]), profile: 'nope' });
    t.match(unknownProfile.body.error, { code: 'resource_not_found', param: 'profile' });
    const missingMetric = report([{ ext: 'e-1' }]);
    (missingMetric.players[0]!.metrics as Record<string, number>) = { kills: 1 };
    const mm = await api.post('/v1/match_results', missingMetric);
    t.match(mm.body.error, { code: 'validation_failed', param: 'players[0].metrics.score' });
    const extraMetric = report([{ ext: 'e-1' }]);
    (extraMetric.players[0]!.metrics as Record<string, number>).assists = 1;
    t.match((await api.post('/v1/match_results', extraMetric)).body.error, { code: 'validation_failed', param: 'players[0].metrics.assists' });
    const twice = await api.post('/v1/match_results', report([{ ext: 'e-1' }, { ext: 'e-1' }]));
    t.match(twice.body.error, { code: 'validation_failed', param: 'players[1]' });
    const c = await api.post('/v1/customers', { external_id: 'e-same' }, idem());
    const sameCustomer = await api.post('/v1/match_results', report([{ ext: 'e-same' }, { id: c.body.id }]));
    t.match(sameCustomer.body.error, { code: 'validation_failed', param: 'players[1]' }, 'an external id and an id naming one customer');
    const none = await api.post('/v1/match_results', report([]));
    t.match(none.body.error, { code: 'validation_failed', param: 'players' });
    const bad = await api.post('/v1/match_results', { ...report([{ ext: 'e-1' }]), extra: 1 });
    t.match(bad.body.error, { code: 'validation_failed', param: 'extra' });
    const json = await api.request('POST', '/v1/match_results', '{nope', { 'content-type': 'application/json' });
    t.equal(json.body.error.code, 'invalid_json');
    const after = await api.get('/v1/customers?limit=200');
    t.notOk(JSON.stringify(after.body).includes('"e-1"'), 'a refused report creates no customer');
  });

  await t.test('only secret keys report matches', async (t) => {
    const pk = await tenant.admin.post('/v1/api_keys', { kind: 'publishable', name: 'web', allowed_events: ['match.completed'] }, idem());
    const pub = anon.with({ authorization: `Bearer ${pk.body.token}` });
    const r = await pub.post('/v1/match_results', report([{ ext: 'x' }]));
    t.equal(r.status, 403);
    t.equal(r.body.error.code, 'event_requires_secret_key');
    const pat = await tenant.admin.post('/v1/match_results', report([{ ext: 'x' }]));
    t.equal(pat.status, 403);
    t.equal(pat.body.error.code, 'forbidden');
    const minter = await tenant.admin.post('/v1/api_keys', { kind: 'secret', name: 'minter', scopes: ['customer_sessions:write', 'customers:read'] }, idem());
    const someone = await api.post('/v1/customers', { external_id: 'session-holder' }, idem());
    const tok = await anon.with({ authorization: `Bearer ${minter.body.token}` }).post(`/v1/customers/${someone.body.id}/client_token`, {});
    t.equal(tok.status, 200);
    const c = await anon.with({ authorization: `Bearer ${tok.body.customer_token}` }).post('/v1/match_results', report([{ ext: 'x' }]));
    t.equal(c.status, 403, 'a customer session is refused');
    t.equal(c.body.error.code, 'forbidden');
    const narrow = await tenant.admin.post('/v1/api_keys', { kind: 'secret', name: 'narrow', scopes: ['events:read'] }, idem());
    const n = await anon.with({ authorization: `Bearer ${narrow.body.token}` }).post('/v1/match_results', report([{ ext: 'x' }]));
    t.equal(n.body.error.code, 'insufficient_scope');
    const none = await anon.post('/v1/match_results', report([{ ext: 'x' }]));
    t.equal(none.body.error.code, 'authentication_required');
  });

  await t.test('GET by id or match_id, lists and the review queue (oldest first)', async (t) => {
    const held1 = await api.post('/v1/match_results', report([{ ext: 'q-1', score: 60000 }]));
    const held2 = await api.post('/v1/match_results', report([{ ext: 'q-2', score: 60000 }]));
    const byId = await tenant.admin.get(`/v1/match_results/${held1.body.id}`);
    t.equal(byId.status, 200);
    t.equal(byId.body.match_id, held1.body.match_id);
    t.equal(byId.body.replayed, false);
    const byMatchId = await api.get(`/v1/match_results/${held1.body.match_id}`);
    t.equal(byMatchId.body.id, held1.body.id);
    t.equal((await api.get('/v1/match_results/mr_00000000000000000000000000')).body.error.code, 'resource_not_found');
    t.equal((await api.get('/v1/match_results/no-such-match')).status, 404);

    const queue = await api.get('/v1/match_results?status=held&limit=200');
    t.equal(queue.status, 200);
    const ids = queue.body.data.map((m: { id: string }) => m.id);
    t.ok(ids.indexOf(held1.body.id) >= 0 && ids.indexOf(held1.body.id) < ids.indexOf(held2.body.id), 'oldest first');
    t.ok(queue.body.data.every((m: { status: string }) => m.status === 'held'));
    const page1 = await api.get('/v1/match_results?status=held&limit=1');
    t.equal(page1.body.data.length, 1);
    t.equal(page1.body.has_more, true);
    const page2 = await api.get(`/v1/match_results?status=held&limit=1&cursor=${page1.body.next_cursor}`);
    t.not(page2.body.data[0].id, page1.body.data[0].id);
    const all = await api.get('/v1/match_results?limit=2');
    t.equal(all.body.data.length, 2);
    t.ok(all.body.data[0].id > all.body.data[1].id, 'other lists are newest first');
    t.equal((await api.get('/v1/match_results?status=bogus')).body.error.code, 'validation_failed');
    t.equal((await api.get('/v1/match_results?cursor=%%%')).body.error.code, 'invalid_cursor');
  });

  await t.test('reviews', async (t) => {
    const held = await api.post('/v1/match_results', report([{ ext: 'v-1', score: 60000 }, { ext: 'v-2', score: 60000 }, { ext: 'v-3' }]));
    t.equal(held.body.status, 'held');
    const [p1, p2, p3] = held.body.players;
    const review = (id: string, body: unknown, key = idem()) => tenant.admin.post(`/v1/match_result_players/${id}/reviews`, body, key);

    const admitted = await review(p1.id, { decision: 'admit', reason: 'checked the replay' });
    t.equal(admitted.status, 200);
    t.match(admitted.body, {
      player: { id: p1.id, status: 'admitted', event_id: /^evt_/, review: { decision: 'admit', reason: 'checked the replay', actor: /^usr_/, reviewed_at: String } },
      match_result: { id: held.body.id, status: 'held' },
      replayed: false,
    });
    const ev = await tenant.admin.get(`/v1/events/${admitted.body.player.event_id}`);
    t.equal(ev.body.occurred_at, new Date(Date.parse(held.body.ended_at)).toISOString(), 'occurred_at is still the match ended_at');

    const same = await review(p1.id, { decision: 'admit', reason: 'again' });
    t.equal(same.status, 200);
    t.equal(same.body.replayed, true);
    t.equal(same.body.player.event_id, admitted.body.player.event_id);
    const opposite = await review(p1.id, { decision: 'reject' });
    t.equal(opposite.status, 409);
    t.equal(opposite.body.error.code, 'invalid_state');
    const neverHeld = await review(p3.id, { decision: 'admit' });
    t.equal(neverHeld.body.error.code, 'invalid_state');

    const rejected = await review(p2.id, { decision: 'reject', reason: 'cheating' });
    t.match(rejected.body, { player: { status: 'rejected', event_id: null, review: { decision: 'reject' } }, match_result: { status: 'partially_admitted' } });
    t.equal((await api.get(`/v1/match_results/${held.body.id}`)).body.status, 'partially_admitted', 'the match status is derived');

    t.equal((await review('mrp_00000000000000000000000000', { decision: 'admit' })).body.error.code, 'resource_not_found');
    t.equal((await review(p2.id, { decision: 'maybe' })).body.error.code, 'validation_failed');
    const noKey = await tenant.admin.post(`/v1/match_result_players/${p2.id}/reviews`, { decision: 'reject' });
    t.equal(noKey.body.error.code, 'idempotency_key_required');
    const k = idem();
    t.equal((await review(p2.id, { decision: 'reject', reason: 'x' }, k)).status, 200);
    t.equal((await review(p2.id, { decision: 'reject', reason: 'y' }, k)).body.error.code, 'idempotency_key_reused');
  });

  await t.test('a review repeated with the same Idempotency-Key is the stored answer with replayed: true', async (t) => {
    const held = await api.post('/v1/match_results', report([{ ext: 'rk-1', score: 60000 }]));
    const p = held.body.players[0];
    t.equal(p.status, 'held');
    const key = idem();
    const first = await tenant.admin.post(`/v1/match_result_players/${p.id}/reviews`, { decision: 'admit' }, key);
    t.equal(first.status, 200);
    t.equal(first.body.replayed, false);
    const again = await tenant.admin.post(`/v1/match_result_players/${p.id}/reviews`, { decision: 'admit' }, key);
    t.equal(again.status, 200);
    t.equal(again.headers.get('idempotent-replayed'), 'true');
    t.same(again.body, { ...first.body, replayed: true }, 'the same answer, now saying replayed');
    const refused = await tenant.admin.post('/v1/match_result_players/mrp_00000000000000000000000000/reviews', { decision: 'admit' }, key);
    t.equal(refused.body.error.code, 'idempotency_key_reused', 'stored errors replay unchanged');
  });

  await t.test('admit is refused while the reporting key is revoked; reject still works', async (t) => {
    const k = await tenant.admin.post('/v1/api_keys', { kind: 'secret', name: 'reporter' }, idem());
    const reporter = anon.with({ authorization: `Bearer ${k.body.token}` });
    const held = await reporter.post('/v1/match_results', report([{ ext: 'rv-1', score: 60000 }, { ext: 'rv-2', score: 60000 }]));
    t.equal(held.body.status, 'held');
    t.equal((await tenant.admin.post(`/v1/api_keys/${k.body.id}/revoke`, {})).status, 200);
    const r = await tenant.admin.post(`/v1/match_result_players/${held.body.players[0].id}/reviews`, { decision: 'admit' }, idem());
    t.equal(r.status, 403);
    t.equal(r.body.error.code, 'forbidden');
    const still = await api.get(`/v1/match_results/${held.body.id}`);
    t.equal(still.body.players[0].status, 'held', 'the player stays held');
    const rej = await tenant.admin.post(`/v1/match_result_players/${held.body.players[1].id}/reviews`, { decision: 'reject' }, idem());
    t.equal(rej.status, 200);
  });

  await t.test('archived profiles refuse new reports; stored results and pending reviews are kept', async (t) => {
    await applyCommands(api, [{ ...arena, key: 'old' }]);
    const heldRequest = { ...report([{ ext: 'ar-1', score: 60000 }]), profile: 'old' };
    const held = { ...(await api.post('/v1/match_results', heldRequest)), request: heldRequest };
    t.equal(held.body.status, 'held');
    await applyCommands(api, [{ type: 'match_profile.archive', key: 'old' }]);
    const refused = await api.post('/v1/match_results', { ...report([{ ext: 'ar-2' }]), profile: 'old' });
    t.equal(refused.body.error.code, 'match_profile_archived');
    t.equal(refused.body.error.param, 'profile');
    const after = await api.get('/v1/customers?limit=200');
    t.notOk(JSON.stringify(after.body).includes('"ar-2"'), 'a refused report creates no customer');
    // Rule 4 comes first: a report stored before the archive is still answered as a replay.
    const heldBody = held.request;
    const replay = await api.post('/v1/match_results', heldBody);
    t.equal(replay.status, 200, JSON.stringify(replay.body));
    t.equal(replay.body.replayed, true);
    t.equal(replay.body.id, held.body.id);
    const otherBody = await api.post('/v1/match_results', { ...heldBody, players: [{ ...heldBody.players[0], won: true }] });
    t.equal(otherBody.body.error?.code, 'idempotency_key_reused', 'and another body for it is still idempotency_key_reused');
    t.equal((await api.get(`/v1/match_results/${held.body.id}`)).status, 200);
    const admit = await tenant.admin.post(`/v1/match_result_players/${held.body.players[0].id}/reviews`, { decision: 'admit' }, idem());
    t.equal(admit.body.player.status, 'admitted', 'a pending review still completes');
  });

  await t.test('the admitted event runs through published rules', async (t) => {
    t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
    const rule = await api.post(
      '/v1/rules',
      {
        name: 'win bonus',
        definition: {
          schema: 'service.rule/v2',
          trigger: { kind: 'customer_event', event: 'match.completed' },
          conditions: { all: [{ path: 'event.properties.won', op: 'eq', value: true }] },
          trust: { minimum: 'merchant_asserted' },
          actions: [{ type: 'points.award', currency: 'coins', amount: 25 }],
        },
      },
      idem(),
    );
    t.equal(rule.status, 201, JSON.stringify(rule.body));
    t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);
    // Counters count match events like any other event.
    const wins = await api.post(
      '/v1/counter_definitions',
      { name: 'wins', event: 'match.completed', window: { kind: 'lifetime' }, filter: { path: 'event.properties.won', op: 'eq', value: true } },
      idem(),
    );
    t.equal(wins.status, 201, JSON.stringify(wins.body));
    const r = await api.post('/v1/match_results', report([{ ext: 'rules-w', won: true }, { ext: 'rules-l', won: false }]));
    t.equal(r.body.status, 'admitted');
    const [w, l] = r.body.players;
    const bw = await api.get(`/v1/customers/${w.customer_id}/balances`);
    const bl = await api.get(`/v1/customers/${l.customer_id}/balances`);
    t.match(bw.body.data, [{ currency: 'coins', available: 25 }]);
    t.notOk(bl.body.data.some((b: { available: number }) => b.available > 0));
    t.same((await api.get(`/v1/customers/${w.customer_id}/state`)).body.counters, { wins: 1 }, 'the win was counted');
    t.same((await api.get(`/v1/customers/${l.customer_id}/state`)).body.counters, { wins: 0 });
    // Admitting a held player through a review runs the rules too.
    const held = await api.post('/v1/match_results', report([{ ext: 'rules-h', won: true, score: 60000 }]));
    const rev = await tenant.admin.post(`/v1/match_result_players/${held.body.players[0].id}/reviews`, { decision: 'admit' }, idem());
    t.equal(rev.body.player.status, 'admitted');
    const bh = await api.get(`/v1/customers/${held.body.players[0].customer_id}/balances`);
    t.match(bh.body.data, [{ currency: 'coins', available: 25 }]);
    t.same((await api.get(`/v1/customers/${held.body.players[0].customer_id}/state`)).body.counters, { wins: 1 }, 'a reviewed admit is counted too');
  });

  await t.test("rule 6: a capped campaign's rule awards on match events from its budget, never past it", async (t) => {
    const other = (await signUp(anon)).server;
    await applyCommands(other, [arena]);
    t.equal((await other.post('/v1/currencies', { key: 'gems', name: 'Gems' }, idem())).status, 201);
    const campaign = await other.post('/v1/campaigns', { name: 'Arena week', budgets: [{ currency: 'gems', amount: 30 }] }, idem());
    t.equal(campaign.status, 201, JSON.stringify(campaign.body));
    t.equal((await other.post(`/v1/campaigns/${campaign.body.id}/activate`, {})).status, 200);
    const definition = {
      schema: 'service.rule/v2',
      trigger: { kind: 'customer_event', event: 'match.completed' },
      actions: [{ type: 'points.award', currency: 'gems', amount: 10 }],
    };
    const rule = await other.post('/v1/rules', { name: 'arena gems', definition, campaign_id: campaign.body.id }, idem());
    t.equal(rule.status, 201, JSON.stringify(rule.body));
    t.equal((await other.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);
    const r = await other.post('/v1/match_results', report([{ ext: 'cb-1' }, { ext: 'cb-2' }, { ext: 'cb-3' }, { ext: 'cb-4' }]));
    t.equal(r.body.status, 'admitted');
    let awarded = 0;
    for (const p of r.body.players) {
      const b = await other.get(`/v1/customers/${p.customer_id}/balances`);
      awarded += b.body.data.find((x: { currency: string }) => x.currency === 'gems')?.available ?? 0;
    }
    t.equal(awarded, 30, 'three players awarded from the budget of 30, the fourth skipped (before: none, budget_exhausted)');
    const spent = await other.get(`/v1/campaigns/${campaign.body.id}`);
    t.match(spent.body.budgets, [{ currency: 'gems', amount: 30, spent: 30 }]);
  });

  await t.test('rule 5: a repeat completes a player an interrupted request left pending, exactly once', async (t) => {
    const body = report([{ ext: 'rc-1', won: true }, { ext: 'rc-2', won: false }]);
    const first = await api.post('/v1/match_results', body);
    t.equal(first.body.status, 'admitted');
    const p1 = first.body.players[0];
    t.match((await api.get(`/v1/customers/${p1.customer_id}/balances`)).body.data, [{ currency: 'coins', available: 25 }]);
    // The request died after the actor step and before the verdict was stored.
    const errors = [{ player_id: p1.id, customer_id: p1.customer_id, code: 'internal_error', message: 'interrupted' }];
    await sql`update match_result_players set status = 'pending', event_id = null where id = ${p1.id}`;
    await sql`update match_results set admission_errors = (${JSON.stringify(errors)}::text)::jsonb where id = ${first.body.id}`;
    const shown = await api.get(`/v1/match_results/${first.body.id}`);
    t.match(shown.body.players[0], { status: 'admitted', event_id: null }, 'a pending player shows admitted with event_id null');
    t.same(shown.body.admission_errors, errors);
    const again = await api.post('/v1/match_results', body);
    t.equal(again.status, 200);
    t.equal(again.body.replayed, true);
    t.same(again.body.admission_errors, []);
    t.match(again.body.players[0], { status: 'admitted', event_id: p1.event_id }, 'completed with the event recorded the first time');
    t.match((await api.get(`/v1/customers/${p1.customer_id}/balances`)).body.data, [{ currency: 'coins', available: 25 }], 'the event ran once');
  });

  await t.test('rule 5: a pending player whose reporting key was revoked stays listed, not admitted', async (t) => {
    const k = await tenant.admin.post('/v1/api_keys', { kind: 'secret', name: 'short-lived reporter' }, idem());
    const reporter = anon.with({ authorization: `Bearer ${k.body.token}` });
    const body = report([{ ext: 'rk-1' }, { ext: 'rk-2' }]);
    const first = await reporter.post('/v1/match_results', body);
    t.equal(first.status, 201);
    const p1 = first.body.players[0];
    // The request died before this player's admission: pending, nothing recorded for it.
    await sql`update match_result_players set status = 'pending', event_id = null where id = ${p1.id}`;
    t.equal((await tenant.admin.post(`/v1/api_keys/${k.body.id}/revoke`, {})).status, 200);
    const again = await api.post('/v1/match_results', body);
    t.equal(again.status, 200);
    t.match(again.body.admission_errors, [{ player_id: p1.id, code: 'credentials_revoked' }]);
    t.match(again.body.players[0], { status: 'admitted', event_id: null }, 'shown admitted with event_id null while listed');
    t.equal((await api.get(`/v1/match_results/${first.body.id}`)).body.admission_errors.length, 1, 'and stored so');
  });

  await t.test('rule 5 for players named by a new external id: the customer is created by the admission, once', async (t) => {
    const coins = async (customerId: string) =>
      (await api.get(`/v1/customers/${customerId}/balances`)).body.data.find((b: { currency: string }) => b.currency === 'coins')?.available ?? 0;
    // Interrupted after the admission: the customer exists and has its event, the row is still
    // pending and, as the claim stored it, without a customer id.
    const body = report([{ ext: 'nx-1', won: true }, { ext: 'nx-2', won: false }]);
    const first = await api.post('/v1/match_results', body);
    t.equal(first.status, 201);
    const p1 = first.body.players[0];
    t.equal(await coins(p1.customer_id), 25);
    await sql`update match_result_players set status = 'pending', customer_id = null, event_id = null, client_event_id = null where id = ${p1.id}`;
    const shown = await api.get(`/v1/match_results/${first.body.id}`);
    t.match(shown.body.players[0], { id: p1.id, customer_id: null, status: 'admitted', event_id: null, client_event_id: null }, 'pending: no customer id yet');
    const again = await api.post('/v1/match_results', body);
    t.equal(again.status, 200);
    t.match(again.body.players[0], { id: p1.id, customer_id: p1.customer_id, status: 'admitted', event_id: p1.event_id, client_event_id: p1.client_event_id });
    t.equal(await coins(p1.customer_id), 25, 'the admission ran once');
    t.match((await api.get(`/v1/match_results/${first.body.id}`)).body.players[0], { customer_id: p1.customer_id, event_id: p1.event_id }, 'stored');

    // Interrupted before the admission: the external id was never used, so nobody exists yet.
    const staged = report([{ ext: 'nx-3', won: true }]);
    const stagedFirst = await api.post('/v1/match_results', staged);
    const neverSeen = `nx-never-${process.pid}`;
    const body2 = { ...staged, players: [{ ...staged.players[0]!, customer: { external_id: neverSeen } }] };
    const parsed = parseReport(body2, Date.now());
    if (!parsed.ok) throw new Error(parsed.message);
    await sql`update match_results set fingerprint = ${reportFingerprint(parsed.value)} where id = ${stagedFirst.body.id}`;
    await sql`
      update match_result_players set status = 'pending', customer_id = null, event_id = null, client_event_id = null,
        customer_ref = (${JSON.stringify({ by: 'external_id', value: neverSeen })}::text)::jsonb
      where id = ${stagedFirst.body.players[0].id}`;
    t.equal((await api.get(`/v1/customers?external_id=${neverSeen}`)).body.data.length, 0);
    const completed = await api.post('/v1/match_results', body2);
    t.equal(completed.status, 200, JSON.stringify(completed.body));
    const created = (await api.get(`/v1/customers?external_id=${neverSeen}`)).body.data;
    t.equal(created.length, 1, 'the repeat created the customer');
    t.match(completed.body.players[0], { customer_id: created[0].id, status: 'admitted', event_id: /^evt_/, client_event_id: `${staged.match_id}:${created[0].id}` });
    t.equal(await coins(created[0].id), 25);
  });

  // A report as an interrupted request leaves it: claimed (every player pending on the verdict the
  // report reserved for it, a never-seen external id without a customer) and nothing after it (no
  // actor step, no verdict written).
  const records = new MatchRecords(sql);
  const outlierReason: Reason = { code: 'outlier', message: 'score is 60000, above the hold threshold 50000.', metric: 'score', value: 60000, limit: 50000 };
  async function claimInterrupted(body: ReturnType<typeof report>, reportingKeyId: string, verdicts: PlayerStatus[]): Promise<MatchRow> {
    const parsed = parseReport(body, Date.now());
    if (!parsed.ok) throw new Error(parsed.message);
    const r = parsed.value;
    const profile = (await api.get(`/v1/match_profiles/${r.profileKey}`)).body;
    const nowMs = Date.now();
    const id = newId('mr', nowMs);
    const m: MatchRow = {
      id,
      matchId: r.matchId,
      profileId: profile.id,
      profileKey: r.profileKey,
      profileRevision: profile.version,
      event: profile.event,
      fingerprint: reportFingerprint(r),
      startedAtMs: r.startedAtMs,
      endedAtMs: r.endedAtMs,
      durationSeconds: r.durationSeconds,
      reportingKeyId,
      status: deriveMatchStatus(verdicts),
      admissionErrors: [],
      revision: 1,
      createdAtMs: nowMs,
      updatedAtMs: nowMs,
      players: r.players.map(
        (p, i): PlayerRow => ({
          id: newId('mrp', nowMs),
          matchResultId: id,
          position: i,
          customerRef: p.customer,
          customerId: null,
          metrics: p.metrics,
          won: p.won,
          status: 'pending',
          pendingVerdict: verdicts[i]!,
          reasons: verdicts[i] === 'admitted' ? [] : [outlierReason],
          eventId: null,
          clientEventId: null,
          review: null,
          createdAtMs: nowMs,
          updatedAtMs: nowMs,
        }),
      ),
    };
    if (!(await records.claim(tenant.testEnv, m))) throw new Error('claim: the match_id is stored');
    return m;
  }
  const inQueue = async (id: string) => (await api.get('/v1/match_results?status=held&limit=200')).body.data.some((m: { id: string }) => m.id === id);

  await t.test('rule 5: an interrupted report shows each pending player by its reserved verdict; a pending held player is reviewable', async (t) => {
    await applyCommands(api, [{ ...arena, key: 'iv', rate_limits: [{ window_seconds: 3600, max_matches: 1 }] }]);
    const body = report([{ ext: 'iv-held', score: 60000, won: true }, { ext: 'iv-ok' }], { profile: 'iv' });
    const m = await claimInterrupted(body, tenant.secretKeyId, ['held', 'admitted']);
    const shown = await api.get(`/v1/match_results/${m.id}`);
    t.equal(shown.status, 200);
    t.match(shown.body, { status: 'held', admission_errors: [] });
    t.match(shown.body.players[0], { status: 'held', reasons: [{ code: 'outlier', metric: 'score' }], event_id: null, customer_id: null, review: null });
    t.match(shown.body.players[1], { status: 'admitted', reasons: [], event_id: null, customer_id: null });
    t.ok(await inQueue(m.id), 'the match waits in the review queue');

    // The review completes the interrupted admission first (the rate count, the customers), then decides.
    const admit = await tenant.admin.post(`/v1/match_result_players/${m.players[0]!.id}/reviews`, { decision: 'admit' }, idem());
    t.equal(admit.status, 200, JSON.stringify(admit.body));
    t.match(admit.body, {
      player: { id: m.players[0]!.id, status: 'admitted', customer_id: /^cust_/, event_id: /^evt_/, review: { decision: 'admit' } },
      match_result: { id: m.id, status: 'admitted' },
      replayed: false,
    });
    const after = await api.get(`/v1/match_results/${m.id}`);
    t.match(after.body, { status: 'admitted', admission_errors: [] });
    t.match(after.body.players[1], { status: 'admitted', customer_id: /^cust_/, event_id: /^evt_/ }, 'the other player was completed too');
    t.notOk(await inQueue(m.id));
    const again = await api.post('/v1/match_results', report([{ ext: 'iv-held' }], { profile: 'iv', ended_at: minutesAgo(9) }));
    t.match(again.body.players[0], { status: 'rejected', reasons: [{ code: 'rate_limited' }] }, 'the held player was counted in its rate window');
  });

  await t.test('rule 5 after the reporting key was revoked: only players it would admit stay pending; held and rejected ones complete', async (t) => {
    await applyCommands(api, [
      { ...arena, key: 'ivk', rate_limits: [{ window_seconds: 3600, max_matches: 1 }] },
      { ...arena, key: 'ivx', rate_limits: [{ window_seconds: 3600, max_matches: 1 }], outliers: { action: 'reject', hold_metrics: [{ key: 'score', above: 50000 }] } },
    ]);
    const k = await tenant.admin.post('/v1/api_keys', { kind: 'secret', name: 'revoked reporter' }, idem());
    const held = report([{ ext: 'ivk-held', score: 60000 }, { ext: 'ivk-ok' }], { profile: 'ivk' });
    const outlier = report([{ ext: 'ivx-out', score: 60000 }, { ext: 'ivx-ok' }], { profile: 'ivx' });
    const mh = await claimInterrupted(held, k.body.id, ['held', 'admitted']);
    const mx = await claimInterrupted(outlier, k.body.id, ['rejected', 'admitted']);
    t.equal((await api.get(`/v1/match_results/${mx.id}`)).body.players[0].status, 'rejected', 'a pending outlier-rejected player shows rejected');
    t.equal((await tenant.admin.post(`/v1/api_keys/${k.body.id}/revoke`, {})).status, 200);

    const r = await api.post('/v1/match_results', held);
    t.equal(r.status, 200, JSON.stringify(r.body));
    const [ph, pa] = r.body.players;
    t.match(r.body, { replayed: true, status: 'held' });
    t.match(ph, { status: 'held', reasons: [{ code: 'outlier' }], customer_id: /^cust_/, event_id: null });
    t.equal(ph.client_event_id, `${held.match_id}:${ph.customer_id}`);
    t.match(pa, { status: 'admitted', event_id: null, customer_id: /^cust_/ }, 'the player the key would admit stays admitted with event_id null');
    t.equal(pa.client_event_id, `${held.match_id}:${pa.customer_id}`);
    t.same(r.body.admission_errors, [{ player_id: pa.id, customer_id: pa.customer_id, code: 'credentials_revoked', message: 'The key that reported this match was revoked.' }]);
    t.equal((await api.get('/v1/customers?external_id=ivk-ok')).body.data[0]?.id, pa.customer_id, 'rule 2: its customer was created');
    t.ok(await inQueue(mh.id), 'the match stays in the review queue');
    const counted = await api.post('/v1/match_results', report([{ ext: 'ivk-held' }], { profile: 'ivk', ended_at: minutesAgo(9) }));
    t.match(counted.body.players[0], { status: 'rejected', reasons: [{ code: 'rate_limited' }] }, 'the held player was counted');
    const stored = await api.get(`/v1/match_results/${mh.id}`);
    t.match(stored.body, { status: 'held', admission_errors: [{ player_id: pa.id, code: 'credentials_revoked' }] });
    const repeated = await api.post('/v1/match_results', held);
    t.same(repeated.body.players.map((p: { customer_id: string }) => p.customer_id), [ph.customer_id, pa.customer_id], 'a repeat creates nobody else');
    t.equal(repeated.body.admission_errors.length, 1);

    const review = (id: string, decision: string) => tenant.admin.post(`/v1/match_result_players/${id}/reviews`, { decision }, idem());
    t.equal((await review(ph.id, 'admit')).body.error?.code, 'forbidden', 'admit is refused while the key is revoked');
    const rejected = await review(ph.id, 'reject');
    t.equal(rejected.status, 200, JSON.stringify(rejected.body));
    t.match(rejected.body, { player: { status: 'rejected' }, match_result: { status: 'partially_admitted' } });
    t.notOk(await inQueue(mh.id), 'the queue is cleared');

    const x = await api.post('/v1/match_results', outlier);
    t.equal(x.status, 200, JSON.stringify(x.body));
    t.match(x.body, { status: 'partially_admitted' });
    t.match(x.body.players[0], { status: 'rejected', reasons: [{ code: 'outlier' }], customer_id: /^cust_/, event_id: null });
    t.match(x.body.players[1], { status: 'admitted', event_id: null, customer_id: /^cust_/ });
    t.same(x.body.admission_errors.map((e: { player_id: string; code: string }) => [e.player_id, e.code]), [[x.body.players[1].id, 'credentials_revoked']]);
  });

  await t.test("a held player whose customer was deleted: reject is recorded, admit is invalid_state; the queue clears", async (t) => {
    const held = await api.post('/v1/match_results', report([{ ext: 'del-a', score: 60000 }, { ext: 'del-b', score: 60000 }]));
    t.equal(held.body.status, 'held');
    const [pa, pb] = held.body.players;
    for (const p of [pa, pb]) t.equal((await tenant.admin.delete(`/v1/customers/${p.customer_id}`)).status, 204);
    const review = (id: string, decision: string) => tenant.admin.post(`/v1/match_result_players/${id}/reviews`, { decision }, idem());
    const admit = await review(pa.id, 'admit');
    t.equal(admit.status, 409, JSON.stringify(admit.body));
    t.match(admit.body.error, { code: 'invalid_state', param: 'decision', message: "The player's customer was deleted; the player can only be rejected." });
    t.equal((await api.get(`/v1/match_results/${held.body.id}`)).body.players[0].status, 'held', 'the refused admit changed nothing');
    const rb = await review(pb.id, 'reject');
    t.equal(rb.status, 200, JSON.stringify(rb.body));
    t.match(rb.body, { player: { id: pb.id, status: 'rejected', event_id: null, review: { decision: 'reject' } }, match_result: { status: 'held' }, replayed: false });
    const ra = await review(pa.id, 'reject');
    t.match(ra.body, { player: { status: 'rejected' }, match_result: { status: 'rejected' } });
    t.match((await review(pa.id, 'reject')).body, { replayed: true }, 'the same decision again: a replay');
    t.notOk(await inQueue(held.body.id), 'the queue is cleared');
  });

  await t.test('concurrent identical reports: one 201, the others replays of the same record; each player admitted once', async (t) => {
    const body = report([{ ext: 'twin-1', won: true }, { ext: 'twin-2' }, { ext: 'twin-3' }]);
    const results = await Promise.all(Array.from({ length: 6 }, () => api.post('/v1/match_results', body)));
    t.same(
      results.map((r) => r.status).sort(),
      [200, 200, 200, 200, 200, 201],
    );
    const created = results.find((r) => r.status === 201)!.body;
    for (const r of results) {
      t.equal(r.body.id, created.id);
      t.same(
        r.body.players.map((p: { id: string }) => p.id),
        created.players.map((p: { id: string }) => p.id),
      );
    }
    const settled = await api.get(`/v1/match_results/${created.id}`);
    t.ok(settled.body.players.every((p: { status: string; event_id: string | null }) => p.status === 'admitted' && p.event_id !== null));
    const winner = settled.body.players[0].customer_id;
    const bal = (await api.get(`/v1/customers/${winner}/balances`)).body.data.find((b: { currency: string }) => b.currency === 'coins');
    t.equal(bal?.available, 25, 'the rule ran once for the winner');
    const different = await Promise.all([
      api.post('/v1/match_results', report([{ ext: 'race-1' }], { match_id: `race-${process.pid}` })),
      api.post('/v1/match_results', report([{ ext: 'race-2' }], { match_id: `race-${process.pid}` })),
    ]);
    t.same(
      different.map((r) => r.status).sort(),
      [201, 422],
      'the same match_id with another body at the same time: one is stored, the other is idempotency_key_reused',
    );
  });

  await t.test('duplicate_player_after_merge: a pending player whose customer was merged into another player of the match', async (t) => {
    const body = report([{ ext: 'dm-a' }, { ext: 'dm-b' }]);
    const single = { ...body, players: [body.players[0]!] };
    const first = await api.post('/v1/match_results', single);
    t.equal(first.body.players[0].status, 'admitted');
    const a = first.body.players[0].customer_id;
    const b = await api.post('/v1/customers', { external_id: 'dm-b' }, idem());
    t.equal((await api.post(`/v1/customers/${a}/aliases`, { alias: 'dm-b', kind: 'anonymous' }, idem())).status, 201);
    // Stage the report as if dm-b (then its own customer) was stored pending and never reached its actor.
    const parsed = parseReport(body, Date.now());
    if (!parsed.ok) throw new Error(parsed.message);
    await sql`update match_results set fingerprint = ${reportFingerprint(parsed.value)} where id = ${first.body.id}`;
    await sql`
      insert into match_result_players (environment_id, id, match_result_id, position, customer_ref, customer_id, metrics, won, status,
        pending_verdict, client_event_id, created_at, updated_at)
      values (${tenant.testEnv}, ${`mrp_staged_${process.pid}`}, ${first.body.id}, 1, (${JSON.stringify({ by: 'external_id', value: 'dm-b' })}::text)::jsonb,
        ${b.body.id}, (${JSON.stringify(body.players[1]!.metrics)}::text)::jsonb, null, 'pending', 'admitted', ${`${body.match_id}:${b.body.id}`}, now(), now())`;
    const again = await api.post('/v1/match_results', body);
    t.equal(again.status, 200, JSON.stringify(again.body));
    t.match(again.body.players[1], { customer_id: b.body.id, status: 'rejected', reasons: [{ code: 'duplicate_player_after_merge' }], event_id: null });
    t.equal(again.body.status, 'partially_admitted');
  });

  await t.test('a review admit after a merge: another player of the match in the group was admitted, so duplicate_player_after_merge', async (t) => {
    const body = report([{ ext: 'rd-a' }, { ext: 'rd-b', score: 60000 }]);
    const r = await api.post('/v1/match_results', body);
    const [pa, pb] = r.body.players;
    t.match([pa.status, pb.status], ['admitted', 'held']);
    const merged = await api.post(`/v1/customers/${pa.customer_id}/aliases`, { alias: 'rd-b', kind: 'anonymous' }, idem());
    t.equal(merged.status, 201, JSON.stringify(merged.body));
    t.equal(merged.body.merged_from, pb.customer_id);
    const review = (decision: string) => tenant.admin.post(`/v1/match_result_players/${pb.id}/reviews`, { decision }, idem());
    const admit = await review('admit');
    t.equal(admit.status, 200, JSON.stringify(admit.body));
    t.match(admit.body, {
      player: { id: pb.id, status: 'rejected', event_id: null, reasons: [{ code: 'outlier' }, { code: 'duplicate_player_after_merge' }], review: { decision: 'admit' } },
      match_result: { status: 'partially_admitted' },
      replayed: false,
    });
    t.match((await review('admit')).body, { player: { status: 'rejected' }, replayed: true }, 'the same decision again: a replay');
    t.equal((await review('reject')).body.error.code, 'invalid_state', 'the opposite decision');
    const exported = await api.get(`/v1/customers/${pa.customer_id}/export`);
    const events = exported.body.events.filter((e: { properties: { match_id?: string } }) => e.properties.match_id === body.match_id);
    t.equal(events.length, 1, 'one event for the match in the group');
  });

  await t.test('rate windows under concurrency: N simultaneous reports for one player admit exactly max_matches', async (t) => {
    const n = 12;
    const results = await Promise.all(
      Array.from({ length: n }, (_, i) => api.post('/v1/match_results', report([{ ext: 'conc-player' }, { ext: `conc-other-${i}` }], { ended_at: minutesAgo(10 - i * 0.1) }))),
    );
    t.ok(results.every((r) => r.status === 201));
    const statuses = results.map((r) => r.body.players[0].status);
    t.equal(statuses.filter((s) => s === 'admitted').length, 3, 'max_matches = 3');
    t.equal(statuses.filter((s) => s === 'rejected').length, n - 3);
    t.ok(results.every((r) => r.body.players[1].status === 'admitted'), 'the other players are unaffected');
    const c = await api.get(`/v1/customers/${results[0]!.body.players[0].customer_id}/state`);
    t.equal(c.status, 200);
  });

  await t.test('merged customers share their rate windows', async (t) => {
    let aId = '';
    for (let i = 0; i < 2; i++) {
      const r = await api.post('/v1/match_results', report([{ ext: 'merge-a' }], { ended_at: minutesAgo(10 - i) }));
      t.equal(r.body.players[0].status, 'admitted');
      aId = r.body.players[0].customer_id;
    }
    const b = await api.post('/v1/match_results', report([{ ext: 'merge-b' }], { ended_at: minutesAgo(7) }));
    t.equal(b.body.players[0].status, 'admitted');
    const merged = await api.post(`/v1/customers/${aId}/aliases`, { alias: 'merge-b', kind: 'anonymous' }, idem());
    t.equal(merged.status, 201, JSON.stringify(merged.body));
    t.equal(merged.body.merged_from, b.body.players[0].customer_id);
    const after = await api.post('/v1/match_results', report([{ ext: 'merge-a' }], { ended_at: minutesAgo(5) }));
    t.equal(after.body.players[0].status, 'rejected', 'a (2) + b (1) already hold 3 matches in the hour');
    t.equal(after.body.players[0].reasons[0]?.code, 'rate_limited');
    const viaB = await api.post('/v1/match_results', report([{ ext: 'merge-b' }], { ended_at: minutesAgo(4) }));
    t.equal(viaB.body.players[0].customer_id, aId, 'the merged external id names the survivor');
    t.equal(viaB.body.players[0].status, 'rejected');
  });
  await t.test('a match two merged customers both played counts once in their rate windows', async (t) => {
    await applyCommands(api, [{ ...arena, key: 'rl2', rate_limits: [{ window_seconds: 3600, max_matches: 2 }], outliers: null }]);
    const g1 = await api.post('/v1/match_results', { ...report([{ ext: 'rm-a' }, { ext: 'rm-b' }], { ended_at: minutesAgo(10) }), profile: 'rl2' });
    t.same(g1.body.players.map((p: { status: string }) => p.status), ['admitted', 'admitted']);
    const merged = await api.post(`/v1/customers/${g1.body.players[0].customer_id}/aliases`, { alias: 'rm-b', kind: 'anonymous' }, idem());
    t.equal(merged.status, 201, JSON.stringify(merged.body));
    const g2 = await api.post('/v1/match_results', { ...report([{ ext: 'rm-a' }], { ended_at: minutesAgo(9) }), profile: 'rl2' });
    t.match(g2.body.players[0], { status: 'admitted' }, 'the group has one match in the hour (g1), not two');
    const g3 = await api.post('/v1/match_results', { ...report([{ ext: 'rm-b' }], { ended_at: minutesAgo(8) }), profile: 'rl2' });
    t.match(g3.body.players[0], { status: 'rejected', reasons: [{ code: 'rate_limited', value: 2, limit: 2 }] });
  });
});
