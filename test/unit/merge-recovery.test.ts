// Recovery of a merge over the in-memory twins (real engine and placement): a merge moves the
// merged customer's ledger, issuance and static segment to the survivor; after a snapshot, more
// journal and a crash, the next owner rebuilds the survivor identically, and the merged customer
// still hands over the same thing (so a repeated alias addition after a crash finds it).
import t from 'tap';
import type { Engine } from '../../src/actors/engine.js';
import type { Call } from '../../src/actors/partition.js';
import type { RewardTerms } from '../../src/domain/rewards.js';
import { type MemoryStorage, memoryNode, memoryStorage, ok } from '../helpers/memory-node.js';

const P = 4;
const day = 86_400_000;
const node = (storage: MemoryStorage, nodeId: string) => memoryNode(storage, nodeId, P);

const currencies = [{ key: 'coins', negativeBalance: 'forbid' as const, expiryDays: null }];
const terms: RewardTerms = { id: 'rw_1', cost: 30, currency: 'coins', expiryAfterMs: 50 * day };
const byKey = (key: string, nowMs: number, command: Call['command']): Call => ({ env: 'env_1', target: { by: 'key', key }, command, nowMs });
const byId = (id: string, nowMs: number, command: Call['command']): Call => ({ env: 'env_1', target: { by: 'id', id }, command, nowMs });
const adjust = (amount: number, more: Record<string, unknown> = {}): Call['command'] => ({
  kind: 'ledger.run',
  currencies,
  tierPrograms: [],
  command: { kind: 'ledger.adjust', currency: 'coins', amount, reason: 't', ...more },
});

async function view(e: Engine, key: string, nowMs: number) {
  const v = ok(await e.execute(byKey(key, nowMs, { kind: 'customer.view' })));
  if (v.kind !== 'customer') throw new Error('not a customer');
  const c = v.customer;
  return { id: c.id, balances: c.balances, issuances: c.issuances, segmentIds: c.segmentIds, mergedFrom: c.mergedFrom, aliases: c.aliases };
}

t.test('replay rebuilds a merge on both sides: the survivor as it was, the merged customer still handing over the same', async (t) => {
  const s = memoryStorage();
  const a = await node(s, 'n1');
  const m = ok(await a.engine.execute(byKey('m1', 1, { kind: 'customer.create', externalId: 'm1', attributes: {} })));
  const sv = ok(await a.engine.execute(byKey('s1', 1, { kind: 'customer.create', externalId: 's1', attributes: {} })));
  if (m.kind !== 'customer' || sv.kind !== 'customer') throw new Error('create');
  const mId = m.customer.id;
  const sId = sv.customer.id;
  ok(await a.engine.execute(byKey('m1', 2, adjust(100, { expiresAtMs: 40 * day }))));
  ok(await a.engine.execute(byKey('m1', 3, adjust(20, { confirmAfterMs: 10 * day }))));
  ok(await a.engine.execute(byKey('m1', 4, { kind: 'reward.run', tierPrograms: [], command: { kind: 'reward.issue', issuanceId: 'rwi_m', terms, sourceType: 'api', sourceId: null } })));
  ok(await a.engine.execute(byKey('m1', 5, { kind: 'segment.add_member', segmentId: 'seg_vip' })));
  ok(await a.engine.execute(byKey('s1', 5, adjust(10))));
  await a.placement.stop(); // snapshots of both, before the merge

  const b = await node(s, 'n2');
  // The merge, as the alias route runs it: the claim at the key's partition, then the survivor.
  const claim = ok(await b.engine.execute(byKey('m1', 6, { kind: 'key.claim', customerId: sId })));
  if (claim.kind !== 'claimed') throw new Error('claim');
  t.equal(claim.mergedFrom, mId);
  const { kind: _, mergedFrom, ...handover } = claim;
  ok(await b.engine.execute(byId(sId, 7, { kind: 'alias.add', alias: 'm1', aliasKind: 'anonymous', mergedFrom, ...handover, tierPrograms: [] })));
  ok(await b.engine.execute(byKey('s1', 8, adjust(-5))));
  const expected = await view(b.engine, 's1', 9);
  t.match(expected, {
    balances: [{ currency: 'coins', available: 105, pending: 20, lifetimeEarned: 110 }],
    issuances: [{ id: 'rwi_m', status: 'issued' }],
    segmentIds: ['seg_vip'],
    mergedFrom: [mId],
  });
  const handedBefore = ok(await b.engine.execute(byId(mId, 9, { kind: 'customer.handover', survivorId: sId })));

  // Crash: nothing is snapshotted after the merge; the next owner replays it from the journal.
  for (let p = 0; p < P; p++) await s.leases.release(p, 'n2', (await s.leases.list(P))[p]?.epoch ?? 0);
  const c = await node(s, 'n3');
  t.same(await view(c.engine, 's1', 9), expected, 'the survivor is rebuilt identically');
  t.same(await view(c.engine, 'm1', 9), expected, "the merged customer's external id reaches the survivor");
  t.same(ok(await c.engine.execute(byId(mId, 9, { kind: 'customer.handover', survivorId: sId }))), handedBefore, 'the merged customer hands over the same');
  // The rebuilt survivor does not take the merged customer over twice.
  ok(await c.engine.execute(byId(sId, 10, { kind: 'alias.add', alias: 'm1-again', aliasKind: 'anonymous', mergedFrom, ...handover, tierPrograms: [] })));
  t.same((await view(c.engine, 's1', 11)).balances, expected.balances, 'nothing taken twice after recovery');
  await c.placement.stop();
});
