// Crash test of match admission: kill -9 the server while 4-player reports are in flight (some
// players admitted, some pending, some matches not stored yet), restart, report every match
// again, and check that each player was admitted exactly once: every player of every match ends
// admitted with an event, and each customer's points (a published rule awards 1 coin per
// match.completed) equal the number of matches the customer played, so no event ran twice.
import t from 'tap';
import { Client, idem, signUp, storageFor, serverEnv } from '../helpers/service.js';
import { kill9, serverSpawner, startAofRedis } from '../helpers/process.js';

t.test('kill -9 in the middle of admissions: each player admitted exactly once after re-reporting', async (t) => {
  const redis = await startAofRedis();
  t.teardown(() => redis.stop());
  const storage = storageFor(t);
  const env = serverEnv(storage, redis.url, {
    PARTITIONS: '8',
    SNAPSHOT_EVERY_MS: '300',
  });
  const customers = 24;
  const endedAt = new Date(Date.now() - 10 * 60_000).toISOString();
  const startedAt = new Date(Date.now() - 20 * 60_000).toISOString();
  const matchBody = (n: number) => ({
    profile: 'crash',
    match_id: `cm-${n}`,
    started_at: startedAt,
    ended_at: endedAt,
    players: [0, 1, 2, 3].map((k) => ({ customer: { external_id: `cp-${(n * 5 + k * 7) % customers}` }, metrics: { score: n % 50 }, won: k === 0 })),
  });

  // Every server is killed at teardown, also when the test fails between a start and its round's kill.
  const { spawn } = serverSpawner(t, env);
  let server = await spawn();
  let anon = new Client(`http://127.0.0.1:${server.port}`);
  const tenant = await signUp(anon);
  let api = anon.with({ authorization: `Bearer ${tenant.secretKey}` });
  const cs = await api.post(
    '/v1/change_sets',
    { commands: [{ type: 'match_profile.create', key: 'crash', metrics: [{ key: 'score', minimum: 0, maximum: 100 }], rate_limits: [{ window_seconds: 3600, max_matches: 10000 }] }] },
    idem(),
  );
  t.equal((await api.post('/v1/change_set_applications', { change_set_id: cs.body.id }, idem())).status, 201);
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const rule = await api.post(
    '/v1/rules',
    { name: 'per match', definition: { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: 'match.completed' }, actions: [{ type: 'points.award', currency: 'coins', amount: 1 }] } },
    idem(),
  );
  t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);

  let seq = 0;
  const attempted = new Set<number>();
  let answered = 0;
  for (let round = 0; round < 3; round++) {
    let stop = false;
    const workers = Array.from({ length: 12 }, async () => {
      while (!stop) {
        const n = seq++;
        attempted.add(n);
        try {
          const r = await api.post('/v1/match_results', matchBody(n));
          if (r.status === 201) answered++;
        } catch {
          // connection dropped by the kill
        }
      }
    });
    // Reports for a span that differs per round, and on until this round had some answered (a loaded
    // box serves fewer per second; the assertion below needs them).
    const began = Date.now();
    const answeredBefore = answered;
    await new Promise((r) => setTimeout(r, 600 + round * 300));
    while (answered - answeredBefore < 8 && Date.now() - began < 30_000) await new Promise((r) => setTimeout(r, 20));
    await kill9(server);
    stop = true;
    await Promise.all(workers);
    server = await spawn();
    anon = new Client(`http://127.0.0.1:${server.port}`);
    api = anon.with({ authorization: `Bearer ${tenant.secretKey}` });
  }
  t.ok(answered > 20, `${answered} of ${attempted.size} reports answered before the crashes`);

  // The client retries every match it ever sent.
  const played = new Map<string, number>();
  let notAdmitted = 0;
  let errors = 0;
  const all = [...attempted].sort((a, b) => a - b);
  for (let i = 0; i < all.length; i += 8) {
    const chunk = all.slice(i, i + 8);
    const results = await Promise.all(chunk.map((n) => api.post('/v1/match_results', matchBody(n))));
    for (const r of results) {
      if (r.status !== 200 && r.status !== 201) {
        errors++;
        if (errors <= 3) t.comment(JSON.stringify(r.body));
        continue;
      }
      if (r.body.admission_errors.length > 0) errors++;
      for (const p of r.body.players) {
        if (p.status !== 'admitted' || p.event_id === null) notAdmitted++;
        played.set(p.customer_id, (played.get(p.customer_id) ?? 0) + 1);
      }
    }
  }
  t.equal(errors, 0, 'every re-report answered without admission errors');
  t.equal(notAdmitted, 0, 'every player of every match is admitted with its event');
  let wrong = 0;
  for (const [customerId, matches] of played) {
    const b = await api.get(`/v1/customers/${customerId}/balances`);
    const coins = b.body.data.find((x: { currency: string }) => x.currency === 'coins')?.available ?? 0;
    if (coins !== matches) {
      wrong++;
      if (wrong <= 3) t.comment(`${customerId}: ${coins} coins for ${matches} matches`);
    }
  }
  t.equal(wrong, 0, 'each customer earned exactly one award per match played: no player admitted twice');
  if (wrong > 0 || errors > 0) t.comment(server.output().slice(0, 2000));
});
