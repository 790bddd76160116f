// The shapes of the API's answers, as zod schemas: one per resource, reused by every route that
// answers it (pageOf(x) for its lists), so /v1/openapi.json documents each success response with
// the schema of what the wire mappers (wire.ts and the handlers' ...Wire functions) really write.
// They document; they never validate an answer in the server. test/api/openapi-responses.test.ts
// walks a session through the service and checks every answer against the document, so a mapper
// that drifts from its schema fails there. A schema with an `id` becomes a named component
// (components.schemas.<id>). Enums of a domain union are spelled with allOf<Union>(), which fails
// to compile when a member is missing or unknown.
import { z } from 'zod';
import type { ChallengeStatus, EnrollmentMode, ProgressStatus, SkipReason } from '../domain/challenges.js';
import type { CounterPeriod, CounterStatus } from '../domain/counters.js';
import type { EntryStatus, EntryType } from '../domain/ledger.js';
import { reasonCodes } from '../domain/match/reasons.js';
import type { MatchStatus, PlayerStatus, ReviewDecision } from '../domain/match/verdict.js';
import type { PeriodKind } from '../domain/periods.js';
import type { IssuanceStatus } from '../domain/rewards.js';
import { skipReasons as ruleSkipReasons, type TraceCheck } from '../domain/rules/evaluate.js';
import { notLiveReasons } from '../domain/rules/simulate.js';
import { expiryAfterPattern } from '../domain/rewards.js';
import type { TierBasis } from '../domain/tiers.js';
import { attributeTypes } from '../catalog/attributes.js';
import { ruleStatuses } from '../catalog/rules.js';
import { campaignStatuses } from '../domain/campaigns.js';
import { segmentKinds } from '../domain/segments.js';
import { trustLevels } from '../domain/rules/trust.js';
import { errorTable } from '../errors/codes.js';

/**
 * z.enum of every member of the string union T, checked at compile time both ways: a value that is
 * not a member, or a member left out, is a type error.
 */
export function allOf<T extends string>() {
  return <const V extends readonly [T, ...T[]]>(values: V & ([T] extends [V[number]] ? unknown : 'a member of the union is missing')) =>
    z.enum(values as V);
}

/** An instant as the API writes it (Date.prototype.toISOString: UTC, milliseconds). */
export const timestamp = z.iso.datetime();
const id = z.string();
const version = z.number().int().min(1).describe('Increases on every change; the ETag is "<version>".');
/** The tail of every versioned catalog resource: its version and when it was created and last changed. */
const versioned = { version, created_at: timestamp, updated_at: timestamp };

/** A page of a list (spec part 1): the items, the cursor of the next page (null on the last) and whether there is one. */
export function pageOf<T extends z.ZodType>(item: T) {
  return z.object({
    data: z.array(item),
    next_cursor: z.string().nullable().describe('Pass as `cursor` for the next page; null on the last page.'),
    has_more: z.boolean(),
  });
}

// ---- errors -------------------------------------------------------------------------------------

const errorTypes = [...new Set(Object.values(errorTable).map((e) => e.type))] as [string, ...string[]];

/** The `error` object of every error body (and of a failed item of an event batch). */
export const apiErrorObject = z.strictObject({
  code: z.enum(Object.keys(errorTable) as [string, ...string[]]),
  type: z.enum(errorTypes),
  message: z.string().describe('For people; may change. Match on code.'),
  param: z.string().optional().describe('The first failing field, e.g. events[3].occurred_at, or a header name.'),
  details: z.unknown().optional().describe('validation_failed: [{param, message}] for every issue; other codes: code-specific.'),
  request_id: z
    .string()
    .describe(
      'The Request-Id of the request that produced this error. Usually the same as the Request-Id response header; ' +
        'an error replayed from an Idempotency-Key (Idempotent-Replayed: true) keeps the id of the request that was answered first, ' +
        'while the header names the replaying request.',
    ),
});
/** components.schemas.Error: the one error body. */
export const apiErrorBody = z.strictObject({ error: apiErrorObject });

