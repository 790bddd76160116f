// Tier programs of an environment (decisions.md): key, name, currency, basis, ascending levels and
// an optional downgrade check. Definitions live in PostgreSQL; every node caches each environment's
// list (loaded on first use, dropped on a bus message when any node changes it). Edits are safe
// (version compared in the UPDATE) and pass the domain's guards; per-customer holder counts come
// from a `holdersByLevel` lookup (the customer_tiers read table in the service). With reassign_to,
// the holders of removed levels are moved by `reassign` after the edit is stored.
import { checkTierProgramEdit, needsReevaluation, type TierBasis, type TierLevel, type TierProgram, validateTierProgram } from '../domain/tiers.js';
import { ApiError } from '../errors/api-error.js';
import { newId } from '../ids.js';
import type { Bus } from '../persistence/ports.js';
import { jsonColumn, type Sql } from '../persistence/sql/db.js';
import type { CurrencyCatalog } from './currencies.js';

export interface TierProgramRecord extends TierProgram {
  name: string;
  rollingDays: number | null;
  downgradeCheck: { everyDays: number } | null;
  version: number;
  createdAtMs: number;
  updatedAtMs: number;
}

export interface TierProgramInput {
  key: string;
  name: string;
  currency: string;
  basis: TierBasis;
  rollingDays: number | null;
  levels: TierLevel[];
  downgradeCheck: { everyDays: number } | null;
}

/** Fields a PATCH may change; undefined leaves a field as it is. */
export interface TierProgramPatch {
  name?: string;
  basis?: TierBasis;
  rollingDays?: number | null;
  levels?: TierLevel[];
  downgradeCheck?: { everyDays: number } | null;
}

export interface TierProgramEditOptions {
  /** The version the caller read (If-Match); undefined: unconditional. */
  expectedVersion?: number;
  reassignTo?: string | null;
  reevaluate?: boolean;
}

/**
 * Customers holding each level of a program, by level key. The service counts them in the
 * customer_tiers read table (projected from tier.assigned / tier.changed); `noHolders` is for
 * catalog tests without customers.
 */
export type HoldersByLevel = (environmentId: string, program: TierProgramRecord) => Promise<Readonly<Record<string, number>>>;

export const noHolders: HoldersByLevel = async () => ({});

/** Moves the holders of `removedLevels` to `toLevel` once the edited program is stored. */
export type ReassignHolders = (environmentId: string, program: TierProgramRecord, removedLevels: string[], toLevel: string) => Promise<void>;

/** Re-places every holder of the program at once (a basis change sent with reevaluate: true). */
export type ReevaluateHolders = (environmentId: string, program: TierProgramRecord) => Promise<void>;

const channel = 'tier_programs.changed';


function row(r: Record<string, unknown>): TierProgramRecord {
  return {
    id: r.id as string,
    key: r.key as string,
    name: r.name as string,
    currency: r.currency as string,
    basis: r.basis as TierBasis,
    rollingDays: (r.rolling_days as number | null) ?? null,
    levels: jsonColumn<TierLevel[]>(r.levels),
    downgradeCheck: jsonColumn<{ everyDays: number } | null>(r.downgrade_check) ?? null,
    version: r.version as number,
    createdAtMs: (r.created_at as Date).getTime(),
    updatedAtMs: (r.updated_at as Date).getTime(),
  };
}

/** validation_failed naming the first bad wire field (levels[1].threshold), every issue in details. */
function validated(program: Omit<TierProgram, 'id' | 'key'>): void {
  const v = validateTierProgram(program);
  if (!v.ok) throw new ApiError('validation_failed', { param: v.param, message: v.message, details: v.details });
}

/** The program after a patch. Leaving basis rolling keeps rolling_days; leaving it drops them. */
export function patchedProgram(before: TierProgramRecord, patch: TierProgramPatch): TierProgramRecord {
  const basis = patch.basis ?? before.basis;
  const rollingDays = patch.rollingDays !== undefined ? patch.rollingDays : basis === 'earned_rolling_days' ? before.rollingDays : null;
  return {
    ...before,
    name: patch.name ?? before.name,
    basis,
    rollingDays,
    levels: patch.levels ?? before.levels,
    downgradeCheck: patch.downgradeCheck !== undefined ? patch.downgradeCheck : before.downgradeCheck,
  };
}

export class TierProgramCatalog {
  private readonly cache = new Map<string, Promise<TierProgramRecord[]>>();

  constructor(
    private readonly sql: Sql,
    private readonly bus: Bus,
    private readonly currencies: Pick<CurrencyCatalog, 'all'>,
    private readonly holdersByLevel: HoldersByLevel = noHolders,
    private readonly reassign: ReassignHolders | null = null,
    private readonly reevaluate: ReevaluateHolders | null = null,
  ) {}

  async start(): Promise<void> {
    await this.bus.subscribe(channel, (envId) => this.cache.delete(envId));
  }

