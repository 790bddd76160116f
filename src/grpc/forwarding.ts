// Inter-node forwarding over Shard.Forward: one long-lived bidirectional stream per peer, calls
// and replies batched per event-loop tick into frames, replies correlated by item id.
// Invariants: every forward() settles exactly once (reply, ForwardHandlerFailed or
// ForwardUnavailable); a stream that failed is never reused (the next call opens a new channel);
// no frame grows past forwardLimits.frameBytesSoftMax. Payloads are opaque: never decoded here.
import {
  type ChannelOptions,
  ChannelCredentials,
  type ClientDuplexStream,
  type ServerDuplexStream,
  Server,
  ServerCredentials,
  type ServiceError,
} from '@grpc/grpc-js';
import { type ForwardFrame, type ForwardItem, ForwardStatus, ShardClient, ShardService } from './gen/internal/v1/shard.js';

/** Bounds of the forwarding transport (ours; the spec leaves them open). */
export const forwardLimits = {
  /** A frame is split once its payload bytes reach this; keeps one frame from hogging the stream. */
  frameBytesSoftMax: 4 * 1024 * 1024,
  /** gRPC message ceiling both ways; a single item is bounded by the request body limit (1 MiB). */
  messageBytesMax: 64 * 1024 * 1024,
  deadlineMsDefault: 10_000,
  /** A killed or partitioned peer is detected within keepaliveTimeMs + keepaliveTimeoutMs. */
  keepaliveTimeMs: 2000,
  keepaliveTimeoutMs: 1000,
  reconnectBackoffMsMax: 1000,
  stopGraceMsDefault: 5000,
} as const;

/** Wire overhead estimate per item (tag, id varint, length prefixes), for frame splitting only. */
const itemOverheadBytes = 16;

/**
 * The peer could not run the call: unreachable, stream failed, shutting down, or the deadline
 * passed. The caller refreshes its partition map and retries elsewhere.
 */
export class ForwardUnavailable extends Error {
  override readonly name = 'ForwardUnavailable';
  constructor(
    readonly address: string,
    reason: string,
  ) {
    super(`forward to ${address} unavailable: ${reason}`);
  }
}

/** The peer's handler threw: a bug over there. Retrying elsewhere would not help. */
export class ForwardHandlerFailed extends Error {
  override readonly name = 'ForwardHandlerFailed';
  constructor(
    readonly address: string,
    reason: string,
  ) {
    super(`forward to ${address} failed in the handler: ${reason}`);
  }
}

export type ForwardHandler = (payload: Uint8Array) => Promise<Uint8Array>;

export interface ForwardCounters {
  framesIn: number;
  itemsIn: number;
  framesOut: number;
  itemsOut: number;
}

function newCounters(): ForwardCounters {
  return { framesIn: 0, itemsIn: 0, framesOut: 0, itemsOut: 0 };
}

function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Collects items and writes them as frames: at the end of the tick, or early when a frame is full. */
class FrameBatcher {
  private items: ForwardItem[] = [];
  private bytes = 0;
  private scheduled = false;

  constructor(
    private readonly write: (frame: ForwardFrame) => void,
    private readonly beforeFlush?: () => void,
  ) {}

  push(item: ForwardItem): void {
    this.items.push(item);
    this.bytes += item.payload.length + item.errorMessage.length + itemOverheadBytes;
    if (this.bytes >= forwardLimits.frameBytesSoftMax) {
      this.flush();
      return;
    }
    if (!this.scheduled) {
      this.scheduled = true;
      // setImmediate, not a microtask: every call made during this macrotask, including promise
      // continuations, lands in the same frame.
      setImmediate(() => this.flush());
    }
  }

  get size(): number {
    return this.items.length;
  }

  flush(): void {
    this.scheduled = false;
    if (this.items.length === 0) return;
    const items = this.items;
    this.items = [];
    this.bytes = 0;
    this.beforeFlush?.();
    this.write({ items });
  }

  /** Drops what was not written (the stream is gone); returns the dropped items. */
  discard(): ForwardItem[] {
    const items = this.items;
    this.items = [];
    this.bytes = 0;
    return items;
  }
}

