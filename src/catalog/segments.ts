// Segments of an environment (spec 2.9): name (unique per environment; rules and campaign
// audiences use it), description, kind static|dynamic, condition (dynamic: a rule-language
// condition over customer.attributes.*). Rows live in PostgreSQL; every node caches each
// environment's compiled definitions (dropped on a bus message when any node changes one).
// A segment that a non-archived rule, a campaign audience or the qualifying conditions of a
// challenge that has not ended name cannot be renamed or deleted (409 resource_in_use naming the
// users): the rename or delete locks the row first and looks for users in the same transaction,
// and what adds a reference that must exist (a campaign's audience, a rule's publish or rollback)
// reads the row FOR SHARE in its own. Static membership is NOT here: it is customer state.
import { compileSegmentCondition, type SegmentDef, type SegmentKind, segmentsReferenced, validateSegmentCondition } from '../domain/segments.js';
import type { Condition } from '../domain/rules/schema.js';
import { ApiError } from '../errors/api-error.js';
import { newId } from '../ids.js';
import type { Bus } from '../persistence/ports.js';
import { createOncePerCall, recordCreate } from '../persistence/sql/create-calls.js';
import { jsonColumn, type Sql } from '../persistence/sql/db.js';

export interface Segment {
  id: string;
  name: string;
  description: string | null;
  kind: SegmentKind;
  condition: Condition | null;
  version: number;
  createdAtMs: number;
  updatedAtMs: number;
}

export interface SegmentPatch {
  name?: string;
  description?: string | null;
  condition?: unknown;
}

const channel = 'segments.changed';

function row(r: Record<string, unknown>): Segment {
  return {
    id: r.id as string,
    name: r.name as string,
    description: (r.description as string | null) ?? null,
    kind: r.kind as SegmentKind,
    condition: (r.condition as Condition | null) ?? null,
    version: r.version as number,
    createdAtMs: (r.created_at as Date).getTime(),
    updatedAtMs: (r.updated_at as Date).getTime(),
  };
}

function notFound(id: string): ApiError {
  return new ApiError('resource_not_found', { message: `No segment ${id}.`, param: 'id' });
}

function checkedCondition(condition: unknown): Condition {
  const v = validateSegmentCondition(condition);
  if (!v.ok) {
    throw new ApiError('validation_failed', {
      param: v.problems[0]?.path ?? 'condition',
      message: v.problems.map((p) => `${p.path}: ${p.message}`).join('; '),
      details: v.problems.map((p) => ({ param: p.path, message: p.message })),
    });
  }
  return v.condition;
}

export class SegmentCatalog {
  private readonly cache = new Map<string, Promise<SegmentDef[]>>();

  constructor(
    private readonly sql: Sql,
    private readonly bus: Bus,
  ) {}

  async start(): Promise<void> {
    await this.bus.subscribe(channel, (envId) => this.cache.delete(envId));
  }

  private async changed(environmentId: string): Promise<void> {
    this.cache.delete(environmentId);
    await this.bus.publish(channel, environmentId).catch(() => {});
  }

  /** `callId`: the request's (an Idempotency-Key's); a run again of it answers the segment it created. */
  async create(
    environmentId: string,
    input: { name: string; description: string | null; kind: SegmentKind; condition: unknown },
    callId?: string,
  ): Promise<Segment> {
    const found = async (id: string): Promise<Segment> => {
      await this.changed(environmentId);
      return this.get(environmentId, id);
    };
    return createOncePerCall(this.sql, callId, found, async () => {
      let condition: Condition | null = null;
      if (input.kind === 'dynamic') condition = checkedCondition(input.condition);
      else if (input.condition !== undefined && input.condition !== null) {
        throw new ApiError('validation_failed', { param: 'condition', message: 'condition: only dynamic segments take a condition.' });
      }
      const id = newId('seg');
      const rows = await this.sql.begin(async (tx) => {
        await recordCreate(tx, callId, id);
        const inserted = await tx`
          insert into segments (environment_id, id, name, description, kind, condition)
          values (${environmentId}, ${id}, ${input.name}, ${input.description}, ${input.kind},
            (${condition === null ? null : JSON.stringify(condition)}::text)::jsonb)
          on conflict (environment_id, name) do nothing
          returning *`;
        // Thrown inside: the record of this call goes with the transaction.
        if (inserted.length === 0) throw new ApiError('already_exists', { message: `A segment named ${input.name} already exists.`, param: 'name' });
        return inserted;
      });
      await this.changed(environmentId);
      return row(rows[0]!);
    });
  }

  async get(environmentId: string, id: string): Promise<Segment> {
    const rows = await this.sql`select * from segments where environment_id = ${environmentId} and id = ${id}`;
    if (rows.length === 0) throw notFound(id);
    return row(rows[0]!);
  }

  async byName(environmentId: string, name: string): Promise<Segment | null> {
    const rows = await this.sql`select * from segments where environment_id = ${environmentId} and name = ${name}`;
    return rows.length === 0 ? null : row(rows[0]!);
  }

  async list(environmentId: string, q: { limit: number; after: string | null }): Promise<Segment[]> {
    const rows = await this.sql`
      select * from segments where environment_id = ${environmentId} and (${q.after}::text is null or id > ${q.after})
      order by id limit ${q.limit}`;
    return rows.map(row);
  }

