// Given/when/then tests of period keys and boundaries: local midnights in non-UTC zones, DST
// days of 23 and 25 hours, ISO weeks across year boundaries (week 53 and week 1), and a property
// test that every instant lies inside its period and keys ascend.
import fc from 'fast-check';
import t from 'tap';
import { isValidTimeZone, periodBounds, periodEndMs, periodKey, periodStartMs } from '../../src/domain/periods.js';

const utc = (iso: string) => Date.parse(iso);
const hourMs = 3_600_000;

t.test('given period none, every instant is in the single period "all" that never ends', async (t) => {
  t.equal(periodKey('none', utc('2026-11-23T10:00:00Z'), 'Europe/Berlin'), 'all');
  t.equal(periodEndMs('none', utc('2026-11-23T10:00:00Z'), 'Europe/Berlin'), null);
  t.equal(periodStartMs('none', 0, 'UTC'), null);
});

t.test('given UTC, keys are the ISO date, the ISO week and the month', async (t) => {
  const now = utc('2026-11-23T10:00:00Z'); // a Monday
  t.equal(periodKey('daily', now, 'UTC'), '2026-11-23');
  t.equal(periodKey('weekly', now, 'UTC'), '2026-W48');
  t.equal(periodKey('monthly', now, 'UTC'), '2026-11');
});

t.test('given a non-UTC zone, the day turns at local midnight, not at UTC midnight', async (t) => {
  // Berlin is UTC+1 in November: 23:30Z is 00:30 the next local day.
  t.equal(periodKey('daily', utc('2026-11-23T22:59:59Z'), 'Europe/Berlin'), '2026-11-23');
  t.equal(periodKey('daily', utc('2026-11-23T23:00:00Z'), 'Europe/Berlin'), '2026-11-24');
  // Los Angeles is UTC-8: 05:00Z on the 24th is still the 23rd locally.
  t.equal(periodKey('daily', utc('2026-11-24T05:00:00Z'), 'America/Los_Angeles'), '2026-11-23');
  t.equal(periodEndMs('daily', utc('2026-11-24T05:00:00Z'), 'America/Los_Angeles'), utc('2026-11-24T08:00:00Z'));
  t.equal(periodStartMs('daily', utc('2026-11-24T05:00:00Z'), 'America/Los_Angeles'), utc('2026-11-23T08:00:00Z'));
});

t.test('given a spring-forward day, the daily period lasts 23 hours and ends at the next local midnight', async (t) => {
  const now = utc('2026-03-29T12:00:00Z'); // Europe: clocks jump 02:00 -> 03:00 this day
  const start = periodStartMs('daily', now, 'Europe/Berlin')!;
  const end = periodEndMs('daily', now, 'Europe/Berlin')!;
  t.equal(start, utc('2026-03-28T23:00:00Z'), 'midnight CET');
  t.equal(end, utc('2026-03-29T22:00:00Z'), 'midnight CEST');
  t.equal(end - start, 23 * hourMs);
  t.equal(periodKey('daily', end - 1, 'Europe/Berlin'), '2026-03-29');
  t.equal(periodKey('daily', end, 'Europe/Berlin'), '2026-03-30');
});

t.test('given a fall-back day, the daily period lasts 25 hours', async (t) => {
  const now = utc('2026-11-01T12:00:00Z'); // US: clocks fall back 02:00 -> 01:00 this day
  const start = periodStartMs('daily', now, 'America/New_York')!;
  const end = periodEndMs('daily', now, 'America/New_York')!;
  t.equal(start, utc('2026-11-01T04:00:00Z'));
  t.equal(end, utc('2026-11-02T05:00:00Z'));
  t.equal(end - start, 25 * hourMs);
});

t.test('given a zone whose DST jump skips midnight, the day starts at the first existing instant', async (t) => {
  // Chile: on 2026-09-06 local clocks go from 23:59:59 (Sat) to 01:00 (Sun).
  const now = utc('2026-09-06T15:00:00Z');
  t.equal(periodKey('daily', now, 'America/Santiago'), '2026-09-06');
  t.equal(periodStartMs('daily', now, 'America/Santiago'), utc('2026-09-06T04:00:00Z'));
  t.equal(periodEndMs('daily', now, 'America/Santiago'), utc('2026-09-07T03:00:00Z'));
  t.equal(periodKey('daily', utc('2026-09-06T03:59:59Z'), 'America/Santiago'), '2026-09-05');
});

