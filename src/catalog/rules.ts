// Rules of an environment (spec 2.5, 3, 4.4): a draft definition, immutable numbered versions with
// their compiled plans, and the status machine. Rows live in PostgreSQL; every write runs in one
// transaction on the locked row (If-Match compared there). Every node caches each environment's
// published plans in priority order (dropped on a bus message when any node changes a rule).
// Publish and rollback refuse a definition naming missing resources: those are read before the
// row is locked (embedded mode has one connection) and the pure verdict is applied under the lock;
// the segments it names are read again in the transaction, FOR SHARE (a segment rename or delete
// locks its row FOR UPDATE before it looks for users), as is the campaign a create or an edit
// names: a reference is either seen by the rename or delete, or finds its resource gone.
import type { RuleMeta, RulePlan } from '../domain/rules/compile.js';
import type { RuleProblem } from '../domain/rules/schema.js';
import { segmentReferenceProblems, segmentReferences } from './rule-references.js';
import { ApiError } from '../errors/api-error.js';
import { newId } from '../ids.js';
import { canonicalJson } from '../util/canonical-json.js';
import type { Bus } from '../persistence/ports.js';
import { createOncePerCall, recordCreate } from '../persistence/sql/create-calls.js';
import { jsonColumn, type Sql } from '../persistence/sql/db.js';

export const ruleStatuses = ['draft', 'published', 'paused', 'archived'] as const;
export type RuleStatus = (typeof ruleStatuses)[number];

export interface RuleVersion {
  id: string;
  ruleId: string;
  number: number;
  definition: unknown;
  createdBy: string | null;
  createdAtMs: number;
}

export interface Rule {
  id: string;
  name: string;
  campaignId: string | null;
  status: RuleStatus;
  priority: number;
  /** The unpublished edit; null when nothing changed since the active version was published. */
  draftDefinition: unknown;
  activeVersion: { id: string; number: number; definition: unknown; createdAtMs: number } | null;
  version: number;
  createdAtMs: number;
  updatedAtMs: number;
}

/**
 * Status transitions (spec part 3 names the operations, not where they lead). Each operation lists
 * the statuses it starts from; anything else is 409 invalid_state. publish also needs a draft
 * (draft_definition not null): publishing with no change since the active version is
 * invalid_state, never a silent new version. Publish makes a draft rule published; a paused rule
 * stays paused (its new version is active, and runs once resumed: pause, fix, publish, check,
 * resume, never live again by surprise), as rollback keeps the status. Rollback needs an active
 * version; archived is final (archiving it again, editing or publishing it: invalid_state).
 */
export const ruleTransitions = {
  /** `to` is for a draft or published rule; a paused one stays paused (publishedStatus). */
  publish: { from: ['draft', 'published', 'paused'], to: 'published' },
  pause: { from: ['published'], to: 'paused' },
  resume: { from: ['paused'], to: 'published' },
  archive: { from: ['draft', 'published', 'paused'], to: 'archived' },
  rollback: { from: ['published', 'paused'], to: null },
  edit: { from: ['draft', 'published', 'paused'], to: null },
} as const satisfies Record<string, { from: readonly RuleStatus[]; to: RuleStatus | null }>;
export type RuleOperation = keyof typeof ruleTransitions;

/** The status after publish: a paused rule keeps its pause (resume makes it live). */
export function publishedStatus(from: RuleStatus): RuleStatus {
  return from === 'paused' ? 'paused' : ruleTransitions.publish.to;
}

/** Compiles a definition into a plan (the gateway passes one that runs in the worker pool). */
export type CompileFn = (definition: unknown, meta: RuleMeta) => Promise<RulePlan>;

/**
 * The references of a definition checked against the environment's catalogs (publish, rollback).
 * `problems` reads the catalogs, so it runs before the transaction; `refuse` is the 422 answered.
 */
export interface ReferenceCheck {
  problems(definition: unknown): Promise<RuleProblem[]>;
  refuse(problems: RuleProblem[]): Error;
}

/** A publish whose draft changed between the reference read and the lock reads again, this often. */
const publishAttemptsMax = 3;

