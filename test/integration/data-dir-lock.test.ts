// Embedded mode's lock on DATA_DIR, with real server processes (what `npm start` runs): a second
// start on a data directory in use is refused before it opens anything there, naming the
// directory and the holder's pid, and the holder serves on with its data; after kill -9 of the
// holder the next start takes the lock over within the stale time (5 s) and finds every
// acknowledged event; a lock taken away from a running server (as after a freeze longer than the
// stale time) kills it at once, loudly. (A clean stop gives the lock back: test/api/embedded.test.ts.)
import { mkdirSync, rmdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { limits } from '../../src/limits.js';
import { lockPaths } from '../../src/persistence/file/data-dir-lock.js';
import { kill9, type ServerProcess, serverSpawner } from '../helpers/process.js';
import { Client, signUp } from '../helpers/service.js';

const exited = (s: ServerProcess) =>
  new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    if (s.child.exitCode !== null || s.child.signalCode !== null) resolve({ code: s.child.exitCode, signal: s.child.signalCode });
    else s.child.once('exit', (code, signal) => resolve({ code, signal }));
  });

t.test('one process per data directory: a second is refused, a killed one is taken over, a lost lock kills', async (t) => {
  const dataDir = await mkdtemp(join(tmpdir(), 'data-dir-lock-'));
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  const env = { DATA_DIR: dataDir, PARTITIONS: '8' };
  const { spawn: start } = serverSpawner(t, env);

  // Given a server on the data directory, with acknowledged events
  const a = await start();
  const tenant = await signUp(new Client(`http://127.0.0.1:${a.port}`));
  const auth = { authorization: `Bearer ${tenant.secretKey}` };
  type Sent = { body: Record<string, unknown>; id: string };
  const acked: Sent[] = [];
  const send = async (api: Client, n: number) => {
    const body = { id: `lock-${n}`, name: 'app.opened', customer_id: `c-${n % 3}`, occurred_at: new Date(Date.now() - 1000).toISOString(), properties: { n } };
    const r = await api.post('/v1/events', body);
    t.equal(r.status, 202, JSON.stringify(r.body));
    acked.push({ body, id: r.body.id as string });
  };
  /** How many acknowledged events the server has, once each: each is a duplicate of itself. */
  const present = async (api: Client) => {
    let found = 0;
    for (const { body, id } of acked) {
      const r = await api.post('/v1/events', body);
      if (r.status === 202 && r.body.duplicate === true && r.body.id === id) found++;
    }
    return found;
  };
  const apiA = new Client(`http://127.0.0.1:${a.port}`, auth);
  for (let n = 0; n < 10; n++) await send(apiA, n);

  // When a second server starts on it (the other ports are 0: nothing else is shared)
  const began = Date.now();
  const second = await start().then(
    () => null,
    (err: unknown) => err as Error,
  );
  t.comment(`the second server was refused ${Date.now() - began} ms after it was spawned (its process start included)`);

  // Then it is refused, naming the directory and the holder's pid, and exits non-zero
  t.ok(second !== null, 'the second server did not start');
  t.match(second?.message, /server exited 1/, 'it exited 1');
  t.match(second?.message, `data directory ${dataDir} is in use by process ${a.child.pid} on `, 'naming the directory and the holder pid');
  // And the first serves on, with its data
  for (let n = 10; n < 15; n++) await send(apiA, n);
  t.equal(await present(apiA), acked.length, 'the first server has all its events');

  // When the holder is killed -9 and a server starts at once on the same directory
  await kill9(a);
  const killedAt = Date.now();
  const c = await start();
  t.comment(`the next server was ready ${Date.now() - killedAt} ms after the kill (its process start included)`);

  // Then it took the lock over within the stale time, and has every acknowledged event
  const tookOver = /"refreshedMsAgo":(\d+),"waitedMs":(\d+)[^\n]*took over the data directory lock/.exec(c.output());
  t.ok(tookOver, `it logged that it took over the lock of a process that died:\n${c.output()}`);
  const [ageMs, waitedMs] = [Number(tookOver?.[1]), Number(tookOver?.[2])];
  t.ok(ageMs >= limits.dataDirLockStaleMs, `the lock's last refresh was ${ageMs} ms old`);
  t.ok(waitedMs <= limits.dataDirLockStaleMs + 3000, `the start waited ${waitedMs} ms for it (stale after ${limits.dataDirLockStaleMs} ms)`);
  const apiC = new Client(`http://127.0.0.1:${c.port}`, auth);
  t.equal(await present(apiC), acked.length, `all ${acked.length} acknowledged events are there, once`);

  // When its lock is taken away while it runs (as another process would, after this one froze
  // for longer than the stale time)
  const { lock } = lockPaths(dataDir);
  rmdirSync(lock);
  mkdirSync(lock);

  // Then it stops at once and loudly, writing nothing more
  t.same(await exited(c), { code: null, signal: 'SIGKILL' }, 'it killed itself');
  t.match(c.output(), `lost the lock on data directory ${dataDir}`, 'after a fatal line');
});
