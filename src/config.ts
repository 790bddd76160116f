// One zod schema for all configuration, read once from the environment at start-up.
// Defaults give embedded mode on :8080 with data under ./data. Nothing else reads process.env.
import { z } from 'zod';
import { limits } from './limits.js';

const bool = z
  .enum(['true', 'false', '1', '0', ''])
  .transform((v) => v === 'true' || v === '1');

export const configSchema = z.object({
  PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  HOST: z.string().default('0.0.0.0'),
  /** Internal gRPC: shard forwarding between nodes. */
  GRPC_PORT: z.coerce.number().int().min(0).max(65535).default(9090),
  /** Public gRPC API (events, match results, customer state). */
  PUBLIC_GRPC_PORT: z.coerce.number().int().min(0).max(65535).default(9091),
  /** Address other nodes use to reach this node's gRPC port. */
  ADVERTISE_HOST: z.string().default('127.0.0.1'),
  NODE_ID: z.string().min(1).max(64).default('node-1'),
  REDIS_URL: z.string().optional(),
  DATABASE_URL: z.string().optional(),
  /** Redis key prefix; tests use a unique one per run. */
  KEY_PREFIX: z.string().min(1).max(64).default('svc'),
  /** PostgreSQL schema for tables; tests use a unique one per run. */
  DB_SCHEMA: z.string().regex(/^[a-z_][a-z0-9_]*$/).max(63).default('public'),
  DATA_DIR: z.string().default('./data'),
  PARTITIONS: z.coerce.number().int().min(1).max(32768).default(limits.partitionsDefault),
  SIGNUP_ENABLED: bool.default(true),
  OIDC_ISSUER: z.string().optional(),
  OIDC_AUDIENCE: z.string().optional(),
  OIDC_JWKS_URL: z.string().url().optional(),
  OIDC_JWKS_FILE: z.string().optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  POOL_THREADS: z.coerce.number().int().min(1).max(64).default(2),
  /** fsync the embedded journal on every flush (default). Off only for throwaway benchmarks. */
  EMBEDDED_FSYNC: bool.default(true),
  /** Projection cycle: read-table lag for readers on other nodes vs. CPU per event (see projector.ts). */
  PROJECTOR_CYCLE_MS: z.coerce.number().int().min(5).max(10_000).default(limits.projectorCycleMs),
  /** Records acknowledged and not yet projected before ingestion waits for the projector (projector.ts). */
  PROJECTOR_LAG_MAX: z.coerce.number().int().min(10).default(limits.projectorLagRecordsMax),
  /** How long a held write waits before it is answered 429 rate_limited (under the forwarding deadline, 5 s). */
  PROJECTOR_LAG_WAIT_MS: z.coerce.number().int().min(0).max(4000).default(limits.projectorLagWaitMs),
  SNAPSHOT_EVERY_MS: z.coerce.number().int().min(50).default(limits.snapshotEveryMs),
  /** A partition with this many dirty actors saves them at the next sweep (1 s), before its cycle. */
  SNAPSHOT_DIRTY_ACTORS_MAX: z.coerce.number().int().min(1).default(limits.snapshotDirtyActorsMax),
  /** A partition with this many journal records since its last capture saves at the next sweep. */
  SNAPSHOT_TAIL_RECORDS_MAX: z.coerce.number().int().min(1).default(limits.snapshotTailRecordsMax),
  ACTIVE_ACTORS_MAX: z.coerce.number().int().min(100).default(limits.activeActorsMax),
  /**
   * V8 grows the old generation to (1 + N/100) x the live heap after a full collection (main.ts
   * sets --heap-growing-percent at start). V8's own factor goes up to 4x under a high allocation
   * rate, so a million resident customers peak at several times their live size; 0 keeps V8's.
   */
  HEAP_GROWING_PERCENT: z.coerce.number().int().min(0).max(1000).default(100),
  /** Uncounted events up to which a counter backfill runs inline in the request (else as a job). */
  COUNTER_BACKFILL_INLINE_MAX: z.coerce.number().int().min(0).default(2000),
  /** Events of the environment a backfill request reads to decide inline or job (no index on names). */
  COUNTER_BACKFILL_INLINE_SCAN_MAX: z.coerce.number().int().min(0).default(20_000),
});

export type Config = z.infer<typeof configSchema>;

export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const parsed = configSchema.safeParse(env);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
    throw new Error(`invalid configuration:\n  ${lines.join('\n  ')}`);
  }
  return parsed.data;
}

export function storageMode(config: Config): 'embedded' | 'external' {
  return config.REDIS_URL && config.DATABASE_URL ? 'external' : 'embedded';
}
