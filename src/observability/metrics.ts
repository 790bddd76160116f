// The process's one Prometheus registry and every metric the service exports, defined here so
// the engine only imports and updates them. Label values are bounded sets (route PATTERNS, never
// raw paths; status codes), because an unbounded label is a memory leak. Histograms observed per
// request or per flush are BucketHistograms (no allocation per observation), read through cached
// label children (HttpObserver), never a label lookup per request.
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import { BucketHistogram, type HistogramChild } from './bucket-histogram.js';

export const registry = new Registry();
collectDefaultMetrics({ register: registry });

/** Seconds from 0.5 ms to 5 s: the request histograms (HTTP and the public gRPC API). */
const requestBuckets = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];
const requestLabels = ['method', 'route', 'status'];

export const httpRequestDuration = new BucketHistogram({
  name: 'http_request_duration_seconds',
  help: 'HTTP request duration from arrival to the response write, by method, route pattern and status.',
  labelNames: requestLabels,
  buckets: requestBuckets,
  registers: [registry],
});

export const publicGrpcRequestDuration = new BucketHistogram({
  name: 'public_grpc_request_duration_seconds',
  help: 'Public gRPC API work (each IngestBatch call, IngestStream message, Report or GetState) from arrival to its answer, by the HTTP method, route pattern and status it runs as.',
  labelNames: requestLabels,
  buckets: requestBuckets,
  registers: [registry],
});

export const journalFlushRecords = new BucketHistogram({
  name: 'journal_flush_records',
  help: 'Records in one group-commit journal flush (one append per partition).',
  buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096],
  registers: [registry],
});

export const journalFlushSeconds = new BucketHistogram({
  name: 'journal_flush_seconds',
  help: 'Time for one journal flush to become durable.',
  buckets: [0.0002, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
  registers: [registry],
});

export const actorsActive = new Gauge({
  name: 'actors_active',
  help: 'Customer actors held in memory on this node.',
  registers: [registry],
});

export const actorsUnsnapshotted = new Gauge({
  name: 'actors_unsnapshotted',
  help: 'Customer actors on this node changed since their last snapshot (a restart replays their journal records), read at each snapshot sweep.',
  registers: [registry],
});

export const partitionsOwned = new Gauge({
  name: 'partitions_owned',
  help: 'Partitions this node serves.',
  registers: [registry],
});

export const partitionsRecovering = new Gauge({
  name: 'partitions_recovering',
  help: 'Partitions leased by this node and still replaying or waiting their turn to (calls for them wait).',
  registers: [registry],
});

export const mailboxDepth = new BucketHistogram({
  name: 'mailbox_depth',
  help: "An actor's commands applied and waiting for their journal write (its mailbox: the bound behind rate_limited), this one included, observed when a command is applied.",
  buckets: [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000],
  registers: [registry],
});

export const projectorLagRecords = new Gauge({
  name: 'projector_lag_records',
  help: 'Journal records acknowledged on this node and not yet projected into the read tables.',
  registers: [registry],
});

export const projectorCatchUps = new Counter({
  name: 'projector_catch_ups_total',
  help: 'Times a partition fell behind and its projection switched from the in-memory queue to reading the journal.',
  registers: [registry],
});

export const ingestHeld = new Counter({
  name: 'ingest_held_total',
  help: 'Events and match players that waited because the read tables were more than PROJECTOR_LAG_MAX records behind, by outcome: released when the projector caught up, refused (429) when the wait ran out.',
  labelNames: ['outcome'],
  registers: [registry],
});

export const snapshotSaveSeconds = new BucketHistogram({
  name: 'snapshot_save_seconds',
  help: 'Time for one snapshot save (rows plus checkpoint) of a partition.',
  buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
  registers: [registry],
});

/**
 * Observer for one route pattern: keeps one histogram child per status so the hot path does a
 * small-integer map lookup, no label hashing. HTTP requests by default; the public gRPC API's
 * work (gateway.invoke) goes to publicGrpcRequestDuration.
 */
export class HttpObserver {
  private readonly byStatus = new Map<number, HistogramChild>();

  constructor(
    private readonly method: string,
    private readonly route: string,
    private readonly histogram: BucketHistogram = httpRequestDuration,
  ) {}

  observe(status: number, seconds: number): void {
    let child = this.byStatus.get(status);
    if (child === undefined) {
      child = this.histogram.child(this.method, this.route, String(status));
      this.byStatus.set(status, child);
    }
    child.observe(seconds);
  }
}
