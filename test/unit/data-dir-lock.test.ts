// Embedded mode's lock on DATA_DIR (src/persistence/file/data-dir-lock.ts), in one process: each
// DataDirLock keeps its lock from a thread of its own, with its own copy of proper-lockfile, so two
// of them here contend as two processes would (test/integration/data-dir-lock.test.ts runs real
// ones). Short stale times (the library's least, 2 s) keep this file fast.
import { mkdirSync, rmdirSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { DataDirInUseError, DataDirLock, lockPaths } from '../../src/persistence/file/data-dir-lock.js';

const fast = { staleMs: 2000, refreshMs: 1000, pollMs: 50 };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function dataDir(t: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'data-dir-lock-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** Takes the lock with a test's onLost (never the default, which kills this process). */
async function take(t: Test, dir: string, lost: Error[] = []): Promise<DataDirLock> {
  const lock = await DataDirLock.acquire(dir, { ...fast, onLost: (err) => lost.push(err) });
  t.teardown(() => lock.release().catch(() => {}));
  return lock;
}

t.test('a second lock on a held directory is refused promptly; a release frees it; a lock taken away is reported', async (t) => {
  const dir = await dataDir(t);
  const first = await take(t, dir);
  t.equal(first.tookOver, null, 'a fresh directory: nothing taken over');
  // Timed from its first look at the lock (a thread starts slowly under the test's TypeScript loader).
  let firstLook = 0;
  const err = await DataDirLock.acquire(dir, { ...fast, onLost: () => {}, onWait: () => (firstLook = Date.now()) }).then(
    () => null,
    (e: unknown) => e,
  );
  const tookMs = Date.now() - firstLook;
  t.ok(err instanceof DataDirInUseError, `refused: ${String(err)}`);
  t.match((err as Error).message, `data directory ${dir} is in use by process ${process.pid} on `, 'naming the directory and the holder pid');
  t.ok(firstLook > 0 && tookMs < fast.staleMs, `refused ${tookMs} ms after its first look, before the lock could have gone stale`);

  // A clean release frees it at once.
  await first.release();
  t.notOk(statSync(lockPaths(dir).lock, { throwIfNoEntry: false }), 'the lock directory is gone');
  const lost: Error[] = [];
  const second = await take(t, dir, lost);
  t.equal(second.tookOver, null, 'the next lock finds the directory free: nothing to wait for or take over');

  // When another process takes it (as proper-lockfile does: remove the stale one, make its own),
  // the holder learns it at its next refresh.
  rmdirSync(lockPaths(dir).lock);
  mkdirSync(lockPaths(dir).lock);
  const until = Date.now() + 3000;
  while (lost.length === 0 && Date.now() < until) await sleep(50);
  t.match(
    lost.map((e) => e.message),
    [`lost the lock on data directory ${dir}`],
    'the holder reports the lock lost',
  );
});

t.test("a dead holder's lock is taken over once stale, and named", async (t) => {
  const dir = await dataDir(t);
  // What a holder killed -9 leaves: the lock directory, its owner file, no more refreshes. Its
  // last refresh is set 4 s ahead (as proper-lockfile rounds up to whole seconds, more so), so the
  // lock is still fresh when the new thread first looks, however slowly it starts here.
  const { lock, owner } = lockPaths(dir);
  mkdirSync(lock);
  writeFileSync(owner, JSON.stringify({ pid: 999_999, host: 'gone', since: new Date().toISOString() }));
  const lastRefresh = new Date(Date.now() + 4000);
  utimesSync(lock, lastRefresh, lastRefresh);
  const waits: number[] = [];
  const taken = await DataDirLock.acquire(dir, { ...fast, onLost: () => {}, onWait: (holder) => waits.push(holder?.pid ?? -1) });
  t.teardown(() => taken.release());
  const takenAt = Date.now();
  t.same(waits, [999_999], 'it said whose lock it was waiting on');
  t.equal(taken.tookOver?.holder?.pid, 999_999, 'and whose it took over');
  const sinceRefresh = takenAt - lastRefresh.getTime();
  t.ok(sinceRefresh >= fast.staleMs && sinceRefresh < fast.staleMs + 3000, `taken over ${sinceRefresh} ms after the last refresh (stale after ${fast.staleMs})`);

  // One that is already old (a power loss, a start long after the crash) is taken at once.
  await taken.release();
  mkdirSync(lock);
  const old = new Date(Date.now() - 60_000);
  utimesSync(lock, old, old);
  const next = await take(t, dir);
  t.ok(next.tookOver !== null && next.tookOver.waitedMs < 2000, `an old lock taken over at once (${next.tookOver?.waitedMs} ms)`);
});

t.test('a stalled event loop does not let the lock go stale: its thread keeps refreshing it', async (t) => {
  const dir = await dataDir(t);
  const lost: Error[] = [];
  await take(t, dir, lost);
  let looking: () => void = () => {};
  const looked = new Promise<void>((r) => (looking = r));
  const contender = DataDirLock.acquire(dir, { ...fast, onLost: () => {}, onWait: () => looking() }).then(
    (l) => l.release().then(() => 'taken'),
    (e: unknown) => (e instanceof DataDirInUseError ? 'refused' : String(e)),
  );
  await looked;
  // The main thread blocked well past the stale time (PGlite runs its queries on it), while the
  // contender watches the lock.
  const { lock } = lockPaths(dir);
  const before = statSync(lock).mtimeMs;
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, fast.staleMs + 1200);
  const refreshed = statSync(lock).mtimeMs - before;
  t.ok(refreshed >= fast.staleMs - fast.refreshMs, `the lock was refreshed during the stall (its mtime moved ${refreshed} ms)`);
  t.equal(await contender, 'refused', 'the contender saw it refreshed and gave up');
  t.same(lost, [], 'the holder still holds it');
});
