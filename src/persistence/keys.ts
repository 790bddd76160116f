// Every Redis key the service builds, in one place (BullMQ style): nothing else concatenates keys.
// Invariant: all keys of one partition share the hash tag `{p<n>}` so they live in one Redis
// Cluster slot and a Lua script may touch the stream, the lease and the epoch counter atomically.
// The node registry keys share the tag `{nodes}` for the same reason. Never build a key by hand.

export interface Keys {
  /** Stream holding the partition's journal entries. */
  partitionStream(partition: number): string;
  /** String `nodeId:epoch` with a PX ttl: who may write the partition now. */
  partitionLease(partition: number): string;
  /** Counter INCR'd by every successful acquire; never reset, so epochs only grow. */
  partitionEpoch(partition: number): string;
  /** Sorted set of node ids scored by the heartbeat expiry (Redis server ms). */
  nodes(): string;
  /** Hash node id -> JSON NodeInfo, kept in step with nodes(). */
  nodeInfos(): string;
  /** Pub/sub channel of the bus. */
  channel(name: string): string;
  /** String holding the current token of the named lock (Locks), with a PX ttl. */
  lock(name: string): string;
  /**
   * Prefix of an environment's client event id buckets (EventIds): bucket b's hash is this prefix
   * followed by b as two bytes (field = the id's hashes, value = its content fingerprint). All
   * buckets of an environment share the hash tag `{e<env>}`.
   */
  eventIds(environmentId: string): string;
  /**
   * Prefix of an environment's erased event buckets (EventIds.erase): bucket b (the same two bytes
   * as in eventIds) maps hash53(id) (8) | fingerprint (8) to the event's service id. Same hash tag.
   */
  erasedEventIds(environmentId: string): string;
}

export function createKeys(prefix: string): Keys {
  return {
    partitionStream: (p) => `${prefix}:{p${p}}:journal`,
    partitionLease: (p) => `${prefix}:{p${p}}:lease`,
    partitionEpoch: (p) => `${prefix}:{p${p}}:epoch`,
    nodes: () => `${prefix}:{nodes}:expiry`,
    nodeInfos: () => `${prefix}:{nodes}:info`,
    channel: (name) => `${prefix}:bus:${name}`,
    lock: (name) => `${prefix}:lock:${name}`,
    eventIds: (env) => `${prefix}:{e${env}}:eids:`,
    erasedEventIds: (env) => `${prefix}:{e${env}}:eids-erased:`,
  };
}
