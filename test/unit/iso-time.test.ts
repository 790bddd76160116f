// isoTime keeps the spellings of the last instants it wrote: whatever the sequence of instants,
// each answer is exactly toISOString's, and an invalid instant throws as toISOString does.
import fc from 'fast-check';
import t from 'tap';
import { isoTime } from '../../src/util/iso-time.js';

const instant = fc.integer({ min: -8.64e15, max: 8.64e15 });

t.test('any sequence of instants, repeats and alternations included, is spelled as toISOString spells it', async (t) => {
  fc.assert(
    fc.property(fc.array(fc.oneof(instant, fc.constantFrom(0, -1, 1_795_746_816_739, 1_795_746_816_740)), { maxLength: 40 }), (xs) =>
      xs.every((ms) => isoTime(ms) === new Date(ms).toISOString()),
    ),
    { numRuns: 2000 },
  );
  t.pass('2,000 sequences');
  const a = 1_795_746_816_739;
  const b = a + 1;
  t.same([a, b, a, b, a].map(isoTime), ['2026-11-27T02:33:36.739Z', '2026-11-27T02:33:36.740Z', '2026-11-27T02:33:36.739Z', '2026-11-27T02:33:36.740Z', '2026-11-27T02:33:36.739Z']);
});

t.test('an invalid instant throws RangeError every time, and does not disturb the kept spellings', async (t) => {
  t.equal(isoTime(0), '1970-01-01T00:00:00.000Z');
  t.throws(() => isoTime(Number.NaN), RangeError);
  t.throws(() => isoTime(Number.NaN), RangeError);
  t.throws(() => isoTime(8.64e15 + 1), RangeError);
  t.equal(isoTime(0), '1970-01-01T00:00:00.000Z');
  t.equal(isoTime(1), '1970-01-01T00:00:00.001Z');
});
