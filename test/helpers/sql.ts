// Test databases for the SQL contract suites: real PostgreSQL (DATABASE_URL or the local test
// server) in a unique schema, or embedded PGlite in a temp dir, both migrated with migrate().
// Everything a call creates (schema, PGlite dir, connections) is removed by the test's teardown;
// a helper must never touch a schema it did not create.
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEmbeddedPostgres } from '../../src/persistence/embedded-pg.js';
import { dropSchema, migrate, openSql, type Sql } from '../../src/persistence/sql/db.js';

export type SqlKind = 'postgres' | 'pglite';
export const sqlKinds: SqlKind[] = ['postgres', 'pglite'];

export const testDatabaseUrl = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

export interface Teardown {
  teardown(fn: () => unknown): void;
}

export function uniqueSchema(prefix = 't'): string {
  return `${prefix}_${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`;
}

export async function sqlForTest(t: Teardown, kind: SqlKind): Promise<{ sql: Sql; schema: string }> {
  const schema = uniqueSchema();
  if (kind === 'postgres') {
    const sql = openSql({ url: testDatabaseUrl, schema, max: 4 });
    t.teardown(async () => {
      await dropSchema(sql, schema);
      await sql.end();
    });
    await migrate(sql, schema);
    return { sql, schema };
  }
  const dir = await mkdtemp(join(tmpdir(), 'pglite-test-'));
  const pg = await startEmbeddedPostgres(dir);
  const sql = openSql({ url: pg.url, schema, max: 1 });
  t.teardown(async () => {
    await sql.end();
    await pg.close();
    await rm(dir, { recursive: true, force: true });
  });
  await migrate(sql, schema);
  return { sql, schema };
}
