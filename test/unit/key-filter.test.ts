import fc from 'fast-check';
import t from 'tap';
import { KeyFilter } from '../../src/actors/key-filter.js';

t.test('a key that was added is never reported absent', async () => {
  fc.assert(
    fc.property(fc.array(fc.tuple(fc.string(), fc.string({ minLength: 1 })), { maxLength: 500 }), (pairs) => {
      const f = new KeyFilter(16);
      for (const [e, k] of pairs) f.add(e, k);
      return pairs.every(([e, k]) => f.mayContain(e, k));
    }),
  );
});

t.test('unknown keys are mostly reported absent at the planned load', async (t) => {
  const f = new KeyFilter(18); // 262,144 bits: ~27k keys at 1%
  for (let i = 0; i < 27_000; i++) f.add('env_a', `player-${i}`);
  let maybe = 0;
  for (let i = 0; i < 20_000; i++) if (f.mayContain('env_a', `other-${i}`)) maybe++;
  t.ok(maybe / 20_000 < 0.03, `false positive rate ${(maybe / 200).toFixed(2)}%`);
  t.notOk(f.mayContain('env_b', 'player-1') && f.mayContain('env_b', 'player-2') && f.mayContain('env_b', 'player-3'), 'environments are part of the key');
});
