// Contract suite of the Membership port, run against Redis and the in-memory adapter. Time moves
// only through the harness: a fake clock for memory, real waiting for Redis (server clock).
// Checked: alive() lists exactly the unexpired nodes, sorted by nodeId; heartbeats refresh and
// update the info; leave() is immediate.
import t, { type Test } from 'tap';
import { MemoryMembership } from '../../src/persistence/memory/membership.js';
import type { Membership, NodeInfo } from '../../src/persistence/ports.js';
import { RedisMembership } from '../../src/persistence/redis/redis-membership.js';
import { redisForTest } from '../helpers/redis.js';

interface Harness {
  membership: Membership;
  advance(ms: number): Promise<void>;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

const adapters: Array<[string, (t: Test) => Promise<Harness>]> = [
  [
    'redis',
    async (t) => {
      const { redis, prefix } = redisForTest(t, 'members');
      return { membership: new RedisMembership(redis, prefix), advance: sleep };
    },
  ],
  [
    'memory',
    async () => {
      let now = 5_000_000;
      return {
        membership: new MemoryMembership(() => now),
        advance: async (ms) => {
          now += ms;
        },
      };
    },
  ],
];

const node = (nodeId: string, port = 9090): NodeInfo => ({
  nodeId,
  grpcAddress: `10.0.0.1:${port}`,
  startedAtMs: 1_700_000_000_000,
});

function membershipContract(name: string, make: (t: Test) => Promise<Harness>): void {
  t.test(`membership contract: ${name}`, async (t) => {
    t.test('alive lists registered nodes sorted by nodeId', async (t) => {
      const { membership } = await make(t);
      t.same(await membership.alive(), []);
      await membership.heartbeat(node('node-c'), 60_000);
      await membership.heartbeat(node('node-a'), 60_000);
      await membership.heartbeat(node('node-b'), 60_000);
      t.same(await membership.alive(), [node('node-a'), node('node-b'), node('node-c')]);
    });

    t.test('a node whose heartbeat expired is not alive', async (t) => {
      const { membership, advance } = await make(t);
      await membership.heartbeat(node('node-a'), 60_000);
      await membership.heartbeat(node('node-b'), 50);
      await advance(120);
      t.same(await membership.alive(), [node('node-a')]);
      await membership.heartbeat(node('node-b'), 60_000);
      t.same(await membership.alive(), [node('node-a'), node('node-b')], 'a new heartbeat brings it back');
    });

    t.test('a heartbeat refreshes the ttl and updates the info', async (t) => {
      const { membership, advance } = await make(t);
      await membership.heartbeat(node('node-a', 1), 300);
      await advance(200);
      await membership.heartbeat(node('node-a', 2), 300);
      await advance(200);
      t.same(await membership.alive(), [node('node-a', 2)], 'alive 400 ms after the first 300 ms heartbeat');
      await advance(250);
      t.same(await membership.alive(), [], 'and gone once the refreshed ttl passed');
    });

    t.test('leave removes the node at once', async (t) => {
      const { membership } = await make(t);
      await membership.heartbeat(node('node-a'), 60_000);
      await membership.heartbeat(node('node-b'), 60_000);
      await membership.leave('node-a');
      await membership.leave('node-unknown');
      t.same(await membership.alive(), [node('node-b')]);
    });
  });
}

for (const [name, make] of adapters) membershipContract(name, make);
