// Campaigns of an environment: name, description, status (campaignTransitions in
// domain/campaigns.ts), audience_segment (a segment name or null), schedule (starts_at, ends_at)
// and budgets (a cap per currency; `reserved` = what nodes leased, `spent` = what was awarded,
// projected). Rows live in PostgreSQL; every node caches each environment's gates (dropped on a
// bus message when any node changes a campaign). Rules and challenges join a campaign through
// their campaign_id; a campaign that a non-archived rule names cannot be deleted. Campaigns past
// their ends_at are ended by the scheduler's sweep (endDue), which also gives their budget back.
import { activationRefusal, allowed, type CampaignGate, type CampaignOperation, type CampaignStatus, campaignTransitions } from '../domain/campaigns.js';
import { ApiError } from '../errors/api-error.js';
import { newId } from '../ids.js';
import type { Bus } from '../persistence/ports.js';
import { createOncePerCall, recordCreate } from '../persistence/sql/create-calls.js';
import type { Sql } from '../persistence/sql/db.js';
import { environmentsDue } from '../persistence/sql/due-environments.js';

export interface CampaignBudget {
  currency: string;
  amount: number;
  reserved: number;
  spent: number;
}

export interface Campaign {
  id: string;
  name: string;
  description: string | null;
  status: CampaignStatus;
  audienceSegment: string | null;
  startsAtMs: number | null;
  endsAtMs: number | null;
  budgets: CampaignBudget[];
  /** Spent per currency, also for currencies without a budget. */
  spent: Array<{ currency: string; amount: number }>;
  version: number;
  createdAtMs: number;
  updatedAtMs: number;
}

export interface CampaignInput {
  name: string;
  description: string | null;
  audienceSegment: string | null;
  startsAtMs: number | null;
  endsAtMs: number | null;
  budgets: Array<{ currency: string; amount: number }>;
}

export type CampaignPatch = Partial<CampaignInput>;

/** Checks the catalog cannot do alone (segments and currencies live in other catalogs). */
export interface CampaignRefs {
  segmentExists(environmentId: string, name: string): Promise<boolean>;
  currencyExists(environmentId: string, key: string): Promise<boolean>;
  /**
   * Other resources that join the campaign through their campaign_id (challenges), by kind:
   * a delete is resource_in_use while any is listed. Rules are checked by the catalog itself.
   * Read through `db`, the delete's transaction, after the campaign row is locked.
   */
  otherUsers?(environmentId: string, campaignId: string, db: Sql): Promise<Record<string, string[]>>;
}

export const campaignChannel = 'campaigns.changed';

const ms = (v: unknown): number | null => (v === null || v === undefined ? null : (v as Date).getTime());
const ts = (v: number | null): Date | null => (v === null ? null : new Date(v));

function notFound(id: string): ApiError {
  return new ApiError('resource_not_found', { message: `No campaign ${id}.`, param: 'id' });
}

/**
 * The audience segment read FOR SHARE in the transaction that stores the campaign: a segment
 * rename or delete locks the row FOR UPDATE before it looks for users (catalog/segments.ts), so
 * either it waits for this transaction and then sees the campaign, or this read waits for it and
 * finds the name gone (404 audience_segment). The check before the transaction answers first; this
 * one closes the window between the two.
 */
async function lockAudience(tx: Sql, environmentId: string, name: string | null | undefined): Promise<void> {
  if (name == null) return;
  const rows = await tx`select 1 from segments where environment_id = ${environmentId} and name = ${name} for share`;
  if (rows.length === 0) throw new ApiError('resource_not_found', { message: `No segment named ${name}.`, param: 'audience_segment' });
}

/** How often an update reads the caps again when a concurrent edit removed one it adds back. */
const updateAttemptsMax = 3;

/** A cap this update adds was not added when it passed the barrier (a concurrent edit removed it). */
class CapsMoved extends Error {
  override readonly name = 'CapsMoved';
}

function requireState(c: Campaign, op: CampaignOperation): void {
  if (allowed(c.status, op)) return;
  const allowedFrom: readonly CampaignStatus[] = campaignTransitions[op].from;
  throw new ApiError('invalid_state', {
    message: `Cannot ${op} a campaign that is ${c.status}.`,
    details: { status: c.status, allowed_from: allowedFrom },
  });
}

