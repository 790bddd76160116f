// Black-box API tests of match results (spec 2.12, 3, 4.9): reporting with every reason code in
// check order, replay and idempotency_key_reused, ended_at window, unknown customers, archived
// profiles, secret-key-only access, the review queue and reviews (admit, reject, replay,
// invalid_state, revoked reporting key), the rule-6 event running through published rules, and
// rate windows under concurrency (N simultaneous reports for one player never admit more than
// max_matches).
import t from 'tap';
import { type Client, idem, signUp, startForTest } from '../helpers/service.js';

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
  return {
    profile: 'arena',
    match_id: `m-${process.pid}-${++matchCounter}`,
    started_at: minutesAgo(20),
    ended_at: minutesAgo(10),
    players: players.map((p) => ({
      customer: p.id !== undefined ? { id: p.id } : { external_id: p.ext ?? 'p' },
      metrics: { kills: p.kills ?? 5, score: p.score ?? 1000 },
      ...(p.won !== undefined ? { won: p.won } : {}),
    })),
    ...over,
  };
}

t.test('match results over the API', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  await applyCommands(api, [arena]);

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
  });
});
