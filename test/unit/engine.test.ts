
import t from 'tap';
import { Engine, type Placement } from '../../src/actors/engine.js';
import { packMessage, unpackMessage } from '../../src/actors/codec.js';
import { type Call, type CallResult, closedResult, type Partition } from '../../src/actors/partition.js';
import type { CounterDef } from '../../src/domain/counters.js';
import { actorsUnsnapshotted } from '../../src/observability/metrics.js';
import { type MemoryStorage, memoryNode, memoryStorage, ok } from '../helpers/memory-node.js';

const P = 4;

const node = (storage: MemoryStorage, nodeId = 'n1') => memoryNode(storage, nodeId, P);
const shared = memoryStorage;

const ev = (customer: string, id: string, fp = 1): Call => ({
  env: 'env_1',
  target: { by: 'key', key: customer },
  command: { kind: 'event.record', externalId: customer, clientEventId: id, name: 'x.y', occurredAtMs: 1, properties: {}, fp, trust: 'merchant_asserted', source: { type: 'secret_key', id: 'key_test' }, rules: null },
  nowMs: 1000,
});

t.test('events in one tick are group-committed and each customer is created once', async (t) => {
  const s = shared();
  const n = await node(s);
  const results = await Promise.all(Array.from({ length: 200 }, (_, i) => n.engine.execute(ev(`c${i % 20}`, `e${i}`))));
  t.equal(results.filter((r) => r.ok === true).length, 200);
  // 20 customers over 4 partitions: at most a handful of journal entries, far fewer than 200.
  t.ok(n.acked.length <= 8, `entries: ${n.acked.length}`);
  const view = ok(await n.engine.execute({ env: 'env_1', target: { by: 'key', key: 'c3' }, command: { kind: 'customer.view' }, nowMs: 1 }));
  t.equal(view.kind === 'customer' && view.customer.eventCount, 10);
  await n.placement.stop();
});

t.test('records arriving while a journal call is out go together in the next call', async (t) => {
  const s = shared();
  const real = s.journal.appendMany.bind(s.journal);
  let calls = 0;
  let release: () => void = () => {};
  const held = new Promise<void>((r) => (release = r));
  s.journal.appendMany = (items) => {
    calls++;
    return calls === 1 ? held.then(() => real(items)) : real(items);
  };
  const n = await node(s);
  const first = n.engine.execute(ev('gc-0', 'g0'));
  await new Promise((r) => setImmediate(r)); // the first call is out now
  const later: Array<Promise<CallResult>> = [];
  for (let i = 1; i <= 12; i++) {
    later.push(n.engine.execute(ev(`gc-${i}`, `g${i}`)));
    await new Promise((r) => setImmediate(r)); // each in its own event-loop turn
  }
  t.equal(calls, 1, 'nothing else was written while the first call was out');
  release();
  ok(await first);
  for (const r of await Promise.all(later)) ok(r);
  t.equal(calls, 2, 'the twelve later events, over several partitions, took one journal call');
  await n.placement.stop();
});

/** Every saveMany call: the rows of each partition's save in it (wraps the store's saveMany). */
function recordSaves(s: MemoryStorage): number[][] {
  const calls: number[][] = [];
  const real = s.snapshots.saveMany.bind(s.snapshots);
  s.snapshots.saveMany = (items) => {
    calls.push(items.map((it) => it.rows.length));
    return real(items);
  };
  return calls;
}

/** The actors_unsnapshotted gauge as the last sweep set it. */
const unsnapshotted = async () => (await actorsUnsnapshotted.get()).values[0]?.value;

/** Polls the gauge until it reads `value` (a loaded box runs sweeps late); what it read last after 10 s. */
async function gaugeReaches(value: number): Promise<number | undefined> {
  const deadline = Date.now() + 10_000;
  let v = await unsnapshotted();
  while (v !== value && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 10));
    v = await unsnapshotted();
  }
  return v;
}

/** Longer than a few sweeps of 20 ms (for checks that nothing was saved). */
const sweeps = () => new Promise((r) => setTimeout(r, 120));

