// The issuance sweep of the due-work scheduler, beside the ledger's (due-work.ts): (1) issued
// issuances past expires_at become expired (reward.expire_due on each customer's actor: no refund,
// no unit released), every minute (each environment by its own clock: a test clock's offset
// counts) and right after a test clock moves; (2) the stock reconciler: a reservation still
// `reserved` after a few minutes (crash between reservation and journal, or a lost confirm) is
// settled by the customer's actor, which either has the issuance (confirm) or records the id as
// voided so it can never be issued (then the unit goes back); units of issuances the read model
// shows cancelled or refused are given back. Everything here is idempotent, so two nodes sweeping
// together are harmless. (3) The rule path's outbox: fulfil() reserves the unit of a journaled
// `reward.issue_requested` and tells the actor (issued, or refused with reward_unavailable); it
// runs right after the ack of the event (or challenge reevaluation) that made the request, and the
// sweep re-drives requests still pending after a minute of their environment's clock (a crash, a
// lost fulfilment), and so does a test clock's advance.
import type { Logger } from 'pino';
import type { Engine } from '../actors/engine.js';
import { type RewardCatalog, termsOf } from '../catalog/rewards.js';
import type { RewardCommand, RewardTerms } from '../domain/rewards.js';
import type { Effect } from '../domain/rule-effects.js';
import { ApiError } from '../errors/api-error.js';
import type { DueJob, DueRun } from './scheduler.js';
import type { Sql } from '../persistence/sql/db.js';
import { environmentsDue } from '../persistence/sql/due-environments.js';

const concurrency = 32;
/** A reservation older than this without a confirmed issuance is reconciled (a live request finishes far sooner). */
export const reservationStaleMs = 5 * 60_000;
const reconcileBatch = 500;
/** A rule's request still pending after this is re-driven by the sweep (the first try runs right after the ack). */
export const requestRedriveMs = 60_000;

export interface RewardDueWorkDeps {
  sql: Sql;
  engine: Engine;
  rewards: RewardCatalog;
  now(environmentId: string): number | Promise<number>;
  drainProjector(): Promise<void>;
  logger: Logger;
}

export class RewardDueWork implements DueJob {
  readonly name = 'rewards';

  constructor(private readonly deps: RewardDueWorkDeps) {}


  /**
   * Everything due, each environment by its own clock (the scheduler calls it every minute): a
   * test environment whose clock was advanced expires and re-drives by that clock. Stale
   * reservations are a crash's leftovers, judged by the real clock their rows were written with.
   */
  async sweep(): Promise<void> {
    const nowMs = Date.now();
    const envs = await environmentsDue(this.deps.sql, nowMs, 'reward_issuances', (at) => this.deps.sql`x.status = 'issued' and x.expires_at <= ${at}`);
    for (const env of envs) await this.expireForEnvironment(env, await this.deps.now(env));
    await this.redrive(nowMs - requestRedriveMs);
    await this.reconcile(nowMs - reservationStaleMs);
  }

  /** After the ack of an event or a challenge command: delivers the rewards it requested (errors are left to the sweep). */
  afterEvent(environmentId: string, customerId: string, effects: readonly Effect[]): void {
    for (const e of effects) {
      // Rules' reward.issue actions and challenge completions' both journal a pending request.
      if (e.type !== 'reward.issue_requested' && e.type !== 'challenge.reward_requested') continue;
      void this.fulfil(environmentId, customerId, e.issuanceId, e.rewardId).catch((err: unknown) =>
        this.deps.logger.warn({ err, issuance: e.issuanceId }, 'reward request not fulfilled; the sweep retries'),
      );
    }
  }

  /**
   * Takes the unit for a pending request (idempotent: the reservation row is keyed by the issuance
   * id) and has the actor record the outcome: issued, or refused when no unit could be taken.
   */
  async fulfil(environmentId: string, customerId: string, issuanceId: string, rewardId: string): Promise<'issued' | 'refused'> {
    let terms: RewardTerms | null = null;
    let reason: string | null = null;
    try {
      terms = await this.deps.rewards.reserve(environmentId, rewardId, issuanceId, customerId);
    } catch (err) {
      if (!(err instanceof ApiError) || (err.code !== 'reward_unavailable' && err.code !== 'resource_not_found')) throw err;
      reason = err.code;
    }
    const r = await this.run(environmentId, customerId, { kind: 'reward.fulfil', issuanceId, terms, reason }, await this.deps.now(environmentId));
    if (r.ok === true) {
      const status = r.reply.kind === 'reward' && r.reply.reply.kind === 'reward.issuance' ? r.reply.reply.issuance.status : null;
      if (status === 'issued' || status === 'redeemed' || status === 'expired' || status === 'cancelled') {
        await this.deps.rewards.confirm(environmentId, issuanceId);
        return 'issued';
      }
      // Refused (or refused earlier): a unit reserved by a concurrent try goes back.
      if (terms !== null) await this.deps.rewards.release(environmentId, issuanceId);
      return 'refused';
    }
    if (r.ok === false && r.code === 'resource_not_found' && terms !== null) await this.deps.rewards.release(environmentId, issuanceId);
    if (r.ok === false && r.code !== 'resource_not_found') throw new ApiError(r.code, { message: r.message });
    return 'refused';
  }

