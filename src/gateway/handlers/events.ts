// POST /v1/events (single, batch, sync mode) and GET /v1/events/{id}. The hot path: validate each
// event once, fingerprint its content, hand it to the customer's actor, and answer only after the
// journal acknowledged it. A batch runs its items concurrently and answers 207 in request order,
// each item its own result or error. Never answer 2xx for an event that is not journaled.
import { z } from 'zod';
import type { Engine } from '../../actors/engine.js';
import type { CallResult } from '../../actors/partition.js';
import { countersUnavailable, withCountersContext } from '../../catalog/counters.js';
import { type BudgetAllowance, grantFor, settleGrant } from '../../catalog/event-grants.js';
import { type Reserved, reserveSharedLimits, settleSharedLimits } from '../../catalog/shared-limit-slots.js';
import type { CountersContext } from '../../domain/counters.js';
import type { EventSource } from '../../domain/customer.js';
import { eventFingerprint } from '../../domain/event-fingerprint.js';
import type { Effect, RulesContext } from '../../domain/rule-effects.js';
import { ApiError } from '../../errors/api-error.js';
import { limits } from '../../limits.js';
import type { ErasedEvent, SharedLimits } from '../../persistence/ports.js';
import type { CredentialKind } from '../../tenancy/types.js';
import type { EventIdClaims } from '../event-id-claims.js';
import { type AnyRoute, type RequestContext, route } from '../route.js';
import { zodToApiError } from '../validation.js';
import { challengeEffectWire, iso } from '../wire.js';
import { eventAcceptedSchema, eventBatchSchema, eventEvaluatedSchema, eventRecordSchema } from '../wire-schemas.js';

export const eventNamePattern = /^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$/;

export const eventSchema = z.strictObject({
  id: z.string().min(1).max(limits.eventIdCharsMax).describe("The caller's event id; the deduplication key."),
  name: z
    .string()
    .min(1)
    .max(limits.eventNameCharsMax)
    .regex(eventNamePattern, 'Use dotted snake_case, e.g. level.completed.'),
  customer_id: z.string().min(1).max(limits.externalIdCharsMax).describe("The caller's own customer id (external id)."),
  occurred_at: z.iso.datetime({ offset: true }),
  properties: z.record(z.string(), z.unknown()).default({}),
});
export type EventInput = z.infer<typeof eventSchema>;

const modeSchema = z.enum(['sync', 'async']).optional();

/** Documented shape; items are validated one by one in the handler so a batch reports per-item errors. */
const eventsBodySchema = z.union([
  eventSchema.extend({ mode: modeSchema }),
  z.strictObject({
    events: z.array(eventSchema).min(1).max(limits.eventsPerBatchMax).describe(`1 to ${limits.eventsPerBatchMax} events; more is 400 batch_too_large.`),
    mode: modeSchema,
  }),
]);

export interface EventReadModel {
  getEvent(
    environmentId: string,
    id: string,
  ): Promise<{
    id: string;
    clientEventId: string;
    customerId: string;
    /** The customer's external id; null once the customer was erased. */
    customerExternalId: string | null;
    name: string;
    occurredAtMs: number;
    receivedAtMs: number;
    properties: Record<string, unknown> | null;
    status: string;
    /** Null for events recorded before they were kept. */
    trust: string | null;
    sourceType: string | null;
    sourceId: string | null;
  } | null>;
  /** The effects of an event's sync answer; null when the event is not projected (see PgReadModel). */
  eventAnswer(environmentId: string, id: string): Promise<{ effects: unknown[] | null } | null>;
}

