// What the customer actor needs to run an environment's rules on an event: the published plans
// (priority order) and the currency configs they award into. Resolved once per change of either
// catalog and then answered synchronously (no await on the hot path while nothing changed).
import type { CurrencyConfig } from '../domain/ledger.js';
import type { RulesContext } from '../domain/rule-effects.js';
import type { RulePlan } from '../domain/rules/index.js';
import type { TierProgram } from '../domain/tiers.js';
import type { Currency } from './currencies.js';

/** Only what evaluation needs (records carry catalog fields too). */
export function tierProgramOf(p: TierProgram): TierProgram {
  return {
    id: p.id,
    key: p.key,
    currency: p.currency,
    basis: p.basis,
    rollingDays: p.rollingDays ?? null,
    levels: p.levels,
    downgradeCheck: p.downgradeCheck ?? null,
  };
}

export interface PlanSource {
  publishedPlans(environmentId: string): Promise<RulePlan[]>;
}
export interface CurrencySource {
  all(environmentId: string): Promise<Currency[]>;
}
export interface TierSource {
  all(environmentId: string): Promise<TierProgram[]>;
}

interface Memo {
  plans: Promise<RulePlan[]>;
  currencies: Promise<Currency[]>;
  tiers: Promise<TierProgram[]>;
  value: RulesContext | null;
}

export class RulesContexts {
  private readonly memo = new Map<string, Memo>();

  constructor(
    private readonly rules: PlanSource,
    private readonly currencies: CurrencySource,
    private readonly tiers: TierSource,
  ) {}

  /** The context (null when the environment has no published rule); sync while both caches hold. */
  get(environmentId: string): RulesContext | null | Promise<RulesContext | null> {
    const plans = this.rules.publishedPlans(environmentId);
    const currencies = this.currencies.all(environmentId);
    const tiers = this.tiers.all(environmentId);
    const m = this.memo.get(environmentId);
    // The catalogs hand out the same promise until they are invalidated.
    if (m !== undefined && m.plans === plans && m.currencies === currencies && m.tiers === tiers) return m.value;
    return Promise.all([plans, currencies, tiers]).then(([p, c, t]) => {
      const configs: CurrencyConfig[] = c.map((x) => ({ key: x.key, negativeBalance: x.negativeBalance, expiryDays: x.expiryDays }));
      const value = p.length === 0 ? null : { plans: p, currencies: configs, tierPrograms: t.map(tierProgramOf) };
      this.memo.set(environmentId, { plans, currencies, tiers, value });
      return value;
    });
  }
}
