// POST /rules/{id}/simulate as a pure function: trace a plan against an event and a snapshot of
// the customer, changing nothing. The input is plain data (sets as arrays, limit counts as rows)
// so it can cross a worker-thread boundary; simulateRule builds the lookups and calls traceRule.
import type { ResolvedAction, RulePlan } from './compile.js';
import { type EvalInput, type RuleTrace, traceRule } from './evaluate.js';

export interface SimulationInput {
  event: { name: string; properties: Record<string, unknown>; trust: string };
  customer: {
    attributes: Record<string, unknown>;
    counters: Record<string, number | undefined>;
    readyCounters: string[];
    segments: string[];
    tiers: Record<string, string>;
    externalId: string | null;
  };
  limitCounts: { limitId: string; scopeKey: string; count: number }[];
}

/**
 * The simulate answer. `simulated` is always true (a dry run: nothing was journaled); `plan`
 * lists the actions the rule would apply (empty when it would skip); `trace` carries the outcome
 * (fired, or the skip reason) and every check with expected and actual values.
 */
export interface SimulationResult {
  simulated: true;
  plan: ResolvedAction[];
  trace: RuleTrace;
}

export function toEvalInput(s: SimulationInput): EvalInput {
  const ready = new Set(s.customer.readyCounters);
  const counts = new Map<string, number>();
  for (const r of s.limitCounts) counts.set(`${r.limitId}\u0000${r.scopeKey}`, r.count);
  return {
    event: s.event,
    customer: {
      attributes: s.customer.attributes,
      counters: s.customer.counters,
      countersReady: ready,
      segments: s.customer.segments,
      tiers: s.customer.tiers,
      externalId: s.customer.externalId,
    },
    limitCounts: (limitId, scopeKey) => counts.get(`${limitId}\u0000${scopeKey}`) ?? 0,
  };
}

export function simulateRule(plan: RulePlan, input: SimulationInput | EvalInput): SimulationResult {
  const evalInput = typeof input.limitCounts === 'function' ? (input as EvalInput) : toEvalInput(input as SimulationInput);
  const trace = traceRule(plan, evalInput);
  return { simulated: true, plan: trace.outcome.fired ? [...trace.outcome.actions] : [], trace };
}
