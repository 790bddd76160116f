// The issuance sweep of the due-work scheduler, beside the ledger's (due-work.ts): (1) issued
// issuances past expires_at become expired (reward.expire_due on each customer's actor: no refund,
// no unit released), on the real clock every minute and right after a test clock moves; (2) the
// stock reconciler: a reservation still `reserved` after a few minutes (crash between reservation
// and journal, or a lost confirm) is settled by the customer's actor, which either has the
// issuance (confirm) or records the id as voided so it can never be issued (then the unit goes
// back); units of issuances the read model shows cancelled or refused are given back. Everything
// here is idempotent, so two nodes sweeping together are harmless. (3) The rule path's outbox:
// fulfil() reserves the unit of a journaled `reward.issue_requested` and tells the actor (issued,
// or refused with reward_unavailable); it runs right after the event's ack, and the sweep
// re-drives requests still pending after a minute (a crash, a lost fulfilment).
import type { Logger } from 'pino';
import type { Engine } from '../actors/engine.js';
import { type RewardCatalog, termsOf } from '../catalog/rewards.js';
import type { RewardCommand, RewardTerms } from '../domain/rewards.js';
import type { Effect } from '../domain/rule-effects.js';
import { ApiError } from '../errors/api-error.js';
import type { DueJob, DueRun } from './scheduler.js';
import type { Sql } from '../persistence/sql/db.js';

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


  /** Everything due by the real clock (the scheduler calls it every minute). */
  async sweep(): Promise<void> {
    const nowMs = Date.now();
    const envs = await this.deps.sql`
      select distinct environment_id from reward_issuances
      where status = 'issued' and expires_at <= to_timestamp(${nowMs} / 1000.0)`;
    for (const r of envs) {
      const env = r.environment_id as string;
      await this.expireForEnvironment(env, await this.deps.now(env));
    }
    await this.redrive(nowMs - requestRedriveMs);
    await this.reconcile(nowMs - reservationStaleMs);
  }

  /** After an event's ack: delivers the rewards its rules requested (errors are left to the sweep). */
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

  /** Re-drives rule requests still pending that were created before `olderThanMs`; returns how many. */
  async redrive(olderThanMs: number): Promise<number> {
    await this.deps.drainProjector();
    const rows = await this.deps.sql`
      select environment_id, id, customer_id, reward_id from reward_issuances
      where status = 'pending' and created_at < to_timestamp(${olderThanMs} / 1000.0)
      order by created_at limit ${reconcileBatch}`;
    await this.each(rows, async (r) => {
      await this.fulfil(r.environment_id as string, r.customer_id as string, r.id as string, r.reward_id as string).catch((err: unknown) =>
        this.deps.logger.warn({ err, issuance: r.id }, 'reward request not fulfilled; next sweep retries'),
      );
    });
    if (rows.length > 0) await this.deps.drainProjector();
    return rows.length;
  }

  /** Expires every issuance of the environment due at nowMs; names the customers settled. */
  async runForEnvironment(environmentId: string, nowMs: number): Promise<DueRun> {
    return { customerIds: await this.expireForEnvironment(environmentId, nowMs), challengesEnded: 0 };
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
