// What the customer actor needs to run an environment's rules on an event: the published plans
// (priority order) and the currency configs they award into. Resolved once per change of either
// catalog and then answered synchronously (no await on the hot path while nothing changed).
import type { CurrencyConfig } from '../domain/ledger.js';
import type { RulesContext } from '../domain/rule-effects.js';
import type { CampaignGate } from '../domain/campaigns.js';
import { withAudienceSegment } from '../domain/rules/compile.js';
import { isSharedScope, type RulePlan } from '../domain/rules/index.js';
import type { SegmentDef } from '../domain/segments.js';
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
    // Only while an edit's move of their holders is owed (TierProgramRecord.pendingMove).
    ...(p.retiredLevels != null && p.retiredLevels.length > 0 ? { retiredLevels: p.retiredLevels } : {}),
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

export interface SegmentSource {
  all(environmentId: string): Promise<SegmentDef[]>;
}
export interface CampaignSource {
  gates(environmentId: string): Promise<Record<string, CampaignGate>>;
}

const noSegments: Promise<SegmentDef[]> = Promise.resolve([]);
const noCampaigns: Promise<Record<string, CampaignGate>> = Promise.resolve({});

interface Memo {
  plans: Promise<RulePlan[]>;
  currencies: Promise<Currency[]>;
  tiers: Promise<TierProgram[]>;
  challenges: Promise<ChallengeSet>;
  segments: Promise<SegmentDef[]>;
  campaigns: Promise<Record<string, CampaignGate>>;
  value: RulesContext | null;
}

/**
 * A campaign rule's plan with the campaign's audience as its first hoisted segment check (the
 * plan's audience slot), so evaluation skips non-members with segment_not_matched. The audience
 * is the campaign's current one, not the one at publish time.
 */
export function withAudience(plan: RulePlan, campaigns: Readonly<Record<string, CampaignGate>>): RulePlan {
  return withAudienceSegment(plan, plan.campaignId != null ? (campaigns[plan.campaignId]?.audienceSegment ?? null) : null);
}

export class RulesContexts {
  private readonly memo = new Map<string, Memo>();

  constructor(
    private readonly rules: PlanSource,
    private readonly currencies: CurrencySource,
    private readonly tiers: TierSource,
    private readonly challenges: ChallengeSource | null = null,
    private readonly segments: SegmentSource | null = null,
    private readonly campaigns: CampaignSource | null = null,
  ) {}

  /** The context (null when the environment has no published rule and no active challenge); sync while the caches hold. */
  get(environmentId: string): RulesContext | null | Promise<RulesContext | null> {
    const plans = this.rules.publishedPlans(environmentId);
    const currencies = this.currencies.all(environmentId);
    const tiers = this.tiers.all(environmentId);
    const challenges = this.challenges?.active(environmentId) ?? noChallenges;
    const segments = this.segments?.all(environmentId) ?? noSegments;
    const campaigns = this.campaigns?.gates(environmentId) ?? noCampaigns;
    const m = this.memo.get(environmentId);
    // The catalogs hand out the same promise until they are invalidated.
    if (
      m !== undefined &&
      m.plans === plans &&
      m.currencies === currencies &&
      m.tiers === tiers &&
      m.challenges === challenges &&
      m.segments === segments &&
      m.campaigns === campaigns
    ) {
      return m.value;
    }
    return Promise.all([plans, currencies, tiers, challenges, segments, campaigns]).then(([p, c, t, ch, s, g]) => {
      const configs: CurrencyConfig[] = c.map((x) => ({ key: x.key, negativeBalance: x.negativeBalance, expiryDays: x.expiryDays }));
      const capped = (plan: RulePlan) => plan.campaignId != null && (g[plan.campaignId]?.capped.length ?? 0) > 0;
      const shared = (plan: RulePlan) => plan.limits.some((l) => isSharedScope(l.scope));
      const ordered = p.map((x) => withAudience(x, g));
      const value: RulesContext | null =
        p.length === 0 && ch.challenges.length === 0
          ? null
          : {
              plans: ordered,
              cappedPlans: [...p.filter(capped), ...ch.challenges.map((c) => c.plan).filter(capped)],
              // Only events these plans trigger reserve shared limit slots before the step.
              sharedPlans: ordered.filter(shared),
              currencies: configs,
              tierPrograms: t.map(tierProgramOf),
              challenges: ch.challenges,
              timeZone: ch.timeZone,
              segments: s,
              campaigns: g,
            };
      this.memo.set(environmentId, { plans, currencies, tiers, challenges, segments, campaigns, value });
      return value;
    });
  }
}