// ---- customers ----------------------------------------------------------------------------------

export const customerSchema = z
  .object({
    id,
    external_id: z.string().nullable().describe("The caller's own id; null once the customer is deleted."),
    attributes: z.record(z.string(), z.unknown()),
    version,
    deleted_at: timestamp.nullable(),
    created_at: timestamp,
    updated_at: timestamp,
  })
  .meta({ id: 'Customer' });

export const aliasSchema = z
  .object({ alias: z.string(), kind: z.string().describe('anonymous'), customer_id: id, created_at: timestamp })
  .meta({ id: 'CustomerAlias' });

export const aliasAddedSchema = z.object({
  alias: aliasSchema,
  merged_from: z.string().nullable().describe('The customer merged into this one (its external id was the alias), or null.'),
});

export const balanceSchema = z
  .object({
    currency: z.string(),
    available: z.number().int().describe('Spendable now (minor units); negative only under negative_balance: allow.'),
    pending: z.number().int().describe('Credits not yet confirmed.'),
    lifetime_earned: z.number().int(),
  })
  .meta({ id: 'Balance' });

export const balancesSchema = z.object({ data: z.array(balanceSchema) });

const inventorySchema = z.array(z.object({ item: z.string(), quantity: z.number().int() })).describe('Items granted by rules, sorted by item key.');

const issuanceStatus = allOf<IssuanceStatus>()(['pending', 'issued', 'redeemed', 'cancelled', 'expired', 'refused']);

export const customerStateSchema = z.object({
  customer: customerSchema,
  balances: z.array(balanceSchema),
  tiers: z
    .array(
      z.object({
        program_id: id,
        level: z.string(),
        since: timestamp.nullable().describe('null: never placed in the program; level is the one the customer qualifies for now (what rules read).'),
      }),
    )
    .describe('One per tier program of the environment.'),
  segments: z.array(z.string()).describe('Names of the segments the customer is in (static memberships and dynamic matches).'),
  counters: z.record(z.string(), z.number()).describe("Each counter definition's current value, by counter name."),
  challenges: z.array(
    z.object({ challenge_id: id, period_key: z.string(), count: z.number().int(), status: allOf<ProgressStatus>()(['active', 'completed']) }),
  ),
  issuances: z.array(z.object({ id, reward_id: id, status: issuanceStatus, expires_at: timestamp.nullable() })),
  inventory: inventorySchema,
  aliases: z.array(aliasSchema),
});

const entryType = allOf<EntryType>()(['award', 'adjustment', 'spend', 'reversal', 'expiry', 'transfer']);
const entryStatus = allOf<EntryStatus>()(['pending', 'posted', 'expired', 'cancelled']);

export const ledgerEntrySchema = z
  .object({
    id,
    currency: z.string(),
    type: entryType,
    status: entryStatus,
    amount: z.number().int().describe('Minor units; negative for spends, expiries and debits.'),
    remaining: z.number().int().describe('What is left of a credit after spends and expiry.'),
    expires_at: timestamp.nullable(),
    confirm_after: timestamp.nullable(),
    reason: z.string().nullable(),
    source_type: z.string().nullable(),
    source_id: z.string().nullable(),
    created_at: timestamp,
  })
  .meta({ id: 'LedgerEntry' });

export const ledgerEntryCreatedSchema = ledgerEntrySchema.extend({ balance: balanceSchema.describe('The balance of the currency after the entry.') });

