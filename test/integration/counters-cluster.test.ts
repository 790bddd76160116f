// A counter definition created on one node while the environment's first events are still in
// flight on the other (sent through both nodes, held in the other node's actors) is not ready
// until they are in the read tables, and a backfill then counts each of them once: the barrier
// asks every node to settle its event commands (cluster/counters-barrier.ts), not only the one
// that took the request.
import t from 'tap';
import type { Call, CallResult } from '../../src/actors/partition.js';
import { partitionOf } from '../../src/ids.js';
import { idem, type Running, signUp, startForTest, storageFor } from '../helpers/service.js';

const partitions = 16;

async function waitSplit(a: Running, b: Running, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const na = a.service.placement.ownedCount;
    const nb = b.service.placement.ownedCount;
    if (na > 0 && nb > 0 && na + nb === partitions) return;
    if (Date.now() > until) throw new Error(`partitions not split: a=${na} b=${nb}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

t.test('a counter defined on one node while the first events are in flight on the other counts each of them once', async (t) => {
  const storage = storageFor(t);
  const env = { PARTITIONS: String(partitions), ADVERTISE_HOST: '127.0.0.1' };
  const a = await startForTest(t, { storage, env: { ...env, NODE_ID: 'node-a' } });
  const b = await startForTest(t, { storage, env: { ...env, NODE_ID: 'node-b' } });
  await waitSplit(a, b, 20_000);
  const tenant = await signUp(a.anon);
  const auth = { authorization: `Bearer ${tenant.secretKey}` };
  const [viaA, viaB] = [a.anon.with(auth), b.anon.with(auth)];

  // Customers whose partitions node-a owns.
  const customers: string[] = [];
  for (let i = 0; customers.length < 4; i++) {
    const ext = `cl-${i}`;
    if (a.service.placement.local(partitionOf(tenant.testEnv, ext, partitions)) !== undefined) customers.push(ext);
  }
  // Given: node-a's actors hold their event steps (the events' counters contexts are read already).
  let held = 0;
  let release!: () => void;
  const gate = new Promise<void>((r) => {
    release = r;
  });
  t.teardown(() => release());
  for (let p = 0; p < partitions; p++) {
    const partition = a.service.placement.local(p);
    if (partition === undefined) continue;
    const submit = partition.submit.bind(partition);
    partition.submit = (call: Call): Promise<CallResult> => {
      if (call.command.kind !== 'event.record') return submit(call);
      held++;
      return gate.then(() => submit(call));
    };
  }
  const n = 12;
  const events = Array.from({ length: n }, (_, i) =>
    // Half through node-b, which forwards them to node-a.
    (i % 2 === 0 ? viaA : viaB).post('/v1/events', {
      id: `cl-${i}`,
      name: 'first.visit',
      customer_id: customers[i % customers.length],
      occurred_at: new Date(Date.now() - 1000).toISOString(),
      properties: {},
    }),
  );
  while (held < n) await new Promise((r) => setTimeout(r, 5));

  // When: node-b takes the definition; node-a lets the events go a moment later.
  const creating = viaB.post('/v1/counter_definitions', { name: 'visits', event: 'first.visit', window: { kind: 'lifetime' } }, idem());
  const letGo = setTimeout(release, 200);
  t.teardown(() => clearTimeout(letGo));
  const ctr = await creating;
  release();
  t.same((await Promise.all(events)).map((r) => r.status), Array(n).fill(202));

  // Then: it is not ready, and the backfill counts every event once.
  t.equal(ctr.status, 201);
  t.equal(ctr.body.status, 'backfilling', 'the events node-a held were recorded without the definition');
  const bf = await viaB.post(`/v1/counter_definitions/${ctr.body.id}/backfill`, {});
  t.equal(bf.body.status, 'ready');
  let sum = 0;
  for (const c of customers) {
    const id = (await viaA.get(`/v1/customers?external_id=${c}`)).body.data[0].id;
    sum += (await viaA.get(`/v1/customers/${id}/state`)).body.counters.visits;
  }
  t.equal(sum, n, 'every event counted once');
});
