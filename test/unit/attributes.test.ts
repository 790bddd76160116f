// Attribute definitions type customer attributes (catalog/attributes.ts, checkAttributes): a table
// of type and value -> accepted or refused. A timestamp is an RFC 3339 instant checked as an
// event's occurred_at is: a day or hour that does not exist is refused (Date.parse rolls it over).
// A refusal is validation_failed naming the first attribute, with every one in details.
import t from 'tap';
import { type AttributeType, checkAttributes } from '../../src/catalog/attributes.js';
import { ApiError } from '../../src/errors/api-error.js';

function answer(type: AttributeType, value: unknown): string {
  try {
    checkAttributes(new Map([['a', { type }]]), { a: value });
    return 'ok';
  } catch (err) {
    if (err instanceof ApiError) return `${err.code} (${err.param})`;
    throw err;
  }
}

t.test('timestamp: real RFC 3339 instants only', async (t) => {
  const refused = 'validation_failed (attributes.a)';
  const cases: Array<[unknown, string]> = [
    ['2026-11-27T10:00:00Z', 'ok'],
    ['2026-11-27T10:00:00.123Z', 'ok'],
    ['2024-02-29T00:00:00Z', 'ok'],
    ['2026-11-27T10:00:00+02:00', 'ok'],
    ['2026-02-30T00:00:00Z', refused],
    ['2025-02-29T00:00:00Z', refused],
    ['2026-04-31T00:00:00Z', refused],
    ['2026-13-01T00:00:00Z', refused],
    ['2026-11-27T24:00:00Z', refused],
    ['2026-11-27T10:60:00Z', refused],
    ['2026-11-27T10:00:60Z', refused],
    ['2026-11-27T10:00:00', refused],
    ['2026-11-27 10:00:00Z', refused],
    ['2026-11-27', refused],
    ['2026-11-27T10:00:00+0200', refused],
    [1_764_237_600_000, refused],
    [null, 'ok'],
  ];
  for (const [value, want] of cases) t.equal(answer('timestamp', value), want, JSON.stringify(value));
});

t.test('the other types', async (t) => {
  const cases: Array<[AttributeType, unknown, boolean]> = [
    ['string', 'x', true],
    ['string', 1, false],
    ['number', 1.5, true],
    ['number', '1', false],
    ['integer', 7, true],
    ['integer', 1.5, false],
    ['integer', 2 ** 53, false],
    ['boolean', false, true],
    ['boolean', 'true', false],
    ['json', { any: ['thing'] }, true],
  ];
  for (const [type, value, ok] of cases) t.equal(answer(type, value) === 'ok', ok, `${type} ${JSON.stringify(value)}`);
});

t.test('a refusal names the first bad attribute and lists every one in details', async (t) => {
  const defs = new Map<string, { type: AttributeType }>([
    ['joined', { type: 'timestamp' }],
    ['level', { type: 'integer' }],
    ['nick', { type: 'string' }],
  ]);
  let err: unknown;
  try {
    checkAttributes(defs, { nick: 'ok', joined: '2026-02-30T00:00:00Z', free: 'no definition', level: 'high' });
  } catch (e) {
    err = e;
  }
  t.ok(err instanceof ApiError);
  const e = err as ApiError;
  t.equal(e.code, 'validation_failed');
  t.equal(e.param, 'attributes.joined');
  t.equal(e.message, 'attributes.joined must be of type timestamp, RFC 3339 (2026-11-27T10:00:00Z) (and 1 more; see details).');
  t.same(e.details, [
    { param: 'attributes.joined', message: 'attributes.joined must be of type timestamp, RFC 3339 (2026-11-27T10:00:00Z).' },
    { param: 'attributes.level', message: 'attributes.level must be of type integer.' },
  ]);
  t.doesNotThrow(() => checkAttributes(defs, { joined: null, level: null, other: 'x' }), 'null removes; undefined keys take anything');
});
