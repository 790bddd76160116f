// PgReadModel: the read tables behind list/get endpoints (customers, aliases, events), written
// by the projector from journal facts and read by the gateway. apply() is one transaction that
// also advances projection_offsets(partition), so a batch is in the tables exactly when its offset
// is; re-applying anything already applied changes nothing (offset check, versions, do-nothing
// inserts). Projections of a kind are written together (arrays through unnest), never a round
// trip per row; order across kinds within a batch is kept.
import type postgres from 'postgres';
import { compareOffsets, type Offset, offsetZero } from '../ports.js';
import { type ChallengeProjection, writeChallengeEnrollments, writeChallengeProgress } from './challenge-read-model.js';
import { jsonDocument, type Sql } from './db.js';
import { chunks, pipelined, rowsPerStatementMax } from './pipelined.js';

/** What the projector derives from journal facts. Plain data. */
/** A ledger entry row as the projector writes it (from LedgerEntry facts). */
export interface LedgerRow {
  environmentId: string;
  id: string;
  customerId: string;
  currency: string;
  type: string;
  status: string;
  amount: number;
  remaining: number;
  expiresAtMs: number | null;
  confirmAfterMs: number | null;
  reason: string | null;
  sourceType: string | null;
  sourceId: string | null;
  reversesEntryId: string | null;
  createdAtMs: number;
}

/** A reward issuance row (from the issuance every reward fact carries). */
export interface IssuanceRow {
  environmentId: string;
  id: string;
  rewardId: string;
  customerId: string;
  status: string;
  sourceType: string;
  sourceId: string | null;
  costEntryId: string | null;
  expiresAtMs: number | null;
  redeemedAtMs: number | null;
  cancelledAtMs: number | null;
  reason: string | null;
  version: number;
  createdAtMs: number;
}

export type Projection =
  | ChallengeProjection
  | ({ kind: 'ledger.insert' } & LedgerRow)
  /** Upserts only move an issuance forward: a row keeps its highest version. */
  | ({ kind: 'issuance.upsert' } & IssuanceRow)
  /** Sets an entry's remaining and, when given, its status (spends, expiry, confirmation). */
  | { kind: 'ledger.update'; environmentId: string; id: string; remaining: number; status: string | null }
  | {
      kind: 'customer.upsert';
      environmentId: string;
      id: string;
      externalId: string | null;
      attributes: Record<string, unknown>;
      /** Upserts only move a customer forward: a row keeps its highest version. */
      version: number;
      createdAtMs: number;
      updatedAtMs: number;
    }
  | {
      /** Erases personal data: external id, attributes, the customer's aliases and event properties. */
      kind: 'customer.erase';
      environmentId: string;
      id: string;
      deletedAtMs: number;
      version: number;
    }
  | {
      /** An alias points at one customer; a merge moves it to another. */
      kind: 'alias.upsert';
      environmentId: string;
      alias: string;
      customerId: string;
      /** The alias kind (e.g. 'anonymous'); not `kind`, which names the projection. */
      aliasKind: string;
      createdAtMs: number;
    }
  | {
      kind: 'event.insert';
      environmentId: string;
      id: string;
      clientEventId: string;
      customerId: string;
      name: string;
      occurredAtMs: number;
      receivedAtMs: number;
      properties: Record<string, unknown>;
      status: string;
      /** Counter ids that counted this event live (counter.counted in the same journal record). */
      counted?: string[];
      /** Null for events recorded before they were kept. */
      trust: string | null;
      sourceType: string | null;
      sourceId: string | null;
      /** The effects of its sync answer (event.answered in the same journal record); absent when answered 202. */
      effects?: unknown[];
    }
  | {
      /** A customer's level in a tier program (level null: only the next downgrade check moved). */
      kind: 'tier.set';
      environmentId: string;
      customerId: string;
      programId: string;
      level: string | null;
      sinceMs: number | null;
      nextCheckMs: number | null;
    }
  /** Static segment membership: the last fact per (segment, customer) wins. */
  | { kind: 'segment_member.set'; environmentId: string; segmentId: string; customerId: string; member: boolean; atMs: number }
  /** What a campaign's rules awarded: added to campaign_spend. */
  | { kind: 'campaign.spent'; environmentId: string; campaignId: string; currency: string; amount: number }
  /** A customer merged into another: lists leave it out. */
  | { kind: 'customer.merge'; environmentId: string; id: string; into: string };

export interface CustomerRow {
  environmentId: string;
  id: string;
  externalId: string | null;
  attributes: Record<string, unknown>;
  version: number;
  createdAtMs: number;
  updatedAtMs: number;
  deletedAtMs: number | null;
}

export interface AliasRow {
  environmentId: string;
  alias: string;
  customerId: string;
  kind: string;
  createdAtMs: number;
}

export interface EventRow {
  environmentId: string;
  id: string;
  clientEventId: string;
  customerId: string;
  name: string;
  occurredAtMs: number;
  receivedAtMs: number;
  /** null once the customer was erased. */
  properties: Record<string, unknown> | null;
  status: string;
  /** Null for events recorded before they were kept. */
  trust: string | null;
  sourceType: string | null;
  sourceId: string | null;
}

/**
 * PostgreSQL text and jsonb cannot hold U+0000, and jsonb refuses an unpaired surrogate. The
 * gateway refuses both, but a fact journaled before it did must not block the partition's
 * projection forever, so read models store U+FFFD in their place (the journal keeps the original).
 * In text columns the driver already encodes an unpaired surrogate as U+FFFD (UTF-8).
 */
const text = (s: string) => (s.includes('\u0000') ? s.replaceAll('\u0000', '\uFFFD') : s);
const json = jsonDocument;

/** Highest version per key; among equal versions the last one. */
function newestPerKey<T extends { version: number }>(xs: T[], key: (x: T) => string): T[] {
  const m = new Map<string, T>();
  for (const x of xs) {
    const k = key(x);
    const seen = m.get(k);
    if (!seen || x.version >= seen.version) m.set(k, x);
  }
  return [...m.values()];
}

