// Customer routes: create, read, patch (If-Match), delete (erases personal data), list (read model,
// or the actor itself when filtered by external_id), state view, export, balances, aliases with
// merge, client tokens and customer sessions. Reads of one customer go to its actor, so they see
// every acknowledged write; lists read the projected tables.
import { z } from 'zod';
import type { Engine } from '../../actors/engine.js';
import type { EngineCommand, ReplyView, Target } from '../../actors/partition.js';
import type { CustomerView } from '../../actors/views.js';
import { tierProgramOf } from '../../catalog/rules-context.js';
import type { MergeHandover } from '../../domain/customer.js';
import { recordCount, recordedEvents } from '../../domain/seen-events.js';
import { type SegmentDef, segmentNames } from '../../domain/segments.js';
import type { TierProgram } from '../../domain/tiers.js';
import { ApiError } from '../../errors/api-error.js';
import { customerIdPartition } from '../../ids.js';
import { limits } from '../../limits.js';
import { type ErasedEventRecord, LockBusyError, type LockHold, LockLostError, type Locks, withLock } from '../../persistence/ports.js';
import type { LedgerRow } from '../../persistence/sql/read-model.js';
import type { Principal } from '../../tenancy/types.js';
import { etagHeader, expectedVersion } from '../etag.js';
import { pageQuerySchema, pageRequest, toPage } from '../pagination.js';
import { type AnyRoute, environmentIdOf, type RequestContext, route } from '../route.js';
import { aliasWire, balanceWire, customerWire, iso, ledgerEntryWire, unwrap } from '../wire.js';
import {
  aliasAddedSchema,
  balancesSchema,
  clientTokenSchema,
  customerExportSchema,
  customerSchema,
  customerSessionSchema,
  customerStateSchema,
  pageOf,
} from '../wire-schemas.js';

const attributesSchema = z
  .record(z.string().min(1).max(128), z.unknown())
  .refine((a) => Object.keys(a).length <= limits.attributeKeysMax, `At most ${limits.attributeKeysMax} attributes.`)
  .meta({ maxProperties: limits.attributeKeysMax })
  .describe(`At most ${limits.attributeKeysMax} keys; the customer's attributes, serialized as JSON, at most ${limits.attributesBytesMax} bytes.`);

const createBody = z.strictObject({
  external_id: z.string().min(1).max(limits.externalIdCharsMax),
  attributes: attributesSchema.default({}),
});
const patchBody = z.strictObject({
  attributes: attributesSchema.describe(
    `Keys to set; a null value removes the key. The result holds at most ${limits.attributeKeysMax} keys and, serialized as JSON, at most ${limits.attributesBytesMax} bytes (a patch that shrinks it is accepted).`,
  ),
  expected_version: z.number().int().min(1).optional(),
});
const aliasBody = z.strictObject({
  alias: z
    .string()
    .min(1)
    .max(limits.externalIdCharsMax)
    .describe(`A customer holds at most ${limits.aliasesPerCustomerMax} aliases, those reaching it through merges included.`),
  kind: z.literal('anonymous').default('anonymous'),
});
const listQuery = pageQuerySchema.extend({ external_id: z.string().min(1).max(limits.externalIdCharsMax).optional() });
/** A customer token's lifetime: 15 minutes unless the minting call names another, up to a day. */
const ttlSeconds = z
  .number()
  .int()
  .min(60)
  .max(limits.customerTokenLifetimeMsMax / 1000)
  .optional()
  .describe(`The token's lifetime in seconds, 60 to ${limits.customerTokenLifetimeMsMax / 1000} (default ${limits.customerTokenLifetimeMsDefault / 1000}).`);
const ttlMsOf = (s: number | undefined) => (s === undefined ? undefined : s * 1000);

const sessionBody = z.strictObject({
  grant_type: z.literal('secret_key'),
  customer_id: z.string().min(1).max(limits.externalIdCharsMax).describe("The customer's service id (cust_...) or external id."),
  ttl_seconds: ttlSeconds,
});
const clientTokenBody = z.strictObject({ ttl_seconds: ttlSeconds });

export interface CustomerReadModel {
  listCustomers(
    environmentId: string,
    q: { limit: number; after: string | null; externalId?: string | null; withoutMerged?: boolean },
  ): Promise<
    Array<{
      id: string;
      externalId: string | null;
      attributes: Record<string, unknown>;
      version: number;
      createdAtMs: number;
      updatedAtMs: number;
      deletedAtMs: number | null;
    }>
  >;
  listLedgerEntries(environmentId: string, customerIds: string | readonly string[], q: { limit: number; before: null }): Promise<LedgerRow[]>;
  /** Events of these customers (a survivor and the customers merged into it), newest first. */
  listCustomerEvents(
    environmentId: string,
    customerIds: readonly string[],
    q: { limit: number },
  ): Promise<
    Array<{ id: string; name: string; occurredAtMs: number; receivedAtMs: number; properties: Record<string, unknown> | null }>
  >;
}

