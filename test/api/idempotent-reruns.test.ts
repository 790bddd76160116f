// A request whose answer was never stored under its Idempotency-Key (the store write failed, so
// the claim goes stale; or a 5xx released it) runs again when the client repeats it. What the
// first run applied in a customer's actor is not applied again: the gateway gives every run of
// the request the same call id (RequestContext.callId) and the actor answers a repeat with the
// first answer (actors/calls.ts). Real gateway, real routes, an engine over in-memory storage.

import { pino } from 'pino';
import t, { type Test } from 'tap';
import type { CurrencyCatalog } from '../../src/catalog/currencies.js';
import type { RewardCatalog } from '../../src/catalog/rewards.js';
import { type CustomerDeps, customerRoutes } from '../../src/gateway/handlers/customers.js';
import { ledgerRoutes } from '../../src/gateway/handlers/ledger.js';
import { rewardRoutes } from '../../src/gateway/handlers/rewards.js';
import { type Authenticate, createGateway } from '../../src/gateway/server.js';
import { MemoryIdempotencyStore } from '../../src/persistence/memory/idempotency-store.js';
import type { Principal } from '../../src/tenancy/types.js';
import { memoryNode, memoryStorage, ok } from '../helpers/memory-node.js';

const staleAfterMs = 100;
const env = 'env_1';

/** An idempotency store whose next `failures` answer writes fail (the claim stays in progress and goes stale). */
class FlakyStore extends MemoryIdempotencyStore {
  failures = 0;
  override async complete(...args: Parameters<MemoryIdempotencyStore['complete']>): Promise<void> {
    if (this.failures > 0) {
      this.failures--;
      throw new Error('idempotency store unreachable');
    }
    return super.complete(...args);
  }
}

const principal: Principal = {
  kind: 'secret',
  credentialId: 'key_1',
  organizationId: 'org_1',
  environment: { id: env, name: 'test', runtimeClass: 'test', projectId: 'proj_1', organizationId: 'org_1', timezone: 'UTC' },
  userId: null,
  role: null,
  scopes: new Set(['customers:write', 'customers:read', 'ledger:write', 'ledger:read', 'programs:read', 'programs:write']),
  allowedEvents: [],
  allowedOrigins: [],
  customerId: null,
};
const authenticate: Authenticate = () => principal;

/** Reward stock as RewardCatalog keeps it: reservations per issuance id, units taken. */
function stock() {
  const reservations = new Map<string, { customerId: string; state: 'reserved' | 'confirmed' | 'released' }>();
  const terms = { id: 'rw_1', cost: 0, currency: 'coins', expiryAfterMs: null };
  const catalog = {
    async reserve(_env: string, _rewardId: string, issuanceId: string, customerId: string) {
      const held = reservations.get(issuanceId);
      if (held === undefined) reservations.set(issuanceId, { customerId, state: 'reserved' });
      return terms;
    },
    async confirm(_env: string, issuanceId: string) {
      const r = reservations.get(issuanceId);
      if (r?.state === 'reserved') r.state = 'confirmed';
    },
    async reservation(_env: string, issuanceId: string) {
      const r = reservations.get(issuanceId);
      return r === undefined ? null : { issuanceId, customerId: r.customerId };
    },
    async release(_env: string, issuanceId: string) {
      const r = reservations.get(issuanceId);
      if (r === undefined || r.state === 'released') return false;
      r.state = 'released';
      return true;
    },
  };
  return {
    catalog: catalog as unknown as RewardCatalog,
    get taken() {
      let n = 0;
      for (const r of reservations.values()) if (r.state !== 'released') n++;
      return n;
    },
  };
}

