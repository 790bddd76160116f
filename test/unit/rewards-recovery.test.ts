// Recovery of reward issuances over the in-memory twins (real engine and placement): issuances
// recorded before a snapshot and after it (journal tail, then a crash) are rebuilt identically by
// the next owner, and the rebuilt actor keeps deciding the same way (a redeemed one stays redeemed).
import t from 'tap';
import type { Engine } from '../../src/actors/engine.js';
import type { Call } from '../../src/actors/partition.js';
import type { RewardCommand, RewardTerms } from '../../src/domain/rewards.js';
import { type MemoryStorage, memoryNode, memoryStorage, ok } from '../helpers/memory-node.js';

const P = 4;
const day = 86_400_000;

const node = (storage: MemoryStorage, nodeId: string) => memoryNode(storage, nodeId, P);

const currencies = [{ key: 'coins', negativeBalance: 'forbid' as const, expiryDays: null }];
const terms: RewardTerms = { id: 'rw_1', cost: 30, currency: 'coins', expiryAfterMs: 5 * day };
const customers = ['r1', 'r2', 'r3'];

const at = (customer: string, nowMs: number, command: Call['command']): Call => ({ env: 'env_1', target: { by: 'key', key: customer }, command, nowMs });
const reward = (customer: string, nowMs: number, command: RewardCommand) => at(customer, nowMs, { kind: 'reward.run', command, tierPrograms: [] });

t.test('replay rebuilds identical issuances from snapshots plus the journal tail', async (t) => {
  const s = memoryStorage();
  const issuancesOf = async (e: Engine, customer: string) => {
    const v = ok(await e.execute(at(customer, 100 * day, { kind: 'customer.view' })));
    return v.kind === 'customer' ? v.customer.issuances : [];
  };
  const a = await node(s, 'n1');
  for (const c of customers) {
    ok(await a.engine.execute(at(c, 1, { kind: 'customer.create', externalId: c, attributes: {} })));
    ok(await a.engine.execute(at(c, 2, { kind: 'ledger.run', currencies, tierPrograms: [], command: { kind: 'ledger.adjust', currency: 'coins', amount: 100, reason: 't' } })));
    for (let i = 0; i < 4; i++) ok(await a.engine.execute(reward(c, 10 + i, { kind: 'reward.issue', issuanceId: `rwi_${c}_${i}`, terms, sourceType: 'api', sourceId: null })));
    ok(await a.engine.execute(reward(c, 20, { kind: 'reward.redeem', issuanceId: `rwi_${c}_0`, currencies })));
  }
  await a.placement.stop(); // snapshots
  const b = await node(s, 'n2');
  for (const c of customers) {
    ok(await b.engine.execute(reward(c, 30, { kind: 'reward.cancel', issuanceId: `rwi_${c}_1`, reason: 'tail' })));
    ok(await b.engine.execute(reward(c, 6 * day, { kind: 'reward.expire_due' })));
    ok(await b.engine.execute(reward(c, 6 * day, { kind: 'reward.issue', issuanceId: `rwi_${c}_late`, terms, sourceType: 'api', sourceId: null })));
    ok(await b.engine.execute(reward(c, 6 * day, { kind: 'reward.redeem', issuanceId: `rwi_${c}_late`, currencies })));
    ok(await b.engine.execute(reward(c, 6 * day, { kind: 'reward.settle', issuanceId: `rwi_${c}_lost`, terms })));
  }
  const expected = await Promise.all(customers.map((c) => issuancesOf(b.engine, c)));
  // Crash: nothing is snapshotted; the next owner replays the tail after the last checkpoint.
  for (let p = 0; p < P; p++) await s.leases.release(p, 'n2', (await s.leases.list(P))[p]?.epoch ?? 0);
  const c = await node(s, 'n3');
  const rebuilt = await Promise.all(customers.map((x) => issuancesOf(c.engine, x)));
  t.same(rebuilt, expected);
  t.same(
    expected[0]!.map((i) => i.status),
    ['redeemed', 'cancelled', 'expired', 'expired', 'redeemed'],
    'the history covers every transition',
  );
  const again = await c.engine.execute(reward('r1', 7 * day, { kind: 'reward.redeem', issuanceId: 'rwi_r1_late', currencies }));
  t.same(again.ok === false && again.code, 'invalid_state', 'the rebuilt actor knows it was redeemed');
  const voided = await c.engine.execute(reward('r1', 7 * day, { kind: 'reward.issue', issuanceId: 'rwi_r1_lost', terms, sourceType: 'api', sourceId: null }));
  t.same(voided.ok === false && voided.code, 'reward_unavailable', 'a voided reservation stays voided after recovery');
  await c.placement.stop();
});
