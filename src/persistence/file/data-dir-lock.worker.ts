// The thread that takes and keeps embedded mode's lock on DATA_DIR (see data-dir-lock.ts). It
// runs proper-lockfile's synchronous API: the lock directory's mtime is refreshed by this thread's
// own timer with synchronous file calls, so neither the main thread's stalls (PGlite runs its
// queries there) nor a busy libuv thread pool (journal fsyncs) delay a refresh.
import { readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { parentPort, workerData } from 'node:worker_threads';
import lockfile from 'proper-lockfile';
import { type FromLockThread, fatalLine, type LockHolder, type LockThreadInit, lockPaths } from './data-dir-lock.js';

const init = workerData as LockThreadInit;
const { lock: lockPath, owner: ownerPath } = lockPaths(init.dir);
const port = parentPort!;
const post = (m: FromLockThread) => port.postMessage(m);
let release: (() => void) | null = null;
/** A still lock whose last refresh is further ahead of this clock than this is refused, not waited for. */
const aheadWaitMaxMs = 10_000;

function readHolder(): LockHolder | null {
  try {
    const h = JSON.parse(readFileSync(ownerPath, 'utf8')) as LockHolder;
    return typeof h.pid === 'number' ? h : null;
  } catch {
    return null;
  }
}

/** Another process holds the lock now: it may be writing the journal and PGlite already. */
function lost(err: Error): void {
  release = null;
  const message = `lost the lock on data directory ${init.dir} (${err.message}): another process may be using it; stopping at once`;
  if (init.killOnLoss) {
    // From this thread, synchronously: the main thread may be busy, and must not write on.
    fatalLine(message);
    process.kill(process.pid, 'SIGKILL');
  }
  post({ kind: 'lost', message });
}

/**
 * Takes the lock, or answers who holds it. A lock whose mtime moves while we watch has a live
 * holder: refused at once. One that stays still is its dead holder's: proper-lockfile takes it
 * over once it is staleMs old. One that stays still but does not age (its time is ahead of this
 * clock: a clock set back, another host's clock) is refused after staleMs plus three refreshes,
 * plus how far ahead it was (at most aheadWaitMaxMs).
 */
async function acquire(): Promise<FromLockThread> {
  const started = Date.now();
  let firstMtimeMs: number | null = null;
  let firstLookAt = 0;
  /** How long to watch a still lock before calling it one that does not age. */
  let patienceMs = 0;
  for (;;) {
    const before = statSync(lockPath, { throwIfNoEntry: false });
    const holder = before === undefined ? null : readHolder();
    try {
      release = lockfile.lockSync(init.dir, {
        lockfilePath: lockPath,
        realpath: false,
        stale: init.staleMs,
        update: init.refreshMs,
        onCompromised: lost,
      });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ELOCKED') throw err;
      const now = statSync(lockPath, { throwIfNoEntry: false });
      if (now === undefined) continue; // released meanwhile: try again
      const ageMs = Date.now() - now.mtimeMs;
      if (firstMtimeMs === null) {
        firstMtimeMs = now.mtimeMs;
        firstLookAt = Date.now();
        // A last refresh a little ahead of this clock (hosts' clocks a few seconds apart) goes
        // stale that much later: wait for it too, up to aheadWaitMaxMs.
        patienceMs = init.staleMs + 3 * init.refreshMs + Math.min(Math.max(0, now.mtimeMs - firstLookAt), aheadWaitMaxMs);
        post({ kind: 'waiting', holder, ageMs });
      } else if (now.mtimeMs !== firstMtimeMs) {
        return { kind: 'held', holder, ageMs, refreshed: true };
      }
      // A still lock goes stale within staleMs of its last refresh (one more second where mtimes
      // are whole seconds: proper-lockfile rounds them up).
      if (Date.now() - firstLookAt > patienceMs) return { kind: 'held', holder, ageMs, refreshed: false };
      await sleep(init.pollMs);
      continue;
    }
    const self: LockHolder = { pid: process.pid, host: hostname(), since: new Date().toISOString() };
    const tmp = `${ownerPath}.${process.pid}.tmp`;
    try {
      writeFileSync(tmp, `${JSON.stringify(self)}\n`);
      renameSync(tmp, ownerPath);
    } catch (err) {
      // A start that cannot say who holds the lock does not keep it (a full disk, say).
      const r = release;
      release = null;
      r();
      throw err;
    }
    return { kind: 'acquired', tookOver: before === undefined ? null : { holder, ageMs: Date.now() - before.mtimeMs, waitedMs: Date.now() - started } };
  }
}

port.on('message', (m: { kind: 'release' }) => {
  if (m.kind !== 'release') return;
  try {
    if (release !== null) {
      rmSync(ownerPath, { force: true });
      const r = release;
      release = null;
      r();
    }
    post({ kind: 'released' });
  } catch (err) {
    post({ kind: 'failed', message: `releasing the lock on ${init.dir}: ${(err as Error).message}` });
  }
});

acquire().then(post, (err: unknown) => post({ kind: 'failed', message: `locking data directory ${init.dir}: ${(err as Error).message}` }));
