// Black-box API tests of what a customer holds across merges and its bounds: the export holds the
// challenge progress of the customers merged into it; the state view lists the aliases reaching
// the customer through merges (as the export does); an alias that already reaches the customer
// is answered as held; attributes are bounded in bytes. Real Redis and PostgreSQL.
import t from 'tap';
import { limits } from '../../src/limits.js';
import { idem, signUp, startForTest } from '../helpers/service.js';

const now = () => new Date(Date.now() - 1000).toISOString();

t.test('customer identity over the API', async (t) => {
  const { anon } = await startForTest(t);
  const api = (await signUp(anon)).server;
  let n = 0;
  const send = (customer: string, name: string, properties: Record<string, unknown> = {}) =>
    api.post('/v1/events', { id: `ci-${++n}`, name, customer_id: customer, occurred_at: now(), properties, mode: 'sync' });
  const idOf = async (ext: string) => (await api.get(`/v1/customers?external_id=${ext}`)).body.data[0].id as string;

  await t.test("the export holds the challenge progress of the customers merged into the customer", async (t) => {
    const ch = await api.post(
      '/v1/challenges',
      { name: 'Five matches', qualifying: { event: 'match.done' }, target: 5, contribution_key: 'event.properties.match', completion_actions: [], status: 'active' },
      idem(),
    );
    t.equal(ch.status, 201, JSON.stringify(ch.body));
    t.equal((await send('cp-m', 'match.done', { match: 'm1' })).status, 200);
    t.equal((await send('cp-s', 'match.done', { match: 'm2' })).status, 200);
    t.equal((await send('cp-s', 'match.done', { match: 'm3' })).status, 200);
    const m = await idOf('cp-m');
    const s = await idOf('cp-s');
    t.match(await api.post(`/v1/customers/${s}/aliases`, { alias: 'cp-m' }, idem()), { status: 201, body: { merged_from: m } });
    const ex = await api.get(`/v1/customers/${s}/export`);
    t.equal(ex.status, 200);
    const rows = (ex.body.challenge_progress as Array<{ challenge: string; count: number }>).filter((p) => p.challenge === ch.body.id);
    t.same(rows.map((p) => p.count).sort(), [1, 2], "the survivor's progress and the merged customer's own row (kept as history)");
  });

  await t.test('aliases reaching the customer through a merge: listed by the state view, answered as held', async (t) => {
    const m = (await api.post('/v1/customers', { external_id: 'al-m' }, idem())).body.id as string;
    t.equal((await api.post(`/v1/customers/${m}/aliases`, { alias: 'al-m-anon' }, idem())).status, 201);
    const s = (await api.post('/v1/customers', { external_id: 'al-s' }, idem())).body.id as string;
    t.equal((await api.post(`/v1/customers/${s}/aliases`, { alias: 'al-m' }, idem())).status, 201);
    const listed = async (path: string) => ((await api.get(path)).body.aliases as Array<{ alias: string }>).map((a) => a.alias).sort();
    t.same(await listed(`/v1/customers/${s}/state`), ['al-m', 'al-m-anon']);
    t.same(await listed(`/v1/customers/${s}/state`), await listed(`/v1/customers/${s}/export`), 'as the export lists them');
    const again = await api.post(`/v1/customers/${s}/aliases`, { alias: 'al-m-anon' }, idem());
    t.match(again, { status: 200, body: { alias: { alias: 'al-m-anon', customer_id: s }, merged_from: null } });
    const own = await api.post(`/v1/customers/${s}/aliases`, { alias: 'al-s' }, idem());
    t.match(own, { status: 200, body: { alias: { alias: 'al-s', customer_id: s }, merged_from: null } }, 'its own external id');
    t.same(await listed(`/v1/customers/${s}/state`), ['al-m', 'al-m-anon'], 'neither recorded again');
  });

  await t.test(`attributes are at most ${limits.attributesBytesMax} bytes as JSON`, async (t) => {
    const big = 'x'.repeat(limits.attributesBytesMax);
    const refused = await api.post('/v1/customers', { external_id: 'big-1', attributes: { big } }, idem());
    t.match(refused, { status: 400, body: { error: { code: 'validation_failed', param: 'attributes' } } });
    const c = await api.post('/v1/customers', { external_id: 'big-2', attributes: { a: 'y'.repeat(20_000) } }, idem());
    t.equal(c.status, 201);
    const past = await api.patch(`/v1/customers/${c.body.id}`, { attributes: { b: 'z'.repeat(20_000) } });
    t.match(past, { status: 400, body: { error: { code: 'validation_failed', param: 'attributes' } } }, 'a patch taking them past the bound');
    t.match(await api.get(`/v1/customers/${c.body.id}`), { status: 200, body: { version: 1 } }, 'nothing changed');
    t.match(await api.patch(`/v1/customers/${c.body.id}`, { attributes: { a: null, b: 'z'.repeat(20_000) } }), { status: 200, body: { version: 2 } });
  });
});
