// The projector feeds the read model every acknowledged record exactly once (idempotent writer),
// in memory while it keeps up, from the journal once it falls behind its memory bound.
import { pino } from 'pino';
import t from 'tap';
import { encodeEntry, type JournalRecord } from '../../src/actors/codec.js';
import { MemoryJournal } from '../../src/persistence/memory/journal.js';
import { compareOffsets, type Offset } from '../../src/persistence/ports.js';
import type { Projection } from '../../src/persistence/sql/read-model.js';
import { Projector, type ReadModelWriter, toProjections } from '../../src/projector/projector.js';

class FakeReadModel implements ReadModelWriter {
  readonly offsets = new Map<number, Offset>();
  readonly events: string[] = [];
  /** Partitions of each applyMany call (one call is one transaction). */
  readonly transactions: number[][] = [];
  async applyMany(batches: Array<{ partition: number; offset: Offset; projections: Projection[] }>): Promise<void> {
    this.transactions.push(batches.map((b) => b.partition));
    await new Promise((r) => setTimeout(r, 1));
    for (const b of batches) {
      if (compareOffsets(b.offset, this.offsets.get(b.partition) ?? '0') <= 0) continue;
      for (const p of b.projections) if (p.kind === 'event.insert') this.events.push(p.clientEventId);
      this.offsets.set(b.partition, b.offset);
    }
  }
  async projectedOffset(partition: number): Promise<Offset> {
    return this.offsets.get(partition) ?? '0';
  }
}

const record = (i: number): JournalRecord => [
  'env',
  `cust_${i % 3}`,
  [{ kind: 'event.recorded', id: `evt_${i}`, clientEventId: `e${i}`, name: 'x.y', occurredAtMs: 1, receivedAtMs: 2, properties: {}, fp: i }],
];

t.test('every acknowledged record is projected once, across the in-memory path and journal catch-up', async (t) => {
  const journal = new MemoryJournal(() => 1);
  const rm = new FakeReadModel();
  const projector = new Projector(rm, journal, pino({ level: 'silent' }), { laneRecordsMax: 50, totalRecordsMax: 80 });
  for (const p of [0, 1]) await projector.projectedOffset(p);
  projector.start();
  let n = 0;
  for (let round = 0; round < 40; round++) {
    for (const p of [0, 1]) {
      const records = [record(n++), record(n++), record(n++)];
      const offset = await journal.append(p, 1, encodeEntry(records));
      projector.onAcked(p, offset, records);
    }
    if (round % 7 === 0) await new Promise((r) => setTimeout(r, 2));
  }
  await projector.drain();
  await projector.stop();
  t.equal(rm.events.length, n, 'nothing lost');
  t.equal(new Set(rm.events).size, n, 'nothing twice');
  t.ok(projector.catchUps > 0, `the journal catch-up path ran (${projector.catchUps} times)`);
});

t.test('lanes catching up are read together and written a few lanes per transaction', async (t) => {
  const journal = new MemoryJournal(() => 1);
  const rm = new FakeReadModel();
  // A lane bound of 1 record: every partition's first ack sends it to the journal catch-up.
  const projector = new Projector(rm, journal, pino({ level: 'silent' }), { laneRecordsMax: 1 });
  const partitions = 20;
  for (let p = 0; p < partitions; p++) await projector.projectedOffset(p);
  let n = 0;
  for (let p = 0; p < partitions; p++) {
    const records = [record(n++), record(n++)];
    projector.onAcked(p, await journal.append(p, 1, encodeEntry(records)), records);
  }
  t.equal(projector.catchUps, partitions, 'every lane catches up from the journal');
  await projector.drain();
  t.equal(rm.events.length, n, 'every record projected');
  t.same(
    rm.transactions.map((ps) => ps.length),
    [8, 8, 4],
    'twenty lanes in three transactions (one per lane before)',
  );
  await projector.stop();
});

t.test('recovery queues a short backlog and leaves a long one to the journal catch-up', async (t) => {
  const journal = new MemoryJournal(() => 1);
  const rm = new FakeReadModel();
  const projector = new Projector(rm, journal, pino({ level: 'silent' }));
  await projector.projectedOffset(0);
  await projector.projectedOffset(1);
  let n = 0;
  const replay = async (p: number, entries: number) => {
    let feeding = true;
    for (let i = 0; i < entries; i++) {
      const records = Array.from({ length: 100 }, () => record(n++));
      const offset = await journal.append(p, 1, encodeEntry(records));
      if (feeding) feeding = projector.onReplayed(p, offset, records);
    }
    return feeding;
  };
  t.equal(await replay(0, 5), true, 'a 500-record backlog is queued in memory');
  t.equal(await replay(1, 30), false, 'a 3,000-record backlog is not: the feed stops');
  t.equal(projector.catchUps, 1, 'partition 1 catches up from the journal');
  await projector.drain();
  t.equal(rm.events.length, n, 'both backlogs projected');
  t.equal(new Set(rm.events).size, n, 'nothing twice');

  const behind = new Projector(rm, journal, pino({ level: 'silent' }));
  await behind.projectedOffset(2);
  const earlyId = `e${n}`;
  await journal.append(2, 1, encodeEntry([record(n++)]));
  t.equal(behind.onReplayed(2, '0', null), false, 'a backlog before the checkpoint goes to the journal at once');
  await behind.drain();
  t.ok(rm.events.includes(earlyId), 'read from the journal');
});

