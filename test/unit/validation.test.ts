import t from 'tap';
import { z } from 'zod';
import { ApiError } from '../../src/errors/api-error.js';
import { formatPath, validate, zodToApiError } from '../../src/gateway/validation.js';

t.test('formatPath writes paths the way a client names fields', async (t) => {
  const cases: Array<[PropertyKey[], string]> = [
    [[], ''],
    [['name'], 'name'],
    [['events', 3, 'occurred_at'], 'events[3].occurred_at'],
    [[0, 'a'], '[0].a'],
    [['attributes', 'favourite.color'], 'attributes["favourite.color"]'],
    [['matrix', 1, 2], 'matrix[1][2]'],
  ];
  for (const [path, want] of cases) t.equal(formatPath(path), want, JSON.stringify(path));
});

const batch = z
  .object({
    events: z.array(z.object({ name: z.string(), occurred_at: z.string().datetime() })).max(100),
    mode: z.enum(['async', 'sync']).optional(),
  })
  .strict();

function caught(fn: () => unknown): ApiError {
  try {
    fn();
  } catch (err) {
    if (err instanceof ApiError) return err;
    throw err;
  }
  throw new Error('expected an ApiError');
}

t.test('validation_failed names the first failing field and lists all issues', async (t) => {
  const err = caught(() =>
    validate(
      batch,
      {
        events: [
          { name: 'a', occurred_at: '2024-01-01T00:00:00Z' },
          { name: 'b', occurred_at: '2024-01-01T00:00:00Z' },
          { name: 'c', occurred_at: '2024-01-01T00:00:00Z' },
          { name: 'd', occurred_at: 'yesterday' },
        ],
        mode: 'fast',
        extra: 1,
      },
      'body',
    ),
  );
  t.equal(err.code, 'validation_failed');
  t.equal(err.status, 400);
  t.equal(err.param, 'events[3].occurred_at');
  const details = err.details as Array<{ param: string; message: string }>;
  t.same(
    details.map((d) => d.param),
    ['events[3].occurred_at', 'mode', 'extra'],
  );
  t.match(err.message, /^events\[3\]\.occurred_at: .+ \(and 2 more; see details\)$/);
  t.equal(details[2]!.message, 'Unknown field.');
});

t.test('a missing field says Required', async (t) => {
  const err = caught(() => validate(batch, { events: [{ occurred_at: '2024-01-01T00:00:00Z' }] }, 'body'));
  t.equal(err.param, 'events[0].name');
  t.equal((err.details as Array<{ message: string }>)[0]!.message, 'Required (expected string).');
  t.equal(err.message, 'events[0].name: Required (expected string).');
});

t.test('an issue about the whole input names the input', async (t) => {
  t.equal(caught(() => validate(batch, 'not an object', 'body')).param, 'body');
  t.equal(caught(() => validate(z.object({ a: z.string() }), [], 'query')).param, 'query');
});

t.test('a nested unknown key is named with its path; root prefix applies', async (t) => {
  const schema = z.object({ profile: z.object({ a: z.string() }).strict() });
  const r = schema.safeParse({ profile: { a: 'x', b: 1 } });
  t.equal(r.success, false);
  if (!r.success) {
    t.equal(zodToApiError(r.error).param, 'profile.b');
    t.equal(zodToApiError(r.error, { root: 'items[2]' }).param, 'items[2].profile.b');
  }
});

t.test('success returns parsed output (coercion and defaults apply)', async (t) => {
  const q = z.object({ limit: z.coerce.number().int().default(50) });
  t.same(validate(q, { limit: '7' }, 'query'), { limit: 7 });
  t.same(validate(q, {}, 'query'), { limit: 50 });
});
