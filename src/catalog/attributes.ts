// Attribute definitions: typed keys for customer attributes, per environment. Definitions live in
// PostgreSQL; every node keeps a per-environment cache (loaded on first use, dropped on a bus
// message when any node adds a definition) so checking a customer write costs no I/O.
import { z } from 'zod';
import { ApiError } from '../errors/api-error.js';
import { newId } from '../ids.js';
import type { Bus } from '../persistence/ports.js';
import { createOncePerCall, recordCreate } from '../persistence/sql/create-calls.js';
import type { Sql } from '../persistence/sql/db.js';

export const attributeTypes = ['string', 'number', 'integer', 'boolean', 'timestamp', 'json'] as const;
export type AttributeType = (typeof attributeTypes)[number];

export interface AttributeDefinition {
  id: string;
  environmentId: string;
  key: string;
  type: AttributeType;
  description: string | null;
  pii: boolean;
  createdAtMs: number;
  updatedAtMs: number;
}

const channel = 'attribute_definitions.changed';
/**
 * An RFC 3339 instant, checked as an event's occurred_at is (offsets taken): a day or hour that
 * does not exist (2026-02-30, T24:00) is refused, where Date.parse would roll it over.
 */
const timestamp = z.iso.datetime({ offset: true });

function matches(type: AttributeType, v: unknown): boolean {
  switch (type) {
    case 'string':
      return typeof v === 'string';
    case 'number':
      return typeof v === 'number' && Number.isFinite(v);
    case 'integer':
      return typeof v === 'number' && Number.isSafeInteger(v);
    case 'boolean':
      return typeof v === 'boolean';
    case 'timestamp':
      return timestamp.safeParse(v).success;
    case 'json':
      return true;
  }
}

function rowToDefinition(r: Record<string, unknown>): AttributeDefinition {
  return {
    id: r.id as string,
    environmentId: r.environment_id as string,
    key: r.key as string,
    type: r.type as AttributeType,
    description: (r.description as string | null) ?? null,
    pii: r.pii as boolean,
    createdAtMs: (r.created_at as Date).getTime(),
    updatedAtMs: (r.updated_at as Date).getTime(),
  };
}

export class AttributeCatalog {
  private readonly cache = new Map<string, Promise<Map<string, AttributeDefinition>>>();

  constructor(
    private readonly sql: Sql,
    private readonly bus: Bus,
  ) {}

  async start(): Promise<void> {
    await this.bus.subscribe(channel, (envId) => this.cache.delete(envId));
  }

  private definitions(environmentId: string): Promise<Map<string, AttributeDefinition>> {
    let cached = this.cache.get(environmentId);
    if (!cached) {
      cached = this.sql`select * from attribute_definitions where environment_id = ${environmentId}`.then(
        (rows) => new Map(rows.map((r) => [r.key as string, rowToDefinition(r)])),
      );
      cached.catch(() => this.cache.delete(environmentId));
      this.cache.set(environmentId, cached);
    }
    return cached;
  }

  /**
   * `callId`: the request's (an Idempotency-Key's); a run again of it answers the definition it
   * created (not already_exists: the key is its own).
   */
  async create(
    environmentId: string,
    input: { key: string; type: AttributeType; description?: string | null; pii?: boolean },
    callId?: string,
  ): Promise<AttributeDefinition> {
    const found = async (id: string): Promise<AttributeDefinition> => {
      await this.changed(environmentId);
      const rows = await this.sql`select * from attribute_definitions where environment_id = ${environmentId} and id = ${id}`;
      if (rows.length === 0) throw new ApiError('resource_not_found', { message: `No attribute definition ${id}.` });
      return rowToDefinition(rows[0]!);
    };
    return createOncePerCall(this.sql, callId, found, async () => {
      const id = newId('atd');
      const rows = await this.sql.begin(async (tx) => {
        await recordCreate(tx, callId, id);
        const inserted = await tx`
          insert into attribute_definitions (environment_id, id, key, type, description, pii)
          values (${environmentId}, ${id}, ${input.key}, ${input.type}, ${input.description ?? null}, ${input.pii ?? false})
          on conflict (environment_id, key) do nothing
          returning *`;
        // Thrown inside: the record of this call goes with the transaction.
        if (inserted.length === 0) throw new ApiError('already_exists', { message: `Attribute ${input.key} is already defined.`, param: 'key' });
        return inserted;
      });
      await this.changed(environmentId);
      return rowToDefinition(rows[0]!);
    });
  }

  private async changed(environmentId: string): Promise<void> {
    this.cache.delete(environmentId);
    await this.bus.publish(channel, environmentId).catch(() => {});
  }

  async list(environmentId: string, q: { limit: number; after: string | null }): Promise<AttributeDefinition[]> {
    const rows = await this.sql`
      select * from attribute_definitions
      where environment_id = ${environmentId} and (${q.after}::text is null or id > ${q.after})
      order by id limit ${q.limit}`;
    return rows.map(rowToDefinition);
  }

  /** Throws validation_failed naming the first attribute whose value does not match its definition. */
  async check(environmentId: string, attributes: Record<string, unknown>): Promise<void> {
    const defs = await this.definitions(environmentId);
    if (defs.size === 0) return;
    checkAttributes(defs, attributes);
  }
}

/**
 * Throws validation_failed when a value does not match its key's definition (null, a removal,
 * always does): `param` names the first such attribute, `details` lists every one, as for any
 * other validation_failed. Keys without a definition take any value.
 */
export function checkAttributes(defs: ReadonlyMap<string, Pick<AttributeDefinition, 'type'>>, attributes: Record<string, unknown>): void {
  let details: Array<{ param: string; message: string }> | null = null;
  let first = '';
  for (const key of Object.keys(attributes)) {
    const def = defs.get(key);
    const v = attributes[key];
    if (def === undefined || v === null || matches(def.type, v)) continue;
    const param = `attributes.${key}`;
    const says = `${param} must be of type ${def.type === 'timestamp' ? 'timestamp, RFC 3339 (2026-11-27T10:00:00Z)' : def.type}`;
    if (details === null) {
      details = [];
      first = says;
    }
    details.push({ param, message: `${says}.` });
  }
  if (details === null) return;
  const more = details.length > 1 ? ` (and ${details.length - 1} more; see details)` : '';
  throw new ApiError('validation_failed', { param: details[0]!.param, message: `${first}${more}.`, details });
}
