// The gateway's body check: nesting deeper than recursive readers can take (levels count objects
// and arrays, the value itself being level 1; the walk never recurses, so a value of 100,000
// levels is answered, not a stack overflow), text PostgreSQL cannot store (U+0000, unpaired
// surrogates) in any string or key, and numbers JSON cannot carry back (1e400 parses as Infinity;
// NaN over gRPC), each named by its path.
import t from 'tap';
import { checkBody, isUnstorableText, nonFiniteNumberPath, unstorableTextPath } from '../../src/util/body-check.js';

const nestsDeeperThan = (value: unknown, max: number) => checkBody(value, max) === 'too_deep';

const arrays = (n: number, inner: unknown = 1): unknown => {
  let v = inner;
  for (let i = 0; i < n; i++) v = [v];
  return v;
};

t.test('levels of objects and arrays, the value itself being level 1', async (t) => {
  t.equal(nestsDeeperThan(1, 0), false, 'a scalar has no level');
  t.equal(nestsDeeperThan(null, 0), false);
  t.equal(nestsDeeperThan({}, 1), false);
  t.equal(nestsDeeperThan({}, 0), true);
  t.equal(nestsDeeperThan(arrays(64), 64), false, '64 arrays within 64');
  t.equal(nestsDeeperThan(arrays(65), 64), true, '65 arrays beyond 64');
  t.equal(nestsDeeperThan({ a: { b: [{ c: 1 }] } }, 4), false);
  t.equal(nestsDeeperThan({ a: { b: [{ c: {} }] } }, 4), true, 'an empty object is a level');
});

t.test('the deepest branch counts, wherever it is', async (t) => {
  const wide = { a: 1, b: [1, 2, 3], c: { d: arrays(10) }, e: 'x' };
  t.equal(nestsDeeperThan(wide, 12), false);
  t.equal(nestsDeeperThan(wide, 11), true);
  const late = [1, 2, { x: 1 }, [[[]]], arrays(20)];
  t.equal(nestsDeeperThan(late, 21), false);
  t.equal(nestsDeeperThan(late, 20), true);
});

t.test('no recursion: very deep values are answered', async (t) => {
  t.equal(nestsDeeperThan(arrays(100_000), 64), true);
  const obj = JSON.parse('{"a":'.repeat(50_000) + '1' + '}'.repeat(50_000));
  t.equal(nestsDeeperThan(obj, 64), true);
  t.equal(nestsDeeperThan({ small: [1] }, 64), false, 'a later call is not affected by an early exit');
});

t.test('text PostgreSQL cannot store: U+0000 and unpaired surrogates, in strings and keys', async (t) => {
  t.equal(isUnstorableText('plain'), false);
  t.equal(isUnstorableText('emoji \u{1F3C6} pair'), false, 'a surrogate pair is a character');
  t.equal(isUnstorableText('a\u0000b'), true);
  t.equal(isUnstorableText('a\ud800'), true, 'a high surrogate alone');
  t.equal(isUnstorableText('\udc00b'), true, 'a low surrogate alone');
  t.equal(isUnstorableText('\udc00\ud800'), true, 'low then high is no pair');
  t.equal(checkBody({ a: ['x', { b: 'ok' }] }, 64), null);
  t.equal(checkBody({ a: ['x', { b: 'n\u0000' }] }, 64), 'unstorable_text');
  t.equal(checkBody({ a: { ['k\ud800']: 1 } }, 64), 'unstorable_text', 'in a key');
  t.equal(checkBody('\u0000', 64), 'unstorable_text', 'a bare string body');
  t.equal(checkBody([arrays(70), 'x\u0000'], 64), 'too_deep', 'depth wins: its path is not walked');
  t.equal(unstorableTextPath({ events: [{ id: 'a' }, { properties: { name: 'x\ud800' } }] }), 'events[1].properties.name');
  t.equal(unstorableTextPath({ a: { ['k\u0000']: 1 } }), 'a', 'a bad key is named by the object holding it');
  t.equal(unstorableTextPath({ ['\u0000']: 1 }), '', 'a bad key of the body itself');
  t.equal(unstorableTextPath({ a: 'fine' }), null);
});

t.test('numbers JSON cannot carry: ±Infinity (1e400 as JSON.parse reads it) and NaN, anywhere', async (t) => {
  t.equal(checkBody(JSON.parse('{"attributes":{"inf":1e400}}'), 64), 'non_finite_number');
  t.equal(checkBody(JSON.parse('{"events":[{},{},{"properties":{"x":-1e400}}]}'), 64), 'non_finite_number', '-1e400 in a batch item');
  t.equal(checkBody({ a: [1, Number.NaN] }, 64), 'non_finite_number', 'NaN in an array');
  t.equal(checkBody(JSON.parse('1e400'), 64), 'non_finite_number', 'a bare number body');
  t.equal(checkBody(JSON.parse('{"max":1.7976931348623157e308,"min":-1.7976931348623157e308,"tiny":5e-324,"under":1e-400}'), 64), null, 'the largest doubles, and an underflow to 0, are numbers');
  t.equal(checkBody([arrays(70), Number.POSITIVE_INFINITY], 64), 'too_deep', 'depth wins');
  t.equal(nonFiniteNumberPath(JSON.parse('{"attributes":{"level":3,"inf":1e400}}')), 'attributes.inf');
  t.equal(nonFiniteNumberPath(JSON.parse('{"properties":{"x":1e400}}')), 'properties.x');
  t.equal(nonFiniteNumberPath(JSON.parse('{"events":[{"properties":{"x":1}},{},{"properties":{"x":-1e400}}]}')), 'events[2].properties.x');
  t.equal(nonFiniteNumberPath({ players: [{ metrics: { kills: 3, ratio: Number.NaN } }] }), 'players[0].metrics.ratio');
  t.equal(nonFiniteNumberPath([1, [2, Number.NEGATIVE_INFINITY]]), '[1][1]');
  t.equal(nonFiniteNumberPath(Number.POSITIVE_INFINITY), '', 'the body itself');
  t.equal(nonFiniteNumberPath({ a: 1e308 }), null);
});
