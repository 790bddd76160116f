// The node's budget allowance (docs/architecture.md, "Campaign budgets"). Each node leases chunks
// of a campaign budget from PostgreSQL with ONE conditional UPDATE (reserved never passes amount),
// keeps them in memory, and hands each event command a grant (plain data, forwarded with the
// command) taken from them BEFORE the customer's step; the step awards at most the grant. After
// the reply the unused part of the grant comes back to the node's allowance. Chunks go back to
// PostgreSQL when a campaign changes and at shutdown. A crash loses the node's chunks and the
// grants in flight (reserved stays above spent: the budget is under-used, never exceeded).
// Every currency a campaign awards in has a row, capped or not (amount null: no cap, created by
// the first lease): an uncapped award is leased the same way, so `reserved` is a transactional
// running total of what the campaign awarded (and what nodes hold) from which a cap added later
// starts. An uncapped row's chunks grow from one command's want to uncappedChunkWants of them.
// `remaining` reads what an event could be granted (simulate) and leases nothing.
import { type BudgetGrant, wantAll } from '../domain/campaigns.js';
import { ledgerLimits } from '../domain/ledger.js';
import type { Sql } from '../persistence/sql/db.js';

interface Holding {
  environmentId: string;
  campaignId: string;
  currency: string;
  /** Leased and not granted. */
  local: number;
  /** Size of the last chunk leased (top-up threshold). */
  chunk: number;
  leasing: Promise<void> | null;
  /** What callers waiting for a lease want in total. */
  demand: number;
  /** A lease that got nothing: do not ask PostgreSQL again before this time. */
  dryUntilMs: number;
  /** The row had no cap at the last lease. */
  uncapped: boolean;
  /** The largest finite amount one command wanted (an uncapped row's chunk is a multiple of it). */
  unit: number;
  /** Callers waiting for a lease that want whatever the node holds (wantAll). */
  wantingAll: number;
}

/** A caller waits for at most this many leases before taking what the node holds. */
const leaseAttemptsMax = 8;

export interface BudgetAllowanceOptions {
  /** A chunk is this fraction of the budget (at least what one event needs). */
  chunkDivisor?: number;
  /** After a lease got nothing, wait this long before asking again. */
  dryRetryMs?: number;
  /** An uncapped row's chunk grows (doubling) up to this many of the largest want seen. */
  uncappedChunkWants?: number;
}

export class BudgetAllowances {
  private readonly held = new Map<string, Holding>();
  private readonly chunkDivisor: number;
  private readonly dryRetryMs: number;
  private readonly uncappedChunkWants: number;

  constructor(
    private readonly sql: Sql,
    opts: BudgetAllowanceOptions = {},
  ) {
    this.chunkDivisor = opts.chunkDivisor ?? 16;
    this.dryRetryMs = opts.dryRetryMs ?? 1000;
    this.uncappedChunkWants = opts.uncappedChunkWants ?? 64;
  }

  private holding(environmentId: string, key: string): Holding {
    const id = `${environmentId}|${key}`;
    let h = this.held.get(id);
    if (h === undefined) {
      const bar = key.indexOf('|');
      h = {
        environmentId,
        campaignId: key.slice(0, bar),
        currency: key.slice(bar + 1),
        local: 0,
        chunk: 0,
        leasing: null,
        demand: 0,
        dryUntilMs: 0,
        uncapped: false,
        unit: 0,
        wantingAll: 0,
      };
      this.held.set(id, h);
    }
    return h;
  }

  /**
   * A grant for `wants` (budget key -> amount; wantAll: whatever the node holds). Synchronous
   * while the node holds enough; otherwise it leases first. A grant may be smaller than wanted
   * (the budget is running out): the step then skips what does not fit (budget_exhausted).
   */
  grant(environmentId: string, wants: BudgetGrant): BudgetGrant | Promise<BudgetGrant> {
    if (this.shortOf(environmentId, wants).length === 0) return this.take(environmentId, wants);
    return this.leaseThenTake(environmentId, wants);
  }