  /**
   * Re-drives requests still pending that were created before `olderThanMs` of the real clock, in
   * each environment by its own clock (created_at is written by it, so a test clock's offset is
   * added). Returns how many.
   */
  async redrive(olderThanMs: number): Promise<number> {
    await this.deps.drainProjector();
    const rows = await this.deps.sql`
      select x.environment_id, x.id, x.customer_id, x.reward_id from reward_issuances x
      join environments e on e.id = x.environment_id
      where x.status = 'pending' and x.created_at < to_timestamp((${olderThanMs}::float8 + e.clock_offset_ms) / 1000)
      order by x.created_at limit ${reconcileBatch}`;
    await this.fulfilAll(rows);
    return rows.length;
  }

  /**
   * After a test clock moved: expires every issuance of the environment due at nowMs (its clock)
   * and re-drives its requests pending for longer than a sweep leaves them; names the customers.
   */
  async runForEnvironment(environmentId: string, nowMs: number): Promise<DueRun> {
    const expired = await this.expireForEnvironment(environmentId, nowMs);
    await this.deps.drainProjector();
    const pending = await this.deps.sql`
      select environment_id, id, customer_id, reward_id from reward_issuances
      where environment_id = ${environmentId} and status = 'pending' and created_at < to_timestamp(${nowMs - requestRedriveMs}::float8 / 1000)
      order by created_at limit ${reconcileBatch}`;
    await this.fulfilAll(pending);
    return { customerIds: [...expired, ...pending.map((r) => r.customer_id as string)], challengesEnded: 0 };
  }

  private async fulfilAll(rows: readonly Record<string, unknown>[]): Promise<void> {
    await this.each([...rows], async (r) => {
      await this.fulfil(r.environment_id as string, r.customer_id as string, r.id as string, r.reward_id as string).catch((err: unknown) =>
        this.deps.logger.warn({ err, issuance: r.id }, 'reward request not fulfilled; next sweep retries'),
      );
    });
    if (rows.length > 0) await this.deps.drainProjector();
  }

  async expireForEnvironment(environmentId: string, nowMs: number): Promise<string[]> {
    await this.deps.drainProjector();
    const rows = await this.deps.sql`
      select distinct customer_id from reward_issuances
      where environment_id = ${environmentId} and status = 'issued' and expires_at <= to_timestamp(${nowMs} / 1000.0)`;
    const ids = rows.map((r) => r.customer_id as string);
    await this.each(ids, async (id) => {
      const r = await this.run(environmentId, id, { kind: 'reward.expire_due' }, nowMs);
      if (r.ok === false && r.code !== 'resource_not_found') {
        this.deps.logger.warn({ customer: id, code: r.code }, 'issuance expiry not settled; next sweep retries');
      }
    });
    if (ids.length > 0) await this.deps.drainProjector();
    return ids;
  }

  /**
   * Settles reservations created before `olderThanMs` that are still `reserved`, and gives back the
   * units of cancelled or refused issuances. Returns how many units went back.
   */
  async reconcile(olderThanMs: number): Promise<number> {
    await this.deps.drainProjector();
    let released = 0;
    const stale = await this.deps.rewards.staleReservations(olderThanMs, reconcileBatch);
    await this.each(stale, async (res) => {
      const env = res.environmentId;
      const reward = await this.deps.rewards.get(env, res.rewardId).catch(() => null);
      const r = await this.run(env, res.customerId, { kind: 'reward.settle', issuanceId: res.issuanceId, terms: reward === null ? null : termsOf(reward) }, await this.deps.now(env));
      if (r.ok === true && r.reply.kind === 'reward' && r.reply.reply.kind === 'reward.settled') {
        if (r.reply.reply.outcome === 'present') await this.deps.rewards.confirm(env, res.issuanceId);
        else if (await this.deps.rewards.release(env, res.issuanceId)) released++;
      } else if (r.ok === false && r.code === 'resource_not_found') {
        // The customer is gone (or never existed here): nothing can hold the unit.
        if (await this.deps.rewards.release(env, res.issuanceId)) released++;
      } else {
        this.deps.logger.warn({ issuance: res.issuanceId, result: r }, 'reservation not settled; next sweep retries');
      }
    });
    for (const x of await this.deps.rewards.unreleasedEnded(reconcileBatch)) {
      if (await this.deps.rewards.release(x.environmentId, x.issuanceId)) released++;
    }
    return released;
  }

  private run(env: string, customerId: string, command: RewardCommand, nowMs: number) {
    return this.deps.engine.execute({ env, target: { by: 'id', id: customerId }, command: { kind: 'reward.run', command, tierPrograms: [] }, nowMs });
  }

  private async each<T>(items: T[], fn: (item: T) => Promise<void>): Promise<void> {
    let next = 0;
    const worker = async () => {
      while (next < items.length) await fn(items[next++]!);
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker));
  }
}
