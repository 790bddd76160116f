import t from 'tap';
import { newId } from '../../src/ids.js';

t.test('ids minted in one millisecond increase, in creation order', async (t) => {
  const ms = 1_795_586_303_923;
  const ids = Array.from({ length: 1000 }, (_, i) => newId(i % 2 === 0 ? 'key' : 'req', ms));
  const parts = ids.map((id) => id.slice(4));
  t.same([...parts].sort(), parts, 'sorted as created');
  t.equal(new Set(parts).size, parts.length, 'no two alike');
  t.ok(parts.every((p) => p.length === 26 && p.startsWith(parts[0]!.slice(0, 10))), 'same time part, same length');
});

t.test('another millisecond starts a fresh random part', async (t) => {
  const a = newId('evt', 1_000);
  const b = newId('evt', 2_000);
  const c = newId('evt', 1_000);
  t.ok(a < b, 'later millisecond sorts after');
  t.not(a.slice(14), c.slice(14), 'the same millisecond again, after another one, is fresh random');
});
