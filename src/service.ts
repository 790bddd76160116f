// Composition root: configuration -> storage adapters (external Redis + PostgreSQL, or embedded
// fsynced file journal + PGlite) -> engine, placement, projector -> gateway and gRPC servers.
// startService() is what `npm start` and the black-box tests run; stop() shuts down in reverse
// order (stop accepting, drain, flush, snapshot, release leases, close storage).
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { Engine } from './actors/engine.js';
import { ClusterPlacement } from './cluster/placement.js';
import { type Config, storageMode } from './config.js';
import { AttributeCatalog } from './catalog/attributes.js';
import { EnvironmentClocks } from './catalog/clock.js';
import { CurrencyCatalog } from './catalog/currencies.js';
import { testClockRoutes } from './gateway/handlers/test-clock.js';
import { DueWork } from './jobs/due-work.js';
import { RuleCatalog } from './catalog/rules.js';
import { RulesContexts } from './catalog/rules-context.js';
import { TierProgramCatalog } from './catalog/tier-programs.js';
import { BudgetAllowances } from './catalog/campaign-budgets.js';
import { CampaignCatalog } from './catalog/campaigns.js';
import { SegmentCatalog } from './catalog/segments.js';
import { campaignRoutes } from './gateway/handlers/campaigns.js';
import { segmentRoutes } from './gateway/handlers/segments.js';
import { ledgerRoutes } from './gateway/handlers/ledger.js';
import { rulesRoutes } from './gateway/handlers/rules.js';
import { tierProgramRoutes } from './gateway/handlers/tier-programs.js';
import { attributeRoutes } from './gateway/handlers/attributes.js';
import { customerRoutes } from './gateway/handlers/customers.js';
import { eventRoutes } from './gateway/handlers/events.js';
import { membershipRoutes } from './gateway/handlers/memberships.js';
import { tenancyRoutes } from './gateway/handlers/tenancy.js';
import { createGateway, type Gateway } from './gateway/server.js';
import { ForwardClient, ForwardServer } from './grpc/forwarding.js';
import { createPublicGrpcServer, type PublicGrpcServer } from './grpc/public-server.js';
import { startEmbeddedPostgres } from './persistence/embedded-pg.js';
import { FileJournal } from './persistence/file/file-journal.js';
import { MemoryBus } from './persistence/memory/bus.js';
import { MemoryLeases } from './persistence/memory/leases.js';
import { MemoryMembership } from './persistence/memory/membership.js';
import type { Bus, Journal, Leases, Membership } from './persistence/ports.js';
import { createRedis, quitQuietly } from './persistence/redis/connection.js';
import { RedisBus } from './persistence/redis/redis-bus.js';
import { RedisJournal } from './persistence/redis/redis-journal.js';
import { RedisLeases } from './persistence/redis/redis-leases.js';
import { RedisMembership } from './persistence/redis/redis-membership.js';
import { migrate, openSql, type Sql } from './persistence/sql/db.js';
import { PgIdempotencyStore } from './persistence/sql/idempotency-store.js';
import { PgReadModel } from './persistence/sql/read-model.js';
import { PgSnapshotStore } from './persistence/sql/snapshot-store.js';
import { Projector } from './projector/projector.js';
import { Authenticator } from './tenancy/authenticator.js';
import { TenancyService, tenancyOptionsFromConfig } from './tenancy/service.js';
import { WorkerPool } from './workers/pool.js';

export interface Service {
  httpPort: number;
  grpcPort: number;
  publicGrpcPort: number;
  mode: 'embedded' | 'external';
  gateway: Gateway;
  engine: Engine;
  placement: ClusterPlacement;
  stop(): Promise<void>;
}

interface Storage {
  journal: Journal;
  leases: Leases;
  membership: Membership;
  bus: Bus;
  sql: Sql;
  close(): Promise<void>;
}

