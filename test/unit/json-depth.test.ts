// nestsDeeperThan: the gateway's guard against bodies nested deeper than recursive readers can
// take. Levels count objects and arrays (the value itself is level 1); scalars add none; the walk
// never recurses, so a value of 100,000 levels is answered, not a stack overflow.
import t from 'tap';
import { nestsDeeperThan } from '../../src/util/json-depth.js';

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
