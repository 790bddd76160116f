// Merges racing in opposite directions across two nodes: two server processes on one Redis and
// one PostgreSQL; for each pair of customers A and B, A takes B's external id through node a
// while B takes A's through node b, at the same moment. The environment's cluster-wide merge
// lock serializes them, so every pair ends with exactly one survivor that both ids reach (never
// A merged into B and B into A, both unreachable), holding the other's external id as an alias and
// both customers' balances (the ledger handover crosses nodes with the merge). The losing request
// then names its survivor's own external id: answered 200 as an alias already held.
import t from 'tap';
import { twoNodes } from '../helpers/process.js';
import { type Client, idem, redisUrl, serverEnv, storageFor } from '../helpers/service.js';

const partitions = 16;
const pairs = 20;

t.test('opposite merges sent through two nodes at once leave one reachable survivor per pair', async (t) => {
  const storage = storageFor(t);
  const base = serverEnv(storage, redisUrl, { PARTITIONS: String(partitions), ADVERTISE_HOST: '127.0.0.1' });
  const { apiA, apiB } = await twoNodes(t, base, partitions);

  const currency = await apiA.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem());
  t.equal(currency.status, 201);
  const created = await Promise.all(
    Array.from({ length: pairs }, async (_, i) => {
      const ca = await apiA.post('/v1/customers', { external_id: `mr-a-${i}` }, idem());
      const cb = await apiB.post('/v1/customers', { external_id: `mr-b-${i}` }, idem());
      if (ca.status !== 201 || cb.status !== 201) throw new Error(`create ${i}: ${ca.status} ${cb.status}`);
      // Through the node that did not create it: the adjustment may be forwarded to the owner.
      const la = await apiB.post('/v1/ledger_entries', { customer_id: ca.body.id, currency: 'coins', amount: 10, reason: 't' }, idem());
      const lb = await apiA.post('/v1/ledger_entries', { customer_id: cb.body.id, currency: 'coins', amount: 20, reason: 't' }, idem());
      if (la.status !== 201 || lb.status !== 201) throw new Error(`adjust ${i}: ${la.status} ${lb.status} ${JSON.stringify([la.body, lb.body])}`);
      return { i, a: ca.body.id as string, b: cb.body.id as string };
    }),
  );

  // Each pair's two merges leave together; the pairs one after another, so every pair races.
  const answers: Array<{ ab: Awaited<ReturnType<Client['post']>>; ba: Awaited<ReturnType<Client['post']>> }> = [];
  for (const p of created) {
    const [ab, ba] = await Promise.all([
      apiA.post(`/v1/customers/${p.a}/aliases`, { alias: `mr-b-${p.i}` }, idem()),
      apiB.post(`/v1/customers/${p.b}/aliases`, { alias: `mr-a-${p.i}` }, idem()),
    ]);
    answers.push({ ab, ba });
  }

  let cycles = 0;
  for (const [n, p] of created.entries()) {
    const { ab, ba } = answers[n]!;
    // The merge that lost the race names its survivor's own external id by then: answered as an
    // alias already held (200, nothing recorded); the winner's is the merge (201).
    t.same([ab.status, ba.status].sort(), [200, 201], `pair ${p.i}: both merges answered (${JSON.stringify([ab.body, ba.body])})`);
    // Read through the node that did not send each merge, and through the other, by id.
    const [viaA, viaB, viaA2, viaB2] = await Promise.all([
      apiB.get(`/v1/customers/${p.a}`),
      apiA.get(`/v1/customers/${p.b}`),
      apiA.get(`/v1/customers/${p.a}`),
      apiB.get(`/v1/customers/${p.b}`),
    ]);
    if (viaA.status !== 200 || viaB.status !== 200) cycles++;
    t.same([viaA.status, viaB.status, viaA2.status, viaB2.status], [200, 200, 200, 200], `pair ${p.i}: both ids reachable from both nodes`);
    const survivor = viaA.body?.id as string;
    t.ok(survivor === p.a || survivor === p.b, `pair ${p.i}: the survivor is one of the two`);
    t.same([viaB.body?.id, viaA2.body?.id, viaB2.body?.id], [survivor, survivor, survivor], `pair ${p.i}: one survivor`);
    const merged = survivor === p.a ? p.b : p.a;
    const mergedExternal = survivor === p.a ? `mr-b-${p.i}` : `mr-a-${p.i}`;
    t.equal(viaA.body?.external_id, survivor === p.a ? `mr-a-${p.i}` : `mr-b-${p.i}`, `pair ${p.i}: the survivor keeps its external id`);
    // The survivor's merge reported the merged customer; the other merge merged nobody.
    const winner = survivor === p.a ? ab : ba;
    const loser = survivor === p.a ? ba : ab;
    t.equal(winner.body?.merged_from, merged, `pair ${p.i}: the survivor's merge names the merged customer`);
    t.notOk(loser.body?.merged_from, `pair ${p.i}: the other merge merged nobody`);
    t.equal(loser.body?.alias?.customer_id, survivor, `pair ${p.i}: the other merge landed on the survivor`);
    t.same([winner.status, loser.status], [201, 200], `pair ${p.i}: the survivor's merge is the one that made something`);
    const state = await apiA.get(`/v1/customers/${survivor}/state`);
    t.ok(
      (state.body?.aliases ?? []).some((x: { alias: string; customer_id: string }) => x.alias === mergedExternal && x.customer_id === survivor),
      `pair ${p.i}: the survivor holds the merged customer's external id as an alias`,
    );
    const [byA, byB] = await Promise.all([
      apiB.get(`/v1/customers?external_id=mr-a-${p.i}`),
      apiA.get(`/v1/customers?external_id=mr-b-${p.i}`),
    ]);
    t.same([byA.body?.data?.[0]?.id, byB.body?.data?.[0]?.id], [survivor, survivor], `pair ${p.i}: both external ids reach the survivor`);
    const balances = await apiB.get(`/v1/customers/${survivor}/balances`);
    t.same(balances.body?.data, [{ currency: 'coins', available: 30, pending: 0, lifetime_earned: 30 }], `pair ${p.i}: the survivor holds both balances`);
  }
  t.equal(cycles, 0, 'no pair ended merged into each other');
});
