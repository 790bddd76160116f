// Creates remembered by their call id (persistence/sql/create-calls.ts), on PostgreSQL and PGlite:
// two runs of one call at once (a claim taken over from a process that was only slow) make one
// resource and both answer it; runs without a call id stay independent; a refused create records
// nothing; records unused for longer than a claim lives are purged, others kept.
import t from 'tap';
import type { Currency, CurrencyCatalog } from '../../src/catalog/currencies.js';
import { RewardCatalog } from '../../src/catalog/rewards.js';
import { SegmentCatalog } from '../../src/catalog/segments.js';
import { MemoryBus } from '../../src/persistence/memory/bus.js';
import { createCallsKeptMs, createdEarlier, purgeCreateCalls } from '../../src/persistence/sql/create-calls.js';
import { sqlForTest, sqlKinds } from '../helpers/sql.js';

const currencies = { all: async () => [{ key: 'coins' } as Currency] } as unknown as Pick<CurrencyCatalog, 'all'>;
const env = 'env_calls';
const mug = { name: 'Mug', cost: 5, currency: 'coins', availability: 3, expiryAfter: null };

for (const kind of sqlKinds) {
  t.test(`${kind}: creates once per call`, async (t) => {
    const { sql } = await sqlForTest(t, kind);
    const rewards = new RewardCatalog(sql, currencies);
    const rewardCount = async () => (await sql`select count(*)::int as n from rewards where environment_id = ${env}`)[0]!.n as number;

    await t.test('given two runs of one call at once, then one reward, which both answer', async (t) => {
      const [a, b] = await Promise.all([rewards.create(env, mug, 'call-1'), rewards.create(env, mug, 'call-1')]);
      t.equal(a.id, b.id);
      t.same(a, b);
      t.equal(await rewardCount(), 1);
      t.equal(await createdEarlier(sql, 'call-1'), a.id, 'the call is recorded with the reward');
      const later = await rewards.create(env, mug, 'call-1');
      t.equal(later.id, a.id, 'a later run answers it too');
      t.equal(await rewardCount(), 1);
    });

    await t.test('given runs without a call id, then each creates', async (t) => {
      const [a, b] = await Promise.all([rewards.create(env, mug), rewards.create(env, mug)]);
      t.not(a.id, b.id);
      t.equal(await rewardCount(), 3);
    });

    await t.test('given a create refused (its name taken), then nothing is recorded for its call', async (t) => {
      const segments = new SegmentCatalog(sql, new MemoryBus());
      await segments.create(env, { name: 'vip', description: null, kind: 'static', condition: null }, 'call-2');
      await t.rejects(segments.create(env, { name: 'vip', description: null, kind: 'static', condition: null }, 'call-3'), { code: 'already_exists' });
      t.equal(await createdEarlier(sql, 'call-3'), null);
      await t.rejects(segments.create(env, { name: 'vip', description: null, kind: 'static', condition: null }, 'call-3'), { code: 'already_exists' }, 'refused again');
    });

    await t.test('given records used long ago and lately, then the purge takes only the old', async (t) => {
      await sql`insert into create_calls (call_id, resource_id, used_at) values ('old', 'rw_x', now() - make_interval(secs => ${createCallsKeptMs / 1000 + 60}))`;
      t.equal(await purgeCreateCalls(sql), 1);
      t.equal(await createdEarlier(sql, 'old'), null);
      t.equal(await createdEarlier(sql, 'call-1'), (await rewards.list(env, { limit: 1, after: null, status: null }))[0]!.id, 'a recent record stays');
    });
  });
}
