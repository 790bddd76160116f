// Challenges of an environment (spec 2.8): definitions in PostgreSQL; every node caches each
// environment's ACTIVE challenges compiled for the actor (and the environment's time zone), loaded
// on first use and dropped on a bus message when any node changes one. Edits are safe (version
// compared in the UPDATE). Status transitions are the domain's canTransitionChallenge:
// draft -> active | ended; active <-> paused; active | paused -> ended; ended is final.
// DELETE removes only drafts and ended challenges (an active or paused one must be ended first),
// and none a non-archived rule progresses (409 resource_in_use naming the rules).
// A completion action must name resources of the environment (points.award a currency, reward.issue
// a reward, tier.evaluate with a program a tier program by key or id): 404 resource_not_found naming
// the field, as every body field naming a missing resource, checked after validation. The campaign
// a campaign_id names is read FOR SHARE in the transaction that stores the challenge, so a campaign
// delete (which locks its row FOR UPDATE before it looks for users) either sees the challenge or
// makes this write find the campaign gone (404 campaign_id).
import { type ChallengeRuntime, compileChallenge, validateChallengeDefinition } from '../domain/challenge-effects.js';
import {
  type ChallengeConfig,
  type ChallengeStatus,
  canTransitionChallenge,
  type EnrollmentMode,
  validateChallenge,
} from '../domain/challenges.js';
import type { PeriodKind } from '../domain/periods.js';
import { ApiError } from '../errors/api-error.js';
import type { ReferenceSources } from './rule-references.js';
import { newId } from '../ids.js';
import type { Bus } from '../persistence/ports.js';
import { createOncePerCall, recordCreate } from '../persistence/sql/create-calls.js';
import { jsonColumn, type Sql } from '../persistence/sql/db.js';
import { environmentsDue } from '../persistence/sql/due-environments.js';

export interface ChallengeRecord extends ChallengeConfig {
  campaignId: string | null;
  version: number;
  createdAtMs: number;
  updatedAtMs: number;
}

export type ChallengeInput = Omit<ChallengeConfig, 'id'> & { campaignId: string | null };

/** Fields a PATCH may change; undefined leaves a field as it is. */
export type ChallengePatch = Partial<ChallengeInput>;

/** What the actor needs for an environment: its active challenges and its time zone. */
export interface ChallengeSet {
  timeZone: string;
  challenges: ChallengeRuntime[];
}

const channel = 'challenges.changed';


function msOf(v: unknown): number | null {
  return v === null || v === undefined ? null : (v as Date).getTime();
}

function row(r: Record<string, unknown>): ChallengeRecord {
  return {
    id: r.id as string,
    name: r.name as string,
    qualifying: jsonColumn<{ event: string; conditions?: unknown }>(r.qualifying),
    target: r.target as number,
    period: r.period as PeriodKind,
    contributionKey: (r.contribution_key as string | null) ?? null,
    enrollment: r.enrollment as EnrollmentMode,
    repeatable: r.repeatable as boolean,
    completionActions: jsonColumn<unknown[]>(r.completion_actions),
    campaignId: (r.campaign_id as string | null) ?? null,
    startsAtMs: msOf(r.starts_at),
    endsAtMs: msOf(r.ends_at),
    status: r.status as ChallengeStatus,
    version: r.version as number,
    createdAtMs: (r.created_at as Date).getTime(),
    updatedAtMs: (r.updated_at as Date).getTime(),
  };
}

/** validation_failed naming the first bad wire field, every issue in details. */
function validated(c: ChallengeInput): void {
  const details: Array<{ param: string; message: string }> = [];
  const v = validateChallenge(c);
  if (!v.ok) details.push(...v.details);
  details.push(...validateChallengeDefinition(c.qualifying, c.completionActions));
  const first = details[0];
  if (first === undefined) return;
  const more = details.length > 1 ? ` (and ${details.length - 1} more; see details)` : '';
  throw new ApiError('validation_failed', { param: first.param, message: `${first.param}: ${first.message}${more}`, details });
}

const ts = (ms: number | null) => (ms === null ? null : new Date(ms));

type CompletionReference = { kind: 'currency' | 'reward' | 'tier_program'; name: string; param: string };