function lastPerKey<T>(xs: T[], key: (x: T) => string): T[] {
  const m = new Map<string, T>();
  for (const x of xs) m.set(key(x), x);
  return [...m.values()];
}

const pairKey = (env: string, k: string) => `${env.length}:${env}${k}`;

/**
 * The projector's statements are planned for each execution, not from a plan cached on the
 * connection. A cached (generic) plan keeps the choices made when it was built: prepared while
 * `customers` was nearly empty, the erased-customer check of every event row became one
 * sequential scan of the whole table per statement (10 ms at 200k customers, growing with the
 * table), and without a fresh ANALYZE nothing replaces it (docs/bench/2026-11-27-fast-box.md).
 * Planning these few large statements each time costs far less than one such scan. Sent ahead of
 * the offsets' lock and awaited with it (the connection runs them in order): no round trip of its own.
 */
async function customPlansAndLockedOffsets(tx: Tx, partitions: readonly number[]): Promise<Map<number, Offset>> {
  // execute(): postgres.js sends a query when it is first awaited; this one must go first.
  const planned = tx`set local plan_cache_mode = force_custom_plan`.execute();
  const [, current] = await Promise.all([planned, lockOffsets(tx, partitions)]);
  return current;
}

/**
 * Locks the partitions' projection_offsets rows (in partition order, so two appliers never
 * deadlock) and returns their offsets. A partition's row is created once, by its first batch: the
 * insert runs only for partitions without one (an insert that finds every row in place still
 * probes the index for each, on every cycle).
 */
async function lockOffsets(tx: Tx, partitions: readonly number[]): Promise<Map<number, Offset>> {
  const sorted = [...new Set(partitions)].sort((a, b) => a - b);
  const read = async () =>
    new Map(
      (
        await tx`
          select partition, "offset" from projection_offsets
          where partition = any(${sorted}::int[]) order by partition for update`
      ).map((r) => [r.partition as number, r.offset as Offset]),
    );
  const current = await read();
  if (current.size === sorted.length) return current;
  const missing = sorted.filter((p) => !current.has(p));
  await tx`
    insert into projection_offsets (partition, "offset")
    select p, ${offsetZero} from unnest(${missing}::int[]) as p
    on conflict do nothing`;
  return read();
}

type Of<K extends Projection['kind']> = Extract<Projection, { kind: K }>;
type Tx = postgres.TransactionSql<Record<string, unknown>>;

/** Milliseconds since the epoch as a float8 expression from a timestamptz column. */
const ms = (col: string) => `(extract(epoch from ${col}) * 1000)::float8`;
const customerColumns = `environment_id, id, external_id, attributes, version,
  ${ms('created_at')} as created_at_ms, ${ms('updated_at')} as updated_at_ms, ${ms('deleted_at')} as deleted_at_ms`;
const eventColumns = `environment_id, id, client_event_id, customer_id, name,
  ${ms('occurred_at')} as occurred_at_ms, ${ms('received_at')} as received_at_ms, properties, status, trust, source_type, source_id`;

/**
 * The columns of an issuance row as of `at` (a timestamptz fragment): an issued row past its
 * expires_at reads as its expiry records it, `expired` and one version on (domain/rewards.ts expiredOf).
 */
function issuanceColumnsAsOf(sql: Sql, at: postgres.PendingQuery<postgres.Row[]>) {
  const lapsed = sql`(status = 'issued' and expires_at <= ${at})`;
  return sql`environment_id, id, reward_id, customer_id,
    case when ${lapsed} then 'expired' else status end as status,
    source_type, source_id, cost_entry_id,
    ${sql.unsafe(ms('expires_at'))} as expires_at_ms, ${sql.unsafe(ms('redeemed_at'))} as redeemed_at_ms,
    ${sql.unsafe(ms('cancelled_at'))} as cancelled_at_ms, reason,
    version + case when ${lapsed} then 1 else 0 end as version, ${sql.unsafe(ms('created_at'))} as created_at_ms`;
}

function issuanceRow(r: Record<string, unknown>): IssuanceRow {
  return {
    environmentId: r.environment_id as string,
    id: r.id as string,
    rewardId: r.reward_id as string,
    customerId: r.customer_id as string,
    status: r.status as string,
    sourceType: r.source_type as string,
    sourceId: (r.source_id as string | null) ?? null,
    costEntryId: (r.cost_entry_id as string | null) ?? null,
    expiresAtMs: (r.expires_at_ms as number | null) ?? null,
    redeemedAtMs: (r.redeemed_at_ms as number | null) ?? null,
    cancelledAtMs: (r.cancelled_at_ms as number | null) ?? null,
    reason: (r.reason as string | null) ?? null,
    version: r.version as number,
    createdAtMs: r.created_at_ms as number,
  };
}

function customerRow(r: Record<string, unknown>): CustomerRow {
  return {
    environmentId: r.environment_id as string,
    id: r.id as string,
    externalId: r.external_id as string | null,
    attributes: r.attributes as Record<string, unknown>,
    version: r.version as number,
    createdAtMs: r.created_at_ms as number,
    updatedAtMs: r.updated_at_ms as number,
    deletedAtMs: r.deleted_at_ms as number | null,
  };
}

function eventRow(r: Record<string, unknown>): EventRow {
  return {
    environmentId: r.environment_id as string,
    id: r.id as string,
    clientEventId: r.client_event_id as string,
    customerId: r.customer_id as string,
    name: r.name as string,
    occurredAtMs: r.occurred_at_ms as number,
    receivedAtMs: r.received_at_ms as number,
    properties: r.properties as Record<string, unknown> | null,
    status: r.status as string,
    trust: (r.trust as string | null) ?? null,
    sourceType: (r.source_type as string | null) ?? null,
    sourceId: (r.source_id as string | null) ?? null,
  };
}