t.test('an ack that races the last empty catch-up read is still projected', async (t) => {
  const journal = new MemoryJournal(() => 1);
  const rm = new FakeReadModel();
  // The read answers empty, then the append is acknowledged before the projector sees the answer.
  let raceOnce: (() => Promise<void>) | null = null;
  const racing = Object.create(journal) as MemoryJournal;
  racing.read = async (partition, after, count) => {
    const out = await journal.read(partition, after, count);
    if (out.length === 0 && raceOnce) {
      const race = raceOnce;
      raceOnce = null;
      await race();
    }
    return out;
  };
  const projector = new Projector(rm, racing, pino({ level: 'silent' }), { laneRecordsMax: 1 });
  await projector.projectedOffset(0);
  const first = [record(0), record(1)];
  projector.onAcked(0, await journal.append(0, 1, encodeEntry(first)), first);
  t.equal(projector.catchUps, 1, 'over the lane bound: catching up from the journal');
  const late = [record(2)];
  raceOnce = async () => {
    projector.onAcked(0, await journal.append(0, 1, encodeEntry(late)), late);
  };
  await projector.drain();
  t.same(rm.events, ['e0', 'e1', 'e2'], 'the raced entry is read on the next cycle, not skipped');
});

t.test('cycles run at the configured interval; a drain projects at once', async (t) => {
  const journal = new MemoryJournal(() => 1);
  const rm = new FakeReadModel();
  const projector = new Projector(rm, journal, pino({ level: 'silent' }), { cycleMs: 150 });
  await projector.projectedOffset(0);
  projector.start();
  const first = [record(0)];
  projector.onAcked(0, await journal.append(0, 1, encodeEntry(first)), first);
  await new Promise((r) => setTimeout(r, 40));
  t.same(rm.events, [], 'not before the first cycle (150 ms)');
  // Polled: a loaded CI box may run the cycle's timer late.
  for (const until = Date.now() + 5000; rm.events.length === 0 && Date.now() < until; ) await new Promise((r) => setTimeout(r, 10));
  t.same(rm.events, ['e0'], 'projected by a cycle');
  const second = [record(1)];
  projector.onAcked(0, await journal.append(0, 1, encodeEntry(second)), second);
  await projector.drain();
  t.same(rm.events, ['e0', 'e1'], 'a reader draining does not wait for the cycle');
  await projector.stop();
});

t.test('counter.counted marks its event row; tier facts become customer tier rows', async (t) => {
  const out: Projection[] = [];
  toProjections(
    [
      [
        'env',
        'cust_1',
        [
          { kind: 'event.recorded', id: 'evt_1', clientEventId: 'e1', name: 'purchase', occurredAtMs: 1, receivedAtMs: 2, properties: {}, fp: 1 },
          { kind: 'counter.counted', eventId: 'evt_1', bumps: [{ id: 'ctr_a', w: 'l' }, { id: 'ctr_b', w: 'r', d: 1, days: 7 }] },
          { kind: 'tier.changed', programId: 'tp_1', programKey: 's', level: 'gold', levelTitle: 'Gold', previousLevel: 'bronze', previousLevelTitle: 'Bronze', direction: 'up', value: 9, atMs: 5, nextDowngradeCheckMs: 99 },
          { kind: 'tier.downgrade_check_scheduled', programId: 'tp_1', nextDowngradeCheckMs: 199, atMs: 99 },
        ],
      ],
    ],
    out,
  );
  t.match(out, [
    { kind: 'event.insert', id: 'evt_1', counted: ['ctr_a', 'ctr_b'] },
    { kind: 'tier.set', customerId: 'cust_1', programId: 'tp_1', level: 'gold', sinceMs: 5, nextCheckMs: 99 },
    { kind: 'tier.set', programId: 'tp_1', level: null, nextCheckMs: 199 },
  ]);
  t.equal(out.length, 3, 'the counter marker adds no projection of its own');
});

t.test("event.answered puts the sync answer's effects on its event row, after the facts between them", async (t) => {
  const out: Projection[] = [];
  const effects = [{ type: 'rule.fired', ruleId: 'rule_1', version: 1 }];
  const recorded = (n: number) => ({ kind: 'event.recorded', id: `evt_${n}`, clientEventId: `e${n}`, name: 'x.y', occurredAtMs: 1, receivedAtMs: 2, properties: {}, fp: n });
  toProjections(
    [
      [
        'env',
        'cust_1',
        [
          recorded(1),
          { kind: 'tier.downgrade_check_scheduled', programId: 'tp_1', nextDowngradeCheckMs: 199, atMs: 99 },
          { kind: 'event.answered', clientEventId: 'e1', effects },
          recorded(2),
        ],
      ],
      ['env', 'cust_2', [{ kind: 'event.answered', clientEventId: 'e2', effects }]],
    ] as JournalRecord[],
    out,
  );
  t.match(out, [{ kind: 'event.insert', id: 'evt_1', effects }, { kind: 'tier.set' }, { kind: 'event.insert', id: 'evt_2' }]);
  t.equal((out[2] as { effects?: unknown }).effects, undefined, 'an event answered 202 carries none; an answer of another record marks nothing');
  t.equal(out.length, 3);
});

