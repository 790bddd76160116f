// Never oversold: two in-process nodes on one Redis and one PostgreSQL split the partitions;
// customers on many partitions (owned by both nodes) race through both nodes for the last units
// of one reward. Exactly `availability` issuances succeed, the rest are 409 reward_unavailable,
// the reward's `issued` equals the successes, and every success is present exactly once (read
// table, customer state, confirmed reservation). Cancels give units back and a second race
// takes exactly those.
import t from 'tap';
import type { Running } from '../helpers/service.js';
import { idem, signUp, startForTest, storageFor } from '../helpers/service.js';
import { partitionOf } from '../../src/ids.js';
import { openSql } from '../../src/persistence/sql/db.js';
import { databaseUrl } from '../helpers/service.js';

const partitions = 16;
const customers = 40;

async function waitSplit(a: Running, b: Running, timeoutMs: number): Promise<[number, number]> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const na = a.service.placement.ownedCount;
    const nb = b.service.placement.ownedCount;
    if (na > 0 && nb > 0 && na + nb === partitions) return [na, nb];
    if (Date.now() > until) throw new Error(`partitions not split: a=${na} b=${nb}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

t.test('customers on different partitions and nodes race for the last units of one reward', async (t) => {
  const storage = storageFor(t);
  const env = { PARTITIONS: String(partitions), ADVERTISE_HOST: '127.0.0.1' };
  const a = await startForTest(t, { storage, env: { ...env, NODE_ID: 'node-a' } });
  const b = await startForTest(t, { storage, env: { ...env, NODE_ID: 'node-b' } });
  const [ownedA, ownedB] = await waitSplit(a, b, 20_000);
  t.pass(`partitions split: node-a ${ownedA}, node-b ${ownedB}`);

  const tenant = await signUp(a.anon);
  const auth = { authorization: `Bearer ${tenant.secretKey}` };
  const nodes = [a.anon.with(auth), b.anon.with(auth)];
  const api = nodes[0]!;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  const reward = await api.post('/v1/rewards', { name: 'Last ones', cost: 0, currency: 'coins', availability: 5 }, idem());
  t.equal(reward.status, 201);
  const rewardId = reward.body.id as string;

  const ids: string[] = [];
  const used = new Set<number>();
  for (let i = 0; i < customers; i++) {
    const ext = `racer-${i}`;
    used.add(partitionOf(tenant.testEnv, ext, partitions));
    const c = await nodes[i % 2]!.post('/v1/customers', { external_id: ext }, idem());
    t.equal(c.status, 201);
    ids.push(c.body.id);
  }
  const onA = [...used].filter((p) => a.service.placement.local(p) !== undefined).length;
  t.ok(onA > 0 && onA < used.size, `customers spread over ${used.size} partitions, ${onA} on node-a, ${used.size - onA} on node-b`);

  async function race(): Promise<Map<string, string>> {
    // Everyone at once, half through each node (a customer's request often lands on the node that does not own it).
    const results = await Promise.all(
      ids.map((id, i) => nodes[(i + 1) % 2]!.post('/v1/reward_issuances', { reward_id: rewardId, customer_id: id }, idem())),
    );
    const won = new Map<string, string>();
    for (const [i, r] of results.entries()) {
      if (r.status === 201) won.set(r.body.id, ids[i]!);
      else t.same([r.status, r.body.error.code], [409, 'reward_unavailable'], `customer ${i}: the others are refused`);
    }
    return won;
  }

  const first = await race();
  t.equal(first.size, 5, 'exactly availability issuances succeed');
  t.equal((await api.get(`/v1/rewards/${rewardId}`)).body.issued, 5, 'issued never exceeds availability');

  async function present(won: Map<string, string>, expectedTotal: number) {
    // A node drains only its own projector: issuances journaled on the other node's partitions reach
    // the read table one projection cycle later (longer under load), so wait for it to converge.
    let listedIds: string[] = [];
    for (let i = 0; i < 100; i++) {
      const listed = await nodes[1]!.get('/v1/reward_issuances?limit=200&status=issued');
      listedIds = listed.body.data.map((x: { id: string }) => x.id) as string[];
      if (listedIds.length === expectedTotal && [...won.keys()].every((id) => listedIds.includes(id))) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    t.equal(listedIds.length, expectedTotal, 'the read table holds each issued one');
    t.equal(new Set(listedIds).size, listedIds.length, 'each exactly once');
    for (const [id, customer] of won) {
      t.ok(listedIds.includes(id), `${id} listed`);
      const st = await nodes[0]!.get(`/v1/customers/${customer}/state`);
      t.same(
        st.body.issuances.filter((x: { id: string }) => x.id === id).map((x: { status: string }) => x.status),
        ['issued'],
        `${id} is in its customer's state once`,
      );
    }
  }
  await present(first, 5);

  // Two units come back; a second race takes exactly those two.
  const back = [...first.keys()].slice(0, 2);
  for (const [i, id] of back.entries()) t.equal((await nodes[i % 2]!.post(`/v1/reward_issuances/${id}/cancel`, {})).status, 200);
  t.equal((await api.get(`/v1/rewards/${rewardId}`)).body.issued, 3);
  const second = await race();
  t.equal(second.size, 2, 'exactly the units given back are issued again');
  t.equal((await api.get(`/v1/rewards/${rewardId}`)).body.issued, 5);
  await present(new Map([...[...first].filter(([id]) => !back.includes(id)), ...second]), 5);

  const sql = openSql({ url: databaseUrl, schema: storage.schema, max: 1 });
  t.teardown(() => sql.end());
  const rows = await sql`select state, count(*)::int as n from reward_reservations group by state order by state`;
  t.same(
    rows.map((r) => [r.state, r.n]),
    [
      ['confirmed', 5],
      ['released', 2],
    ],
    'every reservation is accounted for: no unit lost, none held by a refused request',
  );
});