export class PgReadModel {
  constructor(private readonly sql: Sql) {}

  /**
   * Writes one batch of projections and moves the partition's projected offset to `offset`, in
   * one transaction. A batch whose offset is not after the projected offset was already applied
   * and is skipped whole. Used by the projector's catch-up from the journal: it is applyMany of
   * one batch, so its rows go grouped by kind, a few statements however many events. Written in
   * order instead, a catch-up of new customers alternated customer and event projections and
   * sent one statement per projection (~10x slower per row: the projector then fell behind and
   * stayed behind under load).
   */
  async apply(partition: number, offset: Offset, projections: Projection[]): Promise<void> {
    await this.applyMany([{ partition, offset, projections }]);
  }

  /**
   * Many partitions in ONE transaction (the projector's normal path: a handful of statements per
   * cycle however many partitions moved). The row locks of projection_offsets serialize appliers
   * of a partition (two nodes during a lease hand-over). Batches whose offset is not after the
   * partition's projected offset are skipped. Projections are written grouped by kind; the
   * result does not depend on the order across kinds (an erase wins over upserts, aliases and
   * event properties of an erased customer are never written), so grouping is safe.
   */
  async applyMany(batches: Array<{ partition: number; offset: Offset; projections: Projection[] }>): Promise<void> {
    if (batches.length === 0) return;
    const partitions = batches.map((b) => b.partition);
    await this.sql.begin(async (tx) => {
      const current = await customPlansAndLockedOffsets(tx, partitions);
      const byKind: Record<Projection['kind'], Projection[]> = {
        'customer.upsert': [],
        'customer.erase': [],
        'alias.upsert': [],
        'event.insert': [],
        'ledger.insert': [],
        'ledger.update': [],
        'issuance.upsert': [],
        'challenge.progress': [],
        'challenge.enrollment': [],
        'tier.set': [],
        'segment_member.set': [],
        'campaign.spent': [],
        'customer.merge': [],
      };
      const moved: Array<{ partition: number; offset: Offset }> = [];
      for (const b of batches) {
        if (compareOffsets(b.offset, current.get(b.partition) ?? offsetZero) <= 0) continue;
        for (const pr of b.projections) byKind[pr.kind].push(pr);
        moved.push({ partition: b.partition, offset: b.offset });
      }
      if (moved.length === 0) return;
      // Ledger updates after inserts: an entry and the debit that consumes it may share a batch.
      const statements = pipelined(tx);
      for (const kind of [
        'customer.upsert',
        'customer.erase',
        'alias.upsert',
        'event.insert',
        'ledger.insert',
        'ledger.update',
        'issuance.upsert',
        'challenge.progress',
        'challenge.enrollment',
        'tier.set',
        'segment_member.set',
        'campaign.spent',
        'customer.merge',
      ] as const) {
        if (byKind[kind].length > 0) await this.applyRun(statements.tx, byKind[kind]);
      }
      // Event data (properties, contribution values, skipped rules' details) is erased with the
      // customer after this batch's event and progress rows (written after the erase above, they
      // may still carry it).
      if (byKind['customer.erase'].length > 0) await this.eraseEventData(statements.tx, byKind['customer.erase'] as Array<Of<'customer.erase'>>);
      // A deleted customer holds no tier level; dropped after the batch's tier rows too.
      if (byKind['customer.erase'].length > 0) await this.dropTiers(statements.tx, byKind['customer.erase'] as Array<Of<'customer.erase'>>);
      await statements.flush();
      await tx`
        update projection_offsets o set "offset" = u.o
        from unnest(${moved.map((m) => m.partition)}::int[], ${moved.map((m) => m.offset)}::text[]) as u(p, o)
        where o.partition = u.p`;
    });
  }

  private async applyRun(tx: Tx, run: Projection[]): Promise<void> {
    switch (run[0]!.kind) {
      case 'customer.upsert':
        return this.upsertCustomers(tx, run as Array<Of<'customer.upsert'>>);
      case 'customer.erase':
        return this.eraseCustomers(tx, run as Array<Of<'customer.erase'>>);
      case 'alias.upsert':
        return this.upsertAliases(tx, run as Array<Of<'alias.upsert'>>);
      case 'event.insert':
        return this.insertEvents(tx, run as Array<Of<'event.insert'>>);
      case 'ledger.insert':
        return this.insertLedger(tx, run as Array<Of<'ledger.insert'>>);
      case 'ledger.update':
        return this.updateLedger(tx, run as Array<Of<'ledger.update'>>);
      case 'issuance.upsert':
        return this.upsertIssuances(tx, run as Array<Of<'issuance.upsert'>>);
      case 'challenge.progress':
        return writeChallengeProgress(tx, run as Array<Of<'challenge.progress'>>);
      case 'challenge.enrollment':
        return writeChallengeEnrollments(tx, run as Array<Of<'challenge.enrollment'>>);
      case 'tier.set':
        return this.setTiers(tx, run as Array<Of<'tier.set'>>);
      case 'segment_member.set':
        return this.setSegmentMembers(tx, run as Array<Of<'segment_member.set'>>);
      case 'campaign.spent':
        return this.addCampaignSpend(tx, run as Array<Of<'campaign.spent'>>);
      case 'customer.merge':
        return this.markMerged(tx, run as Array<Of<'customer.merge'>>);
    }
  }

