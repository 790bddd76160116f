// The customer a rule simulation traces against (POST /v1/rules/{id}/simulate with customer_id):
// attributes, counters by name with their readiness, segment names, tier levels by program key and
// the rule's limit counts, read from the customer's actor as a view (nothing changes). A program
// the customer was never placed in reads the level it qualifies for now, as the engine reads it
// (the first level for a customer an event would create). Without a customer the simulation runs
// on an empty one (no attributes, counters not ready, no segments, no tiers).
// As a real event counts itself before rules read counters, every counter the simulated event
// would bump shows one more.
import type { Engine } from '../actors/engine.js';
import { tierProgramOf } from '../catalog/rules-context.js';
import { type CounterDef, counterMatches } from '../domain/counters.js';
import { levelsByProgramKey } from '../domain/rule-effects.js';
import type { SimulationInput } from '../domain/rules/simulate.js';
import { type SegmentDef, segmentNames } from '../domain/segments.js';
import type { TierProgram } from '../domain/tiers.js';
import { ApiError } from '../errors/api-error.js';
import { customerTarget, unwrap } from './wire.js';

export interface SimulationSubjectDeps {
  engine: Engine;
  now(environmentId: string): number | Promise<number>;
  counters: { all(environmentId: string): Promise<CounterDef[]> };
  segments: { all(environmentId: string): Promise<SegmentDef[]> };
  tiers: { all(environmentId: string): Promise<TierProgram[]> };
}

export type SimulationSubject = Pick<SimulationInput, 'customer' | 'limitCounts'>;

export const emptySubject: SimulationSubject = {
  customer: { attributes: {}, counters: {}, readyCounters: [], segments: [], tiers: {}, externalId: null },
  limitCounts: [],
};

/** The event simulated: what the counters' definitions are matched against. */
export interface SimulatedEvent {
  name: string;
  properties: Record<string, unknown>;
}

export async function simulationSubject(
  deps: SimulationSubjectDeps,
  env: string,
  customerRef: string,
  ruleId: string,
  event: SimulatedEvent,
): Promise<SimulationSubject> {
  const target = customerTarget(customerRef);
  const nowMs = await deps.now(env);
  const programs = (await deps.tiers.all(env)).map(tierProgramOf);
  const [result, counterDefs, segmentDefs] = await Promise.all([
    deps.engine.execute({ env, target, command: { kind: 'customer.view', tierPrograms: programs }, nowMs }),
    deps.counters.all(env),
    deps.segments.all(env),
  ]);
  // An event is placed by occurred_at; a simulated one happens now, inside every window.
  const counted = { name: event.name, properties: event.properties, occurredAtMs: nowMs };
  const bump = (d: CounterDef) => (counterMatches(d, counted) ? 1 : 0);
  if (result.ok === false && result.code === 'resource_not_found') {
    // An external id never seen is a customer an event would create: simulate that new customer.
    if (target.by === 'key') return newCustomerSubject(customerRef, counterDefs, segmentDefs, programs, bump);
    throw new ApiError('resource_not_found', { message: 'No customer with this id.', param: 'customer_id' });
  }
  const reply = unwrap(result);
  if (reply.kind !== 'customer') throw new ApiError('internal_error');
  const view = reply.customer;
  const counters: Record<string, number> = {};
  const readyCounters: string[] = [];
  for (const d of counterDefs) {
    counters[d.name] = (view.counters[d.id] ?? 0) + bump(d);
    if (d.status === 'ready') readyCounters.push(d.name);
  }
  const prefix = `${ruleId}|`;
  const limitCounts: SimulationSubject['limitCounts'] = [];
  for (const [key, count] of Object.entries(view.ruleLimits)) {
    if (!key.startsWith(prefix)) continue;
    const rest = key.slice(prefix.length);
    const bar = rest.indexOf('|');
    limitCounts.push({ limitId: rest.slice(0, bar), scopeKey: rest.slice(bar + 1), count });
  }
  const held: Record<string, { level: string }> = {};
  for (const t of view.tiers) held[t.programId] = { level: t.level };
  for (const t of view.qualifiedTiers) held[t.programId] = { level: t.level };
  return {
    customer: {
      attributes: view.attributes,
      counters,
      readyCounters,
      segments: segmentNames(segmentDefs, view.segmentIds, view.attributes),
      tiers: { ...levelsByProgramKey(programs, held) },
      externalId: view.externalId,
    },
    limitCounts,
  };
}

function newCustomerSubject(
  externalId: string,
  counterDefs: readonly CounterDef[],
  segmentDefs: readonly SegmentDef[],
  programs: readonly TierProgram[],
  bump: (d: CounterDef) => number,
): SimulationSubject {
  const counters: Record<string, number> = {};
  for (const d of counterDefs) counters[d.name] = bump(d);
  // An empty ledger: every program's first level (threshold 0).
  const tiers: Record<string, string> = {};
  for (const p of programs) if (p.levels[0] !== undefined) tiers[p.key] = p.levels[0].key;
  return {
    customer: {
      attributes: {},
      counters,
      readyCounters: counterDefs.filter((d) => d.status === 'ready').map((d) => d.name),
      segments: segmentNames(segmentDefs, [], {}),
      tiers,
      externalId,
    },
    limitCounts: [],
  };
}
