// Counter backfill (POST /v1/counter_definitions/{id}/backfill): counts an environment's past
// events for one counter from the projected events table and hands each affected customer's actor
// its historical base (counter.backfill -> counter.backfilled fact), then marks the definition
// ready. The boundary is exact per event: an event counted live carries the counter's id in its
// row (events.counted, projected from the counter.counted fact journaled with it), and the
// backfill counts only rows that do not name the counter, after the barrier (every event sent,
// on any node, without the definition in its counters context is in the read tables:
// cluster/counters-barrier.ts), so none it did not count live can appear after its scan. An actor
// applies at most one base per counter, so a retried or concurrent backfill never counts twice.
// Small histories run inline (the request answers with the ready definition); larger ones run as
// a job whose per-customer counting goes to the piscina pool (the request answers 202).
import type { Logger } from 'pino';
import type { Engine } from '../actors/engine.js';
import type { CounterCatalog, CounterRecord } from '../catalog/counters.js';
import { type CounterState, historicalBasesOf } from '../domain/counters.js';
import { ApiError } from '../errors/api-error.js';
import type { Sql } from '../persistence/sql/db.js';
import type { WorkerPool } from '../workers/pool.js';
import type { BackfillCustomer, CounterDefSource } from '../workers/tasks.worker.js';

/** Uncounted events up to which a backfill runs inline in the request. */
const inlineEventsMaxDefault = 2_000;
/**
 * Events of the environment the request reads to decide: there is no index on event names (see
 * migration 020), so an environment with more events than this runs its backfill as a job even
 * when few of them are the counter's event, and the request never scans a large history.
 */
const inlineScanMaxDefault = 20_000;
const customersPerPage = 200;
const concurrency = 16;
/** A job claim older than this is considered dead (its node stopped) and may be taken over. */
const claimStaleMs = 10 * 60_000;

export interface CounterBackfillDeps {
  sql: Sql;
  engine: Engine;
  counters: CounterCatalog;
  pool: WorkerPool;
  /**
   * Resolves once every event sent without the definition in its counters context is in the read
   * tables (CountersBarrier.pass); rejects when that cannot be shown in time.
   */
  barrier(environmentId: string): Promise<void>;
  now(environmentId: string): number | Promise<number>;
  logger: Logger;
  inlineEventsMax?: number;
  inlineScanMax?: number;
}

export type BackfillOutcome = { done: true; record: CounterRecord } | { done: false; record: CounterRecord };

export class CounterBackfill {
  private readonly jobs = new Set<Promise<void>>();

  constructor(private readonly deps: CounterBackfillDeps) {}

  /** Runs (inline) or starts (job) the backfill of a definition; a ready one is answered as it is. */
  async run(environmentId: string, id: string, timeZone: string): Promise<BackfillOutcome> {
    const record = await this.deps.counters.get(environmentId, id);
    if (record.status === 'ready') return { done: true, record };
    try {
      await this.deps.barrier(environmentId);
    } catch (err) {
      this.deps.logger.warn({ err, counter: id }, 'counter backfill: the barrier did not pass');
      throw new ApiError('rate_limited', {
        message: 'Events sent before this counter was defined may still be on their way into the read tables; retry.',
        retryAfterSeconds: 1,
      });
    }
    const scanMax = this.deps.inlineScanMax ?? inlineScanMaxDefault;
    const [{ n, scanned }] = (await this.deps.sql`
      select count(*) filter (where name = ${record.event} and not (${record.id} = any(coalesce(counted, '{}'))))::int as n,
             count(*)::int as scanned
      from (select name, counted from events where environment_id = ${environmentId} limit ${scanMax + 1}) s`) as unknown as [
      { n: number; scanned: number },
    ];
    if (scanned <= scanMax && n <= (this.deps.inlineEventsMax ?? inlineEventsMaxDefault)) {
      await this.countAll(environmentId, record, timeZone, false);
      return { done: true, record: await this.deps.counters.markReady(environmentId, id) };
    }
    const nowMs = await this.deps.now(environmentId);
    if (!(await this.deps.counters.claimBackfill(environmentId, id, nowMs, claimStaleMs))) {
      return { done: false, record: await this.deps.counters.get(environmentId, id) };
    }
    const job = this.countAll(environmentId, record, timeZone, true)
      .then(() => this.deps.counters.markReady(environmentId, id))
      .then(
        () => undefined,
        async (err: unknown) => {
          this.deps.logger.warn({ err, counter: id }, 'counter backfill failed; POST .../backfill again to retry');
          await this.deps.counters.releaseBackfill(environmentId, id).catch(() => {});
        },
      );
    this.jobs.add(job);
    void job.finally(() => this.jobs.delete(job));
    return { done: false, record: await this.deps.counters.get(environmentId, id) };
  }