/** The resources a validated list of completion actions names, in order, with their wire field. */
function completionReferences(actions: readonly unknown[]): CompletionReference[] {
  const out: CompletionReference[] = [];
  for (const [i, a] of actions.entries()) {
    const o = a as { type?: unknown; currency?: unknown; reward_id?: unknown; program?: unknown };
    const at = (field: string) => `completion_actions[${i}].${field}`;
    if (o.type === 'points.award' && typeof o.currency === 'string') out.push({ kind: 'currency', name: o.currency, param: at('currency') });
    if (o.type === 'reward.issue' && typeof o.reward_id === 'string') out.push({ kind: 'reward', name: o.reward_id, param: at('reward_id') });
    // Without a program, tier.evaluate re-places every program: it names nothing.
    if (o.type === 'tier.evaluate' && typeof o.program === 'string') out.push({ kind: 'tier_program', name: o.program, param: at('program') });
  }
  return out;
}

const nouns = { currency: 'currency', reward: 'reward', tier_program: 'tier program' } as const;

/** See the header: 404 naming campaign_id unless the campaign exists, its row locked FOR SHARE until commit. */
async function lockCampaign(tx: Sql, environmentId: string, campaignId: string | null | undefined): Promise<void> {
  if (campaignId == null) return;
  const rows = await tx`select 1 from campaigns where environment_id = ${environmentId} and id = ${campaignId} for share`;
  if (rows.length === 0) throw new ApiError('resource_not_found', { message: `No campaign ${campaignId}.`, param: 'campaign_id' });
}

export class ChallengeCatalog {
  private readonly cache = new Map<string, Promise<ChallengeSet>>();

  constructor(
    private readonly sql: Sql,
    private readonly bus: Bus,
    /** What completion actions may name (absent: not checked). */
    private readonly references: Pick<ReferenceSources, 'currencies' | 'rewards' | 'tierPrograms'> | null = null,
  ) {}

  async start(): Promise<void> {
    await this.bus.subscribe(channel, (envId) => this.cache.delete(envId));
  }

  /**
   * resource_not_found naming the first completion action whose resource the environment lacks;
   * each catalog is read once and only when an action names it (archived rewards count as existing).
   */
  private async checkReferences(environmentId: string, actions: readonly unknown[]): Promise<void> {
    const refs = completionReferences(actions);
    if (refs.length === 0 || this.references === null) return;
    const src = this.references;
    const named = (kind: CompletionReference['kind']) => [...new Set(refs.filter((r) => r.kind === kind).map((r) => r.name))];
    const none: ReadonlySet<string> = new Set();
    const [currencies, rewards, programs] = await Promise.all([
      named('currency').length > 0 ? src.currencies(environmentId).then((cs) => new Set(cs.map((c) => c.key))) : none,
      named('reward').length > 0 ? src.rewards(environmentId, named('reward')).then((ids) => new Set(ids)) : none,
      named('tier_program').length > 0 ? src.tierPrograms(environmentId).then((ps) => new Set(ps.flatMap((p) => [p.key, p.id]))) : none,
    ]);
    const known = { currency: currencies, reward: rewards, tier_program: programs };
    const missing = refs.find((r) => !known[r.kind].has(r.name));
    if (missing === undefined) return;
    throw new ApiError('resource_not_found', { message: `No ${nouns[missing.kind]} ${missing.name}.`, param: missing.param });
  }

  /** `callId`: the request's (an Idempotency-Key's); a run again of it answers the challenge it created. */
  async create(environmentId: string, input: ChallengeInput, callId?: string): Promise<ChallengeRecord> {
    const found = async (id: string): Promise<ChallengeRecord> => {
      await this.changed(environmentId);
      return this.get(environmentId, id);
    };
    return createOncePerCall(this.sql, callId, found, async () => {
      validated(input);
      await this.checkReferences(environmentId, input.completionActions);
      const id = newId('chl');
      const rows = await this.sql.begin(async (tx) => {
        await recordCreate(tx, callId, id);
        await lockCampaign(tx as unknown as Sql, environmentId, input.campaignId);
        return tx`
        insert into challenges (environment_id, id, name, qualifying, target, period, contribution_key, enrollment, repeatable,
          completion_actions, campaign_id, starts_at, ends_at, status)
        values (${environmentId}, ${id}, ${input.name}, (${JSON.stringify(input.qualifying)}::text)::jsonb, ${input.target},
          ${input.period}, ${input.contributionKey}, ${input.enrollment}, ${input.repeatable},
          (${JSON.stringify(input.completionActions)}::text)::jsonb, ${input.campaignId}, ${ts(input.startsAtMs)}, ${ts(input.endsAtMs)}, ${input.status})
        returning *`;
      });
      await this.changed(environmentId);
      return row(rows[0]!);
    });
  }

