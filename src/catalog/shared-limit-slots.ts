// Rule limits shared by every customer around one event step, for POST /v1/events and match
// players (as event-grants.ts does for campaign budgets). Before the step: for each plan with a
// shared limit that this event triggers (name, trust minimum, live campaign), a slot per shared
// limit is reserved in the SharedLimits store under the event's client id, and the answers ride in
// the step's rules context (plain data). A plan whose shared scope the event has no value for
// reserves nothing (it skips with limit_scope_missing). After the reply: the slots this call
// created for rules that did not fire (budget_exhausted included) are freed; an error other
// than internal_error frees them all; internal_error (a journal append of unknown outcome) keeps
// them, so a limit is under-used at worst, never exceeded. A duplicate records nothing: it frees what it created, never the first event's slot.
// Events that trigger no such plan return null synchronously: no await, no allocation.
import type { CallResult } from '../actors/partition.js';
import { campaignInactiveReason } from '../domain/campaigns.js';
import type { Effect, RulesContext } from '../domain/rule-effects.js';
import { type EvalInput, isSharedScope, limitKey, type SharedLimitAnswer, scopeKey, trustRank } from '../domain/rules/index.js';
import type { SharedLimitItem, SharedLimits } from '../persistence/ports.js';

/** The slots one call created: what its settle may free. */
export interface HeldSlots {
  environmentId: string;
  clientEventId: string;
  items: SharedLimitItem[];
}

export interface Reserved {
  rules: RulesContext;
  held: HeldSlots | null;
}

const noCustomer: EvalInput['customer'] = { attributes: {}, counters: {}, countersReady: new Set(), segments: [], tiers: {}, externalId: null };
const noCounts = (): number => 0;

/**
 * The rules context for one event step with its shared limit answers; null (synchronously) when
 * no plan with a shared limit could fire on this event. Rejects when the store fails: the event
 * must not be stepped without its answers (every shared limit would count as reached).
 */
export function reserveSharedLimits(
  store: SharedLimits | undefined,
  environmentId: string,
  clientEventId: string,
  rules: RulesContext | null,
  event: { name: string; properties: Record<string, unknown>; trust: string },
  nowMs: number,
): Promise<Reserved> | null {
  const plans = rules?.sharedPlans;
  if (store === undefined || rules === null || plans === undefined || plans.length === 0) return null;
  let items: SharedLimitItem[] | null = null;
  for (const plan of plans) {
    if (plan.event !== event.name) continue;
    // Checks that come before limits and need no customer: a rule they skip takes no slot.
    if (plan.trustRank >= 0 && trustRank(event.trust) < plan.trustRank) continue;
    if (plan.campaignId != null && campaignInactiveReason(rules.campaigns?.[plan.campaignId], nowMs) !== null) continue;
    // Shared scopes read the event only.
    const input: EvalInput = { event, customer: noCustomer, limitCounts: noCounts };
    const mine: SharedLimitItem[] = [];
    let missing = false;
    for (const l of plan.limits) {
      if (!isSharedScope(l.scope)) continue;
      const key = scopeKey(l.scope, input);
      // A shared scope value the event lacks skips the rule (limit_scope_missing): no slot at all.
      if (key === null) {
        missing = true;
        break;
      }
      mine.push({ ruleId: plan.ruleId, limitId: l.id, scopeKey: key, max: l.max });
    }
    if (missing || mine.length === 0) continue;
    items ??= [];
    for (const it of mine) items.push(it);
  }
  if (items === null) return null;
  const asked = items;
  return store.reserve(environmentId, clientEventId, asked).then((answers) => {
    const shared: Record<string, SharedLimitAnswer> = {};
    const created: SharedLimitItem[] = [];
    asked.forEach((it, i) => {
      const a = answers[i]!;
      shared[limitKey(it.ruleId, it.limitId, it.scopeKey)] = { granted: a.granted, taken: a.taken };
      if (a.created) created.push(it);
    });
    // Object.assign, not a spread with a new key (see event-grants.ts).
    const withSlots: RulesContext = Object.assign({}, rules);
    withSlots.sharedLimits = shared;
    return { rules: withSlots, held: created.length === 0 ? null : { environmentId, clientEventId, items: created } };
  });
}

/** Frees, once the reply is in, the created slots of rules that did not fire (nothing when none was created). */
export function settleSharedLimits(store: SharedLimits | undefined, held: HeldSlots | null, reply: Promise<CallResult>): void {
  if (held === null || store === undefined) return;
  void reply.then(
    (r) => {
      let free: SharedLimitItem[];
      if (r.ok === true) {
        const rep = r.reply as { duplicate?: boolean; effects?: readonly Effect[] };
        if (rep.duplicate === true || rep.effects === undefined) free = held.items;
        else {
          const fired = new Set<string>();
          for (const e of rep.effects) if (e.type === 'rule.fired') fired.add(e.ruleId);
          free = held.items.filter((it) => !fired.has(it.ruleId));
        }
      } else if (r.ok === false && r.code !== 'internal_error') free = held.items;
      // internal_error (the append may have happened) and redirect: keep the slots.
      else return;
      if (free.length > 0) return store.release(held.environmentId, held.clientEventId, free);
    },
    () => {},
  ).catch(() => {
    // A failed release keeps its slots: the limit is under-used, never exceeded.
  });
}
