// The customer mechanic: identity, attributes, aliases/merges, deletion and event recording with
// permanent deduplication by the caller's event id. Pure: decide(state, command, ctx) returns
// facts (or an error code from the HTTP table), evolve(state, fact) applies one fact. No clock,
// no randomness, no I/O: time and ids come from ctx and are recorded in the facts, so a replay of
// the journal (evolve only) rebuilds exactly the same state. A throw in here is a bug.
import type { ErrorCode } from '../errors/codes.js';
import { limits } from '../limits.js';
import * as ledger from './ledger.js';
import { applyRules, type Effect, type RuleFact, type RulesContext, tierFacts } from './rule-effects.js';
import { evolveTiers, type TierFact, type TierProgram, type TiersState } from './tiers.js';
import { SeenEvents } from './seen-events.js';
import type { CampaignFact } from './campaigns.js';
import { decideMembership, evolveMembership, type SegmentCommand, type SegmentFact } from './segments.js';

export interface Ctx {
  nowMs: number;
  environmentId: string;
  newId(prefix: string): string;
  newCustomerId(): string;
  /** A service event id (evt_...) for an event received now. */
  newEventId(): string;
}

export interface AliasState {
  alias: string;
  kind: string;
  createdAtMs: number;
}

export interface CustomerState {
  id: string;
  environmentId: string;
  /** null once deleted (personal data erased). */
  externalId: string | null;
  attributes: Record<string, unknown>;
  version: number;
  createdAtMs: number;
  updatedAtMs: number;
  deletedAtMs: number | null;
  aliases: AliasState[];
  /** Set when this customer was merged into another: commands are redirected there. */
  mergedInto: string | null;
  mergedFrom: string[];
  /** Every client event id recorded, with its content fingerprint and service id. Permanent: it is the deduplication record. */
  events: SeenEvents;
  /** Balances, lots and pending credits per currency. */
  ledger: ledger.LedgerState;
  /** How many times each rule fired per limit scope ("rule|limit|scope" -> count). */
  ruleLimits: Record<string, number>;
  /** Standing in each tier program, by program id. */
  tiers: TiersState;
  /** Ids of the static segments the customer is a member of (membership facts). */
  segmentIds: string[];
}

export type Command =
  | { kind: 'customer.create'; externalId: string; attributes: Record<string, unknown> }
  | { kind: 'customer.get' }
  | { kind: 'customer.update'; attributes: Record<string, unknown>; expectedVersion: number | null }
  | { kind: 'customer.delete' }
  | {
      kind: 'event.record';
      /** Used when the customer does not exist yet (created on first sight). */
      externalId: string;
      clientEventId: string;
      name: string;
      occurredAtMs: number;
      properties: Record<string, unknown>;
      fp: number;
      /** Trust of the sender (secret key: merchant_asserted; publishable key: client_reported). */
      trust: string;
      /** Published rules and currencies of the environment, loaded before the step; null: none. */
      rules: RulesContext | null;
    }
  | { kind: 'alias.add'; alias: string; aliasKind: string; mergedFrom: string | null }
  | { kind: 'customer.merge_into'; targetId: string }
  /** A ledger command, with the configs of the currencies it names (loaded before the step). */
  | { kind: 'ledger.run'; command: ledger.LedgerCommand; currencies: ledger.CurrencyConfig[]; tierPrograms: TierProgram[] }
  /** Static segment membership (idempotent: no fact when nothing changes). */
  | SegmentCommand;

