// Tier programs of an environment (decisions.md): key, name, currency, basis, ascending levels and
// an optional downgrade check. Definitions live in PostgreSQL; every node caches each environment's
// list (loaded on first use, dropped on a bus message when any node changes it). Edits are safe
// (version compared in the UPDATE) and pass the domain's guards; per-customer holder counts come
// from a `holdersByLevel` lookup (the customer_tiers read table in the service). An edit that owes
// its holders a move (removed levels, a reevaluation, a new or shorter downgrade check) stores it
// as `pending_move` in the same UPDATE as the edit; `moveHolders` carries it out and it is cleared
// once done. A move that stopped (a crash, a failed customer) is finished by the next PATCH of the
// program (before its own edit), or by the scheduler's sweep (finishPendingMoves). One run at a
// time per program, on every node (claimMove): the sweep skips a program being moved, a PATCH
// waits for it; a move also stops once the stored program moved past the version it serves.
import {
  checkTierProgramEdit,
  needsReevaluation,
  type RetiredLevel,
  type TierBasis,
  type TierLevel,
  type TierProgram,
  validateTierProgram,
} from '../domain/tiers.js';
import { ApiError } from '../errors/api-error.js';
import { newId } from '../ids.js';
import type { Bus } from '../persistence/ports.js';
import { createOncePerCall, recordCreate } from '../persistence/sql/create-calls.js';
import { jsonColumn, type Sql } from '../persistence/sql/db.js';
import type { CurrencyCatalog } from './currencies.js';

export interface TierProgramRecord extends TierProgram {
  name: string;
  rollingDays: number | null;
  downgradeCheck: { everyDays: number } | null;
  version: number;
  createdAtMs: number;
  updatedAtMs: number;
  /** What an edit still owes the holders; null when nothing is owed. Not on the wire. */
  pendingMove: PendingMove | null;
}

/**
 * The move of holders an edit owes, stored with the edit and cleared when done. Each step is
 * harmless to repeat (the actor commands change nothing twice), so a stopped move is run again whole.
 */
export interface PendingMove {
  /** Levels the edit removed (their holders move to reassign_to, or are re-placed); also on the program as retiredLevels. */
  retiredLevels: RetiredLevel[];
  /** Every holder is re-placed at once (a basis or rolling_days change sent with reevaluate: true). */
  reevaluate: boolean;
  /** Holders get a downgrade check date (a check was added or shortened). */
  scheduleChecks: boolean;
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

/**
 * Carries out a stored program's pending move (every step of `move`) through the holders' actors;
 * throws when a customer could not be moved, so the move stays owed, and MoveSuperseded when the
 * stored program is no longer at `program.version` (checked before each page of holders).
 */
export type MoveHolders = (environmentId: string, program: TierProgramRecord, move: PendingMove) => Promise<void>;

const channel = 'tier_programs.changed';

/** How long a PATCH waits for another node's move of the same program before 429 rate_limited. */
const moveWaitMs = 30_000;

/**
 * Thrown by a move that finds the stored program at another version than the one it serves (a
 * later edit stored its own move): it stops, owing nothing more (see MoveHolders).
 */
export class MoveSuperseded extends Error {
  override readonly name = 'MoveSuperseded';
}

export interface TierProgramCatalogOptions {
  /**
   * The SQL client has one connection (embedded mode, a single node): a move's claim is then this
   * process's alone, since a transaction held for the move would hold the connection it needs.
   */
  oneConnection?: boolean;
}


function row(r: Record<string, unknown>): TierProgramRecord {
  const pendingMove = jsonColumn<PendingMove | null>(r.pending_move) ?? null;
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
    pendingMove,
    retiredLevels: pendingMove === null || pendingMove.retiredLevels.length === 0 ? null : pendingMove.retiredLevels,
  };
}

/**
 * What an edit owes the holders: removed levels (recorded with title and threshold, so a holder
 * still on one is moved and tier.changed compares thresholds), a reevaluation, and check dates
 * when a downgrade check was added or shortened. Null when it owes nothing.
 */