  async create(environmentId: string, input: TierProgramInput): Promise<TierProgramRecord> {
    validated(input);
    const currencies = await this.currencies.all(environmentId);
    if (!currencies.some((c) => c.key === input.currency)) {
      throw new ApiError('resource_not_found', { message: `No currency ${input.currency}.`, param: 'currency' });
    }
    const rows = await this.sql`
      insert into tier_programs (environment_id, id, key, name, currency, basis, rolling_days, levels, downgrade_check)
      values (${environmentId}, ${newId('tp')}, ${input.key}, ${input.name}, ${input.currency}, ${input.basis}, ${input.rollingDays},
        (${JSON.stringify(input.levels)}::text)::jsonb, (${input.downgradeCheck === null ? null : JSON.stringify(input.downgradeCheck)}::text)::jsonb)
      on conflict (environment_id, key) do nothing
      returning *`;
    if (rows.length === 0) throw new ApiError('already_exists', { message: `Tier program ${input.key} already exists.`, param: 'key' });
    await this.changed(environmentId);
    return row(rows[0]!);
  }

  async list(environmentId: string, q: { limit: number; after: string | null }): Promise<TierProgramRecord[]> {
    const rows = await this.sql`
      select * from tier_programs where environment_id = ${environmentId} and (${q.after}::text is null or id > ${q.after})
      order by id limit ${q.limit}`;
    return rows.map(row);
  }

  /** A program by id (tp_...) or key; another environment's id is resource_not_found. */
  async get(environmentId: string, ref: string): Promise<TierProgramRecord> {
    const rows = await this.sql`
      select * from tier_programs where environment_id = ${environmentId} and (id = ${ref} or key = ${ref}) limit 1`;
    if (rows.length === 0) throw new ApiError('resource_not_found', { message: `No tier program ${ref}.`, param: 'id' });
    return row(rows[0]!);
  }

  /**
   * Applies a patch: If-Match (stale_write), validation (validation_failed), then the guards
   * (resource_in_use: basis or rolling_days change without reevaluate, removal of a held level
   * without reassign_to). The write compares the version again, so a racing edit is stale_write.
   */
  async update(environmentId: string, ref: string, patch: TierProgramPatch, opts: TierProgramEditOptions = {}): Promise<TierProgramRecord> {
    const before = await this.get(environmentId, ref);
    if (opts.expectedVersion !== undefined && opts.expectedVersion !== before.version) {
      throw new ApiError('stale_write', { details: { current_version: before.version } });
    }
    const after = patchedProgram(before, patch);
    validated(after);
    const reassignTo = opts.reassignTo ?? null;
    if (reassignTo !== null && !after.levels.some((l) => l.key === reassignTo)) {
      throw new ApiError('validation_failed', {
        param: 'reassign_to',
        message: 'reassign_to: must name a level that remains in the program.',
        details: [{ param: 'reassign_to', message: 'Must name a level that remains in the program.' }],
      });
    }
    const removesLevels = before.levels.some((l) => !after.levels.some((a) => a.key === l.key));
    const holders = removesLevels ? await this.holdersByLevel(environmentId, before) : {};
    const guard = checkTierProgramEdit(before, after, holders, { reassignTo, reevaluate: opts.reevaluate === true });
    if (!guard.ok) throw new ApiError(guard.code, { param: guard.param, message: guard.message });
    const rows = await this.sql`
      update tier_programs set
        name = ${after.name}, basis = ${after.basis}, rolling_days = ${after.rollingDays},
        levels = (${JSON.stringify(after.levels)}::text)::jsonb,
        downgrade_check = (${after.downgradeCheck === null ? null : JSON.stringify(after.downgradeCheck)}::text)::jsonb,
        version = version + 1, updated_at = now()
      where environment_id = ${environmentId} and id = ${before.id} and version = ${before.version}
      returning *`;
    if (rows.length === 0) {
      const current = await this.get(environmentId, before.id);
      throw new ApiError('stale_write', { details: { current_version: current.version } });
    }
    await this.changed(environmentId);
    const stored = row(rows[0]!);
    const removed = before.levels.filter((l) => !after.levels.some((a) => a.key === l.key) && (holders[l.key] ?? 0) > 0).map((l) => l.key);
    if (reassignTo !== null && removed.length > 0 && this.reassign !== null) await this.reassign(environmentId, stored, removed, reassignTo);
    if (opts.reevaluate === true && needsReevaluation(before, after) && this.reevaluate !== null) await this.reevaluate(environmentId, stored);
    return stored;
  }

  /** Every program of the environment, cached (for evaluation on the actors). */
  all(environmentId: string): Promise<TierProgramRecord[]> {
    let cached = this.cache.get(environmentId);
    if (!cached) {
      cached = this.sql`select * from tier_programs where environment_id = ${environmentId} order by key`.then((rows) => rows.map(row));
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