export const customerExportSchema = z.object({
  exported_at: timestamp,
  customer: customerSchema,
  aliases: z
    .array(z.object({ alias: z.string(), created_at: timestamp }))
    .describe("The customer's aliases and those of every customer merged into it (they route to it)."),
  events: z
    .array(
      z.object({
        id,
        name: z.string(),
        occurred_at: timestamp,
        received_at: timestamp,
        properties: z.record(z.string(), z.unknown()).nullable(),
      }),
    )
    .describe("The newest events (at most 1000) of the customer and of every customer merged into it, newest first."),
  events_since: timestamp
    .nullable()
    .describe('Every event received at or after this instant is listed; older ones were left out. Null when none were.'),
  ledger_entries: z
    .array(ledgerEntrySchema)
    .describe("The newest ledger entries (at most 1000) of the customer and of every customer merged into it, newest first."),
  ledger_entries_since: timestamp
    .nullable()
    .describe('Every ledger entry created at or after this instant is listed; older ones were left out. Null when none were.'),
  merged_customers: z
    .array(z.object({ id, attributes: z.record(z.string(), z.unknown()) }))
    .describe('Customers merged into this one (through earlier merges too), with the attributes they still hold. Beyond the spec.'),
  reward_issuances: z.array(
    z.object({
      id,
      reward: id,
      status: issuanceStatus,
      expires_at: timestamp.nullable(),
      redeemed_at: timestamp.nullable(),
      cancelled_at: timestamp.nullable(),
      created_at: timestamp,
    }),
  ),
  tiers: z.array(z.object({ program: id, level: z.string(), since: timestamp })),
  inventory: inventorySchema,
  segments: z.array(z.string()),
  challenge_progress: z.array(z.object({ challenge: id, period_key: z.string(), count: z.number().int(), completed_at: timestamp.nullable() })),
});

export const clientTokenSchema = z.object({ customer_id: id, external_id: z.string().nullable(), customer_token: z.string() });

export const customerSessionSchema = z.object({
  customer_id: id,
  external_id: z.string().nullable(),
  customer_token: z.string().nullable().describe('Shown once: null on an idempotent replay.'),
  expires_at: timestamp,
});

export const attributeDefinitionSchema = z
  .object({
    id,
    key: z.string(),
    type: z.enum(attributeTypes),
    description: z.string().nullable(),
    pii: z.boolean(),
    created_at: timestamp,
    updated_at: timestamp,
  })
  .meta({ id: 'AttributeDefinition' });

// ---- events -------------------------------------------------------------------------------------

const effect = <T extends string, S extends z.ZodRawShape>(type: T, shape: S) => z.object({ type: z.literal(type), ...shape });

/** What evaluating an event did (rule and challenge effects, as effectWire writes them). */
export const effectSchema = z
  .discriminatedUnion('type', [
    effect('rule.fired', { rule_id: id, version: z.number().int() }),
    effect('points.awarded', { rule_id: id, currency: z.string(), amount: z.number().int(), ledger_entry_id: id, campaign_id: id.optional() }),
    effect('rule.skipped', {
      rule_id: id,
      reason: z
        .enum(ruleSkipReasons)
        .describe(
          'Why the rule did not fire (trigger_mismatch appears in simulate only). limit_scope_missing: a limit scope path has no string, number or boolean value in this event (absent, null, object, array), so the event cannot be counted; budget_exhausted: every action was an award the campaign budget could not cover, and the firing was not counted against the limits.',
        ),
      detail: z.string(),
    }),
    effect('action.skipped', { rule_id: id, action: z.string(), reason: z.string() }),
    effect('tier.changed', { program_id: id, level: z.string(), previous_level: z.string(), direction: z.enum(['up', 'down']) }),
    effect('reward.issue_requested', { rule_id: id, reward_id: id, issuance_id: id }),
    effect('item.granted', { rule_id: id, item: z.string(), quantity: z.number().int() }),
    effect('challenge.progressed', { challenge_id: id, period_key: z.string(), count: z.number().int(), target: z.number().int() }),
    effect('challenge.completed', { challenge_id: id, period_key: z.string(), completions: z.number().int() }),
    effect('challenge.skipped', { challenge_id: id, reason: z.string() }),
    effect('challenge.points_awarded', { challenge_id: id, currency: z.string(), amount: z.number().int(), ledger_entry_id: id, campaign_id: id.optional() }),
    effect('challenge.item_granted', { challenge_id: id, item: z.string(), quantity: z.number().int() }),
    effect('challenge.reward_requested', { challenge_id: id, reward_id: id, issuance_id: id }),
    effect('challenge.action_skipped', { challenge_id: id, action: z.string(), reason: z.string() }),
  ])
  .meta({ id: 'Effect' });

