// Shard forwarding over real loopback gRPC: batching (one frame per tick), correlation of
// out-of-order replies, handler failures, deadlines, a killed peer (pending calls reject with
// ForwardUnavailable, then reconnect to a restarted peer on the same port), graceful drain, and
// a frozen connection detected by keepalive. No timings are asserted, only causes and outcomes.
import net from 'node:net';
import t from 'tap';
import { ForwardClient, ForwardHandlerFailed, ForwardServer, ForwardUnavailable } from '../../src/grpc/forwarding.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    if (cond()) return;
    await sleep(5);
  }
  throw new Error(`timed out waiting for ${what}`);
}

const reversed = (b: Uint8Array) => Uint8Array.from(b).reverse();

function request(i: number): Uint8Array {
  const b = Buffer.alloc(12);
  b.writeUInt32BE(i, 0);
  b.writeUInt32BE((i * 2654435761) >>> 0, 4);
  b.writeUInt32BE(0xfeedbeef, 8);
  return b;
}

/** A handler whose calls never finish until released: a stuck or slow peer. */
function stuckHandler() {
  const waiting: Array<() => void> = [];
  return {
    handler: (p: Uint8Array) =>
      new Promise<Uint8Array>((resolve) => {
        waiting.push(() => resolve(reversed(p)));
      }),
    get count() {
      return waiting.length;
    },
    releaseAll() {
      for (const w of waiting.splice(0)) w();
    },
  };
}

t.test('10k concurrent calls: one frame out, replies correlated whatever their order', async (t) => {
  const framesSeen: number[] = [];
  const server = new ForwardServer({
    port: 0,
    // Delays scramble the reply order relative to the request order.
    handler: async (p) => {
      const i = Buffer.from(p).readUInt32BE(0);
      await sleep((i * 7919) % 13);
      return reversed(p);
    },
    onFrame: (n) => framesSeen.push(n),
  });
  const port = await server.start();
  const client = new ForwardClient();
  t.teardown(async () => {
    client.close();
    await server.stop(0);
  });
  const address = `127.0.0.1:${port}`;

  const n = 10_000;
  const calls = Array.from({ length: n }, (_, i) => client.forward(address, request(i)));
  const replies = await Promise.all(calls);
  let mismatches = 0;
  replies.forEach((r, i) => {
    if (!Buffer.from(r).equals(Buffer.from(reversed(request(i))))) mismatches++;
  });
  t.equal(mismatches, 0, 'every reply belongs to its own call');
  t.same(framesSeen, [n], 'all calls of one tick travel in a single frame');
  t.equal(server.stats.itemsIn, n);
  t.equal(server.stats.itemsOut, n);
  t.ok(server.stats.framesOut < n / 10, `replies are batched too (${server.stats.framesOut} frames)`);
  t.equal(client.stats.framesOut, 1);
  t.equal(client.stats.itemsIn, n);

  // A later tick is a new frame on the same stream.
  const again = await Promise.all([client.forward(address, request(1)), client.forward(address, request(2))]);
  t.same(Buffer.from(again[1]!), Buffer.from(reversed(request(2))));
  t.same(framesSeen, [n, 2]);
  t.equal(server.activeStreams, 1, 'one long-lived stream per peer');
});

t.test('large payloads in one tick are split into several frames, all delivered', async (t) => {
  const server = new ForwardServer({ port: 0, handler: async (p) => Uint8Array.of(p[0]!, p.length >>> 16) });
  const port = await server.start();
  const client = new ForwardClient();
  t.teardown(async () => {
    client.close();
    await server.stop(0);
  });
  const address = `127.0.0.1:${port}`;
  // 12 MiB in one tick: more than the frame soft bound and than gRPC's default 4 MiB message cap.
  const calls = Array.from({ length: 12 }, (_, i) => client.forward(address, Buffer.alloc(1024 * 1024, i)));
  const replies = await Promise.all(calls);
  t.same(
    replies.map((r) => [r[0], r[1]]),
    Array.from({ length: 12 }, (_, i) => [i, 16]),
  );
  t.ok(server.stats.framesIn >= 3, `split into ${server.stats.framesIn} frames`);
  t.equal(server.stats.itemsIn, 12);
});

t.test('a handler that throws fails its own call only', async (t) => {
  const server = new ForwardServer({
    port: 0,
    handler: async (p) => {
      if (p[0] === 0xff) throw new Error('boom');
      return reversed(p);
    },
  });
  const port = await server.start();
  const client = new ForwardClient();
  t.teardown(async () => {
    client.close();
    await server.stop(0);
  });
  const address = `127.0.0.1:${port}`;
  const [ok1, bad, ok2] = await Promise.allSettled([
    client.forward(address, Uint8Array.of(1, 2)),
    client.forward(address, Uint8Array.of(0xff)),
    client.forward(address, Uint8Array.of(3, 4)),
  ]);
  t.same(ok1, { status: 'fulfilled', value: Buffer.from([2, 1]) });
  t.same(ok2, { status: 'fulfilled', value: Buffer.from([4, 3]) });
  t.equal(bad?.status, 'rejected');
  const reason = (bad as PromiseRejectedResult).reason;
  t.ok(reason instanceof ForwardHandlerFailed, 'handler failure is not "unavailable"');
  t.match(reason.message, /boom/);
  t.same(Buffer.from(await client.forward(address, Uint8Array.of(5, 6))), Buffer.from([6, 5]), 'stream still usable');
});