export class CampaignCatalog {
  private readonly cache = new Map<string, Promise<Record<string, CampaignGate>>>();
  /** Called (on every node) when a campaign of an environment changed: the budget allowance gives chunks back. */
  onChanged: ((environmentId: string) => void) | null = null;

  constructor(
    private readonly sql: Sql,
    private readonly bus: Bus,
    private readonly refs: CampaignRefs,
  ) {}

  async start(): Promise<void> {
    await this.bus.subscribe(campaignChannel, (envId) => {
      this.cache.delete(envId);
      this.onChanged?.(envId);
    });
  }

  private async changed(environmentId: string): Promise<void> {
    this.cache.delete(environmentId);
    this.onChanged?.(environmentId);
    await this.bus.publish(campaignChannel, environmentId).catch(() => {});
  }

  private async checkRefs(environmentId: string, input: CampaignPatch): Promise<void> {
    if (input.audienceSegment != null && !(await this.refs.segmentExists(environmentId, input.audienceSegment))) {
      throw new ApiError('resource_not_found', { message: `No segment named ${input.audienceSegment}.`, param: 'audience_segment' });
    }
    for (const [i, b] of (input.budgets ?? []).entries()) {
      if (!(await this.refs.currencyExists(environmentId, b.currency))) {
        throw new ApiError('resource_not_found', { message: `No currency ${b.currency}.`, param: `budgets[${i}].currency` });
      }
    }
    const seen = new Set<string>();
    for (const [i, b] of (input.budgets ?? []).entries()) {
      if (seen.has(b.currency)) {
        throw new ApiError('validation_failed', { message: `budgets[${i}].currency: ${b.currency} has a budget already.`, param: `budgets[${i}].currency` });
      }
      seen.add(b.currency);
    }
  }

  /**
   * `callId`: the request's (an Idempotency-Key's); a run again of it answers the campaign it
   * created (with its budgets, which only that first transaction wrote).
   */
  async create(environmentId: string, input: CampaignInput, callId?: string): Promise<Campaign> {
    const found = async (id: string): Promise<Campaign> => {
      await this.changed(environmentId);
      return this.get(environmentId, id);
    };
    return createOncePerCall(this.sql, callId, found, async () => {
      checkSchedule(input.startsAtMs, input.endsAtMs);
      await this.checkRefs(environmentId, input);
      const id = newId('cmp');
      await this.sql.begin(async (tx) => {
        await recordCreate(tx, callId, id);
        await lockAudience(tx as unknown as Sql, environmentId, input.audienceSegment);
        await tx`
          insert into campaigns (environment_id, id, name, description, status, audience_segment, starts_at, ends_at)
          values (${environmentId}, ${id}, ${input.name}, ${input.description}, 'draft', ${input.audienceSegment},
            ${ts(input.startsAtMs)}, ${ts(input.endsAtMs)})`;
        for (const b of input.budgets) {
          await tx`insert into campaign_budgets (environment_id, campaign_id, currency, amount) values (${environmentId}, ${id}, ${b.currency}, ${b.amount})`;
        }
      });
      await this.changed(environmentId);
      return this.get(environmentId, id);
    });
  }

  async get(environmentId: string, id: string): Promise<Campaign> {
    const rows = await this.sql`select * from campaigns where environment_id = ${environmentId} and id = ${id}`;
    if (rows.length === 0) throw notFound(id);
    return (await this.withBudgets(environmentId, rows))[0]!;
  }

  /** Whether the campaign exists in the environment (rules' campaign_id). */
  async exists(environmentId: string, id: string): Promise<boolean> {
    const rows = await this.sql`select 1 from campaigns where environment_id = ${environmentId} and id = ${id}`;
    return rows.length > 0;
  }

  async list(environmentId: string, q: { limit: number; after: string | null; status: CampaignStatus | null }): Promise<Campaign[]> {
    const rows = await this.sql`
      select * from campaigns where environment_id = ${environmentId} and (${q.after}::text is null or id > ${q.after})
        and (${q.status}::text is null or status = ${q.status})
      order by id limit ${q.limit}`;
    return this.withBudgets(environmentId, rows);
  }

