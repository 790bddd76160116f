// Starting and stopping leave nothing behind: the real service against the real Redis and
// PostgreSQL. A start whose last step (the public gRPC port) fails undoes what it had started: its
// ports are free, it holds no partition lease and no membership, and another node takes every
// partition at once. A stopped service leaves no timer or socket that would keep its process alive.
import { createServer, type Server } from 'node:net';
import { pino } from 'pino';
import t from 'tap';
import { startService } from '../../src/service.js';
import { configFor, freePort, storageFor } from '../helpers/service.js';

function listen(port: number): Promise<Server> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve(server));
  });
}

function close(server: Server): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()));
}

/** TCP connections and listening TCP servers of this process (the test runs nothing else). */
function sockets(): { tcp: number; servers: number } {
  const kinds = process.getActiveResourcesInfo();
  return { tcp: kinds.filter((k) => k === 'TCPSocketWrap').length, servers: kinds.filter((k) => k === 'TCPServerWrap').length };
}

/** Polls `read` until it equals `want` or the deadline passes; the last reading. */
async function settled<T>(read: () => T, want: T, withinMs: number): Promise<T> {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const value = read();
    if (JSON.stringify(value) === JSON.stringify(want) || Date.now() > deadline) return value;
    await new Promise((r) => setTimeout(r, 20));
  }
}

t.test('a start that fails at its last port stops every part it had started', async (t) => {
  const storage = storageFor(t);
  // The public gRPC port is taken: everything else starts first, then this bind fails.
  const blocker = await listen(0);
  t.teardown(() => close(blocker));
  const takenPort = (blocker.address() as { port: number }).port;
  const [httpPort, grpcPort] = [await freePort(), await freePort()];

  const failing = await configFor(storage, {
    NODE_ID: 'node-failing',
    PORT: String(httpPort),
    GRPC_PORT: String(grpcPort),
    PUBLIC_GRPC_PORT: String(takenPort),
  });
  await t.rejects(startService(failing, pino({ level: 'silent' })), 'the start fails on the taken port');

  // Its HTTP and forwarding ports are closed again: they can be bound here.
  for (const port of [httpPort, grpcPort]) {
    const probe = await listen(port).catch((err: Error) => err);
    t.notOk(probe instanceof Error, `port ${port} was released (${probe instanceof Error ? probe.message : 'bound'})`);
    if (!(probe instanceof Error)) await close(probe);
  }
  // No connection to Redis or PostgreSQL and no listening socket is left open.
  // No connection to Redis or PostgreSQL is left, and no listening socket but the blocker (the
  // sockets of a quit connection close a moment after it answered).
  t.same(await settled(sockets, { tcp: 0, servers: 1 }, 10_000), { tcp: 0, servers: 1 }, 'every socket the failed start opened is closed');

  // Its leases and its membership are gone: a second node owns all 16 partitions as soon as it
  // has started, instead of half of them now and the rest after the leases expire.
  const started = await startService(await configFor(storage, { NODE_ID: 'node-second' }), pino({ level: 'silent' }));
  t.teardown(() => started.stop());
  t.equal(started.placement.ownedCount + started.placement.recoveringCount, 16, 'the second node holds every partition');
});

t.test('a stopped service leaves no timer behind (its process can exit at once)', async (t) => {
  const storage = storageFor(t);
  const timers = () => process.getActiveResourcesInfo().filter((k) => k === 'Timeout').length;
  const before = timers();
  const service = await startService(await configFor(storage), pino({ level: 'silent' }));
  await service.stop();
  // A timer still running after stop() keeps the process alive: the placement's wait for the last
  // snapshot save used to leave one of 3 s behind.
  t.equal(await settled(timers, before, 10_000), before, 'no timer outlives stop()');
  t.same(await settled(sockets, { tcp: 0, servers: 0 }, 10_000), { tcp: 0, servers: 0 }, 'no socket outlives stop()');
});
