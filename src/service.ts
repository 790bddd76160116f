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
import { TierMoves } from './jobs/tier-moves.js';
import { RewardDueWork } from './jobs/reward-due-work.js';
import { RewardCatalog } from './catalog/rewards.js';
import { rewardRoutes } from './gateway/handlers/rewards.js';
import { RuleCatalog } from './catalog/rules.js';
import { RulesContexts } from './catalog/rules-context.js';
import { TierProgramCatalog } from './catalog/tier-programs.js';
import { ChallengeCatalog } from './catalog/challenges.js';
import { challengeRoutes } from './gateway/handlers/challenges.js';
import { CatalogEnds } from './jobs/catalog-ends.js';
import { AuditLog } from './persistence/sql/audit-log.js';
import { ChallengeReadModel } from './persistence/sql/challenge-read-model.js';
import { CounterCatalog, CountersContexts } from './catalog/counters.js';
import { counterRoutes } from './gateway/handlers/counters.js';
import { CounterBackfill } from './jobs/counter-backfill.js';
import { CountersBarrier } from './cluster/counters-barrier.js';
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
import { EventIdClaims } from './gateway/event-id-claims.js';
import { membershipRoutes } from './gateway/handlers/memberships.js';
import { tenancyRoutes } from './gateway/handlers/tenancy.js';
import { matchRoutes } from './gateway/handlers/matches.js';
import { MatchProfileStore } from './matches/change-sets.js';
import { MatchResults } from './matches/results.js';
import { createGateway, type Gateway } from './gateway/server.js';
import { ForwardClient, ForwardServer } from './grpc/forwarding.js';
import { createPublicGrpcServer, type PublicGrpcServer } from './grpc/public-server.js';
import { startEmbeddedPostgres } from './persistence/embedded-pg.js';
import { DataDirLock } from './persistence/file/data-dir-lock.js';
import { FileJournal } from './persistence/file/file-journal.js';
import { MemoryBus } from './persistence/memory/bus.js';
import { MemoryLeases } from './persistence/memory/leases.js';
import { MemoryLocks } from './persistence/memory/locks.js';
import { MemoryMembership } from './persistence/memory/membership.js';
import type { Bus, EventIds, Journal, Leases, Locks, Membership } from './persistence/ports.js';
import { createRedis, quitQuietly } from './persistence/redis/connection.js';
import { RedisBus } from './persistence/redis/redis-bus.js';
import { RedisJournal } from './persistence/redis/redis-journal.js';
import { RedisLeases } from './persistence/redis/redis-leases.js';
import { RedisLocks } from './persistence/redis/redis-locks.js';
import { RedisEventIds } from './persistence/redis/redis-event-ids.js';
import { RedisMembership } from './persistence/redis/redis-membership.js';
import { migrate, openSql, type Sql } from './persistence/sql/db.js';
import { purgeCreateCalls } from './persistence/sql/create-calls.js';
import { PgIdempotencyStore } from './persistence/sql/idempotency-store.js';
import { PgEventIds } from './persistence/sql/event-ids.js';
import { PgReadModel } from './persistence/sql/read-model.js';
import { PgSharedLimits } from './persistence/sql/shared-limits.js';
import { PgSnapshotStore } from './persistence/sql/snapshot-store.js';
import { Projector } from './projector/projector.js';
import { Authenticator } from './tenancy/authenticator.js';
import { roleNow, TenancyService, tenancyOptionsFromConfig } from './tenancy/service.js';
import { simulationSubject } from './gateway/simulation-subject.js';
import { Scheduler } from './jobs/scheduler.js';
import { limits } from './limits.js';
import { Teardown } from './util/teardown.js';
import { WorkerPool } from './workers/pool.js';

export interface Service {
  httpPort: number;
  grpcPort: number;
  publicGrpcPort: number;
  mode: 'embedded' | 'external';
  gateway: Gateway;
  engine: Engine;
  placement: ClusterPlacement;
  /** The issuance sweep (expiry and stock reconciliation), for tests that cannot wait a minute. */
  rewardDue: RewardDueWork;
  /** The due-work scheduler (sweep() is one minute's pass), for tests that cannot wait a minute. */
  scheduler: Scheduler;
  stop(): Promise<void>;
}

