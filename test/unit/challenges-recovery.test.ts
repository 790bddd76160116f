// Recovery of challenge progress: a node that takes over after a crash rebuilds, from snapshots
// plus the journal tail, exactly the challenge records, completions and completion awards the live
// node had. Real engine and ClusterPlacement over in-memory ports (as in engine.test.ts).
import t from 'tap';
import type { Engine } from '../../src/actors/engine.js';
import type { Call } from '../../src/actors/partition.js';
import { compileChallenge } from '../../src/domain/challenge-effects.js';
import type { ChallengeConfig } from '../../src/domain/challenges.js';
import type { RulesContext } from '../../src/domain/rule-effects.js';
import { type MemoryStorage, memoryNode, memoryStorage, ok } from '../helpers/memory-node.js';

const P = 4;
const T0 = Date.parse('2026-11-23T20:00:00Z');

const node = (storage: MemoryStorage, nodeId: string) => memoryNode(storage, nodeId, P);

const daily: ChallengeConfig = {
  id: 'chl_daily',
  name: 'Two matches a day',
  qualifying: { event: 'match.completed' },
  target: 2,
  period: 'daily',
  contributionKey: 'event.properties.match_id',
  enrollment: 'automatic',
  repeatable: true,
  startsAtMs: null,
  endsAtMs: null,
  status: 'active',
  completionActions: [{ type: 'points.award', currency: 'coins', amount: 10 }],
};

/** Completes once per customer, ever: a lost completion would pay its award again. */
const once: ChallengeConfig = { ...daily, id: 'chl_once', name: 'Three matches', target: 3, period: 'none', repeatable: false, completionActions: [{ type: 'points.award', currency: 'coins', amount: 1000 }] };

const rules: RulesContext = {
  plans: [],
  currencies: [{ key: 'coins', negativeBalance: 'forbid', expiryDays: null }],
  tierPrograms: [],
  challenges: [compileChallenge(daily, 1), compileChallenge(once, 1)],
  // Local midnight in Tokyo is 15:00 UTC: the events below span several local days.
  timeZone: 'Asia/Tokyo',
};

let n = 0;
const match = (customer: string, matchId: string, nowMs: number): Call => ({
  env: 'env_1',
  target: { by: 'key', key: customer },
  command: {
    kind: 'event.record',
    externalId: customer,
    clientEventId: `e${++n}`,
    name: 'match.completed',
    occurredAtMs: nowMs,
    properties: { match_id: matchId },
    fp: n,
    trust: 'merchant_asserted', source: { type: 'secret_key', id: 'key_test' },
    rules,
  },
  nowMs,
});

async function views(e: Engine) {
  return Promise.all(
    ['c1', 'c2', 'c3'].map(async (c) => {
      const v = ok(await e.execute({ env: 'env_1', target: { by: 'key', key: c }, command: { kind: 'customer.view' }, nowMs: T0 }));
      return v.kind === 'customer' ? { challenges: v.customer.challenges, balances: v.customer.balances } : null;
    }),
  );
}

const storage = () => memoryStorage();

const hour = 3_600_000;
const calls = Array.from({ length: 40 }, (_, i) => match(`c${(i % 3) + 1}`, i < 24 ? `m${i % 5}` : `m${i % 4}`, T0 + i * 2 * hour));

t.test('replay rebuilds identical challenge progress, completions and awards', async (t) => {
  // The reference: one node that never restarts.
  const ref = await node(storage(), 'ref');
  for (const call of calls) ok(await ref.engine.execute(call));
  const reference = await views(ref.engine);
  await ref.placement.stop();

  const s = storage();
  const a = await node(s, 'n1');
  for (const call of calls.slice(0, 24)) ok(await a.engine.execute(call));
  await a.placement.stop(); // snapshots
  const b = await node(s, 'n2');
  for (const call of calls.slice(24)) ok(await b.engine.execute(call));
  t.same(await views(b.engine), reference, 'state restored from snapshots and continued equals the reference');
  // Crash: the tail after the last checkpoint is replayed by the next owner.
  for (let p = 0; p < P; p++) await s.leases.release(p, 'n2', (await s.leases.list(P))[p]?.epoch ?? 0);
  const c = await node(s, 'n3');
  t.same(await views(c.engine), reference, 'state rebuilt after the crash equals the reference');
  t.ok(reference.every((v) => v !== null && v.challenges.length === 2 && (v.balances[0]?.available ?? 0) > 0), 'every customer completed at least once');
  t.ok(reference.some((v) => v?.challenges[0]?.periodKey !== '2026-11-24'), 'progress moved past the first local day');
  t.ok(reference.every((v) => (v?.balances[0]?.available ?? 0) < 2000), 'the one-time challenge paid once per customer');
  await c.placement.stop();
});
