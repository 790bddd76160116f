// Counter definitions of an environment (spec 2.9): {name, event, window, filter?} with a status,
// backfilling until the history is counted, then ready. Rows live in PostgreSQL; every node caches
// each environment's definitions with their compiled filters (dropped on a bus message when any
// node changes one, and by the barrier of cluster/counters-barrier.ts), and hands them to the
// customer actors with each event (CountersContext), read in the same tick as the event's command
// goes to the engine (withCountersContext).
// A definition that a non-archived rule or the qualifying conditions of a challenge not ended read
// cannot be deleted (409 resource_in_use naming them). Definitions have no rename (no PATCH).
import type { CallResult } from '../actors/partition.js';
import {
  type CounterDef,
  type CounterStatus,
  type CountersContext,
  type CounterWindow,
  compileCounterFilter,
  counterLimits,
  validateWindow,
} from '../domain/counters.js';
import { ApiError } from '../errors/api-error.js';
import { newId } from '../ids.js';
import type { Bus } from '../persistence/ports.js';
import { createOncePerCall, recordCreate } from '../persistence/sql/create-calls.js';
import { jsonColumn, type Sql } from '../persistence/sql/db.js';

export interface CounterRecord {
  id: string;
  name: string;
  event: string;
  window: CounterWindow;
  filter: unknown;
  status: CounterStatus;
  /** Set while a backfill runs as a job. */
  backfillStartedAtMs: number | null;
  version: number;
  createdAtMs: number;
  updatedAtMs: number;
}

export interface CounterInput {
  name: string;
  event: string;
  window: unknown;
  filter: unknown;
}

const channel = 'counter_definitions.changed';


function row(r: Record<string, unknown>): CounterRecord {
  return {
    id: r.id as string,
    name: r.name as string,
    event: r.event as string,
    window: jsonColumn<CounterWindow>(r.time_window),
    filter: r.filter === null || r.filter === undefined ? null : jsonColumn<unknown>(r.filter),
    status: r.status as CounterStatus,
    backfillStartedAtMs: r.backfill_started_at === null ? null : (r.backfill_started_at as Date).getTime(),
    version: r.version as number,
    createdAtMs: (r.created_at as Date).getTime(),
    updatedAtMs: (r.updated_at as Date).getTime(),
  };
}

/** What the actor needs of a record (the filter compiled). */
export function counterDefOf(r: CounterRecord): CounterDef {
  const filter = r.filter === null ? null : compileCounterFilter(r.event, r.filter);
  return { id: r.id, name: r.name, event: r.event, window: r.window, filter: filter?.ok ? filter.plan : null, status: r.status };
}

function invalid(param: string, message: string, details?: Array<{ param: string; message: string }>): ApiError {
  return new ApiError('validation_failed', { param, message: `${param}: ${message}`, details: details ?? [{ param, message }] });
}

export class CounterCatalog {
  private readonly cache = new Map<string, Promise<CounterDef[]>>();

  constructor(
    private readonly sql: Sql,
    private readonly bus: Bus,
  ) {}

  async start(): Promise<void> {
    await this.bus.subscribe(channel, (envId) => this.cache.delete(envId));
  }

  /**
   * Creates a definition. Live counting starts as soon as a node's cache holds it, so an event
   * sent just before (its counters context read without it) is counted by no one but a backfill:
   * the definition is stored `backfilling`, and made `ready` only when `provenEmpty` shows that
   * no such event can still appear (the barrier of every node's events sent before, then the
   * environment has no event at all). The version stays 1: that is part of the creation.
   */
  async create(environmentId: string, input: CounterInput, provenEmpty: () => Promise<boolean>, callId?: string): Promise<CounterRecord> {
    // A run again (`callId`: the request's, an Idempotency-Key's) answers the definition it
    // created as it is now, after trying again what the first run may not have got to: showing
    // the environment empty, which makes a backfilling definition ready.
    const found = async (id: string): Promise<CounterRecord> => {
      await this.changed(environmentId);
      const c = await this.get(environmentId, id);
      return c.status === 'backfilling' ? this.readyIfEmpty(environmentId, c, provenEmpty) : c;
    };
    return createOncePerCall(this.sql, callId, found, () => this.createOnce(environmentId, input, provenEmpty, callId));
  }