  /**
   * What refers to a segment by name: non-archived rules whose draft or active definition tests
   * `customer.segments contains <name>`, campaigns whose audience it is, and challenges not ended
   * whose qualifying conditions test it (the only part of a challenge that can name a segment:
   * completion actions, contribution_key and the rest never do; an ended challenge is final and
   * never evaluates again, as an archived rule).
   */
  async usedBy(environmentId: string, name: string, db: Sql = this.sql): Promise<{ rules: string[]; campaigns: string[]; challenges: string[] }> {
    const rules = await db`
      select r.id, r.draft_definition, v.definition as active_definition
      from rules r left join rule_versions v on v.environment_id = r.environment_id and v.id = r.active_version_id
      where r.environment_id = ${environmentId} and r.status <> 'archived'
        and (r.draft_definition::text like ${`%${name}%`} or v.definition::text like ${`%${name}%`})`;
    const ruleIds = rules
      .filter((r) => segmentsReferenced(r.draft_definition).includes(name) || segmentsReferenced(r.active_definition).includes(name))
      .map((r) => r.id as string);
    const campaigns = await db`
      select id from campaigns where environment_id = ${environmentId} and audience_segment = ${name} order by id`;
    const challenges = await db`
      select id, qualifying from challenges
      where environment_id = ${environmentId} and status <> 'ended' and qualifying::text like ${`%${name}%`}
      order by id`;
    const challengeIds = challenges.filter((c) => segmentsReferenced(jsonColumn<unknown>(c.qualifying)).includes(name)).map((c) => c.id as string);
    return { rules: ruleIds.sort(), campaigns: campaigns.map((c) => c.id as string), challenges: challengeIds };
  }

  private async guardInUse(environmentId: string, segment: Segment, what: 'rename' | 'delete', db: Sql): Promise<void> {
    const used = await this.usedBy(environmentId, segment.name, db);
    if (used.rules.length === 0 && used.campaigns.length === 0 && used.challenges.length === 0) return;
    const names = [
      ...used.rules.map((r) => `rule ${r}`),
      ...used.campaigns.map((c) => `campaign ${c}`),
      ...used.challenges.map((c) => `challenge ${c}`),
    ].join(', ');
    throw new ApiError('resource_in_use', {
      message: `Cannot ${what} segment ${segment.name}: used by ${names}.`,
      param: what === 'rename' ? 'name' : 'id',
      details: { rules: used.rules, campaigns: used.campaigns, challenges: used.challenges },
    });
  }

  /**
   * The segment locked for the rest of the transaction (FOR UPDATE), with the If-Match version
   * checked. What adds a reference to a segment by name (a campaign's audience, a rule's publish or
   * rollback) reads the row FOR SHARE in its own transaction, so the in-use check that follows
   * the lock sees every reference committed before it, and a reference made after waits for the
   * rename or delete and then finds the name gone.
   */
  private async locked(tx: Sql, environmentId: string, id: string, expected: number | undefined): Promise<Segment> {
    const rows = await tx`select * from segments where environment_id = ${environmentId} and id = ${id} for update`;
    if (rows.length === 0) throw notFound(id);
    const before = row(rows[0]!);
    if (expected !== undefined && expected !== before.version) throw new ApiError('stale_write', { details: { current_version: before.version } });
    return before;
  }

  /** PATCH: name, description, condition (dynamic only). With If-Match, only the version it names (stale_write). */
  async update(environmentId: string, id: string, expected: number | undefined, patch: SegmentPatch): Promise<Segment> {
    let updated: Segment;
    try {
      updated = await this.sql.begin(async (t) => {
        const tx = t as unknown as Sql;
        const before = await this.locked(tx, environmentId, id, expected);
        let condition = before.condition;
        if (patch.condition !== undefined) {
          if (before.kind !== 'dynamic') {
            throw new ApiError('validation_failed', { param: 'condition', message: 'condition: only dynamic segments take a condition.' });
          }
          condition = checkedCondition(patch.condition);
        }
        const name = patch.name ?? before.name;
        // The check and the rename are one transaction on the locked row (see locked()).
        if (name !== before.name) await this.guardInUse(environmentId, before, 'rename', tx);
        const rows = await tx`
          update segments set name = ${name},
            description = ${patch.description !== undefined ? patch.description : before.description},
            condition = (${condition === null ? null : JSON.stringify(condition)}::text)::jsonb,
            version = version + 1, updated_at = now()
          where environment_id = ${environmentId} and id = ${id}
          returning *`;
        return row(rows[0]!);
      });
    } catch (err) {
      if ((err as { code?: string }).code === '23505') {
        throw new ApiError('already_exists', { message: `A segment named ${patch.name} already exists.`, param: 'name' });
      }
      throw err;
    }
    await this.changed(environmentId);
    return updated;
  }

  /** DELETE; with If-Match, only the version it names (stale_write). */
  async delete(environmentId: string, id: string, expected?: number): Promise<void> {
    await this.sql.begin(async (t) => {
      const tx = t as unknown as Sql;
      const before = await this.locked(tx, environmentId, id, expected);
      // The check and the delete are one transaction on the locked row (see locked()).
      await this.guardInUse(environmentId, before, 'delete', tx);
      await tx`delete from segments where environment_id = ${environmentId} and id = ${id}`;
      await tx`delete from segment_members where environment_id = ${environmentId} and segment_id = ${id}`;
    });
    await this.changed(environmentId);
  }

  /** Every segment of the environment compiled for evaluation (by name), cached. */
  all(environmentId: string): Promise<SegmentDef[]> {
    let cached = this.cache.get(environmentId);
    if (!cached) {
      cached = this.sql`select * from segments where environment_id = ${environmentId} order by name`.then((rows) =>
        rows.map((r) => {
          const s = row(r);
          return { id: s.id, name: s.name, kind: s.kind, plan: s.kind === 'dynamic' && s.condition !== null ? compileSegmentCondition(s.id, s.condition) : null };
        }),
      );
      cached.catch(() => this.cache.delete(environmentId));
      this.cache.set(environmentId, cached);
    }
    return cached;
  }
}
