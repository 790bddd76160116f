// Change sets (decisions.md "Change sets") and the match profiles they write (spec 2.11, 4.8).
// A change set is validated command by command when it is created (the failing command's index is
// named in `param`: `commands[2].metrics[0].key`) and stored as pending. Applying it runs every
// command in ONE PostgreSQL transaction (all or nothing) through the pure profile mechanic
// (decideProfile); each resulting profile revision is kept. A live environment under autonomy
// `limits` holds a set with a destructive command (match_profile.archive) as
// awaiting_confirmation until a signed-in owner or admin confirms it. Profiles are cached per
// environment on every node and invalidated over the bus.
import { z } from 'zod';
import {
  decideProfile,
  type MatchProfile,
  type ProfileCommand,
  profileCreateSchema,
  profileToWire,
  profileUpdateSchema,
  validateProfileCreate,
  validateProfileUpdate,
} from '../domain/match/profile.js';
import { ApiError } from '../errors/api-error.js';
import { newId } from '../ids.js';
import type { Bus } from '../persistence/ports.js';
import { createOncePerCall, recordCreate } from '../persistence/sql/create-calls.js';
import type { Sql } from '../persistence/sql/db.js';

const channel = 'match_profiles.changed';

export type Autonomy = 'auto' | 'limits';
export interface EnvironmentSettings {
  runtimeClass: 'test' | 'live';
  /** In effect: always `auto` in a test environment. */
  autonomy: Autonomy;
  version: number;
}
export const testAutonomyMessage = 'Autonomy applies to live environments only; a test environment applies every change set on request.';
export const destructiveCommands: ReadonlySet<string> = new Set(['match_profile.archive']);
export const commandTypes = ['match_profile.create', 'match_profile.update', 'match_profile.archive'] as const;
/** Command types of spec 4.8 whose capability (notifications) is not built yet: 501 capability_unavailable, not "unknown". */
export const unavailableCommandTypes: ReadonlySet<string> = new Set([
  'notification_message_type.create',
  'notification_message_type.update',
  'notification_message_type.pause',
  'notification_message_type.resume',
  'notification_template.put',
  'notification_template.delete',
  'notification_settings.update',
]);

export interface ChangeSetRecord {
  id: string;
  status: 'pending' | 'awaiting_confirmation' | 'applied';
  commands: Array<Record<string, unknown>>;
  results: unknown[] | null;
  revision: number;
  createdAtMs: number;
  updatedAtMs: number;
  appliedAtMs: number | null;
  confirmedBy: string | null;
}

function json<T>(v: unknown): T {
  return (typeof v === 'string' ? JSON.parse(v) : v) as T;
}

function changeSetRow(r: Record<string, unknown>): ChangeSetRecord {
  return {
    id: r.id as string,
    status: r.status as ChangeSetRecord['status'],
    commands: json(r.commands),
    results: r.results === null ? null : json(r.results),
    revision: r.revision as number,
    createdAtMs: (r.created_at as Date).getTime(),
    updatedAtMs: (r.updated_at as Date).getTime(),
    appliedAtMs: r.applied_at === null ? null : (r.applied_at as Date).getTime(),
    confirmedBy: (r.confirmed_by as string | null) ?? null,
  };
}

const versionField = z.number({ error: 'expected_version must be an integer.' }).int('expected_version must be an integer.').min(1).optional();
const keyField = z.string({ error: 'key (string) is required.' }).min(1).max(64);

/** Documents the command shapes in OpenAPI; validation itself runs per command (index in param). */
export const commandDocSchema = z.discriminatedUnion('type', [
  profileCreateSchema.extend({ type: z.literal('match_profile.create') }),
  // validateCommand: key names the profile (keyField), the rest is validateProfileUpdate's.
  profileUpdateSchema
    .extend({ type: z.literal('match_profile.update'), key: profileUpdateSchema.shape.key.unwrap(), expected_version: versionField })
    .describe(
      'key, expected_version, and any of the sections of match_profile.create (event, metrics, duration, players, rate_limits, outliers); each named section replaces the stored one.',
    ),
  z.strictObject({ type: z.literal('match_profile.archive'), key: keyField, expected_version: versionField }),
]);

/** A param of command i as the client writes it: `metrics[0].key` -> `commands[2].metrics[0].key`. */
function commandParam(i: number, param: string | undefined): string {
  if (param === undefined || param === 'body' || param === '') return `commands[${i}]`;
  return param.startsWith('[') ? `commands[${i}]${param}` : `commands[${i}].${param}`;
}

/** details[].param carry the same full path as param (each problem maps to its command). */
function commandDetails(i: number, details: unknown): unknown {
  if (!Array.isArray(details)) return details;
  return details.map((d: unknown) =>
    d !== null && typeof d === 'object' && typeof (d as { param?: unknown }).param === 'string'
      ? { ...(d as object), param: commandParam(i, (d as { param: string }).param) }
      : d,
  );
}