  private async withBudgets(environmentId: string, rows: Record<string, unknown>[], db: Sql = this.sql): Promise<Campaign[]> {
    if (rows.length === 0) return [];
    const ids = rows.map((r) => r.id as string);
    const budgets = await db`
      select campaign_id, currency, amount::float8 as amount, reserved::float8 as reserved from campaign_budgets
      where environment_id = ${environmentId} and campaign_id = any(${ids}::text[]) order by currency`;
    const spend = await db`
      select campaign_id, currency, spent::float8 as spent from campaign_spend
      where environment_id = ${environmentId} and campaign_id = any(${ids}::text[]) order by currency`;
    return rows.map((r) => {
      const id = r.id as string;
      const spent = spend.filter((s) => s.campaign_id === id).map((s) => ({ currency: s.currency as string, amount: s.spent as number }));
      return {
        id,
        name: r.name as string,
        description: (r.description as string | null) ?? null,
        status: r.status as CampaignStatus,
        audienceSegment: (r.audience_segment as string | null) ?? null,
        startsAtMs: ms(r.starts_at),
        endsAtMs: ms(r.ends_at),
        budgets: budgets
          .filter((b) => b.campaign_id === id)
          .map((b) => ({
            currency: b.currency as string,
            amount: b.amount as number,
            reserved: b.reserved as number,
            spent: spent.find((s) => s.currency === b.currency)?.amount ?? 0,
          })),
        spent,
        version: r.version as number,
        createdAtMs: (r.created_at as Date).getTime(),
        updatedAtMs: (r.updated_at as Date).getTime(),
      };
    });
  }

  /**
   * PATCH (If-Match): name, description, audience, schedule, budgets (the list replaces the old
   * one). A budget cannot go below what nodes already reserved (409 invalid_state naming the
   * reserved amount: pause the campaign, whose nodes then give unused chunks back, and retry).
   *
   * A cap added for a currency (not capped before, or removed and added again) starts from what
   * the campaign already awarded in it, read from the projected campaign_spend. `eventsSettled` is
   * passed first so that holds every award made before this call: it resolves once every event
   * command sent before it (on any node) is in the read tables, and rejects when that cannot be
   * shown in time (then nothing is stored: the caller answers 429). An uncapped award is granted
   * nothing, so nothing else records it until it is projected.
   */
  async update(
    environmentId: string,
    id: string,
    expected: number | undefined,
    patch: CampaignPatch,
    eventsSettled: () => Promise<void>,
  ): Promise<Campaign> {
    for (let attempt = 1; ; attempt++) {
      // Other catalogs are read before the transaction (embedded mode has one connection), and so
      // is the barrier (it reads the read tables and waits for the projector).
      const before = await this.get(environmentId, id);
      await this.checkRefs(environmentId, patch);
      const capped = new Set(before.budgets.map((b) => b.currency));
      const settledFor = (patch.budgets ?? []).map((b) => b.currency).filter((cur) => !capped.has(cur));
      if (settledFor.length > 0) await eventsSettled();
      try {
        return await this.store(environmentId, id, expected, patch, settledFor);
      } catch (err) {
        // A concurrent PATCH removed a cap this one keeps, after the read above: pass the barrier for it too.
        if (!(err instanceof CapsMoved)) throw err;
        if (attempt >= updateAttemptsMax) {
          throw new ApiError('rate_limited', { message: `The budgets of campaign ${id} keep changing under this edit; retry.`, retryAfterSeconds: 1 });
        }
      }
    }
  }

