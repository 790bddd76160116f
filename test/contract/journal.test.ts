// Contract suite of the Journal port, run against every adapter: Redis stream, fsynced file,
// in memory. Each case gets a fresh journal (own Redis prefix / own directory) and a Leases of the
// same kind for fencing. The file journal's extra cases (reopen, torn tail, segment deletion,
// group commit) follow the shared suite. Nothing here reads an adapter's private state.
import { randomBytes } from 'node:crypto';
import { appendFile, mkdtemp, open, readdir, rm, writeFile, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { FileJournal } from '../../src/persistence/file/file-journal.js';
import { MemoryJournal } from '../../src/persistence/memory/journal.js';
import { MemoryLeases } from '../../src/persistence/memory/leases.js';
import {
  compareOffsets,
  FencedError,
  type Journal,
  type JournalEntry,
  type Leases,
  type Offset,
  offsetZero,
} from '../../src/persistence/ports.js';
import { RedisJournal } from '../../src/persistence/redis/redis-journal.js';
import { RedisLeases } from '../../src/persistence/redis/redis-leases.js';
import { redisForTest, testRedisUrl } from '../helpers/redis.js';

interface Harness {
  journal: Journal;
  leases: Leases;
}

type Factory = (t: Test) => Promise<Harness>;

const ttlMs = 60_000;

async function tempDir(t: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'journal-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

const adapters: Array<[string, Factory]> = [
  [
    'redis',
    async (t) => {
      const { redis, prefix } = redisForTest(t, 'journal');
      // The journal owns its connection (from a URL): a leak in close() would hang this file.
      const journal = new RedisJournal(testRedisUrl, prefix);
      t.teardown(() => journal.close());
      return { journal, leases: new RedisLeases(redis, prefix) };
    },
  ],
  [
    'file',
    async (t) => {
      const leases = new MemoryLeases();
      const journal = await FileJournal.open(await tempDir(t), { currentEpoch: (p) => leases.currentEpoch(p) });
      t.teardown(() => journal.close());
      return { journal, leases };
    },
  ],
  [
    'memory',
    async (t) => {
      const leases = new MemoryLeases();
      const journal = new MemoryJournal((p) => leases.currentEpoch(p));
      t.teardown(() => journal.close());
      return { journal, leases };
    },
  ],
];

function bytes(s: string): Uint8Array {
  return new TextEncoder().encode(s);
}

function text(b: Uint8Array): string {
  return new TextDecoder().decode(b);
}

async function readAll(journal: Journal, partition: number, page = 1000): Promise<JournalEntry[]> {
  const out: JournalEntry[] = [];
  let after: Offset = offsetZero;
  for (;;) {
    const batch = await journal.read(partition, after, page);
    if (batch.length === 0) return out;
    out.push(...batch);
    after = batch[batch.length - 1]!.offset;
  }
}

async function own(leases: Leases, partition: number, nodeId = 'node-a'): Promise<number> {
  const epoch = await leases.acquire(partition, nodeId, ttlMs);
  if (epoch === null) throw new Error(`partition ${partition} is held by another node`);
  return epoch;
}

function journalContract(name: string, make: Factory): void {
  t.test(`journal contract: ${name}`, async (t) => {
    t.test('an empty partition has no entries and last() is offsetZero', async (t) => {
      const { journal } = await make(t);
      t.equal(await journal.last(7), offsetZero);
      t.same(await journal.read(7, offsetZero, 10), []);
    });

    t.test('offsets strictly increase per partition and read(after, count) is exact', async (t) => {
      const { journal, leases } = await make(t);
      const epoch = await own(leases, 3);
      const offsets: Offset[] = [];
      for (let i = 0; i < 10; i++) offsets.push(await journal.append(3, epoch, bytes(`e${i}`)));
      for (let i = 1; i < offsets.length; i++) {
        t.equal(compareOffsets(offsets[i - 1]!, offsets[i]!), -1, `offset ${i} > offset ${i - 1}`);
      }
      t.ok(compareOffsets(offsetZero, offsets[0]!) < 0, 'every offset is after offsetZero');
      t.equal(await journal.last(3), offsets[9]);

      const all = await journal.read(3, offsetZero, 100);
      t.same(
        all.map((e) => [e.offset, text(e.payload)]),
        offsets.map((o, i) => [o, `e${i}`]),
      );
      const middle = await journal.read(3, offsets[3]!, 4);
      t.same(
        middle.map((e) => e.offset),
        offsets.slice(4, 8),
        'strictly after `after`, at most `count`',
      );
      t.same(await journal.read(3, offsets[9]!, 10), [], 'nothing after the last entry');
      t.same(await journal.read(3, offsetZero, 0), [], 'count 0 reads nothing');
      t.same(await journal.read(4, offsetZero, 10), [], 'other partitions are separate');

      const paged = await readAll(journal, 3, 3);
      t.same(
        paged.map((e) => e.offset),
        offsets,
        'paging by 3 visits every entry once, in order',
      );
    });

    t.test('binary payloads round-trip byte for byte', async (t) => {
      const { journal, leases } = await make(t);
      const epoch = await own(leases, 1);
      const every = new Uint8Array(256).map((_, i) => i);
      const backing = new Uint8Array(64).map((_, i) => 255 - i);
      const payloads: Uint8Array[] = [
        every,
        new Uint8Array(0),
        new Uint8Array([0xff, 0xfe, 0x00, 0xc3, 0x28]),
        backing.subarray(10, 20),
        randomBytes(1024 * 1024),
      ];
      for (const p of payloads) await journal.append(1, epoch, p);
      const back = await journal.read(1, offsetZero, 10);
      t.equal(back.length, payloads.length);
      for (let i = 0; i < payloads.length; i++) {
        t.ok(back[i]!.payload instanceof Uint8Array, `payload ${i} is bytes`);
        t.ok(Buffer.from(back[i]!.payload).equals(Buffer.from(payloads[i]!)), `payload ${i} is byte-exact`);
      }
    });

    t.test('trim removes entries <= upTo and keeps later ones; offsets keep increasing', async (t) => {
      const { journal, leases } = await make(t);
      const epoch = await own(leases, 2);
      const offsets: Offset[] = [];
      for (let i = 0; i < 6; i++) offsets.push(await journal.append(2, epoch, bytes(`t${i}`)));
      await journal.trim(2, offsetZero);
      t.equal((await journal.read(2, offsetZero, 10)).length, 6, 'trim(offsetZero) removes nothing');
      await journal.trim(2, offsets[2]!);
      const left = await journal.read(2, offsetZero, 10);
      t.same(
        left.map((e) => text(e.payload)),
        ['t3', 't4', 't5'],
      );
      t.equal(await journal.last(2), offsets[5]);
      await journal.trim(2, offsets[5]!);
      t.same(await journal.read(2, offsetZero, 10), [], 'trim up to the last entry empties the partition');
      t.equal(await journal.last(2), offsetZero);
      const next = await journal.append(2, epoch, bytes('after'));
      t.equal(compareOffsets(next, offsets[5]!), 1, 'a new offset is greater than every trimmed one');
      t.same(
        (await journal.read(2, offsetZero, 10)).map((e) => text(e.payload)),
        ['after'],
      );
    });

    t.test('fencing: a wrong or stale epoch rejects FencedError and appends nothing', async (t) => {
      const { journal, leases } = await make(t);
      await t.rejects(journal.append(5, 1, bytes('no lease')), FencedError, 'no lease at all');
      const epoch = await own(leases, 5, 'node-a');
      await t.rejects(journal.append(5, epoch + 1, bytes('future')), FencedError);
      await t.rejects(journal.append(5, epoch - 1, bytes('past')), FencedError);
      t.same(await journal.read(5, offsetZero, 10), [], 'fenced appends left nothing');
      const kept = await journal.append(5, epoch, bytes('a1'));

      await leases.release(5, 'node-a', epoch);
      await t.rejects(journal.append(5, epoch, bytes('released')), FencedError, 'after release');
      const epochB = await own(leases, 5, 'node-b');
      t.ok(epochB > epoch, 'the new owner has a greater epoch');
      const err = await journal.append(5, epoch, bytes('old owner')).catch((e: unknown) => e);
      t.ok(err instanceof FencedError, 'the old epoch is refused after another node acquired');
      t.equal((err as FencedError).partition, 5);
      t.equal((err as FencedError).epoch, epoch);
      const b1 = await journal.append(5, epochB, bytes('b1'));
      t.equal(compareOffsets(b1, kept), 1);
      t.same(
        (await journal.read(5, offsetZero, 10)).map((e) => text(e.payload)),
        ['a1', 'b1'],
      );
      // A fence on one partition does not touch another.
      const epoch6 = await own(leases, 6, 'node-a');
      t.ok(await journal.append(6, epoch6, bytes('p6')));
    });

    t.test('appendMany: one entry per partition; a fenced partition gets nothing, the others do', async (t) => {
      const { journal, leases } = await make(t);
      const e7 = await own(leases, 7);
      const e8 = await own(leases, 8);
      const e9 = await own(leases, 9);
      const results = await journal.appendMany([
        { partition: 7, epoch: e7, payload: bytes('m7') },
        { partition: 8, epoch: e8 + 1, payload: bytes('m8-stale') },
        { partition: 9, epoch: e9, payload: bytes('m9') },
      ]);
      t.equal(results.length, 3);
      t.equal(typeof results[0], 'string');
      t.ok(results[1] instanceof FencedError, 'the wrong epoch is fenced');
      t.equal(typeof results[2], 'string');
      t.same((await journal.read(7, offsetZero, 10)).map((e) => [e.offset, text(e.payload)]), [[results[0], 'm7']]);
      t.same(await journal.read(8, offsetZero, 10), [], 'nothing appended under a stale epoch');
      t.same((await journal.read(9, offsetZero, 10)).map((e) => text(e.payload)), ['m9']);
      const next = await journal.appendMany([{ partition: 7, epoch: e7, payload: bytes('m7b') }]);
      t.ok(compareOffsets(next[0] as string, results[0] as string) > 0, 'offsets keep increasing');
      t.same(await journal.appendMany([]), []);
    });

    t.test('concurrent appends on 50 partitions resolve in call order and are all readable', async (t) => {
      const { journal, leases } = await make(t);
      const partitions = 50;
      const perPartition = 20;
      const epochs = await Promise.all(Array.from({ length: partitions }, (_, p) => own(leases, p)));
      const resolved: string[][] = Array.from({ length: partitions }, () => []);
      const calls: Array<Promise<Offset>> = [];
      const callOffsets: Offset[][] = Array.from({ length: partitions }, () => []);
      // Issued in one tick, interleaved across partitions, as the engine's flush does.
      for (let i = 0; i < perPartition; i++) {
        for (let p = 0; p < partitions; p++) {
          const label = `${p}:${i}`;
          calls.push(
            journal.append(p, epochs[p]!, bytes(label)).then((o) => {
              resolved[p]!.push(label);
              callOffsets[p]![i] = o;
              return o;
            }),
          );
        }
      }
      await Promise.all(calls);
      let inOrder = true;
      let increasing = true;
      let readable = true;
      for (let p = 0; p < partitions; p++) {
        const expected = Array.from({ length: perPartition }, (_, i) => `${p}:${i}`);
        if (resolved[p]!.join() !== expected.join()) inOrder = false;
        for (let i = 1; i < perPartition; i++) {
          if (compareOffsets(callOffsets[p]![i - 1]!, callOffsets[p]![i]!) >= 0) increasing = false;
        }
        const back = await journal.read(p, offsetZero, 100);
        if (back.map((e) => text(e.payload)).join() !== expected.join()) readable = false;
        if (back.map((e) => e.offset).join() !== callOffsets[p]!.join()) readable = false;
      }
      t.ok(inOrder, 'each partition resolves in call order');
      t.ok(increasing, 'offsets increase in call order');
      t.ok(readable, 'every entry reads back under its offset, in order');
    });
  });
}

for (const [name, make] of adapters) journalContract(name, make);

// ---------------------------------------------------------------------------------------------
// File journal: durability and space.

async function segmentFiles(dir: string): Promise<string[]> {
  return (await readdir(dir)).filter((n) => n.startsWith('segment-')).sort();
}

t.test('file journal: close and reopen keeps every acked entry and continues the offsets', async (t) => {
  const dir = await tempDir(t);
  const leases = new MemoryLeases();
  const currentEpoch = (p: number) => leases.currentEpoch(p);
  const e0 = await own(leases, 0);
  const e9 = await own(leases, 9);
  let j = await FileJournal.open(dir, { currentEpoch });
  const acked: Array<[number, Offset, string]> = [];
  for (let i = 0; i < 30; i++) {
    const p = i % 2 === 0 ? 0 : 9;
    acked.push([p, await j.append(p, p === 0 ? e0 : e9, bytes(`r${i}`)), `r${i}`]);
  }
  await j.close();
  await t.rejects(j.append(0, e0, bytes('closed')), /closed/, 'a closed journal refuses appends');

  j = await FileJournal.open(dir, { currentEpoch });
  t.teardown(() => j.close());
  for (const p of [0, 9]) {
    const back = await j.read(p, offsetZero, 100);
    t.same(
      back.map((e) => [p, e.offset, text(e.payload)]),
      acked.filter((a) => a[0] === p),
      `partition ${p} intact`,
    );
  }
  const next = await j.append(0, e0, bytes('after reopen'));
  t.equal(compareOffsets(next, await j.last(0)), 0);
  t.equal(compareOffsets(next, acked[28]![1]), 1, 'offsets continue past the reopened ones');
});

t.test('file journal: a torn tail is cut off and earlier entries stay intact', async (t) => {
  const dir = await tempDir(t);
  const leases = new MemoryLeases();
  const currentEpoch = (p: number) => leases.currentEpoch(p);
  const epoch = await own(leases, 4);
  let j = await FileJournal.open(dir, { currentEpoch });
  const offsets: Offset[] = [];
  for (let i = 0; i < 5; i++) offsets.push(await j.append(4, epoch, bytes(`ok${i}`)));
  await j.close();

  const [segment] = await segmentFiles(dir);
  const path = join(dir, segment!);
  const good = (await readFile(path)).length;
  // A plausible header (small length) followed by too few bytes, then random garbage.
  const torn = Buffer.alloc(12);
  torn.writeUInt32LE(100, 0);
  await appendFile(path, Buffer.concat([torn, randomBytes(37)]));

  j = await FileJournal.open(dir, { currentEpoch });
  t.same(
    (await j.read(4, offsetZero, 100)).map((e) => text(e.payload)),
    ['ok0', 'ok1', 'ok2', 'ok3', 'ok4'],
  );
  t.equal((await readFile(path)).length, good, 'the garbage was truncated away');
  const after = await j.append(4, epoch, bytes('new'));
  t.equal(compareOffsets(after, offsets[4]!), 1);
  await j.close();

  // Garbage that overwrites the middle of the last frame: that frame (never acked in a real tear) goes.
  const fh = await open(path, 'r+');
  const size = (await fh.stat()).size;
  await fh.write(Buffer.from([0xde, 0xad]), 0, 2, size - 2);
  await fh.close();
  j = await FileJournal.open(dir, { currentEpoch });
  t.teardown(() => j.close());
  t.same(
    (await j.read(4, offsetZero, 100)).map((e) => text(e.payload)),
    ['ok0', 'ok1', 'ok2', 'ok3', 'ok4'],
    'a corrupt last frame is discarded, the ones before it kept',
  );
  const again = await j.append(4, epoch, bytes('again'));
  t.equal(compareOffsets(again, offsets[4]!), 1);
  t.same(
    (await j.read(4, offsets[4]!, 10)).map((e) => text(e.payload)),
    ['again'],
  );
});

t.test('file journal: a bad frame in an older segment is corruption and open refuses', async (t) => {
  const dir = await tempDir(t);
  const leases = new MemoryLeases();
  const currentEpoch = (p: number) => leases.currentEpoch(p);
  const epoch = await own(leases, 0);
  const j = await FileJournal.open(dir, { currentEpoch, segmentBytesMax: 2048 });
  for (let i = 0; i < 8; i++) await j.append(0, epoch, new Uint8Array(900).fill(i));
  await j.close();
  const files = await segmentFiles(dir);
  t.ok(files.length >= 3, 'several segments');
  const fh = await open(join(dir, files[0]!), 'r+');
  await fh.write(Buffer.from([0x55]), 0, 1, 30);
  await fh.close();
  await t.rejects(FileJournal.open(dir, { currentEpoch }), /not the last/);
});

t.test('file journal: segments whose entries are all trimmed are deleted, also across reopen', async (t) => {
  const dir = await tempDir(t);
  const leases = new MemoryLeases();
  const currentEpoch = (p: number) => leases.currentEpoch(p);
  const ea = await own(leases, 1);
  const eb = await own(leases, 2);
  let j = await FileJournal.open(dir, { currentEpoch, segmentBytesMax: 4096 });
  const a: Offset[] = [];
  const b: Offset[] = [];
  for (let i = 0; i < 40; i++) {
    a.push(await j.append(1, ea, new Uint8Array(500).fill(1)));
    b.push(await j.append(2, eb, new Uint8Array(500).fill(2)));
  }
  const before = await segmentFiles(dir);
  t.ok(before.length >= 8, `segments rotate (${before.length})`);

  await j.trim(1, a[39]!);
  t.equal((await segmentFiles(dir)).length, before.length, 'partition 2 still lives in every segment');
  await j.trim(2, b[29]!);
  const after = await segmentFiles(dir);
  t.ok(after.length < before.length && after.length <= 4, `fully trimmed segments are gone (${after.length})`);
  t.same(after, before.slice(before.length - after.length), 'the oldest segments went');
  t.same(
    (await j.read(2, offsetZero, 100)).map((e) => e.offset),
    b.slice(30),
  );
  t.same(await j.read(1, offsetZero, 100), []);
  await j.close();

  j = await FileJournal.open(dir, { currentEpoch, segmentBytesMax: 4096 });
  t.teardown(() => j.close());
  t.same(await j.read(1, offsetZero, 100), [], 'the trim watermark survives reopen');
  t.same(
    (await j.read(2, offsetZero, 100)).map((e) => e.offset),
    b.slice(30),
  );
  const next = await j.append(1, ea, bytes('fresh'));
  t.equal(compareOffsets(next, a[39]!), 1, 'a fully trimmed partition does not reuse offsets after reopen');
});

t.test('file journal: appends of one tick across partitions share one write and one fdatasync', async (t) => {
  const dir = await tempDir(t);
  const leases = new MemoryLeases();
  const j = await FileJournal.open(dir, { currentEpoch: (p) => leases.currentEpoch(p) });
  t.teardown(() => j.close());
  const epochs = await Promise.all(Array.from({ length: 50 }, (_, p) => own(leases, p)));
  // Count calls on Node's FileHandle (not on the journal), restored afterwards.
  const probePath = join(dir, 'probe');
  await writeFile(probePath, '');
  const probe = await open(probePath, 'r');
  const proto = Object.getPrototypeOf(probe) as Record<string, (...args: unknown[]) => unknown>;
  await probe.close();
  const counts = { writev: 0, write: 0, datasync: 0 };
  const originals = { writev: proto.writev!, write: proto.write!, datasync: proto.datasync! };
  for (const k of ['writev', 'write', 'datasync'] as const) {
    proto[k] = function (this: unknown, ...args: unknown[]) {
      counts[k]++;
      return originals[k].apply(this, args);
    };
  }
  t.teardown(() => Object.assign(proto, originals));
  await Promise.all(epochs.map((e, p) => j.append(p, e, bytes(`p${p}`))));
  Object.assign(proto, originals);
  t.same(counts, { writev: 1, write: 0, datasync: 1 }, 'one write and one fdatasync for the group');
  for (let p = 0; p < 50; p++) t.equal((await j.read(p, offsetZero, 10)).length, 1);
});

t.test('redis journal: appendMany sends one script call for every partition of a group commit, at once', async (t) => {
  const { redis, prefix } = redisForTest(t, 'journal');
  const journal = new RedisJournal(redis, prefix);
  const leases = new RedisLeases(redis, prefix);
  const epochs = await Promise.all(Array.from({ length: 50 }, (_, p) => own(leases, p)));
  // A first call loads the script into a fresh Redis (EVALSHA, then EVAL on NOSCRIPT).
  await journal.appendMany([{ partition: 60, epoch: await own(leases, 60), payload: bytes('warm') }]);
  const sent: string[] = [];
  const real = redis.sendCommand.bind(redis);
  redis.sendCommand = ((cmd: { name: string }, stream?: unknown) => {
    sent.push(cmd.name);
    return real(cmd as Parameters<typeof real>[0], stream as Parameters<typeof real>[1]);
  }) as typeof redis.sendCommand;
  t.teardown(() => {
    redis.sendCommand = real;
  });
  const pending = journal.appendMany(epochs.map((e, p) => ({ partition: p, epoch: e, payload: bytes(`p${p}`) })));
  t.equal(redis.autoPipelineQueueSize, 0, 'sent in the calling tick, not queued for the next one');
  const offsets = await pending;
  redis.sendCommand = real;
  t.equal(sent.length, 1, `one command for fifty partitions (sent: ${sent.join(', ')})`);
  t.ok(offsets.every((o) => typeof o === 'string'), 'every partition got its offset');
  for (let p = 0; p < 50; p++) t.same((await journal.read(p, offsetZero, 10)).map((e) => Buffer.from(e.payload).toString()), [`p${p}`]);
});
