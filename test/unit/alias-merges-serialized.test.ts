// Alias additions (merges) of one environment run one after the other on a node: the second
// resolves its survivor only after the first merged. Interleaved (view, view, claim, claim), two
// merges in opposite directions would each merge the other's customer: a cycle. Other
// environments are not held up.
import t from 'tap';
import type { Engine } from '../../src/actors/engine.js';
import type { Call, CallResult } from '../../src/actors/partition.js';
import { customerRoutes } from '../../src/gateway/handlers/customers.js';
import type { RequestContext } from '../../src/gateway/route.js';

const A = 'cust_00001M84KXN2SAE60B7HZ04F81HQ7';
const B = 'cust_00001M84KXN2SAE60B7HZ04F81HQ8';

function harness() {
  const log: string[] = [];
  const engine = {
    execute: async (call: Call): Promise<CallResult> => {
      const who = call.target.by === 'id' ? call.target.id.slice(-3) : call.target.key;
      log.push(`${call.env}:${call.command.kind}:${who}`);
      // Every step takes a few turns, as a journal write would.
      await new Promise((r) => setTimeout(r, 5));
      switch (call.command.kind) {
        case 'customer.view':
          return { ok: true, reply: { kind: 'customer', customer: { id: call.target.by === 'id' ? call.target.id : '', environmentId: call.env } } } as CallResult;
        case 'key.claim':
          return { ok: true, reply: { kind: 'claimed', mergedFrom: null } };
        default:
          return { ok: true, reply: { kind: 'alias', alias: { alias: 'x', kind: 'anonymous', createdAtMs: 0 }, customerId: '', mergedFrom: null } };
      }
    },
  } as unknown as Engine;
  const routes = customerRoutes({
    engine,
    now: () => 0,
    checkAttributes: async () => {},
    readModel: {} as never,
    drainProjector: async () => {},
    mintCustomerToken: async () => ({ token: '', expiresAtMs: 0 }),
  });
  const route = routes.find((r) => r.method === 'POST' && r.path === '/v1/customers/:id/aliases')!;
  const add = (env: string, id: string, alias: string) =>
    (route.handler as (c: RequestContext) => Promise<unknown>)({
      params: { id },
      body: { alias, kind: 'anonymous' },
      principal: { kind: 'secret', environment: { id: env } },
    } as unknown as RequestContext);
  return { log, add };
}

t.test('two merges of one environment run one after the other', async (t) => {
  const { log, add } = harness();
  await Promise.all([add('env_1', A, 'ext-b'), add('env_1', B, 'ext-a')]);
  t.same(log, [
    'env_1:customer.view:HQ7',
    'env_1:key.claim:ext-b',
    'env_1:alias.add:HQ7',
    'env_1:customer.view:HQ8',
    'env_1:key.claim:ext-a',
    'env_1:alias.add:HQ8',
  ]);
});

t.test('a failed merge does not block the next; other environments run alongside', async (t) => {
  const { log, add } = harness();
  const bad = add('env_1', 'not-a-customer-id', 'x');
  const next = add('env_1', A, 'ext-b');
  const other = add('env_2', B, 'ext-c');
  await t.rejects(bad);
  await next;
  await other;
  t.equal(log[0], 'env_2:customer.view:HQ8', 'env_2 did not wait for env_1');
  t.ok(log.includes('env_1:alias.add:HQ7'), 'the merge after the failed one ran');
});
