// Counter definitions of an environment (spec 2.9): {name, event, window, filter?} with a status,
// backfilling until the history is counted, then ready. Rows live in PostgreSQL; every node caches
// each environment's definitions with their compiled filters (dropped on a bus message when any
// node changes one), and hands them to the customer actors with each event (CountersContext).
// A definition that a non-archived rule or the qualifying conditions of a challenge not ended read
// cannot be deleted (409 resource_in_use naming them). Definitions have no rename (no PATCH).
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
   * Creates a definition: `backfilling` when the environment already has events (hasEvents, after
   * the projector drained), `ready` otherwise. Live counting starts as soon as it is cached.
   */
  async create(environmentId: string, input: CounterInput, hasEvents: () => Promise<boolean>): Promise<CounterRecord> {
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
    const status: CounterStatus = (await hasEvents()) ? 'backfilling' : 'ready';
    const filter = input.filter === undefined || input.filter === null ? null : JSON.stringify(input.filter);
    const rows = await this.sql`
      insert into counter_definitions (environment_id, id, name, event, time_window, filter, status)
      values (${environmentId}, ${newId('ctr')}, ${input.name}, ${input.event}, (${JSON.stringify(input.window)}::text)::jsonb,
        (${filter}::text)::jsonb, ${status})
      on conflict (environment_id, name) do nothing
      returning *`;
    if (rows.length === 0) throw new ApiError('already_exists', { message: `A counter named ${input.name} already exists.`, param: 'name' });
    await this.changed(environmentId);
    return row(rows[0]!);
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