  private store(environmentId: string, id: string, expected: number | undefined, patch: CampaignPatch, settledFor: string[]): Promise<Campaign> {
    return this.mutate(environmentId, id, expected, async (c, tx) => {
      await lockAudience(tx, environmentId, patch.audienceSegment);
      requireState(c, 'edit');
      checkSchedule(patch.startsAtMs !== undefined ? patch.startsAtMs : c.startsAtMs, patch.endsAtMs !== undefined ? patch.endsAtMs : c.endsAtMs);
      if (patch.budgets !== undefined) {
        const existing = await tx`
          select currency, reserved::float8 as reserved from campaign_budgets
          where environment_id = ${environmentId} and campaign_id = ${id} for update`;
        const added = patch.budgets.filter((b) => !existing.some((e) => e.currency === b.currency));
        if (added.some((b) => !settledFor.includes(b.currency))) throw new CapsMoved();
        for (const [i, b] of patch.budgets.entries()) {
          const held = existing.find((e) => e.currency === b.currency);
          const reserved = (held?.reserved as number | undefined) ?? 0;
          if (b.amount < reserved) {
            throw new ApiError('invalid_state', {
              message: `budgets[${i}].amount: ${reserved} ${b.currency} is already reserved or awarded; the budget cannot go below it (pause the campaign and retry).`,
              param: `budgets[${i}].amount`,
              details: { currency: b.currency, reserved },
            });
          }
        }
        const keep = patch.budgets.map((b) => b.currency);
        await tx`delete from campaign_budgets where environment_id = ${environmentId} and campaign_id = ${id} and not (currency = any(${keep}::text[]))`;
        for (const b of patch.budgets) {
          // A new cap starts from what the campaign already awarded in that currency (projected:
          // complete up to the barrier passed before this transaction; see update).
          await tx`
            insert into campaign_budgets (environment_id, campaign_id, currency, amount, reserved)
            values (${environmentId}, ${id}, ${b.currency}, ${b.amount},
              least(${b.amount}, coalesce((select spent from campaign_spend where environment_id = ${environmentId} and campaign_id = ${id} and currency = ${b.currency}), 0)))
            on conflict (environment_id, campaign_id, currency) do update set amount = excluded.amount`;
        }
      }
      return {
        name: patch.name ?? c.name,
        description: patch.description !== undefined ? patch.description : c.description,
        audienceSegment: patch.audienceSegment !== undefined ? patch.audienceSegment : c.audienceSegment,
        startsAtMs: patch.startsAtMs !== undefined ? patch.startsAtMs : c.startsAtMs,
        endsAtMs: patch.endsAtMs !== undefined ? patch.endsAtMs : c.endsAtMs,
        status: c.status,
      };
    });
  }

  /**
   * activate, pause or end (campaignTransitions). `nowMs` is the environment's clock: activating a
   * campaign whose ends_at has passed is invalid_state (absent: the schedule is not checked).
   */
  transition(environmentId: string, id: string, expected: number | undefined, op: 'activate' | 'pause' | 'end', nowMs?: number): Promise<Campaign> {
    return this.mutate(environmentId, id, expected, async (c) => {
      requireState(c, op);
      const refused = op === 'activate' && nowMs !== undefined ? activationRefusal(c, nowMs) : null;
      if (refused !== null) {
        throw new ApiError('invalid_state', {
          message: `Cannot activate campaign ${id}: ${refused}`,
          param: 'ends_at',
          details: { status: c.status, ends_at: new Date(c.endsAtMs!).toISOString() },
        });
      }
      return { ...c, status: campaignTransitions[op].to };
    });
  }

  /**
   * The end sweep: active and paused campaigns whose ends_at is at or before nowMs become ended
   * (the budget chunks nodes leased for them go back, as on every change). Returns how many.
   */
  async endDue(environmentId: string, nowMs: number): Promise<number> {
    const rows = await this.sql`
      update campaigns set status = 'ended', version = version + 1, updated_at = now()
      where environment_id = ${environmentId} and status in ('active', 'paused') and ends_at <= to_timestamp(${nowMs} / 1000.0)
      returning id`;
    if (rows.length > 0) await this.changed(environmentId);
    return rows.length;
  }

  /** Environments with an active or paused campaign past its ends_at by their own clock at real time nowMs (a test clock runs ahead). */
  environmentsWithEndsDue(nowMs: number): Promise<string[]> {
    return environmentsDue(this.sql, nowMs, 'campaigns', (at) => this.sql`x.status in ('active', 'paused') and x.ends_at is not null and x.ends_at <= ${at}`);
  }