export interface EventDeps {
  engine: Engine;
  /** The environment-wide register of client event ids (an id sent for two customers is one id). */
  eventIds: EventIdClaims;
  readModel: EventReadModel;
  /** Waits until everything acknowledged so far is projected (read-your-writes for GET /events/{id}). */
  drainProjector(): Promise<void>;
  /** The environment's clock (the test clock in test environments); sync once cached. */
  nowMs(environmentId: string): number | Promise<number>;
  /** Published rules and currencies (sync when cached). */
  rules(environmentId: string): RulesContext | null | Promise<RulesContext | null>;
  /** Called with the effects of a journaled event (after the ack), e.g. to deliver requested rewards. */
  afterEvent?(environmentId: string, customerId: string, effects: readonly Effect[]): void;
  /** Counter definitions and the environment's time zone (sync when cached); absent: no counters. */
  counters?(environmentId: string, timeZone: string): CountersContext | null | Promise<CountersContext | null>;
  /** The node's campaign budget allowance (grants taken before the step, the rest given back after). */
  budgets?: BudgetAllowance;
  /** Rule limits shared by every customer (slots reserved before the step, unused ones freed after). */
  sharedLimits?: SharedLimits;
}

type ItemResult = { status: number; body: Record<string, unknown> };

/** A skipped rule's detail in the answer to a repeat of an erased customer's event. */
const erasedDetail = 'Not kept: the customer was erased.';

function parseEvent(raw: unknown, rawBytes: number, at: string): EventInput {
  if (rawBytes > limits.eventBytesMax) {
    throw new ApiError('event_too_large', {
      message: `An event is at most ${limits.eventBytesMax} bytes.`,
      param: at || undefined,
    });
  }
  const parsed = eventSchema.safeParse(raw);
  if (!parsed.success) throw zodToApiError(parsed.error, { root: at });
  return parsed.data;
}

/** How an event's sender is named on the event (a customer token: the key that minted it). */
const sourceTypes: Record<CredentialKind, EventSource['type']> = {
  secret: 'secret_key',
  publishable: 'publishable_key',
  pat: 'personal_access_token',
  session: 'session',
  customer: 'customer_token',
};