// ---------------------------------------------------------------------------------------------
// Server

export interface ForwardServerOptions {
  host?: string;
  /** 0 picks a free port; start() returns the bound one. */
  port: number;
  handler: ForwardHandler;
  credentials?: ServerCredentials;
  /** Called once per received frame with its item count (metrics, tests). */
  onFrame?: (itemCount: number) => void;
}

/** One client stream on the server: runs items, batches replies, ends after a drain. */
class ServerSession {
  private inFlight = 0;
  private closed = false;
  private draining = false;
  private clientDone = false;
  private readonly out: FrameBatcher;

  constructor(
    private readonly call: ServerDuplexStream<ForwardFrame, ForwardFrame>,
    private readonly handler: ForwardHandler,
    private readonly counters: ForwardCounters,
    private readonly onFrame: ((itemCount: number) => void) | undefined,
    private readonly onClosed: (s: ServerSession) => void,
  ) {
    this.out = new FrameBatcher((frame) => {
      if (this.closed) return;
      this.counters.framesOut++;
      this.counters.itemsOut += frame.items.length;
      this.call.write(frame);
    });
    call.on('data', (frame: ForwardFrame) => this.receive(frame));
    call.on('end', () => {
      this.clientDone = true;
      this.maybeEnd();
    });
    call.on('error', () => this.close());
    call.on('cancelled', () => this.close());
  }

  private receive(frame: ForwardFrame): void {
    this.counters.framesIn++;
    this.counters.itemsIn += frame.items.length;
    this.onFrame?.(frame.items.length);
    for (const item of frame.items) {
      if (this.draining) {
        this.reply(item.id, ForwardStatus.FORWARD_STATUS_UNAVAILABLE, Buffer.alloc(0), 'peer is shutting down');
        continue;
      }
      this.inFlight++;
      // Promise.resolve().then: a handler that throws synchronously still settles its item.
      Promise.resolve()
        .then(() => this.handler(item.payload))
        .then(
          (reply) => this.reply(item.id, ForwardStatus.FORWARD_STATUS_OK, asBuffer(reply), ''),
          (err: unknown) =>
            this.reply(item.id, ForwardStatus.FORWARD_STATUS_HANDLER_FAILED, Buffer.alloc(0), errorText(err)),
        )
        .finally(() => {
          this.inFlight--;
          this.maybeEnd();
        });
    }
  }

  private reply(id: number, status: ForwardStatus, payload: Buffer, errorMessage: string): void {
    if (this.closed) return;
    this.out.push({ id, payload, status, errorMessage });
  }

  /** Stop taking new items; end the stream once the running ones replied. */
  drain(): void {
    this.draining = true;
    this.maybeEnd();
  }

  private maybeEnd(): void {
    if (this.closed || this.inFlight > 0 || !(this.draining || this.clientDone)) return;
    this.out.flush();
    this.closed = true;
    this.call.end();
    this.onClosed(this);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.out.discard();
    this.onClosed(this);
  }
}

/** Serves Shard.Forward: applies the handler to every item and streams the replies back. */
export class ForwardServer {
  private server: Server | undefined;
  private readonly sessions = new Set<ServerSession>();
  private readonly counters = newCounters();

  constructor(private readonly opts: ForwardServerOptions) {}

  /** Frames and items received and sent since construction (read-only snapshot). */
  get stats(): Readonly<ForwardCounters> {
    return { ...this.counters };
  }

  get activeStreams(): number {
    return this.sessions.size;
  }

  start(): Promise<number> {
    if (this.server) return Promise.reject(new Error('ForwardServer already started'));
    const server = new Server({
      'grpc.keepalive_time_ms': forwardLimits.keepaliveTimeMs,
      'grpc.keepalive_timeout_ms': forwardLimits.keepaliveTimeoutMs,
      'grpc.max_receive_message_length': forwardLimits.messageBytesMax,
      'grpc.max_send_message_length': forwardLimits.messageBytesMax,
    });
    server.addService(ShardService, {
      forward: (call: ServerDuplexStream<ForwardFrame, ForwardFrame>) => {
        const session = new ServerSession(call, this.opts.handler, this.counters, this.opts.onFrame, (s) =>
          this.sessions.delete(s),
        );
        this.sessions.add(session);
      },
    });
    this.server = server;
    const host = this.opts.host ?? '127.0.0.1';
    const target = `${host.includes(':') ? `[${host}]` : host}:${this.opts.port}`;
    return new Promise((resolve, reject) => {
      server.bindAsync(target, this.opts.credentials ?? ServerCredentials.createInsecure(), (err, port) => {
        if (err) {
          this.server = undefined;
          server.forceShutdown();
          reject(err);
        } else resolve(port);
      });
    });
  }

