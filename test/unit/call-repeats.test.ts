// A call sent again after an ambiguous failure is never applied twice: the engine forwards a call
// to its partition's owner and, when no answer comes back (deadline, broken stream, owner gone),
// sends it again, though the owner may have applied it. Commands whose repeat is not harmless
// (actors/calls.ts) carry a call id; the owner remembers their answers in journaled state, so the
// repeat is answered, also by the next owner after a crash or a handover.
import t from 'tap';
import { callTag } from '../../src/actors/calls.js';
import { decodeSnapshot, encodeSnapshot } from '../../src/actors/codec.js';
import { Engine, type Forwarder, type Placement } from '../../src/actors/engine.js';
import type { Call, EngineCommand } from '../../src/actors/partition.js';
import { type CustomerState, decide, evolve, type Fact, mergeFacts, mergeHandover, sharedEmpty } from '../../src/domain/customer.js';
import { eventId } from '../../src/domain/seen-events.js';
import { limits } from '../../src/limits.js';
import { type MemoryStorage, memoryNode, memoryStorage, ok } from '../helpers/memory-node.js';

const P = 4;
const env = 'env_1';
const currencies = [{ key: 'coins', negativeBalance: 'forbid' as const, expiryDays: null }];

const created = (customer: string): Call => ({
  env,
  target: { by: 'key', key: customer },
  command: { kind: 'customer.create', externalId: customer, attributes: {} },
  nowMs: 1000,
});

const adjust = (customer: string, amount: number, callId?: string): Call => ({
  env,
  target: { by: 'key', key: customer },
  command: { kind: 'ledger.run', currencies, tierPrograms: [], command: { kind: 'ledger.adjust', currency: 'coins', amount, reason: 'goodwill' } },
  nowMs: 2000,
  ...(callId === undefined ? {} : { callId }),
});

type Node = Awaited<ReturnType<typeof memoryNode>>;

async function available(engine: Engine, customer: string): Promise<number> {
  const v = ok(await engine.execute({ env, target: { by: 'key', key: customer }, command: { kind: 'customer.view' }, nowMs: 3000 }));
  if (v.kind !== 'customer') throw new Error('not a customer view');
  return v.customer.balances.find((b) => b.currency === 'coins')?.available ?? 0;
}

/**
 * A node that owns no partition and forwards every call to `owner` (whichever node that is now).
 * `lose(n)`: the next n forwards are delivered and applied, but their answers never come back:
 * the forward rejects as a deadline would, after `between` ran (a crash, a handover).
 */
function sender(storage: MemoryStorage, owner: () => Node) {
  let losing = 0;
  let between: () => Promise<void> = async () => {};
  const sent: Call[] = [];
  const forwarder: Forwarder = {
    async forward(_address, payload) {
      const answer = await owner().engine.executeForwarded(payload);
      if (losing > 0) {
        losing--;
        await between();
        throw new Error('forward to b unavailable: deadline exceeded');
      }
      return answer;
    },
  };
  const placement: Placement = { local: () => undefined, recovering: () => undefined, remote: () => 'b:1', refresh: async () => {} };
  const engine = new Engine(P, placement, forwarder, storage.journal);
  const wrapped = {
    engine,
    sent,
    lose(n: number, then: () => Promise<void> = async () => {}) {
      losing = n;
      between = then;
    },
  };
  return wrapped;
}

/** Releases every lease of `node` without a snapshot: what the next owner sees after a kill -9. */
async function crash(s: MemoryStorage, nodeId: string): Promise<void> {
  for (const l of await s.leases.list(P)) if (l !== null && l.nodeId === nodeId) await s.leases.release(l.partition, nodeId, l.epoch);
}

t.test('given a ledger adjustment whose forwarded answer is lost, when the engine sends it again, then it is applied once', async (t) => {
  const s = memoryStorage();
  const b = await memoryNode(s, 'b', P);
  t.teardown(() => b.placement.stop());
  const a = sender(s, () => b);
  ok(await a.engine.execute(created('lost-1')));

  a.lose(1);
  const reply = ok(await a.engine.execute(adjust('lost-1', 100)));
  t.ok(reply.kind === 'ledger' && reply.reply.kind === 'ledger.entry' && reply.reply.balance.available === 100, 'answered with the entry and the balance after it');
  t.equal(await available(b.engine, 'lost-1'), 100, 'the balance shows the adjustment once');

  // The same with two answers lost in a row, and for a new adjustment after it.
  a.lose(2);
  const second = ok(await a.engine.execute(adjust('lost-1', 5)));
  t.ok(second.kind === 'ledger' && second.reply.kind === 'ledger.entry' && second.reply.balance.available === 105);
  ok(await a.engine.execute(adjust('lost-1', 1)));
  t.equal(await available(b.engine, 'lost-1'), 106, 'each adjustment once');
});

