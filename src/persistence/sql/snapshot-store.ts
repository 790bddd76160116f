// PgSnapshotStore: the SnapshotStore port on PostgreSQL or embedded PGlite (same driver code).
// save() is ONE transaction: key deletes, snapshot upserts, key upserts, forward-only checkpoint.
// Rows travel as a few array parameters expanded by unnest(): one statement per table whatever
// the row count, and one prepared statement per query shape (never one per row count).
// Never a round trip per row; never moves a checkpoint backwards.
import {
  compareOffsets, type KeyRow, type Offset, offsetZero, type SnapshotRow, type SnapshotSave,
  type SnapshotStore } from '../ports.js';
import type { Sql, Tx } from './db.js';
import { offsetKeySql } from './offsets.js';
import { chunks, pipelined, rowsPerStatementMax } from './pipelined.js';

/**
 * Rows per statement: each statement's JSON document is built (and copied into the socket buffer)
 * in one go on the event loop, so a small save (a sweep after a burst: a thousand actors) goes in
 * statements of rowsPerStatementMin rows, letting requests in between them instead of stalling
 * them for tens of milliseconds; a large one (sustained load: tens of thousands of new customers)
 * in fewer, larger statements (a quarter of the rows each, up to rowsPerStatementMax): the
 * statements are pipelined (pipelined.ts), but each waits for a loop turn before the next document
 * is built, and a slower save keeps dirty actors (unpassivatable) in memory longer. Measured:
 * 1M new customers peaked at 758-845 MB with this rule, at 853-1,155 MB with 500 rows always.
 */
const rowsPerStatementMin = 500;
const statementsPerTableMax = 4;
/**
 * And never more than rowsPerStatementMax rows (pipelined.ts) or this many document bytes:
 * snapshot rows carry their payload in base64.
 */
const docBytesMax = 400_000;

function rowsPerStatement(rows: number): number {
  return Math.min(rowsPerStatementMax, Math.max(rowsPerStatementMin, Math.ceil(rows / statementsPerTableMax)));
}

/** Consecutive parts of at most `size` rows whose estimated document bytes stay within docBytesMax. */
function chunksWithin<T>(xs: T[], size: number, bytesOf: (x: T) => number): T[][] {
  const out: T[][] = [];
  let start = 0;
  let bytes = 0;
  for (let i = 0; i < xs.length; i++) {
    const b = bytesOf(xs[i]!);
    if (i > start && (i - start >= size || bytes + b > docBytesMax)) {
      out.push(xs.slice(start, i));
      start = i;
      bytes = 0;
    }
    bytes += b;
  }
  if (start < xs.length) out.push(xs.slice(start));
  return out;
}

/** A snapshot row's share of its statement's document: base64 payload and the row's ids. */
const snapshotDocBytes = (r: SnapshotRow) => Math.ceil(r.payload.byteLength / 3) * 4 + 120;

/** Last row per key wins: ON CONFLICT DO UPDATE refuses to touch one row twice in a statement. */
function lastPerKey<T>(xs: T[], key: (x: T) => string): T[] {
  const m = new Map<string, T>();
  for (const x of xs) {
    const k = key(x);
    m.delete(k); // keep the position of the last write
    m.set(k, x);
  }
  return [...m.values()];
}

const pairKey = (env: string, k: string) => `${env.length}:${env}${k}`;

function toBytes(b: unknown): Uint8Array {
  const buf = b as Buffer;
  return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
}

export class PgSnapshotStore implements SnapshotStore {
  constructor(private readonly sql: Sql) {}

  save(
    partition: number,
    checkpoint: Offset,
    rows: SnapshotRow[],
    keys: KeyRow[],
    keysRemoved: Array<{ environmentId: string; key: string }>,
  ): Promise<void> {
    // Unfenced (tests, administration): the greatest epoch passes any claim.
    return this.saveMany([{ partition, epoch: Number.MAX_SAFE_INTEGER, checkpoint, rows, keys, keysRemoved }]).then(() => {});
  }

  async claim(partition: number, epoch: number): Promise<Offset> {
    const [row] = await this.sql`
      insert into partition_checkpoints as c (partition, checkpoint, epoch) values (${partition}, ${offsetZero}, ${epoch})
      on conflict (partition) do update set epoch = greatest(c.epoch, excluded.epoch)
      returning checkpoint`;
    return row!.checkpoint as string;
  }

  async saveMany(all: ReadonlyArray<SnapshotSave>): Promise<Array<'saved' | 'fenced'>> {
    if (all.length === 0) return [];
    return this.sql.begin(async (tx) => {
      // Fencing first: lock the partitions' rows and drop items written under an older epoch.
      // Every owner's claim() created its partition's row; the insert is for a save without one.
      const partitions = [...new Set(all.map((it) => it.partition))].sort((a, b) => a - b);
      const read = async () =>
        new Map(
          (
            await tx`select partition, epoch::float8 as epoch from partition_checkpoints
                     where partition = any(${partitions}::int[]) order by partition for update`
          ).map((r) => [r.partition as number, r.epoch as number]),
        );
      let claimed = await read();
      if (claimed.size < partitions.length) {
        await tx`
          insert into partition_checkpoints (partition, checkpoint)
          select p, ${offsetZero} from unnest(${partitions.filter((p) => !claimed.has(p))}::int[]) as p
          on conflict do nothing`;
        claimed = await read();
      }
      const outcome = all.map((it) => (it.epoch < (claimed.get(it.partition) ?? 0) ? 'fenced' : 'saved'));
      const items = all.filter((_, i) => outcome[i] === 'saved');
      if (items.length > 0) await this.write(tx, items);
      return outcome;
    });
  }

