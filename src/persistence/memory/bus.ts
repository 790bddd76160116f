// In-process Bus. Several MemoryBus instances (one per simulated node) share a MemoryBusHub and
// see each other's messages, like nodes on one Redis. Delivery is asynchronous (setImmediate),
// as over a network, so no publisher ever runs subscriber code on its own stack.
// At most once: a handler that throws loses that message; it never stops delivery to others.
import type { Bus } from '../ports.js';

type Handler = (message: string) => void;

export class MemoryBusHub {
  private readonly subscribers = new Map<string, Set<Handler>>();

  add(channel: string, handler: Handler): void {
    let set = this.subscribers.get(channel);
    if (!set) this.subscribers.set(channel, (set = new Set()));
    set.add(handler);
  }

  remove(channel: string, handler: Handler): void {
    this.subscribers.get(channel)?.delete(handler);
  }

  deliver(channel: string, message: string): void {
    const set = this.subscribers.get(channel);
    if (!set || set.size === 0) return;
    // Snapshot now: a subscriber added after publish does not get this message (as in Redis).
    const targets = [...set];
    setImmediate(() => {
      for (const h of targets) {
        try {
          h(message);
        } catch {
          // best effort by contract
        }
      }
    });
  }
}

export class MemoryBus implements Bus {
  private readonly mine: Array<{ channel: string; handler: Handler }> = [];
  private closed = false;

  constructor(private readonly hub: MemoryBusHub = new MemoryBusHub()) {}

  async publish(channel: string, message: string): Promise<void> {
    if (this.closed) throw new Error('bus is closed');
    this.hub.deliver(channel, message);
  }

  async subscribe(channel: string, handler: Handler): Promise<void> {
    if (this.closed) throw new Error('bus is closed');
    // Wrap so close() can detach exactly this bus's handlers, even one passed twice.
    const wrapped: Handler = (m) => handler(m);
    this.hub.add(channel, wrapped);
    this.mine.push({ channel, handler: wrapped });
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const s of this.mine) this.hub.remove(s.channel, s.handler);
    this.mine.length = 0;
  }
}
