// Rewards of an environment (spec 2.7) and their stock. Definitions live in PostgreSQL; `issued`
// is the number of units currently reserved, issued or redeemed (cancel, refusal and the
// reconciler give one back). The stock is shared by customers on every partition and node, so it
// is never counted in an actor: reserve() takes one unit with ONE guarded UPDATE (issued <
// availability, status active) in the same transaction as a reservation row keyed by the issuance
// id; the row makes every later step (confirm, release) idempotent. Never read-modify-write issued.
import { parseExpiryAfter, type RewardTerms } from '../domain/rewards.js';
import { ApiError } from '../errors/api-error.js';
import { newId } from '../ids.js';
import type { Sql } from '../persistence/sql/db.js';
import { createOncePerCall, recordCreate } from '../persistence/sql/create-calls.js';
import type { CurrencyCatalog } from './currencies.js';

export type RewardStatus = 'active' | 'archived';

export interface RewardRecord {
  id: string;
  name: string;
  cost: number;
  currency: string;
  availability: number;
  issued: number;
  expiryAfter: string | null;
  status: RewardStatus;
  version: number;
  createdAtMs: number;
  updatedAtMs: number;
}

export interface RewardInput {
  name: string;
  cost: number;
  currency: string;
  availability: number;
  expiryAfter: string | null;
}

/** Fields a PATCH may change; undefined leaves a field as it is. */
export interface RewardPatch {
  name?: string;
  cost?: number;
  availability?: number;
  expiryAfter?: string | null;
  status?: RewardStatus;
}

export interface Reservation {
  issuanceId: string;
  rewardId: string;
  customerId: string;
  state: 'reserved' | 'confirmed' | 'released';
  createdAtMs: number;
}

function row(r: Record<string, unknown>): RewardRecord {
  return {
    id: r.id as string,
    name: r.name as string,
    cost: Number(r.cost),
    currency: r.currency as string,
    availability: r.availability as number,
    issued: r.issued as number,
    expiryAfter: (r.expiry_after as string | null) ?? null,
    status: r.status as RewardStatus,
    version: r.version as number,
    createdAtMs: (r.created_at as Date).getTime(),
    updatedAtMs: (r.updated_at as Date).getTime(),
  };
}

function reservationRow(r: Record<string, unknown>): Reservation {
  return {
    issuanceId: r.issuance_id as string,
    rewardId: r.reward_id as string,
    customerId: r.customer_id as string,
    state: r.state as Reservation['state'],
    createdAtMs: (r.created_at as Date).getTime(),
  };
}

export function termsOf(r: Pick<RewardRecord, 'id' | 'cost' | 'currency' | 'expiryAfter'>): RewardTerms {
  return { id: r.id, cost: r.cost, currency: r.currency, expiryAfterMs: r.expiryAfter === null ? null : parseExpiryAfter(r.expiryAfter) };
}

function checkExpiry(expiryAfter: string | null | undefined): void {
  if (expiryAfter === undefined || expiryAfter === null) return;
  if (parseExpiryAfter(expiryAfter) === null) {
    throw new ApiError('validation_failed', {
      param: 'expiry_after',
      message: 'expiry_after: a duration such as "30d" (days) or "12h" (hours), or null for never.',
    });
  }
}

/** Thrown inside the reserving transaction to roll it back when no unit can be taken. */
class Unavailable extends Error {}

export class RewardCatalog {
  constructor(
    private readonly sql: Sql,
    private readonly currencies: Pick<CurrencyCatalog, 'all'>,
  ) {}

  /** `callId`: the request's (an Idempotency-Key's); a run again of it answers the reward it created. */
  async create(environmentId: string, input: RewardInput, callId?: string): Promise<RewardRecord> {
    return createOncePerCall(this.sql, callId, (id) => this.get(environmentId, id), async () => {
      checkExpiry(input.expiryAfter);
      const currencies = await this.currencies.all(environmentId);
      if (!currencies.some((c) => c.key === input.currency)) {
        // As every body field naming a missing resource (tier programs, ledger entries, campaigns).
        throw new ApiError('resource_not_found', { message: `No currency ${input.currency}.`, param: 'currency' });
      }
      const id = newId('rw');
      const [r] = await this.sql.begin(async (tx) => {
        await recordCreate(tx, callId, id);
        return tx`
          insert into rewards (environment_id, id, name, cost, currency, availability, expiry_after)
          values (${environmentId}, ${id}, ${input.name}, ${input.cost}, ${input.currency}, ${input.availability}, ${input.expiryAfter})
          returning *`;
      });
      return row(r!);
    });
  }