export interface CustomerDeps {
  engine: Engine;
  /** The environment's clock (the test clock in test environments). */
  now(environmentId: string): number | Promise<number>;
  /** Checks attribute values against the environment's attribute definitions. */
  checkAttributes(environmentId: string, attributes: Record<string, unknown>): Promise<void>;
  readModel: CustomerReadModel;
  /** Every challenge progress record of these customers (export: the survivor and those merged into it); absent: none. */
  challengeProgress?(
    environmentId: string,
    customerIds: readonly string[],
  ): Promise<Array<{ challengeId: string; periodKey: string; count: number; completedAtMs: number | null }>>;
  drainProjector(): Promise<void>;
  /** Names of the environment's counter definitions by id (the state view's counters); absent: none. */
  counterNames?(environmentId: string): Promise<ReadonlyArray<{ id: string; name: string }>>;
  mintCustomerToken(req: {
    environmentId: string;
    customerId: string;
    externalId: string;
    credentialId: string;
    /** Absent: the default lifetime (15 minutes). */
    ttlMs?: number | undefined;
  }): Promise<{ token: string; expiresAtMs: number }>;
  /** The environment's segments (state view: static memberships + dynamic matches, by name). */
  segments?: (environmentId: string) => Promise<SegmentDef[]>;
  /**
   * Deletes the stored Idempotency-Key answers about these customers in every scope of the
   * environment (API keys' and each person's), so a replay after the deletion cannot hand back
   * erased data; absent: nothing to erase.
   */
  forgetIdempotentAnswers?(environmentId: string, customerIds: readonly string[]): Promise<number>;
  /** Remembers a deleted customer's recorded events in the environment's register (EventIds.erase). */
  eraseEventIds(environmentId: string, records: ReadonlyArray<ErasedEventRecord>): Promise<void>;
  /**
   * The cluster-wide lock that merges of one environment hold (Redis in external mode; in memory
   * embedded, where there is one node), with its ttl and how long a merge waits for it
   * (limits.mergeLockTtlMs, limits.mergeLockWaitMs).
   */
  mergeLock: { locks: Locks; ttlMs: number; waitMs: number };
  /** The environment's tier programs: a survivor taking over a merged customer's ledger is re-placed. */
  tiers: { all(environmentId: string): Promise<TierProgram[]> };
  /**
   * Gives back the reward units of issuances a delete ended (RewardCatalog.release: once each);
   * absent, or a crash before it: the stock reconciler gives them back within minutes.
   */
  releaseIssuances?(environmentId: string, issuanceIds: readonly string[]): Promise<void>;
}

/** Events included in an export; older ones are summarized by events_since. */
const exportEventsMax = 1000;
/** Ledger entries included in an export; older ones are summarized by ledger_entries_since. */
const exportEntriesMax = 1000;


/**
 * A customer token may only touch its own customer. Another customer of its environment is
 * forbidden; an id from another tenant or environment is resource_not_found, as for every caller.
 */
async function checkSelf(deps: CustomerDeps, env: string, p: Principal, customerId: string): Promise<void> {
  if (p.kind !== 'customer' || p.customerId === customerId) return;
  await view(deps, env, idTarget(customerId));
  throw new ApiError('forbidden');
}

function idTarget(id: string): Target {
  if (customerIdPartition(id) < 0) throw new ApiError('resource_not_found', { message: 'No customer with this id.', param: 'id' });
  return { by: 'id', id };
}

/** `callId`: the request's (RequestContext.callId), for a command the actors remember (actors/calls.ts). */
async function call(deps: CustomerDeps, env: string, target: Target, command: EngineCommand, callId?: string) {
  return unwrap(await deps.engine.execute({ env, target, command, nowMs: await deps.now(env), callId }));
}

/**
 * The customer, only if it belongs to `env`. The engine runs a by-id call on whichever actor is in
 * memory under that id, whatever its environment, so every by-id use starts here (tenant isolation).
 * `param` is the request field that named it (a 404 resource_not_found names it).
 */
async function view(deps: CustomerDeps, env: string, target: Target, param = 'id', tierPrograms?: TierProgram[]): Promise<CustomerView> {
  let reply: Awaited<ReturnType<typeof call>>;
  try {
    reply = await call(deps, env, target, tierPrograms === undefined ? { kind: 'customer.view' } : { kind: 'customer.view', tierPrograms });
  } catch (err) {
    if (param !== 'id' && err instanceof ApiError && err.code === 'resource_not_found') {
      throw new ApiError('resource_not_found', { message: err.message, param });
    }
    throw err;
  }
  if (reply.kind !== 'customer') throw new ApiError('internal_error');
  if (reply.customer.environmentId !== env) {
    throw new ApiError('resource_not_found', { message: 'No customer with this id.', param });
  }
  return reply.customer;
}

/**
 * `aliases`: the customer's own and those of the customers merged into it (they route to it, as
 * the export lists them).
 */
function stateWire(
  c: CustomerView,
  aliases: ReadonlyArray<{ alias: string; kind: string; createdAtMs: number }>,
  counterNames: ReadonlyArray<{ id: string; name: string }>,
  segments: string[],
) {
  const counters: Record<string, number> = {};
  for (const d of counterNames) counters[d.name] = c.counters?.[d.id] ?? 0;
  return {
    customer: customerWire(c),
    balances: c.balances.map(balanceWire),
    // A program the customer was never placed in shows the level it qualifies for now (since null).
    tiers: [
      ...c.tiers.map((t) => ({ program_id: t.programId, level: t.level, since: iso(t.sinceMs) })),
      ...c.qualifiedTiers.map((t) => ({ program_id: t.programId, level: t.level, since: null })),
    ],
    segments,
    counters,
    challenges: c.challenges.map((x) => ({ challenge_id: x.challengeId, period_key: x.periodKey, count: x.count, status: x.status })),
    issuances: c.issuances.map((i) => ({ id: i.id, reward_id: i.rewardId, status: i.status, expires_at: iso(i.expiresAtMs) })),
    // Beyond the spec's fields: items granted by rules (item.grant), sorted by item key.
    inventory: c.inventory,
    aliases: aliases.map((a) => aliasWire(a, c.id)),
  };
}