async function openStorage(config: Config): Promise<Storage> {
  if (storageMode(config) === 'external') {
    const redis = createRedis(config.REDIS_URL!);
    const journal = new RedisJournal(redis, config.KEY_PREFIX);
    const leases = new RedisLeases(redis, config.KEY_PREFIX);
    const membership = new RedisMembership(redis, config.KEY_PREFIX);
    const bus = new RedisBus(redis, config.KEY_PREFIX);
    const sql = openSql({ url: config.DATABASE_URL!, schema: config.DB_SCHEMA });
    return {
      journal,
      leases,
      membership,
      bus,
      sql,
      close: async () => {
        await bus.close().catch(() => {});
        await journal.close().catch(() => {});
        await sql.end({ timeout: 5 }).catch(() => {});
        await quitQuietly(redis);
      },
    };
  }
  mkdirSync(config.DATA_DIR, { recursive: true });
  const pg = await startEmbeddedPostgres(join(config.DATA_DIR, 'pg'));
  const leases = new MemoryLeases();
  const journal = await FileJournal.open(join(config.DATA_DIR, 'journal'), {
    currentEpoch: (p) => leases.currentEpoch(p),
    fsync: config.EMBEDDED_FSYNC,
  });
  const sql = openSql({ url: pg.url, schema: config.DB_SCHEMA, max: 1 });
  const bus = new MemoryBus();
  return {
    journal,
    leases,
    membership: new MemoryMembership(),
    bus,
    sql,
    close: async () => {
      await journal.close().catch(() => {});
      await sql.end({ timeout: 5 }).catch(() => {});
      await bus.close().catch(() => {});
      await pg.close();
    },
  };
}