t.test('given the owner crashed after applying the call, when the next owner gets it again, then its replayed journal answers it', async (t) => {
  const s = memoryStorage();
  const nodes: Node[] = [await memoryNode(s, 'b', P)];
  const owner = () => nodes[nodes.length - 1]!;
  const a = sender(s, owner);
  ok(await a.engine.execute(created('crash-1')));

  let first: unknown;
  a.lose(1, async () => {
    // Applied and journaled by b, which dies before its answer leaves: c replays b's journal.
    first = await available(owner().engine, 'crash-1');
    await crash(s, 'b');
    nodes.push(await memoryNode(s, 'c', P));
  });
  const reply = ok(await a.engine.execute(adjust('crash-1', 70)));
  t.equal(first, 70, 'b had applied it');
  t.ok(reply.kind === 'ledger' && reply.reply.kind === 'ledger.entry' && reply.reply.entry.amount === 70);
  t.equal(await available(owner().engine, 'crash-1'), 70, 'c did not apply it again');
  await owner().placement.stop();
});

t.test('given the owner handed the partition over after applying the call, when the next owner gets it again, then its snapshot answers it', async (t) => {
  const s = memoryStorage();
  const nodes: Node[] = [await memoryNode(s, 'b', P)];
  const owner = () => nodes[nodes.length - 1]!;
  const a = sender(s, owner);
  ok(await a.engine.execute(created('moved-1')));
  a.lose(1, async () => {
    await owner().placement.stop(); // a graceful leave: snapshots at the last offset, then c takes over
    nodes.push(await memoryNode(s, 'c', P));
  });
  const reply = ok(await a.engine.execute(adjust('moved-1', 40)));
  t.ok(reply.kind === 'ledger' && reply.reply.kind === 'ledger.entry' && reply.reply.entry.amount === 40);
  t.equal(await available(owner().engine, 'moved-1'), 40, 'applied once');
  await owner().placement.stop();
});

t.test('given a customer create whose answer is lost, when it is sent again, then it answers the customer, not 409', async (t) => {
  const s = memoryStorage();
  const b = await memoryNode(s, 'b', P);
  t.teardown(() => b.placement.stop());
  const a = sender(s, () => b);
  a.lose(1);
  const reply = ok(await a.engine.execute(created('new-1')));
  t.ok(reply.kind === 'customer' && reply.customer.externalId === 'new-1');
  // Without a call id a second create is refused, as it always was.
  const again = await b.engine.execute(created('new-1'));
  t.match(again, { ok: false, code: 'already_exists' });
});

t.test('given a call id, when the same call comes again locally, then it is answered from memory, also after recovery', async (t) => {
  const s = memoryStorage();
  const b = await memoryNode(s, 'b', P);
  ok(await b.engine.execute(created('local-1')));
  const first = ok(await b.engine.execute(adjust('local-1', 10, 'req-1')));
  const repeat = ok(await b.engine.execute(adjust('local-1', 10, 'req-1')));
  t.same(repeat, first, 'the remembered answer, the same entry');
  ok(await b.engine.execute(adjust('local-1', 10, 'req-2')));
  t.equal(await available(b.engine, 'local-1'), 20, 'another call id is another adjustment');

  await crash(s, 'b');
  const c = await memoryNode(s, 'c', P);
  t.teardown(() => c.placement.stop());
  t.same(ok(await c.engine.execute(adjust('local-1', 10, 'req-1'))), first, 'the journal replayed keeps the memory');
  t.equal(await available(c.engine, 'local-1'), 20);
});

t.test('the memory is bounded by count and by age', async (t) => {
  const s = memoryStorage();
  const b = await memoryNode(s, 'b', P);
  t.teardown(() => b.placement.stop());
  ok(await b.engine.execute(created('bound-1')));
  const n = limits.recentCallsPerCustomer;
  for (let i = 0; i <= n; i++) ok(await b.engine.execute(adjust('bound-1', 1, `c-${i}`)));
  t.equal(await available(b.engine, 'bound-1'), n + 1);
  ok(await b.engine.execute(adjust('bound-1', 1, `c-${n}`)));
  t.equal(await available(b.engine, 'bound-1'), n + 1, 'the newest is remembered');
  ok(await b.engine.execute(adjust('bound-1', 1, 'c-0')));
  t.equal(await available(b.engine, 'bound-1'), n + 2, `the oldest of ${n + 1} is forgotten`);
  // The retention runs on the real clock (a shorter one here, so the test can outwait it).
  const mutable = limits as { recentCallsRetentionMs: number };
  const saved = mutable.recentCallsRetentionMs;
  t.teardown(() => {
    mutable.recentCallsRetentionMs = saved;
  });
  mutable.recentCallsRetentionMs = 50;
  await new Promise((resolve) => setTimeout(resolve, 80));
  ok(await b.engine.execute(adjust('bound-1', 1, `c-${n}`)));
  t.equal(await available(b.engine, 'bound-1'), n + 3, 'an answer older than the retention is forgotten');
});