const read = ['secret', 'pat', 'session'] as const;
const readOrCustomer = ['secret', 'pat', 'session', 'customer'] as const;

/**
 * The customers merged into `survivorId`, depth first through the merges into them: `visit` runs
 * on each (its survivor named) and answers the customers merged into it in turn. Their ids.
 */
async function eachMerged(
  survivorId: string,
  mergedFrom: readonly string[],
  visit: (id: string, survivorId: string) => Promise<readonly string[]>,
): Promise<string[]> {
  const found = await Promise.all(mergedFrom.map(async (id) => [id, ...(await eachMerged(id, await visit(id, survivorId), visit))]));
  return found.flat();
}

/**
 * Erases the customers merged into `survivorId` (depth first through earlier merges) and releases
 * the aliases each still held (its external id went to its survivor at the merge; aliases it had
 * added itself stayed bound to it, and would otherwise route to an erased customer for good);
 * returns their ids.
 */
function eraseMerged(deps: CustomerDeps, env: string, survivorId: string, mergedFrom: readonly string[]): Promise<string[]> {
  return eachMerged(survivorId, mergedFrom, async (id, survivor) => {
    const r = await eraseRecordedEvents(deps, env, { by: 'id', id }, (eventsErased) => ({ kind: 'customer.erase_merged', survivorId: survivor, eventsErased }));
    if (r.kind !== 'erased') return [];
    await releaseAliases(deps, env, id, r.aliases);
    return r.mergedFrom;
  });
}

/** What a merged customer still holds about the person: its aliases (they route to the survivor) and attributes. */
interface MergedCustomer {
  id: string;
  aliases: ReadonlyArray<{ alias: string; kind: string; createdAtMs: number }>;
  attributes: Record<string, unknown>;
}

/** The customers merged into `survivorId`, depth first through the merges into them. */
async function mergedInto(deps: CustomerDeps, env: string, survivorId: string, mergedFrom: readonly string[]): Promise<MergedCustomer[]> {
  const found = new Map<string, MergedCustomer>();
  const ids = await eachMerged(survivorId, mergedFrom, async (id, survivor) => {
    const r = await call(deps, env, { by: 'id', id }, { kind: 'customer.merged_from', survivorId: survivor });
    if (r.kind !== 'merged_from') return [];
    found.set(id, { id, aliases: r.aliases, attributes: r.attributes });
    return r.mergedFrom;
  });
  return ids.flatMap((id) => found.get(id) ?? []);
}

/**
 * The aliases that reach `c` through merges: those the customers merged into it (and into those)
 * added themselves and still hold, bound to them. The customer's own are in c.aliases.
 */
async function mergedAliases(deps: CustomerDeps, env: string, c: CustomerView): Promise<MergedCustomer['aliases']> {
  if (c.mergedFrom.length === 0) return [];
  return (await mergedInto(deps, env, c.id, c.mergedFrom)).flatMap((m) => m.aliases);
}

/**
 * The newest `max` of rows sorted newest first (`rows` holds up to max + 1 of them), and the
 * instant from which every row is included (null when none was left out). Rows sharing the
 * oldest included instant with a row left out are left out too (a batch's events share one),
 * unless that would leave nothing.
 */
function newestWithBoundary<R>(rows: readonly R[], max: number, atMs: (r: R) => number): { shown: readonly R[]; sinceMs: number | null } {
  if (rows.length <= max) return { shown: rows, sinceMs: null };
  let shown = rows.slice(0, max);
  const edge = atMs(shown[shown.length - 1]!);
  if (atMs(rows[max]!) === edge) {
    const clean = shown.filter((r) => atMs(r) !== edge);
    if (clean.length > 0) shown = clean;
  }
  return { shown, sinceMs: atMs(shown[shown.length - 1]!) };
}

/** Aliases live in their own partitions: each binding that still names `customerId` is released. */
async function releaseAliases(deps: CustomerDeps, env: string, customerId: string, aliases: readonly string[]): Promise<void> {
  await Promise.all(aliases.map((alias) => call(deps, env, { by: 'key', key: alias }, { kind: 'key.release', customerId })));
}

/** Records per EventIds.erase call: bounds the time one call holds the register. */
const erasedPerCall = 1000;
/** An erasing command is asked at most this many times while the customer keeps recording events. */
const deleteRoundsMax = 5;

/**
 * Runs an erasing command (customer.delete, customer.erase_merged) with every event the customer
 * recorded (its own and, joined at their merges, those of the customers merged into it) remembered
 * as erased in the register BEFORE the erasure unbinds its external id: a resend of such an event
 * then answers as a duplicate instead of recording it for a new customer of that id. The actor
 * erases only once its records up to `eventsErased` are all in the register, else answers the
 * rest, so a crash anywhere leaves no erased event out of the register (at worst a live customer
 * with some of its events erased there, answered as the duplicates they are; a sync repeat among
 * its recent ones then answers 202 without effects). A customer that keeps recording events
 * during the delete fails it with 429 after deleteRoundsMax rounds. Returns the command's reply.
 */