async function setup(t: Test) {
  const storage = memoryStorage();
  const node = await memoryNode(storage, 'n1', 4);
  const store = new FlakyStore();
  const rewards = stock();
  const now = () => Date.now();
  const coins = [{ key: 'coins', negativeBalance: 'forbid' as const, expiryDays: null }];
  const currencies = { configs: async () => coins, all: async () => coins } as unknown as CurrencyCatalog;
  const tiers = { all: async () => [] };
  const drainProjector = async () => {};
  const routes = [
    ...ledgerRoutes({ engine: node.engine, now, currencies, tiers, readModel: { listLedgerEntries: async () => [] }, drainProjector }),
    ...rewardRoutes({
      engine: node.engine,
      now,
      rewards: rewards.catalog,
      currencies,
      tiers,
      readModel: { listIssuances: async () => [], getIssuance: async () => null },
      drainProjector,
    }),
    ...customerRoutes({ engine: node.engine, now, checkAttributes: async () => {}, drainProjector } as unknown as CustomerDeps),
  ];
  const gateway = createGateway({
    routes,
    authenticate,
    idempotency: store,
    idempotencyStaleAfterMs: staleAfterMs,
    logger: pino({ level: 'silent' }),
    ready: async () => ({ ok: true, checks: {} }),
  });
  t.teardown(async () => {
    await gateway.close();
    await node.placement.stop();
  });
  const post = (path: string, key: string, body: unknown = {}) =>
    gateway.invoke({ method: 'POST', path, headers: { authorization: 'Bearer k', 'idempotency-key': key }, body });
  const balance = async (customer: string) => {
    const v = ok(await node.engine.execute({ env, target: { by: 'key', key: customer }, command: { kind: 'customer.view' }, nowMs: Date.now() }));
    return v.kind === 'customer' ? (v.customer.balances.find((b) => b.currency === 'coins')?.available ?? 0) : -1;
  };
  return { node, store, rewards, post, balance };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

t.test('given a ledger entry whose answer was not stored, when the request is repeated after its claim went stale, then the balance moved once', async (t) => {
  const s = await setup(t);
  t.equal((await s.post('/v1/customers', 'c-1', { external_id: 'cust-a', attributes: {} })).status, 201);

  s.store.failures = 1;
  const first = await s.post('/v1/ledger_entries', 'adj-1', { customer_id: 'cust-a', currency: 'coins', amount: 100, reason: 'goodwill' });
  t.equal(first.status, 201, 'the work is done and answered');
  const early = await s.post('/v1/ledger_entries', 'adj-1', { customer_id: 'cust-a', currency: 'coins', amount: 100, reason: 'goodwill' });
  t.equal(early.status, 409, 'the claim is still in progress');
  await sleep(staleAfterMs * 2);
  const again = await s.post('/v1/ledger_entries', 'adj-1', { customer_id: 'cust-a', currency: 'coins', amount: 100, reason: 'goodwill' });
  t.equal(again.status, 201, 'the stale claim runs again');
  t.equal((again.body as { id: string }).id, (first.body as { id: string }).id, 'answered the first run’s entry');
  t.equal(await s.balance('cust-a'), 100, 'the balance shows the adjustment once');

  const other = await s.post('/v1/ledger_entries', 'adj-2', { customer_id: 'cust-a', currency: 'coins', amount: 100, reason: 'goodwill' });
  t.not((other.body as { id: string }).id, (first.body as { id: string }).id, 'another key is another entry');
  t.equal(await s.balance('cust-a'), 200);
});

t.test('given a reward issuance whose answer was not stored, when the request is repeated, then one issuance holds one unit', async (t) => {
  const s = await setup(t);
  t.equal((await s.post('/v1/customers', 'c-1', { external_id: 'cust-b', attributes: {} })).status, 201);
  s.store.failures = 1;
  const first = await s.post('/v1/reward_issuances', 'iss-1', { reward_id: 'rw_1', customer_id: 'cust-b' });
  t.equal(first.status, 201);
  await sleep(staleAfterMs * 2);
  const again = await s.post('/v1/reward_issuances', 'iss-1', { reward_id: 'rw_1', customer_id: 'cust-b' });
  t.equal(again.status, 201);
  t.equal((again.body as { id: string }).id, (first.body as { id: string }).id, 'the first issuance, not a second');
  t.equal(s.rewards.taken, 1, 'the unit the second run reserved went back');
  const v = ok(await s.node.engine.execute({ env, target: { by: 'key', key: 'cust-b' }, command: { kind: 'customer.view' }, nowMs: Date.now() }));
  t.equal(v.kind === 'customer' && v.customer.issuances.length, 1, 'the customer holds one issuance');

  // A redeem (Idempotency-Key optional there) run again is answered redeemed, not 409 invalid_state.
  const id = (first.body as { id: string }).id;
  s.store.failures = 1;
  const redeemed = await s.post(`/v1/reward_issuances/${id}/redeem`, 'red-1');
  t.equal(redeemed.status, 200);
  await sleep(staleAfterMs * 2);
  const redeemedAgain = await s.post(`/v1/reward_issuances/${id}/redeem`, 'red-1');
  t.equal(redeemedAgain.status, 200, 'the first run redeemed it: answered so');
  t.same(redeemedAgain.body, redeemed.body);
  t.equal((await s.post(`/v1/reward_issuances/${id}/redeem`, 'red-2')).status, 409, 'another request is refused, as always');
});

t.test('given a customer create whose answer was not stored, when the request is repeated, then it answers the customer, not 409', async (t) => {
  const s = await setup(t);
  s.store.failures = 1;
  const first = await s.post('/v1/customers', 'c-2', { external_id: 'cust-c', attributes: { plan: 'gold' } });
  t.equal(first.status, 201);
  await sleep(staleAfterMs * 2);
  const again = await s.post('/v1/customers', 'c-2', { external_id: 'cust-c', attributes: { plan: 'gold' } });
  t.equal(again.status, 201);
  t.equal((again.body as { id: string }).id, (first.body as { id: string }).id);
  const otherKey = await s.post('/v1/customers', 'c-3', { external_id: 'cust-c', attributes: { plan: 'gold' } });
  t.equal(otherKey.status, 409, 'another request for the same external id is refused, as always');
});