export type Fact =
  | {
      kind: 'customer.created';
      id: string;
      environmentId: string;
      externalId: string;
      attributes: Record<string, unknown>;
      atMs: number;
    }
  /** Carries the resulting row (version, external id) so projections need no state. */
  | { kind: 'customer.updated'; attributes: Record<string, unknown>; version: number; externalId: string; createdAtMs: number; atMs: number }
  | { kind: 'customer.deleted'; version: number; atMs: number }
  | {
      kind: 'event.recorded';
      id: string;
      clientEventId: string;
      name: string;
      occurredAtMs: number;
      receivedAtMs: number;
      properties: Record<string, unknown>;
      fp: number;
    }
  | { kind: 'alias.added'; alias: string; aliasKind: string; mergedFrom: string | null; atMs: number }
  | { kind: 'customer.merged'; into: string; atMs: number }
  | ledger.LedgerFact
  | RuleFact
  | TierFact
  | SegmentFact
  | CampaignFact;

export interface EventReply {
  kind: 'event';
  id: string;
  clientEventId: string;
  duplicate: boolean;
  customerId: string;
  /** What the rules did (empty for duplicates: the first answer's effects are not replayed). */
  effects: Effect[];
}

export type Reply =
  | { kind: 'customer'; customer: CustomerState }
  | EventReply
  | { kind: 'alias'; alias: AliasState; customerId: string; mergedFrom: string | null }
  | { kind: 'deleted' }
  | { kind: 'merged' }
  | { kind: 'ledger'; reply: ledger.LedgerReply }
  | { kind: 'segment_membership'; segmentId: string; member: boolean; changed: boolean };

export type Decision =
  | { ok: true; facts: Fact[]; reply: Reply }
  | { ok: false; code: ErrorCode; message?: string; param?: string };

const noFacts: Fact[] = [];

function fail(code: ErrorCode, message?: string, param?: string): Decision {
  return { ok: false, code, message, param };
}

