// What the customer actor needs to run an environment's rules on an event: the published plans
// (priority order) and the currency configs they award into. Resolved once per change of either
// catalog and then answered synchronously (no await on the hot path while nothing changed).
import type { CurrencyConfig } from '../domain/ledger.js';
import type { RulesContext } from '../domain/rule-effects.js';
import type { RulePlan } from '../domain/rules/index.js';
import type { TierProgram } from '../domain/tiers.js';
import type { ChallengeSet } from './challenges.js';
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
/** Active challenges and the environment's time zone (catalog/challenges.ts). */
export interface ChallengeSource {
  active(environmentId: string): Promise<ChallengeSet>;
}

const noChallenges: Promise<ChallengeSet> = Promise.resolve({ timeZone: 'UTC', challenges: [] });

interface Memo {
  plans: Promise<RulePlan[]>;
  currencies: Promise<Currency[]>;
  tiers: Promise<TierProgram[]>;
  challenges: Promise<ChallengeSet>;
  value: RulesContext | null;
}

export class RulesContexts {
  private readonly memo = new Map<string, Memo>();

  constructor(
    private readonly rules: PlanSource,
    private readonly currencies: CurrencySource,
    private readonly tiers: TierSource,
    private readonly challenges: ChallengeSource | null = null,
  ) {}

  /** The context (null when the environment has no published rule and no active challenge); sync while the caches hold. */
  get(environmentId: string): RulesContext | null | Promise<RulesContext | null> {
    const plans = this.rules.publishedPlans(environmentId);
    const currencies = this.currencies.all(environmentId);
    const tiers = this.tiers.all(environmentId);
    const challenges = this.challenges?.active(environmentId) ?? noChallenges;
    const m = this.memo.get(environmentId);
    // The catalogs hand out the same promise until they are invalidated.
    if (m !== undefined && m.plans === plans && m.currencies === currencies && m.tiers === tiers && m.challenges === challenges) return m.value;
    return Promise.all([plans, currencies, tiers, challenges]).then(([p, c, t, ch]) => {
      const configs: CurrencyConfig[] = c.map((x) => ({ key: x.key, negativeBalance: x.negativeBalance, expiryDays: x.expiryDays }));
      const value =
        p.length === 0 && ch.challenges.length === 0
          ? null
          : { plans: p, currencies: configs, tierPrograms: t.map(tierProgramOf), challenges: ch.challenges, timeZone: ch.timeZone };
      this.memo.set(environmentId, { plans, currencies, tiers, challenges, value });
      return value;
    });
  }
}
