// DELETE honours If-Match on every resource that has a version: another version is 409
// stale_write and nothing is deleted (or archived); the current one deletes. Real Redis and
// PostgreSQL, unique schema and key prefix.
import t from 'tap';
import { idem, signUp, startForTest } from '../helpers/service.js';

t.test('DELETE with If-Match', async (t) => {
  const { anon } = await startForTest(t);
  const api = (await signUp(anon)).server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const created = async (path: string, body: unknown) => {
    const r = await api.post(path, body, idem());
    t.equal(r.status, 201, `${path}: ${JSON.stringify(r.body)}`);
    return r.body as { id: string; version: number };
  };
  const cases: Array<[string, string, { id: string; version: number }]> = [
    ['reward', '/v1/rewards', await created('/v1/rewards', { name: 'Mug', cost: 10, currency: 'coins', availability: 5 })],
    ['segment', '/v1/segments', await created('/v1/segments', { name: 'vip', kind: 'static' })],
    ['campaign', '/v1/campaigns', await created('/v1/campaigns', { name: 'Spring' })],
    [
      'challenge',
      '/v1/challenges',
      await created('/v1/challenges', { name: 'Three wins', qualifying: { event: 'match.won' }, target: 3, completion_actions: [], status: 'draft' }),
    ],
    ['counter definition', '/v1/counter_definitions', await created('/v1/counter_definitions', { name: 'wins', event: 'match.won', window: { kind: 'lifetime' } })],
  ];
  for (const [name, path, r] of cases) {
    const stale = await api.delete(`${path}/${r.id}`, { 'if-match': `"${r.version + 5}"` });
    t.same({ status: stale.status, code: stale.body?.error?.code }, { status: 409, code: 'stale_write' }, `${name}: another version`);
    const still = await api.get(`${path}/${r.id}`);
    t.equal(still.status, 200, `${name}: still there`);
    t.equal(still.body.version, r.version, `${name}: unchanged`);
    const gone = await api.delete(`${path}/${r.id}`, { 'if-match': `"${r.version}"` });
    t.equal(gone.status, 204, `${name}: its version deletes`);
  }
});