export function decide(state: CustomerState | null, cmd: Command, ctx: Ctx): Decision {
  if (state !== null && state.deletedAtMs !== null) {
    // A deleted customer keeps its id as a tombstone; its routing keys were released.
    return fail('resource_not_found', 'The customer was deleted.', 'id');
  }
  if (state === null) {
    // Only creation paths reach a customer that does not exist.
    if (cmd.kind === 'customer.create') {
      const created = createdFact(cmd.externalId, cmd.attributes, ctx);
      const next = evolve(null, created);
      return { ok: true, facts: [created], reply: { kind: 'customer', customer: next } };
    }
    if (cmd.kind === 'event.record') {
      const created = createdFact(cmd.externalId, {}, ctx);
      const recorded = recordedFact(cmd, ctx);
      const facts: Fact[] = [created, recorded];
      const effects = rulesFor(cmd, evolve(null, created), ctx, facts);
      return {
        ok: true,
        facts,
        reply: { kind: 'event', id: recorded.id, clientEventId: cmd.clientEventId, duplicate: false, customerId: created.id, effects },
      };
    }
    return fail('resource_not_found', 'No customer with this id.', 'id');
  }

  switch (cmd.kind) {
    case 'customer.create':
      return fail('already_exists', 'A customer with this external_id already exists.', 'external_id');
    case 'customer.get':
      return { ok: true, facts: noFacts, reply: { kind: 'customer', customer: state } };
    case 'customer.update': {
      if (cmd.expectedVersion !== null && cmd.expectedVersion !== state.version) {
        return fail('stale_write', `The customer is at version ${state.version}.`);
      }
      const attributes = mergeAttributes(state.attributes, cmd.attributes);
      if (Object.keys(attributes).length > limits.attributeKeysMax) {
        return fail('validation_failed', `A customer holds at most ${limits.attributeKeysMax} attributes.`, 'attributes');
      }
      const fact: Fact = {
        kind: 'customer.updated',
        attributes,
        version: state.version + 1,
        externalId: state.externalId ?? '',
        createdAtMs: state.createdAtMs,
        atMs: ctx.nowMs,
      };
      return { ok: true, facts: [fact], reply: { kind: 'customer', customer: state } };
    }
    case 'customer.delete':
      return {
        ok: true,
        facts: [{ kind: 'customer.deleted', version: state.version + 1, atMs: ctx.nowMs }],
        reply: { kind: 'deleted' },
      };
    case 'event.record': {
      const seen = state.events.get(cmd.clientEventId);
      if (seen !== undefined) {
        if (seen.fp !== cmd.fp) {
          return fail('event_id_conflict', `Event ${cmd.clientEventId} was already received with different content.`, 'id');
        }
        return {
          ok: true,
          facts: noFacts,
          reply: { kind: 'event', id: seen.id, clientEventId: cmd.clientEventId, duplicate: true, customerId: state.id, effects: [] },
        };
      }
      const recorded = recordedFact(cmd, ctx);
      const facts: Fact[] = [recorded];
      const effects = rulesFor(cmd, state, ctx, facts);
      return {
        ok: true,
        facts,
        reply: { kind: 'event', id: recorded.id, clientEventId: cmd.clientEventId, duplicate: false, customerId: state.id, effects },
      };
    }
    case 'alias.add': {
      const existing = state.aliases.find((a) => a.alias === cmd.alias);
      if (existing !== undefined) {
        return { ok: true, facts: noFacts, reply: { kind: 'alias', alias: existing, customerId: state.id, mergedFrom: null } };
      }
      const fact: Fact = {
        kind: 'alias.added',
        alias: cmd.alias,
        aliasKind: cmd.aliasKind,
        mergedFrom: cmd.mergedFrom,
        atMs: ctx.nowMs,
      };
      return {
        ok: true,
        facts: [fact],
        reply: {
          kind: 'alias',
          alias: { alias: cmd.alias, kind: cmd.aliasKind, createdAtMs: ctx.nowMs },
          customerId: state.id,
          mergedFrom: cmd.mergedFrom,
        },
      };
    }
    case 'customer.merge_into':
      if (cmd.targetId === state.id) return fail('alias_conflict', 'A customer cannot be merged into itself.', 'alias');
      return { ok: true, facts: [{ kind: 'customer.merged', into: cmd.targetId, atMs: ctx.nowMs }], reply: { kind: 'merged' } };
    case 'ledger.run': {
      const d = ledger.decide(state.ledger, cmd.command, cmd.currencies, ctx);
      if (!d.ok) return d;
      if (cmd.tierPrograms.length === 0 || d.facts.length === 0) {
        return { ok: true, facts: d.facts, reply: { kind: 'ledger', reply: d.reply } };
      }
      // Tiers follow the ledger as it will be after this step (due work may touch every currency).
      let book = structuredClone(state.ledger);
      for (const f of d.facts) book = ledger.evolve(book, f);
      const touched = 'currency' in cmd.command ? [cmd.command.currency] : cmd.tierPrograms.map((p) => p.currency);
      const t = tierFacts(cmd.tierPrograms, new Set(touched), null, book, state.tiers, ctx);
      return { ok: true, facts: [...d.facts, ...t.facts], reply: { kind: 'ledger', reply: d.reply } };
    }
    case 'segment.add_member':
    case 'segment.remove_member': {
      const facts = decideMembership(state.segmentIds, cmd, ctx);
      return {
        ok: true,
        facts,
        reply: { kind: 'segment_membership', segmentId: cmd.segmentId, member: cmd.kind === 'segment.add_member', changed: facts.length > 0 },
      };
    }
  }
}

function createdFact(externalId: string, attributes: Record<string, unknown>, ctx: Ctx): Fact & { kind: 'customer.created' } {
  return {
    kind: 'customer.created',
    id: ctx.newCustomerId(),
    environmentId: ctx.environmentId,
    externalId,
    attributes: mergeAttributes({}, attributes),
    atMs: ctx.nowMs,
  };
}

const noEffects: Effect[] = [];

/** Runs the environment's rules for a new event; appends their facts; returns the effects. */
function rulesFor(cmd: Command & { kind: 'event.record' }, subject: CustomerState, ctx: Ctx, facts: Fact[]): Effect[] {
  if (cmd.rules === null || cmd.rules.plans.length === 0) return noEffects;
  const r = applyRules(cmd.rules, { name: cmd.name, properties: cmd.properties, trust: cmd.trust }, subject, ctx);
  for (const f of r.facts) facts.push(f);
  return r.effects;
}