async function recordOne(
  deps: EventDeps,
  env: string,
  ev: EventInput,
  sync: boolean,
  param: string,
  trust: string,
  source: EventSource,
  timeZone = 'UTC',
): Promise<ItemResult> {
  const occurredAtMs = Date.parse(ev.occurred_at);
  const clock = deps.nowMs(env);
  const nowMs = typeof clock === 'number' ? clock : await clock;
  if (occurredAtMs > nowMs + limits.occurredAtFutureSkewMs) {
    throw new ApiError('occurred_at_in_future', { param: param ? `${param}.occurred_at` : 'occurred_at' });
  }
  const fp = eventFingerprint(ev.name, ev.customer_id, occurredAtMs, ev.properties);
  // The id is the environment's: bound to the first content sent with it, whichever customer that
  // named. The same content goes on to its customer's actor, which answers a repeat as the first;
  // unless its customer was erased: then the register answers the repeat, and no actor, so no
  // customer, sees it. It answers as the first did too, from the event's row, which keeps a sync
  // answer's effects past the erasure (rules, amounts, ledger entries), but never with a skipped
  // rule's detail: that text may quote a value of the erased customer (a limit's scope key, an
  // attribute read as an amount).
  let bound: number | ErasedEvent;
  try {
    bound = await deps.eventIds.claim(env, ev.id, fp);
  } catch {
    throw new ApiError('internal_error', { message: 'Storage is unavailable; retry.' });
  }
  if (typeof bound !== 'number') {
    const id = bound.erasedEventId;
    const stored = await storedAnswer(deps, env, id);
    if (stored === null) return { status: 202, body: { id, client_event_id: ev.id, status: 'accepted', duplicate: true } };
    const effects = stored.map((e) => effectWire(e.type === 'rule.skipped' ? { ...e, detail: erasedDetail } : e));
    return { status: 200, body: { id, client_event_id: ev.id, status: 'evaluated', effects, duplicate: true } };
  }
  if (bound !== fp) {
    throw new ApiError('event_id_conflict', {
      message: `Event ${ev.id} was already received with different content.`,
      param: param ? `${param}.id` : 'id',
    });
  }
  const loaded = deps.rules(env);
  let rules = loaded instanceof Promise ? await loaded : loaded;
  // Loaded here, so a storage failure usually fails the event before it takes slots or a grant;
  // read again as the command is sent (below), where a failure gives them back and answers 429.
  const countersLoaded = deps.counters?.(env, timeZone) ?? null;
  if (countersLoaded instanceof Promise) await countersLoaded;
  // Limits shared by every customer: slots reserved before the step (first: a failure here has
  // taken no budget grant); null, with no await, for events no such rule is triggered by.
  const reserving = reserveSharedLimits(deps.sharedLimits, env, ev.id, rules, { name: ev.name, properties: ev.properties, trust }, nowMs);
  let slots: Reserved | null = null;
  if (reserving !== null) {
    try {
      slots = await reserving;
    } catch {
      throw new ApiError('internal_error', { message: 'Storage is unavailable; retry.' });
    }
    rules = slots.rules;
  }
  // Capped campaign awards: a grant from the node's allowance before the step, the rest back after.
  const g = grantFor(deps.budgets, env, rules, ev, nowMs);
  const granted = g instanceof Promise ? await g : g;
  rules = granted.rules;
  // The counter definitions as they are when the command enters the engine (withCountersContext):
  // a definition created before is counted live, one created after waits for this event (its
  // barrier) before anything decides it is ready.
  const pending = withCountersContext(
    () => deps.counters?.(env, timeZone) ?? null,
    (counters) =>
      deps.engine.execute({
        env,
        target: { by: 'key', key: ev.customer_id },
        command: {
          kind: 'event.record',
          externalId: ev.customer_id,
          clientEventId: ev.id,
          name: ev.name,
          occurredAtMs,
          properties: ev.properties,
          fp,
          trust,
          source,
          rules,
          counters,
          ...(sync ? { sync: true } : {}),
        },
        nowMs,
      }),
    countersUnavailable,
  );
  settleGrant(deps.budgets, env, granted.grant, pending);
  settleSharedLimits(deps.sharedLimits, slots?.held ?? null, pending);
  let result: CallResult;
  // Sync mode past its bound answers 202 with fallback: true, but never before the event is
  // journaled (202 means stored): the actor's answer comes with the journal's ack, so the
  // fallback still waits for it, and an event that could not be stored is an error, not a 202.
  let fallback = false;
  if (sync) {
    const raced = await Promise.race([pending, sleep(limits.syncEvaluationWaitMs)]);
    if (raced === undefined) fallback = true;
    result = raced ?? (await pending);
  } else {
    result = await pending;
  }
  if (result.ok !== true) {
    if (result.ok === 'redirect') throw new ApiError('internal_error');
    // In a batch the actor's param (e.g. "id" for event_id_conflict) is the item's: events[i].id.
    const at = result.param === undefined ? undefined : param ? `${param}.${result.param}` : result.param;
    throw new ApiError(result.code, { message: result.message, param: at, retryAfterSeconds: result.retryAfterSeconds });
  }
  const reply = result.reply;
  if (reply.kind !== 'event') throw new ApiError('internal_error');
  if (reply.effects.length > 0) deps.afterEvent?.(env, reply.customerId, reply.effects);
  // A duplicate answers as the first did: evaluated with its effects if that was a sync answer.
  // The actor remembers its customer's latest answers only; an older one is in the event's row.
  let effects: readonly Effect[] = reply.effects;
  let evaluated = reply.duplicate ? reply.evaluated === true : sync && !fallback;
  if (reply.duplicate && !evaluated) {
    const stored = await storedAnswer(deps, env, reply.id);
    if (stored !== null) {
      evaluated = true;
      effects = stored;
    }
  }
  const body: Record<string, unknown> = evaluated
    ? { id: reply.id, client_event_id: reply.clientEventId, status: 'evaluated', effects: effects.map(effectWire) }
    : { id: reply.id, client_event_id: reply.clientEventId, status: 'accepted' };
  if (reply.duplicate) body.duplicate = true;
  if (fallback) body.fallback = true;
  return { status: evaluated ? 200 : 202, body };
}