  private async upsertCustomers(tx: Tx, run: Array<Of<'customer.upsert'>>): Promise<void> {
    const rows = newestPerKey(run, (p) => pairKey(p.environmentId, p.id));
    for (const part of chunks(rows, rowsPerStatementMax)) {
      // One JSON document per statement (see insertEvents). An erased customer stays erased: a
      // late upsert must not bring its personal data back.
      const doc = json(
        part.map((p) => ({
          e: p.environmentId,
          i: p.id,
          x: p.externalId,
          a: p.attributes,
          v: p.version,
          c: p.createdAtMs,
          u: p.updatedAtMs,
        })),
      );
      await tx`
        insert into customers as c (environment_id, id, external_id, attributes, version, created_at, updated_at)
        select u.e, u.i, u.x, u.a, u.v, to_timestamp(u.c / 1000), to_timestamp(u.u / 1000)
        from json_to_recordset((${doc}::text)::json) as u(e text, i text, x text, a jsonb, v int, c float8, u float8)
        on conflict (environment_id, id) do update
        set external_id = excluded.external_id, attributes = excluded.attributes,
            version = excluded.version, updated_at = excluded.updated_at
        where c.version < excluded.version and c.deleted_at is null`;
    }
  }


  private async eraseCustomers(tx: Tx, run: Array<Of<'customer.erase'>>): Promise<void> {
    const rows = newestPerKey(run, (p) => pairKey(p.environmentId, p.id));
    for (const part of chunks(rows, rowsPerStatementMax)) {
      const envs = part.map((p) => text(p.environmentId));
      const ids = part.map((p) => text(p.id));
      // A customer never projected still gets a tombstone, so no later upsert can resurrect it.
      await tx`
        insert into customers as c (environment_id, id, external_id, attributes, version, created_at, updated_at, deleted_at)
        select u.e, u.i, null, '{}', u.v, to_timestamp(u.d / 1000), to_timestamp(u.d / 1000), to_timestamp(u.d / 1000)
        from unnest(${envs}::text[], ${ids}::text[], ${part.map((p) => p.deletedAtMs)}::float8[], ${part.map((p) => p.version)}::int[]) as u(e, i, d, v)
        on conflict (environment_id, id) do update
        set external_id = null, attributes = '{}', deleted_at = excluded.deleted_at,
            updated_at = excluded.updated_at, version = greatest(c.version, excluded.version)
        where c.deleted_at is null`;
      await tx`
        delete from customer_aliases a
        using unnest(${envs}::text[], ${ids}::text[]) as u(e, i)
        where a.environment_id = u.e and a.customer_id = u.i`;
      await tx`
        delete from segment_members sm
        using unnest(${envs}::text[], ${ids}::text[]) as u(e, i)
        where sm.environment_id = u.e and sm.customer_id = u.i`;
    }
  }

  private async markMerged(tx: Tx, run: Array<Of<'customer.merge'>>): Promise<void> {
    for (const part of chunks(run, rowsPerStatementMax)) {
      await tx`
        update customers c set merged_into = u.m
        from unnest(${part.map((p) => text(p.environmentId))}::text[], ${part.map((p) => text(p.id))}::text[], ${part.map((p) => text(p.into))}::text[]) as u(e, i, m)
        where c.environment_id = u.e and c.id = u.i`;
    }
    // A merged customer holds no tier level (the survivor is re-placed on the joined ledger).
    await this.dropTiers(tx, run);
  }

  /** Tier placements of deleted or merged customers (the last kind of a batch, or after it). */
  private async dropTiers(tx: Tx, run: ReadonlyArray<{ environmentId: string; id: string }>): Promise<void> {
    for (const part of chunks([...run], rowsPerStatementMax)) {
      await tx`
        delete from customer_tiers t
        using unnest(${part.map((p) => text(p.environmentId))}::text[], ${part.map((p) => text(p.id))}::text[]) as u(e, i)
        where t.environment_id = u.e and t.customer_id = u.i`;
    }
  }

  /** Event data of erased customers, after every kind of the batch (its events and progress rows included). */
  private async eraseEventData(tx: Tx, run: Array<Of<'customer.erase'>>): Promise<void> {
    for (const part of chunks(run, rowsPerStatementMax)) {
      const envs = part.map((p) => text(p.environmentId));
      const ids = part.map((p) => text(p.id));
      await tx`
        update challenge_progress cp set contributions = '{}'
        from unnest(${envs}::text[], ${ids}::text[]) as u(e, i)
        where cp.environment_id = u.e and cp.customer_id = u.i and cp.contributions <> '{}'`;
      // A kept sync answer stays (its ids and amounts are the ledger's), but a skipped rule's
      // detail may quote the customer's values (a limit's scope key, an amount read): it goes.
      await tx`
        update events ev set properties = null,
          effects = case when ev.effects is null then null else (
            select coalesce(jsonb_agg(case when x->>'type' = 'rule.skipped' then x - 'detail' else x end order by n), '[]'::jsonb)
            from jsonb_array_elements(ev.effects) with ordinality as a(x, n)) end
        from unnest(${envs}::text[], ${ids}::text[]) as u(e, i)
        where ev.environment_id = u.e and ev.customer_id = u.i
          and (ev.properties is not null or jsonb_path_exists(ev.effects, '$[*] ? (@.type == "rule.skipped" && exists(@.detail))'))`;
    }
  }

  private async upsertAliases(tx: Tx, run: Array<Of<'alias.upsert'>>): Promise<void> {
    const rows = lastPerKey(run, (p) => pairKey(p.environmentId, p.alias));
    for (const part of chunks(rows, rowsPerStatementMax)) {
      // Aliases of an erased customer are personal data: never (re)inserted.
      await tx`
        insert into customer_aliases as a (environment_id, alias, customer_id, kind, created_at)
        select u.e, u.al, u.c, u.k, to_timestamp(u.t / 1000)
        from unnest(
          ${part.map((p) => text(p.environmentId))}::text[],
          ${part.map((p) => text(p.alias))}::text[],
          ${part.map((p) => text(p.customerId))}::text[],
          ${part.map((p) => text(p.aliasKind))}::text[],
          ${part.map((p) => p.createdAtMs)}::float8[]
        ) as u(e, al, c, k, t)
        where not exists (
          select 1 from customers c where c.environment_id = u.e and c.id = u.c and c.deleted_at is not null
        )
        on conflict (environment_id, alias) do update
        set customer_id = excluded.customer_id, kind = excluded.kind, created_at = excluded.created_at
        where (a.customer_id, a.kind) is distinct from (excluded.customer_id, excluded.kind)`;
    }
  }