/** A read model whose writes wait until `release()` (the database falling behind). */
class HeldReadModel extends FakeReadModel {
  private gate: Promise<void> | null = null;
  private open: (() => void) | null = null;
  hold(): void {
    this.gate = new Promise((r) => (this.open = r));
  }
  release(): void {
    this.open?.();
    this.gate = null;
  }
  override async applyMany(batches: Array<{ partition: number; offset: Offset; projections: Projection[] }>): Promise<void> {
    while (this.gate) await this.gate;
    await super.applyMany(batches);
  }
}

t.test('lag bound: past lagRecordsMax unprojected records ingestion waits, and goes on at 80 % of it', async (t) => {
  const journal = new MemoryJournal(() => 1);
  const rm = new HeldReadModel();
  const projector = new Projector(rm, journal, pino({ level: 'silent' }), { lagRecordsMax: 10, laneRecordsMax: 4 });
  for (const p of [0, 1]) await projector.projectedOffset(p);
  rm.hold();
  let n = 0;
  const ack = async (p: number, count: number) => {
    const records = Array.from({ length: count }, () => record(n++));
    projector.onAcked(p, await journal.append(p, 1, encodeEntry(records)), records);
  };
  await ack(0, 3);
  await ack(1, 3);
  await ack(1, 3); // partition 1 passes its lane bound: from now on it catches up from the journal
  t.equal(projector.lagRecords, 9, 'queued and catching-up records both count');
  t.ok(projector.ingestOpen, 'at the bound, not past it');
  t.equal(await projector.whenIngestOpen(1000), true, 'an open gate answers at once');
  await ack(0, 2);
  t.equal(projector.lagRecords, 11);
  t.notOk(projector.ingestOpen, 'past the bound: ingestion waits');
  t.equal(await projector.whenIngestOpen(30), false, 'a wait longer than allowed gives up');
  const waiting = projector.whenIngestOpen(5000);
  rm.release();
  t.equal(await waiting, true, 'a waiting writer goes on once the projector caught up');
  await projector.drain();
  t.equal(projector.lagRecords, 0, 'nothing unprojected left');
  t.equal(rm.events.length, n, 'every record projected');
  t.equal(new Set(rm.events).size, n, 'once');
  await projector.stop();
});

t.test('lag bound: a taken-over partition drops its count; a backlog found at recovery is not counted', async (t) => {
  const journal = new MemoryJournal(() => 1);
  const rm = new HeldReadModel();
  const projector = new Projector(rm, journal, pino({ level: 'silent' }), { lagRecordsMax: 5 });
  await projector.projectedOffset(0);
  rm.hold();
  const records = [record(0), record(1), record(2), record(3), record(4), record(5)];
  projector.onAcked(0, await journal.append(0, 1, encodeEntry(records)), records);
  t.notOk(projector.ingestOpen);
  // The partition is claimed again (recovery on this node, or after a hand-over): its lane restarts from the stored offset.
  await projector.projectedOffset(0);
  t.equal(projector.lagRecords, 0);
  t.ok(projector.ingestOpen, 'the count went with the lane');
  // A backlog older than this node's acknowledgements: projected from the journal, never counted.
  t.equal(projector.onReplayed(0, '0', null), false);
  t.equal(projector.lagRecords, 0);
  rm.release();
  await projector.drain();
  t.equal(projector.lagRecords, 0, 'and the catch-up does not drive the count below zero');
  t.equal(rm.events.length, 6);
  const more = [record(6)];
  projector.onAcked(0, await journal.append(0, 1, encodeEntry(more)), more);
  t.equal(projector.lagRecords, 1, 'later acknowledgements count from zero');
  await projector.drain();
  t.equal(projector.lagRecords, 0);
});

t.test('lag bound: records another owner projected and trimmed before the catch-up read them do not hold ingestion', async (t) => {
  const journal = new MemoryJournal(() => 1);
  const rm = new HeldReadModel();
  const projector = new Projector(rm, journal, pino({ level: 'silent' }), { lagRecordsMax: 5, laneRecordsMax: 2 });
  await projector.projectedOffset(0);
  rm.hold();
  const records = Array.from({ length: 8 }, (_, i) => record(i));
  const offset = await journal.append(0, 1, encodeEntry(records));
  projector.onAcked(0, offset, records); // past the lane bound: left to the catch-up
  t.notOk(projector.ingestOpen, '8 records behind, bound 5');
  // The partition moved: its new owner projected the entry and trimmed the journal past it.
  await journal.trim(0, offset);
  rm.release();
  t.equal(await projector.whenIngestOpen(5000), true, 'the empty catch-up read settles the lane');
  t.equal(projector.lagRecords, 0);
});