const eventAnswerFields = {
  id: id.describe('The service id (evt_...).'),
  client_event_id: z.string().describe("The caller's event id."),
  duplicate: z.literal(true).optional().describe('Present when the id was received before: the first answer again.'),
};
/** 202: journaled, evaluated asynchronously. */
export const eventAcceptedSchema = z
  .object({
    ...eventAnswerFields,
    status: z.literal('accepted'),
    fallback: z.literal(true).optional().describe('mode: sync took longer than its bound: answered as accepted.'),
  })
  .meta({ id: 'EventAccepted' });
/** 200: mode sync (or the duplicate of a sync event): evaluated, with its effects. */
export const eventEvaluatedSchema = z
  .object({ ...eventAnswerFields, status: z.literal('evaluated'), effects: z.array(effectSchema) })
  .meta({ id: 'EventEvaluated' });

export const eventBatchSchema = z.object({
  data: z
    .array(
      z.union([
        eventAcceptedSchema,
        eventEvaluatedSchema,
        z.object({ client_event_id: z.string().nullable(), error: apiErrorObject }).describe('This item failed; the others are unaffected.'),
      ]),
    )
    .describe('One result per event, in request order.'),
});

export const eventRecordSchema = z.object({
  id,
  client_event_id: z.string(),
  customer_id: z.string().nullable().describe("The customer's external id, as sent; null once the customer was deleted."),
  customer_service_id: id,
  name: z.string(),
  occurred_at: timestamp,
  received_at: timestamp,
  properties: z.record(z.string(), z.unknown()).nullable().describe('null once the customer was deleted.'),
  status: z.string(),
  trust: z.enum(trustLevels).nullable(),
  source: z.object({ type: z.string(), id: z.string().nullable() }).nullable(),
});

// ---- rules --------------------------------------------------------------------------------------

export const ruleSchema = z
  .object({
    id,
    name: z.string(),
    campaign_id: z.string().nullable(),
    status: z.enum(ruleStatuses),
    priority: z.number().int(),
    active_version: z.object({ id, number: z.number().int(), definition: z.unknown(), created_at: timestamp }).nullable(),
    draft_definition: z.unknown().describe('The unpublished edit; null when nothing changed since the active version.'),
    ...versioned,
  })
  .meta({ id: 'Rule' });

export const ruleVersionSchema = z
  .object({ id, rule_id: id, number: z.number().int(), definition: z.unknown(), created_by: z.string().nullable(), created_at: timestamp })
  .meta({ id: 'RuleVersion' });

const planAction = z.looseObject({ type: z.string() }).describe('A resolved action: {type, ...its fields} (points.award, item.grant, tier.evaluate, reward.issue, challenge.progress).');