t.test("a test clock moved forward past the retention does not forget the remembered calls (their age is the real clock's)", async (t) => {
  // Given a call applied in an environment whose clock is then advanced by more than the retention
  const s = memoryStorage();
  const b = await memoryNode(s, 'b', P);
  t.teardown(() => b.placement.stop());
  ok(await b.engine.execute(created('clock-1')));
  const first = ok(await b.engine.execute(adjust('clock-1', 10, 'req-clock')));
  // When the same call runs again at the advanced environment time
  const later = { ...adjust('clock-1', 10, 'req-clock'), nowMs: 2000 + limits.recentCallsRetentionMs + 3600_000 };
  const again = ok(await b.engine.execute(later));
  // Then it is answered as the first time, not applied twice
  t.same(again, first);
  t.equal(await available(b.engine, 'clock-1'), 10);
});

t.test('snapshots keep the remembered calls; older snapshots without them still decode', async (t) => {
  const ctx = {
    nowMs: 5000,
    environmentId: env,
    newId: (p: string) => `${p}_1`,
    newCustomerId: () => 'cust_0000000000000000000000000001',
    newEventId: () => eventId(5000, 1),
  };
  const d = decide(null, { kind: 'customer.create', externalId: 'snap-1', attributes: {} }, ctx);
  if (!d.ok) throw new Error('create refused');
  let state: CustomerState | null = null;
  for (const f of d.facts) state = evolve(state, f);
  const answered: Fact = { kind: 'call.answered', call: 'ledger.adjust k1', atMs: 5000, reply: { kind: 'customer' } };
  evolve(state, answered);
  const back = decodeSnapshot(encodeSnapshot(state!));
  t.same(back.recentCalls, [{ call: 'ledger.adjust k1', atMs: 5000, reply: { kind: 'customer' } }]);

  const none = decodeSnapshot(encodeSnapshot({ ...state!, recentCalls: sharedEmpty.recentCalls }));
  t.equal(none.recentCalls, sharedEmpty.recentCalls, 'none: the shared empty list');

  // A snapshot written before call ids had 25 fields.
  const { Packr } = await import('msgpackr');
  const packr = new Packr({ useRecords: false, mapsAsObjects: true, variableMapSize: true });
  const fields = packr.unpack(encodeSnapshot(state!)) as unknown[];
  const old = decodeSnapshot(packr.pack(fields.slice(0, 25)));
  t.equal(old.recentCalls, sharedEmpty.recentCalls);
  t.equal(old.id, state!.id);
});

t.test('a merged customer hands its remembered calls to its survivor; a delete keeps only its own answer', async (t) => {
  let ids = 0;
  const ctx = {
    nowMs: 5000,
    environmentId: env,
    newId: (p: string) => `${p}_${++ids}`,
    newCustomerId: () => `cust_000000000000000000000000000${++ids}`,
    newEventId: () => eventId(5000, ++ids),
  };
  const make = (externalId: string) => {
    const d = decide(null, { kind: 'customer.create', externalId, attributes: {} }, ctx);
    if (!d.ok) throw new Error('create refused');
    let s: CustomerState | null = null;
    for (const f of d.facts) s = evolve(s, f);
    return s!;
  };
  const merged = make('m-1');
  const survivor = make('s-1');
  evolve(merged, { kind: 'call.answered', call: 'ledger.adjust k1', atMs: 5000, reply: { kind: 'customer' } });
  for (const f of mergeFacts(merged, survivor.id, ctx)) evolve(merged, f);
  const d = decide(survivor, { kind: 'alias.add', alias: 'm-1', aliasKind: 'external_id', mergedFrom: merged.id, ...mergeHandover(merged) }, ctx);
  if (!d.ok) throw new Error('alias refused');
  for (const f of d.facts) evolve(survivor, f);
  t.same(survivor.recentCalls.map((c) => c.call), ['ledger.adjust k1'], 'a repeat by key now reaching the survivor is answered');

  evolve(survivor, { kind: 'customer.deleted', version: 9, atMs: 6000 });
  t.same(survivor.recentCalls, [], 'a tombstone forgets earlier answers');
});

t.test('which commands are remembered', async (t) => {
  const tag = (command: EngineCommand) => callTag(command);
  const ledger = (command: Extract<EngineCommand, { kind: 'ledger.run' }>['command']): EngineCommand => ({ kind: 'ledger.run', command, currencies, tierPrograms: [] });
  t.equal(tag(ledger({ kind: 'ledger.adjust', currency: 'coins', amount: 1, reason: 'r' })), 'ledger.adjust');
  t.equal(tag(ledger({ kind: 'ledger.cancel_pending', currency: 'coins', entryId: 'le_1', reason: null })), 'ledger.cancel_pending');
  t.equal(tag(ledger({ kind: 'ledger.run_due' })), null, 'due work is done once whatever repeats it');
  t.equal(tag({ kind: 'customer.create', externalId: 'x', attributes: {} }), 'customer.create');
  t.equal(tag({ kind: 'customer.view' }), null);
  t.equal(tag({ kind: 'key.claim', customerId: 'c' }), null);
  t.equal(tag({ kind: 'reward.run', command: { kind: 'reward.redeem', issuanceId: 'i', currencies }, tierPrograms: [] }), 'reward.redeem');
  t.equal(tag({ kind: 'reward.run', command: { kind: 'reward.expire_due' }, tierPrograms: [] }), null);
});
