// GroupBatcher: items submitted in one tick leave as one batch, items submitted while a batch is in
// flight leave together in the next one (one batch in flight), results come back to the right
// callers, itemsMax splits, and a failed batch is retried item by item so only the bad item fails.
import t from 'tap';
import { GroupBatcher } from '../../src/util/group-batcher.js';

function deferred<T>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

t.test('one tick, one batch; results go to their callers in order', async (t) => {
  const calls: number[][] = [];
  const b = new GroupBatcher<number, string>(async (items) => {
    calls.push([...items]);
    return items.map((i) => `r${i}`);
  }, { itemsMax: 100 });
  const results = await Promise.all([1, 2, 3].map((i) => b.submit(i)));
  t.same(results, ['r1', 'r2', 'r3']);
  t.same(calls, [[1, 2, 3]]);
});

t.test('items arriving while a batch is in flight leave together in the next batch, never two in flight', async (t) => {
  const calls: number[][] = [];
  const gates: Array<ReturnType<typeof deferred<void>>> = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const b = new GroupBatcher<number, number>(async (items) => {
    calls.push([...items]);
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    const g = deferred<void>();
    gates.push(g);
    await g.promise;
    inFlight--;
    return items.map((i) => i * 10);
  }, { itemsMax: 100 });
  const first = b.submit(1);
  await new Promise((r) => setImmediate(r));
  t.equal(calls.length, 1, 'the first batch is in flight');
  const later = [b.submit(2), b.submit(3)];
  await new Promise((r) => setImmediate(r));
  const evenLater = b.submit(4);
  await new Promise((r) => setImmediate(r));
  t.equal(calls.length, 1, 'nothing else leaves while the first batch is in flight');
  t.equal(b.waiting, 3);
  gates[0]!.resolve();
  t.equal(await first, 10);
  while (gates.length < 2) await new Promise((r) => setImmediate(r));
  t.same(calls[1], [2, 3, 4], 'everything that waited leaves as one batch');
  gates[1]!.resolve();
  t.same(await Promise.all([...later, evenLater]), [20, 30, 40]);
  t.equal(maxInFlight, 1);
});

t.test('itemsMax splits a long queue', async (t) => {
  const calls: number[][] = [];
  const b = new GroupBatcher<number, number>(async (items) => {
    calls.push([...items]);
    return [...items];
  }, { itemsMax: 2 });
  t.same(await Promise.all([1, 2, 3, 4, 5].map((i) => b.submit(i))), [1, 2, 3, 4, 5]);
  t.same(calls, [[1, 2], [3, 4], [5]]);
});

t.test('a failed batch is retried item by item: only the bad item fails', async (t) => {
  const calls: number[][] = [];
  const b = new GroupBatcher<number, number>(async (items) => {
    calls.push([...items]);
    if (items.includes(13)) throw new Error('bad item 13');
    return items.map((i) => i + 1);
  }, { itemsMax: 100 });
  const results = await Promise.allSettled([1, 13, 2].map((i) => b.submit(i)));
  t.same(
    results.map((r) => r.status),
    ['fulfilled', 'rejected', 'fulfilled'],
  );
  t.equal((results[0] as PromiseFulfilledResult<number>).value, 2);
  t.equal((results[2] as PromiseFulfilledResult<number>).value, 3);
  t.match((results[1] as PromiseRejectedResult).reason, { message: 'bad item 13' });
  t.same(calls[0], [1, 13, 2]);
  t.same(calls.slice(1).sort(), [[1], [13], [2]].sort(), 'then each alone');
  // The batcher keeps working afterwards.
  t.equal(await b.submit(5), 6);
});

t.test('a batch answering the wrong number of results is never misrouted: its items are asked again one by one', async (t) => {
  const calls: number[][] = [];
  const b = new GroupBatcher<number, number>(async (items) => {
    calls.push([...items]);
    return [items[0]! * 10];
  }, { itemsMax: 100 });
  t.same(await Promise.all([b.submit(1), b.submit(2)]), [10, 20]);
  t.same(calls, [[1, 2], [1], [2]]);
});
