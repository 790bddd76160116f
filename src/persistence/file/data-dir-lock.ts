// Embedded mode's exclusive hold on its data directory: two processes on one DATA_DIR would both
// append to the journal and open the same PGlite files. proper-lockfile keeps a lock directory
// (DATA_DIR/lock, made by an atomic mkdir) whose mtime its holder refreshes every refreshMs (1 s);
// one not refreshed for staleMs (5 s) belongs to a process that died (kill -9, power loss), and
// the next start takes it over. DATA_DIR/lock.owner names the holder (pid, host) for the error a
// second process gives. The lock is kept by a worker thread (data-dir-lock.worker.ts), so a
// stalled event loop never lets it look stale while the process lives; if it is lost all the same
// (another process took it over after a whole-process freeze longer than staleMs, or someone
// removed it), that thread prints a fatal line and kills the process at once: it must not write on.
// Production mode needs none of this: its leases with fencing already order several nodes.
import { existsSync, writeSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { limits } from '../../limits.js';

export interface LockHolder {
  pid: number;
  host: string;
  /** When it took the lock (ISO time). */
  since: string;
}

export interface DataDirLockOptions {
  staleMs?: number;
  refreshMs?: number;
  /** How often a waiting start looks at the lock again. */
  pollMs?: number;
  /**
   * Once held, a lost lock kills the process (the default, after a fatal line on stdout); tests
   * pass a callback instead.
   */
  onLost?: 'kill' | ((err: Error) => void);
  /** The lock was held when this start looked: it watches whether its holder refreshes it. */
  onWait?: (holder: LockHolder | null, ageMs: number) => void;
}

/** The lock of a process that died, taken over. */
export interface TakeOver {
  holder: LockHolder | null;
  /** How old its last refresh was when taken over (at least staleMs). */
  ageMs: number;
  /** How long this start waited for it. */
  waitedMs: number;
}

/** A second process on a data directory another one holds. */
export class DataDirInUseError extends Error {
  override readonly name = 'DataDirInUseError';
  constructor(
    readonly dir: string,
    readonly holder: LockHolder | null,
    refreshed: boolean,
    ageMs: number,
  ) {
    const who = holder === null ? 'another process (its pid is unknown: lock.owner is missing)' : `process ${holder.pid} on ${holder.host}`;
    const how = refreshed
      ? 'which keeps its lock fresh'
      : `whose lock is no longer refreshed yet does not go stale (its time is ${Math.round(-ageMs / 1000)} s ahead of this clock: a clock set back, or another host's); if no process holds it, remove ${lockPaths(dir).lock}`;
    super(`data directory ${dir} is in use by ${who}, ${how}: stop it first, or start this one with another DATA_DIR`);
  }
}

/** @internal What the lock thread is started with. */
export interface LockThreadInit {
  dir: string;
  staleMs: number;
  refreshMs: number;
  pollMs: number;
  killOnLoss: boolean;
}

/** @internal Messages from the lock thread. */
export type FromLockThread =
  | { kind: 'waiting'; holder: LockHolder | null; ageMs: number }
  | { kind: 'acquired'; tookOver: TakeOver | null }
  | { kind: 'held'; holder: LockHolder | null; ageMs: number; refreshed: boolean }
  | { kind: 'lost'; message: string }
  | { kind: 'released' }
  | { kind: 'failed'; message: string };

export function lockPaths(dir: string): { lock: string; owner: string } {
  return { lock: join(dir, 'lock'), owner: join(dir, 'lock.owner') };
}

/** @internal A pino-shaped fatal line, written synchronously (from any thread) before a kill. */
export function fatalLine(msg: string): void {
  writeSync(1, `${JSON.stringify({ level: 60, time: new Date().toISOString(), pid: process.pid, msg })}\n`);
}

function threadFile(): URL {
  // .js in dist; .ts under the test loader, whose flags worker threads inherit (as in workers/pool.ts).
  const js = new URL('./data-dir-lock.worker.js', import.meta.url);
  return existsSync(fileURLToPath(js)) ? js : new URL('./data-dir-lock.worker.ts', import.meta.url);
}

export class DataDirLock {
  private released: Promise<void> | null = null;
  /** The thread ended (it was lost or failed): there is nothing left to release. */
  private threadGone = false;

  private constructor(
    readonly dir: string,
    private readonly worker: Worker,
    /** Set when this start took over the lock of a process that died. */
    readonly tookOver: TakeOver | null,
  ) {}

  /**
   * Takes the lock on `dir` (which must exist) before anything there is opened. A lock its holder
   * keeps fresh is refused within about refreshMs (DataDirInUseError); a dead holder's is taken
   * over once staleMs old, so this waits at most about staleMs.
   */
  static acquire(dir: string, opts: DataDirLockOptions = {}): Promise<DataDirLock> {
    const init: LockThreadInit = {
      dir: resolve(dir),
      staleMs: opts.staleMs ?? limits.dataDirLockStaleMs,
      refreshMs: opts.refreshMs ?? limits.dataDirLockRefreshMs,
      pollMs: opts.pollMs ?? 200,
      killOnLoss: opts.onLost === undefined || opts.onLost === 'kill',
    };
    const onLost = (err: Error) => {
      if (typeof opts.onLost === 'function') return opts.onLost(err);
      fatalLine(err.message);
      process.kill(process.pid, 'SIGKILL');
    };
    const worker = new Worker(threadFile(), { workerData: init });
    // The process's lifetime is the lock's: the thread never keeps it running.
    worker.unref();
    return new Promise((resolvePromise, reject) => {
      let lock: DataDirLock | null = null;
      worker.on('message', (m: FromLockThread) => {
        switch (m.kind) {
          case 'waiting':
            opts.onWait?.(m.holder, m.ageMs);
            return;
          case 'acquired':
            lock = new DataDirLock(init.dir, worker, m.tookOver);
            resolvePromise(lock);
            return;
          case 'held':
            void worker.terminate();
            reject(new DataDirInUseError(init.dir, m.holder, m.refreshed, m.ageMs));
            return;
          case 'failed':
            if (lock === null) {
              void worker.terminate();
              reject(new Error(m.message));
            }
            return;
          case 'lost':
            if (lock !== null && lock.released === null) onLost(new Error(m.message));
            return;
        }
      });
      const gone = (why: string) => {
        if (lock !== null) lock.threadGone = true;
        if (lock === null) reject(new Error(`locking data directory ${init.dir}: ${why}`));
        // Nothing refreshes the lock any more: another start would take it over.
        else if (lock.released === null) onLost(new Error(`the thread keeping the lock on data directory ${init.dir} ${why}; stopping at once`));
      };
      worker.on('error', (err) => gone(`failed: ${err.message}`));
      worker.on('exit', (code) => gone(`exited (code ${code})`));
    });
  }

  /** Removes the lock (after the journal and PGlite are closed); later calls wait for the same. */
  release(): Promise<void> {
    this.released ??= new Promise<void>((resolvePromise, reject) => {
      if (this.threadGone) return resolvePromise();
      this.worker.removeAllListeners('message');
      this.worker.once('exit', () => reject(new Error(`the thread keeping the lock on data directory ${this.dir} exited before releasing it`)));
      this.worker.on('message', (m: FromLockThread) => {
        if (m.kind === 'released') resolvePromise();
        else if (m.kind === 'failed') reject(new Error(m.message));
      });
      this.worker.postMessage({ kind: 'release' });
    }).finally(() => this.worker.terminate());
    return this.released;
  }
}
