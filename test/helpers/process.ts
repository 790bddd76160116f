// Child-process helpers for crash and cluster tests: run src/main.ts as a real server process
// (with the TypeScript loader tap gives this process), kill -9 it, and run a private AOF Redis.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { Client, freePort, signUp } from './service.js';

const loaderArgs = process.execArgv.filter((a) => a.includes('@tapjs/typescript') || a === '--enable-source-maps');

export interface ServerProcess {
  child: ChildProcess;
  port: number;
  output: () => string;
}

/**
 * Starts the server. Its gRPC ports are 0 unless `env` fixes them (the kernel picks; the node
 * advertises what it bound). The HTTP port, unless fixed, is picked free here, and another process
 * (a parallel test's outgoing connection takes a port from the same ephemeral range) can bind it
 * before the server does: such a start is retried on a fresh port.
 */
export async function spawnServer(env: Record<string, string>): Promise<ServerProcess> {
  const fixedPorts = env.PORT !== undefined || env.GRPC_PORT !== undefined || env.PUBLIC_GRPC_PORT !== undefined;
  for (let attempt = 1; ; attempt++) {
    try {
      return await spawnServerOnce(env);
    } catch (err) {
      const inUse = err instanceof Error && (err.message.includes('EADDRINUSE') || err.message.includes('cannot listen on'));
      if (!inUse || fixedPorts || attempt >= 3) throw err;
    }
  }
}

async function spawnServerOnce(env: Record<string, string>): Promise<ServerProcess> {
  const port = Number(env.PORT ?? (await freePort()));
  const child = spawn(process.execPath, [...loaderArgs, 'src/main.ts'], {
    env: {
      ...process.env,
      NODE_OPTIONS: '',
      HOST: '127.0.0.1',
      PORT: String(port),
      GRPC_PORT: '0',
      PUBLIC_GRPC_PORT: '0',
      LOG_LEVEL: 'warn',
      POOL_THREADS: '1',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout?.on('data', (d) => (out = (out + d).slice(-20_000)));
  child.stderr?.on('data', (d) => (out = (out + d).slice(-20_000)));
  const server = { child, port, output: () => out };
  try {
    await waitReady(server, 60_000);
  } catch (err) {
    // A server that never became ready is still killed: left running, it would keep renewing its
    // membership and claiming partitions under the test's key prefix after the cleanup.
    await kill9(server);
    throw err;
  }
  return server;
}

export async function waitReady(server: ServerProcess, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (server.child.exitCode !== null) throw new Error(`server exited ${server.child.exitCode}:\n${server.output()}`);
    try {
      const r = await fetch(`http://127.0.0.1:${server.port}/readyz`);
      if (r.status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`server not ready in ${timeoutMs} ms:\n${server.output()}`);
}

/** How many partitions a server owns, from its /readyz; -1 when it does not answer. */
export async function partitionsOwned(server: ServerProcess): Promise<number> {
  try {
    const r = await fetch(`http://127.0.0.1:${server.port}/readyz`);
    const body = (await r.json()) as { checks?: { partitions_owned?: number } };
    return Number(body.checks?.partitions_owned ?? 0);
  } catch {
    return -1;
  }
}

/** Polls until both servers own some partitions and together all `partitions`; returns their counts. */
export async function waitSplit(a: ServerProcess, b: ServerProcess, partitions: number, timeoutMs: number): Promise<[number, number]> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const [na, nb] = await Promise.all([partitionsOwned(a), partitionsOwned(b)]);
    if (na > 0 && nb > 0 && na + nb === partitions) return [na, nb];
    if (Date.now() > until) throw new Error(`partitions not split: a=${na} b=${nb}\n${a.output()}\n${b.output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export async function kill9(server: ServerProcess): Promise<void> {
  if (server.child.exitCode !== null || server.child.signalCode !== null) return;
  const exited = new Promise((r) => server.child.once('exit', r));
  server.child.kill('SIGKILL');
  await exited;
}

export interface PrivateRedis {
  url: string;
  stop(): Promise<void>;
}

/** redis-server with AOF (appendfsync always) on a free port, in a temp dir; stopped by PID. */
export async function startAofRedis(): Promise<PrivateRedis> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'aof-redis-'));
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir], {
    stdio: 'ignore',
  });
  const url = `redis://127.0.0.1:${port}`;
  const until = Date.now() + 10_000;
  for (;;) {
    const r = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    try {
      await r.connect();
      await r.ping();
      r.disconnect();
      break;
    } catch {
      r.disconnect();
      if (Date.now() > until) throw new Error('private redis did not start');
      await new Promise((res) => setTimeout(res, 50));
    }
  }
  return {
    url,
    stop: async () => {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Starts server processes for one test and kills every one it started at the test's teardown
 * (kill9 passes over one already killed), also when the test fails between a start and its kill:
 * each is registered as soon as it is up. `spawned` lists them in start order.
 */
export function serverSpawner(t: { teardown(fn: () => unknown): void }, env: Record<string, string>) {
  const spawned: ServerProcess[] = [];
  t.teardown(async () => {
    for (const s of spawned) await kill9(s);
  });
  return {
    spawned,
    spawn: async (extra: Record<string, string> = {}): Promise<ServerProcess> => {
      const s = await spawnServer({ ...env, ...extra });
      spawned.push(s);
      return s;
    },
  };
}

/**
 * Two server processes (node-a and node-b) on one storage (`env`, e.g. from serverEnv), the
 * partitions split between them, and one signed-up tenant: a client holding its secret key on
 * each node. Both processes are killed at teardown, unless a test already killed one (kill9 waits
 * for 'exit', which a process killed by a signal never emits again).
 */
export async function twoNodes(t: { teardown(fn: () => unknown): void }, env: Record<string, string>, partitions: number) {
  // Each server is registered for the teardown as soon as it is up, so one that started is killed
  // even when the other fails to.
  const { spawn } = serverSpawner(t, env);
  const [a, b] = await Promise.all([spawn({ NODE_ID: 'node-a' }), spawn({ NODE_ID: 'node-b' })]);
  await waitSplit(a, b, partitions, 15_000);
  const anonA = new Client(`http://127.0.0.1:${a.port}`);
  const tenant = await signUp(anonA);
  const auth = { authorization: `Bearer ${tenant.secretKey}` };
  return { a, b, tenant, apiA: anonA.with(auth), apiB: new Client(`http://127.0.0.1:${b.port}`, auth) };
}
