// Cursor decoding (gateway/pagination.ts): every cursor the service could not have written is
// 400 invalid_cursor, checked before a database sees it (a NUL or a number out of a column's
// range used to reach PostgreSQL and come back as a 500). Tables of given cursor -> answer.
import t from 'tap';
import { ApiError } from '../../src/errors/api-error.js';
import {
  cursorEpochMsMax,
  cursorInt,
  cursorInt4Max,
  cursorPartCharsMax,
  decodeCursor,
  encodeCursor,
  pageQuerySchema,
  pageRequest,
} from '../../src/gateway/pagination.js';
import { limits } from '../../src/limits.js';

const raw = (json: string) => Buffer.from(json).toString('base64url');

function codeOf(fn: () => unknown): string {
  try {
    fn();
    return 'ok';
  } catch (err) {
    if (err instanceof ApiError) return `${err.code}${err.param === undefined ? '' : ` (${err.param})`}`;
    throw err;
  }
}

t.test('the cursors the service writes decode to their key', async (t) => {
  for (const key of [['cust_01J0000000000000000000000'], ['1700000000000', 'le_1'], ['cust_x', '2030-W01', '3'], ['Zoë ✓ 😀'], ['']]) {
    t.same(decodeCursor(encodeCursor(key)), key, JSON.stringify(key));
  }
  t.same(decodeCursor(encodeCursor(['x'.repeat(cursorPartCharsMax)])), ['x'.repeat(cursorPartCharsMax)], 'a part at the cap');
});

t.test('every other cursor is invalid_cursor naming the cursor', async (t) => {
  const cases: Array<[string, string]> = [
    ['empty', ''],
    ['longer than 2048', 'A'.repeat(limits.cursorCharsMax + 1)],
    ['not base64url', 'not-a-cursor!'],
    ['not JSON', raw('{"v":1,')],
    ['JSON null', raw('null')],
    ['another version', raw('{"v":2,"k":["a"]}')],
    ['no key', raw('{"v":1}')],
    ['a number part', raw('{"v":1,"k":[1]}')],
    ['NUL in a part', encodeCursor(['cust_\u0000x'])],
    ['NUL in a later part', encodeCursor(['1700000000000', '\u0000'])],
    ['lone high surrogate', raw('{"v":1,"k":["a\\ud800"]}')],
    ['lone low surrogate', raw('{"v":1,"k":["\\udc00b"]}')],
    ['swapped surrogates', raw('{"v":1,"k":["\\ude00\\ud83d"]}')],
    ['a part over the cap', encodeCursor(['x'.repeat(cursorPartCharsMax + 1)])],
    ['too many parts', encodeCursor(Array.from({ length: 9 }, () => 'a'))],
  ];
  for (const [what, cursor] of cases) t.equal(codeOf(() => decodeCursor(cursor)), 'invalid_cursor (cursor)', what);
  t.equal(codeOf(() => decodeCursor(raw('{"v":1,"k":["\\ud83d\\ude00"]}'))), 'ok', 'a surrogate pair is fine');
});

t.test('the query schema leaves an empty or overlong cursor to decodeCursor', async (t) => {
  for (const cursor of ['', 'A'.repeat(limits.cursorCharsMax + 1)]) {
    const q = pageQuerySchema.parse({ cursor });
    t.equal(q.cursor, cursor, 'not a validation_failed');
    t.equal(codeOf(() => pageRequest(q)), 'invalid_cursor (cursor)');
  }
  t.same(pageRequest(pageQuerySchema.parse({})), { limit: limits.pageLimitDefault, after: null });
});

t.test('cursorInt: a safe integer inside the column range, else invalid_cursor', async (t) => {
  const cases: Array<[string | undefined, number, number, number | string]> = [
    ['0', 0, cursorEpochMsMax, 0],
    ['1700000000000', 0, cursorEpochMsMax, 1_700_000_000_000],
    [String(cursorEpochMsMax), 0, cursorEpochMsMax, cursorEpochMsMax],
    [String(cursorEpochMsMax + 1), 0, cursorEpochMsMax, 'invalid_cursor (cursor)'],
    ['99999999999999999999', 0, cursorEpochMsMax, 'invalid_cursor (cursor)'],
    ['9007199254740993', 0, Number.MAX_SAFE_INTEGER, 'invalid_cursor (cursor)'],
    [String(cursorInt4Max), 0, cursorInt4Max, cursorInt4Max],
    [String(cursorInt4Max + 1), 0, cursorInt4Max, 'invalid_cursor (cursor)'],
    ['-1', 0, cursorInt4Max, 'invalid_cursor (cursor)'],
    ['-5', -10, 10, -5],
    ['', 0, 10, 'invalid_cursor (cursor)'],
    ['1e3', 0, 10_000, 'invalid_cursor (cursor)'],
    ['0x10', 0, 100, 'invalid_cursor (cursor)'],
    [' 1', 0, 10, 'invalid_cursor (cursor)'],
    ['1.0', 0, 10, 'invalid_cursor (cursor)'],
    [undefined, 0, 10, 'invalid_cursor (cursor)'],
  ];
  for (const [part, min, max, want] of cases) {
    let got: number | string;
    try {
      got = cursorInt(part, min, max);
    } catch (err) {
      got = codeOf(() => {
        throw err;
      });
    }
    t.equal(got, want, `${JSON.stringify(part)} in [${min}, ${max}]`);
  }
});