  private async insertEvents(tx: Tx, run: Array<Of<'event.insert'>>): Promise<void> {
    for (const part of chunks(run, rowsPerStatementMax)) {
      // The rows travel as ONE JSON document (native JSON.stringify, properties embedded as
      // objects) rather than nine escaped text arrays. First write wins (event ids are
      // deduplicated upstream); an erased customer's events arrive without properties.
      const doc = json(
        part.map((p) => ({
          e: p.environmentId,
          i: p.id,
          ce: p.clientEventId,
          c: p.customerId,
          n: p.name,
          o: p.occurredAtMs,
          r: p.receivedAtMs,
          p: p.properties,
          s: p.status,
          k: p.counted ?? null,
          t: p.trust,
          st: p.sourceType,
          si: p.sourceId,
          // Absent for events answered 202 (nearly all): the column is null then.
          f: p.effects,
        })),
      );
      await tx`
        insert into events (environment_id, id, client_event_id, customer_id, name, occurred_at, received_at, properties, status, counted, trust, source_type, source_id, effects)
        select u.e, u.i, u.ce, u.c, u.n, to_timestamp(u.o / 1000), to_timestamp(u.r / 1000),
               case when exists (
                 select 1 from customers c where c.environment_id = u.e and c.id = u.c and c.deleted_at is not null
               ) then null else u.p end,
               u.s,
               case when u.k is null then null else array(select jsonb_array_elements_text(u.k)) end,
               u.t, u.st, u.si, u.f
        from json_to_recordset((${doc}::text)::json) as u(e text, i text, ce text, c text, n text, o float8, r float8, p jsonb, s text, k jsonb, t text, st text, si text, f jsonb)
        on conflict (environment_id, id) do nothing`;
    }
  }

  private async insertLedger(tx: Tx, run: Array<Of<'ledger.insert'>>): Promise<void> {
    for (const part of chunks(run, rowsPerStatementMax)) {
      const doc = json(
        part.map((p) => ({
          e: p.environmentId,
          i: p.id,
          c: p.customerId,
          cur: p.currency,
          t: p.type,
          s: p.status,
          a: p.amount,
          r: p.remaining,
          x: p.expiresAtMs,
          ca: p.confirmAfterMs,
          re: p.reason,
          st: p.sourceType,
          si: p.sourceId,
          rv: p.reversesEntryId,
          at: p.createdAtMs,
        })),
      );
      await tx`
        insert into ledger_entries (environment_id, id, customer_id, currency, type, status, amount, remaining,
          expires_at, confirm_after, reason, source_type, source_id, reverses_entry_id, created_at)
        select u.e, u.i, u.c, u.cur, u.t, u.s, u.a, u.r, to_timestamp(u.x / 1000), to_timestamp(u.ca / 1000),
               u.re, u.st, u.si, u.rv, to_timestamp(u.at / 1000)
        from json_to_recordset((${doc}::text)::json) as u(e text, i text, c text, cur text, t text, s text, a bigint,
          r bigint, x float8, ca float8, re text, st text, si text, rv text, at float8)
        on conflict (environment_id, id) do nothing`;
    }
  }

  /** In fact order, folded per (customer, program): the last level and the last check date win. */
  private async setTiers(tx: Tx, run: Array<Of<'tier.set'>>): Promise<void> {
    const folded = new Map<string, Of<'tier.set'>>();
    for (const p of run) {
      const key = `${pairKey(p.environmentId, p.customerId)}\u0000${p.programId}`;
      const seen = folded.get(key);
      if (seen === undefined || p.level !== null) folded.set(key, { ...p });
      else seen.nextCheckMs = p.nextCheckMs;
    }
    // A level (with its check date) is an upsert; a check date alone updates the held level's row.
    const levelled: Array<Of<'tier.set'>> = [];
    const checksOnly: Array<Of<'tier.set'>> = [];
    for (const p of folded.values()) (p.level === null ? checksOnly : levelled).push(p);
    for (const part of chunks(levelled, rowsPerStatementMax)) {
      const doc = json(part.map((p) => ({ e: p.environmentId, c: p.customerId, p: p.programId, l: p.level, s: p.sinceMs, n: p.nextCheckMs })));
      await tx`
        insert into customer_tiers as t (environment_id, customer_id, program_id, level, since, next_check_at)
        select u.e, u.c, u.p, u.l, to_timestamp(u.s / 1000), to_timestamp(u.n / 1000)
        from json_to_recordset((${doc}::text)::json) as u(e text, c text, p text, l text, s float8, n float8)
        on conflict (environment_id, customer_id, program_id) do update
        set level = excluded.level, since = excluded.since, next_check_at = excluded.next_check_at`;
    }
    for (const part of chunks(checksOnly, rowsPerStatementMax)) {
      const doc = json(part.map((p) => ({ e: p.environmentId, c: p.customerId, p: p.programId, n: p.nextCheckMs })));
      await tx`
        update customer_tiers t set next_check_at = to_timestamp(u.n / 1000)
        from json_to_recordset((${doc}::text)::json) as u(e text, c text, p text, n float8)
        where t.environment_id = u.e and t.customer_id = u.c and t.program_id = u.p`;
    }
  }

  /**
   * Customers holding each level of a tier program (projected tiers). Deleted and merged
   * customers hold nothing (their rows are dropped on delete and merge; a row projected before
   * that is left out here too).
   */
  async tierHolders(environmentId: string, programId: string): Promise<Record<string, number>> {
    const rows = await this.sql`
      select level, count(*)::int as n from customer_tiers t
      where t.environment_id = ${environmentId} and t.program_id = ${programId}
        and not exists (
          select 1 from customers c
          where c.environment_id = t.environment_id and c.id = t.customer_id and (c.deleted_at is not null or c.merged_into is not null))
      group by level`;
    return Object.fromEntries(rows.map((r) => [r.level as string, r.n as number]));
  }