  private async write(tx: Tx, items: ReadonlyArray<SnapshotSave>): Promise<void> {
    const snaps = lastPerKey(
      items.flatMap((it) => it.rows),
      (r) => pairKey(r.environmentId, r.customerId),
    );
    const keyRows = lastPerKey(
      items.flatMap((it) => it.keys),
      (k) => pairKey(k.environmentId, k.key),
    );
    const keysRemoved = items.flatMap((it) => it.keysRemoved);
    // One checkpoint per partition: the greatest offered (forward-only is also checked in SQL).
    const checkpoints = new Map<number, Offset>();
    for (const it of items) {
      const seen = checkpoints.get(it.partition);
      if (seen === undefined || compareOffsets(it.checkpoint, seen) > 0) checkpoints.set(it.partition, it.checkpoint);
    }
    // Deletes first: when a merge moves a key from one customer to another in the same save,
    // the old owner lists it in keysRemoved and the new owner in keys; the new owner must win.
    for (const part of chunks(keysRemoved, rowsPerStatement(keysRemoved.length))) {
      await tx`
        delete from customer_keys k
        using unnest(${part.map((r) => r.environmentId)}::text[], ${part.map((r) => r.key)}::text[]) as u(e, k)
        where k.environment_id = u.e and k.key = u.k`;
    }
    // Rows travel as one JSON document per statement (native JSON.stringify; payloads base64),
    // not as escaped text arrays. A NUL in a key still fails the statement (jsonb refuses it).
    // The row statements are pipelined (pipelined.ts): a save of many statements costs one round
    // trip, and requests get a turn between two statements' documents.
    const st = pipelined(tx);
    for (const part of chunksWithin(snaps, rowsPerStatement(snaps.length), snapshotDocBytes)) {
      const doc = JSON.stringify(
        part.map((r) => ({
          e: r.environmentId,
          c: r.customerId,
          p: r.partition,
          b: Buffer.from(r.payload.buffer, r.payload.byteOffset, r.payload.byteLength).toString('base64'),
        })),
      );
      await st.tx`
        insert into actor_snapshots (environment_id, customer_id, partition, payload, updated_at)
        select u.e, u.c, u.p, decode(u.b, 'base64'), now()
        from json_to_recordset((${doc}::text)::json) as u(e text, c text, p int, b text)
        on conflict (environment_id, customer_id) do update
        set partition = excluded.partition, payload = excluded.payload, updated_at = excluded.updated_at`;
    }
    for (const part of chunks(keyRows, rowsPerStatement(keyRows.length))) {
      const doc = JSON.stringify(part.map((k) => ({ e: k.environmentId, k: k.key, c: k.customerId, p: k.partition })));
      await st.tx`
        insert into customer_keys (environment_id, key, customer_id, partition)
        select u.e, u.k, u.c, u.p from json_to_recordset((${doc}::text)::json) as u(e text, k text, c text, p int)
        on conflict (environment_id, key) do update
        set customer_id = excluded.customer_id, partition = excluded.partition`;
    }
    await st.flush();
    await tx.unsafe(
      `insert into partition_checkpoints as c (partition, checkpoint, updated_at)
       select u.p, u.o, now() from unnest($1::int[], $2::text[]) as u(p, o)
       on conflict (partition) do update set checkpoint = excluded.checkpoint, updated_at = excluded.updated_at
       where ${offsetKeySql('excluded.checkpoint')} > ${offsetKeySql('c.checkpoint')}`,
      [[...checkpoints.keys()], [...checkpoints.values()]],
    );
  }

  async load(environmentId: string, customerIds: string[]): Promise<SnapshotRow[]> {
    if (customerIds.length === 0) return [];
    const found = await this.sql`
      select customer_id, partition, payload from actor_snapshots
      where environment_id = ${environmentId} and customer_id = any(${customerIds}::text[])`;
    return found.map((r) => ({
      environmentId,
      customerId: r.customer_id as string,
      partition: r.partition as number,
      payload: toBytes(r.payload),
    }));
  }

  async lookupKeys(environmentId: string, keys: string[]): Promise<KeyRow[]> {
    if (keys.length === 0) return [];
    const found = await this.sql`
      select key, customer_id, partition from customer_keys
      where environment_id = ${environmentId} and key = any(${keys}::text[])`;
    return found.map((r) => ({
      environmentId,
      key: r.key as string,
      customerId: r.customer_id as string,
      partition: r.partition as number,
    }));
  }

  async partitionKeys(partition: number): Promise<Array<{ environmentId: string; key: string }>> {
    const rows = await this.sql`select environment_id, key from customer_keys where partition = ${partition}`;
    return rows.map((r) => ({ environmentId: r.environment_id as string, key: r.key as string }));
  }

  async checkpoint(partition: number): Promise<Offset> {
    const [row] = await this.sql`select checkpoint from partition_checkpoints where partition = ${partition}`;
    return row ? (row.checkpoint as string) : offsetZero;
  }
}