function recordedFact(cmd: Command & { kind: 'event.record' }, ctx: Ctx): Fact & { kind: 'event.recorded' } {
  return {
    kind: 'event.recorded',
    id: ctx.newEventId(),
    clientEventId: cmd.clientEventId,
    name: cmd.name,
    occurredAtMs: cmd.occurredAtMs,
    receivedAtMs: ctx.nowMs,
    properties: cmd.properties,
    fp: cmd.fp,
  };
}

/** PATCH semantics: a key set to null is removed; other keys replace. */
function mergeAttributes(base: Record<string, unknown>, patch: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base };
  for (const k of Object.keys(patch)) {
    const v = patch[k];
    if (v === null) delete out[k];
    else out[k] = v;
  }
  return out;
}

/**
 * Applies one fact. Mutates and returns the state (the engine owns the only reference; a failed
 * journal append discards the whole partition's memory and replays, so mutation is safe).
 */
export function evolve(state: CustomerState | null, fact: Fact): CustomerState {
  if (fact.kind === 'customer.created') {
    return {
      id: fact.id,
      environmentId: fact.environmentId,
      externalId: fact.externalId,
      attributes: fact.attributes,
      version: 1,
      createdAtMs: fact.atMs,
      updatedAtMs: fact.atMs,
      deletedAtMs: null,
      aliases: [],
      mergedInto: null,
      mergedFrom: [],
      events: new SeenEvents(),
      ledger: ledger.emptyLedger(),
      ruleLimits: {},
      tiers: {},
      segmentIds: [],
    };
  }
  if (state === null) throw new Error(`evolve: ${fact.kind} before customer.created`);
  switch (fact.kind) {
    case 'customer.updated':
      state.attributes = fact.attributes;
      state.version = fact.version;
      state.updatedAtMs = fact.atMs;
      return state;
    case 'customer.deleted':
      state.externalId = null;
      state.attributes = {};
      state.aliases = [];
      state.deletedAtMs = fact.atMs;
      state.updatedAtMs = fact.atMs;
      state.version = fact.version;
      return state;
    case 'event.recorded':
      state.events.add(fact.clientEventId, fact.fp, fact.id);
      return state;
    case 'alias.added':
      state.aliases.push({ alias: fact.alias, kind: fact.aliasKind, createdAtMs: fact.atMs });
      if (fact.mergedFrom !== null && !state.mergedFrom.includes(fact.mergedFrom)) state.mergedFrom.push(fact.mergedFrom);
      return state;
    case 'customer.merged':
      state.mergedInto = fact.into;
      state.updatedAtMs = fact.atMs;
      return state;
    case 'ledger.entry_recorded':
    case 'ledger.pending_confirmed':
    case 'ledger.pending_cancelled':
      state.ledger = ledger.evolve(state.ledger, fact);
      return state;
    case 'rule.fired':
      for (const k of fact.limitKeys) state.ruleLimits[k] = (state.ruleLimits[k] ?? 0) + 1;
      return state;
    case 'tier.changed':
    case 'tier.assigned':
    case 'tier.downgrade_check_scheduled':
      state.tiers = evolveTiers(state.tiers, fact);
      return state;
    case 'segment.member_added':
    case 'segment.member_removed':
      state.segmentIds = evolveMembership(state.segmentIds, fact);
      return state;
    case 'campaign.spent':
      // Budget accounting lives in the projection (campaign_spend); nothing in customer state.
      return state;
  }
}

/** Routing keys this customer owns in its own partition (its external id). Aliases live in their own partitions. */
export function ownKeys(state: CustomerState): string[] {
  return state.externalId === null ? [] : [state.externalId];
}
