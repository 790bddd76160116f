// Applying published rules to one recorded event, inside the customer's step: evaluate each plan
// whose trigger is the event (priority order), and turn what fires into facts in the SAME journal
// entry as the event: `rule.fired` (limit counts) and ledger entries for points.award. Returns the
// effects a sync answer reports. Pure: plans and currency configs were loaded before the step.
// Actions whose mechanics are not in the engine yet are reported as skipped, never half-applied.
import * as ledger from './ledger.js';
import { evaluatePlan, type EvalInput, type RulePlan } from './rules/index.js';

export interface RulesContext {
  plans: readonly RulePlan[];
  currencies: readonly ledger.CurrencyConfig[];
}

export type RuleFact = { kind: 'rule.fired'; ruleId: string; versionNumber: number; limitKeys: string[]; atMs: number };

export type Effect =
  | { type: 'rule.fired'; ruleId: string; version: number }
  | { type: 'points.awarded'; ruleId: string; currency: string; amount: number; entryId: string }
  | { type: 'rule.skipped'; ruleId: string; reason: string; detail: string }
  | { type: 'action.skipped'; ruleId: string; action: string; reason: string };

export interface RuleSubject {
  externalId: string | null;
  attributes: Record<string, unknown>;
  ledger: ledger.LedgerState;
  ruleLimits: Record<string, number>;
}

const noCounters: Record<string, number | undefined> = {};
const noneReady = (): boolean => false;
const noTiers: Record<string, string> = {};
const noSegments: readonly string[] = [];

export function limitKey(ruleId: string, limitId: string, scopeKey: string): string {
  return `${ruleId}|${limitId}|${scopeKey}`;
}

/**
 * The facts and effects of the rules for one event. `subject` is the customer as it is before the
 * event's rule facts; it is not modified (ledger decisions run on a copy when several awards touch
 * the ledger in one event).
 */
export function applyRules(
  rules: RulesContext,
  event: { name: string; properties: Record<string, unknown>; trust: string },
  subject: RuleSubject,
  ctx: ledger.LedgerCtx,
): { facts: Array<RuleFact | ledger.LedgerFact>; effects: Effect[] } {
  const facts: Array<RuleFact | ledger.LedgerFact> = [];
  const effects: Effect[] = [];
  let book = subject.ledger;
  let bookIsCopy = false;
  let ruleIdNow = '';
  const input: EvalInput = {
    event,
    customer: {
      attributes: subject.attributes,
      counters: noCounters,
      countersReady: noneReady,
      segments: noSegments,
      tiers: noTiers,
      externalId: subject.externalId,
    },
    limitCounts: (limitId, scopeKey) => subject.ruleLimits[limitKey(ruleIdNow, limitId, scopeKey)] ?? 0,
  };
  for (const plan of rules.plans) {
    if (plan.event !== event.name) continue;
    ruleIdNow = plan.ruleId;
    const outcome = evaluatePlan(plan, input);
    if (!outcome.fired) {
      effects.push({ type: 'rule.skipped', ruleId: plan.ruleId, reason: outcome.reason, detail: outcome.detail });
      continue;
    }
    facts.push({
      kind: 'rule.fired',
      ruleId: plan.ruleId,
      versionNumber: plan.versionNumber,
      limitKeys: outcome.limitKeys.map((k) => limitKey(plan.ruleId, k.limitId, k.scopeKey)),
      atMs: ctx.nowMs,
    });
    effects.push({ type: 'rule.fired', ruleId: plan.ruleId, version: plan.versionNumber });
    for (const action of outcome.actions) {
      if (action.type !== 'points.award') {
        effects.push({ type: 'action.skipped', ruleId: plan.ruleId, action: action.type, reason: 'action_not_available' });
        continue;
      }
      const d = ledger.decide(
        book,
        {
          kind: 'ledger.award',
          currency: action.currency,
          amount: action.amount,
          reason: `rule ${plan.ruleId} v${plan.versionNumber}`,
          sourceType: 'rule_execution',
          sourceId: plan.ruleId,
        },
        rules.currencies,
        ctx,
      );
      if (!d.ok) {
        effects.push({ type: 'action.skipped', ruleId: plan.ruleId, action: action.type, reason: d.code });
        continue;
      }
      // Later awards in this event must see this one: decide on a private copy of the ledger.
      if (!bookIsCopy) {
        book = structuredClone(book);
        bookIsCopy = true;
      }
      for (const f of d.facts) {
        book = ledger.evolve(book, f);
        facts.push(f);
      }
      if (d.reply.kind === 'ledger.entry') {
        effects.push({ type: 'points.awarded', ruleId: plan.ruleId, currency: action.currency, amount: action.amount, entryId: d.reply.entry.id });
      }
    }
  }
  return { facts, effects };
}
