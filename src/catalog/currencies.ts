// Currencies of an environment (decisions.md): key, name, negative_balance policy, default expiry.
// Definitions live in PostgreSQL; every node caches each environment's list (loaded on first use,
// dropped on a bus message when any node changes it), so a ledger command costs no lookup once warm.
import type { CurrencyConfig } from '../domain/ledger.js';
import { ApiError } from '../errors/api-error.js';
import { newId } from '../ids.js';
import type { Bus } from '../persistence/ports.js';
import { createOncePerCall, recordCreate } from '../persistence/sql/create-calls.js';
import type { Sql } from '../persistence/sql/db.js';

export interface Currency {
  id: string;
  key: string;
  name: string;
  negativeBalance: 'forbid' | 'allow';
  expiryDays: number | null;
  version: number;
  createdAtMs: number;
  updatedAtMs: number;
}

const channel = 'currencies.changed';

function row(r: Record<string, unknown>): Currency {
  return {
    id: r.id as string,
    key: r.key as string,
    name: r.name as string,
    negativeBalance: r.negative_balance as 'forbid' | 'allow',
    expiryDays: (r.expiry_days as number | null) ?? null,
    version: r.version as number,
    createdAtMs: (r.created_at as Date).getTime(),
    updatedAtMs: (r.updated_at as Date).getTime(),
  };
}

export class CurrencyCatalog {
  private readonly cache = new Map<string, Promise<Currency[]>>();

  constructor(
    private readonly sql: Sql,
    private readonly bus: Bus,
  ) {}

  async start(): Promise<void> {
    await this.bus.subscribe(channel, (envId) => this.cache.delete(envId));
  }

  /**
   * `callId`: the request's (an Idempotency-Key's); a run again of it answers the currency it
   * created (not already_exists: the key is its own).
   */
  async create(
    environmentId: string,
    input: { key: string; name: string; negative_balance: 'forbid' | 'allow'; expiry_days: number | null },
    callId?: string,
  ): Promise<Currency> {
    const found = async (id: string): Promise<Currency> => {
      // A first run that died before telling the nodes: tell them now.
      await this.changed(environmentId);
      const rows = await this.sql`select * from currencies where environment_id = ${environmentId} and id = ${id}`;
      if (rows.length === 0) throw new ApiError('resource_not_found', { message: `No currency ${id}.` });
      return row(rows[0]!);
    };
    return createOncePerCall(this.sql, callId, found, async () => {
      const id = newId('cur');
      const rows = await this.sql.begin(async (tx) => {
        await recordCreate(tx, callId, id);
        const inserted = await tx`
          insert into currencies (environment_id, id, key, name, negative_balance, expiry_days)
          values (${environmentId}, ${id}, ${input.key}, ${input.name}, ${input.negative_balance}, ${input.expiry_days})
          on conflict (environment_id, key) do nothing
          returning *`;
        // Thrown inside: the record of this call goes with the transaction.
        if (inserted.length === 0) throw new ApiError('already_exists', { message: `Currency ${input.key} already exists.`, param: 'key' });
        return inserted;
      });
      await this.changed(environmentId);
      return row(rows[0]!);
    });
  }

  private async changed(environmentId: string): Promise<void> {
    this.cache.delete(environmentId);
    await this.bus.publish(channel, environmentId).catch(() => {});
  }

  async list(environmentId: string, q: { limit: number; after: string | null }): Promise<Currency[]> {
    const rows = await this.sql`
      select * from currencies where environment_id = ${environmentId} and (${q.after}::text is null or id > ${q.after})
      order by id limit ${q.limit}`;
    return rows.map(row);
  }

  /** Every currency of the environment, cached. */
  all(environmentId: string): Promise<Currency[]> {
    let cached = this.cache.get(environmentId);
    if (!cached) {
      cached = this.sql`select * from currencies where environment_id = ${environmentId} order by key`.then((rows) => rows.map(row));
      cached.catch(() => this.cache.delete(environmentId));
      this.cache.set(environmentId, cached);
    }
    return cached;
  }

  /** The configs a ledger command needs, or resource_not_found naming the unknown currency. */
  async configs(environmentId: string, keys: string[]): Promise<CurrencyConfig[]> {
    const all = await this.all(environmentId);
    return keys.map((key) => {
      const c = all.find((x) => x.key === key);
      if (!c) throw new ApiError('resource_not_found', { message: `No currency ${key}.`, param: 'currency' });
      return { key: c.key, negativeBalance: c.negativeBalance, expiryDays: c.expiryDays };
    });
  }
}