async function eraseRecordedEvents(
  deps: CustomerDeps,
  env: string,
  target: Target,
  command: (eventsErased: number) => EngineCommand,
): Promise<ReplyView> {
  let erased = 0;
  for (let round = 0; round < deleteRoundsMax; round++) {
    const reply = await call(deps, env, target, command(erased));
    if (reply.kind !== 'events_to_erase') return reply;
    const count = recordCount(reply.records);
    for (let from = 0; from < count; from += erasedPerCall) {
      await deps.eraseEventIds(env, recordedEvents(reply.records, from, Math.min(count, from + erasedPerCall)));
    }
    erased += count;
  }
  throw new ApiError('rate_limited', { message: 'The customer keeps recording events; retry the delete.', retryAfterSeconds: 1 });
}

/**
 * The customer whose external id is `alias` and that is merged into `survivorId`, with what it
 * hands over, or mergedFrom null when there is none. A merge is two steps (the claim merges the
 * key's customer, then the survivor records the alias); when the second never ran, the repeat's
 * claim finds the key already bound to the survivor and names nobody, so the merged customer is
 * found by its external id in the read model (projected up to now first) and asked again.
 */
async function unfinishedMerge(
  deps: CustomerDeps,
  env: string,
  survivorId: string,
  alias: string,
  hold: LockHold,
): Promise<{ mergedFrom: string | null } & MergeHandover> {
  await deps.drainProjector();
  const rows = await deps.readModel.listCustomers(env, { limit: 1, after: null, externalId: alias });
  for (const row of rows) {
    if (row.id === survivorId) continue;
    hold.assertHeld();
    const r = await deps.engine.execute({ env, target: { by: 'id', id: row.id }, command: { kind: 'customer.handover', survivorId }, nowMs: await deps.now(env) });
    if (r.ok === true && r.reply.kind === 'handover') {
      const { kind: _, ...handover } = r.reply;
      return { mergedFrom: row.id, ...handover };
    }
  }
  return { mergedFrom: null };
}

/**
 * Alias additions (merges) and deletes of one environment run one after the other, cluster-wide.
 * Two merges racing in opposite directions (A takes B's external id while B takes A's) would
 * otherwise both pass their claims and leave A merged into B and B into A, both unreachable;
 * serialized, the second resolves its survivor after the first merged it, and its claim is a
 * no-op. A delete running beside a merge into its customer would miss the merged customer (never
 * erased, its external id bound to a tombstone); serialized, the merge comes before the delete
 * and is erased with it, or after it and finds the customer gone. Two layers:
 * this node's queue (so its own merges wait in memory, not by polling Redis), then the
 * environment's merge lock (deps.mergeLock), held across resolve + claim + alias.add, extended
 * every ttl/3 while the merge runs (withLock; a partition moving mid-merge no longer outlasts it)
 * and released in finally. Before each step that changes state the merge checks that it still
 * holds the lock (addAlias): one that lost it (an extend answered false, or none succeeded for a
 * ttl: Redis unreachable, the node stalled) stops before that step with a 429, and its repeat
 * finishes it. Still not excluded, the lock being unfenced: a node frozen for longer than the ttl
 * exactly between a check and the step it then runs, or cut off from Redis for a ttl while that
 * step is in flight, overlaps the next merge (limits.mergeLockTtlMs). A merge overlapping a delete
 * that way still leaves nothing behind: the delete erases a customer merged into its customer
 * after it began, and a merge whose survivor is gone at alias.add erases what its claim merged.
 */
const mergeQueues = new Map<string, Promise<unknown>>();

function mergesOf<T>(environmentId: string, run: () => Promise<T>): Promise<T> {
  const before = mergeQueues.get(environmentId) ?? Promise.resolve();
  const mine = before.then(run);
  const tail = mine.catch(() => {});
  mergeQueues.set(environmentId, tail);
  void tail.then(() => {
    if (mergeQueues.get(environmentId) === tail) mergeQueues.delete(environmentId);
  });
  return mine;
}

/**
 * Claims `alias` for `customerId` at the key's partition (key.claim). A key still bound to a
 * customer deleted on another partition (a delete stopped before releasing it) answers
 * alias_conflict there, its partition not knowing the customer is gone: a read by the key
 * releases such a binding (Engine.execute), and the claim runs again.
 */
async function claimKey(deps: CustomerDeps, env: string, alias: string, customerId: string): Promise<ReplyView> {
  const claim = () => call(deps, env, { by: 'key', key: alias }, { kind: 'key.claim', customerId });
  try {
    return await claim();
  } catch (err) {
    if (!(err instanceof ApiError && err.code === 'alias_conflict')) throw err;
    const owner = await deps.engine.execute({ env, target: { by: 'key', key: alias }, command: { kind: 'customer.resolve' }, nowMs: await deps.now(env) });
    if (owner.ok === false && owner.code === 'resource_not_found') return claim();
    throw err;
  }
}