/** Polls until `cond` holds (a loaded CI box may run timers late), failing after `ms`. */
async function waitFor(cond: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

t.test('a partition holding snapshotDirtyActorsMax dirty actors saves at the next sweep, before the cycle', async (t) => {
  const s = shared();
  const saves = recordSaves(s);
  const n = await memoryNode(s, 'n1', 1, undefined, { snapshotDirtyActorsMax: 5, snapshotTailRecordsMax: 1_000_000, snapshotSweepMs: 20 });
  for (let i = 0; i < 4; i++) ok(await n.engine.execute(ev(`d${i}`, `e${i}`)));
  await sweeps();
  t.same(saves, [], 'four dirty actors wait for the cycle (60 s here)');
  t.equal(await gaugeReaches(4), 4, 'the actors_unsnapshotted gauge counts them');
  ok(await n.engine.execute(ev('d4', 'e4')));
  await waitFor(() => saves.length > 0);
  t.same(saves, [[5]], 'the fifth: all five saved together');
  t.equal(await gaugeReaches(0), 0, 'saved: the gauge reads none at a later sweep');
  for (let i = 0; i < 4; i++) ok(await n.engine.execute(ev(`d${i}`, `f${i}`)));
  await sweeps();
  t.same(saves, [[5]], 'saved actors are clean: four of them dirty again is below the bound');
  await n.placement.stop();
});

t.test('a partition with snapshotTailRecordsMax records since its last capture saves at the next sweep', async (t) => {
  const s = shared();
  const saves = recordSaves(s);
  const n = await memoryNode(s, 'n1', 1, undefined, { snapshotDirtyActorsMax: 1_000_000, snapshotTailRecordsMax: 10, snapshotSweepMs: 20 });
  for (let i = 0; i < 9; i++) ok(await n.engine.execute(ev('hot', `h${i}`)));
  await sweeps();
  t.same(saves, [], 'nine records: nothing saved yet');
  ok(await n.engine.execute(ev('hot', 'h9')));
  await waitFor(() => saves.length > 0);
  t.same(saves, [[1]], 'the tenth record: the one customer they touched is saved');
  await n.placement.stop();
});

t.test('partitions past their bounds in one sweep save in one transaction', async (t) => {
  const s = shared();
  const saves = recordSaves(s);
  // A long sweep: every partition is past the bound by the time it runs.
  const n = await memoryNode(s, 'n1', P, undefined, { snapshotDirtyActorsMax: 1, snapshotTailRecordsMax: 1_000_000, snapshotSweepMs: 500 });
  await Promise.all(Array.from({ length: 40 }, (_, i) => n.engine.execute(ev(`s${i}`, `s${i}`))));
  await waitFor(() => saves.length > 0);
  await sweeps();
  t.equal(saves.length, 1, 'one saveMany call');
  t.equal(saves[0]!.length, P, 'holding every partition');
  t.equal(saves[0]!.reduce((a, b) => a + b, 0), 40, 'and every customer');
  await n.placement.stop();
});

t.test("a sweep's captures are spread over macrotasks (requests go on between them), its saves still one write", async (t) => {
  const s = shared();
  const saves = recordSaves(s);
  // Every partition past its bound (~100 dirty actors each) by the time the 500 ms sweep runs: at
  // least 64 actors per slice, so each partition is a slice of its own.
  const n = await memoryNode(s, 'n1', P, undefined, { snapshotDirtyActorsMax: 40, snapshotTailRecordsMax: 1_000_000, snapshotSweepMs: 500 });
  await Promise.all(Array.from({ length: 400 }, (_, i) => n.engine.execute(ev(`m${i}`, `m${i}`))));
  const log: string[] = [];
  for (let p = 0; p < P; p++) {
    const part = n.placement.local(p)!;
    const capture = part.requestSnapshot.bind(part);
    part.requestSnapshot = () => {
      // Something the loop has to do meanwhile, as a request would be.
      if (log.length === 0) setImmediate(() => log.push('other work'));
      log.push('capture');
      return capture();
    };
  }
  await waitFor(() => saves.length > 0);
  await sweeps();
  t.same(log, ['capture', 'other work', 'capture', 'capture', 'capture'], 'other work ran after the first slice, not after all of them');
  t.equal(saves.length, 1, 'one saveMany call');
  t.equal(saves[0]!.reduce((a, b) => a + b, 0), 400, 'holding every customer');
  await n.placement.stop();
});

t.test('the snapshot cycle comes to the partitions in turn, a slice per sweep, not all in one tick', async (t) => {
  const s = shared();
  const saves = recordSaves(s);
  // Cycle 4 s, sweeps every 250 ms: the first sweep sets each partition's turn at +4 s x (id + 1) / 4,
  // so the turns come ~1 s apart; only a sweep late by more than that could take two at once.
  const n = await memoryNode(s, 'n1', P, undefined, { snapshotEveryMs: 4000, snapshotSweepMs: 250 });
  await Promise.all(Array.from({ length: 40 }, (_, i) => n.engine.execute(ev(`r${i}`, `r${i}`))));
  await waitFor(() => saves.length >= 4, 10_000);
  t.same(saves.map((c) => c.length), [1, 1, 1, 1], 'four saves of one partition each, not one of all four');
  t.equal(saves.flat().reduce((a, b) => a + b, 0), 40, 'every customer once');
  await n.placement.stop();
});

t.test('a duplicate is answered with the first id; different content conflicts', async (t) => {
  const n = await node(shared());
  const first = ok(await n.engine.execute(ev('u', 'e1')));
  const again = ok(await n.engine.execute(ev('u', 'e1')));
  t.match(again, { kind: 'event', duplicate: true, id: first.kind === 'event' ? first.id : '' });
  t.match(await n.engine.execute(ev('u', 'e1', 2)), { ok: false, code: 'event_id_conflict' });
  await n.placement.stop();
});

t.test('a restarted node rebuilds the same state from snapshots plus the journal tail', async (t) => {
  const s = shared();
  const a = await node(s);
  for (let i = 0; i < 30; i++) ok(await a.engine.execute(ev(`c${i % 3}`, `e${i}`)));
  await a.placement.stop(); // snapshots and releases
  const b = await node(s, 'n2');
  for (let i = 30; i < 45; i++) ok(await b.engine.execute(ev(`c${i % 3}`, `e${i}`)));
  // Crash: no stop(). A third node takes over once the leases expire (released here by hand).
  for (let p = 0; p < P; p++) await s.leases.release(p, 'n2', (await s.leases.list(P))[p]?.epoch ?? 0);
  const c = await node(s, 'n3');
  for (const cust of ['c0', 'c1', 'c2']) {
    const v = ok(await c.engine.execute({ env: 'env_1', target: { by: 'key', key: cust }, command: { kind: 'customer.view' }, nowMs: 1 }));
    t.equal(v.kind === 'customer' && v.customer.eventCount, 15, `${cust} has every event exactly once`);
  }
  t.match(ok(await c.engine.execute(ev('c0', 'e0'))), { duplicate: true }, 'dedup survives recovery');
  // The crashed node is fenced: its appends are refused.
  t.match(await b.engine.execute(ev('c9', 'late')), { ok: false, code: 'rate_limited' });
  await c.placement.stop();
});

t.test('recovery looks up snapshots only for customers that existed before the checkpoint', async (t) => {
  const s = shared();
  const a = await node(s);
  for (let i = 0; i < 6; i++) ok(await a.engine.execute(ev(`old${i % 3}`, `o${i}`)));
  await a.placement.stop(); // snapshots old0..old2 at the checkpoint
  const b = await node(s, 'n2');
  // The tail: events of customers with snapshots, and customers created after the checkpoint.
  for (let i = 0; i < 12; i++) ok(await b.engine.execute(ev(i % 2 === 0 ? `old${i % 3}` : `new${i % 4}`, `t${i}`)));
  for (let p = 0; p < P; p++) await s.leases.release(p, 'n2', (await s.leases.list(P))[p]?.epoch ?? 0);
  const asked: string[] = [];
  const load = s.snapshots.load.bind(s.snapshots);
  s.snapshots.load = (env, ids) => {
    asked.push(...ids);
    return load(env, ids);
  };
  const c = await node(s, 'n3');
  const idOf = async (key: string) => {
    const v = ok(await c.engine.execute({ env: 'env_1', target: { by: 'key', key }, command: { kind: 'customer.view' }, nowMs: 1 }));
    return v.kind === 'customer' ? v.customer : null;
  };
  const olds = await Promise.all(['old0', 'old1', 'old2'].map(idOf));
  const news = await Promise.all(['new1', 'new3'].map(idOf));
  t.same(asked.sort(), olds.map((v) => v!.id).sort(), 'only the customers with snapshots were looked up');
  t.same(olds.map((v) => v!.eventCount), [4, 4, 4], 'snapshot plus tail events');
  t.same(news.map((v) => v!.eventCount), [3, 3], 'customers born in the tail are rebuilt from it alone');
  await c.placement.stop();
});

t.test('an alias that is another customer’s external id merges that customer', async (t) => {
  const n = await node(shared());
  const anon = ok(await n.engine.execute(ev('anon-1', 'a1')));
  const known = ok(await n.engine.execute(ev('user-1', 'k1')));
  if (anon.kind !== 'event' || known.kind !== 'event') throw new Error('unexpected');
  const claim = ok(
    await n.engine.execute({ env: 'env_1', target: { by: 'key', key: 'anon-1' }, command: { kind: 'key.claim', customerId: known.customerId }, nowMs: 2 }),
  );
  t.match(claim, { kind: 'claimed', mergedFrom: anon.customerId });
  t.equal(claim.kind === 'claimed' ? claim.seenEvents?.length : 0, 4, "the merged customer's one recorded event id travels to the survivor");
  // Later events for the alias reach the surviving customer.
  const later = ok(await n.engine.execute(ev('anon-1', 'a2')));
  t.equal(later.kind === 'event' && later.customerId, known.customerId);
  // Another customer cannot take an alias that is bound to someone else.
  ok(await n.engine.execute(ev('user-2', 'z1')));
  const other = ok(await n.engine.execute({ env: 'env_1', target: { by: 'key', key: 'user-2' }, command: { kind: 'customer.view' }, nowMs: 3 }));
  const conflict = await n.engine.execute({
    env: 'env_1',
    target: { by: 'key', key: 'anon-1' },
    command: { kind: 'key.claim', customerId: other.kind === 'customer' ? other.customer.id : '' },
    nowMs: 4,
  });
  t.match(conflict, { ok: false, code: 'alias_conflict' });
  await n.placement.stop();
});

t.test('a customer id from another environment does not exist here', async (t) => {
  const n = await node(shared());
  const created = ok(await n.engine.execute(ev('iso-1', 'i1')));
  const id = created.kind === 'event' ? created.customerId : '';
  const view = (env: string) => n.engine.execute({ env, target: { by: 'id', id }, command: { kind: 'customer.view' }, nowMs: 5 });
  t.match(await view('env_1'), { ok: true });
  t.match(await view('env_other'), { ok: false, code: 'resource_not_found' });
  const del = await n.engine.execute({ env: 'env_other', target: { by: 'id', id }, command: { kind: 'customer.delete', eventsErased: 0 }, nowMs: 6 });
  t.match(del, { ok: false, code: 'resource_not_found' });
  t.match(await view('env_1'), { ok: true }, 'still there');
  await n.placement.stop();
});

/** Waits until every partition of `n` has loaded its key filter (until then an unknown key costs a lookup). */
async function filtersLoaded(n: Awaited<ReturnType<typeof node>>): Promise<void> {
  const parts = Array.from({ length: P }, (_, p) => n.placement.local(p) as unknown as { filterReady: boolean } | undefined);
  await waitFor(() => parts.every((p) => p?.filterReady === true));
}

t.test('once the key filter is loaded, a new customer costs no key lookup', async (t) => {
  const s = shared();
  let lookups = 0;
  const original = s.snapshots.lookupKeys.bind(s.snapshots);
  s.snapshots.lookupKeys = (env, keys) => {
    lookups++;
    return original(env, keys);
  };
  const n = await node(s);
  await filtersLoaded(n); // they load in the background after recovery
  for (let i = 0; i < 50; i++) ok(await n.engine.execute(ev(`new-${i}`, `nk${i}`)));
  t.equal(lookups, 0, 'no lookups for never-seen keys');
  // A known key that was passivated is still found (the filter says maybe: lookup).
  await n.placement.stop();
  const m = await node(s, 'n2');
  await filtersLoaded(m);
  const again = ok(await m.engine.execute(ev('new-7', 'nk7')));
  t.match(again, { duplicate: true }, 'the stored customer was found, not recreated');
  t.ok(lookups > 0);
  await m.placement.stop();
});

t.test('a known customer asked for twice while its snapshot loads is found, not created again', async (t) => {
  const s = shared();
  const a = await node(s);
  const first = ok(await a.engine.execute(ev('slow-1', 'sl1')));
  await a.placement.stop(); // snapshots; the next node loads the customer lazily
  // Slow storage: the second call arrives while the first lookup is out, and its own lookup
  // returns while the first call's snapshot is still loading.
  const lookupKeys = s.snapshots.lookupKeys.bind(s.snapshots);
  const load = s.snapshots.load.bind(s.snapshots);
  const later = <T>(ms: number, v: Promise<T>) => v.then((x) => new Promise<T>((r) => setTimeout(r, ms, x)));
  let lookupOut: () => void = () => {};
  const firstLookup = new Promise<void>((r) => (lookupOut = r));
  s.snapshots.lookupKeys = (env, keys) => {
    if (keys.includes('slow-1')) lookupOut();
    return later(20, lookupKeys(env, keys));
  };
  s.snapshots.load = (env, ids) => later(60, load(env, ids));
  const b = await node(s, 'n2');
  const one = b.engine.execute(ev('slow-1', 'sl2'));
  await firstLookup;
  const two = b.engine.execute(ev('slow-1', 'sl3'));
  const [r1, r2] = [ok(await one), ok(await two)];
  const id = first.kind === 'event' ? first.customerId : '';
  t.equal(r1.kind === 'event' && r1.customerId, id, 'the first call reached the stored customer');
  t.equal(r2.kind === 'event' && r2.customerId, id, 'the second call reached the same customer');
  const view = ok(await b.engine.execute({ env: 'env_1', target: { by: 'key', key: 'slow-1' }, command: { kind: 'customer.view' }, nowMs: 1 }));
  t.equal(view.kind === 'customer' && view.customer.eventCount, 3, 'every event on the one customer');
  await b.placement.stop();
});

t.test('a partition whose journal stops answering sheds new commands with rate_limited', async (t) => {
  // 70k commands applied in one go block the loop for seconds on a loaded machine; this test is
  // about shedding, not lease expiry, so the leases' clock stands still.
  const s = shared(() => 0);
  let hold = true;
  const waiting: Array<() => void> = [];
  const real = s.journal.appendMany.bind(s.journal);
  s.journal.appendMany = (items) =>
    hold ? new Promise((resolve) => waiting.push(() => void real(items).then(resolve))) : real(items);
  const n = await node(s);
  const calls: Array<Promise<CallResult>> = [];
  for (let i = 0; i < 70_000; i++) calls.push(n.engine.execute(ev(`shed-${i}`, `s${i}`)));
  const early = await Promise.race([Promise.all(calls.slice(-100)), new Promise((r) => setTimeout(r, 500, 'pending'))]);
  t.not(early, 'pending', 'the latest commands were answered at once');
  t.match((early as CallResult[])[0], { ok: false, code: 'rate_limited', retryAfterSeconds: 1 });
  hold = false;
  for (const w of waiting) w();
  const results = await Promise.all(calls);
  const accepted = results.filter((r) => r.ok === true).length;
  t.ok(accepted > 0 && accepted < 70_000, `${accepted} accepted, the rest shed`);
  await n.placement.stop();
});

t.test('a snapshot save by a node whose partition was claimed by a newer owner writes nothing and stops it', async (t) => {
  const s = shared();
  const a = await node(s);
  ok(await a.engine.execute(ev('fence-1', 'f1')));
  const p = a.engine.partitionOfTarget('env_1', { by: 'key', key: 'fence-1' });
  const part = a.placement.local(p)!;
  const before = await s.snapshots.checkpoint(p);
  await s.snapshots.claim(p, part.epoch + 1); // what a new owner's recovery does first
  part.requestSnapshot();
  await part.saved();
  t.equal(await s.snapshots.checkpoint(p), before, 'the checkpoint did not move');
  t.equal(a.placement.local(p), undefined, 'the old owner dropped the partition');
  await a.placement.stop();
});

t.test('recovery rebuilds identical balances from snapshots plus the journal tail', async (t) => {
  const s = shared();
  const currencies = [{ key: 'coins', negativeBalance: 'forbid' as const, expiryDays: null }];
  const adjust = (customer: string, amount: number, nowMs: number): Call => ({
    env: 'env_1',
    target: { by: 'key', key: customer },
    command: { kind: 'ledger.run', currencies, tierPrograms: [], command: { kind: 'ledger.adjust', currency: 'coins', amount, reason: 'test', expiresAtMs: amount > 0 ? nowMs + ((amount % 7) + 1) * 86_400_000 : undefined } },
    nowMs,
  });
  const balancesOf = async (e: Engine, customer: string) => {
    const v = ok(await e.execute({ env: 'env_1', target: { by: 'key', key: customer }, command: { kind: 'customer.view' }, nowMs: 10_000 }));
    return v.kind === 'customer' ? v.customer.balances : [];
  };
  const a = await node(s);
  for (const c of ['l1', 'l2', 'l3']) ok(await a.engine.execute(ev(c, `${c}-e`)));
  for (let i = 1; i <= 30; i++) ok(await a.engine.execute(adjust(`l${(i % 3) + 1}`, i * 10, 1000 + i)));
  await a.placement.stop(); // snapshots
  const b = await node(s, 'n2');
  for (let i = 1; i <= 12; i++) ok(await b.engine.execute(adjust(`l${(i % 3) + 1}`, -i, 2000 + i)));
  const expected = await Promise.all(['l1', 'l2', 'l3'].map((c) => balancesOf(b.engine, c)));
  // Crash: the tail after the last checkpoint is replayed by the next owner.
  for (let p = 0; p < P; p++) await s.leases.release(p, 'n2', (await s.leases.list(P))[p]?.epoch ?? 0);
  const c = await node(s, 'n3');
  const rebuilt = await Promise.all(['l1', 'l2', 'l3'].map((x) => balancesOf(c.engine, x)));
  t.same(rebuilt, expected);
  t.ok(expected.every((bal) => bal[0] && bal[0].available > 0));
  await c.placement.stop();
});

t.test('recovery rebuilds identical counters from snapshots plus the journal tail', async (t) => {
  const s = shared();
  const defs: CounterDef[] = [
    { id: 'ctr_l', name: 'all', event: 'x.y', window: { kind: 'lifetime' }, filter: null, status: 'ready' },
    { id: 'ctr_r', name: 'week', event: 'x.y', window: { kind: 'rolling_days', days: 7 }, filter: null, status: 'ready' },
    { id: 'ctr_p', name: 'month', event: 'x.y', window: { kind: 'period', period: 'month' }, filter: null, status: 'ready' },
  ];
  const day = 86_400_000;
  const counted = (customer: string, id: string, nowMs: number): Call => ({
    env: 'env_1',
    target: { by: 'key', key: customer },
    command: { kind: 'event.record', externalId: customer, clientEventId: id, name: 'x.y', occurredAtMs: nowMs, properties: {}, fp: 1, trust: 'merchant_asserted', source: { type: 'secret_key', id: 'key_test' }, rules: null, counters: { defs, timeZone: 'Europe/Paris' } },
    nowMs,
  });
  const countersOf = async (e: Engine, customer: string) => {
    const v = ok(await e.execute({ env: 'env_1', target: { by: 'key', key: customer }, command: { kind: 'customer.view' }, nowMs: 40 * day }));
    return v.kind === 'customer' ? v.customer.counters : {};
  };
  const a = await node(s);
  for (let i = 0; i < 30; i++) ok(await a.engine.execute(counted(`k${i % 3}`, `a-${i}`, i * day)));
  await a.placement.stop(); // snapshots
  const b = await node(s, 'n2');
  for (let i = 30; i < 40; i++) ok(await b.engine.execute(counted(`k${i % 3}`, `b-${i}`, i * day)));
  const expected = await Promise.all(['k0', 'k1', 'k2'].map((c) => countersOf(b.engine, c)));
  for (let p = 0; p < P; p++) await s.leases.release(p, 'n2', (await s.leases.list(P))[p]?.epoch ?? 0);
  const c = await node(s, 'n3');
  const rebuilt = await Promise.all(['k0', 'k1', 'k2'].map((x) => countersOf(c.engine, x)));
  t.same(rebuilt, expected, 'replay rebuilds identical counters');
  t.same(expected[0], { ctr_l: 14, ctr_r: 2, ctr_p: 3 }, 'k0 counted days 0, 3, ..., 39');
  await c.placement.stop();
});

t.test('a call that a closing partition did not apply is routed again, locally and when forwarded', async (t) => {
  const applied: Call[] = [];
  const done: CallResult = { ok: true, reply: { kind: 'done' } };
  const newOwner = {
    backlog: 0,
    submit: async (call: Call) => {
      applied.push(call);
      return done;
    },
  } as unknown as Partition;
  let owner: Partition | undefined;
  const closing = {
    backlog: 0,
    // Closes under the call (handed over): the new owner serves the partition from now on.
    submit: async () => {
      owner = newOwner;
      return closedResult;
    },
  } as unknown as Partition;
  const placement: Placement = { local: () => owner, recovering: () => undefined, remote: () => null, refresh: async () => {} };
  const engine = new Engine(P, placement, null, shared().journal);

  owner = closing;
  t.same(await engine.execute(ev('c-1', 'e-1')), done, 'answered by the new owner, not with the closed partition\'s error');
  t.equal(applied.length, 1, 'applied once');

  owner = closing;
  const forwarded = unpackMessage<unknown>(await engine.executeForwarded(packMessage(ev('c-2', 'e-2'))));
  t.same(forwarded, { ok: 'moved' }, 'a forwarded call goes back to its sender to be routed again');
  t.equal(applied.length, 1, 'and is not applied here');
});

t.test('a key released here is free at once: its stored row, not deleted yet, is never bound again', async (t) => {
  const s = shared();
  const saves = recordSaves(s);
  const n = await memoryNode(s, 'n1', 1, undefined, { snapshotDirtyActorsMax: 1, snapshotTailRecordsMax: 1_000_000, snapshotSweepMs: 20 });
  const first = ok(await n.engine.execute(ev('gone', 'g1')));
  await waitFor(() => saves.length > 0); // the key row 'gone' -> its customer is stored
  // From now on saves fail: the delete of that row stays pending.
  s.snapshots.saveMany = () => Promise.reject(new Error('storage down'));
  const id = first.kind === 'event' ? first.customerId : '';
  ok(await n.engine.execute({ env: 'env_1', target: { by: 'id', id }, command: { kind: 'customer.delete', eventsErased: 1 }, nowMs: 1000 }));
  const again = ok(await n.engine.execute(ev('gone', 'g2')));
  t.ok(again.kind === 'event' && again.customerId !== id, 'a new customer for the external id, not the erased one');
  await n.placement.stop();
});

t.test('a key bound and released between two saves is deleted by the save, not written back', async (t) => {
  const s = shared();
  const n = await node(s);
  const created = ok(await n.engine.execute(ev('brief', 'b1')));
  const id = created.kind === 'event' ? created.customerId : '';
  ok(await n.engine.execute({ env: 'env_1', target: { by: 'id', id }, command: { kind: 'customer.delete', eventsErased: 1 }, nowMs: 1000 }));
  const p = n.engine.partitionOfTarget('env_1', { by: 'key', key: 'brief' });
  const part = n.placement.local(p)!;
  part.requestSnapshot();
  await part.saved();
  t.same(await s.snapshots.lookupKeys('env_1', ['brief']), [], 'no stored row binds the external id to the erased customer');
  await n.placement.stop();
  // A restarted node looks the key up in storage: the external id is free, a new customer takes it.
  const m = await node(s, 'n2');
  const again = ok(await m.engine.execute(ev('brief', 'b2')));
  t.ok(again.kind === 'event' && again.customerId !== id, 'a new customer for the external id');
  await m.placement.stop();
});

t.test('a failed save keeps its key changes under the ones made since: the latest binding wins', async (t) => {
  const s = shared();
  const n = await node(s);
  const created = ok(await n.engine.execute(ev('turn', 't1')));
  const id = created.kind === 'event' ? created.customerId : '';
  const p = n.engine.partitionOfTarget('env_1', { by: 'key', key: 'turn' });
  const part = n.placement.local(p)!;
  // The save holding the binding fails; the customer is deleted (key released) while it is out.
  const real = s.snapshots.saveMany.bind(s.snapshots);
  let release: () => void = () => {};
  s.snapshots.saveMany = () =>
    new Promise((_, reject) => {
      release = () => reject(new Error('storage down'));
    });
  part.requestSnapshot();
  await new Promise((r) => setImmediate(r));
  ok(await n.engine.execute({ env: 'env_1', target: { by: 'id', id }, command: { kind: 'customer.delete', eventsErased: 1 }, nowMs: 1000 }));
  release();
  await part.saved();
  s.snapshots.saveMany = real;
  part.requestSnapshot();
  await part.saved();
  t.same(await s.snapshots.lookupKeys('env_1', ['turn']), [], 'the release, made after the failed capture, wins');
  await n.placement.stop();
});

t.test('passivation runs in slices: each examines at most its budget, and only clean idle actors go', async (t) => {
  const s = shared();
  const n = await memoryNode(s, 'n1', 1);
  for (let i = 0; i < 50; i++) ok(await n.engine.execute(ev(`pv${i}`, `pv-e${i}`)));
  const part = n.placement.local(0)!;
  part.requestSnapshot();
  await part.saved();
  // One customer changes after the save: dirty, so it must stay in memory.
  ok(await n.engine.execute({ ...ev('pv7', 'pv-e7-again'), nowMs: 2000 }));
  t.equal(part.activeActors, 50);

  const pass = part.passivation(1500, 30);
  const slices: number[] = [];
  for (let guard = 0; guard < 100; guard++) {
    const r = part.passivateSlice(pass, 8);
    slices.push(r.examined);
    if (r.done) break;
  }
  t.ok(slices.every((x) => x <= 8), `no slice examines more than its budget (${slices.join(',')})`);
  t.ok(slices.length >= 4, 'the pass took several slices');
  t.equal(pass.evicted, 30, 'the pass stops at its max');
  t.equal(part.activeActors, 20);

  // A second pass takes the rest of the idle, clean actors; the dirty one stays.
  const rest = part.passivation(1500, Number.POSITIVE_INFINITY);
  while (!part.passivateSlice(rest, 8).done) {
    // next slice
  }
  t.equal(part.activeActors, 1, 'only the dirty actor is left');
  const view = ok(await n.engine.execute({ env: 'env_1', target: { by: 'key', key: 'pv3' }, command: { kind: 'customer.view' }, nowMs: 3000 }));
  t.equal(view.kind === 'customer' && view.customer.eventCount, 1, 'a passivated customer is loaded again from its snapshot');
  await n.placement.stop();
});

t.test('the timer-driven passivation keeps the node at its cap, dropping clean actors idle for a second', async (t) => {
  const s = shared();
  const n = await memoryNode(s, 'n1', 1, undefined, { activeActorsMax: 100 });
  // Touched 5 s ago: not idle long enough for the 60 s pass, idle enough for the over-cap pass. (A
  // customer's creating command leaves it untouched, idle since ever: the second event touches it.)
  const fiveSecondsAgo = Date.now() - 5000;
  for (let i = 0; i < 300; i++) {
    ok(await n.engine.execute({ ...ev(`cap${i}`, `cap-e${i}`), nowMs: fiveSecondsAgo }));
    ok(await n.engine.execute({ ...ev(`cap${i}`, `cap-f${i}`), nowMs: fiveSecondsAgo }));
  }
  const part = n.placement.local(0)!;
  part.requestSnapshot();
  await part.saved();
  // One more, after the save: dirty, so it stays whatever the cap says.
  ok(await n.engine.execute({ ...ev('cap-dirty', 'cap-e-dirty'), nowMs: fiveSecondsAgo }));
  t.equal(part.activeActors, 301);
  await waitFor(() => part.activeActors <= 100).catch(() => {}); // the pass runs on a timer, late on a loaded box
  t.equal(part.activeActors, 100, 'the over-cap pass dropped exactly the excess');
  const view = ok(await n.engine.execute({ env: 'env_1', target: { by: 'key', key: 'cap-dirty' }, command: { kind: 'customer.view' }, nowMs: Date.now() }));
  t.equal(view.kind === 'customer' && view.customer.eventCount, 1, 'the dirty customer is still there');
  await n.placement.stop();
});

t.test('ingest gate: events wait while it is shut and go on when it opens; a wait past the bound answers 429; other commands pass', async (t) => {
  let open = true;
  const waiters: Array<(open: boolean) => void> = [];
  const gate = {
    get ingestOpen() {
      return open;
    },
    whenIngestOpen: (maxWaitMs: number) =>
      new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), maxWaitMs);
        waiters.push((o) => {
          clearTimeout(timer);
          resolve(o);
        });
      }),
  };
  const n = await memoryNode(shared(), 'n1', P, undefined, { ingest: { gate, maxWaitMs: 200 } });
  ok(await n.engine.execute(ev('g1', 'g-e1')));
  open = false;
  let settled = false;
  const held = n.engine.execute(ev('g1', 'g-e2')).then((r) => {
    settled = true;
    return r;
  });
  // Reads and operators' commands are not held.
  const view = ok(await n.engine.execute({ env: 'env_1', target: { by: 'key', key: 'g1' }, command: { kind: 'customer.view' }, nowMs: 1 }));
  t.equal(view.kind === 'customer' && view.customer.eventCount, 1, 'a view answers while events wait, without the held one');
  t.notOk(settled, 'the event waits');
  open = true;
  for (const w of waiters.splice(0)) w(true);
  t.equal(ok(await held).kind, 'event', 'and is recorded once the gate opens');

  open = false;
  const late = await n.engine.execute(ev('g2', 'g-e3'));
  t.match(late, { ok: false, code: 'rate_limited', retryAfterSeconds: 1 }, 'a wait past maxWaitMs is answered 429');
  open = true;
  const again = ok(await n.engine.execute(ev('g2', 'g-e3')));
  t.match(again, { kind: 'event', duplicate: false }, 'the refused event was not recorded: its retry is the first');
  await n.placement.stop();
});