t.test('a call past its deadline rejects ForwardUnavailable; the stream stays usable', async (t) => {
  const stuck = stuckHandler();
  const server = new ForwardServer({
    port: 0,
    handler: (p) => (p[0] === 0 ? stuck.handler(p) : Promise.resolve(reversed(p))),
  });
  const port = await server.start();
  const client = new ForwardClient();
  t.teardown(async () => {
    client.close();
    await server.stop(0);
  });
  const address = `127.0.0.1:${port}`;
  const err = await client.forward(address, Uint8Array.of(0), 100).catch((e: unknown) => e);
  t.ok(err instanceof ForwardUnavailable);
  t.match((err as Error).message, /deadline exceeded/);
  t.same(Buffer.from(await client.forward(address, Uint8Array.of(7, 8))), Buffer.from([8, 7]));
  t.equal(server.activeStreams, 1, 'the deadline did not tear down the stream');
  stuck.releaseAll(); // the late reply is ignored
  t.same(Buffer.from(await client.forward(address, Uint8Array.of(9, 1))), Buffer.from([1, 9]));
});

t.test('peer killed: pending calls reject ForwardUnavailable, next call reconnects after restart', async (t) => {
  const stuck = stuckHandler();
  const first = new ForwardServer({ port: 0, handler: stuck.handler });
  const port = await first.start();
  const client = new ForwardClient();
  t.teardown(() => client.close());
  const address = `127.0.0.1:${port}`;

  // A long deadline, so a rejection can only come from the broken stream.
  const pending = Array.from({ length: 50 }, (_, i) => client.forward(address, request(i), 600_000));
  await until(() => stuck.count === 50, 'the peer to receive the calls');
  await first.stop(0); // a crash, as the client sees it

  const outcomes = await Promise.allSettled(pending);
  t.equal(outcomes.filter((o) => o.status === 'rejected').length, 50);
  for (const o of outcomes) {
    const reason = o.status === 'rejected' ? o.reason : undefined;
    if (!(reason instanceof ForwardUnavailable) || /deadline/.test(reason.message)) {
      t.fail(`expected ForwardUnavailable from the broken stream, got ${String(reason)}`);
      break;
    }
  }

  const whileDown = await client.forward(address, request(1), 600_000).catch((e: unknown) => e);
  t.ok(whileDown instanceof ForwardUnavailable, 'an unreachable peer rejects, not hangs');

  const second = new ForwardServer({ port, handler: async (p) => reversed(p) });
  t.equal(await second.start(), port, 'restarted on the same port');
  t.teardown(() => second.stop(0));
  const reply = await client.forward(address, request(3), 600_000);
  t.same(Buffer.from(reply), Buffer.from(reversed(request(3))), 'reconnected');
});

t.test('graceful stop: running calls finish, new ones are refused, the stream ends', async (t) => {
  const stuck = stuckHandler();
  const server = new ForwardServer({ port: 0, handler: stuck.handler });
  const port = await server.start();
  const client = new ForwardClient();
  t.teardown(() => client.close());
  const address = `127.0.0.1:${port}`;

  const running = Array.from({ length: 5 }, (_, i) => client.forward(address, request(i), 600_000));
  await until(() => stuck.count === 5, 'the calls to start');
  const stopped = server.stop(30_000);
  const late = client.forward(address, request(99), 600_000).catch((e: unknown) => e);
  await sleep(20);
  stuck.releaseAll();
  const replies = await Promise.all(running);
  t.same(Buffer.from(replies[4]!), Buffer.from(reversed(request(4))), 'running calls got their replies');
  const lateErr = await late;
  t.ok(lateErr instanceof ForwardUnavailable, 'a call arriving during the drain is refused');
  await stopped;
  t.equal(server.activeStreams, 0);
});

/** A TCP relay that can freeze: bytes stop flowing but no socket closes (a partitioned peer). */
async function freezableProxy(targetPort: number) {
  const sockets: net.Socket[] = [];
  let frozen = false;
  const proxy = net.createServer((inbound) => {
    const outbound = net.connect(targetPort, '127.0.0.1');
    sockets.push(inbound, outbound);
    const relay = (from: net.Socket, to: net.Socket) =>
      from.on('data', (chunk) => {
        if (!frozen) to.write(chunk);
      });
    relay(inbound, outbound);
    relay(outbound, inbound);
    const closeBoth = () => {
      inbound.destroy();
      outbound.destroy();
    };
    inbound.on('error', closeBoth).on('close', closeBoth);
    outbound.on('error', closeBoth).on('close', closeBoth);
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  return {
    port: (proxy.address() as net.AddressInfo).port,
    freeze() {
      frozen = true;
    },
    close() {
      for (const s of sockets) s.destroy();
      proxy.close();
    },
  };
}

t.test('a frozen peer is detected by keepalive, not by the deadline', async (t) => {
  const stuck = stuckHandler();
  const server = new ForwardServer({ port: 0, handler: stuck.handler });
  const port = await server.start();
  const proxy = await freezableProxy(port);
  const client = new ForwardClient();
  t.teardown(async () => {
    client.close();
    proxy.close();
    await server.stop(0);
  });
  const address = `127.0.0.1:${proxy.port}`;
  const call = client.forward(address, request(1), 600_000).catch((e: unknown) => e);
  await until(() => stuck.count === 1, 'the call to reach the peer');
  proxy.freeze();
  const err = await call;
  t.ok(err instanceof ForwardUnavailable);
  t.notMatch((err as Error).message, /deadline/, 'the dead connection was noticed by keepalive');
});