/** Thrown inside the transaction (rolling it back) when the draft checked is not the draft locked. */
class DraftMoved extends Error {}

interface Change {
  name?: string;
  campaignId?: string | null;
  priority?: number;
  status?: RuleStatus;
  draftDefinition?: unknown;
  activeVersionId?: string | null;
}

interface TxHelpers {
  /** 404 naming campaign_id unless the campaign exists; its row stays locked FOR SHARE until commit. */
  lockCampaign(campaignId: string): Promise<void>;
  /** The problems of the segments `definition` names that do not exist; the ones that do stay locked FOR SHARE. */
  segmentProblems(definition: unknown): Promise<RuleProblem[]>;
  versionByNumber(n: number): Promise<string | null>;
  /** Inserts the next numbered version and returns its id. */
  addVersion(v: { definition: unknown; plan: RulePlan; number: number; createdBy: string | null }): Promise<string>;
  nextNumber(): Promise<number>;
}

const channel = 'rules.changed';

const selectRule = `
  select r.*, v.number as av_number, v.definition as av_definition, v.created_at as av_created_at
  from rules r left join rule_versions v on v.environment_id = r.environment_id and v.id = r.active_version_id`;

function jsonText(v: unknown): string | null {
  return v === null || v === undefined ? null : JSON.stringify(v);
}

function ruleRow(r: Record<string, unknown>): Rule {
  return {
    id: r.id as string,
    name: r.name as string,
    campaignId: (r.campaign_id as string | null) ?? null,
    status: r.status as RuleStatus,
    priority: r.priority as number,
    draftDefinition: r.draft_definition ?? null,
    activeVersion:
      r.active_version_id === null || r.active_version_id === undefined
        ? null
        : {
            id: r.active_version_id as string,
            number: r.av_number as number,
            definition: r.av_definition,
            createdAtMs: (r.av_created_at as Date).getTime(),
          },
    version: r.version as number,
    createdAtMs: (r.created_at as Date).getTime(),
    updatedAtMs: (r.updated_at as Date).getTime(),
  };
}

function versionRow(r: Record<string, unknown>): RuleVersion {
  return {
    id: r.id as string,
    ruleId: r.rule_id as string,
    number: r.number as number,
    definition: r.definition,
    createdBy: (r.created_by as string | null) ?? null,
    createdAtMs: (r.created_at as Date).getTime(),
  };
}

function notFound(id: string): ApiError {
  return new ApiError('resource_not_found', { message: `No rule ${id}.`, param: 'id' });
}

/** See the header: the campaign a rule names, read FOR SHARE in the transaction that stores the rule. */
async function lockCampaign(tx: Sql, environmentId: string, campaignId: string): Promise<void> {
  const rows = await tx`select 1 from campaigns where environment_id = ${environmentId} and id = ${campaignId} for share`;
  if (rows.length === 0) throw new ApiError('resource_not_found', { message: `No campaign ${campaignId}.`, param: 'campaign_id' });
}

function requireState(rule: Rule, op: RuleOperation): void {
  const allowed: readonly RuleStatus[] = ruleTransitions[op].from;
  if (!allowed.includes(rule.status)) {
    throw new ApiError('invalid_state', {
      message: `Cannot ${op} a rule that is ${rule.status}.`,
      details: { status: rule.status, allowed_from: allowed },
    });
  }
}

const recordsPerEnvironmentMax = 1000;

export class RuleCatalog {
  private readonly cache = new Map<string, Promise<RulePlan[]>>();
  /** Rules read by simulate, per environment; dropped with the plans whenever any rule of it changes. */
  private readonly records = new Map<string, Map<string, Promise<Rule>>>();

  constructor(
    private readonly sql: Sql,
    private readonly bus: Bus,
  ) {}

  async start(): Promise<void> {
    await this.bus.subscribe(channel, (envId) => {
      this.cache.delete(envId);
      this.records.delete(envId);
    });
  }

  private async changed(environmentId: string): Promise<void> {
    this.cache.delete(environmentId);
    this.records.delete(environmentId);
    await this.bus.publish(channel, environmentId).catch(() => {});
  }

