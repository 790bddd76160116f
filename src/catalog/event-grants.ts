// The campaign budget around one event step, shared by POST /v1/events and match admissions (rule
// 6: a match player's event runs as if sent through POST /v1/events). Before the step: a grant for
// what the capped campaigns' rules could award on this event, from the node's allowance
// (campaign-budgets.ts), carried in the step's rules context. After the reply: the unused part
// goes back; an outcome that may have been journaled (internal_error) keeps all of it, so a
// budget is under-used at worst, never exceeded.
import type { CallResult } from '../actors/partition.js';
import { type BudgetGrant, budgetWants, grantUsed } from '../domain/campaigns.js';
import type { Effect, RulesContext } from '../domain/rule-effects.js';

export interface BudgetAllowance {
  grant(environmentId: string, wants: BudgetGrant): BudgetGrant | Promise<BudgetGrant>;
  giveBack(environmentId: string, grant: BudgetGrant, used: BudgetGrant): void;
}

export interface Granted {
  rules: RulesContext | null;
  grant: BudgetGrant | null;
}

/**
 * The rules context for one event step with its budget grant: the same context, synchronously,
 * when no capped campaign could award on this event (the hot path takes no extra turn).
 */
export function grantFor(
  allowance: BudgetAllowance | undefined,
  environmentId: string,
  rules: RulesContext | null,
  event: { name: string; properties: Record<string, unknown> },
  nowMs: number,
): Granted | Promise<Granted> {
  if (allowance === undefined || rules?.campaigns === undefined || rules.cappedPlans === undefined || rules.cappedPlans.length === 0) {
    return { rules, grant: null };
  }
  // Rules' awards and the completion awards of the campaign challenges this event may complete.
  const wants = budgetWants(rules.cappedPlans, rules.campaigns, event, nowMs);
  if (Object.keys(wants).length === 0) return { rules, grant: null };
  const g = allowance.grant(environmentId, wants);
  // Object.assign, not { ...rules, budget }: `budget` is usually a new key, and a key added to a
  // spread copy costs ~1 µs on Node 20 (docs/architecture.md, Hot-path JavaScript).
  const withGrant = (grant: BudgetGrant): Granted => {
    const granted: RulesContext = Object.assign({}, rules);
    granted.budget = grant;
    return { rules: granted, grant };
  };
  return g instanceof Promise ? g.then(withGrant) : withGrant(g);
}

/** Gives back what the step did not award once its reply is in (nothing when no grant was taken). */
export function settleGrant(
  allowance: BudgetAllowance | undefined,
  environmentId: string,
  grant: BudgetGrant | null,
  reply: Promise<CallResult>,
): void {
  if (grant === null || allowance === undefined) return;
  void reply.then(
    (r) => {
      if (r.ok === true && 'effects' in r.reply) allowance.giveBack(environmentId, grant, grantUsed(r.reply.effects as readonly Effect[]));
      // internal_error may follow a journal append of unknown outcome: keep the grant then.
      else if (r.ok === false && r.code !== 'internal_error') allowance.giveBack(environmentId, grant, {});
    },
    () => {},
  );
}
