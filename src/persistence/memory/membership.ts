// In-memory Membership for tests, simulations and embedded single-process mode.
// Time comes only from the injected clock; a node is alive while clock() < its expiry.
// Never return an expired node, never hand out the stored objects (callers may mutate results).
import type { Membership, NodeInfo } from '../ports.js';

export class MemoryMembership implements Membership {
  private readonly nodes = new Map<string, { info: NodeInfo; expiresAtMs: number }>();

  constructor(private readonly clock: () => number = Date.now) {}

  async heartbeat(node: NodeInfo, ttlMs: number): Promise<void> {
    const info = { nodeId: node.nodeId, grpcAddress: node.grpcAddress, startedAtMs: node.startedAtMs };
    this.nodes.set(node.nodeId, { info, expiresAtMs: this.clock() + ttlMs });
  }

  async leave(nodeId: string): Promise<void> {
    this.nodes.delete(nodeId);
  }

  async alive(): Promise<NodeInfo[]> {
    const now = this.clock();
    const out: NodeInfo[] = [];
    for (const [id, n] of this.nodes) {
      if (now >= n.expiresAtMs) this.nodes.delete(id);
      else out.push({ ...n.info });
    }
    return out.sort((a, b) => (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0));
  }
}
