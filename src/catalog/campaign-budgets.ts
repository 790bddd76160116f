// The node's budget allowance (docs/architecture.md, "Campaign budgets"). Each node leases chunks
// of a campaign budget from PostgreSQL with ONE conditional UPDATE (reserved never passes amount),
// keeps them in memory, and hands each event command a grant (plain data, forwarded with the
// command) taken from them BEFORE the customer's step; the step awards at most the grant. After
// the reply the unused part of the grant comes back to the node's allowance. Chunks go back to
// PostgreSQL when a campaign changes and at shutdown. A crash loses the node's chunks and the
// grants in flight (reserved stays above spent: the budget is under-used, never exceeded).
// `remaining` reads what an event could be granted (simulate) and leases nothing.
import { type BudgetGrant, wantAll } from '../domain/campaigns.js';
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
  /** Leases started so far (a read of `remaining` retries when one started while it read). */
  leases: number;
  /** What callers waiting for a lease want in total. */
  demand: number;
  /** A lease that got nothing: do not ask PostgreSQL again before this time. */
  dryUntilMs: number;
}

/** What remaining() reads for a key the node has never leased. */
const idle: Readonly<Pick<Holding, 'local' | 'leasing' | 'leases'>> = { local: 0, leasing: null, leases: 0 };

/** A caller waits for at most this many leases before taking what the node holds. */
const leaseAttemptsMax = 8;

export interface BudgetAllowanceOptions {
  /** A chunk is this fraction of the budget (at least what one event needs). */
  chunkDivisor?: number;
  /** After a lease got nothing, wait this long before asking again. */
  dryRetryMs?: number;
}

export class BudgetAllowances {
  private readonly held = new Map<string, Holding>();
  private readonly chunkDivisor: number;
  private readonly dryRetryMs: number;

  constructor(
    private readonly sql: Sql,
    opts: BudgetAllowanceOptions = {},
  ) {
    this.chunkDivisor = opts.chunkDivisor ?? 16;
    this.dryRetryMs = opts.dryRetryMs ?? 1000;
  }

  private holding(environmentId: string, key: string): Holding {
    const id = `${environmentId}|${key}`;
    let h = this.held.get(id);
    if (h === undefined) {
      const bar = key.indexOf('|');
      h = { environmentId, campaignId: key.slice(0, bar), currency: key.slice(bar + 1), local: 0, chunk: 0, leasing: null, leases: 0, demand: 0, dryUntilMs: 0 };
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
      return (want === wantAll ? h.local <= 0 : h.local < want) && Date.now() >= h.dryUntilMs;
    });
  }

  /**
   * Concurrent callers share one lease per key; after it, each checks again and takes
   * synchronously, so a caller that finds too little leases again (bounded attempts).
   */
  private async leaseThenTake(environmentId: string, wants: BudgetGrant): Promise<BudgetGrant> {
    // Waiting callers add up, so one lease covers all of them (not one caller per round trip).
    const finite = Object.entries(wants).filter(([, w]) => w !== wantAll);
    for (const [k, w] of finite) this.holding(environmentId, k).demand += w;
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
      // Top up in the background when low, so the next events need not wait.
      if (h.local < h.chunk / 4 && h.leasing === null && Date.now() >= h.dryUntilMs) void this.lease(h, 1).catch(() => {});
    }
    return grant;
  }

  /** Returns the unused part of a grant (grant - used) to the node's allowance. */
  giveBack(environmentId: string, grant: BudgetGrant, used: BudgetGrant): void {
    for (const [k, n] of Object.entries(grant)) {
      const back = n - (used[k] ?? 0);
      if (back > 0) this.holding(environmentId, k).local += back;
    }
  }

  /** Leases at least `need` (a chunk: 1/chunkDivisor of the budget) if the budget has it; concurrent callers share one lease. */
  private lease(h: Holding, need: number): Promise<void> {
    if (h.leasing !== null) return h.leasing;
    h.leases++;
    const run = async () => {
      // Let the callers of this tick add their demand first: one lease then covers them all.
      await new Promise((r) => setImmediate(r));
      need = Math.max(need, h.demand - h.local, 1);
      // One atomic statement: the row lock serializes nodes; reserved never passes amount.
      const rows = await this.sql`
        with cur as (
          select amount, reserved from campaign_budgets
          where environment_id = ${h.environmentId} and campaign_id = ${h.campaignId} and currency = ${h.currency}
          for update
        ), ask as (
          select least(greatest(${need}::bigint, ceil(cur.amount::numeric / ${this.chunkDivisor})::bigint), cur.amount - cur.reserved) as n from cur
        )
        update campaign_budgets b set reserved = b.reserved + ask.n
        from ask
        where b.environment_id = ${h.environmentId} and b.campaign_id = ${h.campaignId} and b.currency = ${h.currency} and ask.n > 0
        returning ask.n::float8 as granted`;
      const granted = rows.length === 0 ? 0 : (rows[0]!.granted as number);
      if (granted > 0) {
        h.local += granted;
        h.chunk = granted;
      } else h.dryUntilMs = Date.now() + this.dryRetryMs;
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
   * (this node's events cannot use them), nor grants in flight; a key without a budget row is 0.
   * Under a stream of leases it gives up waiting after a few tries (simulate reads, it promises nothing).
   */
  async remaining(environmentId: string, keys: readonly string[]): Promise<BudgetGrant> {
    const out: BudgetGrant = {};
    if (keys.length === 0) return out;
    const campaignIds = [...new Set(keys.map((k) => k.slice(0, k.indexOf('|'))))];
    // Read, not created: a key this node never leased holds nothing and has no lease in flight.
    const holdingsNow = () => keys.map((k) => this.held.get(`${environmentId}|${k}`) ?? idle);
    // A lease moves budget from PostgreSQL's free part to the node's chunks in two steps (the
    // UPDATE, then the chunk): read both with no lease between, or the sum counts it twice or not at all.
    for (let attempt = 0; ; attempt++) {
      const holdings = holdingsNow();
      const inFlight = holdings.filter((h) => h.leasing !== null);
      if (inFlight.length > 0 && attempt < 4) {
        await Promise.all(inFlight.map((h) => h.leasing!.catch(() => {})));
        continue;
      }
      const before = holdings.map((h) => h.leases);
      const held = holdings.map((h) => h.local);
      const rows = await this.sql`
        select campaign_id, currency, greatest(amount - reserved, 0)::float8 as free from campaign_budgets
        where environment_id = ${environmentId} and campaign_id = any(${campaignIds}::text[])`;
      // A lease started meanwhile (on a key held before, or on one first leased now): read again.
      const after = holdingsNow();
      if (attempt < 4 && after.some((h, i) => h !== holdings[i] || h.leases !== before[i])) continue;
      const free = new Map<string, number>();
      for (const r of rows) free.set(`${r.campaign_id as string}|${r.currency as string}`, r.free as number);
      for (const [i, k] of keys.entries()) out[k] = held[i]! + (free.get(k) ?? 0);
      return out;
    }
  }

  /** What the node holds for a budget key (tests, metrics). */
  holds(environmentId: string, key: string): number {
    return this.held.get(`${environmentId}|${key}`)?.local ?? 0;
  }
}