export function pendingMoveOf(before: TierProgram, after: TierProgram, reassignTo: string | null, reevaluate: boolean): PendingMove | null {
  const retiredLevels = before.levels
    .filter((l) => !after.levels.some((a) => a.key === l.key))
    .map((l) => ({ key: l.key, title: l.title, threshold: l.threshold, reassignTo }));
  const was = before.downgradeCheck ?? null;
  const is = after.downgradeCheck ?? null;
  const scheduleChecks = is !== null && (was === null || is.everyDays < was.everyDays);
  const move = { retiredLevels, reevaluate: reevaluate && needsReevaluation(before, after), scheduleChecks };
  return move.retiredLevels.length > 0 || move.reevaluate || move.scheduleChecks ? move : null;
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
    private readonly moveHolders: MoveHolders | null = null,
    private readonly options: TierProgramCatalogOptions = {},
  ) {}

  /** Programs whose move this process is running or waiting for, by environment and id. */
  private readonly moving = new Map<string, Promise<void>>();

  async start(): Promise<void> {
    await this.bus.subscribe(channel, (envId) => this.cache.delete(envId));
  }

  /**
   * `callId`: the request's (an Idempotency-Key's); a run again of it answers the program it
   * created (not already_exists: the key is its own).
   */
  async create(environmentId: string, input: TierProgramInput, callId?: string): Promise<TierProgramRecord> {
    const found = async (id: string): Promise<TierProgramRecord> => {
      await this.changed(environmentId);
      return this.get(environmentId, id);
    };
    return createOncePerCall(this.sql, callId, found, async () => {
      validated(input);
      const currencies = await this.currencies.all(environmentId);
      if (!currencies.some((c) => c.key === input.currency)) {
        throw new ApiError('resource_not_found', { message: `No currency ${input.currency}.`, param: 'currency' });
      }
      const id = newId('tp');
      const rows = await this.sql.begin(async (tx) => {
        await recordCreate(tx, callId, id);
        const inserted = await tx`
          insert into tier_programs (environment_id, id, key, name, currency, basis, rolling_days, levels, downgrade_check)
          values (${environmentId}, ${id}, ${input.key}, ${input.name}, ${input.currency}, ${input.basis}, ${input.rollingDays},
            (${JSON.stringify(input.levels)}::text)::jsonb, (${input.downgradeCheck === null ? null : JSON.stringify(input.downgradeCheck)}::text)::jsonb)
          on conflict (environment_id, key) do nothing
          returning *`;
        // Thrown inside: the record of this call goes with the transaction.
        if (inserted.length === 0) throw new ApiError('already_exists', { message: `Tier program ${input.key} already exists.`, param: 'key' });
        return inserted;
      });
      await this.changed(environmentId);
      return row(rows[0]!);
    });
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
   * Applies a patch: a move an earlier edit still owes is finished first (so holders are counted
   * where they belong, and a repeat of a PATCH whose move stopped completes it), then If-Match
   * (stale_write), validation (validation_failed), the guards (resource_in_use: basis or
   * rolling_days change without reevaluate, removal of a held level without reassign_to). The
   * write compares the version again, so a racing edit is stale_write. The edit and the move it
   * owes are stored in one statement, then the move runs before the answer; when it cannot finish,
   * the answer is internal_error (the edit stays stored and its move owed, see finishMove).
   */
  async update(environmentId: string, ref: string, patch: TierProgramPatch, opts: TierProgramEditOptions = {}): Promise<TierProgramRecord> {
    const { id } = await this.get(environmentId, ref);
    // The whole edit holds the program's move claim (waiting while another run moves it): no
    // sweep starts the move this edit stores, and no earlier move still runs beside it.
    const claimed = await this.claimMove(environmentId, id, true, () => this.updateClaimed(environmentId, id, patch, opts));
    if (!claimed.ran) throw new Error('a claim that waits always runs');
    return claimed.value;
  }

  private async updateClaimed(environmentId: string, id: string, patch: TierProgramPatch, opts: TierProgramEditOptions): Promise<TierProgramRecord> {
    let before = await this.get(environmentId, id);
    if (before.pendingMove !== null) before = await this.runMove(environmentId, before);
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
    const move = pendingMoveOf(before, after, reassignTo, opts.reevaluate === true);
    const rows = await this.sql`
      update tier_programs set
        name = ${after.name}, basis = ${after.basis}, rolling_days = ${after.rollingDays},
        levels = (${JSON.stringify(after.levels)}::text)::jsonb,
        downgrade_check = (${after.downgradeCheck === null ? null : JSON.stringify(after.downgradeCheck)}::text)::jsonb,
        pending_move = (${move === null ? null : JSON.stringify(move)}::text)::jsonb,
        version = version + 1, updated_at = now()
      where environment_id = ${environmentId} and id = ${before.id} and version = ${before.version}
      returning *`;
    if (rows.length === 0) {
      const current = await this.get(environmentId, before.id);
      throw new ApiError('stale_write', { details: { current_version: current.version } });
    }
    await this.changed(environmentId);
    const stored = row(rows[0]!);
    return stored.pendingMove === null ? stored : this.runMove(environmentId, stored);
  }

  /**
   * Finishes the move a program owes, unless another run (this node's or another's) holds its
   * claim: then null at once. Answers the program as stored after the move (see runMove).
   */
  async finishMove(environmentId: string, programId: string): Promise<TierProgramRecord | null> {
    const claimed = await this.claimMove(environmentId, programId, false, async () => {
      const program = await this.get(environmentId, programId);
      return this.runMove(environmentId, program);
    });
    return claimed.ran ? claimed.value : null;
  }

  /**
   * Runs `work` holding the program's move claim: in this process a chain per program, and (more
   * than one SQL connection) a transaction-scoped PostgreSQL advisory lock on a connection of its
   * own, held by a transaction left open for the work's length. The work's writes never go through
   * that transaction (actor commands, the projector, this catalog's own statements), so with one
   * connection (embedded mode, one node) the chain alone excludes. `wait` false: { ran: false } at
   * once when another run holds the claim; true: waits for it (moveWaitMs for another node's, then
   * 429 rate_limited).
   */
  private async claimMove<T>(environmentId: string, programId: string, wait: boolean, work: () => Promise<T>): Promise<{ ran: true; value: T } | { ran: false; value?: undefined }> {
    const key = `${environmentId}:${programId}`;
    for (let held = this.moving.get(key); held !== undefined; held = this.moving.get(key)) {
      if (!wait) return { ran: false };
      await held;
    }
    let release!: () => void;
    this.moving.set(key, new Promise<void>((r) => (release = r)));
    try {
      if (this.options.oneConnection === true) return { ran: true, value: await work() };
      let out: { ran: true; value: T } | { ran: false } = { ran: false };
      await this.sql.begin(async (tx) => {
        if (wait) {
          await tx.unsafe(`set local lock_timeout = ${moveWaitMs}`);
          await tx`select pg_advisory_xact_lock(hashtext('tier_program_move'), hashtext(${key}))`.catch((err: unknown) => {
            if ((err as { code?: string }).code !== '55P03') throw err;
            throw new ApiError('rate_limited', { message: `Another edit is moving the customers of tier program ${programId}; retry.`, retryAfterSeconds: 1 });
          });
        } else {
          const [r] = await tx`select pg_try_advisory_xact_lock(hashtext('tier_program_move'), hashtext(${key})) as got`;
          if (r!.got !== true) return;
        }
        out = { ran: true, value: await work() };
      });
      return out;
    } finally {
      this.moving.delete(key);
      release();
    }
  }

  /**
   * Carries out the move a stored edit owes (under its claim), then clears it (only while the
   * program is still at that version: a later edit stores its own). Answers the program as stored
   * after that. A move that cannot finish stays owed and is internal_error here; the next PATCH or
   * sweep runs it again. A move the stored program moved past stops and owes nothing.
   */
  private async runMove(environmentId: string, program: TierProgramRecord): Promise<TierProgramRecord> {
    if (program.pendingMove === null || this.moveHolders === null) return program;
    try {
      await this.moveHolders(environmentId, program, program.pendingMove);
    } catch (err) {
      if (err instanceof MoveSuperseded) return this.get(environmentId, program.id);
      throw new ApiError('internal_error', {
        message:
          `Tier program ${program.id} version ${program.version} is stored, but moving its customers did not finish ` +
          `(${err instanceof Error ? err.message : String(err)}); repeating the PATCH, or the scheduler within a minute, finishes it.`,
      });
    }
    const rows = await this.sql`
      update tier_programs set pending_move = null
      where environment_id = ${environmentId} and id = ${program.id} and version = ${program.version} and pending_move is not null
      returning *`;
    if (rows.length === 0) return this.get(environmentId, program.id);
    await this.changed(environmentId);
    return row(rows[0]!);
  }

  /** Finishes every owed move (the scheduler's sweep, all environments; a test clock's advance, one); a failure waits for the next run. */
  async finishPendingMoves(environmentId: string | null, onError: (err: unknown, programId: string) => void): Promise<void> {
    const rows = await this.sql`
      select environment_id, id from tier_programs where pending_move is not null and (${environmentId}::text is null or environment_id = ${environmentId})
      order by environment_id, id`;
    // A program another run is moving (a PATCH, or another node's sweep) is skipped.
    for (const r of rows) {
      const id = r.id as string;
      await this.finishMove(r.environment_id as string, id).catch((err: unknown) => onError(err, id));
    }
  }

  /** The stored version of a program, null when it is gone (a move checks it is still current). */
  async storedVersion(environmentId: string, id: string): Promise<number | null> {
    const rows = await this.sql`select version from tier_programs where environment_id = ${environmentId} and id = ${id}`;
    return rows.length === 0 ? null : (rows[0]!.version as number);
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