  /** Waits for running jobs (service stop, tests). */
  async idle(): Promise<void> {
    while (this.jobs.size > 0) await Promise.all([...this.jobs]);
  }

  /**
   * Every customer with uncounted events, a page of customers at a time (each customer whole).
   * Pages walk the environment's customers in events_customer_received order (every customer with
   * events, whatever their names: no index on names), so each page reads the events of at most
   * customersPerPage customers and the whole backfill reads the environment's events once.
   */
  private async countAll(environmentId: string, record: CounterRecord, timeZone: string, inPool: boolean): Promise<void> {
    const source: CounterDefSource = { id: record.id, name: record.name, event: record.event, window: record.window, filter: record.filter };
    const nowMs = await this.deps.now(environmentId);
    let after = '';
    for (;;) {
      const ids = (
        await this.deps.sql`
          select distinct customer_id from events
          where environment_id = ${environmentId} and customer_id > ${after}
          order by customer_id limit ${customersPerPage}`
      ).map((r) => r.customer_id as string);
      if (ids.length === 0) return;
      after = ids[ids.length - 1]!;
      const rows = await this.deps.sql`
        select customer_id, (extract(epoch from occurred_at) * 1000)::float8 as o, properties from events
        where environment_id = ${environmentId} and name = ${record.event} and customer_id = any(${ids}::text[])
          and not (${record.id} = any(coalesce(counted, '{}')))`;
      const byCustomer = new Map<string, BackfillCustomer>();
      for (const r of rows) {
        const c = r.customer_id as string;
        let entry = byCustomer.get(c);
        if (entry === undefined) byCustomer.set(c, (entry = { customerId: c, events: [] }));
        entry.events.push({ occurredAtMs: r.o as number, properties: (r.properties as Record<string, unknown> | null) ?? {} });
      }
      if (byCustomer.size === 0) continue;
      const customers = [...byCustomer.values()];
      let bases: Array<{ customerId: string; base: CounterState }>;
      if (inPool) {
        const r = await this.deps.pool.run({ kind: 'counter.bases', def: source, timeZone, nowMs, customers });
        if (r.kind !== 'counter.bases') throw new Error('unexpected worker result');
        bases = r.bases;
      } else {
        bases = historicalBasesOf(source, customers, timeZone, nowMs);
      }
      await this.handOver(environmentId, record.id, bases, nowMs);
    }
  }

  private async handOver(
    environmentId: string,
    counterId: string,
    bases: Array<{ customerId: string; base: CounterState }>,
    nowMs: number,
  ): Promise<void> {
    let next = 0;
    const worker = async () => {
      while (next < bases.length) {
        const { customerId, base } = bases[next++]!;
        const result = await this.deps.engine.execute({
          env: environmentId,
          target: { by: 'id', id: customerId },
          // Named as the customer that recorded the events: a merged customer's call reaches its
          // survivor, which takes each recorder's base once.
          command: { kind: 'counter.backfill', counterId, base, from: customerId },
          nowMs,
        });
        // A customer deleted since has no counters to fill; anything else fails the backfill (retry).
        if (result.ok === false && result.code !== 'resource_not_found') throw new Error(`backfill of ${customerId}: ${result.code}`);
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, bases.length) }, worker));
  }
}
