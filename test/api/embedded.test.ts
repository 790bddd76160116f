// The service in embedded mode (what `npm start` runs: the fsynced file journal and PGlite over
// one connection), end to end through the API: the README's walkthrough, a rule with a limit
// shared by every customer, a match report with a held player and its review admit (it used to
// hang the whole service: the review's transaction held the only connection while the event id's
// claim waited for one), then a restart on the same data directory that finds everything again.
// And a reject and an admit review each as the first request after a restart (every catalog cache
// cold): the review used to read the time zone and counter definitions inside its transaction.
// The data directory's lock is given back by a stop and by a start that fails.
import { existsSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import t from 'tap';
import { lockPaths } from '../../src/persistence/file/data-dir-lock.js';
import { type Service, startService } from '../../src/service.js';
import { Client, embeddedConfig, idem, signUp } from '../helpers/service.js';

const arena = {
  type: 'match_profile.create',
  key: 'arena',
  metrics: [{ key: 'kills', minimum: 0, maximum: 100 }, { key: 'score', minimum: 0, maximum: 100000 }],
  duration: { minimum_seconds: 60, maximum_seconds: 3600 },
  players: { minimum: 1, maximum: 10 },
  rate_limits: [{ window_seconds: 3600, max_matches: 3 }],
  outliers: { action: 'hold', hold_metrics: [{ key: 'score', above: 50000 }] },
};

/**
 * Answers within `ms` or fails the test: a hang is the bug this file guards against. The bounds are
 * 30 s: a loaded box answers late, and a hang still fails here, well before the file's timeout.
 */
async function within<T>(ms: number, what: string, p: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function startEmbedded(dataDir: string): Promise<Service> {
  return startService(embeddedConfig(dataDir), pino({ level: 'silent' }));
}

t.test('embedded mode end to end, and again after a restart', async (t) => {
  const dataDir = await mkdtemp(join(tmpdir(), 'embedded-api-'));
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  let service = await startEmbedded(dataDir);
  t.teardown(() => service.stop());
  const anon = new Client(`http://127.0.0.1:${service.httpPort}`);
  const tenant = await signUp(anon);
  const api = tenant.server;
  const now = () => new Date().toISOString();

  // A rule whose limit is shared by every customer: its slot is taken in SQL before the step.
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const rule = await api.post(
    '/v1/rules',
    {
      name: 'one bonus per match',
      definition: {
        schema: 'service.rule/v2',
        trigger: { kind: 'customer_event', event: 'match.completed' },
        limits: [{ id: 'per-match', scope: ['event.properties.match_id'], max: 1 }],
        trust: { minimum: 'merchant_asserted' },
        actions: [{ type: 'points.award', currency: 'coins', amount: 10 }],
      },
    },
    idem(),
  );
  t.equal(rule.status, 201, JSON.stringify(rule.body));
  t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);

  const first = { id: 'emb-1', name: 'app.opened', customer_id: 'player-7', occurred_at: now(), properties: { x: 1 } };
  const ev = await api.post('/v1/events', first);
  t.equal(ev.status, 202, JSON.stringify(ev.body));

  const cs = await api.post('/v1/change_sets', { commands: [arena] }, idem());
  t.equal(cs.status, 201, JSON.stringify(cs.body));
  t.equal((await api.post('/v1/change_set_applications', { change_set_id: cs.body.id }, idem())).status, 201);
  const ended = Date.now() - 10 * 60_000;
  const match = {
    profile: 'arena',
    match_id: 'emb-match-1',
    started_at: new Date(ended - 10 * 60_000).toISOString(),
    ended_at: new Date(ended).toISOString(),
    players: [
      { customer: { external_id: 'player-7' }, metrics: { kills: 5, score: 60000 } },
      { customer: { external_id: 'player-8' }, metrics: { kills: 5, score: 1000 } },
    ],
  };
  const reported = await within(30_000, 'report', api.post('/v1/match_results', match));
  t.equal(reported.status, 201, JSON.stringify(reported.body));
  const [held, admitted] = reported.body.players;
  t.match([held.status, admitted.status], ['held', 'admitted']);

  const review = await within(30_000, 'review admit', tenant.admin.post(`/v1/match_result_players/${held.id}/reviews`, { decision: 'admit' }, idem()));
  t.equal(review.status, 200, JSON.stringify(review.body));
  t.equal(review.body.player.status, 'admitted');
  t.equal((await within(30_000, 'readyz after the review', anon.get('/readyz'))).status, 200, 'the service still answers');
  const again = await within(30_000, 'review replay', tenant.admin.post(`/v1/match_result_players/${held.id}/reviews`, { decision: 'admit' }, idem()));
  t.equal(again.body.replayed, true);

  const balanceOf = async (c: Client, customerId: string) =>
    ((await c.get(`/v1/customers/${customerId}/balances`)).body.data[0]?.available as number | undefined) ?? 0;
  const balances = [await balanceOf(api, held.customer_id), await balanceOf(api, admitted.customer_id)];
  t.same(balances.sort(), [0, 10], 'the shared limit let one player of the match have the bonus');

  // Restart on the same data directory: the journal and PGlite hold it all. The stop gave the
  // directory's lock back (a lock left behind would hold the next start up until it went stale).
  await service.stop();
  t.notOk(existsSync(lockPaths(dataDir).lock), 'the stop removed the data directory lock');
  service = await startEmbedded(dataDir);
  const after = new Client(`http://127.0.0.1:${service.httpPort}`).with({ authorization: `Bearer ${tenant.secretKey}` });
  const state = await within(30_000, 'state after restart', after.get(`/v1/customers/${held.customer_id}/state`));
  t.equal(state.status, 200);
  t.same([await balanceOf(after, held.customer_id), await balanceOf(after, admitted.customer_id)].sort(), balances.sort(), 'balances survive');
  const stored = await after.get(`/v1/match_results/${reported.body.id}`);
  t.equal(stored.body.players[0].status, 'admitted', 'the review survives');
  const dup = await after.post('/v1/events', first);
  t.match([dup.status, dup.body], [202, { id: ev.body.id, duplicate: true }], 'the event id is still known');
});

t.test('embedded mode: a review right after a restart, with every catalog cache cold', async (t) => {
  // Given a report with two held players and a counter definition (the catalog a player's event
  // is counted with), and a restart that leaves every cache cold
  const dataDir = await mkdtemp(join(tmpdir(), 'embedded-api-'));
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  let service = await startEmbedded(dataDir);
  t.teardown(() => service.stop());
  const anon = new Client(`http://127.0.0.1:${service.httpPort}`);
  const tenant = await signUp(anon);
  const cs = await tenant.server.post('/v1/change_sets', { commands: [arena] }, idem());
  t.equal(cs.status, 201, JSON.stringify(cs.body));
  t.equal((await tenant.server.post('/v1/change_set_applications', { change_set_id: cs.body.id }, idem())).status, 201);
  const counter = await tenant.server.post('/v1/counter_definitions', { name: 'matches', event: 'match.completed', window: { kind: 'lifetime' } }, idem());
  t.equal(counter.status, 201, JSON.stringify(counter.body));
  const ended = Date.now() - 10 * 60_000;
  const reported = await within(
    30_000,
    'report',
    tenant.server.post('/v1/match_results', {
      profile: 'arena',
      match_id: 'emb-cold-1',
      started_at: new Date(ended - 10 * 60_000).toISOString(),
      ended_at: new Date(ended).toISOString(),
      players: [
        { customer: { external_id: 'cold-1' }, metrics: { kills: 1, score: 60000 } },
        { customer: { external_id: 'cold-2' }, metrics: { kills: 2, score: 70000 } },
      ],
    }),
  );
  t.equal(reported.status, 201, JSON.stringify(reported.body));
  const [rejected, admitted] = reported.body.players;
  t.match([rejected.status, admitted.status], ['held', 'held']);

  const restart = async () => {
    await service.stop();
    service = await startEmbedded(dataDir);
    const base = `http://127.0.0.1:${service.httpPort}`;
    return { admin: new Client(base).with({ authorization: `Bearer ${tenant.secretKey}` }) };
  };
  // When a reject review is the first request after the restart
  let c = await restart();
  const reject = await within(30_000, 'review reject after a restart', c.admin.post(`/v1/match_result_players/${rejected.id}/reviews`, { decision: 'reject' }, idem()));
  // Then it answers (it used to hang the service: its transaction read the cold catalogs over the only connection)
  t.equal(reject.status, 200, JSON.stringify(reject.body));
  t.equal(reject.body.player.status, 'rejected');
  t.equal((await within(30_000, 'a read after the reject', c.admin.get(`/v1/match_results/${reported.body.id}`))).status, 200, 'the service still answers');

  // When an admit review is the first request after another restart
  c = await restart();
  const admit = await within(30_000, 'review admit after a restart', c.admin.post(`/v1/match_result_players/${admitted.id}/reviews`, { decision: 'admit' }, idem()));
  // Then it answers
  t.equal(admit.status, 200, JSON.stringify(admit.body));
  t.equal(admit.body.player.status, 'admitted');
  const stored = await within(30_000, 'a read after the admit', c.admin.get(`/v1/match_results/${reported.body.id}`));
  t.match(stored.body.players, [{ status: 'rejected' }, { status: 'admitted' }], 'the service still answers, with both reviews');
});

t.test('embedded mode: a start that fails gives the data directory lock back', async (t) => {
  // Given a data directory whose PGlite cannot open (its pg is a file)
  const dataDir = await mkdtemp(join(tmpdir(), 'embedded-api-'));
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  writeFileSync(join(dataDir, 'pg'), 'not a directory');
  // When the service starts on it, Then the start fails, and leaves no lock to hold the next one up
  await t.rejects(startEmbedded(dataDir), 'the start fails');
  t.notOk(existsSync(lockPaths(dataDir).lock), 'the lock directory is gone');
  t.notOk(existsSync(lockPaths(dataDir).owner), 'and so is its owner file');
});
