// What the customer actor needs to run an environment's rules on an event: the published plans
// (priority order) and the currency configs they award into. Resolved once per change of either
// catalog and then answered synchronously (no await on the hot path while nothing changed).
import type { CurrencyConfig } from '../domain/ledger.js';
import type { RulesContext } from '../domain/rule-effects.js';
import type { RulePlan } from '../domain/rules/index.js';
import type { Currency } from './currencies.js';

export interface PlanSource {
  publishedPlans(environmentId: string): Promise<RulePlan[]>;
}
export interface CurrencySource {
  all(environmentId: string): Promise<Currency[]>;
}

interface Memo {
  plans: Promise<RulePlan[]>;
  currencies: Promise<Currency[]>;
  value: RulesContext | null;
}

export class RulesContexts {
  private readonly memo = new Map<string, Memo>();

  constructor(
    private readonly rules: PlanSource,
    private readonly currencies: CurrencySource,
  ) {}

  /** The context (null when the environment has no published rule); sync while both caches hold. */
  get(environmentId: string): RulesContext | null | Promise<RulesContext | null> {
    const plans = this.rules.publishedPlans(environmentId);
    const currencies = this.currencies.all(environmentId);
    const m = this.memo.get(environmentId);
    // The catalogs hand out the same promise until they are invalidated.
    if (m !== undefined && m.plans === plans && m.currencies === currencies) return m.value;
    return Promise.all([plans, currencies]).then(([p, c]) => {
      const configs: CurrencyConfig[] = c.map((x) => ({ key: x.key, negativeBalance: x.negativeBalance, expiryDays: x.expiryDays }));
      const value = p.length === 0 ? null : { plans: p, currencies: configs };
      this.memo.set(environmentId, { plans, currencies, value });
      return value;
    });
  }
}