t.test('given a week containing a DST change, the week runs Monday to Monday local time', async (t) => {
  const now = utc('2026-03-26T12:00:00Z');
  t.equal(periodKey('weekly', now, 'Europe/Berlin'), '2026-W13');
  t.equal(periodStartMs('weekly', now, 'Europe/Berlin'), utc('2026-03-22T23:00:00Z'), 'Monday 00:00 CET');
  t.equal(periodEndMs('weekly', now, 'Europe/Berlin'), utc('2026-03-29T22:00:00Z'), 'Monday 00:00 CEST');
});

t.test('given the ISO week year, the last days of December and first of January take week 53 or week 1', async (t) => {
  const cases: Array<[string, string]> = [
    ['2026-12-31T12:00:00Z', '2026-W53'], // 2026 has 53 ISO weeks
    ['2027-01-01T12:00:00Z', '2026-W53'],
    ['2027-01-03T12:00:00Z', '2026-W53'], // Sunday
    ['2027-01-04T12:00:00Z', '2027-W01'], // Monday
    ['2024-12-30T12:00:00Z', '2025-W01'], // Monday in December belongs to next year's week 1
    ['2021-01-03T12:00:00Z', '2020-W53'],
    ['2026-01-05T00:00:00Z', '2026-W02'],
  ];
  for (const [iso, key] of cases) t.equal(periodKey('weekly', utc(iso), 'UTC'), key, iso);
  t.equal(periodEndMs('weekly', utc('2027-01-01T12:00:00Z'), 'UTC'), utc('2027-01-04T00:00:00Z'));
});

t.test('given a Sunday night in New York, the week turns at local Monday midnight', async (t) => {
  t.equal(periodKey('weekly', utc('2026-11-30T04:59:59Z'), 'America/New_York'), '2026-W48'); // Sun 23:59:59 EST
  t.equal(periodKey('weekly', utc('2026-11-30T05:00:00Z'), 'America/New_York'), '2026-W49');
});

t.test('given a month and a year boundary in Sydney, the month turns at local midnight', async (t) => {
  // Sydney is UTC+11 in December/January.
  t.equal(periodKey('monthly', utc('2026-12-31T12:59:59Z'), 'Australia/Sydney'), '2026-12');
  t.equal(periodKey('monthly', utc('2026-12-31T13:00:00Z'), 'Australia/Sydney'), '2027-01');
  t.equal(periodEndMs('monthly', utc('2026-12-15T00:00:00Z'), 'Australia/Sydney'), utc('2026-12-31T13:00:00Z'));
  t.equal(periodKey('daily', utc('2026-12-31T13:00:00Z'), 'Australia/Sydney'), '2027-01-01');
});

t.test('given an unknown zone, periods fall back to UTC instead of failing', async (t) => {
  t.notOk(isValidTimeZone('Mars/Olympus'));
  t.ok(isValidTimeZone('Europe/Berlin'));
  t.equal(periodKey('daily', utc('2026-11-23T23:30:00Z'), 'Mars/Olympus'), '2026-11-23');
});

t.test('given interleaved zones, each answer is for its own zone (the memo is per kind and zone)', async (t) => {
  const now = utc('2026-11-23T23:30:00Z');
  for (let i = 0; i < 3; i++) {
    t.equal(periodKey('daily', now, 'UTC'), '2026-11-23');
    t.equal(periodKey('daily', now, 'Asia/Tokyo'), '2026-11-24');
    t.equal(periodKey('daily', now + i * hourMs, 'America/Los_Angeles'), '2026-11-23');
  }
});

const zones = ['UTC', 'Europe/Berlin', 'America/New_York', 'America/Santiago', 'Australia/Lord_Howe', 'Asia/Kolkata', 'Pacific/Apia'];

t.test('property: an instant lies in [start, end) of its period, the key holds to end - 1 and changes at end', async (t) => {
  fc.assert(
    fc.property(
      fc.constantFrom('daily' as const, 'weekly' as const, 'monthly' as const),
      fc.constantFrom(...zones),
      fc.integer({ min: utc('2000-01-01T00:00:00Z'), max: utc('2060-01-01T00:00:00Z') }),
      (kind, zone, now) => {
        const b = periodBounds(kind, now, zone);
        if (b.startMs === null || b.endMs === null) return false;
        return (
          b.startMs <= now &&
          now < b.endMs &&
          periodKey(kind, b.startMs, zone) === b.key &&
          periodKey(kind, b.endMs - 1, zone) === b.key &&
          periodKey(kind, b.endMs, zone) > b.key
        );
      },
    ),
    { numRuns: 500 },
  );
  t.pass('held');
});