interface Storage {
  journal: Journal;
  leases: Leases;
  /** Cluster-wide named locks (merges of one environment). */
  locks: Locks;
  /** The environment-wide register of client event ids. */
  eventIds: EventIds;
  membership: Membership;
  bus: Bus;
  sql: Sql;
  close(): Promise<void>;
}

async function openStorage(config: Config, logger: Logger): Promise<Storage> {
  if (storageMode(config) === 'external') {
    const redis = createRedis(config.REDIS_URL!);
    const journal = new RedisJournal(redis, config.KEY_PREFIX);
    const leases = new RedisLeases(redis, config.KEY_PREFIX);
    const locks = new RedisLocks(redis, config.KEY_PREFIX);
    const eventIds = new RedisEventIds(redis, config.KEY_PREFIX);
    const membership = new RedisMembership(redis, config.KEY_PREFIX);
    const bus = new RedisBus(redis, config.KEY_PREFIX);
    const sql = openSql({ url: config.DATABASE_URL!, schema: config.DB_SCHEMA });
    return {
      journal,
      leases,
      locks,
      eventIds,
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
  // Before anything under DATA_DIR is opened: a second process on it is refused here (README).
  const lock = await DataDirLock.acquire(config.DATA_DIR, {
    onWait: (holder, ageMs) =>
      logger.warn(
        { dataDir: config.DATA_DIR, holder, refreshedMsAgo: Math.round(ageMs) },
        `the data directory is locked; watching whether its holder is alive (a lock not refreshed for ${limits.dataDirLockStaleMs / 1000} s is taken over)`,
      ),
  });
  if (lock.tookOver !== null) {
    const { holder, ageMs, waitedMs } = lock.tookOver;
    logger.warn({ dataDir: config.DATA_DIR, holder, refreshedMsAgo: Math.round(ageMs), waitedMs }, 'took over the data directory lock of a process that died');
  }
  // A start that fails from here on gives the lock back, once what it opened is closed (PGlite
  // that fails to close keeps it: it goes stale when this process ends).
  const giveBack = async (err: unknown): Promise<never> => {
    await lock.release().catch(() => {});
    throw err;
  };
  const pg = await startEmbeddedPostgres(join(config.DATA_DIR, 'pg')).catch(giveBack);
  const leases = new MemoryLeases();
  const journal = await FileJournal.open(join(config.DATA_DIR, 'journal'), {
    currentEpoch: (p) => leases.currentEpoch(p),
    fsync: config.EMBEDDED_FSYNC,
  }).catch(async (err: unknown) => {
    await pg.close();
    return giveBack(err);
  });
  const sql = openSql({ url: pg.url, schema: config.DB_SCHEMA, max: 1 });
  const bus = new MemoryBus();
  return {
    journal,
    leases,
    // One node: the lock only has to exclude this process's own merges.
    locks: new MemoryLocks(),
    // In PGlite, which does not fsync: see the README's embedded-mode limits.
    eventIds: new PgEventIds(sql),
    membership: new MemoryMembership(),
    bus,
    sql,
    close: async () => {
      await journal.close().catch(() => {});
      await sql.end({ timeout: 5 }).catch(() => {});
      await bus.close().catch(() => {});
      // The lock goes once PGlite is closed: the next start on DATA_DIR need not wait. (When
      // closing fails it stays, and goes stale once this process ends.)
      await pg.close();
      await lock.release();
    },
  };
}

/**
 * Starts every part, in order. When a part fails to start, the parts already started are stopped
 * (newest first) before the error is thrown: nothing is left listening, holding leases or
 * connections. stop() runs the same undo list.
 */
export async function startService(config: Config, logger: Logger): Promise<Service> {
  const teardown = new Teardown((err, step) => logger.warn({ err, step }, 'stopping a part of the service failed'));
  try {
    return await startParts(config, logger, teardown);
  } catch (err) {
    // What failed to stop is logged by the teardown; the start's own error is the one to report.
    await teardown.run().catch(() => {});
    throw err;
  }
}

async function startParts(config: Config, logger: Logger, teardown: Teardown): Promise<Service> {
  const mode = storageMode(config);
  const storage = await openStorage(config, logger);
  teardown.add('storage', () => storage.close());
  const { sql } = storage;
  await migrate(sql, config.DB_SCHEMA);

  const snapshots = new PgSnapshotStore(sql);
  const idempotency = new PgIdempotencyStore(sql);
  const readModel = new PgReadModel(sql);
  const tenancy = new TenancyService(sql, tenancyOptionsFromConfig(config, storage.bus));
  const pool = new WorkerPool(config.POOL_THREADS);
  teardown.add('worker pool', () => pool.close());
  const authenticator = new Authenticator(sql, {
    bus: storage.bus,
    customerTokens: tenancy.customerTokens,
    onError: (err) => logger.warn({ err }, 'credential revocation poll failed'),
  });
  await authenticator.start();
  teardown.add('authenticator', () => authenticator.stop());
  const attributes = new AttributeCatalog(sql, storage.bus);
  await attributes.start();
  const currencies = new CurrencyCatalog(sql, storage.bus);
  await currencies.start();
  const rules = new RuleCatalog(sql, storage.bus);
  await rules.start();
  // Holder counts and an edit's move of its holders read the projected customer_tiers table
  // (projector drained first); the move runs through the actors (tierMoves, below).
  const tiers = new TierProgramCatalog(
    sql,
    storage.bus,
    currencies,
    async (env, program) => {
      await projector.drain();
      return readModel.tierHolders(env, program.id);
    },
    (env, program, move): Promise<void> => tierMoves.move(env, program, move),
    // One SQL connection (embedded mode): a move's claim is this process's alone (see claimMove).
    { oneConnection: storageMode(config) !== 'external' },
  );
  await tiers.start();
  const rewards = new RewardCatalog(sql, currencies);
  // Completion actions must name existing currencies, rewards and tier programs.
  const challenges = new ChallengeCatalog(sql, storage.bus, {
    currencies: (env) => currencies.all(env),
    rewards: (env, ids) => rewards.existingIds(env, ids),
    tierPrograms: (env) => tiers.all(env),
  });
  await challenges.start();
  const challengeReadModel = new ChallengeReadModel(sql);
  const counters = new CounterCatalog(sql, storage.bus);
  await counters.start();
  const countersContexts = new CountersContexts(counters);
  const segments = new SegmentCatalog(sql, storage.bus);
  await segments.start();
  const campaigns = new CampaignCatalog(sql, storage.bus, {
    segmentExists: async (env, name) => (await segments.byName(env, name)) !== null,
    currencyExists: async (env, key) => (await currencies.all(env)).some((c) => c.key === key),
    // Challenges join a campaign through their campaign_id: while one that is not ended names it, it cannot be deleted.
    otherUsers: async (env, campaignId, db) => ({
      challenge: (await db`select id from challenges where environment_id = ${env} and campaign_id = ${campaignId} and status <> 'ended' order by id`).map(
        (r) => r.id as string,
      ),
    }),
  });
  await campaigns.start();
  // Chunks of campaign budgets this node leased; given back when a campaign changes and at stop.
  const budgets = new BudgetAllowances(sql);
  campaigns.onChanged = (env) => {
    void budgets.release(env).catch((err: unknown) => logger.warn({ err }, 'budget release failed'));
  };
  const rulesContexts = new RulesContexts(rules, currencies, tiers, challenges, segments, campaigns);
  // Rule limits shared by every customer: counted in SQL (PostgreSQL or PGlite), for every node.
  const sharedLimits = new PgSharedLimits(sql);
  const clocks = new EnvironmentClocks(sql, storage.bus);
  await clocks.start();
  const now = (env: string) => clocks.now(env);
  const matchProfiles = new MatchProfileStore(sql, storage.bus);
  await matchProfiles.start();
  // Expired idempotency results are purged in batches, and so are the records of what create
  // requests made once no run of theirs can come any more; the indexes keep this cheap.
  const purgeTimer = setInterval(() => {
    void idempotency.purgeExpired().catch((err: unknown) => logger.warn({ err }, 'idempotency purge failed'));
    void purgeCreateCalls(sql).catch((err: unknown) => logger.warn({ err }, 'create calls purge failed'));
  }, 60_000);
  purgeTimer.unref();
  teardown.add('idempotency purge', () => clearInterval(purgeTimer));

  const projector = new Projector(readModel, storage.journal, logger, { cycleMs: config.PROJECTOR_CYCLE_MS, lagRecordsMax: config.PROJECTOR_LAG_MAX });
  const forwardClient = new ForwardClient();
  teardown.add('forwarding client', () => forwardClient.close());
  // The shard server listens before this node joins, so peers can forward to it as soon as it
  // holds leases; it advertises the port it bound (GRPC_PORT 0: one the kernel picked). A call
  // that arrives before the engine exists fails, and the peer routes it again.
  let engineOrNull: Engine | null = null;
  // A new counter definition's barrier (every node settles the events sent before it, then the
  // read tables catch up with the journal), also passed by a campaign PATCH that adds a budget:
  // node messages share the forwarding stream.
  const countersBarrier = new CountersBarrier({
    nodeId: config.NODE_ID,
    membership: storage.membership,
    forwarder: forwardClient,
    settleLocal: async (env) => {
      counters.forget(env);
      // No engine yet: no event command was sent here.
      if (engineOrNull !== null) await engineOrNull.settled();
    },
    partitions: config.PARTITIONS,
    journal: storage.journal,
    projectedOffsets: async () =>
      new Map((await sql`select partition, "offset" from projection_offsets`).map((r) => [r.partition as number, r.offset as string])),
    drainProjector: () => projector.drain(),
  });
  const forwardServer = new ForwardServer({
    host: config.HOST,
    port: config.GRPC_PORT,
    handler: (payload) => {
      if (CountersBarrier.isMessage(payload)) return countersBarrier.handle(payload);
      if (engineOrNull === null) throw new Error('this node is still starting');
      return engineOrNull.executeForwarded(payload);
    },
  });
  const grpcPort = await forwardServer.start();
  teardown.add('forwarding server', () => forwardServer.stop());
  const placement = new ClusterPlacement({
    node: { nodeId: config.NODE_ID, grpcAddress: `${config.ADVERTISE_HOST}:${grpcPort}`, startedAtMs: Date.now() },
    partitions: config.PARTITIONS,
    journal: storage.journal,
    snapshots,
    leases: storage.leases,
    membership: storage.membership,
    projector,
    logger,
    snapshotEveryMs: config.SNAPSHOT_EVERY_MS,
    snapshotDirtyActorsMax: config.SNAPSHOT_DIRTY_ACTORS_MAX,
    snapshotTailRecordsMax: config.SNAPSHOT_TAIL_RECORDS_MAX,
    activeActorsMax: config.ACTIVE_ACTORS_MAX,
  });
  // Ingestion waits while this node's read tables are more than PROJECTOR_LAG_MAX records behind.
  const engine = new Engine(config.PARTITIONS, placement, forwardClient, storage.journal, {
    gate: projector,
    maxWaitMs: config.PROJECTOR_LAG_WAIT_MS,
  });
  placement.attach(engine);
  engineOrNull = engine;

  projector.start();
  teardown.add('projector', () => projector.stop());
  // The moves tier program edits owe their holders: run by the edit, finished by the scheduler when one stopped.
  const tierMoves: TierMoves = new TierMoves({ engine, readModel, catalog: tiers, now, drainProjector: () => projector.drain(), logger });
  const backfill = new CounterBackfill({ sql, engine, counters, pool, barrier: (env) => countersBarrier.pass(env), now, logger, inlineEventsMax: config.COUNTER_BACKFILL_INLINE_MAX, inlineScanMax: config.COUNTER_BACKFILL_INLINE_SCAN_MAX });
  const dueWork = new DueWork({ sql, engine, currencies, tiers, now, drainProjector: () => projector.drain(), logger });
  const rewardDue = new RewardDueWork({ sql, engine, rewards, now, drainProjector: () => projector.drain(), logger });
  const challengeEnds = new CatalogEnds('challenge ends', challenges, now, (n) => ({ customerIds: [], challengesEnded: n }));
  const campaignEnds = new CatalogEnds('campaign ends', campaigns, now, (n) => ({ customerIds: [], challengesEnded: 0, campaignsEnded: n }));
  // One scheduler for all due work; a test clock's advance runs the same jobs for its environment.
  // Tier moves run last: a long move of a big program does not hold up ledger and reward due work.
  const scheduler = new Scheduler([challengeEnds, campaignEnds, dueWork, rewardDue, tierMoves], logger);
  // Campaign budget chunks leased by this node go back once its partitions are released.
  // A failed release is only logged: its chunks stay reserved, so the budget is under-used, never
  // exceeded (as after a crash).
  teardown.add('campaign budgets', () => budgets.release(null).catch((err: unknown) => logger.warn({ err }, 'budget release failed')));
  // A start that fails halfway has released what it acquired (placement.stop is safe then too).
  teardown.add('placement', () => placement.stop());
  await placement.start();
  // Due work runs through the engine: it starts once partitions are placed and stops before.
  scheduler.start();
  teardown.add('scheduler', async () => {
    await scheduler.stop();
    await backfill.idle();
  });

  // One register of event ids for POST /v1/events and match players: their claims share a round.
  const eventIds = new EventIdClaims(storage.eventIds);
  const matchResults = new MatchResults({
    sql,
    engine,
    eventIds,
    profiles: matchProfiles,
    nowMs: now,
    rules: (env) => rulesContexts.get(env),
    counters: { timeZone: (env) => challenges.timeZone(env), context: (env, timeZone) => countersContexts.get(env, timeZone) },
    budgets,
    sharedLimits,
    afterEvent: (env, customerId, effects) => rewardDue.afterEvent(env, customerId, effects),
  });
  const gateway = createGateway({
    routes: [
      ...tenancyRoutes({ tenancy }),
      ...membershipRoutes({ sql, signInConfigured: tenancy.signInConfigured }),
      ...eventRoutes({
        engine,
        eventIds,
        readModel,
        drainProjector: () => projector.drain(),
        nowMs: now,
        rules: (env) => rulesContexts.get(env),
        afterEvent: (env, customerId, effects) => rewardDue.afterEvent(env, customerId, effects),
        counters: (env, timeZone) => countersContexts.get(env, timeZone),
        budgets,
        sharedLimits,
      }),
      ...counterRoutes({
        counters,
        backfill,
        provenEmpty: async (env) => {
          try {
            await countersBarrier.pass(env);
          } catch (err) {
            logger.warn({ err }, 'a new counter definition stays backfilling: the barrier did not pass');
            return false;
          }
          return (await sql`select exists (select 1 from events where environment_id = ${env}) as e`)[0]!.e !== true;
        },
      }),
      ...segmentRoutes({ segments, engine, now, members: readModel, drainProjector: () => projector.drain() }),
      ...campaignRoutes({
        campaigns,
        drainProjector: () => projector.drain(),
        now,
        eventsSettled: (env) =>
          countersBarrier.pass(env).catch((err: unknown) => {
            logger.warn({ err }, 'a campaign budget was not added: the barrier did not pass');
            throw err;
          }),
      }),
      ...attributeRoutes({ attributes }),
      ...ledgerRoutes({ engine, now, currencies, tiers, readModel, drainProjector: () => projector.drain() }),
      ...testClockRoutes({
        clocks,
        runDue: (env, nowMs) => scheduler.runForEnvironment(env, nowMs),
      }),
      ...challengeRoutes({
        challenges,
        engine,
        now,
        currencies,
        tiers,
        readModel: challengeReadModel,
        audit: new AuditLog(sql),
        drainProjector: () => projector.drain(),
        campaignExists: (env, id) => campaigns.exists(env, id),
        campaignGates: (env) => campaigns.gates(env),
        segments: (env) => segments.all(env),
        // A reevaluation's completion requests rewards as an event's does: delivered after the ack.
        afterCommand: (env, customerId, effects) => rewardDue.afterEvent(env, customerId, effects),
      }),
      ...rulesRoutes({
        rules,
        pool,
        campaignExists: (env, id) => campaigns.exists(env, id),
        subject: (env, ref, ruleId, event) => simulationSubject({ engine, now, counters, segments, tiers }, env, ref, ruleId, event),
        campaigns: { gates: (env) => campaigns.gates(env), nowMs: now, budgetLeft: (env, keys) => budgets.remaining(env, keys) },
        sharedLimits,
        references: {
          currencies: (env) => currencies.all(env),
          tierPrograms: (env) => tiers.all(env),
          segments: (env) => segments.all(env),
          counters: (env) => counters.all(env),
          rewards: (env, ids) => rewards.existingIds(env, ids),
          challenges: (env, ids) => challenges.existingIds(env, ids),
        },
      }),
      ...tierProgramRoutes({ tiers, currencies }),
      ...rewardRoutes({ engine, now, rewards, currencies, tiers, readModel, drainProjector: () => projector.drain() }),
      ...customerRoutes({
        engine,
        now,
        checkAttributes: (env, attrs) => attributes.check(env, attrs),
        readModel,
        challengeProgress: (env, id) => challengeReadModel.customerProgress(env, id),
        drainProjector: () => projector.drain(),
        mintCustomerToken: (req) => tenancy.customerTokens.mint(req),
        counterNames: (env) => counters.all(env),
        segments: (env) => segments.all(env),
        forgetIdempotentAnswers: (env, customerIds) => idempotency.forget(env, customerIds),
        eraseEventIds: (env, records) => storage.eventIds.erase(env, records),
        mergeLock: { locks: storage.locks, ttlMs: limits.mergeLockTtlMs, waitMs: limits.mergeLockWaitMs },
        tiers,
        releaseIssuances: async (env, ids) => {
          for (const id of ids) await rewards.release(env, id);
        },
      }),
      ...matchRoutes({ profiles: matchProfiles, results: matchResults, nowMs: now, roleNow: (org, user) => roleNow(sql, org, user) }),
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
      // Partitions still replaying count: a call for one starts its replay at once and waits for it.
      const partitions = placement.ownedCount + placement.recoveringCount > 0;
      return {
        ok: db && workers && journal && partitions,
        checks: {
          database: db,
          journal,
          workers,
          partitions_owned: placement.ownedCount,
          partitions_recovering: placement.recoveringCount,
        },
      };
    },
  });
  const httpPort = await gateway.listen(config.HOST, config.PORT);
  teardown.add('gateway', () => gateway.close());
  const publicGrpc: PublicGrpcServer = createPublicGrpcServer((req) => gateway.invoke(req));
  const publicGrpcPort = await publicGrpc.listen(config.HOST, config.PUBLIC_GRPC_PORT);
  teardown.add('public gRPC server', () => publicGrpc.close(2000));
  logger.info({ httpPort, grpcPort, publicGrpcPort, mode, node: config.NODE_ID }, 'service started');

  return {
    httpPort,
    grpcPort,
    publicGrpcPort,
    mode,
    gateway,
    engine,
    placement,
    rewardDue,
    scheduler,
    // Stop accepting, let due work finish, hand the partitions back (flush, snapshot, release),
    // then close the projector, servers, caches and storage: the start's parts, newest first.
    stop: () => teardown.run(),
  };
}