function commandError(i: number, param: string, message: string, details?: unknown): ApiError {
  const at = commandParam(i, param);
  return new ApiError('validation_failed', { param: at, message: `${at}: ${message.replace(/^[^:]*: /, '')}`, details: commandDetails(i, details) });
}

/** Validates one command on its own (shapes and bounds); throws validation_failed naming commands[i]. */
export function validateCommand(raw: unknown, i: number): ProfileCommand & { key: string } {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw commandError(i, '', 'A command is an object with a type.');
  const { type, expected_version, ...rest } = raw as Record<string, unknown>;
  if (typeof type === 'string' && unavailableCommandTypes.has(type)) {
    const at = commandParam(i, 'type');
    throw new ApiError('capability_unavailable', {
      param: at,
      message: `${at}: ${type} changes notifications, which are not available yet; only ${commandTypes.join(', ')} can be applied.`,
    });
  }
  if (typeof type !== 'string' || !(commandTypes as readonly string[]).includes(type)) {
    throw commandError(i, 'type', `Unknown command type; one of ${commandTypes.join(', ')}.`);
  }
  let expectedVersion: number | null = null;
  if (type !== 'match_profile.create' && expected_version !== undefined) {
    const v = versionField.safeParse(expected_version);
    if (!v.success) throw commandError(i, 'expected_version', 'expected_version must be a positive integer.');
    expectedVersion = v.data ?? null;
  } else if (type === 'match_profile.create' && expected_version !== undefined) {
    throw commandError(i, 'expected_version', 'Unknown field.');
  }
  const key = keyField.safeParse(rest.key);
  if (!key.success) throw commandError(i, 'key', 'key (string, 1 to 64 characters) is required.');
  if (type === 'match_profile.create') {
    const v = validateProfileCreate(rest);
    if (!v.ok) throw commandError(i, v.param, v.message, v.details);
    return { kind: 'match_profile.create', body: rest, key: key.data };
  }
  if (type === 'match_profile.update') {
    const v = validateProfileUpdate(rest);
    if (!v.ok) throw commandError(i, v.param, v.message, v.details);
    return { kind: 'match_profile.update', body: rest, expectedVersion, key: key.data };
  }
  const extra = Object.keys(rest).filter((k) => k !== 'key');
  if (extra.length > 0) throw commandError(i, extra[0]!, 'Unknown field.');
  return { kind: 'match_profile.archive', expectedVersion, key: key.data };
}

export class MatchProfileStore {
  private readonly cache = new Map<string, Promise<Map<string, MatchProfile>>>();

  constructor(
    private readonly sql: Sql,
    private readonly bus: Bus,
  ) {}

  async start(): Promise<void> {
    await this.bus.subscribe(channel, (envId) => this.cache.delete(envId));
  }

  /** Every profile of an environment by key (cached; archived ones included). */
  byKey(environmentId: string): Promise<Map<string, MatchProfile>> {
    let p = this.cache.get(environmentId);
    if (p === undefined) {
      p = this.sql`select profile from match_profiles where environment_id = ${environmentId}`.then((rows) => {
        const m = new Map<string, MatchProfile>();
        for (const r of rows) {
          const prof = json<MatchProfile>(r.profile);
          m.set(prof.key, prof);
        }
        return m;
      });
      p.catch(() => this.cache.delete(environmentId));
      this.cache.set(environmentId, p);
    }
    return p;
  }

  async list(environmentId: string, q: { limit: number; after: string | null }): Promise<MatchProfile[]> {
    const rows = await this.sql`
      select profile from match_profiles where environment_id = ${environmentId} and (${q.after}::text is null or id > ${q.after})
      order by id limit ${q.limit}`;
    return rows.map((r) => json<MatchProfile>(r.profile));
  }

  /**
   * By id (mpf_...) or key; an id match wins over a key match (keys made before mpf_ keys were
   * refused may equal another profile's id). Another environment's id is resource_not_found.
   */
  async get(environmentId: string, ref: string): Promise<MatchProfile> {
    const rows = await this.sql`
      select profile from match_profiles where environment_id = ${environmentId} and (id = ${ref} or key = ${ref})
      order by (id = ${ref}) desc limit 1`;
    if (rows.length === 0) throw new ApiError('resource_not_found', { message: `No match profile ${ref}.`, param: 'id' });
    return json<MatchProfile>(rows[0]!.profile);
  }

  /** The profile as a given revision checked it (results keep their revision). */
  async revision(environmentId: string, profileId: string, revision: number): Promise<MatchProfile | null> {
    const rows = await this.sql`
      select profile from match_profile_revisions where environment_id = ${environmentId} and profile_id = ${profileId} and revision = ${revision}`;
    return rows.length === 0 ? null : json<MatchProfile>(rows[0]!.profile);
  }

