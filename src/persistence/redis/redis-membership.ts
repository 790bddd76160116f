// The external Membership: a sorted set of node ids scored by heartbeat expiry plus a hash of
// NodeInfo JSON, changed only by scripts that use the Redis server clock (TIME), so nodes with
// skewed clocks agree on who is alive. alive() never returns an expired node.
// Never compute liveness from the local clock here.
import type { Membership, NodeInfo } from '../ports.js';
import { ScriptedRedisAdapter } from './scripted-adapter.js';

export class RedisMembership extends ScriptedRedisAdapter implements Membership {
  async heartbeat(node: NodeInfo, ttlMs: number): Promise<void> {
    const info = JSON.stringify({ nodeId: node.nodeId, grpcAddress: node.grpcAddress, startedAtMs: node.startedAtMs });
    await this.redis.loyaltyNodeHeartbeat(this.keys.nodes(), this.keys.nodeInfos(), node.nodeId, ttlMs, info);
  }

  async leave(nodeId: string): Promise<void> {
    await this.redis.loyaltyNodeLeave(this.keys.nodes(), this.keys.nodeInfos(), nodeId);
  }

  async alive(): Promise<NodeInfo[]> {
    const raw = await this.redis.loyaltyNodeAlive(this.keys.nodes(), this.keys.nodeInfos());
    const nodes = raw.map((s) => JSON.parse(s) as NodeInfo);
    return nodes.sort((a, b) => (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0));
  }
}