/** Waits until the partition holding `key` is served again after a rebuild (a new Partition object). */
async function rebuilt(n: Awaited<ReturnType<typeof node>>, key: string, before: Partition): Promise<void> {
  const p = n.engine.partitionOfTarget('env_1', { by: 'key', key });
  for (const until = Date.now() + 10_000; Date.now() < until; ) {
    const now = n.placement.local(p);
    if (now !== undefined && now !== before) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`partition ${p} was not rebuilt`);
}

const viewOf = async (n: Awaited<ReturnType<typeof node>>, key: string) =>
  ok(await n.engine.execute({ env: 'env_1', target: { by: 'key', key }, command: { kind: 'customer.view' }, nowMs: 1 }));

t.test('an append the journal refuses fails its batch, and the partition is rebuilt from what was written', async (t) => {
  const s = shared();
  const real = s.journal.appendMany.bind(s.journal);
  let refuse = false;
  s.journal.appendMany = (items) => (refuse ? Promise.reject(new Error('connection lost')) : real(items));
  const n = await node(s);
  ok(await n.engine.execute(ev('poison-1', 'p1')));
  const p = n.engine.partitionOfTarget('env_1', { by: 'key', key: 'poison-1' });
  const before = n.placement.local(p)!;
  refuse = true;
  t.match(await n.engine.execute(ev('poison-1', 'p2')), { ok: false, code: 'internal_error' });
  refuse = false;
  await rebuilt(n, 'poison-1', before);
  const view = await viewOf(n, 'poison-1');
  t.equal(view.kind === 'customer' && view.customer.eventCount, 1, 'the unacknowledged event is not applied');
  ok(await n.engine.execute(ev('poison-1', 'p2')));
  const after = await viewOf(n, 'poison-1');
  t.equal(after.kind === 'customer' && after.customer.eventCount, 2, 'its retry is');
  await n.placement.stop();
});