  async list(environmentId: string, q: { limit: number; after: string | null; status: RewardStatus | null }): Promise<RewardRecord[]> {
    const rows = await this.sql`
      select * from rewards where environment_id = ${environmentId}
        and (${q.status}::text is null or status = ${q.status})
        and (${q.after}::text is null or id > ${q.after})
      order by id limit ${q.limit}`;
    return rows.map(row);
  }

  /** Which of `ids` name a reward of the environment (archived ones too), in one query. */
  async existingIds(environmentId: string, ids: readonly string[]): Promise<string[]> {
    if (ids.length === 0) return [];
    const rows = await this.sql`select id from rewards where environment_id = ${environmentId} and id = any(${[...ids]}::text[])`;
    return rows.map((r) => r.id as string);
  }

  async get(environmentId: string, id: string, param = 'id'): Promise<RewardRecord> {
    const rows = await this.sql`select * from rewards where environment_id = ${environmentId} and id = ${id}`;
    if (rows.length === 0) throw new ApiError('resource_not_found', { message: `No reward ${id}.`, param });
    return row(rows[0]!);
  }

  /**
   * If-Match (stale_write), validation, then the stock guard: availability below the units issued
   * now is 409 resource_in_use. The UPDATE repeats both checks (version, issued <= availability),
   * so an edit racing an issuance is stale_write, never an oversold reward.
   */
  async update(environmentId: string, id: string, patch: RewardPatch, expectedVersion?: number): Promise<RewardRecord> {
    const before = await this.get(environmentId, id);
    if (expectedVersion !== undefined && expectedVersion !== before.version) {
      throw new ApiError('stale_write', { details: { current_version: before.version } });
    }
    checkExpiry(patch.expiryAfter);
    const availability = patch.availability ?? before.availability;
    if (availability < before.issued) {
      throw new ApiError('resource_in_use', {
        param: 'availability',
        message: `availability cannot go below the ${before.issued} units issued now.`,
        details: { issued: before.issued },
      });
    }
    const rows = await this.sql`
      update rewards set
        name = ${patch.name ?? before.name}, cost = ${patch.cost ?? before.cost}, availability = ${availability},
        expiry_after = ${patch.expiryAfter !== undefined ? patch.expiryAfter : before.expiryAfter},
        status = ${patch.status ?? before.status}, version = version + 1, updated_at = now()
      where environment_id = ${environmentId} and id = ${id} and version = ${before.version} and issued <= ${availability}
      returning *`;
    if (rows.length === 0) {
      const current = await this.get(environmentId, id);
      if (current.version === before.version) {
        throw new ApiError('resource_in_use', {
          param: 'availability',
          message: `availability cannot go below the ${current.issued} units issued now.`,
          details: { issued: current.issued },
        });
      }
      throw new ApiError('stale_write', { details: { current_version: current.version } });
    }
    return row(rows[0]!);
  }

  /** Archives (no new issuances; existing ones keep referring to it). Idempotent. */
  /** DELETE: archives (idempotent); with If-Match, only the version it names (stale_write). */
  async archive(environmentId: string, id: string, expectedVersion?: number): Promise<RewardRecord> {
    const before = await this.get(environmentId, id);
    if (expectedVersion !== undefined && expectedVersion !== before.version) {
      throw new ApiError('stale_write', { details: { current_version: before.version } });
    }
    const [r] = await this.sql`
      update rewards set status = 'archived', version = version + case when status = 'archived' then 0 else 1 end,
        updated_at = case when status = 'archived' then updated_at else now() end
      where environment_id = ${environmentId} and id = ${id} and (${expectedVersion ?? null}::int is null or version = ${expectedVersion ?? null}::int)
      returning *`;
    if (r === undefined) {
      const current = await this.get(environmentId, id);
      throw new ApiError('stale_write', { details: { current_version: current.version } });
    }
    return row(r);
  }