  // ---- change sets ----------------------------------------------------------------------------

  /**
   * Stores a validated set; `nowMs` is the environment's clock (its test clock in a test environment),
   * like its profiles'. `callId`: the request's (an Idempotency-Key's); a run again of it answers the
   * set it stored, as it is now.
   */
  async createChangeSet(environmentId: string, commands: unknown[], createdBy: string, nowMs: number, callId?: string): Promise<ChangeSetRecord> {
    return createOncePerCall(this.sql, callId, (id) => this.getChangeSet(environmentId, id), async () => {
      for (let i = 0; i < commands.length; i++) validateCommand(commands[i], i);
      const at = new Date(nowMs);
      const id = newId('cs');
      const rows = await this.sql.begin(async (tx) => {
        await recordCreate(tx, callId, id);
        return tx`
          insert into change_sets (environment_id, id, status, commands, created_by, created_at, updated_at)
          values (${environmentId}, ${id}, 'pending', (${JSON.stringify(commands)}::text)::jsonb, ${createdBy}, ${at}, ${at})
          returning *`;
      });
      return changeSetRow(rows[0]!);
    });
  }

  async getChangeSet(environmentId: string, id: string): Promise<ChangeSetRecord> {
    const rows = await this.sql`select * from change_sets where environment_id = ${environmentId} and id = ${id}`;
    if (rows.length === 0) throw new ApiError('resource_not_found', { message: `No change set ${id}.`, param: 'change_set_id' });
    return changeSetRow(rows[0]!);
  }

  /**
   * The settings in effect: a test environment applies every set on request, so its autonomy is
   * `auto` whatever a row says. `version` is the settings' ETag.
   */
  async autonomy(environmentId: string): Promise<EnvironmentSettings> {
    const rows = await this.sql`select runtime_class, autonomy, settings_version from environments where id = ${environmentId}`;
    if (rows.length === 0) throw new ApiError('resource_not_found', { message: 'No such environment.' });
    const runtimeClass = rows[0]!.runtime_class as 'test' | 'live';
    const autonomy = runtimeClass === 'live' ? (rows[0]!.autonomy as Autonomy) : 'auto';
    return { runtimeClass, autonomy, version: rows[0]!.settings_version as number };
  }

  /**
   * Sets a live environment's autonomy (a test environment has none: forbidden). With
   * `expectedVersion`, only if the settings are still at it (stale_write naming the current one).
   */
  async setAutonomy(environmentId: string, autonomy: Autonomy, expectedVersion: number | undefined): Promise<EnvironmentSettings> {
    const rows = await this.sql`
      update environments set autonomy = ${autonomy}, settings_version = settings_version + 1
      where id = ${environmentId} and runtime_class = 'live' and (${expectedVersion ?? null}::int is null or settings_version = ${expectedVersion ?? null})
      returning settings_version`;
    if (rows.length > 0) return { runtimeClass: 'live', autonomy, version: rows[0]!.settings_version as number };
    const current = await this.autonomy(environmentId);
    if (current.runtimeClass !== 'live') throw new ApiError('forbidden', { message: testAutonomyMessage });
    throw new ApiError('stale_write', { details: { current_version: current.version } });
  }

  /**
   * Applies a set. `mode`: 'apply' (POST /change_set_applications: may answer awaiting_confirmation;
   * again for a set already awaiting it, the same answer and nothing written) or 'confirm' (a
   * signed-in owner or admin confirmed it). Applied twice: invalid_state. Timestamps are `nowMs`,
   * the environment's clock, the same as the profiles the set writes. `callId`: the request's (an
   * Idempotency-Key's); a run again of it answers the set it applied or held, as it is now (not
   * invalid_state).
   */
  async apply(
    environmentId: string,
    id: string,
    mode: 'apply' | 'confirm',
    actor: string,
    nowMs: number,
    callId?: string,
  ): Promise<{ changeSet: ChangeSetRecord; awaiting: boolean }> {
    const again = {
      found: async (setId: string) => {
        const cs = await this.getChangeSet(environmentId, setId);
        // A first run that died before telling the nodes: tell them now.
        if (cs.status === 'applied') await this.changed(environmentId);
        return { changeSet: cs, awaiting: cs.status === 'awaiting_confirmation' };
      },
      gone: (setId: string) => `An earlier run of this request ${mode === 'apply' ? 'applied or held' : 'confirmed'} change set ${setId}, which is gone since.`,
    };
    return createOncePerCall(this.sql, callId, again, () => this.applyOnce(environmentId, id, mode, actor, nowMs, callId));
  }

