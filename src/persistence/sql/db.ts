// The SQL connection for both modes: PostgreSQL from DATABASE_URL, or PGlite served on a local
// socket (embedded mode) so the very same `postgres` driver code runs on both. Every connection
// sets search_path to the configured schema, which tests make unique per run.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import postgres from 'postgres';

export type Sql = postgres.Sql<Record<string, unknown>>;

export interface SqlOptions {
  url: string;
  schema: string;
  /** Pool size; PGlite serves one connection, so embedded mode uses 1. */
  max?: number;
}

export function openSql(opts: SqlOptions): Sql {
  return postgres(opts.url, {
    max: opts.max ?? 10,
    onnotice: () => {},
    connection: { search_path: opts.schema, application_name: 'loyalty-engine' },
    // bigint columns come back as strings by default; we store counts and minor units in bigint
    // and convert at the mapper, so keep the default and never lose precision silently.
  });
}

const migrationsDir = (() => {
  // src/persistence/sql/migrations, also when running from dist/: the .sql files are read from src.
  const here = dirname(fileURLToPath(import.meta.url));
  const fromDist = here.replace(/([/\\])dist\1src\1/, '$1src$1');
  return join(fromDist, 'migrations');
})();

/**
 * Creates the schema if needed and applies, in file-name order, every migrations/*.sql not yet
 * recorded in schema_migrations. Runs under an advisory lock so several nodes starting together
 * migrate once.
 */
export async function migrate(sql: Sql, schema: string): Promise<string[]> {
  const files = readdirSync(migrationsDir)
    .filter((f) => f.endsWith('.sql'))
    .sort();
  const applied: string[] = [];
  await sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(hashtext(${`migrate:${schema}`}))`;
    await tx.unsafe(`create schema if not exists "${schema}"`);
    await tx.unsafe(`set local search_path to "${schema}"`);
    await tx.unsafe(
      'create table if not exists schema_migrations (name text primary key, applied_at timestamptz not null default now())',
    );
    const done = new Set((await tx`select name from schema_migrations`).map((r) => r.name as string));
    for (const f of files) {
      if (done.has(f)) continue;
      await tx.unsafe(readFileSync(join(migrationsDir, f), 'utf8'));
      await tx`insert into schema_migrations (name) values (${f})`;
      applied.push(f);
    }
  });
  return applied;
}

export async function dropSchema(sql: Sql, schema: string): Promise<void> {
  await sql.unsafe(`drop schema if exists "${schema}" cascade`);
}

/** A transaction handle (sql.begin callback argument). */
export type Tx = postgres.TransactionSql<Record<string, unknown>>;

/** A jsonb column as a driver hands it: parsed already (postgres.js), or its text (PGlite, some casts). */
export function jsonColumn<T>(v: unknown): T {
  return (typeof v === 'string' ? JSON.parse(v) : v) as T;
}

// JSON.stringify writes U+0000 as \u0000 and an unpaired surrogate as \udXXX (a pair is written
// as itself), so these escapes, not preceded by an escaped backslash, are exactly the text jsonb
// refuses.
const escapedBad = /(\\+)u(?:0000|d[89a-f][0-9a-f]{2})/g;

/**
 * A value as a JSON document for `(${doc}::text)::json` or `::jsonb`, with U+FFFD in place of U+0000 and of
 * unpaired surrogates. The gateway refuses both, but a fact journaled before it did must not make
 * a projection cycle or a snapshot save fail forever (the journal keeps the original).
 */
export function jsonDocument(v: unknown): string {
  const s = JSON.stringify(v);
  // The regex scan costs a third of the stringify on large documents; almost none holds either.
  return s.includes('u0000') || s.includes('\\ud') ? s.replace(escapedBad, (m, bs: string) => (bs.length % 2 === 1 ? `${bs.slice(1)}\\ufffd` : m)) : s;
}