  /** `callId`: the request's (an Idempotency-Key's); a run again of it answers the rule it created. */
  async create(
    environmentId: string,
    input: { name: string; definition: unknown; priority: number; campaignId: string | null },
    callId?: string,
  ): Promise<Rule> {
    const found = async (id: string): Promise<Rule> => {
      await this.changed(environmentId);
      return this.get(environmentId, id);
    };
    return createOncePerCall(this.sql, callId, found, async () => {
      const id = newId('rule');
      await this.sql.begin(async (tx) => {
        await recordCreate(tx, callId, id);
        if (input.campaignId !== null) await lockCampaign(tx as unknown as Sql, environmentId, input.campaignId);
        await tx`
          insert into rules (environment_id, id, name, campaign_id, status, priority, draft_definition)
          values (${environmentId}, ${id}, ${input.name}, ${input.campaignId}, 'draft', ${input.priority}, (${jsonText(input.definition)}::text)::jsonb)`;
      });
      await this.changed(environmentId);
      return this.get(environmentId, id);
    });
  }

  async get(environmentId: string, id: string): Promise<Rule> {
    const rows = await this.sql.unsafe(`${selectRule} where r.environment_id = $1 and r.id = $2`, [environmentId, id]);
    if (rows.length === 0) throw notFound(id);
    return ruleRow(rows[0]!);
  }

  /**
   * get() through a per-environment cache (simulate reads the rule on every call; a PostgreSQL
   * round trip there waits behind projection and snapshot writes). Same staleness as the plans:
   * dropped on any change of a rule of the environment, on this node at once, elsewhere by the bus.
   */
  getCached(environmentId: string, id: string): Promise<Rule> {
    let env = this.records.get(environmentId);
    if (env === undefined) this.records.set(environmentId, (env = new Map()));
    let rule = env.get(id);
    if (rule === undefined) {
      if (env.size >= recordsPerEnvironmentMax) env.clear();
      const loading = this.get(environmentId, id);
      loading.catch(() => env.delete(id));
      env.set(id, (rule = loading));
    }
    return rule;
  }

  /** Ordered by id; `after` is the last id of the previous page. */
  async list(
    environmentId: string,
    q: { limit: number; after: string | null; status: RuleStatus | null; campaignId: string | null },
  ): Promise<Rule[]> {
    const rows = await this.sql.unsafe(
      `${selectRule}
       where r.environment_id = $1 and ($2::text is null or r.id > $2) and ($3::text is null or r.status = $3)
         and ($4::text is null or r.campaign_id = $4)
       order by r.id limit $5`,
      [environmentId, q.after, q.status, q.campaignId, q.limit],
    );
    return rows.map(ruleRow);
  }

  /** Versions newest first; `before` is the last number of the previous page. */
  async versions(environmentId: string, id: string, q: { limit: number; before: number | null }): Promise<RuleVersion[]> {
    await this.get(environmentId, id);
    const rows = await this.sql`
      select * from rule_versions
      where environment_id = ${environmentId} and rule_id = ${id} and (${q.before}::int is null or number < ${q.before})
      order by number desc limit ${q.limit}`;
    return rows.map(versionRow);
  }

  /** PATCH: name, campaign_id, priority and the draft definition. Refused once archived. */
  update(
    environmentId: string,
    id: string,
    expected: number | undefined,
    patch: { name?: string; campaignId?: string | null; priority?: number; definition?: unknown },
  ): Promise<Rule> {
    return this.mutate(environmentId, id, expected, async (rule, tx) => {
      requireState(rule, 'edit');
      const change: Change = {};
      if (patch.name !== undefined) change.name = patch.name;
      if (patch.campaignId != null) await tx.lockCampaign(patch.campaignId);
      if (patch.campaignId !== undefined) change.campaignId = patch.campaignId;
      if (patch.priority !== undefined) change.priority = patch.priority;
      if (patch.definition !== undefined) {
        // A definition equal to the active version's (keys in any order) leaves no unpublished edit.
        const active = rule.activeVersion;
        change.draftDefinition = active !== null && canonicalJson(patch.definition) === canonicalJson(active.definition) ? null : patch.definition;
      }
      return change;
    });
  }

