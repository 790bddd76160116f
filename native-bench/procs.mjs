// Child processes of a bench run (servers, redis-server, loadgen): spawn pinned to a core, keep
// the tail of their output for error messages, and kill every one of them by PID on any exit
// (normal end, error, Ctrl-C). Never kills a process it did not start; never leaves tmp dirs.
import { createWriteStream } from 'node:fs';
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import net from 'node:net';

/** @type {Set<Child>} */
const live = new Set();
/** @type {Set<string>} */
const tmpDirs = new Set();
let pinning = true;
/** @type {Set<() => Promise<void>>} */
const asyncCleanups = new Set();

export function setPinning(on) {
  pinning = on;
}

/** @param {string} dir */
export function removeOnExit(dir) {
  tmpDirs.add(dir);
}

class Child {
  /**
   * @param {string} name
   * @param {import('node:child_process').ChildProcess} proc
   */
  constructor(name, proc) {
    this.name = name;
    this.proc = proc;
    this.pid = proc.pid;
    /** @type {string[]} */
    this.tail = [];
    this.stdout = '';
    this.exited = false;
    this.exitCode = /** @type {number | null} */ (null);
    this.signal = /** @type {string | null} */ (null);
    this.exitPromise = new Promise((resolve) => {
      proc.on('exit', (code, signal) => {
        this.exited = true;
        this.exitCode = code;
        this.signal = signal;
        live.delete(this);
        resolve(undefined);
      });
    });
  }

  /** @param {string} chunk */
  keep(chunk) {
    for (const line of chunk.split('\n')) {
      if (line.trim() === '') continue;
      this.tail.push(line);
      if (this.tail.length > 40) this.tail.shift();
    }
  }

  describeExit() {
    const how = this.signal ? `signal ${this.signal}` : `code ${this.exitCode}`;
    const tail = this.tail.length ? `\n  last output:\n    ${this.tail.join('\n    ')}` : '';
    return `${this.name} (pid ${this.pid}) exited with ${how}${tail}`;
  }

  /** Kill by PID and wait for the exit. */
  async kill(signal = 'SIGKILL', waitMs = 5000) {
    if (this.exited) return;
    try {
      process.kill(this.pid, signal);
    } catch {
      return;
    }
    let timer;
    const timeout = new Promise((resolve) => {
      timer = setTimeout(resolve, waitMs);
    });
    await Promise.race([this.exitPromise, timeout]);
    clearTimeout(timer);
    if (!this.exited && signal !== 'SIGKILL') await this.kill('SIGKILL', waitMs);
  }

  /** SIGTERM, then SIGKILL after a grace period. */
  stop(graceMs = 3000) {
    return this.kill('SIGTERM', graceMs);
  }
}

/**
 * Spawns `cmd args` pinned to `cpu` (via taskset, which execs, so the PID is the program's own).
 * @param {string} name
 * @param {string} cmd
 * @param {string[]} args
 * @param {{cpu?: number | null, env?: NodeJS.ProcessEnv, cwd?: string, captureStdout?: boolean}} opts
 */
export function startChild(name, cmd, args, opts = {}) {
  const pinned = pinning && opts.cpu !== undefined && opts.cpu !== null;
  const file = pinned ? 'taskset' : cmd;
  const argv = pinned ? ['-c', String(opts.cpu), cmd, ...args] : args;
  const proc = spawn(file, argv, {
    env: opts.env ?? process.env,
    cwd: opts.cwd,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const child = new Child(name, proc);
  live.add(child);
  proc.stdout?.setEncoding('utf8');
  proc.stderr?.setEncoding('utf8');
  const copy = opts.logFile ? createWriteStream(opts.logFile, { flags: 'a' }) : null;
  proc.stdout?.on('data', (d) => {
    copy?.write(d);
    if (opts.captureStdout) child.stdout += d;
    else child.keep(d);
  });
  proc.stderr?.on('data', (d) => {
    copy?.write(d);
    child.keep(d);
  });
  proc.on('error', (err) => {
    child.keep(`spawn failed: ${err.message}`);
  });
  return child;
}

/** Synchronous last resort: SIGKILL every live child by PID and remove tmp dirs. */
export function killAllSync() {
  for (const c of live) {
    try {
      process.kill(c.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  live.clear();
  for (const d of tmpDirs) {
    try {
      rmSync(d, { recursive: true, force: true });
    } catch {
      // best effort
    }
  }
  tmpDirs.clear();
}

/**
 * Registers an async clean-up (e.g. dropping a bench schema) that a signal also runs, after the
 * children are dead, bounded to 3 s. Returns a function that unregisters it.
 * @param {() => Promise<void>} fn
 */
export function addAsyncCleanup(fn) {
  asyncCleanups.add(fn);
  return () => asyncCleanups.delete(fn);
}

/** Installs exit, signal and crash handlers that run killAllSync. */
export function installCleanup() {
  process.on('exit', killAllSync);
  let signalled = false;
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    process.on(sig, () => {
      if (signalled) process.exit(130);
      signalled = true;
      console.error(`\nbench: ${sig}, stopping children`);
      killAllSync();
      const hooks = Promise.allSettled([...asyncCleanups].map((fn) => fn()));
      Promise.race([hooks, sleep(3000)]).finally(() => process.exit(130));
    });
  }
  process.on('uncaughtException', (err) => {
    console.error('bench: uncaught exception:', err);
    killAllSync();
    process.exit(1);
  });
  process.on('unhandledRejection', (err) => {
    console.error('bench: unhandled rejection:', err);
    killAllSync();
    process.exit(1);
  });
}

/** A TCP port that was free a moment ago on 127.0.0.1. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Resolves true when host:port accepts a TCP connection within timeoutMs.
 * @param {string} host
 * @param {number} port
 */
export function tcpReachable(host, port, timeoutMs = 1000) {
  return new Promise((resolve) => {
    const sock = net.connect({ host, port });
    const done = (ok) => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(timeoutMs, () => done(false));
    sock.on('connect', () => done(true));
    sock.on('error', () => done(false));
  });
}

/**
 * Sends PING to a Redis server; resolves true on +PONG.
 * @param {number} port
 */
export function redisPing(port) {
  return new Promise((resolve) => {
    const sock = net.connect({ host: '127.0.0.1', port });
    let buf = '';
    const done = (ok) => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(500, () => done(false));
    sock.on('connect', () => sock.write('PING\r\n'));
    sock.on('data', (d) => {
      buf += d.toString();
      if (buf.includes('\r\n')) done(buf.startsWith('+PONG'));
    });
    sock.on('error', () => done(false));
  });
}

/** @param {number} ms */
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
