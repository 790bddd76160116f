// The barrier a counter definition passes before anything decides it is ready (spec 2.9: every
// event counted once, live or by the backfill). An event is counted live when the counters context
// it carries holds the definition. That context is read in the same tick as the event's command
// enters the engine (catalog/counters.ts, withCountersContext), and the engine counts such commands
// in flight until they settle (Engine.settled). So once, on every node, the environment's cached
// definitions were dropped and every event command in flight there settled (journaled or failed),
// and then the read tables hold every partition's journal up to its tail as read after that,
// every event the definition did not count live is in the events table, without the definition in
// its `counted`, for the backfill to find; every later event is counted live.
//
// Nodes are the membership's alive ones; each other node is asked over the forwarding stream
// (Shard.Forward) with a node message: a msgpack array ['counters.settle', environmentId] (calls
// are msgpack maps, so the two never mix), answered `true` once it settled. The barrier fails
// (BarrierUnavailable) when a node does not answer or the read tables do not catch up within
// timeoutMs: the definition then stays backfilling, and a backfill answers 429 (retry).
//
// Its second user is a campaign PATCH that adds a budget cap (service.ts, eventsSettled): past the
// barrier the projected campaign_spend holds every award journaled before it, so the cap starts
// from what was really awarded. Dropping the counter definitions' cache costs that use nothing.
import { packMessage, unpackMessage } from '../actors/codec.js';
import type { Forwarder } from '../actors/engine.js';
import { compareOffsets, type Journal, type Membership, type Offset, offsetZero } from '../persistence/ports.js';

export const countersBarrierLimits = {
  /** How long the whole barrier may take: every node settled and the read tables caught up. */
  timeoutMs: 10_000,
  /** How often the projected offsets are read while another node's projector catches up. */
  pollMs: 20,
} as const;

export interface CountersBarrierDeps {
  nodeId: string;
  membership: Pick<Membership, 'alive'>;
  forwarder: Forwarder | null;
  /** This node's part: drop the environment's cached definitions, then Engine.settled(). */
  settleLocal(environmentId: string): Promise<void>;
  partitions: number;
  journal: Pick<Journal, 'last'>;
  /** Every partition's offset in the read tables (projection_offsets); absent: none yet. */
  projectedOffsets(): Promise<Map<number, Offset>>;
  /** This node's projector, drained at once rather than waited for. */
  drainProjector(): Promise<void>;
  timeoutMs?: number;
  pollMs?: number;
}

/** A node did not confirm in time, or the read tables did not catch up: retry later. */
export class BarrierUnavailable extends Error {
  override readonly name = 'BarrierUnavailable';
}

const settleMessage = 'counters.settle';

export class CountersBarrier {
  constructor(private readonly deps: CountersBarrierDeps) {}

  /** A forwarded payload that is a node message for the barrier (a msgpack array), not a call. */
  static isMessage(payload: Uint8Array): boolean {
    const b = payload[0];
    return b !== undefined && ((b & 0xf0) === 0x90 || b === 0xdc || b === 0xdd);
  }

  /** Another node's barrier asks this one to settle an environment. */
  async handle(payload: Uint8Array): Promise<Uint8Array> {
    const [kind, environmentId] = unpackMessage<[unknown, unknown]>(payload);
    if (kind !== settleMessage || typeof environmentId !== 'string') throw new Error(`unknown node message ${String(kind)}`);
    await this.deps.settleLocal(environmentId);
    return packMessage(true);
  }

  /**
   * Resolves once every event of the environment sent with counters context older than this call
   * (on any node) is in the read tables; rejects with BarrierUnavailable after timeoutMs.
   */
  async pass(environmentId: string): Promise<void> {
    const timeoutMs = this.deps.timeoutMs ?? countersBarrierLimits.timeoutMs;
    const deadline = performance.now() + timeoutMs;
    const peers = (await this.deps.membership.alive()).filter((n) => n.nodeId !== this.deps.nodeId);
    const forwarder = this.deps.forwarder;
    if (peers.length > 0 && forwarder === null) throw new BarrierUnavailable('other nodes are alive and this node cannot reach them');
    const message = packMessage([settleMessage, environmentId]);
    const settled = Promise.all([
      this.deps.settleLocal(environmentId),
      ...peers.map((n) =>
        forwarder!.forward(n.grpcAddress, message, timeoutMs).catch((err: unknown) => {
          throw new BarrierUnavailable(`node ${n.nodeId} did not settle: ${err instanceof Error ? err.message : String(err)}`);
        }),
      ),
    ]);
    await within(settled, deadline, 'the event commands in flight did not settle in time');
    // Every event sent before is journaled (or failed) now: the tails as read from here hold them.
    const tails = await Promise.all(Array.from({ length: this.deps.partitions }, (_, p) => this.deps.journal.last(p)));
    await within(this.deps.drainProjector(), deadline, 'the projector did not drain in time');
    for (;;) {
      const projected = await this.deps.projectedOffsets();
      if (tails.every((tail, p) => compareOffsets(projected.get(p) ?? offsetZero, tail) >= 0)) return;
      if (performance.now() >= deadline) throw new BarrierUnavailable('the read tables did not catch up with the journal in time');
      await sleep(this.deps.pollMs ?? countersBarrierLimits.pollMs);
    }
  }
}

/** `work`, or BarrierUnavailable once `deadline` (performance.now()) passes first. */
function within<T>(work: Promise<T>, deadline: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new BarrierUnavailable(message)), Math.max(0, deadline - performance.now()));
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
