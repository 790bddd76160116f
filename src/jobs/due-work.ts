// The due-work scheduler: finds customers whose ledger has work due (pending credits past their
// confirm_after, lots past their expiry) through the ledger read model, and has each customer's
// actor settle it (ledger.run_due, which journals the confirmation and expiry entries and
// re-places the customer in its tiers). It runs every minute, each environment by its own clock (a
// test clock's offset counts), and right after a test clock moves. Settling is idempotent, so a
// customer found twice (or by two nodes) is harmless.
// Tier downgrade checks that fall due (customer_tiers.next_check_at, projected from tier facts) are
// run the same way (tier.run_due): that is how rolling-window programs drop customers whose
// earnings aged out.
import type { Logger } from 'pino';
import type { Engine } from '../actors/engine.js';
import type { CurrencyCatalog } from '../catalog/currencies.js';
import { tierProgramOf } from '../catalog/rules-context.js';
import type { TierProgram } from '../domain/tiers.js';
import type { DueJob, DueRun } from './scheduler.js';
import type { Sql } from '../persistence/sql/db.js';
import { environmentsDue } from '../persistence/sql/due-environments.js';

const concurrency = 32;

export interface DueWorkDeps {
  sql: Sql;
  engine: Engine;
  currencies: CurrencyCatalog;
  tiers: { all(environmentId: string): Promise<TierProgram[]> };
  now(environmentId: string): number | Promise<number>;
  drainProjector(): Promise<void>;
  logger: Logger;
}

export class DueWork implements DueJob {
  readonly name = 'ledger and tier checks';

  constructor(private readonly deps: DueWorkDeps) {}


  /**
   * Everything due, each environment by its own clock (the scheduler calls it every minute): a
   * test environment whose clock was advanced has its work run as a live one's does.
   */
  async sweep(): Promise<void> {
    const { sql } = this.deps;
    const nowMs = Date.now();
    const [ledger, tiers] = await Promise.all([
      environmentsDue(
        sql,
        nowMs,
        'ledger_entries',
        // As runLedger: a deleted customer's rows stay, but its actor settles nothing.
        (at) => sql`((x.status = 'pending' and x.confirm_after <= ${at}) or (x.status = 'posted' and x.remaining > 0 and x.expires_at <= ${at}))
          and not exists (select 1 from customers c where c.environment_id = x.environment_id and c.id = x.customer_id and c.deleted_at is not null)`,
      ),
      environmentsDue(sql, nowMs, 'customer_tiers', (at) => sql`x.next_check_at <= ${at}`),
    ]);
    for (const env of new Set([...ledger, ...tiers])) {
      await this.runForEnvironment(env, await this.deps.now(env));
    }
  }

  /** Settles every customer of the environment with ledger work or a tier check due at nowMs; names them. */
  async runForEnvironment(environmentId: string, nowMs: number): Promise<DueRun> {
    await this.deps.drainProjector();
    const ledger = await this.runLedger(environmentId, nowMs);
    const tiers = await this.runTierChecks(environmentId, nowMs);
    return { customerIds: [...ledger, ...tiers], challengesEnded: 0 };
  }

  /** Customers whose tier downgrade check is due re-evaluate those programs (tier.run_due). */
  private async runTierChecks(environmentId: string, nowMs: number): Promise<string[]> {
    const rows = await this.deps.sql`
      select distinct customer_id from customer_tiers
      where environment_id = ${environmentId} and next_check_at <= to_timestamp(${nowMs} / 1000.0)`;
    if (rows.length === 0) return [];
    const tierPrograms = (await this.deps.tiers.all(environmentId)).map(tierProgramOf);
    const ids = rows.map((r) => r.customer_id as string);
    let next = 0;
    const worker = async () => {
      while (next < ids.length) {
        const id = ids[next++]!;
        const result = await this.deps.engine.execute({ env: environmentId, target: { by: 'id', id }, command: { kind: 'tier.run_due', tierPrograms }, nowMs });
        if (result.ok === false && result.code !== 'resource_not_found') {
          this.deps.logger.warn({ customer: id, code: result.code }, 'due tier check not run; next sweep retries');
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, ids.length) }, worker));
    await this.deps.drainProjector();
    return ids;
  }

  private async runLedger(environmentId: string, nowMs: number): Promise<string[]> {
    const rows = await this.deps.sql`
      select distinct customer_id from ledger_entries
      where environment_id = ${environmentId}
        and ((status = 'pending' and confirm_after <= to_timestamp(${nowMs} / 1000.0))
          or (status = 'posted' and remaining > 0 and expires_at <= to_timestamp(${nowMs} / 1000.0)))
        -- Rows of deleted customers stay (ledger integrity), but their actors settle nothing (404).
        and not exists (
          select 1 from customers c
          where c.environment_id = ledger_entries.environment_id and c.id = ledger_entries.customer_id and c.deleted_at is not null)`;
    if (rows.length === 0) return [];
    const [all, programs] = await Promise.all([this.deps.currencies.all(environmentId), this.deps.tiers.all(environmentId)]);
    const currencies = all.map((c) => ({ key: c.key, negativeBalance: c.negativeBalance, expiryDays: c.expiryDays }));
    const tierPrograms = programs.map(tierProgramOf);
    const ids = rows.map((r) => r.customer_id as string);
    let next = 0;
    const worker = async () => {
      while (next < ids.length) {
        const id = ids[next++]!;
        const result = await this.deps.engine.execute({
          env: environmentId,
          target: { by: 'id', id },
          command: { kind: 'ledger.run', command: { kind: 'ledger.run_due' }, currencies, tierPrograms },
          nowMs,
        });
        if (result.ok === false && result.code !== 'resource_not_found') {
          this.deps.logger.warn({ customer: id, code: result.code }, 'due ledger work not settled; next sweep retries');
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, ids.length) }, worker));
    await this.deps.drainProjector();
    return ids;
  }
}