  private async createOnce(environmentId: string, input: CounterInput, provenEmpty: () => Promise<boolean>, callId: string | undefined): Promise<CounterRecord> {
    const w = validateWindow(input.window);
    if (w !== null) throw invalid(w.param, w.message);
    if (input.filter !== undefined && input.filter !== null) {
      const f = compileCounterFilter(input.event, input.filter);
      if (!f.ok) throw invalid(f.issues[0]!.param, f.issues.length > 1 ? `${f.issues[0]!.message} (and ${f.issues.length - 1} more; see details)` : f.issues[0]!.message, f.issues);
    }
    const [{ n }] = (await this.sql`select count(*)::int as n from counter_definitions where environment_id = ${environmentId}`) as unknown as [{ n: number }];
    if (n >= counterLimits.perEnvironmentMax) {
      throw invalid('name', `An environment has at most ${counterLimits.perEnvironmentMax} counter definitions.`);
    }
    const filter = input.filter === undefined || input.filter === null ? null : JSON.stringify(input.filter);
    const id = newId('ctr');
    const rows = await this.sql.begin(async (tx) => {
      await recordCreate(tx, callId, id);
      const inserted = await tx`
        insert into counter_definitions (environment_id, id, name, event, time_window, filter, status)
        values (${environmentId}, ${id}, ${input.name}, ${input.event}, (${JSON.stringify(input.window)}::text)::jsonb,
          (${filter}::text)::jsonb, 'backfilling')
        on conflict (environment_id, name) do nothing
        returning *`;
      // Thrown inside: the record of this call goes with the transaction.
      if (inserted.length === 0) throw new ApiError('already_exists', { message: `A counter named ${input.name} already exists.`, param: 'name' });
      return inserted;
    });
    const created = row(rows[0]!);
    await this.changed(environmentId);
    return this.readyIfEmpty(environmentId, created, provenEmpty);
  }

  /** Makes a backfilling definition ready when `provenEmpty` shows nothing to backfill. */
  private async readyIfEmpty(environmentId: string, created: CounterRecord, provenEmpty: () => Promise<boolean>): Promise<CounterRecord> {
    // A failure to show it leaves the definition backfilling (stored already: the create answers).
    if (!(await provenEmpty().catch(() => false))) return created;
    const ready = await this.sql`
      update counter_definitions set status = 'ready'
      where environment_id = ${environmentId} and id = ${created.id} and status = 'backfilling'
      returning *`;
    // Gone or ready meanwhile (a DELETE, a backfill): answered as it is now.
    if (ready.length === 0) return this.get(environmentId, created.id);
    await this.changed(environmentId);
    return row(ready[0]!);
  }

  /** Drops the environment's cached definitions on this node (the barrier; the bus does it too). */
  forget(environmentId: string): void {
    this.cache.delete(environmentId);
  }

  async list(environmentId: string, q: { limit: number; after: string | null }): Promise<CounterRecord[]> {
    const rows = await this.sql`
      select * from counter_definitions where environment_id = ${environmentId} and (${q.after}::text is null or id > ${q.after})
      order by id limit ${q.limit}`;
    return rows.map(row);
  }

  /** A definition by id (ctr_...); another environment's id is resource_not_found. */
  async get(environmentId: string, id: string): Promise<CounterRecord> {
    const rows = await this.sql`select * from counter_definitions where environment_id = ${environmentId} and id = ${id}`;
    if (rows.length === 0) throw new ApiError('resource_not_found', { message: `No counter definition ${id}.`, param: 'id' });
    return row(rows[0]!);
  }

  /**
   * What reads a counter as `customer.counters.<name>`: non-archived rules (draft or active
   * version, conditions or amount_from) and challenges not ended (their qualifying conditions, the
   * only part of a challenge that can read a counter; an ended challenge never evaluates again).
   */
  async readers(environmentId: string, name: string): Promise<{ rules: string[]; challenges: string[] }> {
    const pattern = `customer\\.counters\\.${name.replace(/[^a-z0-9_]/g, '')}(\\.|")`;
    const rules = await this.sql`
      select r.id from rules r
      left join rule_versions v on v.environment_id = r.environment_id and v.id = r.active_version_id
      where r.environment_id = ${environmentId} and r.status <> 'archived'
        and (r.draft_definition::text ~ ${pattern} or v.definition::text ~ ${pattern})
      order by r.id limit 10`;
    const challenges = await this.sql`
      select id from challenges
      where environment_id = ${environmentId} and status <> 'ended' and qualifying::text ~ ${pattern}
      order by id limit 10`;
    return { rules: rules.map((r) => r.id as string), challenges: challenges.map((c) => c.id as string) };
  }

  /**
   * Deletes a definition that no non-archived rule and no challenge not ended reads; else
   * resource_in_use naming them. With If-Match, only the version it names (stale_write).
   */
  async delete(environmentId: string, id: string, expected?: number): Promise<void> {
    const def = await this.get(environmentId, id);
    if (expected !== undefined && expected !== def.version) throw new ApiError('stale_write', { details: { current_version: def.version } });
    const used = await this.readers(environmentId, def.name);
    if (used.rules.length > 0 || used.challenges.length > 0) {
      const names = [...used.rules.map((r) => `rule ${r}`), ...used.challenges.map((c) => `challenge ${c}`)].join(', ');
      throw new ApiError('resource_in_use', {
        message: `Counter ${def.name} is read by ${names}; archive the rules, end the challenges or change their conditions first.`,
        param: 'id',
        details: { rules: used.rules, challenges: used.challenges },
      });
    }
    const gone = await this.sql`delete from counter_definitions where environment_id = ${environmentId} and id = ${id} and version = ${def.version} returning id`;
    if (gone.length === 0) throw new ApiError('stale_write', { message: 'The counter definition changed while it was being deleted.' });
    await this.changed(environmentId);
  }