  /**
   * Compiles the draft (compile runs while the row is locked), stores version n+1 and activates it.
   * Checks in order: state, a draft to publish, its shape (compile), then its references (read
   * before the lock; a draft edited in between is read again, at most publishAttemptsMax times).
   */
  async publish(
    environmentId: string,
    id: string,
    expected: number | undefined,
    createdBy: string | null,
    compile: CompileFn,
    references?: ReferenceCheck,
  ): Promise<Rule> {
    for (let attempt = 1; ; attempt++) {
      const seen = references === undefined ? null : await this.get(environmentId, id);
      const problems = seen === null || seen.draftDefinition === null ? [] : await references!.problems(seen.draftDefinition);
      try {
        return await this.mutate(environmentId, id, expected, async (rule, tx) => {
          requireState(rule, 'publish');
          // A draft edited back to the active version's document is no change either.
          const unchanged =
            rule.draftDefinition === null ||
            (rule.activeVersion !== null && canonicalJson(rule.draftDefinition) === canonicalJson(rule.activeVersion.definition));
          if (unchanged) {
            throw new ApiError('invalid_state', {
              message: 'Nothing to publish: the draft has not changed since the active version.',
              details: { status: rule.status, active_version: rule.activeVersion?.number ?? null },
            });
          }
          // Every write bumps the version: the same version is the same draft that was checked.
          if (seen !== null && seen.version !== rule.version) throw new DraftMoved();
          const number = await tx.nextNumber();
          const plan = await compile(rule.draftDefinition, { ruleId: rule.id, versionNumber: number, priority: rule.priority });
          if (problems.length > 0) throw references!.refuse(problems);
          if (references !== undefined) {
            const gone = await tx.segmentProblems(rule.draftDefinition);
            if (gone.length > 0) throw references.refuse(gone);
          }
          const versionId = await tx.addVersion({ definition: rule.draftDefinition, plan, number, createdBy });
          return { status: publishedStatus(rule.status), activeVersionId: versionId, draftDefinition: null };
        });
      } catch (err) {
        if (!(err instanceof DraftMoved)) throw err;
        if (attempt >= publishAttemptsMax) {
          throw new ApiError('stale_write', { message: 'The draft kept changing while it was being published.', details: { current_version: seen?.version ?? null } });
        }
      }
    }
  }

  /** pause, resume or archive (see ruleTransitions). */
  transition(environmentId: string, id: string, expected: number | undefined, op: 'pause' | 'resume' | 'archive'): Promise<Rule> {
    return this.mutate(environmentId, id, expected, async (rule) => {
      requireState(rule, op);
      return { status: ruleTransitions[op].to };
    });
  }

  /**
   * The active version becomes version `number`; already active: no change (version kept). Its
   * references are checked again (read before the lock: versions are immutable), after the state
   * and the version's existence: a resource deleted since it was published refuses the rollback.
   */
  async rollback(environmentId: string, id: string, expected: number | undefined, number: number, references?: ReferenceCheck): Promise<Rule> {
    let problems: RuleProblem[] = [];
    let definition: unknown;
    if (references !== undefined) {
      const rows = await this.sql`select definition from rule_versions where environment_id = ${environmentId} and rule_id = ${id} and number = ${number}`;
      if (rows.length > 0) {
        definition = jsonColumn<unknown>(rows[0]!.definition);
        problems = await references.problems(definition);
      }
    }
    return this.mutate(environmentId, id, expected, async (rule, tx) => {
      requireState(rule, 'rollback');
      const versionId = await tx.versionByNumber(number);
      if (versionId === null) throw new ApiError('resource_not_found', { message: `Rule ${id} has no version ${number}.`, param: 'number' });
      if (rule.activeVersion?.id === versionId) return null;
      if (problems.length > 0) throw references!.refuse(problems);
      if (references !== undefined && definition !== undefined) {
        const gone = await tx.segmentProblems(definition);
        if (gone.length > 0) throw references.refuse(gone);
      }
      return { activeVersionId: versionId };
    });
  }

