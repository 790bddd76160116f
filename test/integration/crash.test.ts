// Crash test: under load, kill -9 the server several times and restart it. Every event that was
// acknowledged (202) must be present exactly once afterwards, answered as a duplicate with the
// same service id when re-sent; an event that was never acknowledged is either fully there or
// absent (one journal record holds all of an event's facts, so it cannot be half-applied).
import t from 'tap';
import { Client, signUp, storageFor, serverEnv } from '../helpers/service.js';
import { kill9, spawnServer, startAofRedis } from '../helpers/process.js';

t.test('kill -9 under load loses no acknowledged event and applies none twice', async (t) => {
  const redis = await startAofRedis();
  t.teardown(() => redis.stop());
  const storage = storageFor(t);
  const env = serverEnv(storage, redis.url, {
    PARTITIONS: '8',
    // Small snapshot interval so crashes land between checkpoints and journal trims.
    SNAPSHOT_EVERY_MS: '300',
  });
  const acked = new Map<string, { id: string; customer: string; occurredAt: string }>();
  const attempted = new Set<string>();
  let secret = '';
  const logs: string[] = [];
  let seq = 0;
  const customers = 40;
  for (let round = 0; round < 4; round++) {
    const server = await spawnServer(env);
    t.teardown(() => kill9(server)); // a failure before this round's kill must not leave it running
    const anon = new Client(`http://127.0.0.1:${server.port}`);
    if (secret === '') secret = (await signUp(anon)).secretKey;
    const api = anon.with({ authorization: `Bearer ${secret}` });
    let stop = false;
    const workers = Array.from({ length: 16 }, async () => {
      while (!stop) {
        const n = seq++;
        const id = `ev-${n}`;
        const customer = `c-${n % customers}`;
        attempted.add(id);
        const occurredAt = new Date(Date.now() - 1000).toISOString();
        try {
          const r = await api.post('/v1/events', { id, name: 'match.completed', customer_id: customer, occurred_at: occurredAt, properties: { n } });
          if (r.status === 202) acked.set(id, { id: r.body.id, customer, occurredAt });
        } catch {
          // connection dropped by the kill: not acknowledged
        }
      }
    });
    // Load for a span that differs per round, and on until this round had events acknowledged (a
    // loaded box serves fewer per second; the assertion below needs enough of them).
    const began = Date.now();
    const ackedBefore = acked.size;
    await new Promise((r) => setTimeout(r, 700 + round * 200));
    while (acked.size - ackedBefore < 60 && Date.now() - began < 30_000) await new Promise((r) => setTimeout(r, 20));
    await kill9(server);
    logs.push(server.output());
    stop = true;
    await Promise.all(workers);
  }
  t.ok(acked.size > 200, `acknowledged ${acked.size} of ${attempted.size} attempted events`);

  const server = await spawnServer(env);
  t.teardown(() => kill9(server));
  // Ready once it holds its partitions; they replay in the background until none is recovering.
  let checks: { partitions_owned?: number; partitions_recovering?: number } = {};
  for (const until = Date.now() + 60_000; Date.now() < until; ) {
    const r = await fetch(`http://127.0.0.1:${server.port}/readyz`);
    checks = ((await r.json()) as { checks: typeof checks }).checks;
    if (r.status === 200 && checks.partitions_recovering === 0) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  t.same(
    { owned: checks.partitions_owned, recovering: checks.partitions_recovering },
    { owned: 8, recovering: 0 },
    'readyz: every partition replayed and served',
  );
  const metrics = await (await fetch(`http://127.0.0.1:${server.port}/metrics`)).text();
  t.match(metrics, /^partitions_owned 8$/m, 'the partitions_owned gauge says the same');
  t.match(metrics, /^partitions_recovering 0$/m, 'and partitions_recovering');
  const api = new Client(`http://127.0.0.1:${server.port}`, { authorization: `Bearer ${secret}` });
  // Exactly once: every acknowledged event is a duplicate of itself with the same service id.
  let mismatched = 0;
  for (const [clientId, { id, customer, occurredAt }] of acked) {
    const n = Number(clientId.slice(3));
    // The same content: only the customer's actor answers a duplicate with the first service id.
    const r = await api.post('/v1/events', { id: clientId, name: 'match.completed', customer_id: customer, occurred_at: occurredAt, properties: { n } });
    if (r.status !== 202 || r.body.duplicate !== true || r.body.id !== id) {
      mismatched++;
      if (mismatched <= 3) t.comment(`${clientId}: ${r.status} ${JSON.stringify(r.body)}`);
    }
  }
  t.equal(mismatched, 0, 'every acknowledged event is answered as a duplicate of itself, with its first service id, after the crashes');
  // Nothing twice: each customer's export lists each event id at most once, and all acked ones.
  let missing = 0;
  let doubled = 0;
  for (let c = 0; c < customers; c++) {
    const found = await api.get(`/v1/customers?external_id=c-${c}`);
    if (found.body.data.length === 0) continue;
    const cid = found.body.data[0].id;
    const ex = await api.get(`/v1/customers/${cid}/export`);
    const ids = ex.body.events.map((e: { id: string }) => e.id);
    if (new Set(ids).size !== ids.length) doubled++;
    const inExport = new Set(ids);
    for (const [k, v] of acked) {
      if (v.customer === `c-${c}` && !inExport.has(v.id)) {
        missing++;
        if (missing <= 3) t.comment(`missing ${k} ${v.id} customer ${cid}: ${JSON.stringify((await api.get(`/v1/events/${v.id}`)).body)}`);
      }
    }
  }
  t.equal(doubled, 0, 'no event recorded twice');
  t.equal(missing, 0, 'every acknowledged event is in its customer export with its original service id');
  if (missing > 0) for (const l of logs) t.comment(l.slice(0, 1500));
});