  /**
   * DELETE; with If-Match, only the version it names (stale_write). Refused while active
   * (invalid_state) or while a non-archived rule or another user names it (resource_in_use). The
   * users are read after the row is locked FOR UPDATE, in the same transaction: what names a
   * campaign (a rule's or a challenge's campaign_id) reads the row FOR SHARE in the transaction
   * that stores it, so it is either seen here or waits and finds the campaign gone.
   */
  async delete(environmentId: string, id: string, expected?: number): Promise<void> {
    await this.sql.begin(async (tx) => {
      const rows = await tx`select * from campaigns where environment_id = ${environmentId} and id = ${id} for update`;
      if (rows.length === 0) throw notFound(id);
      const c = (await this.withBudgets(environmentId, rows, tx as unknown as Sql))[0]!;
      if (expected !== undefined && expected !== c.version) throw new ApiError('stale_write', { details: { current_version: c.version } });
      requireState(c, 'delete');
      const others = Object.entries((await this.refs.otherUsers?.(environmentId, id, tx as unknown as Sql)) ?? {}).filter(([, ids]) => ids.length > 0);
      const rules = await tx`
        select id from rules where environment_id = ${environmentId} and campaign_id = ${id} and status <> 'archived' order by id`;
      if (rules.length > 0 || others.length > 0) {
        const ids = rules.map((r) => r.id as string);
        const users = [...ids.map((r) => `rule ${r}`), ...others.flatMap(([kind, xs]) => xs.map((x) => `${kind} ${x}`))];
        throw new ApiError('resource_in_use', {
          message: `Cannot delete campaign ${id}: used by ${users.join(', ')}.`,
          param: 'id',
          details: { rules: ids, ...Object.fromEntries(others.map(([kind, xs]) => [`${kind}s`, xs])) },
        });
      }
      await tx`delete from campaign_budgets where environment_id = ${environmentId} and campaign_id = ${id}`;
      await tx`delete from campaigns where environment_id = ${environmentId} and id = ${id}`;
    });
    await this.changed(environmentId);
  }

  /** Every campaign's gate by id, cached (for the customer step). */
  gates(environmentId: string): Promise<Record<string, CampaignGate>> {
    let cached = this.cache.get(environmentId);
    if (!cached) {
      cached = (async () => {
        const rows = await this.sql`select * from campaigns where environment_id = ${environmentId}`;
        const budgets = await this.sql`select campaign_id, currency from campaign_budgets where environment_id = ${environmentId}`;
        const out: Record<string, CampaignGate> = {};
        for (const r of rows) {
          const id = r.id as string;
          out[id] = {
            id,
            status: r.status as CampaignStatus,
            startsAtMs: ms(r.starts_at),
            endsAtMs: ms(r.ends_at),
            audienceSegment: (r.audience_segment as string | null) ?? null,
            capped: budgets.filter((b) => b.campaign_id === id).map((b) => b.currency as string),
          };
        }
        return out;
      })();
      cached.catch(() => this.cache.delete(environmentId));
      this.cache.set(environmentId, cached);
    }
    return cached;
  }

  private async mutate(
    environmentId: string,
    id: string,
    expected: number | undefined,
    fn: (c: Campaign, tx: Sql) => Promise<Omit<Campaign, 'id' | 'budgets' | 'spent' | 'version' | 'createdAtMs' | 'updatedAtMs'>>,
  ): Promise<Campaign> {
    await this.sql.begin(async (tx) => {
      const rows = await tx`select * from campaigns where environment_id = ${environmentId} and id = ${id} for update`;
      if (rows.length === 0) throw notFound(id);
      const c = (await this.withBudgets(environmentId, rows, tx as unknown as Sql))[0]!;
      if (expected !== undefined && expected !== c.version) throw new ApiError('stale_write', { details: { current_version: c.version } });
      const n = await fn(c, tx as unknown as Sql);
      await tx`
        update campaigns set name = ${n.name}, description = ${n.description}, status = ${n.status},
          audience_segment = ${n.audienceSegment}, starts_at = ${ts(n.startsAtMs)}, ends_at = ${ts(n.endsAtMs)},
          version = version + 1, updated_at = now()
        where environment_id = ${environmentId} and id = ${id}`;
    });
    await this.changed(environmentId);
    return this.get(environmentId, id);
  }
}

function checkSchedule(startsAtMs: number | null, endsAtMs: number | null): void {
  if (startsAtMs !== null && endsAtMs !== null && endsAtMs <= startsAtMs) {
    throw new ApiError('validation_failed', { param: 'ends_at', message: 'ends_at: must be after starts_at.' });
  }
}