  /** The plans of the environment's published rules, highest priority first (ties by rule id), cached. */
  publishedPlans(environmentId: string): Promise<RulePlan[]> {
    let cached = this.cache.get(environmentId);
    if (!cached) {
      cached = this.sql`
        select r.priority, r.campaign_id, v.plan from rules r join rule_versions v on v.environment_id = r.environment_id and v.id = r.active_version_id
        where r.environment_id = ${environmentId} and r.status = 'published'
        order by r.priority desc, r.id`.then((rows) =>
        // The plan keeps the priority it was compiled with; the rule's current one (and campaign) wins.
        rows.map((r) => ({ ...(r.plan as RulePlan), priority: r.priority as number, campaignId: (r.campaign_id as string | null) ?? null })),
      );
      cached.catch(() => this.cache.delete(environmentId));
      this.cache.set(environmentId, cached);
    }
    return cached;
  }

  /**
   * Locks the rule, checks the expected version (stale_write), lets `fn` decide the change (null:
   * nothing changes, the rule is answered as is), writes it with version + 1 and reloads.
   */
  private async mutate(
    environmentId: string,
    id: string,
    expected: number | undefined,
    fn: (rule: Rule, tx: TxHelpers) => Promise<Change | null>,
  ): Promise<Rule> {
    const changed = await this.sql.begin(async (tx) => {
      const rows = await tx.unsafe(`${selectRule} where r.environment_id = $1 and r.id = $2 for update of r`, [environmentId, id]);
      if (rows.length === 0) throw notFound(id);
      const rule = ruleRow(rows[0]!);
      if (expected !== undefined && expected !== rule.version) {
        throw new ApiError('stale_write', { details: { current_version: rule.version } });
      }
      const helpers: TxHelpers = {
        lockCampaign: (campaignId) => lockCampaign(tx as unknown as Sql, environmentId, campaignId),
        segmentProblems: async (definition) => {
          const refs = segmentReferences(definition);
          if (refs.length === 0) return [];
          const names = [...new Set(refs.map((r) => r.name))];
          const rows = await tx`select name from segments where environment_id = ${environmentId} and name = any(${names}::text[]) for share`;
          return segmentReferenceProblems(refs, new Set(rows.map((r) => r.name as string)));
        },
        versionByNumber: async (n) => {
          const r = await tx`select id from rule_versions where environment_id = ${environmentId} and rule_id = ${id} and number = ${n}`;
          return r.length === 0 ? null : (r[0]!.id as string);
        },
        nextNumber: async () => {
          const r = await tx`select coalesce(max(number), 0) + 1 as n from rule_versions where environment_id = ${environmentId} and rule_id = ${id}`;
          return Number(r[0]!.n);
        },
        addVersion: async (v) => {
          const versionId = newId('rv');
          await tx`
            insert into rule_versions (environment_id, id, rule_id, number, definition, plan, created_by)
            values (${environmentId}, ${versionId}, ${id}, ${v.number}, (${jsonText(v.definition)}::text)::jsonb, (${jsonText(v.plan)}::text)::jsonb, ${v.createdBy})`;
          return versionId;
        },
      };
      const change = await fn(rule, helpers);
      if (change === null) return false;
      const draft = change.draftDefinition !== undefined ? change.draftDefinition : rule.draftDefinition;
      await tx`
        update rules set
          name = ${change.name ?? rule.name},
          campaign_id = ${change.campaignId !== undefined ? change.campaignId : rule.campaignId},
          priority = ${change.priority ?? rule.priority},
          status = ${change.status ?? rule.status},
          draft_definition = (${jsonText(draft)}::text)::jsonb,
          active_version_id = ${change.activeVersionId !== undefined ? change.activeVersionId : (rule.activeVersion?.id ?? null)},
          version = version + 1,
          updated_at = now()
        where environment_id = ${environmentId} and id = ${id}`;
      return true;
    });
    if (changed) await this.changed(environmentId);
    return this.get(environmentId, id);
  }
}