t.test('a batch the journal cannot encode fails its callers; the node keeps serving and the partition is rebuilt', async (t) => {
  const s = shared();
  const n = await node(s);
  ok(await n.engine.execute(ev('enc-1', 'e1')));
  const p = n.engine.partitionOfTarget('env_1', { by: 'key', key: 'enc-1' });
  const before = n.placement.local(p)!;
  // Nested far deeper than the gateway lets through (64 levels): msgpack's encoder overflows the stack.
  let deep: unknown = 1;
  for (let i = 0; i < 50_000; i++) deep = [deep];
  const bad = ev('enc-1', 'e2');
  if (bad.command.kind === 'event.record') bad.command.properties = { deep };
  t.match(await n.engine.execute(bad), { ok: false, code: 'internal_error', message: /nothing was applied/ });
  await rebuilt(n, 'enc-1', before);
  const view = await viewOf(n, 'enc-1');
  t.equal(view.kind === 'customer' && view.customer.eventCount, 1, 'the event that could not be written is not applied');
  ok(await n.engine.execute(ev('enc-1', 'e3')));
  ok(await n.engine.execute(ev('enc-2', 'e4')));
  const after = await viewOf(n, 'enc-1');
  t.equal(after.kind === 'customer' && after.customer.eventCount, 2, 'later events of the customer are written');
  await n.placement.stop();
});