  /** Keys the node holds too little of (and may still ask PostgreSQL for). */
  private shortOf(environmentId: string, wants: BudgetGrant): string[] {
    return Object.keys(wants).filter((k) => {
      const h = this.holding(environmentId, k);
      const want = wants[k]!;
      // All of an uncapped row is the most one award can be (see lease).
      const enough = want !== wantAll ? want : h.uncapped ? ledgerLimits.amountMinorMax : 1;
      return h.local < enough && Date.now() >= h.dryUntilMs;
    });
  }

  /**
   * Concurrent callers share one lease per key; after it, each checks again and takes
   * synchronously, so a caller that finds too little leases again (bounded attempts).
   */
  private async leaseThenTake(environmentId: string, wants: BudgetGrant): Promise<BudgetGrant> {
    // Waiting callers add up, so one lease covers all of them (not one caller per round trip).
    const finite = Object.entries(wants).filter(([, w]) => w !== wantAll);
    const all = Object.keys(wants).filter((k) => wants[k] === wantAll);
    for (const [k, w] of finite) this.holding(environmentId, k).demand += w;
    for (const k of all) this.holding(environmentId, k).wantingAll++;
    try {
      for (let attempt = 0; attempt < leaseAttemptsMax; attempt++) {
        const short = this.shortOf(environmentId, wants);
        if (short.length === 0) break;
        await Promise.all(
          short.map((k) => {
            const h = this.holding(environmentId, k);
            const want = wants[k]!;
            return this.lease(h, Math.max(want === wantAll ? 1 : want, h.demand) - h.local);
          }),
        );
      }
    } finally {
      for (const [k, w] of finite) this.holding(environmentId, k).demand -= w;
      for (const k of all) this.holding(environmentId, k).wantingAll--;
    }
    return this.take(environmentId, wants);
  }

  private take(environmentId: string, wants: BudgetGrant): BudgetGrant {
    const grant: BudgetGrant = {};
    for (const [k, want] of Object.entries(wants)) {
      const h = this.holding(environmentId, k);
      const n = Math.max(0, Math.min(want, h.local));
      h.local -= n;
      grant[k] = n;
      if (want !== wantAll && want > h.unit) h.unit = want;
      // Top up in the background when low, so the next events need not wait.
      if (h.local < h.chunk / 4 && h.leasing === null && Date.now() >= h.dryUntilMs) void this.lease(h, 1).catch(() => {});
    }
    return grant;
  }

  /**
   * Returns the unused part of a grant (grant - used) to the node's allowance. An uncapped row's
   * holding above two chunks (what a wantAll lease left: see lease) goes back to PostgreSQL at once.
   */
  giveBack(environmentId: string, grant: BudgetGrant, used: BudgetGrant): void {
    for (const [k, n] of Object.entries(grant)) {
      const back = n - (used[k] ?? 0);
      if (back <= 0) continue;
      const h = this.holding(environmentId, k);
      h.local += back;
      const keep = Math.max(h.chunk, 1);
      if (h.uncapped && h.local > 2 * keep) {
        const excess = h.local - keep;
        h.local = keep;
        void this.sql`
          update campaign_budgets set reserved = greatest(0, reserved - ${excess})
          where environment_id = ${h.environmentId} and campaign_id = ${h.campaignId} and currency = ${h.currency}`.catch(() => {});
      }
    }
  }

