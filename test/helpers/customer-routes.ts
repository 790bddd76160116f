// The customer routes over a real engine on the in-memory twins (memoryNode), called as the
// gateway calls them: what tests of deletes, aliases and merges start when they need to stop or
// interleave the route's steps (`step` runs before every engine call, `eraseEventIds` receives
// every register write). The read model is empty: a merge repeated after a crash is not found.
import type { Test } from 'tap';
import type { Engine } from '../../src/actors/engine.js';
import type { Call, CallResult, ReplyView } from '../../src/actors/partition.js';
import { ApiError } from '../../src/errors/api-error.js';
import { customerRoutes } from '../../src/gateway/handlers/customers.js';
import type { RequestContext } from '../../src/gateway/route.js';
import { partitionOf } from '../../src/ids.js';
import { MemoryLocks } from '../../src/persistence/memory/locks.js';
import type { ErasedEventRecord } from '../../src/persistence/ports.js';
import { memoryNode, memoryStorage } from './memory-node.js';

export const env = 'env_1';
export const partitions = 4;

export interface RouteAnswer {
  status: number;
  /** The JSON body, read by tests. */
  body?: any;
  code?: string;
  param?: string;
}

export interface CustomerRoutesOptions {
  /** Runs before every engine call the routes make. */
  step?: (call: Call) => Promise<void>;
  /** Receives every batch of erased event records written to the register (a throw fails the write). */
  eraseEventIds?: (records: ReadonlyArray<ErasedEventRecord>) => Promise<void>;
  /** Gives back the units of the issuances a delete ended (absent: the routes have none). */
  releaseIssuances?: (issuanceIds: readonly string[]) => Promise<void>;
}

export async function customerRoutesOver(t: Test, opts: CustomerRoutesOptions = {}) {
  const node = await memoryNode(memoryStorage(), 'n1', partitions);
  t.teardown(() => node.placement.stop());
  let clock = 1_000_000;
  const now = () => ++clock;
  const engine = {
    execute: async (call: Call): Promise<CallResult> => {
      await opts.step?.(call);
      return node.engine.execute(call);
    },
  } as unknown as Engine;
  const forgotten: string[] = [];
  const routes = customerRoutes({
    engine,
    now,
    checkAttributes: async () => {},
    readModel: { listCustomers: async () => [], listLedgerEntries: async () => [], listCustomerEvents: async () => [] },
    drainProjector: async () => {},
    mintCustomerToken: async () => ({ token: '', expiresAtMs: 0 }),
    eraseEventIds: async (_env, records) => {
      await opts.eraseEventIds?.(records);
    },
    forgetIdempotentAnswers: async (_env, ids) => {
      forgotten.push(...ids);
      return 0;
    },
    mergeLock: { locks: new MemoryLocks(), ttlMs: 10_000, waitMs: 5000 },
    tiers: { all: async () => [] },
    ...(opts.releaseIssuances === undefined ? {} : { releaseIssuances: (_env: string, ids: readonly string[]) => opts.releaseIssuances!(ids) }),
  });

  /** Calls a route as the gateway would; an ApiError becomes its status and code. */
  const request = async (method: string, path: string, id: string, body?: unknown, headers: Record<string, string> = {}): Promise<RouteAnswer> => {
    const route = routes.find((r) => r.method === method && r.path === path);
    if (route === undefined) throw new Error(`no route ${method} ${path}`);
    const ctx = { params: { id }, body, headers, query: {}, principal: { kind: 'secret', environment: { id: env }, credentialId: 'key_1' } };
    try {
      const r = (await (route.handler as (c: RequestContext) => Promise<{ status: number; body?: unknown }>)(ctx as unknown as RequestContext)) ?? {};
      return { status: r.status, body: r.body };
    } catch (err) {
      if (err instanceof ApiError) return { status: err.status, code: err.code, param: err.param };
      throw err;
    }
  };

  /** An engine call straight to the node (not through `step`), which must succeed. */
  const direct = async (target: Call['target'], command: Call['command']): Promise<ReplyView> => {
    const r = await node.engine.execute({ env, target, command, nowMs: now() });
    if (r.ok !== true) throw new Error(`expected ok, got ${JSON.stringify(r)}`);
    return r.reply;
  };
  /** The raw answer of an engine call straight to the node. */
  const raw = async (target: Call['target'], command: Call['command']): Promise<CallResult> => node.engine.execute({ env, target, command, nowMs: now() });

  const create = async (externalId: string, attributes: Record<string, unknown> = {}): Promise<string> => {
    const r = await request('POST', '/v1/customers', '', { external_id: externalId, attributes });
    if (r.status !== 201) throw new Error(`create ${externalId}: ${JSON.stringify(r)}`);
    return r.body.id as string;
  };
  const event = (key: string, id: string, properties: Record<string, unknown> = {}) =>
    raw({ by: 'key', key }, {
      kind: 'event.record',
      externalId: key,
      clientEventId: id,
      name: 'app.opened',
      occurredAtMs: 1000,
      properties,
      fp: 1,
      trust: 'merchant_asserted',
      source: { type: 'secret_key', id: 'key_1' },
      rules: null,
    });
  const addAlias = (customerId: string, alias: string) => request('POST', '/v1/customers/:id/aliases', customerId, { alias, kind: 'anonymous' });
  const remove = (customerId: string, headers: Record<string, string> = {}) => request('DELETE', '/v1/customers/:id', customerId, undefined, headers);
  const get = (customerId: string) => request('GET', '/v1/customers/:id', customerId);
  /** A key whose partition is (or is not) `partition`, named from `prefix`. */
  const keyIn = (prefix: string, partition: number, same = true): string => {
    for (let i = 0; ; i++) {
      const k = `${prefix}-${i}`;
      if ((partitionOf(env, k, partitions) === partition) === same) return k;
    }
  };
  return { node, request, direct, raw, create, event, addAlias, remove, get, keyIn, forgotten, now };
}

/** The partition an external id (a routing key) lives in. */
export function partitionOfKey(key: string): number {
  return partitionOf(env, key, partitions);
}
