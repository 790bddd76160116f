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
  async apply(partition: number, offset: Offset, projections: Projection[]): Promise<void> {
    await this.applyMany([{ partition, offset, projections }]);
  }
  async applyMany(batches: Array<{ partition: number; offset: Offset; projections: Projection[] }>): Promise<void> {
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