  /**
   * Leases at least `need` if the budget has it; concurrent callers share one lease. A capped row's
   * chunk is 1/chunkDivisor of the budget. An uncapped row's grows by doubling from the largest
   * want seen up to uncappedChunkWants of it; a caller wanting all (an amount only the step knows)
   * makes it lease the most one award can be (ledgerLimits.amountMinorMax), given back after the
   * step (giveBack). A currency of the campaign without a row gets one (no cap, reserved from
   * what the projection counted: only awards from before rows were kept for every currency).
   */
  private lease(h: Holding, need: number): Promise<void> {
    if (h.leasing !== null) return h.leasing;
    const run = async () => {
      // Let the callers of this tick add their demand first: one lease then covers them all.
      await new Promise((r) => setImmediate(r));
      need = Math.max(need, h.demand - h.local, 1);
      const grow = Math.min(Math.max(2 * h.chunk, h.unit), this.uncappedChunkWants * h.unit);
      const uncappedNeed = Math.max(need, grow, h.wantingAll > 0 ? ledgerLimits.amountMinorMax : 0);
      for (let attempt = 0; attempt < 2; attempt++) {
        // One atomic statement: the row lock serializes nodes; reserved never passes a cap.
        const rows = await this.sql`
          with cur as (
            select amount, reserved from campaign_budgets
            where environment_id = ${h.environmentId} and campaign_id = ${h.campaignId} and currency = ${h.currency}
            for update
          ), ask as (
            select
              case when cur.amount is null then ${uncappedNeed}::bigint
                else least(greatest(${need}::bigint, ceil(cur.amount::numeric / ${this.chunkDivisor})::bigint), cur.amount - cur.reserved) end as n,
              cur.amount is null as uncapped
            from cur
          )
          update campaign_budgets b set reserved = b.reserved + ask.n
          from ask
          where b.environment_id = ${h.environmentId} and b.campaign_id = ${h.campaignId} and b.currency = ${h.currency} and ask.n > 0
          returning ask.n::float8 as granted, ask.uncapped`;
        if (rows.length > 0) {
          const granted = rows[0]!.granted as number;
          h.uncapped = rows[0]!.uncapped === true;
          h.local += granted;
          h.chunk = h.uncapped ? Math.min(granted, Math.max(need, grow)) : granted;
          return;
        }
        // No row (a currency the campaign never awarded in), or a cap with nothing left: the
        // insert tells them apart. FOR KEY SHARE: a campaign being deleted is waited for, not revived.
        const made = await this.sql`
          insert into campaign_budgets (environment_id, campaign_id, currency, amount, reserved)
          select c.environment_id, c.id, ${h.currency}, null,
            coalesce((select s.spent from campaign_spend s
              where s.environment_id = c.environment_id and s.campaign_id = c.id and s.currency = ${h.currency}), 0)
          from campaigns c where c.environment_id = ${h.environmentId} and c.id = ${h.campaignId}
          for key share of c
          on conflict (environment_id, campaign_id, currency) do nothing
          returning 1`;
        if (made.length === 0) break;
      }
      h.dryUntilMs = Date.now() + this.dryRetryMs;
    };
    h.leasing = run().finally(() => {
      h.leasing = null;
    });
    return h.leasing;
  }

  /** Gives every chunk this node holds for the environment's campaigns back (a campaign changed). */
  async release(environmentId: string | null): Promise<void> {
    const back: Holding[] = [];
    // Holdings stay (a lease in flight lands in them and stays reserved); only what they hold goes back.
    for (const h of this.held.values()) {
      if (environmentId !== null && h.environmentId !== environmentId) continue;
      if (h.local > 0) back.push({ ...h });
      h.local = 0;
      h.chunk = 0;
      h.dryUntilMs = 0;
    }
    for (const h of back) {
      await this.sql`
        update campaign_budgets set reserved = greatest(0, reserved - ${h.local})
        where environment_id = ${h.environmentId} and campaign_id = ${h.campaignId} and currency = ${h.currency}`;
    }
  }

  /**
   * What an event on this node could be granted now per budget key, leasing nothing (simulate):
   * the node's chunks plus what PostgreSQL has not reserved. Other nodes' chunks are not counted
   * (this node's events cannot use them), nor grants in flight; a key without a cap is 0 (simulate
   * asks only for capped ones).
   */
  async remaining(environmentId: string, keys: readonly string[]): Promise<BudgetGrant> {
    const out: BudgetGrant = {};
    if (keys.length === 0) return out;
    const campaignIds = keys.map((k) => k.slice(0, k.indexOf('|')));
    const rows = await this.sql`
      select campaign_id, currency, greatest(amount - reserved, 0)::float8 as free from campaign_budgets
      where environment_id = ${environmentId} and campaign_id = any(${[...new Set(campaignIds)]}::text[]) and amount is not null`;
    const free = new Map<string, number>();
    for (const r of rows) free.set(`${r.campaign_id as string}|${r.currency as string}`, r.free as number);
    for (const k of keys) out[k] = this.holds(environmentId, k) + (free.get(k) ?? 0);
    return out;
  }

  /** What the node holds for a budget key (tests, metrics). */
  holds(environmentId: string, key: string): number {
    return this.held.get(`${environmentId}|${key}`)?.local ?? 0;
  }
}
