// Currencies of an environment (decisions.md): key, name, negative_balance policy, default expiry.
// Definitions live in PostgreSQL; every node caches each environment's list (loaded on first use,
// dropped on a bus message when any node changes it), so a ledger command costs no lookup once warm.
import type { CurrencyConfig } from '../domain/ledger.js';
import { ApiError } from '../errors/api-error.js';
import { newId } from '../ids.js';
import type { Bus } from '../persistence/ports.js';
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

  async create(
    environmentId: string,
    input: { key: string; name: string; negative_balance: 'forbid' | 'allow'; expiry_days: number | null },
  ): Promise<Currency> {
    const rows = await this.sql`
      insert into currencies (environment_id, id, key, name, negative_balance, expiry_days)
      values (${environmentId}, ${newId('cur')}, ${input.key}, ${input.name}, ${input.negative_balance}, ${input.expiry_days})
      on conflict (environment_id, key) do nothing
      returning *`;
    if (rows.length === 0) throw new ApiError('already_exists', { message: `Currency ${input.key} already exists.`, param: 'key' });
    this.cache.delete(environmentId);
    await this.bus.publish(channel, environmentId).catch(() => {});
    return row(rows[0]!);
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
