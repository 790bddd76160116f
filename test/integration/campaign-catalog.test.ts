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