  /** Claims a backfill job (false when one started less than `staleMs` ago). */
  async claimBackfill(environmentId: string, id: string, nowMs: number, staleMs: number): Promise<boolean> {
    const rows = await this.sql`
      update counter_definitions set backfill_started_at = to_timestamp(${nowMs} / 1000.0)
      where environment_id = ${environmentId} and id = ${id} and status = 'backfilling'
        and (backfill_started_at is null or backfill_started_at < to_timestamp(${nowMs - staleMs} / 1000.0))
      returning id`;
    return rows.length > 0;
  }

  /** Marks the definition ready (after its history was handed to every customer). */
  async markReady(environmentId: string, id: string): Promise<CounterRecord> {
    const rows = await this.sql`
      update counter_definitions set status = 'ready', backfill_started_at = null, version = version + 1, updated_at = now()
      where environment_id = ${environmentId} and id = ${id}
      returning *`;
    if (rows.length === 0) throw new ApiError('resource_not_found', { message: `No counter definition ${id}.`, param: 'id' });
    await this.changed(environmentId);
    return row(rows[0]!);
  }

  /** Releases a failed job's claim so the backfill can be retried at once. */
  async releaseBackfill(environmentId: string, id: string): Promise<void> {
    await this.sql`update counter_definitions set backfill_started_at = null where environment_id = ${environmentId} and id = ${id}`;
  }

  /** Every definition of the environment with compiled filters, cached (for the actors). */
  all(environmentId: string): Promise<CounterDef[]> {
    let cached = this.cache.get(environmentId);
    if (!cached) {
      cached = this.sql`select * from counter_definitions where environment_id = ${environmentId} order by id`.then((rows) =>
        rows.map((r) => counterDefOf(row(r))),
      );
      cached.catch(() => this.cache.delete(environmentId));
      this.cache.set(environmentId, cached);
    }
    return cached;
  }

  private async changed(environmentId: string): Promise<void> {
    this.cache.delete(environmentId);
    await this.bus.publish(channel, environmentId).catch(() => {});
  }
}

/** Load rounds withCountersContext allows before it gives up (each round: the definitions changed meanwhile). */
const contextRoundsMax = 20;

/**
 * Calls `send` with the counters context `read` gives, read in the same tick as `send` runs: a
 * command that records an event carries a context no older than its entry into the engine, which
 * counts it in flight from then on (Engine.settled), so a new definition's barrier waits for every
 * event sent without it. `read` answers synchronously once the catalog is cached (CountersContexts);
 * a Promise is awaited and the context read again. When the definitions cannot be read (a storage
 * failure, or they keep changing) `send` is not called and the answer is `unavailable`: nothing
 * was sent, so whatever the caller took for the command can go back.
 */
export function withCountersContext<T>(
  read: () => CountersContext | null | Promise<CountersContext | null>,
  send: (counters: CountersContext | null) => Promise<T>,
  unavailable: T,
  rounds = 0,
): Promise<T> {
  let c: CountersContext | null | Promise<CountersContext | null>;
  try {
    c = read();
  } catch {
    return Promise.resolve(unavailable);
  }
  if (!(c instanceof Promise)) return send(c);
  if (rounds >= contextRoundsMax) return Promise.resolve(unavailable);
  return c.then(
    () => withCountersContext(read, send, unavailable, rounds + 1),
    () => unavailable,
  );
}

/**
 * What an event command answers when its counter definitions cannot be read (withCountersContext):
 * retryable, and not internal_error, so its budget grant and shared limit slots go back.
 */
export const countersUnavailable: CallResult = {
  ok: false,
  code: 'rate_limited',
  message: 'The counter definitions could not be read; retry.',
  retryAfterSeconds: 1,
};

/**
 * The CountersContext handed to the actor with each event; answered synchronously while the
 * catalog's cached promise is unchanged (no await on the hot path), null when there is no counter.
 */
export class CountersContexts {
  private readonly memo = new Map<string, { defs: Promise<CounterDef[]>; timeZone: string; value: CountersContext | null }>();

  constructor(private readonly counters: Pick<CounterCatalog, 'all'>) {}

  get(environmentId: string, timeZone: string): CountersContext | null | Promise<CountersContext | null> {
    const defs = this.counters.all(environmentId);
    const m = this.memo.get(environmentId);
    if (m !== undefined && m.defs === defs && m.timeZone === timeZone) return m.value;
    return defs.then((d) => {
      const value = d.length === 0 ? null : { defs: d, timeZone };
      this.memo.set(environmentId, { defs, timeZone, value });
      return value;
    });
  }
}