  /**
   * Customer ids holding a level of a program, after `after`, a page at a time: with `levels`,
   * one of those; with `checkAfterMs`, only those without a downgrade check date at or before it.
   * Deleted and merged customers are left out (see tierHolders).
   */
  async tierHoldersOf(
    environmentId: string,
    programId: string,
    filter: { levels?: string[]; checkAfterMs?: number },
    after: string,
    limit: number,
  ): Promise<string[]> {
    const levels = filter.levels ?? null;
    const checkAfterMs = filter.checkAfterMs ?? null;
    const rows = await this.sql`
      select customer_id from customer_tiers t
      where t.environment_id = ${environmentId} and t.program_id = ${programId} and t.customer_id > ${after}
        and (${levels}::text[] is null or t.level = any(${levels}::text[]))
        and (${checkAfterMs}::float8 is null or t.next_check_at is null or t.next_check_at > to_timestamp(${checkAfterMs}::float8 / 1000))
        and not exists (
          select 1 from customers c
          where c.environment_id = t.environment_id and c.id = t.customer_id and (c.deleted_at is not null or c.merged_into is not null))
      order by customer_id limit ${limit}`;
    return rows.map((r) => r.customer_id as string);
  }

  /** The levels customers hold in a program that are not among `levels` (a removed level whose holders have not all moved). */
  async tierLevelsHeldBesides(environmentId: string, programId: string, levels: string[]): Promise<string[]> {
    const rows = await this.sql`
      select distinct level from customer_tiers t
      where t.environment_id = ${environmentId} and t.program_id = ${programId} and t.level <> all(${levels}::text[])
        and not exists (
          select 1 from customers c
          where c.environment_id = t.environment_id and c.id = t.customer_id and (c.deleted_at is not null or c.merged_into is not null))`;
    return rows.map((r) => r.level as string);
  }

  /** In fact order: the last change of an entry in the batch wins. */
  private async setSegmentMembers(tx: Tx, run: Array<Of<'segment_member.set'>>): Promise<void> {
    const rows = lastPerKey(run, (p) => `${pairKey(p.environmentId, p.segmentId)}|${p.customerId}`);
    const added = rows.filter((p) => p.member);
    const removed = rows.filter((p) => !p.member);
    for (const part of chunks(added, rowsPerStatementMax)) {
      const doc = json(part.map((p) => ({ e: p.environmentId, s: p.segmentId, c: p.customerId, t: p.atMs })));
      // Members of an erased customer are never (re)inserted. The actor journals an add only for
      // a customer not in the segment, so an add meeting a row is a membership that began again
      // (removed and added in one batch, the removal folded away above): it starts at the add.
      await tx`
        insert into segment_members as sm (environment_id, segment_id, customer_id, added_at)
        select u.e, u.s, u.c, to_timestamp(u.t / 1000)
        from json_to_recordset((${doc}::text)::json) as u(e text, s text, c text, t float8)
        where not exists (
          select 1 from customers c where c.environment_id = u.e and c.id = u.c and c.deleted_at is not null
        )
        on conflict (environment_id, segment_id, customer_id) do update set added_at = excluded.added_at
        where sm.added_at is distinct from excluded.added_at`;
    }
    for (const part of chunks(removed, rowsPerStatementMax)) {
      const doc = json(part.map((p) => ({ e: p.environmentId, s: p.segmentId, c: p.customerId })));
      await tx`
        delete from segment_members sm
        using json_to_recordset((${doc}::text)::json) as u(e text, s text, c text)
        where sm.environment_id = u.e and sm.segment_id = u.s and sm.customer_id = u.c`;
    }
  }

  private async addCampaignSpend(tx: Tx, run: Array<Of<'campaign.spent'>>): Promise<void> {
    const sums = new Map<string, { e: string; c: string; k: string; a: number }>();
    for (const p of run) {
      const key = `${pairKey(p.environmentId, p.campaignId)}|${p.currency}`;
      const cur = sums.get(key);
      if (cur === undefined) sums.set(key, { e: p.environmentId, c: p.campaignId, k: p.currency, a: p.amount });
      else cur.a += p.amount;
    }
    const doc = json([...sums.values()]);
    await tx`
      insert into campaign_spend as s (environment_id, campaign_id, currency, spent)
      select u.e, u.c, u.k, u.a from json_to_recordset((${doc}::text)::json) as u(e text, c text, k text, a bigint)
      on conflict (environment_id, campaign_id, currency) do update set spent = s.spent + excluded.spent`;
  }

  /** Members of a static segment, by customer id; `after` is the last id of the previous page. */
  async listSegmentMembers(
    environmentId: string,
    segmentId: string,
    q: { limit: number; after: string | null },
  ): Promise<Array<{ customerId: string; addedAtMs: number }>> {
    const rows = await this.sql`
      select customer_id, extract(epoch from added_at) * 1000 as added_at_ms from segment_members
      where environment_id = ${environmentId} and segment_id = ${segmentId} and (${q.after}::text is null or customer_id > ${q.after})
      order by customer_id limit ${q.limit}`;
    return rows.map((r) => ({ customerId: r.customer_id as string, addedAtMs: Math.round(Number(r.added_at_ms)) }));
  }

  /** One static segment membership (when the customer is a member), with its added_at. */
  async segmentMember(environmentId: string, segmentId: string, customerId: string): Promise<{ customerId: string; addedAtMs: number } | null> {
    const rows = await this.sql`
      select customer_id, extract(epoch from added_at) * 1000 as added_at_ms from segment_members
      where environment_id = ${environmentId} and segment_id = ${segmentId} and customer_id = ${customerId}`;
    const r = rows[0];
    return r === undefined ? null : { customerId: r.customer_id as string, addedAtMs: Math.round(Number(r.added_at_ms)) };
  }