export const ruleSimulationSchema = z.object({
  simulated: z.literal(true),
  plan: z.array(planAction).describe('What the traced definition would do on firing; [] when it would not fire.'),
  trace: z.object({
    definition: z
      .object({ draft: z.boolean(), version: z.number().int().nullable() })
      .describe('The definition traced: the unpublished draft (draft true, version null), else the active version (its number).'),
    live: z.boolean().describe('Whether an event sent now would run this definition (not_live is empty).'),
    not_live: z
      .array(
        z.object({
          reason: z.enum(notLiveReasons),
          detail: z.string(),
          param: z.string().describe('The field to look at: status, draft_definition or campaign_id.'),
        }),
      )
      .describe(
        'Why an event now would not run it: rule_not_published (a draft rule), rule_paused, rule_archived, draft_not_published (the traced draft is not the active version), campaign_inactive (its campaign is not running now: what events are skipped with). Information only: plan and outcome stay about the definition.',
      ),
    outcome: z.union([
      z.object({
        fired: z.literal(true),
        actions: z.array(planAction),
        limit_keys: z.array(z.object({ limit_id: z.string(), scope_key: z.string() })),
      }),
      z.object({ fired: z.literal(false), reason: z.enum(ruleSkipReasons), detail: z.string(), param: z.string().nullable() }),
    ]),
    steps: z.array(
      z.object({
        check: allOf<TraceCheck>()(['trigger', 'campaign', 'trust', 'counter', 'limit', 'segment', 'condition', 'group', 'amount', 'budget']),
        at: z.string(),
        path: z.string().nullable(),
        op: z.string().nullable(),
        expected: z.unknown(),
        actual: z.unknown(),
        found: z.boolean(),
        pass: z.boolean(),
        limit_id: z.string().optional(),
        scope_key: z
          .string()
          .optional()
          .describe(
            "The key this event counts against: parts joined by '|', 'customer', 's:<string>', 'n:<number>', 'b:<boolean>' (1 and \"1\" are two values); in a per-customer scope a string over 64 characters is 'h:<hash>:<its first 16 characters>'. Absent when a scope path has no usable value.",
          ),
        shared: z.literal(true).optional(),
      }),
    )
      .describe(
        'Every check in evaluation order. limit: expected the max, actual the count (shared: the taken count in the store); a scope path without a string, number or boolean value is named in path, found false, no scope_key (limit_scope_missing). budget (after the other checks pass, one per award in a currency its campaign caps): expected the amount, actual what an event could still be granted after the awards before it; read, not leased, so another event or another rule of the same event may take it first.',
      ),
  }),
});

// ---- rewards ------------------------------------------------------------------------------------

export const rewardSchema = z
  .object({
    id,
    name: z.string(),
    cost: z.number().int(),
    currency: z.string(),
    availability: z.number().int(),
    issued: z.number().int().describe('Units issued or redeemed now.'),
    expiry_after: z.string().regex(expiryAfterPattern).nullable(),
    status: z.enum(['active', 'archived']),
    ...versioned,
  })
  .meta({ id: 'Reward' });

export const rewardIssuanceSchema = z
  .object({
    id,
    reward_id: id,
    customer_id: id,
    status: issuanceStatus.describe(
      'expired from the instant expires_at passes on the environment clock, before the expiry sweep journals it (with the version that record will carry).',
    ),
    source_type: z.string().describe('api or rule_execution.'),
    source_id: z.string().nullable(),
    cost_entry_id: z.string().nullable().describe('The spend entry of the redeem.'),
    expires_at: timestamp.nullable(),
    redeemed_at: timestamp.nullable(),
    cancelled_at: timestamp.nullable(),
    version,
    created_at: timestamp,
  })
  .meta({ id: 'RewardIssuance' });

// ---- challenges ---------------------------------------------------------------------------------

export const challengeSchema = z
  .object({
    id,
    name: z.string(),
    qualifying: z.object({ event: z.string(), conditions: z.unknown().optional() }),
    target: z.number().int(),
    period: allOf<PeriodKind>()(['none', 'daily', 'weekly', 'monthly']),
    contribution_key: z.string().nullable(),
    enrollment: allOf<EnrollmentMode>()(['automatic', 'explicit']),
    repeatable: z.boolean(),
    completion_actions: z.array(z.unknown()),
    campaign_id: z.string().nullable(),
    starts_at: timestamp.nullable(),
    ends_at: timestamp.nullable(),
    status: allOf<ChallengeStatus>()(['draft', 'active', 'paused', 'ended']),
    ...versioned,
  })
  .meta({ id: 'Challenge' });

export const enrollmentSchema = z.object({ challenge_id: id, customer_id: id, enrolled_at: timestamp }).meta({ id: 'ChallengeEnrollment' });