/**
 * The effects a duplicate's first answer carried when it was a sync answer the actor no longer
 * remembers; null when it was answered 202. The event was journaled before its first answer, so
 * its row is there once this node's projector has caught up (a partition another node owns
 * projects within its cycle: a repeat that fast and that far behind answers 202).
 */
async function storedAnswer(deps: EventDeps, env: string, id: string): Promise<readonly Effect[] | null> {
  let row = await deps.readModel.eventAnswer(env, id);
  if (row === null) {
    await deps.drainProjector();
    row = await deps.readModel.eventAnswer(env, id);
  }
  return (row?.effects as Effect[] | null | undefined) ?? null;
}

export function effectWire(e: Effect): Record<string, unknown> {
  switch (e.type) {
    case 'rule.fired':
      return { type: e.type, rule_id: e.ruleId, version: e.version };
    case 'points.awarded':
      return e.campaignId === undefined
        ? { type: e.type, rule_id: e.ruleId, currency: e.currency, amount: e.amount, ledger_entry_id: e.entryId }
        : { type: e.type, rule_id: e.ruleId, currency: e.currency, amount: e.amount, ledger_entry_id: e.entryId, campaign_id: e.campaignId };
    case 'rule.skipped':
      return { type: e.type, rule_id: e.ruleId, reason: e.reason, detail: e.detail };
    case 'action.skipped':
      return { type: e.type, rule_id: e.ruleId, action: e.action, reason: e.reason };
    case 'tier.changed':
      return { type: e.type, program_id: e.programId, level: e.level, previous_level: e.previousLevel, direction: e.direction };
    case 'reward.issue_requested':
      return { type: e.type, rule_id: e.ruleId, reward_id: e.rewardId, issuance_id: e.issuanceId };
    case 'item.granted':
      return { type: e.type, rule_id: e.ruleId, item: e.item, quantity: e.quantity };
    default:
      return challengeEffectWire(e);
  }
}

function itemError(err: unknown, requestId: string): { error: unknown } {
  const e = err instanceof ApiError ? err : new ApiError('internal_error');
  return e.toBody(requestId);
}