export async function startService(config: Config, logger: Logger): Promise<Service> {
  const mode = storageMode(config);
  const storage = await openStorage(config);
  const { sql } = storage;
  await migrate(sql, config.DB_SCHEMA);

  const snapshots = new PgSnapshotStore(sql);
  const idempotency = new PgIdempotencyStore(sql);
  const readModel = new PgReadModel(sql);
  const tenancy = new TenancyService(sql, tenancyOptionsFromConfig(config, storage.bus));
  const authenticator = new Authenticator(sql, {
    bus: storage.bus,
    customerTokens: tenancy.customerTokens,
    onError: (err) => logger.warn({ err }, 'credential revocation poll failed'),
  });
  await authenticator.start();
  const pool = new WorkerPool(config.POOL_THREADS);
  const attributes = new AttributeCatalog(sql, storage.bus);
  await attributes.start();
  const currencies = new CurrencyCatalog(sql, storage.bus);
  await currencies.start();
  const rules = new RuleCatalog(sql, storage.bus);
  await rules.start();
  const tiers = new TierProgramCatalog(sql, storage.bus, currencies);
  await tiers.start();
  const segments = new SegmentCatalog(sql, storage.bus);
  await segments.start();
  const campaigns = new CampaignCatalog(sql, storage.bus, {
    segmentExists: async (env, name) => (await segments.byName(env, name)) !== null,
    currencyExists: async (env, key) => (await currencies.all(env)).some((c) => c.key === key),
  });
  await campaigns.start();
  // Chunks of campaign budgets this node leased; given back when a campaign changes and at stop.
  const budgets = new BudgetAllowances(sql);
  campaigns.onChanged = (env) => {
    void budgets.release(env).catch((err: unknown) => logger.warn({ err }, 'budget release failed'));
  };
  const rulesContexts = new RulesContexts(rules, currencies, tiers, segments, campaigns);
  const clocks = new EnvironmentClocks(sql, storage.bus);
  await clocks.start();
  const now = (env: string) => clocks.now(env);
  // Expired idempotency results are purged in batches; the index keeps this cheap.
  const purgeTimer = setInterval(() => {
    void idempotency.purgeExpired().catch((err: unknown) => logger.warn({ err }, 'idempotency purge failed'));
  }, 60_000);
  purgeTimer.unref();

  const projector = new Projector(readModel, storage.journal, logger);
  const forwardServerHolder: { port: number } = { port: 0 };
  const forwardClient = new ForwardClient();
  const placement = new ClusterPlacement({
    node: { nodeId: config.NODE_ID, grpcAddress: `${config.ADVERTISE_HOST}:${config.GRPC_PORT}`, startedAtMs: Date.now() },
    partitions: config.PARTITIONS,
    journal: storage.journal,
    snapshots,
    leases: storage.leases,
    membership: storage.membership,
    projector,
    logger,
    snapshotEveryMs: config.SNAPSHOT_EVERY_MS,
    activeActorsMax: config.ACTIVE_ACTORS_MAX,
  });
  const engine = new Engine(config.PARTITIONS, placement, forwardClient, storage.journal);
  placement.attach(engine);

  // Peers forward to us as soon as we hold leases, so the shard server listens first.
  const forwardServer = new ForwardServer({ host: config.HOST, port: config.GRPC_PORT, handler: (payload) => engine.executeForwarded(payload) });
  forwardServerHolder.port = await forwardServer.start();
  projector.start();
  const dueWork = new DueWork({ sql, engine, currencies, tiers, now, drainProjector: () => projector.drain(), logger });
  dueWork.start();
  await placement.start();

  const gateway = createGateway({
    routes: [
      ...tenancyRoutes({ tenancy }),
      ...membershipRoutes({ sql }),
      ...eventRoutes({
        engine,
        readModel,
        drainProjector: () => projector.drain(),
        nowMs: now,
        rules: (env) => rulesContexts.get(env),
        budgets,
      }),
      ...segmentRoutes({ segments, engine, now, members: readModel, drainProjector: () => projector.drain() }),
      ...campaignRoutes({ campaigns, drainProjector: () => projector.drain() }),
      ...attributeRoutes({ attributes }),
      ...ledgerRoutes({ engine, now, currencies, tiers, readModel, drainProjector: () => projector.drain() }),
      ...testClockRoutes({ clocks, runDue: (env, nowMs) => dueWork.runForEnvironment(env, nowMs) }),
      ...rulesRoutes({ rules, pool, campaignExists: (env, id) => campaigns.exists(env, id) }),
      ...tierProgramRoutes({ tiers, currencies }),
      ...customerRoutes({
        engine,
        now,
        checkAttributes: (env, attrs) => attributes.check(env, attrs),
        readModel,
        drainProjector: () => projector.drain(),
        mintCustomerToken: (req) => tenancy.customerTokens.mint(req),
        segments: (env) => segments.all(env),
      }),
    ],
    authenticate: authenticator.authenticate,
    idempotency,
    logger,
    ready: async () => {
      const [db, workers, journal] = await Promise.all([
        sql`select 1`.then(
          () => true,
          () => false,
        ),
        pool.healthy(1000),
        storage.journal.last(0).then(
          () => true,
          () => false,
        ),
      ]);
      const partitions = placement.ownedCount > 0;
      return { ok: db && workers && journal && partitions, checks: { database: db, journal, workers, partitions_owned: String(placement.ownedCount) } };
    },
  });
  const httpPort = await gateway.listen(config.HOST, config.PORT);
  const publicGrpc: PublicGrpcServer = createPublicGrpcServer((req) => gateway.invoke(req));
  const publicGrpcPort = await publicGrpc.listen(config.HOST, config.PUBLIC_GRPC_PORT);
  logger.info({ httpPort, grpcPort: forwardServerHolder.port, publicGrpcPort, mode, node: config.NODE_ID }, 'service started');

  let stopping: Promise<void> | null = null;
  return {
    httpPort,
    grpcPort: forwardServerHolder.port,
    publicGrpcPort,
    mode,
    gateway,
    engine,
    placement,
    stop: () => {
      stopping ??= (async () => {
        clearInterval(purgeTimer);
        await gateway.close();
        await publicGrpc.close(2000);
        await dueWork.stop();
        await placement.stop();
        await budgets.release(null).catch((err: unknown) => logger.warn({ err }, 'budget release failed'));
        await projector.stop();
        await forwardServer.stop();
        forwardClient.close();
        await authenticator.stop();
        await pool.close();
        await storage.close();
      })();
      return stopping;
    },
  };
}