export const progressSchema = z
  .object({
    challenge_id: id,
    customer_id: id,
    period_key: z.string(),
    cycle: z.number().int(),
    count: z.number().int(),
    target: z.number().int(),
    status: allOf<ProgressStatus>()(['active', 'completed']),
    contributions: z.array(z.string()).describe('The distinct contribution_key values counted; [] for a challenge without contribution_key.'),
    completed_at: timestamp.nullable(),
    updated_at: timestamp,
  })
  .meta({ id: 'ChallengeProgress' });

const auditEntryId = z.string().describe('The audit entry recording this action.');

export const progressRevokedSchema = progressSchema.extend({ audit_entry_id: auditEntryId });

export const reevaluationSchema = z.object({
  completed: z.number().int().min(0).max(1).describe('Completions this reevaluation made.'),
  reason: allOf<SkipReason>()([
    'campaign_inactive',
    'segment_not_matched',
    'challenge_not_active',
    'challenge_not_started',
    'challenge_ended',
    'not_enrolled',
    'not_qualifying',
    'contribution_missing',
    'contribution_invalid',
    'already_completed',
    'period_completed',
    'duplicate_contribution',
    'contribution_limit_reached',
  ])
    .nullable()
    .describe('Why nothing was completed; null when something was.'),
  effects: z.array(effectSchema),
  progress: progressSchema.nullable(),
  audit_entry_id: auditEntryId,
});

// ---- segments -----------------------------------------------------------------------------------

export const segmentSchema = z
  .object({
    id,
    name: z.string(),
    description: z.string().nullable(),
    kind: z.enum(segmentKinds),
    condition: z.unknown().describe('Dynamic segments: the condition; static: null.'),
    ...versioned,
  })
  .meta({ id: 'Segment' });

export const segmentMembershipSchema = z.object({ segment_id: id, customer_id: id, added_at: timestamp }).meta({ id: 'SegmentMembership' });
export const segmentMemberSchema = z.object({ customer_id: id, added_at: timestamp });

// ---- ledger -------------------------------------------------------------------------------------

export const currencySchema = z
  .object({
    id,
    key: z.string(),
    name: z.string(),
    negative_balance: z.enum(['forbid', 'allow']),
    expiry_days: z.number().int().nullable(),
    ...versioned,
  })
  .meta({ id: 'Currency' });

// ---- tiers, campaigns, counters -----------------------------------------------------------------

export const tierProgramSchema = z
  .object({
    id,
    key: z.string(),
    name: z.string(),
    currency: z.string(),
    basis: allOf<TierBasis>()(['lifetime_earned', 'earned_rolling_days', 'balance']),
    rolling_days: z.number().int().nullable(),
    levels: z.array(z.object({ key: z.string(), title: z.string(), threshold: z.number() })),
    downgrade_check: z.object({ every_days: z.number().int() }).nullable(),
    ...versioned,
  })
  .meta({ id: 'TierProgram' });

export const campaignSchema = z
  .object({
    id,
    name: z.string(),
    description: z.string().nullable(),
    status: z.enum(campaignStatuses),
    audience_segment: z.string().nullable(),
    starts_at: timestamp.nullable(),
    ends_at: timestamp.nullable(),
    budgets: z.array(z.object({ currency: z.string(), amount: z.number().int(), spent: z.number().int(), reserved: z.number().int() })),
    spent: z.array(z.object({ currency: z.string(), amount: z.number().int() })).describe('Per currency, also for currencies without a budget.'),
    ...versioned,
  })
  .meta({ id: 'Campaign' });

export const counterDefinitionSchema = z
  .object({
    id,
    name: z.string(),
    event: z.string(),
    window: z.discriminatedUnion('kind', [
      z.object({ kind: z.literal('lifetime') }),
      z.object({ kind: z.literal('rolling_days'), days: z.number().int() }),
      z.object({ kind: z.literal('period'), period: allOf<CounterPeriod>()(['day', 'week', 'month']) }),
    ]),
    filter: z.unknown().describe('The condition over event.properties, or null.'),
    status: allOf<CounterStatus>()(['backfilling', 'ready']),
    ...versioned,
  })
  .meta({ id: 'CounterDefinition' });