  /**
   * Takes one unit of the reward for `issuanceId` (atomic: reservation row + guarded UPDATE in one
   * transaction). Returns the reward's terms at that instant. A second call for the same issuance
   * takes nothing and answers the same terms (re-drives are safe). No unit left, or archived:
   * reward_unavailable; unknown: resource_not_found.
   */
  async reserve(environmentId: string, rewardId: string, issuanceId: string, customerId: string): Promise<RewardTerms> {
    try {
      return await this.sql.begin(async (tx) => {
        const ins = await tx`
          insert into reward_reservations (environment_id, issuance_id, reward_id, customer_id, state)
          values (${environmentId}, ${issuanceId}, ${rewardId}, ${customerId}, 'reserved')
          on conflict do nothing returning issuance_id`;
        if (ins.length === 0) {
          const [held] = await tx`
            select r.state, w.* from reward_reservations r join rewards w on w.environment_id = r.environment_id and w.id = r.reward_id
            where r.environment_id = ${environmentId} and r.issuance_id = ${issuanceId}`;
          if (held === undefined || held.state === 'released') throw new Unavailable();
          return termsOf(row(held));
        }
        const taken = await tx`
          update rewards set issued = issued + 1
          where environment_id = ${environmentId} and id = ${rewardId} and status = 'active' and issued < availability
          returning *`;
        if (taken.length === 0) throw new Unavailable();
        return termsOf(row(taken[0]!));
      });
    } catch (err) {
      if (!(err instanceof Unavailable)) throw err;
      const r = await this.get(environmentId, rewardId, 'reward_id');
      throw new ApiError('reward_unavailable', {
        param: 'reward_id',
        message: r.status === 'archived' ? 'The reward is archived.' : 'No unit of this reward is left.',
      });
    }
  }

  /** The issuance is journaled: its unit is no longer a candidate for reconciliation. */
  async confirm(environmentId: string, issuanceId: string): Promise<void> {
    await this.sql`
      update reward_reservations set state = 'confirmed', updated_at = now()
      where environment_id = ${environmentId} and issuance_id = ${issuanceId} and state = 'reserved'`;
  }

  /** Gives the issuance's unit back (once: the reservation row changes state in the same transaction). */
  async release(environmentId: string, issuanceId: string): Promise<boolean> {
    return this.sql.begin(async (tx) => {
      const [r] = await tx`
        update reward_reservations set state = 'released', updated_at = now()
        where environment_id = ${environmentId} and issuance_id = ${issuanceId} and state <> 'released'
        returning reward_id`;
      if (r === undefined) return false;
      await tx`update rewards set issued = issued - 1 where environment_id = ${environmentId} and id = ${r.reward_id as string}`;
      return true;
    });
  }

  /** The reservation behind an issuance (the customer it belongs to), or null. */
  async reservation(environmentId: string, issuanceId: string): Promise<Reservation | null> {
    const [r] = await this.sql`select * from reward_reservations where environment_id = ${environmentId} and issuance_id = ${issuanceId}`;
    return r ? reservationRow(r) : null;
  }

  /** Reservations still `reserved` after `olderThanMs` (a crash between reservation and journal, or a lost confirm). */
  async staleReservations(olderThanMs: number, limit: number): Promise<Array<Reservation & { environmentId: string }>> {
    const rows = await this.sql`
      select * from reward_reservations where state = 'reserved' and created_at < to_timestamp(${olderThanMs} / 1000.0)
      order by created_at limit ${limit}`;
    return rows.map((r) => ({ ...reservationRow(r), environmentId: r.environment_id as string }));
  }

  /** Units still held by issuances the read model shows as cancelled or refused (a crash after the journal, before release). */
  async unreleasedEnded(limit: number): Promise<Array<{ environmentId: string; issuanceId: string }>> {
    const rows = await this.sql`
      select r.environment_id, r.issuance_id from reward_reservations r
      join reward_issuances i on i.environment_id = r.environment_id and i.id = r.issuance_id
      where r.state <> 'released' and i.status in ('cancelled', 'refused')
      limit ${limit}`;
    return rows.map((r) => ({ environmentId: r.environment_id as string, issuanceId: r.issuance_id as string }));
  }
}
