import t from 'tap';
import { canonicalJson, hash53 } from '../../src/util/canonical-json.js';
import { WorkerPool } from '../../src/workers/pool.js';

t.test('the pool runs tasks on worker threads and reports health', async (t) => {
  const pool = new WorkerPool(2);
  t.teardown(() => pool.close());
  t.equal(await pool.healthy(5000), true);
  const r = await pool.run({ kind: 'ping', nonce: 42 });
  t.match(r, { kind: 'pong', nonce: 42 });
  t.not((r as { threadId: number }).threadId, 0, 'answered off the main thread');
  const docs = [{ b: 1, a: 2 }, { a: 2, b: 1 }, [1, 2]];
  const f = await pool.run({ kind: 'fingerprint', documents: docs });
  t.same(f, { kind: 'fingerprints', values: docs.map((d) => hash53(canonicalJson(d))) });
  t.equal((f as { values: number[] }).values[0], (f as { values: number[] }).values[1], 'key order does not matter');
});

t.test('a destroyed pool is unhealthy', async (t) => {
  const pool = new WorkerPool(1);
  await pool.close();
  t.equal(await pool.healthy(500), false);
});
