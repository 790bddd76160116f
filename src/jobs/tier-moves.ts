// The moves of customers that tier program edits owe (TierProgramCatalog's pending_move): holders
// of removed levels go to the edit's reassign_to (or are re-placed by their metric), every holder
// is re-placed after a basis change sent with reevaluate: true, and holders get a downgrade check
// date when a check was added or shortened. The catalog runs a move right after its edit and
// before the next edit of the program; this job finishes, every minute (so also after a restart)
// and when a test clock is advanced, any move that stopped. Every step is harmless to repeat: the
// actor commands change nothing the first run changed. One run at a time per program (the
// catalog's claim), and a run stops (MoveSuperseded) before any page of holders once the stored
// program is past the version it carries out: a stale run never moves a later edit's holders.
import type { Logger } from 'pino';
import type { Engine } from '../actors/engine.js';
import { tierProgramOf } from '../catalog/rules-context.js';
import { MoveSuperseded, type PendingMove, type TierProgramRecord } from '../catalog/tier-programs.js';
import { dayMs, type TierProgram } from '../domain/tiers.js';
import type { DueJob, DueRun } from './scheduler.js';

const pageSize = 500;
/** Passes over the holders of removed levels: a node's stale program cache may still place one there. */
const strandedPassesMax = 3;

/** Whether the actor changed anything (applied replies), or the call failed (code). */
type Outcome = { changed: boolean } | { failed: string };

export interface TierMoveDeps {
  engine: Pick<Engine, 'execute'>;
  readModel: {
    tierHoldersOf(environmentId: string, programId: string, filter: { levels?: string[]; checkAfterMs?: number }, after: string, limit: number): Promise<string[]>;
    tierLevelsHeldBesides(environmentId: string, programId: string, levels: string[]): Promise<string[]>;
  };
  catalog: {
    finishPendingMoves(environmentId: string | null, onError: (err: unknown, programId: string) => void): Promise<void>;
    storedVersion(environmentId: string, id: string): Promise<number | null>;
  };
  now(environmentId: string): number | Promise<number>;
  drainProjector(): Promise<void>;
  logger: Logger;
}

type MoveCommand =
  | { kind: 'tier.reassign'; program: TierProgram; toLevel: string | null }
  | { kind: 'tier.reevaluate'; program: TierProgram }
  | { kind: 'tier.schedule_check'; program: TierProgram };

export class TierMoves implements DueJob {
  readonly name = 'tier program moves';

  constructor(private readonly deps: TierMoveDeps) {}

  async sweep(): Promise<void> {
    await this.deps.catalog.finishPendingMoves(null, (err, programId) => this.deps.logger.warn({ err, programId }, 'tier program move not finished; the next sweep retries'));
  }

  async runForEnvironment(environmentId: string): Promise<DueRun> {
    await this.deps.catalog.finishPendingMoves(environmentId, (err, programId) =>
      this.deps.logger.warn({ err, programId }, 'tier program move not finished; the next sweep retries'),
    );
    return { customerIds: [], challengesEnded: 0 };
  }

  /**
   * Carries out one program's pending move, in order: removed levels, reevaluation, check dates.
   * Throws when a customer could not be moved (after one retry), leaving the move owed, and
   * MoveSuperseded when the stored program is no longer at record.version.
   */
  async move(environmentId: string, record: TierProgramRecord, move: PendingMove): Promise<void> {
    const program = tierProgramOf(record);
    const current = record.levels.map((l) => l.key);
    const stillCurrent = async () => {
      const version = await this.deps.catalog.storedVersion(environmentId, record.id);
      if (version !== record.version) throw new MoveSuperseded(`tier program ${record.id} is at version ${version ?? 'none'}, not ${record.version}`);
    };
    await this.deps.drainProjector();
    const nowMs = await this.deps.now(environmentId);
    // Every level held that the program no longer has, not only the recorded ones (a holder placed
    // there by a node that still had the old definition); once moved, the read model shows none.
    // A pass that moved nobody is the last: what the read model still shows there, the actors do
    // not hold (an evaluation re-places such a holder anyway, evaluateTier's rule 5).
    for (let pass = 0; pass < strandedPassesMax; pass++) {
      const stranded = await this.deps.readModel.tierLevelsHeldBesides(environmentId, record.id, current);
      if (stranded.length === 0) break;
      const moved = await this.each(environmentId, record.id, { levels: stranded }, { kind: 'tier.reassign', program, toLevel: null }, nowMs, stillCurrent);
      if (moved === 0) {
        this.deps.logger.warn({ programId: record.id, levels: stranded }, 'tier program move: removed levels still listed, but no holder moved');
        break;
      }
    }
    if (move.reevaluate) await this.each(environmentId, record.id, {}, { kind: 'tier.reevaluate', program }, nowMs, stillCurrent);
    const check = record.downgradeCheck;
    if (move.scheduleChecks && check !== null) {
      await this.each(environmentId, record.id, { checkAfterMs: nowMs + check.everyDays * dayMs }, { kind: 'tier.schedule_check', program }, nowMs, stillCurrent);
    }
  }

  /**
   * Runs `command` for every holder the filter selects, a page at a time, and answers how many
   * changed; the projector is drained after. A customer whose call failed is tried once more, then
   * this throws (the move stays owed). `stillCurrent` runs before each page (and the retry): it throws to stop.
   */
  private async each(
    environmentId: string,
    programId: string,
    filter: { levels?: string[]; checkAfterMs?: number },
    command: MoveCommand,
    nowMs: number,
    stillCurrent: () => Promise<void>,
  ): Promise<number> {
    const run = async (id: string): Promise<Outcome> => {
      try {
        const result = await this.deps.engine.execute({ env: environmentId, target: { by: 'id', id }, command, nowMs });
        if (result.ok === true) return { changed: result.reply.kind === 'applied' && result.reply.changed };
        // A customer deleted meanwhile has nothing to move.
        if (result.ok === false && result.code === 'resource_not_found') return { changed: false };
        return { failed: `${id}: ${result.ok === false ? result.code : 'redirected'}` };
      } catch (err) {
        return { failed: `${id}: ${err instanceof Error ? err.message : String(err)}` };
      }
    };
    let after = '';
    let changed = 0;
    const failed: string[] = [];
    const count = (ids: string[], outcomes: Outcome[], failures: string[]) =>
      outcomes.forEach((o, i) => {
        if ('failed' in o) failures.push(ids[i]!);
        else if (o.changed) changed++;
      });
    for (;;) {
      await stillCurrent();
      const ids = await this.deps.readModel.tierHoldersOf(environmentId, programId, filter, after, pageSize);
      if (ids.length === 0) break;
      after = ids[ids.length - 1]!;
      count(ids, await Promise.all(ids.map(run)), failed);
    }
    // One more try for the customers whose call failed (a partition moving between nodes).
    if (failed.length > 0) await stillCurrent();
    const retried = await Promise.all(failed.map(run));
    const still: string[] = [];
    count(failed, retried, still);
    await this.deps.drainProjector();
    if (still.length > 0) {
      const why = retried.flatMap((o) => ('failed' in o ? [o.failed] : [])).slice(0, 3);
      throw new Error(`${still.length} customer(s) not moved (${why.join('; ')})`);
    }
    return changed;
  }
}
