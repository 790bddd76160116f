// The campaign catalog against real PostgreSQL: resources that join a campaign through their own
// campaign_id (challenges, wired by the service) hold it like rules do (delete: resource_in_use).
import t from 'tap';
import { CampaignCatalog } from '../../src/catalog/campaigns.js';
import { ApiError } from '../../src/errors/api-error.js';
import { MemoryBus } from '../../src/persistence/memory/bus.js';
import { sqlForTest } from '../helpers/sql.js';

t.test('other users of a campaign (challenges) block its deletion', async (t) => {
  const { sql } = await sqlForTest(t, 'postgres');
  const users: Record<string, string[]> = { challenge: ['chl_1', 'chl_2'] };
  const catalog = new CampaignCatalog(sql, new MemoryBus(), {
    segmentExists: async () => true,
    currencyExists: async () => true,
    otherUsers: async () => users,
  });
  const c = await catalog.create('env_1', { name: 'Spring', description: null, audienceSegment: null, startsAtMs: null, endsAtMs: null, budgets: [] });
  const err = await catalog.delete('env_1', c.id).then(
    () => null,
    (e: unknown) => e,
  );
  t.ok(err instanceof ApiError);
  t.match(err, { code: 'resource_in_use', details: { rules: [], challenges: ['chl_1', 'chl_2'] } });
  t.match((err as ApiError).message, /challenge chl_1, challenge chl_2/);
  users.challenge = [];
  await catalog.delete('env_1', c.id);
  t.equal(await catalog.exists('env_1', c.id), false);
});

t.test('a PATCH passes the events barrier only when it adds a cap, and stores nothing when the barrier fails', async (t) => {
  // Given a campaign capped in coins and a barrier that can be made to fail
  const { sql } = await sqlForTest(t, 'postgres');
  const catalog = new CampaignCatalog(sql, new MemoryBus(), { segmentExists: async () => true, currencyExists: async () => true });
  const c = await catalog.create('env_1', {
    name: 'Spring',
    description: null,
    audienceSegment: null,
    startsAtMs: null,
    endsAtMs: null,
    budgets: [{ currency: 'coins', amount: 100 }],
  });
  let passed = 0;
  let fails = false;
  const barrier = async () => {
    passed++;
    if (fails) throw new ApiError('rate_limited', { message: 'retry', retryAfterSeconds: 1 });
  };

  // When the PATCH keeps or changes existing caps only, then no barrier is passed
  await catalog.update('env_1', c.id, undefined, { name: 'Renamed' }, barrier);
  await catalog.update('env_1', c.id, undefined, { budgets: [{ currency: 'coins', amount: 200 }] }, barrier);
  t.equal(passed, 0);

  // When it adds a cap (gems) and the barrier fails, then it answers 429 and nothing is stored
  fails = true;
  const err = await catalog.update('env_1', c.id, undefined, { budgets: [{ currency: 'gems', amount: 5 }] }, barrier).catch((e: unknown) => e);
  t.match(err, { code: 'rate_limited', retryAfterSeconds: 1 });
  t.equal(passed, 1);
  const kept = await catalog.get('env_1', c.id);
  t.match(kept, { name: 'Renamed', version: 3, budgets: [{ currency: 'coins', amount: 200 }] });
  t.equal(kept.budgets.length, 1);

  // When the barrier passes, then the cap is added (a removed cap added again passes it too)
  fails = false;
  t.match((await catalog.update('env_1', c.id, undefined, { budgets: [{ currency: 'gems', amount: 5 }] }, barrier)).budgets, [
    { currency: 'gems', amount: 5, reserved: 0 },
  ]);
  await catalog.update('env_1', c.id, undefined, { budgets: [{ currency: 'gems', amount: 5 }, { currency: 'coins', amount: 50 }] }, barrier);
  t.equal(passed, 3);
});
