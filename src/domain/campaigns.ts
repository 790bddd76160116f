// Campaigns: a status machine, a schedule and budgets (a cap per currency on what the campaign's
// rules award across all customers). What the customer's step needs is a CampaignGate per
// campaign (loaded before the step) and, per command, a budget grant: plain data saying how much
// of each capped (campaign, currency) this one command may award. The grant was taken from the
// node's allowance before the step (src/campaigns/budget-allowance.ts), so the step stays pure:
// an award beyond the grant is skipped with `budget_exhausted`, and what is awarded is journaled
// as a `campaign.spent` fact next to the ledger entry. Pure; never throws.
import { ledgerLimits } from './ledger.js';
import { PathSource } from './rules/paths.js';

export const campaignStatuses = ['draft', 'active', 'paused', 'ended'] as const;
export type CampaignStatus = (typeof campaignStatuses)[number];

/**
 * Status transitions. Each operation lists the statuses it starts from; anything else is 409
 * invalid_state. `ended` is final (no edit, no transition). An active or paused campaign past its
 * `ends_at` is ended by the scheduler (jobs/catalog-ends.ts), and activating one whose `ends_at`
 * has passed is refused (activationRefusal): it could never run.
 */
export const campaignTransitions = {
  activate: { from: ['draft', 'paused'], to: 'active' },
  pause: { from: ['active'], to: 'paused' },
  end: { from: ['draft', 'active', 'paused'], to: 'ended' },
  edit: { from: ['draft', 'active', 'paused'], to: null },
  /** Delete refuses a running campaign: pause or end it first. */
  delete: { from: ['draft', 'paused', 'ended'], to: null },
} as const satisfies Record<string, { from: readonly CampaignStatus[]; to: CampaignStatus | null }>;
export type CampaignOperation = keyof typeof campaignTransitions;

export function allowed(status: CampaignStatus, op: CampaignOperation): boolean {
  return (campaignTransitions[op].from as readonly CampaignStatus[]).includes(status);
}

/** Why activating the campaign at nowMs is refused although its status allows it; null when it is not. */
export function activationRefusal(c: { endsAtMs: number | null }, nowMs: number): string | null {
  if (c.endsAtMs !== null && nowMs >= c.endsAtMs) return 'Its ends_at has passed, so it could never run; move ends_at later (PATCH) first.';
  return null;
}

/** What a rule's step needs of its campaign. */
export interface CampaignGate {
  id: string;
  status: CampaignStatus;
  startsAtMs: number | null;
  endsAtMs: number | null;
  audienceSegment: string | null;
  /** Currencies with a budget (awards in them need a grant). */
  capped: readonly string[];
}

/** Why a campaign's rules do not run now; null when they do. */
export function campaignInactiveReason(c: CampaignGate | undefined, nowMs: number): string | null {
  if (c === undefined) return 'The campaign does not exist.';
  if (c.status !== 'active') return `The campaign is ${c.status}.`;
  if (c.startsAtMs !== null && nowMs < c.startsAtMs) return 'The campaign has not started.';
  if (c.endsAtMs !== null && nowMs >= c.endsAtMs) return 'The campaign is over.';
  return null;
}

export function budgetKey(campaignId: string, currency: string): string {
  return `${campaignId}|${currency}`;
}

/** Per command: budget key -> amount this command may award (taken from the node's allowance). */
export type BudgetGrant = Record<string, number>;

export type CampaignFact = { kind: 'campaign.spent'; campaignId: string; currency: string; amount: number; atMs: number };

/**
 * Consumes `amount` of the grant for an award of a capped campaign currency. Mutates `left` (the
 * step's private copy of the grant). False: the grant does not cover it (budget_exhausted).
 */
export function consumeGrant(left: BudgetGrant, key: string, amount: number): boolean {
  const have = left[key] ?? 0;
  if (have < amount) return false;
  left[key] = have - amount;
  return true;
}

/** An award whose amount is known only inside the step (amount_from a customer path): take what the node holds. */
export const wantAll = Number.POSITIVE_INFINITY;

interface WantPlan {
  event: string;
  campaignId?: string | null;
  actions: ReadonlyArray<
    | { type: string; currency?: string; amount?: number }
    | { type: 'points.award_from'; currency: string; from: { src: number; seg: string[] }; multiplier: number }
  >;
}

function walk(v: unknown, seg: readonly string[]): unknown {
  for (const s of seg) {
    if (v === null || typeof v !== 'object' || !Object.hasOwn(v, s)) return undefined;
    v = (v as Record<string, unknown>)[s];
  }
  return v;
}

/**
 * The most each capped (campaign, currency) could award for this event: the sum of the awards of
 * every live campaign rule the event triggers (conditions are not evaluated here, so this may be
 * more than will be awarded; the unused part goes back to the node's allowance after the step).
 * amount_from an event property is computed (rounded up); from a customer path it is wantAll.
 */
export function budgetWants(
  plans: readonly WantPlan[],
  campaigns: Readonly<Record<string, CampaignGate>>,
  event: { name: string; properties: Record<string, unknown> },
  nowMs: number,
): BudgetGrant {
  const wants: BudgetGrant = {};
  for (const p of plans) {
    if (p.event !== event.name || p.campaignId == null) continue;
    const c = campaigns[p.campaignId];
    if (c === undefined || c.capped.length === 0 || campaignInactiveReason(c, nowMs) !== null) continue;
    for (const a of p.actions) {
      let amount: number;
      let currency: string;
      if (a.type === 'points.award' && 'amount' in a && typeof a.amount === 'number' && typeof a.currency === 'string') {
        amount = a.amount;
        currency = a.currency;
      } else if (a.type === 'points.award_from' && 'from' in a) {
        currency = a.currency;
        if (a.from.src === PathSource.eventProperty) {
          const v = walk(event.properties, a.from.seg);
          // An invalid amount is skipped by the step (amount_invalid): it needs no budget. So is
          // one past the ledger's largest amount (a huge property would otherwise ask the
          // allowance for more than a bigint holds, and the event would fail with a 500).
          const x = typeof v === 'number' && Number.isFinite(v) ? Math.ceil(v * a.multiplier) : 0;
          amount = x > 0 && x <= ledgerLimits.amountMinorMax ? x : 0;
        } else amount = wantAll;
      } else continue;
      if (!c.capped.includes(currency)) continue;
      const k = budgetKey(c.id, currency);
      wants[k] = (wants[k] ?? 0) + amount;
    }
  }
  return wants;
}

/** What a step's effects awarded per budget key (to give the rest of a grant back). */
export function grantUsed(effects: ReadonlyArray<{ type: string; campaignId?: string; currency?: string; amount?: number }>): BudgetGrant {
  const used: BudgetGrant = {};
  for (const e of effects) {
    if (e.type !== 'points.awarded' && e.type !== 'challenge.points_awarded') continue;
    if (e.campaignId === undefined || e.currency === undefined || e.amount === undefined) continue;
    const k = budgetKey(e.campaignId, e.currency);
    used[k] = (used[k] ?? 0) + e.amount;
  }
  return used;
}