  private async changed(environmentId: string): Promise<void> {
    this.cache.delete(environmentId);
    await this.bus.publish(channel, environmentId).catch(() => {});
  }

  private async applyOnce(
    environmentId: string,
    id: string,
    mode: 'apply' | 'confirm',
    actor: string,
    nowMs: number,
    callId: string | undefined,
  ): Promise<{ changeSet: ChangeSetRecord; awaiting: boolean }> {
    const env = await this.autonomy(environmentId);
    const result = await this.sql
      .begin(async (tx) => {
      // First: a run of the same call that committed while this one waited is found here.
      await recordCreate(tx, callId, id);
      const rows = await tx`select * from change_sets where environment_id = ${environmentId} and id = ${id} for update`;
      if (rows.length === 0) throw new ApiError('resource_not_found', { message: `No change set ${id}.`, param: mode === 'apply' ? 'change_set_id' : 'id' });
      const cs = changeSetRow(rows[0]!);
      if (cs.status === 'applied') throw new ApiError('invalid_state', { message: 'The change set was already applied.' });
      const destructive = cs.commands.some((c) => destructiveCommands.has(String(c.type)));
      const needsConfirmation = env.runtimeClass === 'live' && env.autonomy === 'limits' && destructive;
      const at = new Date(nowMs);
      if (mode === 'apply' && needsConfirmation) {
        // Already held: a repeat changes nothing (revision is the set's optimistic-edit counter).
        if (cs.status === 'awaiting_confirmation') return { changeSet: cs, awaiting: true };
        const held = await tx`
          update change_sets set status = 'awaiting_confirmation', revision = revision + 1, updated_at = ${at}
          where environment_id = ${environmentId} and id = ${id} returning *`;
        return { changeSet: changeSetRow(held[0]!), awaiting: true };
      }
      if (mode === 'confirm' && cs.status !== 'awaiting_confirmation') {
        throw new ApiError('invalid_state', { message: 'Only a change set awaiting confirmation can be confirmed.' });
      }
      const results: unknown[] = [];
      // Profiles touched earlier in this set, so a later command sees them.
      const touched = new Map<string, MatchProfile | null>();
      for (let i = 0; i < cs.commands.length; i++) {
        const cmd = validateCommand(cs.commands[i], i);
        let state = touched.get(cmd.key);
        if (state === undefined) {
          const found = await tx`
            select profile from match_profiles where environment_id = ${environmentId} and key = ${cmd.key} for update`;
          state = found.length === 0 ? null : json<MatchProfile>(found[0]!.profile);
        }
        const d = decideProfile(state, cmd, { nowMs, newId });
        if (!d.ok) {
          // A stale expected_version carries the version to read, as If-Match's stale_write does.
          const details = d.currentVersion !== undefined ? { current_version: d.currentVersion } : commandDetails(i, d.details);
          throw new ApiError(d.code, { param: commandParam(i, d.param), message: `commands[${i}]: ${d.message}`, details });
        }
        const p = d.profile;
        touched.set(cmd.key, p);
        if (d.facts.length > 0) {
          const body = JSON.stringify(p);
          await tx`
            insert into match_profiles (environment_id, id, key, revision, status, profile, created_at, updated_at)
            values (${environmentId}, ${p.id}, ${p.key}, ${p.revision}, ${p.status}, (${body}::text)::jsonb,
              ${new Date(p.createdAtMs)}, ${new Date(p.updatedAtMs)})
            on conflict (environment_id, id) do update set revision = excluded.revision, status = excluded.status,
              profile = excluded.profile, updated_at = excluded.updated_at`;
          await tx`
            insert into match_profile_revisions (environment_id, profile_id, revision, profile, change_set_id)
            values (${environmentId}, ${p.id}, ${p.revision}, (${body}::text)::jsonb, ${id})`;
        }
        results.push({ index: i, type: cs.commands[i]!.type, key: p.key, match_profile_id: p.id, version: p.revision, status: p.status });
      }
      const done = await tx`
        update change_sets set status = 'applied', results = (${JSON.stringify(results)}::text)::jsonb, revision = revision + 1,
          applied_by = ${actor}, confirmed_by = ${mode === 'confirm' ? actor : null}, applied_at = ${at}, updated_at = ${at}
        where environment_id = ${environmentId} and id = ${id} returning *`;
      return { changeSet: changeSetRow(done[0]!), awaiting: false };
      })
      .catch((err: unknown) => {
        // Another set created the same key concurrently (unique (environment_id, key)).
        if ((err as { code?: unknown }).code === '23505') throw new ApiError('already_exists', { message: 'A match profile with this key was created concurrently.' });
        throw err;
      });
    if (!result.awaiting) await this.changed(environmentId);
    return result;
  }
}

export { profileToWire };
