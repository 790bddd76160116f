// The barrier of a new counter definition (cluster/counters-barrier.ts): the engine settles the
// event commands it has in flight (sent from the node or forwarded to it) and not those sent
// after; the barrier asks every other alive node over the forwarding stream, reads the journal's
// tails only once all settled, and waits until the read tables hold them, failing in time
// (BarrierUnavailable) when a node does not answer or the tables do not catch up.
import t from 'tap';
import { packMessage } from '../../src/actors/codec.js';
import type { Forwarder } from '../../src/actors/engine.js';
import { InFlight } from '../../src/actors/in-flight.js';
import type { Call } from '../../src/actors/partition.js';
import { BarrierUnavailable, CountersBarrier, type CountersBarrierDeps } from '../../src/cluster/counters-barrier.js';
import type { NodeInfo, Offset } from '../../src/persistence/ports.js';
import { memoryNode, memoryStorage, ok } from '../helpers/memory-node.js';

const P = 4;

const ev = (customer: string, id: string): Call => ({
  env: 'env_1',
  target: { by: 'key', key: customer },
  command: { kind: 'event.record', externalId: customer, clientEventId: id, name: 'x.y', occurredAtMs: 1, properties: {}, fp: 1, trust: 'merchant_asserted', source: { type: 'secret_key', id: 'key_test' }, rules: null, counters: null },
  nowMs: 1000,
});

/** Whether `p` has settled after the pending callbacks ran. */
async function isSettled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  void p.then(
    () => (done = true),
    () => (done = true),
  );
  await new Promise((r) => setImmediate(r));
  return done;
}

t.test('InFlight: settled() waits for the commands that entered before it, not those after', async (t) => {
  const f = new InFlight();
  t.ok(await isSettled(f.settled()), 'nothing out: at once');
  const a = f.enter();
  const b = f.enter();
  const first = f.settled();
  const c = f.enter();
  const second = f.settled();
  f.leave(a);
  t.notOk(await isSettled(first), 'b is still out');
  f.leave(b);
  t.ok(await isSettled(first), 'a and b left; c entered after');
  t.notOk(await isSettled(second), 'c entered before the second');
  f.leave(c);
  t.ok(await isSettled(second));
  t.equal(f.size, 0);
});

t.test('the engine settles the event commands in flight, sent from the node or forwarded to it, and not later ones', async (t) => {
  // Given: a node whose journal holds its appends, with an event sent and another forwarded to it.
  const s = memoryStorage();
  const real = s.journal.appendMany.bind(s.journal);
  let release: () => void = () => {};
  const held = new Promise<void>((r) => (release = r));
  s.journal.appendMany = (items) => held.then(() => real(items));
  const n = await memoryNode(s, 'n1', P);
  const sent = n.engine.execute(ev('c1', 'e1'));
  const forwarded = n.engine.executeForwarded(packMessage(ev('c2', 'e2')));
  await new Promise((r) => setImmediate(r));
  t.equal(n.engine.eventsInFlight, 2);

  // When: the barrier's local part runs, and an event is sent after it.
  const settled = n.engine.settled();
  const later = n.engine.execute(ev('c3', 'e3'));

  // Then: it waits for the two journal acks, and not for the later event.
  t.notOk(await isSettled(settled), 'both are waiting for the journal');
  release();
  await settled;
  ok(await sent);
  t.ok(await isSettled(forwarded), 'the forwarded one was answered');
  ok(await later);
  t.equal(n.engine.eventsInFlight, 0);
  t.ok(await isSettled(n.engine.settled()), 'nothing in flight: at once');
  await n.placement.stop();
});

/** Two barriers, a and b, joined by a forwarder that hands a's node messages to b. */
function cluster(over: Partial<CountersBarrierDeps> = {}) {
  const log: string[] = [];
  const tails: Offset[] = ['0-5', '0', '0-2', '0'];
  const projected = new Map<number, Offset>([[0, '0-5']]);
  const nodes: NodeInfo[] = [
    { nodeId: 'a', grpcAddress: 'a:1', startedAtMs: 0 },
    { nodeId: 'b', grpcAddress: 'b:1', startedAtMs: 0 },
  ];
  const deps = (nodeId: string): CountersBarrierDeps => ({
    nodeId,
    membership: { alive: async () => nodes },
    forwarder: null,
    settleLocal: async (env) => {
      log.push(`${nodeId} settles ${env}`);
    },
    partitions: P,
    journal: {
      last: async (p) => {
        log.push(`tail ${p}`);
        return tails[p]!;
      },
    },
    projectedOffsets: async () => new Map(projected),
    drainProjector: async () => {
      log.push(`${nodeId} drains`);
    },
    timeoutMs: 300,
    pollMs: 5,
  });
  const b = new CountersBarrier(deps('b'));
  const forwarder: Forwarder = {
    forward: async (address, payload) => {
      log.push(`to ${address}`);
      if (!CountersBarrier.isMessage(payload)) throw new Error('not a node message');
      return b.handle(payload);
    },
  };
  const a = new CountersBarrier({ ...deps('a'), forwarder, ...over });
  return { a, log, projected };
}

t.test('the barrier settles every alive node, then waits until the read tables hold the journal as it stood after', async (t) => {
  // A deadline no loaded box reaches: this test is about the order of the steps, not the timeout.
  const { a, log, projected } = cluster({ timeoutMs: 60_000 });
  const passing = a.pass('env_1');
  // Partition 2's tail is not projected yet: the barrier gets as far as polling the read tables.
  for (const until = Date.now() + 10_000; !log.includes('a drains') && Date.now() < until; ) await new Promise((r) => setTimeout(r, 5));
  await new Promise((r) => setTimeout(r, 30));
  t.notOk(await isSettled(passing), 'waits for partition 2');
  t.ok(log.includes('a settles env_1') && log.includes('to b:1') && log.includes('b settles env_1'), 'both nodes settled');
  t.ok(
    log.indexOf('tail 0') > log.indexOf('a settles env_1') && log.indexOf('tail 0') > log.indexOf('b settles env_1'),
    'the tails are read once both nodes settled',
  );
  projected.set(2, '0-2');
  await passing;
  t.pass('passes once every tail is projected');
});

t.test('the barrier fails in time when a node does not answer or the read tables do not catch up', async (t) => {
  const unreachable: Forwarder = { forward: async () => Promise.reject(new Error('unavailable')) };
  await t.rejects(cluster({ forwarder: unreachable }).a.pass('env_1'), BarrierUnavailable);
  const silent: Forwarder = { forward: () => new Promise(() => {}) };
  await t.rejects(cluster({ forwarder: silent }).a.pass('env_1'), BarrierUnavailable, 'a node that never answers');
  await t.rejects(cluster().a.pass('env_1'), BarrierUnavailable, 'partition 2 is never projected');
  const alone = cluster({ forwarder: null, membership: { alive: async () => [{ nodeId: 'a', grpcAddress: 'a:1', startedAtMs: 0 }] } });
  alone.projected.set(2, '0-3');
  await alone.a.pass('env_1');
  t.notOk(alone.log.some((l) => l.startsWith('to ')), 'a node alone asks no one');
});

t.test('node messages and calls never mix on the forwarding stream', async (t) => {
  t.notOk(CountersBarrier.isMessage(packMessage(ev('c1', 'e1'))));
  t.ok(CountersBarrier.isMessage(packMessage(['counters.settle', 'env_1'])));
});
