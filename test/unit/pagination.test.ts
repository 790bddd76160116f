// Cursor decoding (gateway/pagination.ts): every cursor the service could not have written is
// 400 invalid_cursor, checked before a database sees it (a NUL or a number out of a column's
// range used to reach PostgreSQL and come back as a 500). Tables of given cursor -> answer.
// Cursors are bound to their list (path, environment, filter values; not limit): another list's
// cursor is invalid_cursor too.
import t from 'tap';
import { ApiError } from '../../src/errors/api-error.js';
import {
  cursorEpochMsMax,
  cursorInt,
  cursorInt4Max,
  cursorPartCharsMax,
  cursorScope,
  cursorScopeChars,
  decodeCursor,
  encodeCursor,
  type ListRequest,
  listIdentityOf,
  pageQuerySchema,
  pageRequest,
  toPage,
} from '../../src/gateway/pagination.js';
import { limits } from '../../src/limits.js';
import type { Environment } from '../../src/tenancy/types.js';

const raw = (json: string) => Buffer.from(json).toString('base64url');
const scope = 'abcdefghijklmnop';

function codeOf(fn: () => unknown): string {
  try {
    fn();
    return 'ok';
  } catch (err) {
    if (err instanceof ApiError) return `${err.code}${err.param === undefined ? '' : ` (${err.param})`}`;
    throw err;
  }
}

/** A list request as a handler sees it: path, principal and the parsed query. */
function req(path: string, query: Record<string, unknown>, env: string | null = 'env_test', userId: string | null = 'usr_1'): ListRequest {
  const environment = env === null ? null : ({ id: env } as Environment);
  return { path, principal: { environment, userId }, query: { limit: limits.pageLimitDefault, ...query } };
}

t.test('the cursors the service writes decode to their key', async (t) => {
  for (const key of [['cust_01J0000000000000000000000'], ['1700000000000', 'le_1'], ['cust_x', '2030-W01', '3'], ['Zoë ✓ 😀'], ['']]) {
    t.same(decodeCursor(encodeCursor(key, scope), scope), key, JSON.stringify(key));
  }
  t.same(decodeCursor(encodeCursor(['x'.repeat(cursorPartCharsMax)], scope), scope), ['x'.repeat(cursorPartCharsMax)], 'a part at the cap');
});

t.test('every other cursor is invalid_cursor naming the cursor', async (t) => {
  const cases: Array<[string, string]> = [
    ['empty', ''],
    ['longer than 2048', 'A'.repeat(limits.cursorCharsMax + 1)],
    ['not base64url', 'not-a-cursor!'],
    ['not JSON', raw('{"v":2,')],
    ['JSON null', raw('null')],
    ['the previous build (v 1, bound to no list)', raw('{"v":1,"k":["a"]}')],
    ['another version', raw(`{"v":3,"s":"${scope}","k":["a"]}`)],
    ['no scope', raw('{"v":2,"k":["a"]}')],
    ['another list', encodeCursor(['a'], 'ABCDEFGHIJKLMNOP')],
    ['a numeric scope', raw('{"v":2,"s":1,"k":["a"]}')],
    ['no key', raw(`{"v":2,"s":"${scope}"}`)],
    ['a number part', raw(`{"v":2,"s":"${scope}","k":[1]}`)],
    ['NUL in a part', encodeCursor(['cust_\u0000x'], scope)],
    ['NUL in a later part', encodeCursor(['1700000000000', '\u0000'], scope)],
    ['lone high surrogate', raw(`{"v":2,"s":"${scope}","k":["a\\ud800"]}`)],
    ['lone low surrogate', raw(`{"v":2,"s":"${scope}","k":["\\udc00b"]}`)],
    ['swapped surrogates', raw(`{"v":2,"s":"${scope}","k":["\\ude00\\ud83d"]}`)],
    ['a part over the cap', encodeCursor(['x'.repeat(cursorPartCharsMax + 1)], scope)],
    ['too many parts', encodeCursor(Array.from({ length: 9 }, () => 'a'), scope)],
  ];
  for (const [what, cursor] of cases) t.equal(codeOf(() => decodeCursor(cursor, scope)), 'invalid_cursor (cursor)', what);
  t.equal(codeOf(() => decodeCursor(raw(`{"v":2,"s":"${scope}","k":["\\ud83d\\ude00"]}`), scope)), 'ok', 'a surrogate pair is fine');
});

t.test('the query schema leaves an empty or overlong cursor to decodeCursor', async (t) => {
  for (const cursor of ['', 'A'.repeat(limits.cursorCharsMax + 1)]) {
    const q = pageQuerySchema.parse({ cursor });
    t.equal(q.cursor, cursor, 'not a validation_failed');
    t.equal(codeOf(() => pageRequest(req('/v1/customers', { cursor }))), 'invalid_cursor (cursor)');
  }
  const first = pageRequest(req('/v1/customers', {}));
  t.same(first, { limit: limits.pageLimitDefault, after: null, scope: cursorScope(listIdentityOf(req('/v1/customers', {}))) });
});