  private async updateLedger(tx: Tx, run: Array<Of<'ledger.update'>>): Promise<void> {
    const rows = lastPerKey(run, (p) => pairKey(p.environmentId, p.id));
    for (const part of chunks(rows, rowsPerStatementMax)) {
      const doc = json(part.map((p) => ({ e: p.environmentId, i: p.id, r: p.remaining, s: p.status })));
      await tx`
        update ledger_entries l set remaining = u.r, status = coalesce(u.s, l.status)
        from json_to_recordset((${doc}::text)::json) as u(e text, i text, r bigint, s text)
        where l.environment_id = u.e and l.id = u.i`;
    }
  }

  private async upsertIssuances(tx: Tx, run: Array<Of<'issuance.upsert'>>): Promise<void> {
    const rows = newestPerKey(run, (p) => pairKey(p.environmentId, p.id));
    for (const part of chunks(rows, rowsPerStatementMax)) {
      const doc = json(
        part.map((p) => ({
          e: p.environmentId,
          i: p.id,
          rw: p.rewardId,
          c: p.customerId,
          s: p.status,
          st: p.sourceType,
          si: p.sourceId,
          ce: p.costEntryId,
          x: p.expiresAtMs,
          ra: p.redeemedAtMs,
          ca: p.cancelledAtMs,
          re: p.reason,
          v: p.version,
          at: p.createdAtMs,
        })),
      );
      await tx`
        insert into reward_issuances as r (environment_id, id, reward_id, customer_id, status, source_type, source_id, cost_entry_id,
          expires_at, redeemed_at, cancelled_at, reason, version, created_at)
        select u.e, u.i, u.rw, u.c, u.s, u.st, u.si, u.ce, to_timestamp(u.x / 1000), to_timestamp(u.ra / 1000),
               to_timestamp(u.ca / 1000), u.re, u.v, to_timestamp(u.at / 1000)
        from json_to_recordset((${doc}::text)::json) as u(e text, i text, rw text, c text, s text, st text, si text, ce text,
          x float8, ra float8, ca float8, re text, v int, at float8)
        on conflict (environment_id, id) do update
        set customer_id = excluded.customer_id, status = excluded.status, cost_entry_id = excluded.cost_entry_id, expires_at = excluded.expires_at,
            redeemed_at = excluded.redeemed_at, cancelled_at = excluded.cancelled_at, reason = excluded.reason,
            version = excluded.version
        where r.version < excluded.version`;
    }
  }

  /**
   * Reward issuances of an environment by id ascending (pending and refused rule requests are not
   * issuances yet or ever, and never listed); limit + 1 rows for paging. Rows are as of `atMs` (the
   * environment's clock): an issued row past its expires_at whose expiry the sweep has not recorded
   * yet reads `expired` with its version one on, exactly as the sweep will record it (domain/
   * rewards.ts asOf), and the status filter selects by that status, so `issued` lists none past
   * expires_at and `expired` lists them with the recorded ones, pages keyed by id as ever.
   */
  async listIssuances(
    environmentId: string,
    q: { limit: number; after: string | null; status: string | null; customerId: string | null; atMs: number },
  ): Promise<IssuanceRow[]> {
    const sql = this.sql;
    const at = sql`to_timestamp(${q.atMs}::float8 / 1000)`;
    const customer = q.customerId === null ? sql`` : sql`and customer_id = ${q.customerId}`;
    const after = q.after === null ? sql`` : sql`and id > ${q.after}`;
    const select = (status: postgres.PendingQuery<postgres.Row[]>) => sql`
      select ${issuanceColumnsAsOf(sql, at)} from reward_issuances
      where environment_id = ${environmentId} ${status} ${customer} ${after}
      order by id limit ${q.limit}`;
    let rows: postgres.RowList<postgres.Row[]>;
    if (q.status === null) rows = await select(sql`and status not in ('pending', 'refused')`);
    else if (q.status === 'issued') rows = await select(sql`and status = 'issued' and (expires_at is null or expires_at > ${at})`);
    else if (q.status === 'expired') {
      // The recorded ones in id order (the list index) merged with the lapsed ones: the few issued
      // rows past expires_at the sweep has not reached, from the lapsing index (migration 034), sorted.
      rows = await sql`
        select * from (
          (${select(sql`and status = 'expired'`)})
          union all
          (${select(sql`and status = 'issued' and expires_at <= ${at}`)})
        ) x order by id limit ${q.limit}`;
    } else rows = await select(sql`and status = ${q.status}`);
    return rows.map(issuanceRow);
  }

  /** One issuance as of `atMs` (the environment's clock), as listIssuances shows it. */
  async getIssuance(environmentId: string, id: string, atMs: number): Promise<IssuanceRow | null> {
    const sql = this.sql;
    const [row] = await sql`
      select ${issuanceColumnsAsOf(sql, sql`to_timestamp(${atMs}::float8 / 1000)`)} from reward_issuances
      where environment_id = ${environmentId} and id = ${id} and status not in ('pending', 'refused')`;
    return row ? issuanceRow(row) : null;
  }

  /** A customer's ledger entries, newest first; limit+1 rows for paging (keyset on created_at, id). */
  /** Newest first; `customerIds`: one customer, or several (an export: a survivor and the customers merged into it). */
  async listLedgerEntries(
    environmentId: string,
    customerIds: string | readonly string[],
    q: { limit: number; before: { createdAtMs: number; id: string } | null },
  ): Promise<LedgerRow[]> {
    const rows = await this.sql.unsafe(
      `select environment_id, id, customer_id, currency, type, status, amount::float8 as amount, remaining::float8 as remaining,
              ${ms('expires_at')} as expires_at_ms, ${ms('confirm_after')} as confirm_after_ms, reason, source_type, source_id,
              reverses_entry_id, ${ms('created_at')} as created_at_ms
       from ledger_entries
       where environment_id = $1 and customer_id = any($2::text[])
         and ($3::float8 is null or (created_at, id) < (to_timestamp($3::float8 / 1000), $4::text))
       order by created_at desc, id desc limit $5`,
      [environmentId, typeof customerIds === 'string' ? [customerIds] : [...customerIds], q.before?.createdAtMs ?? null, q.before?.id ?? '', q.limit],
    );
    return rows.map((r) => ({
      environmentId: r.environment_id as string,
      id: r.id as string,
      customerId: r.customer_id as string,
      currency: r.currency as string,
      type: r.type as string,
      status: r.status as string,
      amount: r.amount as number,
      remaining: r.remaining as number,
      expiresAtMs: (r.expires_at_ms as number | null) ?? null,
      confirmAfterMs: (r.confirm_after_ms as number | null) ?? null,
      reason: (r.reason as string | null) ?? null,
      sourceType: (r.source_type as string | null) ?? null,
      sourceId: (r.source_id as string | null) ?? null,
      reversesEntryId: (r.reverses_entry_id as string | null) ?? null,
      createdAtMs: r.created_at_ms as number,
    }));
  }

