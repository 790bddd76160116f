// Black-box test harness: starts the real service in-process on free ports against the real
// Redis and PostgreSQL, with a unique key prefix and schema per service, removed afterwards.
// Gives a tiny HTTP client and a signed-up tenant (PAT, test env, secret key).
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import type { Test } from 'tap';
import { type Config, loadConfig } from '../../src/config.js';
import { dropSchema, openSql } from '../../src/persistence/sql/db.js';
import { type Service, startService } from '../../src/service.js';
import { deleteKeysUnder } from './redis.js';

export const redisUrl = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
export const databaseUrl = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

export function uniqueName(prefix: string): string {
  return `${prefix}_${randomBytes(5).toString('hex')}`;
}

export interface Storage {
  schema: string;
  prefix: string;
}

/** A fresh schema + key prefix, dropped/deleted when the test ends. */
export function storageFor(t: Test): Storage {
  const name = uniqueName('t');
  t.teardown(async () => {
    const sql = openSql({ url: databaseUrl, schema: 'public', max: 1 });
    await dropSchema(sql, name).catch(() => {});
    await sql.end();
    const redis = new Redis(redisUrl);
    await deleteKeysUnder(redis, name);
    await redis.quit();
  });
  return { schema: name, prefix: name };
}

/** The environment of a server process spawned on this test's schema and key prefix (external mode). */
export function serverEnv(storage: Storage, redis: string, extra: Record<string, string>): Record<string, string> {
  return { REDIS_URL: redis, DATABASE_URL: databaseUrl, DB_SCHEMA: storage.schema, KEY_PREFIX: storage.prefix, ...extra };
}

/** Embedded mode (what `npm start` runs: no REDIS_URL or DATABASE_URL) with its data under `dataDir`; ports as configFor. */
export function embeddedConfig(dataDir: string): Config {
  return loadConfig({ PORT: '0', GRPC_PORT: '0', PUBLIC_GRPC_PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir, PARTITIONS: '16', LOG_LEVEL: 'silent', POOL_THREADS: '1' });
}

/**
 * Every port is 0: the kernel picks, the service reports (and advertises) what it bound. A port
 * picked free here and bound later can be taken in between by a parallel test's outgoing
 * connection (EADDRINUSE, seen in a full run).
 */
export async function configFor(storage: Storage, overrides: Record<string, string> = {}): Promise<Config> {
  return loadConfig({
    PORT: '0',
    GRPC_PORT: '0',
    PUBLIC_GRPC_PORT: '0',
    HOST: '127.0.0.1',
    REDIS_URL: redisUrl,
    DATABASE_URL: databaseUrl,
    DB_SCHEMA: storage.schema,
    KEY_PREFIX: storage.prefix,
    PARTITIONS: '16',
    LOG_LEVEL: 'silent',
    POOL_THREADS: '1',
    ...overrides,
  });
}

export class Client {
  constructor(
    readonly base: string,
    readonly headers: Record<string, string> = {},
  ) {}

  with(headers: Record<string, string>): Client {
    return new Client(this.base, { ...this.headers, ...headers });
  }

  async request(
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<{ status: number; body: any; headers: Headers }> {
    const init: RequestInit = { method, headers: { ...this.headers, ...headers } };
    if (body !== undefined) {
      init.body = typeof body === 'string' ? body : JSON.stringify(body);
      (init.headers as Record<string, string>)['content-type'] ??= 'application/json';
    }
    const res = await fetch(this.base + path, init);
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      // not JSON (metrics)
    }
    return { status: res.status, body: parsed, headers: res.headers };
  }

  get(path: string, headers?: Record<string, string>) {
    return this.request('GET', path, undefined, headers);
  }
  post(path: string, body?: unknown, headers?: Record<string, string>) {
    return this.request('POST', path, body ?? {}, headers);
  }
  patch(path: string, body: unknown, headers?: Record<string, string>) {
    return this.request('PATCH', path, body, headers);
  }
  delete(path: string, headers?: Record<string, string>) {
    return this.request('DELETE', path, undefined, headers);
  }
}

export interface Tenant {
  pat: string;
  testEnv: string;
  liveEnv: string;
  orgId: string;
  secretKey: string;
  /** The id (key_...) of that secret key. */
  secretKeyId: string;
  /** PAT client acting in the test environment. */
  admin: Client;
  /** Secret-key client of the test environment. */
  server: Client;
}

let keyCounter = 0;
export function idem(): Record<string, string> {
  return { 'idempotency-key': `k-${process.pid}-${Date.now()}-${++keyCounter}` };
}

export async function signUp(anon: Client, email = `${uniqueName('u')}@example.com`): Promise<Tenant> {
  const s = await anon.post('/v1/auth/signup', { email, name: 'Tester', organization_name: 'Acme Games' }, idem());
  if (s.status !== 201) throw new Error(`signup failed: ${s.status} ${JSON.stringify(s.body)}`);
  const pat = s.body.token.token as string;
  const testEnv = s.body.environments.find((e: { name: string }) => e.name === 'test').id as string;
  const liveEnv = s.body.environments.find((e: { name: string }) => e.name === 'live').id as string;
  const admin = anon.with({ authorization: `Bearer ${pat}`, 'x-service-environment': testEnv });
  const k = await admin.post('/v1/api_keys', { kind: 'secret', name: 'server' }, idem());
  if (k.status !== 201) throw new Error(`api key failed: ${k.status} ${JSON.stringify(k.body)}`);
  const secretKey = k.body.token as string;
  return {
    pat,
    testEnv,
    liveEnv,
    orgId: s.body.organization.id,
    secretKey,
    secretKeyId: k.body.id as string,
    admin,
    server: anon.with({ authorization: `Bearer ${secretKey}` }),
  };
}

export interface Running {
  service: Service;
  anon: Client;
  config: Config;
}

/** Starts the service for a test; stopped at teardown. */
export async function startForTest(t: Test, opts: { storage?: Storage; env?: Record<string, string> } = {}): Promise<Running> {
  const storage = opts.storage ?? storageFor(t);
  const config = await configFor(storage, opts.env);
  const service = await startService(config, pino({ level: 'silent' }));
  t.teardown(() => service.stop());
  return { service, anon: new Client(`http://127.0.0.1:${service.httpPort}`), config };
}