t.test('limit is 1 to 200 in decimal digits, nothing else Number() would read', async (t) => {
  const limitOf = (limit: string | string[] | undefined) => {
    const r = pageQuerySchema.safeParse(limit === undefined ? {} : { limit });
    return r.success ? r.data.limit : r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
  };
  const refused = 'limit: An integer from 1 to 200, in decimal digits.';
  const cases: Array<[string | string[] | undefined, number | string]> = [
    [undefined, limits.pageLimitDefault],
    ['1', 1],
    ['200', 200],
    ['05', 5],
    ['0', refused],
    ['201', refused],
    ['0x10', refused],
    ['1e1', refused],
    [' 5', refused],
    ['5 ', refused],
    ['+5', refused],
    ['-5', refused],
    ['5.0', refused],
    ['1_0', refused],
    ['٥', refused],
    ['', refused],
    [['5', '6'], refused],
  ];
  for (const [limit, want] of cases) t.equal(limitOf(limit), want, JSON.stringify(limit));
});

t.test('a list is its path, its environment and its filter values, never limit or cursor', async (t) => {
  t.same(listIdentityOf(req('/v1/rules', { limit: 7, cursor: 'x', status: 'draft' })), {
    path: '/v1/rules',
    environmentId: 'env_test',
    userId: null,
    filters: { status: 'draft' },
  });
  t.same(listIdentityOf(req('/v1/organizations', {}, null, 'usr_1')), {
    path: '/v1/organizations',
    environmentId: null,
    userId: 'usr_1',
    filters: {},
  }, 'environment-less lists are the caller\'s');

  const of = (r: ListRequest) => cursorScope(listIdentityOf(r));
  const base = of(req('/v1/rules', { status: 'draft' }));
  t.equal(base.length, cursorScopeChars);
  t.match(base, /^[A-Za-z0-9_-]+$/);
  t.equal(of(req('/v1/rules', { status: 'draft', limit: 3 })), base, 'another limit: the same list');
  t.equal(of(req('/v1/rules', { status: 'draft' }, 'env_test', 'usr_2')), base, 'another caller in the environment: the same list');
  t.equal(of(req('/v1/rules', { status: 'draft', campaign_id: undefined })), base, 'an absent filter is an omitted one');
  t.equal(
    of(req('/v1/rules', { status: 'draft', campaign_id: 'camp_1' })),
    of(req('/v1/rules', { campaign_id: 'camp_1', status: 'draft' })),
    'filter order does not matter',
  );
  const others: Array<[string, ListRequest]> = [
    ['another route', req('/v1/customers', { status: 'draft' })],
    ['another status', req('/v1/rules', { status: 'published' })],
    ['no status', req('/v1/rules', {})],
    ['one more filter', req('/v1/rules', { status: 'draft', campaign_id: 'camp_1' })],
    ['another environment', req('/v1/rules', { status: 'draft' }, 'env_live')],
    ['no environment', req('/v1/rules', { status: 'draft' }, null)],
  ];
  for (const [what, r] of others) t.not(of(r), base, what);
  t.not(of(req('/v1/customers/cust_a/ledger_entries', {})), of(req('/v1/customers/cust_b/ledger_entries', {})), 'another parent resource');
  t.not(of(req('/v1/organizations', {}, null, 'usr_1')), of(req('/v1/organizations', {}, null, 'usr_2')), 'another user\'s organizations');
  t.not(of(req('/v1/x', { a: '1' })), of(req('/v1/x', { a: 1 })), 'values are compared as parsed, types included');
});

t.test('next_cursor pages its own list (any limit) and no other', async (t) => {
  const rows = ['r1', 'r2', 'r3'];
  const list = req('/v1/challenges/ch_1/progress', { limit: 2, customer_id: 'cust_a', status: 'active' });
  const page = toPage(rows, pageRequest(list), (r) => [r, '2030-W01', '0'], (r) => r);
  t.same(page.data, ['r1', 'r2']);
  t.equal(page.has_more, true);
  const cursor = page.next_cursor!;
  t.ok(cursor.length < 200, `a three-part cursor is ${cursor.length} characters`);

  const again = pageRequest(req('/v1/challenges/ch_1/progress', { limit: 50, customer_id: 'cust_a', status: 'active', cursor }));
  t.same(again.after, ['r2', '2030-W01', '0'], 'the same list with another limit');
  t.equal(again.limit, 50);
  const elsewhere: Array<[string, Record<string, unknown>, string, string | null]> = [
    ['another customer', { customer_id: 'cust_b', status: 'active' }, '/v1/challenges/ch_1/progress', 'env_test'],
    ['another status', { customer_id: 'cust_a', status: 'completed' }, '/v1/challenges/ch_1/progress', 'env_test'],
    ['no filters', {}, '/v1/challenges/ch_1/progress', 'env_test'],
    ['another challenge', { customer_id: 'cust_a', status: 'active' }, '/v1/challenges/ch_2/progress', 'env_test'],
    ['another list', { customer_id: 'cust_a', status: 'active' }, '/v1/reward_issuances', 'env_test'],
    ['another environment', { customer_id: 'cust_a', status: 'active' }, '/v1/challenges/ch_1/progress', 'env_live'],
  ];
  for (const [what, query, path, env] of elsewhere) {
    t.equal(codeOf(() => pageRequest(req(path, { ...query, cursor }, env))), 'invalid_cursor (cursor)', what);
  }

  const last = toPage(['r3'], again, (r) => [r], (r) => r);
  t.same(last, { data: ['r3'], next_cursor: null, has_more: false }, 'the last page has no cursor');
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
