// The external Bus: Redis pub/sub. Publishes go out on the main client; subscriptions need a
// connection in subscriber mode, so the first subscribe duplicates the client once.
// At most once, best effort: a message published while a node is disconnected is lost (callers
// that need more re-read the source of truth). close() quits the subscriber and what we created.
import type { Redis } from 'ioredis';
import type { Bus } from '../ports.js';
import { createKeys, type Keys } from '../keys.js';
import { connect, quitQuietly, type RedisSource } from './connection.js';

export class RedisBus implements Bus {
  private readonly redis: Redis;
  private readonly owned: boolean;
  private readonly keys: Keys;
  private subscriber: Redis | null = null;
  /** Redis channel -> handlers; one Redis subscription per channel however many handlers. */
  private readonly handlers = new Map<string, Array<(message: string) => void>>();
  private readonly subscribed = new Map<string, Promise<void>>();
  private closed = false;

  constructor(source: RedisSource, prefix: string) {
    const { redis, owned } = connect(source);
    this.redis = redis;
    this.owned = owned;
    this.keys = createKeys(prefix);
  }

  async publish(channel: string, message: string): Promise<void> {
    await this.redis.publish(this.keys.channel(channel), message);
  }

  async subscribe(channel: string, handler: (message: string) => void): Promise<void> {
    if (this.closed) throw new Error('bus is closed');
    const key = this.keys.channel(channel);
    const list = this.handlers.get(key);
    if (list) {
      list.push(handler);
      // A second subscriber returns only once the channel's SUBSCRIBE was confirmed, like the first.
      await this.subscribed.get(key);
      return;
    }
    this.handlers.set(key, [handler]);
    const confirmed = this.subscriberConnection()
      .subscribe(key)
      .then(() => {});
    this.subscribed.set(key, confirmed);
    await confirmed;
  }

  private subscriberConnection(): Redis {
    if (this.subscriber) return this.subscriber;
    // A plain duplicate: auto-pipelining does not apply to subscriber-mode commands.
    const sub = this.redis.duplicate({ enableAutoPipelining: false });
    sub.on('message', (key: string, message: string) => {
      const list = this.handlers.get(key);
      if (!list) return;
      for (const h of list) {
        try {
          h(message);
        } catch {
          // A failing handler must not starve the others: the bus is best effort by contract.
        }
      }
    });
    this.subscriber = sub;
    return sub;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.handlers.clear();
    this.subscribed.clear();
    if (this.subscriber) await quitQuietly(this.subscriber);
    this.subscriber = null;
    if (this.owned) await quitQuietly(this.redis);
  }
}