  async list(environmentId: string, q: { status: ChallengeStatus | null; limit: number; after: string | null }): Promise<ChallengeRecord[]> {
    const rows = await this.sql`
      select * from challenges
      where environment_id = ${environmentId} and (${q.status}::text is null or status = ${q.status})
        and (${q.after}::text is null or id > ${q.after})
      order by id limit ${q.limit}`;
    return rows.map(row);
  }

  /** Which of `ids` name a challenge of the environment (any status), in one query. */
  async existingIds(environmentId: string, ids: readonly string[]): Promise<string[]> {
    if (ids.length === 0) return [];
    const rows = await this.sql`select id from challenges where environment_id = ${environmentId} and id = any(${[...ids]}::text[])`;
    return rows.map((r) => r.id as string);
  }

  /** A challenge by id; another environment's id is resource_not_found. */
  async get(environmentId: string, id: string): Promise<ChallengeRecord> {
    const rows = await this.sql`select * from challenges where environment_id = ${environmentId} and id = ${id}`;
    if (rows.length === 0) throw new ApiError('resource_not_found', { message: `No challenge ${id}.`, param: 'id' });
    return row(rows[0]!);
  }

  /**
   * Applies a patch: If-Match (stale_write), status transition (invalid_state; an ended challenge
   * takes no edit at all), validation (validation_failed). The write compares the version again.
   */
  async update(environmentId: string, id: string, patch: ChallengePatch, expectedVersion?: number): Promise<ChallengeRecord> {
    const before = await this.get(environmentId, id);
    if (expectedVersion !== undefined && expectedVersion !== before.version) {
      throw new ApiError('stale_write', { details: { current_version: before.version } });
    }
    if (before.status === 'ended') throw new ApiError('invalid_state', { message: 'An ended challenge cannot be edited.', param: 'status' });
    const defined = Object.fromEntries(Object.entries(patch).filter(([, v]) => v !== undefined)) as ChallengePatch;
    const after: ChallengeRecord = { ...before, ...defined };
    const move = canTransitionChallenge(before.status, after.status);
    if (!move.ok) throw new ApiError('invalid_state', { message: move.message, param: 'status' });
    validated(after);
    // New completion actions, or an activation, must name existing resources; other edits (ending a
    // challenge above all) are never blocked by a resource missing since it was stored.
    if (patch.completionActions !== undefined || (after.status === 'active' && before.status !== 'active')) {
      await this.checkReferences(environmentId, after.completionActions);
    }
    const rows = await this.sql.begin(async (tx) => {
      await lockCampaign(tx as unknown as Sql, environmentId, patch.campaignId);
      return tx`
      update challenges set
        name = ${after.name}, qualifying = (${JSON.stringify(after.qualifying)}::text)::jsonb, target = ${after.target},
        period = ${after.period}, contribution_key = ${after.contributionKey}, enrollment = ${after.enrollment},
        repeatable = ${after.repeatable}, completion_actions = (${JSON.stringify(after.completionActions)}::text)::jsonb,
        campaign_id = ${after.campaignId}, starts_at = ${ts(after.startsAtMs)}, ends_at = ${ts(after.endsAtMs)},
        status = ${after.status}, version = version + 1, updated_at = now()
      where environment_id = ${environmentId} and id = ${before.id} and version = ${before.version}
      returning *`;
    });
    if (rows.length === 0) {
      const current = await this.get(environmentId, before.id);
      throw new ApiError('stale_write', { details: { current_version: current.version } });
    }
    await this.changed(environmentId);
    return row(rows[0]!);
  }