// ---- change sets and matches --------------------------------------------------------------------

export const changeSetSchema = z
  .object({
    id,
    status: z.enum(['pending', 'awaiting_confirmation', 'applied']),
    commands: z.array(z.record(z.string(), z.unknown())),
    results: z.array(z.unknown()).nullable().describe('Once applied: one result per command.'),
    revision: z.number().int(),
    confirmed_by: z.string().nullable(),
    applied_at: timestamp.nullable(),
    created_at: timestamp,
    updated_at: timestamp,
  })
  .meta({ id: 'ChangeSet' });

export const changeSetApplicationSchema = z.object({
  change_set_id: id,
  status: z.enum(['applied', 'awaiting_confirmation']),
  results: z.array(z.unknown()).describe('One result per command; [] while awaiting confirmation.'),
});

export const matchProfileSchema = z
  .object({
    id,
    key: z.string(),
    event: z.string(),
    metrics: z.array(z.object({ key: z.string(), minimum: z.number(), maximum: z.number(), per_minute_maximum: z.number().optional() })),
    duration: z.object({ minimum_seconds: z.number(), maximum_seconds: z.number() }),
    players: z.object({ minimum: z.number().int(), maximum: z.number().int() }),
    rate_limits: z.array(z.object({ window_seconds: z.number().int(), max_matches: z.number().int() })),
    outliers: z.object({ action: z.enum(['hold', 'reject']), hold_metrics: z.array(z.object({ key: z.string(), above: z.number() })) }).nullable(),
    version: z.number().int().describe('The profile revision.'),
    status: z.enum(['active', 'archived']),
    archived_at: timestamp.nullable(),
    created_at: timestamp,
    updated_at: timestamp,
  })
  .meta({ id: 'MatchProfile' });

const playerStatus = allOf<PlayerStatus>()(['admitted', 'held', 'rejected']);
const matchStatus = allOf<MatchStatus>()(['held', 'admitted', 'rejected', 'partially_admitted']);

export const matchPlayerSchema = z
  .object({
    id,
    customer_id: z.string().nullable(),
    metrics: z.record(z.string(), z.number()),
    won: z.boolean().nullable(),
    status: playerStatus,
    reasons: z.array(
      z.object({ code: z.enum(reasonCodes), message: z.string(), metric: z.string().optional(), value: z.number().optional(), limit: z.number().optional() }),
    ),
    event_id: z.string().nullable(),
    client_event_id: z.string().nullable(),
    review: z
      .object({ decision: allOf<ReviewDecision>()(['admit', 'reject']), reason: z.string().nullable(), actor: z.string(), reviewed_at: timestamp })
      .nullable(),
    created_at: timestamp,
    updated_at: timestamp,
  })
  .meta({ id: 'MatchResultPlayer' });

export const matchResultSchema = z
  .object({
    id,
    match_id: z.string(),
    profile: z.string().describe('The match profile key.'),
    match_profile_id: id,
    profile_revision: z.number().int(),
    event: z.string(),
    started_at: timestamp,
    ended_at: timestamp,
    duration_seconds: z.number(),
    status: matchStatus,
    players: z.array(matchPlayerSchema),
    replayed: z.boolean(),
    admission_errors: z.array(z.object({ player_id: id, customer_id: z.string().nullable(), code: z.string(), message: z.string() })),
    revision: z.number().int(),
    created_at: timestamp,
    updated_at: timestamp,
  })
  .meta({ id: 'MatchResult' });

export const matchReviewSchema = z.object({
  player: matchPlayerSchema,
  match_result: z.object({ id, match_id: z.string(), status: matchStatus }),
  replayed: z.boolean(),
});