  /** The offset of the newest batch applied for the partition, or '0'. */
  async projectedOffset(partition: number): Promise<Offset> {
    const [row] = await this.sql`select "offset" from projection_offsets where partition = ${partition}`;
    return row ? (row.offset as string) : offsetZero;
  }

  /**
   * Customers of an environment by id ascending, after the `after` id (exclusive), optionally
   * only those with an external id. Returns up to limit + 1 rows: the extra one says there is
   * a next page. Erased customers are included (with deletedAtMs).
   */
  async listCustomers(
    environmentId: string,
    page: { limit: number; after: string | null; externalId?: string | null; withoutMerged?: boolean },
  ): Promise<CustomerRow[]> {
    const sql = this.sql;
    const rows = await sql`
      select ${sql.unsafe(customerColumns)} from customers
      where environment_id = ${environmentId}
      ${page.withoutMerged === true ? sql`and merged_into is null` : sql``}
      ${page.after === null ? sql`` : sql`and id > ${page.after}`}
      ${page.externalId == null ? sql`` : sql`and external_id = ${page.externalId}`}
      order by id
      limit ${page.limit + 1}`;
    return rows.map(customerRow);
  }

  async getCustomer(environmentId: string, id: string): Promise<CustomerRow | null> {
    const [row] = await this.sql`
      select ${this.sql.unsafe(customerColumns)} from customers where environment_id = ${environmentId} and id = ${id}`;
    return row ? customerRow(row) : null;
  }

  /** One event, with its customer's external id (spec 2.3: the caller's customer_id; null once erased). */
  async getEvent(environmentId: string, id: string): Promise<(EventRow & { customerExternalId: string | null }) | null> {
    const [row] = await this.sql`
      select e.environment_id, e.id, e.client_event_id, e.customer_id, e.name, ${this.sql.unsafe(ms('e.occurred_at'))} as occurred_at_ms,
        ${this.sql.unsafe(ms('e.received_at'))} as received_at_ms, e.properties, e.status, e.trust, e.source_type, e.source_id,
        c.external_id as customer_external_id
      from events e left join customers c on c.environment_id = e.environment_id and c.id = e.customer_id
      where e.environment_id = ${environmentId} and e.id = ${id}`;
    return row ? { ...eventRow(row), customerExternalId: (row.customer_external_id as string | null) ?? null } : null;
  }

  /**
   * The effects an event's sync answer carried: null when no such event is projected, `effects`
   * null when it was answered 202 (or recorded before answers were kept).
   */
  async eventAnswer(environmentId: string, id: string): Promise<{ effects: unknown[] | null } | null> {
    const [row] = await this.sql`select effects from events where environment_id = ${environmentId} and id = ${id}`;
    return row ? { effects: (row.effects as unknown[] | null) ?? null } : null;
  }

  /**
   * A customer's events (or several customers': a survivor and those merged into it), newest
   * first (received_at, then id, descending). With
   * beforeReceivedAtMs only older events; with beforeId as well, the keyset (receivedAtMs, id)
   * of the last row of the previous page, so events sharing a timestamp are neither lost nor
   * repeated. Returns up to limit + 1 rows.
   */
  async listCustomerEvents(
    environmentId: string,
    customerIds: string | readonly string[],
    page: { limit: number; beforeReceivedAtMs?: number; beforeId?: string },
  ): Promise<EventRow[]> {
    const sql = this.sql;
    const before =
      page.beforeReceivedAtMs === undefined
        ? sql``
        : page.beforeId === undefined
          ? sql`and received_at < to_timestamp(${page.beforeReceivedAtMs}::float8 / 1000)`
          : sql`and (received_at, id) < (to_timestamp(${page.beforeReceivedAtMs}::float8 / 1000), ${page.beforeId})`;
    const who =
      typeof customerIds === 'string' ? sql`customer_id = ${customerIds}` : sql`customer_id = any(${[...customerIds]}::text[])`;
    const rows = await sql`
      select ${sql.unsafe(eventColumns)} from events
      where environment_id = ${environmentId} and ${who} ${before}
      order by received_at desc, id desc
      limit ${page.limit + 1}`;
    return rows.map(eventRow);
  }

  async countCustomerEvents(environmentId: string, customerId: string): Promise<number> {
    const [row] = await this.sql`
      select count(*)::int as n from events where environment_id = ${environmentId} and customer_id = ${customerId}`;
    return row!.n as number;
  }

  /** The customer's aliases, oldest first. */
  async listAliases(environmentId: string, customerId: string): Promise<AliasRow[]> {
    const rows = await this.sql`
      select alias, kind, ${this.sql.unsafe(ms('created_at'))} as created_at_ms from customer_aliases
      where environment_id = ${environmentId} and customer_id = ${customerId}
      order by created_at, alias`;
    return rows.map((r) => ({
      environmentId,
      alias: r.alias as string,
      customerId,
      kind: r.kind as string,
      createdAtMs: r.created_at_ms as number,
    }));
  }
}