  /**
   * Graceful: refuse new items (they answer UNAVAILABLE), let running ones reply, end every
   * stream, then close; after graceMs whatever is left is cut. graceMs 0 cuts at once, which is
   * what a crash looks like to the peers.
   */
  stop(graceMs: number = forwardLimits.stopGraceMsDefault): Promise<void> {
    const server = this.server;
    if (!server) return Promise.resolve();
    this.server = undefined;
    if (graceMs <= 0) {
      server.forceShutdown();
      for (const s of [...this.sessions]) s.close();
      return Promise.resolve();
    }
    for (const s of [...this.sessions]) s.drain();
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        server.forceShutdown();
        for (const s of [...this.sessions]) s.close();
        resolve();
      }, graceMs);
      server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Client

interface Pending {
  resolve: (reply: Uint8Array) => void;
  reject: (err: Error) => void;
  group: DeadlineGroup | undefined;
}

/** Calls of one frame sharing a deadline length share one timer (not one timer per call). */
interface DeadlineGroup {
  ids: number[];
  left: number;
  deadlineAtMs: number;
  timer: NodeJS.Timeout | undefined;
}

const clientChannelOptions: ChannelOptions = {
  'grpc.keepalive_time_ms': forwardLimits.keepaliveTimeMs,
  'grpc.keepalive_timeout_ms': forwardLimits.keepaliveTimeoutMs,
  'grpc.keepalive_permit_without_calls': 1,
  'grpc.max_receive_message_length': forwardLimits.messageBytesMax,
  'grpc.max_send_message_length': forwardLimits.messageBytesMax,
  'grpc.initial_reconnect_backoff_ms': 100,
  'grpc.max_reconnect_backoff_ms': forwardLimits.reconnectBackoffMsMax,
  // A fresh channel after a failure must get a fresh connection, not a shared subchannel that
  // still sits in its reconnect backoff.
  'grpc.use_local_subchannel_pool': 1,
};

/** One peer: a channel, at most one live stream, the calls waiting for replies. */
class PeerLink {
  dead = false;
  private readonly client: ShardClient;
  private call: ClientDuplexStream<ForwardFrame, ForwardFrame> | undefined;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  /** Deadline length -> group, for the calls batched since the last flush. */
  private openGroups = new Map<number, DeadlineGroup>();
  private readonly out: FrameBatcher;

  constructor(
    readonly address: string,
    credentials: ChannelCredentials,
    private readonly counters: ForwardCounters,
    private readonly onDead: (link: PeerLink) => void,
  ) {
    this.client = new ShardClient(address, credentials, clientChannelOptions);
    this.out = new FrameBatcher(
      (frame) => this.write(frame),
      () => this.armDeadlines(),
    );
  }

  send(payload: Uint8Array, deadlineMs: number): Promise<Uint8Array> {
    const id = this.nextId++;
    return new Promise<Uint8Array>((resolve, reject) => {
      let group = this.openGroups.get(deadlineMs);
      const deadlineAtMs = performance.now() + deadlineMs;
      if (!group) {
        group = { ids: [], left: 0, deadlineAtMs, timer: undefined };
        this.openGroups.set(deadlineMs, group);
      }
      group.ids.push(id);
      group.left++;
      this.pending.set(id, { resolve, reject, group });
      this.out.push({ id, payload: asBuffer(payload), status: ForwardStatus.FORWARD_STATUS_OK, errorMessage: '' });
    });
  }