  /**
   * The non-archived rules whose draft or active version has a challenge.progress action naming
   * the challenge (at most 10, by id): a deleted challenge would leave them naming nothing.
   */
  async progressedBy(environmentId: string, id: string): Promise<string[]> {
    const needle = JSON.stringify([{ type: 'challenge.progress', challenge_id: id }]);
    const rows = await this.sql`
      select r.id from rules r
      left join rule_versions v on v.environment_id = r.environment_id and v.id = r.active_version_id
      where r.environment_id = ${environmentId} and r.status <> 'archived'
        and (r.draft_definition->'actions' @> (${needle}::text)::jsonb or v.definition->'actions' @> (${needle}::text)::jsonb)
      order by r.id limit 10`;
    return rows.map((r) => r.id as string);
  }

  /**
   * DELETE (draft or ended only: active and paused ones are invalid_state, end them first); with
   * If-Match, only the version it names (stale_write). A challenge a non-archived rule progresses
   * is resource_in_use naming the rules, as a segment or counter a rule reads.
   */
  async delete(environmentId: string, id: string, expectedVersion?: number): Promise<void> {
    const before = await this.get(environmentId, id);
    if (expectedVersion !== undefined && expectedVersion !== before.version) {
      throw new ApiError('stale_write', { details: { current_version: before.version } });
    }
    if (before.status !== 'draft' && before.status !== 'ended') {
      throw new ApiError('invalid_state', { message: `A ${before.status} challenge cannot be deleted; end it first (PATCH status: ended).`, param: 'status' });
    }
    const rules = await this.progressedBy(environmentId, id);
    if (rules.length > 0) {
      throw new ApiError('resource_in_use', {
        message: `Challenge ${id} is progressed by ${rules.map((r) => `rule ${r}`).join(', ')}; archive the rules or remove their challenge.progress action first.`,
        param: 'id',
        details: { rules },
      });
    }
    const gone = await this.sql`
      delete from challenges where environment_id = ${environmentId} and id = ${id} and status in ('draft', 'ended') and version = ${before.version}
      returning id`;
    if (gone.length === 0) throw new ApiError('stale_write', { message: 'The challenge changed while it was being deleted.' });
    await this.changed(environmentId);
  }

  /** Active challenges compiled for the actor, and the time zone; cached per environment. */
  active(environmentId: string): Promise<ChallengeSet> {
    let cached = this.cache.get(environmentId);
    if (!cached) {
      cached = Promise.all([
        this.sql`select * from challenges where environment_id = ${environmentId} and status = 'active' order by id`,
        this.sql`select timezone from environments where id = ${environmentId}`,
      ]).then(([rows, env]) => ({
        timeZone: (env[0]?.timezone as string | undefined) ?? 'UTC',
        challenges: rows.map(row).map((r) => compileChallenge(r, r.version)),
      }));
      cached.catch(() => this.cache.delete(environmentId));
      this.cache.set(environmentId, cached);
    }
    return cached;
  }

  /** The environment's time zone (cached with the active set). */
  async timeZone(environmentId: string): Promise<string> {
    return (await this.active(environmentId)).timeZone;
  }

  /**
   * Ends every challenge of the environment whose ends_at is at or before nowMs (the scheduler;
   * nowMs is the environment's clock, so a test clock ends challenges too). Returns how many.
   */
  async endDue(environmentId: string, nowMs: number): Promise<number> {
    const rows = await this.sql`
      update challenges set status = 'ended', version = version + 1, updated_at = now()
      where environment_id = ${environmentId} and status <> 'ended' and ends_at <= to_timestamp(${nowMs} / 1000.0)
      returning id`;
    if (rows.length > 0) await this.changed(environmentId);
    return rows.length;
  }

  /** Environments with a challenge past its ends_at by their own clock at real time nowMs (a test clock runs ahead). */
  environmentsWithEndsDue(nowMs: number): Promise<string[]> {
    return environmentsDue(this.sql, nowMs, 'challenges', (at) => this.sql`x.status <> 'ended' and x.ends_at is not null and x.ends_at <= ${at}`);
  }

  private async changed(environmentId: string): Promise<void> {
    this.cache.delete(environmentId);
    await this.bus.publish(channel, environmentId).catch(() => {});
  }
}