export function eventRoutes(deps: EventDeps): AnyRoute[] {
  return [
    route({
      method: 'POST',
      path: '/v1/events',
      summary: 'Send one event, or a batch of up to 100 ({events: [...]})',
      tag: 'Events',
      auth: { kind: 'credential', scopes: ['events:write'], allow: ['secret', 'publishable', 'pat', 'session'] },
      // Validated by hand below (per-item errors in batches); the schema documents the shape.
      docBody: eventsBodySchema,
      responses: {
        202: { description: 'Journaled; evaluated asynchronously (or sync fallback).', schema: eventAcceptedSchema },
        200: { description: 'mode: sync; evaluated with effects.', schema: eventEvaluatedSchema },
        207: { description: 'Batch: one result per item, in request order.', schema: eventBatchSchema },
      },
      handler: async (ctx: RequestContext) => {
        const principal = ctx.principal;
        const env = principal.environment;
        if (env === null) throw new ApiError('environment_required');
        const body = ctx.body;
        if (body === null || typeof body !== 'object' || Array.isArray(body)) {
          throw new ApiError('validation_failed', { message: 'The body must be an event or {events: [...]}.' });
        }
        const b = body as Record<string, unknown>;
        const mode = b.mode;
        if (mode !== undefined && mode !== 'sync' && mode !== 'async') {
          throw new ApiError('validation_failed', { param: 'mode', message: 'mode is "sync" or "async".' });
        }
        const sync = mode === 'sync';
        const isPublishable = principal.kind === 'publishable';
        // Client-side credentials report events; server-side keys assert them (rule trust minimum).
        const trust = isPublishable || principal.kind === 'customer' ? 'client_reported' : 'merchant_asserted';
        const source: EventSource = { type: sourceTypes[principal.kind], id: principal.credentialId };
        const checkAllowed = (name: string, param: string) => {
          if (isPublishable && !principal.allowedEvents.includes(name)) {
            throw new ApiError('event_requires_secret_key', { message: `This publishable key may not send ${name}; send it with a secret key.`, param });
          }
        };
        if (!('events' in b)) {
          const { mode: _m, ...raw } = b;
          const ev = parseEvent(raw, ctx.rawBody.length, '');
          checkAllowed(ev.name, 'name');
          const r = await recordOne(deps, env.id, ev, sync, '', trust, source, env.timezone);
          return { status: r.status, body: r.body };
        }
        // A batch is {events, mode?}, as strict as a single event's body.
        for (const k of Object.keys(b)) {
          if (k !== 'events' && k !== 'mode') throw new ApiError('validation_failed', { param: k, message: `Unknown field ${k}: a batch is {events, mode}.` });
        }
        const items = b.events;
        if (!Array.isArray(items)) throw new ApiError('validation_failed', { param: 'events', message: 'events must be an array.' });
        if (items.length > limits.eventsPerBatchMax) throw new ApiError('batch_too_large', { param: 'events' });
        if (items.length === 0) throw new ApiError('validation_failed', { param: 'events', message: 'events holds 1 to 100 events.' });
        const mayBeLarge = ctx.rawBody.length > limits.eventBytesMax;
        const results = await Promise.all(
          items.map(async (raw, i): Promise<Record<string, unknown>> => {
            const at = `events[${i}]`;
            try {
              const ev = parseEvent(raw, mayBeLarge ? Buffer.byteLength(JSON.stringify(raw)) : 0, at);
              checkAllowed(ev.name, `${at}.name`);
              const r = await recordOne(deps, env.id, ev, sync, at, trust, source, env.timezone);
              return r.body;
            } catch (err) {
              const clientEventId = raw && typeof raw === 'object' && typeof (raw as { id?: unknown }).id === 'string' ? (raw as { id: string }).id : null;
              return { client_event_id: clientEventId, ...itemError(err, ctx.requestId) };
            }
          }),
        );
        return { status: 207, body: { data: results } };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/events/:id',
      summary: 'Read an event by its service id (evt_...)',
      tag: 'Events',
      auth: { kind: 'credential', scopes: ['events:read'], allow: ['secret', 'pat', 'session'] },
      responses: { 200: { description: 'The event with its status.', schema: eventRecordSchema } },
      handler: async (ctx: RequestContext) => {
        const env = ctx.principal.environment;
        if (env === null) throw new ApiError('environment_required');
        const id = ctx.params.id ?? '';
        if (!id.startsWith('evt_')) {
          throw new ApiError('resource_not_found', {
            message: "No event with this id: this route takes the service's event id (evt_...), the id in the answer to POST /v1/events (the id you sent comes back there as client_event_id).",
            param: 'id',
          });
        }
        let row = await deps.readModel.getEvent(env.id, id);
        if (row === null) {
          await deps.drainProjector();
          row = await deps.readModel.getEvent(env.id, id);
        }
        if (row === null) throw new ApiError('resource_not_found', { message: 'No event with this id.', param: 'id' });
        return {
          status: 200,
          body: {
            id: row.id,
            client_event_id: row.clientEventId,
            // Spec 2.3: customer_id is the caller's identifier (the external id), as in the request.
            customer_id: row.customerExternalId,
            customer_service_id: row.customerId,
            name: row.name,
            occurred_at: iso(row.occurredAtMs),
            received_at: iso(row.receivedAtMs),
            properties: row.properties,
            status: row.status,
            // Who sent it: merchant_asserted (server-side credentials) or client_reported, and the credential.
            trust: row.trust,
            source: row.sourceType === null ? null : { type: row.sourceType, id: row.sourceId },
          },
        };
      },
    }),
  ];
}

function sleep(ms: number): Promise<undefined> {
  return new Promise((r) => setTimeout(r, ms, undefined));
}