  private armDeadlines(): void {
    const groups = this.openGroups;
    this.openGroups = new Map();
    for (const group of groups.values()) {
      const delayMs = Math.max(0, group.deadlineAtMs - performance.now());
      group.timer = setTimeout(() => {
        group.timer = undefined;
        for (const id of group.ids) {
          const p = this.pending.get(id);
          if (!p) continue;
          this.pending.delete(id);
          p.reject(new ForwardUnavailable(this.address, 'deadline exceeded'));
        }
      }, delayMs);
    }
  }

  private settle(id: number): Pending | undefined {
    const p = this.pending.get(id);
    if (!p) return undefined;
    this.pending.delete(id);
    const g = p.group;
    if (g && --g.left === 0 && g.timer) {
      clearTimeout(g.timer);
      g.timer = undefined;
    }
    return p;
  }

  private stream(): ClientDuplexStream<ForwardFrame, ForwardFrame> {
    if (this.call) return this.call;
    const call = this.client.forward();
    call.on('data', (frame: ForwardFrame) => this.receive(frame));
    call.on('error', (err: ServiceError) => this.fail(err.details || err.message));
    call.on('end', () => this.fail('stream ended by peer'));
    call.on('status', () => this.fail('stream closed'));
    this.call = call;
    return call;
  }

  private write(frame: ForwardFrame): void {
    if (this.dead) return;
    this.counters.framesOut++;
    this.counters.itemsOut += frame.items.length;
    this.stream().write(frame);
  }

  private receive(frame: ForwardFrame): void {
    this.counters.framesIn++;
    this.counters.itemsIn += frame.items.length;
    for (const item of frame.items) {
      const p = this.settle(item.id);
      if (!p) continue; // its deadline passed already
      switch (item.status) {
        case ForwardStatus.FORWARD_STATUS_OK:
          p.resolve(item.payload);
          break;
        case ForwardStatus.FORWARD_STATUS_HANDLER_FAILED:
          p.reject(new ForwardHandlerFailed(this.address, item.errorMessage));
          break;
        default:
          p.reject(new ForwardUnavailable(this.address, item.errorMessage || 'peer refused the call'));
      }
    }
  }

  /** The stream is gone: every waiting call rejects, the channel closes, the link is dropped. */
  fail(reason: string): void {
    if (this.dead) return;
    this.dead = true;
    this.out.discard();
    this.openGroups = new Map(); // never armed: their calls are in pending, rejected below
    for (const id of [...this.pending.keys()]) {
      this.settle(id)?.reject(new ForwardUnavailable(this.address, reason));
    }
    this.onDead(this);
    const call = this.call;
    this.call = undefined;
    call?.cancel();
    this.client.close();
  }
}

export interface ForwardClientOptions {
  credentials?: ChannelCredentials;
}

/** Forwards opaque payloads to peers, one batched stream per address. */
export class ForwardClient {
  private readonly links = new Map<string, PeerLink>();
  private readonly counters = newCounters();
  private closed = false;

  constructor(private readonly opts: ForwardClientOptions = {}) {}

  /** Frames and items sent and received since construction (read-only snapshot). */
  get stats(): Readonly<ForwardCounters> {
    return { ...this.counters };
  }

  /**
   * Sends payload to the peer at address and resolves with its reply. Rejects with
   * ForwardUnavailable when the peer is unreachable, the stream fails or the deadline passes;
   * with ForwardHandlerFailed when the peer's handler threw. The payload is sent without a copy
   * at the end of the tick: the caller must not mutate it before then.
   */
  forward(address: string, payload: Uint8Array, deadlineMs: number = forwardLimits.deadlineMsDefault): Promise<Uint8Array> {
    if (this.closed) return Promise.reject(new ForwardUnavailable(address, 'client closed'));
    let link = this.links.get(address);
    if (!link || link.dead) {
      link = new PeerLink(address, this.opts.credentials ?? ChannelCredentials.createInsecure(), this.counters, (l) => {
        if (this.links.get(l.address) === l) this.links.delete(l.address);
      });
      this.links.set(address, link);
    }
    return link.send(payload, deadlineMs);
  }

  /** Closes every stream; calls still waiting reject with ForwardUnavailable. */
  close(): void {
    this.closed = true;
    for (const link of [...this.links.values()]) link.fail('client closed');
    this.links.clear();
  }
}