/**
 * Runs a merge (or a delete) under the environment's cluster-wide lock; 429 rate_limited with
 * Retry-After when it stays taken, and when the merge lost it midway (LockLostError from its
 * hold.assertHeld(): the error table has no 503 for this, and a 429 is not stored under an
 * Idempotency-Key, so the repeat runs and finishes the merge).
 */
async function underMergeLock<T>(deps: CustomerDeps, environmentId: string, run: (hold: LockHold) => Promise<T>): Promise<T> {
  try {
    return await withLock(deps.mergeLock.locks, `merge:${environmentId}`, deps.mergeLock, run);
  } catch (err) {
    if (err instanceof LockBusyError) {
      throw new ApiError('rate_limited', { message: 'Another merge or delete of this environment is running; retry.', retryAfterSeconds: 1 });
    }
    if (err instanceof LockLostError) throw new ApiError('rate_limited', { message: 'The merge lost its lock; retry.', retryAfterSeconds: 1 });
    throw err;
  }
}

export function customerRoutes(deps: CustomerDeps): AnyRoute[] {
  /**
   * Adds an alias; an alias that is another customer's external id merges that customer in. Runs
   * under the merge lock (`hold`), checked right before each step that changes state (the claim,
   * the handover of an unfinished merge, alias.add): a merge that lost its lock stops before its
   * next step. Stopping between steps is safe: the repeat of the request finishes the merge
   * (unfinishedMerge), as after a node that died between them.
   */
  const addAlias = async (ctx: RequestContext<z.infer<typeof aliasBody>>, hold: LockHold) => {
    const env = environmentIdOf(ctx.principal);
    const alias = ctx.body.alias;
    // Resolve the survivor first (the id may itself have been merged away).
    const survivor = await view(deps, env, idTarget(ctx.params.id ?? ''));
    const heldAs = (a: { alias: string; kind: string; createdAtMs: number }) => ({
      status: 200,
      body: { alias: aliasWire(a, survivor.id), merged_from: null },
    });
    // Its own external id routes here already: answered as an alias it holds (since it was
    // created), and not recorded as one.
    if (alias === survivor.externalId) return heldAs({ alias, kind: ctx.body.kind, createdAtMs: survivor.createdAtMs });
    const held = survivor.aliases.some((a) => a.alias === alias);
    if (!held) {
      // An alias a customer merged into this one had added stays bound to that customer and routes
      // here: this customer's too, answered as held (the same whichever partitions hold them).
      const throughMerges = await mergedAliases(deps, env, survivor);
      const reaching = throughMerges.find((a) => a.alias === alias);
      if (reaching !== undefined) return heldAs(reaching);
      // A customer whose delete began and stopped (a 429, a crash) takes no new alias, so nothing
      // is merged into it that its repeated delete would not know of; the repeat finishes the delete.
      if (survivor.deleting) {
        throw new ApiError('invalid_state', { message: 'The customer is being deleted; repeat the delete to finish it.', param: 'id' });
      }
      if (survivor.aliases.length + throughMerges.length >= limits.aliasesPerCustomerMax) {
        throw new ApiError('validation_failed', { message: `A customer holds at most ${limits.aliasesPerCustomerMax} aliases.`, param: 'alias' });
      }
    }
    hold.assertHeld();
    const claim = await claimKey(deps, env, alias, survivor.id);
    if (claim.kind !== 'claimed') throw new ApiError('internal_error');
    const { kind: _, ...claimed } = claim;
    // A claim that merges nobody while the survivor lacks the alias may be the repeat of a merge
    // whose alias addition never ran (a crash after its claim): that merged customer hands over again.
    const { mergedFrom, ...handover } = claimed.mergedFrom === null && !held ? await unfinishedMerge(deps, env, survivor.id, alias, hold) : claimed;
    // A ledger taken over re-places the survivor in its tier programs.
    const tiers = handover.ledger !== undefined ? { tierPrograms: (await deps.tiers.all(env)).map(tierProgramOf) } : {};
    hold.assertHeld();
    let added: ReplyView;
    try {
      added = await call(deps, env, { by: 'id', id: survivor.id }, {
        kind: 'alias.add',
        alias,
        aliasKind: ctx.body.kind,
        mergedFrom,
        ...handover,
        ...tiers,
      });
    } catch (err) {
      // The survivor was deleted after it was resolved (only when this merge overlapped its delete:
      // a lost merge lock): what the claim merged into it is erased with it, and the key released.
      if (err instanceof ApiError && err.code === 'resource_not_found') {
        const erased = mergedFrom === null ? [] : await eraseMerged(deps, env, survivor.id, [mergedFrom]);
        await releaseAliases(deps, env, survivor.id, [alias]);
        await deps.forgetIdempotentAnswers?.(env, erased);
      }
      throw err;
    }
    if (added.kind !== 'alias') throw new ApiError('internal_error');
    const merged = claim.mergedFrom ?? added.mergedFrom;
    return {
      // An alias the customer already held is answered as it is (200), like a repeated segment add.
      status: held && merged === null ? 200 : 201,
      body: { alias: aliasWire(added.alias, survivor.id), merged_from: merged },
    };
  };

  /**
   * Deletes a customer (DELETE /customers/{id}) under the environment's merge lock, so no merge
   * into it runs meanwhile. Steps: customer.delete_begin checks If-Match and marks the delete
   * begun, in one step of the actor, before anything is erased (a 409 erased nothing); the
   * customers merged into it are erased (first, so that a delete stopped midway, repeated, finds
   * the survivor and finishes them; a delete begun is not checked against If-Match again); then
   * the customer itself, in the same record ending its open issuances (cancelled, or expired when
   * past expires_at; pending requests refused) and removing its enrollments; its answer names what
   * it held then: a customer merged into it after the delete began is erased too, the stored
   * Idempotency-Key answers naming these customers are forgotten, its aliases are released, and
   * the units of the issuances it ended go back. A delete stopped after that step cannot be
   * repeated (404: the customer is gone): its keys are freed on next use (the engine's tombstone
   * release), units not given back are by the stock reconciler, but stored answers not yet
   * forgotten stay until they expire.
   */
  const deleteCustomer = async (ctx: RequestContext, expected: number | undefined) => {
    const env = environmentIdOf(ctx.principal);
    const before = await view(deps, env, idTarget(ctx.params.id ?? ''));
    const target: Target = { by: 'id', id: before.id };
    const begun = await call(deps, env, target, { kind: 'customer.delete_begin', expectedVersion: expected });
    if (begun.kind !== 'deletion_begun') throw new ApiError('internal_error');
    // Customers merged into this one hold personal data too (their external id, attributes,
    // event properties): erased with it, and those merged into them in turn.
    const merged = await eraseMerged(deps, env, before.id, begun.mergedFrom);
    const deleted = await eraseRecordedEvents(deps, env, target, (eventsErased) => ({ kind: 'customer.delete', eventsErased }));
    if (deleted.kind !== 'deleted') throw new ApiError('internal_error');
    const late = deleted.mergedFrom.filter((id) => !begun.mergedFrom.includes(id));
    if (late.length > 0) merged.push(...(await eraseMerged(deps, env, before.id, late)));
    // Stored answers about these customers (creation, aliases, tokens, ledger entries, ...), under
    // any credential, can hold the erased data; a repeat of such a request now runs again. First
    // after the erasure: the steps below have fallbacks of their own, and a failure in one of them
    // must not leave these answers replayable.
    await deps.forgetIdempotentAnswers?.(env, [before.id, ...merged]);
    await releaseAliases(deps, env, before.id, deleted.aliases);
    // The delete cancelled its open issuances (and refused its pending requests): their units go back.
    await deps.releaseIssuances?.(env, deleted.released ?? []);
    // The 204 comes once this node's projector caught up: the erasure of customers on its
    // partitions is in the read tables (another node's partitions follow within a cycle).
    await deps.drainProjector();
  };

  return [
    route({
      method: 'GET',
      path: '/v1/customers',
      summary: 'List customers (filter by external_id)',
      tag: 'Customers',
      auth: { kind: 'credential', scopes: ['customers:read'], allow: [...read] },
      query: listQuery,
      responses: { 200: { description: 'A page of customers.', schema: pageOf(customerSchema) } },
      handler: async (ctx: RequestContext<unknown, z.infer<typeof listQuery>>) => {
        const env = environmentIdOf(ctx.principal);
        const page = pageRequest(ctx);
        if (ctx.query.external_id !== undefined) {
          // Exact lookup through the actor: sees a customer created a moment ago.
          const result = await deps.engine.execute({
            env,
            target: { by: 'key', key: ctx.query.external_id },
            command: { kind: 'customer.view' },
            nowMs: await deps.now(env),
          });
          if (result.ok !== true) {
            if (result.ok === false && result.code !== 'resource_not_found') unwrap(result);
            return { status: 200, body: { data: [], next_cursor: null, has_more: false } };
          }
          const c = result.reply.kind === 'customer' ? result.reply.customer : null;
          const data = c && (page.after === null || c.id > (page.after[0] ?? '')) ? [customerWire(c)] : [];
          return { status: 200, body: { data, next_cursor: null, has_more: false } };
        }
        // Read-your-writes on this node: everything acknowledged here is projected first.
        await deps.drainProjector();
        // A merged customer is left out: its id and external id answer as its survivor.
        const rows = await deps.readModel.listCustomers(env, { limit: page.limit + 1, after: page.after?.[0] ?? null, withoutMerged: true });
        return {
          status: 200,
          body: toPage(rows, page, (r) => [r.id], (r) =>
            customerWire(r),
          ),
        };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/customers',
      summary: 'Create a customer',
      tag: 'Customers',
      auth: { kind: 'credential', scopes: ['customers:write'], allow: [...read] },
      body: createBody,
      idempotent: true,
      responses: { 201: { description: 'The customer.', schema: customerSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof createBody>>) => {
        const env = environmentIdOf(ctx.principal);
        await deps.checkAttributes(env, ctx.body.attributes);
        // A run again under the same Idempotency-Key answers the customer it created, not 409.
        const reply = await call(
          deps,
          env,
          { by: 'key', key: ctx.body.external_id },
          { kind: 'customer.create', externalId: ctx.body.external_id, attributes: ctx.body.attributes },
          ctx.callId,
        );
        if (reply.kind !== 'customer') throw new ApiError('internal_error');
        return { status: 201, body: customerWire(reply.customer), headers: etagHeader(reply.customer.version) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/customers/:id',
      summary: 'Read a customer',
      tag: 'Customers',
      auth: { kind: 'credential', scopes: ['customers:read'], allow: [...readOrCustomer] },
      responses: { 200: { description: 'The customer.', schema: customerSchema, etag: true } },
      handler: async (ctx: RequestContext) => {
        const env = environmentIdOf(ctx.principal);
        const id = ctx.params.id ?? '';
        await checkSelf(deps, env, ctx.principal, id);
        const c = await view(deps, env, idTarget(id));
        return { status: 200, body: customerWire(c), headers: etagHeader(c.version) };
      },
    }),
    route({
      method: 'PATCH',
      path: '/v1/customers/:id',
      summary: "Update a customer's attributes (If-Match or expected_version for a safe edit)",
      tag: 'Customers',
      auth: { kind: 'credential', scopes: ['customers:write'], allow: [...read] },
      body: patchBody,
      ifMatch: true,
      responses: { 200: { description: 'The customer.', schema: customerSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof patchBody>>) => {
        const env = environmentIdOf(ctx.principal);
        const expected = expectedVersion(ctx.headers, ctx.body.expected_version) ?? null;
        const target = idTarget(ctx.params.id ?? '');
        await view(deps, env, target); // another tenant's or environment's id: 404 before any write
        await deps.checkAttributes(env, ctx.body.attributes);
        const reply = await call(deps, env, target, {
          kind: 'customer.update',
          attributes: ctx.body.attributes,
          expectedVersion: expected,
        });
        if (reply.kind !== 'customer') throw new ApiError('internal_error');
        return { status: 200, body: customerWire(reply.customer), headers: etagHeader(reply.customer.version) };
      },
    }),
    route({
      method: 'DELETE',
      path: '/v1/customers/:id',
      summary: 'Delete a customer: erases personal data, keeps ids and amounts for ledger integrity, ends its open reward issuances and enrollments',
      tag: 'Customers',
      auth: { kind: 'credential', scopes: ['customers:write'], allow: [...read] },
      ifMatch: true,
      responses: { 204: { description: 'Deleted.' } },
      handler: async (ctx: RequestContext) => {
        const env = environmentIdOf(ctx.principal);
        const expected = expectedVersion(ctx.headers);
        await mergesOf(env, () => underMergeLock(deps, env, () => deleteCustomer(ctx, expected)));
        return { status: 204 };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/customers/:id/state',
      summary: "The customer's state: balances, tiers, segments, counters, challenges, issuances, aliases",
      tag: 'Customers',
      // Balances and issuances are the ledger's: ledger:read guards them here as on /balances.
      auth: { kind: 'credential', scopes: ['customers:read', 'ledger:read'], allow: [...readOrCustomer] },
      responses: { 200: { description: 'The state view.', schema: customerStateSchema } },
      handler: async (ctx: RequestContext) => {
        const env = environmentIdOf(ctx.principal);
        const id = ctx.params.id ?? '';
        await checkSelf(deps, env, ctx.principal, id);
        const programs = (await deps.tiers.all(env)).map(tierProgramOf);
        const [v, names, defs] = await Promise.all([view(deps, env, idTarget(id), 'id', programs), deps.counterNames?.(env) ?? [], deps.segments?.(env) ?? []]);
        const aliases = [...v.aliases, ...(await mergedAliases(deps, env, v))];
        return { status: 200, body: stateWire(v, aliases, names, segmentNames(defs, v.segmentIds, v.attributes)) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/customers/:id/balances',
      summary: "The customer's balances per currency",
      tag: 'Customers',
      auth: { kind: 'credential', scopes: ['ledger:read'], allow: [...readOrCustomer] },
      responses: { 200: { description: 'A balance per currency.', schema: balancesSchema } },
      handler: async (ctx: RequestContext) => {
        const env = environmentIdOf(ctx.principal);
        const id = ctx.params.id ?? '';
        await checkSelf(deps, env, ctx.principal, id);
        const c = await view(deps, env, idTarget(id));
        return { status: 200, body: { data: c.balances.map(balanceWire) } };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/customers/:id/export',
      summary: 'Export everything held about a customer',
      tag: 'Customers',
      // The whole record, ledger entries and issuances included: a partial export would mislead.
      auth: { kind: 'credential', scopes: ['customers:read', 'ledger:read'], allow: [...read] },
      responses: { 200: { description: 'The export document.', schema: customerExportSchema } },
      handler: async (ctx: RequestContext) => {
        const env = environmentIdOf(ctx.principal);
        const c = await view(deps, env, idTarget(ctx.params.id ?? ''));
        // The events of customers merged into this one (and into those) were this person's too.
        const merged = await mergedInto(deps, env, c.id, c.mergedFrom);
        const people = [c.id, ...merged.map((m) => m.id)];
        await deps.drainProjector();
        const [eventRows, entryRows, progress, segmentDefs] = await Promise.all([
          deps.readModel.listCustomerEvents(env, people, { limit: exportEventsMax + 1 }),
          deps.readModel.listLedgerEntries(env, people, { limit: exportEntriesMax + 1, before: null }),
          deps.challengeProgress?.(env, people) ?? [],
          deps.segments?.(env) ?? [],
        ]);
        const events = newestWithBoundary(eventRows, exportEventsMax, (e) => e.receivedAtMs);
        const entries = newestWithBoundary(entryRows, exportEntriesMax, (e) => e.createdAtMs);
        const aliases = [...c.aliases, ...merged.flatMap((m) => m.aliases)];
        // The environment's clock (a test environment's test clock), as every time in the document.
        const exportedAtMs = await deps.now(env);
        return {
          status: 200,
          body: {
            exported_at: iso(exportedAtMs),
            customer: customerWire(c),
            aliases: aliases.map((a) => ({ alias: a.alias, created_at: iso(a.createdAtMs) })),
            events: events.shown.map((e) => ({
              id: e.id,
              name: e.name,
              occurred_at: iso(e.occurredAtMs),
              received_at: iso(e.receivedAtMs),
              properties: e.properties,
            })),
            // Every event received at or after this instant is here; older ones are not (null: all are).
            events_since: iso(events.sinceMs),
            ledger_entries: entries.shown.map(ledgerEntryWire),
            ledger_entries_since: iso(entries.sinceMs),
            merged_customers: merged.map((m) => ({ id: m.id, attributes: m.attributes })),
            reward_issuances: c.issuances.map((i) => ({
              id: i.id,
              reward: i.rewardId,
              status: i.status,
              expires_at: iso(i.expiresAtMs),
              redeemed_at: iso(i.redeemedAtMs),
              cancelled_at: iso(i.cancelledAtMs),
              created_at: iso(i.createdAtMs),
            })),
            tiers: c.tiers.map((x) => ({ program: x.programId, level: x.level, since: iso(x.sinceMs) })),
            inventory: c.inventory,
            segments: segmentNames(segmentDefs, c.segmentIds, c.attributes),
            challenge_progress: progress.map((p) => ({ challenge: p.challengeId, period_key: p.periodKey, count: p.count, completed_at: iso(p.completedAtMs) })),
          },
        };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/customers/:id/aliases',
      summary: "Add an alias; if it is another customer's external id, that customer is merged into this one",
      tag: 'Customers',
      auth: { kind: 'credential', scopes: ['customers:write'], allow: [...read] },
      body: aliasBody,
      idempotent: true,
      responses: {
        201: { description: 'The alias, and the customer it merged in (or null).', schema: aliasAddedSchema },
        200: { description: 'The customer already held this alias: the alias as it is (its created_at), merged_from null.', schema: aliasAddedSchema },
      },
      handler: (ctx: RequestContext<z.infer<typeof aliasBody>>) => {
        const env = environmentIdOf(ctx.principal);
        return mergesOf(env, () => underMergeLock(deps, env, (hold) => addAlias(ctx, hold)));
      },
    }),
    route({
      method: 'POST',
      path: '/v1/customers/:id/client_token',
      summary: 'Mint a customer token for a browser (15 minutes unless ttl_seconds says otherwise; the body is optional)',
      tag: 'Customers',
      auth: { kind: 'credential', scopes: ['customer_sessions:write'], allow: ['secret', 'pat', 'session'] },
      idempotent: 'optional',
      // The token is shown once: a replay answers customer_token: null (a stored error unchanged).
      replayTransform: (body) => ('error' in (body as object) ? body : { ...(body as Record<string, unknown>), customer_token: null }),
      body: clientTokenBody,
      responses: { 200: { description: 'A customer token for this customer.', schema: clientTokenSchema } },
      handler: async (ctx: RequestContext<z.infer<typeof clientTokenBody>>) => {
        const env = environmentIdOf(ctx.principal);
        const c = await view(deps, env, idTarget(ctx.params.id ?? ''));
        const minted = await deps.mintCustomerToken({
          environmentId: env,
          customerId: c.id,
          externalId: c.externalId ?? '',
          credentialId: ctx.principal.credentialId,
          ttlMs: ttlMsOf(ctx.body.ttl_seconds),
        });
        return { status: 200, body: { customer_id: c.id, external_id: c.externalId, customer_token: minted.token } };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/customer_sessions',
      summary: 'Mint a customer session token (needs scope customer_sessions:write; 15 minutes unless ttl_seconds says otherwise)',
      tag: 'Customers',
      auth: { kind: 'credential', scopes: ['customer_sessions:write'], allow: ['secret'] },
      body: sessionBody,
      idempotent: true,
      // Only a stored success carries a token; a stored 4xx error replays unchanged.
      replayTransform: (body) => ('error' in (body as object) ? body : { ...(body as Record<string, unknown>), customer_token: null }),
      responses: { 201: { description: 'The customer token (null on an idempotent replay) and when it expires.', schema: customerSessionSchema } },
      handler: async (ctx: RequestContext<z.infer<typeof sessionBody>>) => {
        const env = environmentIdOf(ctx.principal);
        const ref = ctx.body.customer_id;
        const target: Target = customerIdPartition(ref) >= 0 ? { by: 'id', id: ref } : { by: 'key', key: ref };
        const c = await view(deps, env, target, 'customer_id');
        const minted = await deps.mintCustomerToken({
          environmentId: env,
          customerId: c.id,
          externalId: c.externalId ?? '',
          credentialId: ctx.principal.credentialId,
          ttlMs: ttlMsOf(ctx.body.ttl_seconds),
        });
        return {
          status: 201,
          body: { customer_id: c.id, external_id: c.externalId, customer_token: minted.token, expires_at: iso(minted.expiresAtMs) },
        };
      },
    }),
  ];
}
