// The OpenAPI document against the request bodies the service accepts and refuses. A corpus of
// bodies (rule definitions, challenges, segments, counters, tier programs, change set commands,
// simulations, match reports and PATCHes; taken from the API tests, the unit tests of the rule
// schema and the README's examples) is sent to the service, and each one must be answered 2xx AND
// validate (Ajv, JSON Schema 2020-12) against the request-body schema GET /v1/openapi.json gives
// its route. Bodies the service refuses (422 rule_invalid, 400 validation_failed, param as named)
// must fail that schema too, where JSON Schema can say why; those it cannot say are listed apart
// (the service refuses them, the schema lets them through) so the gap stays known. Every body of a
// README example is checked against the document as well.
// The test checks itself: taking any branch out of a documented union (an action type, an op's
// form, a condition form, a schema version, a counter window, a change set command) must make some
// accepted body fail, and loosening a documented shape to {} must let some refused body through;
// and no request body or query parameter may be an unconstrained {} outside a short list of
// free-form fields, each with its reason.
import { readFile } from 'node:fs/promises';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import t from 'tap';
import { actionTypes, opNames } from '../../src/domain/rules/index.js';
import { acceptedRuleDefinitions, cond, leaf, v1, v2 } from '../fixtures/rule-definitions.js';
import { type Client, idem, signUp, startForTest } from '../helpers/service.js';

type Json = any;

interface Body {
  label: string;
  method: 'POST' | 'PATCH';
  /** The documented path (template). */
  template: string;
  body: unknown;
}

// ---- the corpus: accepted ---------------------------------------------------------------------

/** Rule definitions the service accepts (test/api/rules*.test.ts, shared-limits, segments, unit rules-schema, README). */
const ruleDefinitions: Array<[string, unknown]> = [
  ...acceptedRuleDefinitions,
  [
    'README: kills pay',
    {
      schema: 'service.rule/v2',
      trigger: { kind: 'customer_event', event: 'match.completed' },
      conditions: { all: [leaf('event.properties.kills', 'gte', 10)] },
      limits: [{ id: 'once_per_match', scope: ['customer', 'event.properties.match_id'], max: 1 }],
      actions: [{ type: 'points.award', currency: 'coins', amount: 10 }],
    },
  ],
  ['a single leaf as conditions (lt)', cond(leaf('event.properties.total', 'lt', 5))],
  ['lte on a counter', cond(leaf('customer.counters.visits', 'lte', 100))],
  ['not_in on event.name', cond(leaf('event.name', 'not_in', ['order.cancelled', 'order.refunded']))],
  ['in with numbers and booleans', cond(leaf('event.properties.level', 'in', [1, 2, true]))],
  ['eq on a tier level', cond(leaf('customer.tiers.rank', 'eq', 'silver'))],
  ['exists on a tier', cond(leaf('customer.tiers.rank', 'exists', true))],
  ['contains a number in an array property', cond(leaf('event.properties.tags', 'contains', 3))],
  [
    'trust client_reported, item grants',
    v2({
      trigger: { kind: 'customer_event', event: 'chest.opened' },
      trust: { minimum: 'client_reported' },
      actions: [
        { type: 'item.grant', item: 'sword', quantity: 1 },
        { type: 'item.grant', item: 'gem', quantity: 5 },
      ],
    }),
  ],
  ['amount_from an attribute', v2({ actions: [{ type: 'points.award', currency: 'coins', amount_from: 'customer.attributes.bonus' }] })],
  ['amount_from a counter, with multiplier', v2({ actions: [{ type: 'points.award', currency: 'coins', amount_from: 'customer.counters.wins', multiplier: 10 }] })],
  [
    'limits shared by every customer',
    v2({
      limits: [
        { id: 'first_coupon', scope: ['event.properties.code'], max: 1 },
        { id: 'ok', scope: ['event.name', 'event.properties.order_id'], max: 3 },
      ],
    }),
  ],
  ['a per-customer scope reading the customer', v2({ limits: [{ id: 'country', scope: ['customer', 'customer.attributes.country', 'customer.tiers.main', 'customer.external_id'], max: 2 }] })],
  ['nested groups', cond({ all: [{ any: [{ path: 'customer.segments', op: 'contains', value: 'club' }] }, { not: { all: [leaf('event.properties.mode', 'eq', 'solo')] } }] })],
  ['segments test: any of not contains', cond({ any: [{ not: leaf('customer.segments', 'contains', 'beta') }] })],
  ['ne with a number, gte on an attribute', cond({ all: [leaf('event.properties.kills', 'ne', 0), leaf('customer.attributes.age', 'gte', 18)] })],
  ['v1 with exists and contains', v1({ conditions: [leaf('event.properties.coupon', 'exists'), leaf('event.name', 'contains', 'order')], actions: [{ type: 'tier.evaluate' }] })],
  ['v1 reward and challenge actions', v1({ actions: [{ type: 'reward.issue', reward_id: 'rw_mug' }, { type: 'challenge.progress', challenge_id: 'chl_quest' }] })],
];

/** Simulate bodies (test/api/rules.test.ts, README). */
const simulations: Array<[string, unknown]> = [
  ['README: player-7', { customer_id: 'player-7', event: { name: 'match.completed', properties: { kills: 12, match_id: '43' } } }],
  ['name only', { event: { name: 'order.completed' } }],
  ['properties', { event: { name: 'order.completed', properties: { total: 25 } } }],
  ['nested properties', { event: { name: 'order.completed', properties: { cart: { items: ['a', 'b'] }, total: 9.5 } } }],
  ['client_reported', { event: { name: 'order.completed', properties: {}, trust: 'client_reported' } }],
  ['merchant_asserted', { event: { name: 'order.completed', trust: 'merchant_asserted' } }],
  ['a new customer', { customer_id: 'never-seen', event: { name: 'order.completed', properties: { total: 30 } } }],
  ['a null property', { event: { name: 'order.completed', properties: { coupon: null } } }],
  ['a boolean property', { event: { name: 'order.completed', properties: { first: true } } }],
  ['another event', { event: { name: 'order.refunded', properties: { total: 5 } } }],
  ['an array property', { event: { name: 'order.completed', properties: { tags: [1, 2, 3] } } }],
  ['a string total', { customer_id: 'player-8', event: { name: 'order.completed', properties: { total: '10' } } }],
];

/** Challenge bodies (test/api/challenges.test.ts, campaign-challenges, segments, README). */
const challenges = (reward: string): Array<[string, unknown]> => [
  [
    'ranked matches',
    {
      name: 'Ranked',
      qualifying: { event: 'match.completed', conditions: leaf('event.properties.mode', 'eq', 'ranked') },
      target: 3,
      completion_actions: [{ type: 'points.award', currency: 'coins', amount: 100 }],
    },
  ],
  ['minimal', { name: 'Progressed', qualifying: { event: 'progressed.never' }, target: 5 }],
  ['explicit enrollment, active', { name: 'Invite only', qualifying: { event: 'shot.scored' }, target: 5, enrollment: 'explicit', status: 'active' }],
  ['daily, repeatable', { name: 'Daily', qualifying: { event: 'level.completed' }, target: 2, period: 'daily', repeatable: true }],
  ['weekly with a contribution key', { name: 'Weekly', qualifying: { event: 'match.completed' }, target: 3, period: 'weekly', contribution_key: 'event.properties.match_id' }],
  ['monthly, attribute key', { name: 'Monthly', qualifying: { event: 'visit' }, target: 2, period: 'monthly', contribution_key: 'customer.attributes.team' }],
  ['null conditions', { name: 'Null', qualifying: { event: 'visit', conditions: null }, target: 1 }],
  [
    'segment condition, nested',
    {
      name: 'Club',
      qualifying: {
        event: 'match.completed',
        conditions: { all: [{ any: [leaf('customer.segments', 'contains', 'club')] }, leaf('event.properties.mode', 'eq', 'solo')] },
      },
      target: 1,
    },
  ],
  ['item grants', { name: 'Chests', qualifying: { event: 'chest.opened' }, target: 2, completion_actions: [{ type: 'item.grant', item: 'key', quantity: 1 }] }],
  ['tier evaluations', { name: 'Tiers', qualifying: { event: 'visit' }, target: 2, completion_actions: [{ type: 'tier.evaluate' }, { type: 'tier.evaluate', program: 'main' }] }],
  ['a reward', { name: 'Mug', qualifying: { event: 'visit' }, target: 10, completion_actions: [{ type: 'reward.issue', reward_id: reward }] }],
  [
    'window and every action',
    {
      name: 'Season',
      qualifying: { event: 'match.won', conditions: { not: leaf('event.properties.casual', 'eq', true) } },
      target: 4,
      starts_at: '2030-01-01T00:00:00Z',
      ends_at: '2030-02-01T00:00:00.000+01:00',
      completion_actions: [
        { type: 'points.award', currency: 'gems', amount: 5 },
        { type: 'item.grant', item: 'badge', quantity: 1 },
        { type: 'reward.issue', reward_id: reward },
        { type: 'tier.evaluate', program: 'main' },
      ],
    },
  ],
];

/** Segment conditions (test/api/segments.test.ts, README): dynamic unless noted. */
const segmentConditions: Array<[string, unknown]> = [
  ['README: whales', leaf('customer.attributes.spend', 'gte', 1000)],
  ['all', { all: [leaf('customer.attributes.spend', 'gte', 1000)] }],
  ['eq string', leaf('customer.attributes.tier', 'eq', 'gold')],
  ['eq number', leaf('customer.attributes.a', 'eq', 1)],
  ['ne null', leaf('customer.attributes.email', 'ne', null)],
  ['in', leaf('customer.attributes.country', 'in', ['DE', 'AT', 'CH'])],
  ['not_in', leaf('customer.attributes.country', 'not_in', ['US'])],
  ['exists', leaf('customer.attributes.email', 'exists')],
  ['lt and gt', { all: [leaf('customer.attributes.age', 'gt', 17), leaf('customer.attributes.age', 'lt', 30)] }],
  ['lte in any', { any: [leaf('customer.attributes.level', 'lte', 3), leaf('customer.attributes.beta', 'eq', true)] }],
  ['not contains', { not: leaf('customer.attributes.nickname', 'contains', 'bot') }],
  ['nested attribute', leaf('customer.attributes.address.city', 'eq', 'Berlin')],
];

/** Counter definitions (test/api/counters.test.ts, README), named by the test. */
const counters: Array<[string, unknown]> = [
  ['lifetime', { event: 'purchase', window: { kind: 'lifetime' } }],
  ['lifetime, null filter', { event: 'purchase', window: { kind: 'lifetime' }, filter: null }],
  ['README: gem buys 7d', { event: 'purchase', window: { kind: 'rolling_days', days: 7 }, filter: leaf('event.properties.sku', 'eq', 'gems') }],
  ['period day', { event: 'purchase', window: { kind: 'period', period: 'day' } }],
  ['period week', { event: 'visit', window: { kind: 'period', period: 'week' } }],
  ['period month', { event: 'visit', window: { kind: 'period', period: 'month' } }],
  ['rolling 2', { event: 'visit', window: { kind: 'rolling_days', days: 2 } }],
  ['rolling 365', { event: 'match.won', window: { kind: 'rolling_days', days: 365 } }],
  ['filter all', { event: 'purchase', window: { kind: 'lifetime' }, filter: { all: [leaf('event.properties.sku', 'in', ['gems', 'coins']), leaf('event.properties.total', 'gte', 5)] } }],
  ['filter any/not', { event: 'purchase', window: { kind: 'lifetime' }, filter: { any: [leaf('event.properties.gift', 'exists'), { not: leaf('event.properties.price', 'lt', 1) }] } }],
  ['filter contains', { event: 'match.completed', window: { kind: 'lifetime' }, filter: leaf('event.properties.mode', 'contains', 'ranked') }],
  ['filter ne', { event: 'match.completed', window: { kind: 'rolling_days', days: 30 }, filter: leaf('event.properties.result', 'ne', 'abandoned') }],
];

/** Tier programs (test/api/tier-programs.test.ts, rules-events, README), keyed by the test. */
const tierPrograms: Array<[string, Record<string, unknown>]> = [
  ['README: status', { name: 'Status', currency: 'coins', basis: 'lifetime_earned', levels: [{ key: 'bronze', title: 'Bronze', threshold: 0 }, { key: 'silver', title: 'Silver', threshold: 500 }] }],
  ['one level', { name: 'Flat', currency: 'coins', basis: 'lifetime_earned', levels: [{ key: 'member', title: 'Member', threshold: 0 }] }],
  ['balance', { name: 'Balance', currency: 'coins', basis: 'balance', levels: [{ key: 'low', title: 'Low', threshold: 0 }, { key: 'high', title: 'High', threshold: 1000 }] }],
  ['rolling', { name: 'Rolling', currency: 'coins', basis: 'earned_rolling_days', rolling_days: 30, levels: [{ key: 'b', title: 'B', threshold: 0 }, { key: 's', title: 'S', threshold: 100 }] }],
  ['rolling 366 with a check', { name: 'Year', currency: 'coins', basis: 'earned_rolling_days', rolling_days: 366, downgrade_check: { every_days: 30 }, levels: [{ key: 'b', title: 'B', threshold: 0 }] }],
  ['a downgrade check', { name: 'Checked', currency: 'coins', basis: 'lifetime_earned', downgrade_check: { every_days: 1 }, levels: [{ key: 'b', title: 'B', threshold: 0 }, { key: 'g', title: 'G', threshold: 10 }] }],
  ['null check and rolling days', { name: 'Nulls', currency: 'coins', basis: 'lifetime_earned', rolling_days: null, downgrade_check: null, levels: [{ key: 'b', title: 'B', threshold: 0 }] }],
  ['xp ranks', { name: 'Rank', currency: 'xp', basis: 'lifetime_earned', levels: [{ key: 'bronze', title: 'Bronze', threshold: 0 }, { key: 'silver', title: 'Silver', threshold: 100 }, { key: 'gold', title: 'Gold', threshold: 1000 }] }],
  ['keys with digits and dashes', { name: 'Keys', currency: 'coins', basis: 'balance', levels: [{ key: '1st', title: 'First', threshold: 0 }, { key: 'Level-2_b', title: 'Second', threshold: 2 }] }],
  ['long check', { name: 'Long', currency: 'coins', basis: 'balance', downgrade_check: { every_days: 3650 }, levels: [{ key: 'a', title: 'A', threshold: 0 }] }],
  ['gems', { name: 'Gems', currency: 'gems', basis: 'lifetime_earned', levels: [{ key: 'a', title: 'A', threshold: 0 }, { key: 'b', title: 'B', threshold: 9007199254740991 }] }],
  ['main', { name: 'Main', currency: 'points', basis: 'lifetime_earned', levels: [{ key: 'bronze', title: 'Bronze', threshold: 0 }] }],
];

/** Change set commands (test/api/change-sets.test.ts, match-results, README), each sent as a set of its own. */
const ranked = {
  type: 'match_profile.create',
  key: 'ranked',
  metrics: [{ key: 'kills', minimum: 0, maximum: 60, per_minute_maximum: 4 }],
  duration: { minimum_seconds: 300, maximum_seconds: 3600 },
  players: { minimum: 2, maximum: 10 },
  rate_limits: [{ window_seconds: 3600, max_matches: 6 }],
  outliers: { action: 'hold', hold_metrics: [{ key: 'kills', above: 40 }] },
};
const commands: Array<[string, unknown]> = [
  ['README: ranked', ranked],
  ['minimal create', { type: 'match_profile.create', key: 'casual', metrics: [{ key: 'score', minimum: 0, maximum: 1000 }] }],
  ['create with event and null outliers', { type: 'match_profile.create', key: 'duel', event: 'duel.finished', metrics: [{ key: 'hits', minimum: 0, maximum: 50, per_minute_maximum: null }], outliers: null }],
  ['create rejecting outliers', { type: 'match_profile.create', key: 'strict.v2', metrics: [{ key: 'kills', minimum: 0, maximum: 9 }, { key: 'deaths', minimum: 0, maximum: 9 }], outliers: { action: 'reject', hold_metrics: [] } }],
  ['update metrics', { type: 'match_profile.update', key: 'ranked', metrics: [{ key: 'kills', minimum: 0, maximum: 80 }] }],
  ['update with expected_version', { type: 'match_profile.update', key: 'ranked', expected_version: 1, duration: { minimum_seconds: 60, maximum_seconds: 7200 } }],
  ['update players', { type: 'match_profile.update', key: 'ranked', players: { minimum: 1, maximum: 100 } }],
  ['update rate limits', { type: 'match_profile.update', key: 'ranked', rate_limits: [{ window_seconds: 60, max_matches: 1 }, { window_seconds: 86400, max_matches: 50 }] }],
  ['update outliers off', { type: 'match_profile.update', key: 'ranked', outliers: null }],
  ['update event', { type: 'match_profile.update', key: 'ranked', event: 'match.ended' }],
  ['archive', { type: 'match_profile.archive', key: 'casual' }],
  ['archive with expected_version', { type: 'match_profile.archive', key: 'ranked', expected_version: 3 }],
];

// ---- the corpus: refused ----------------------------------------------------------------------

/** Rule definitions refused with 422 rule_invalid naming param; the schema must refuse them too. */
const refusedRules: Array<[string, unknown, string]> = [
  ['unknown schema', { ...v2(), schema: 'service.rule/v3' }, 'definition.schema'],
  ['missing schema', { trigger: { event: 'a' }, actions: [{ type: 'tier.evaluate' }] }, 'definition.schema'],
  ['unknown top-level field', v2({ color: 'red' }), 'definition.color'],
  ['v2 trigger kind', v2({ trigger: { kind: 'cron', event: 'a' } }), 'definition.trigger.kind'],
  ['bad event name', v2({ trigger: { kind: 'customer_event', event: 'Order Completed' } }), 'definition.trigger.event'],
  ['v1 trigger has no kind', v1({ trigger: { kind: 'customer_event', event: 'a' } }), 'definition.trigger.kind'],
  ['empty actions', v2({ actions: [] }), 'definition.actions'],
  ['unknown op', cond({ all: [leaf('event.properties.x', 'eq', 1), leaf('event.properties.x', 'like', 'a')] }), 'definition.conditions.all[1].op'],
  ['missing op', cond({ path: 'event.properties.x', value: 1 }), 'definition.conditions.op'],
  ['bad path prefix', cond({ all: [leaf('order.total', 'eq', 1)] }), 'definition.conditions.all[0].path'],
  ['path with nothing below', cond(leaf('customer.attributes', 'exists')), 'definition.conditions.path'],
  ['counter with two names', cond(leaf('customer.counters.a.b', 'gt', 1)), 'definition.conditions.path'],
  ['event.name with a field', cond(leaf('event.name.x', 'eq', 'a')), 'definition.conditions.path'],
  ['empty segment', cond(leaf('event.properties..x', 'eq', 1)), 'definition.conditions.path'],
  ['gt with a string', cond(leaf('event.properties.total', 'gt', '10')), 'definition.conditions.value'],
  ['eq without value', cond(leaf('event.properties.total', 'eq')), 'definition.conditions.value'],
  ['eq with an object', cond(leaf('event.properties.total', 'eq', { a: 1 })), 'definition.conditions.value'],
  ['in with a scalar', cond(leaf('event.properties.x', 'in', 'a')), 'definition.conditions.value'],
  ['in with an empty array', cond(leaf('event.properties.x', 'in', [])), 'definition.conditions.value'],
  ['in with an object member', cond(leaf('event.properties.x', 'in', ['a', {}])), 'definition.conditions.value'],
  ['exists with a string', cond(leaf('event.properties.x', 'exists', 'yes')), 'definition.conditions.value'],
  ['contains with null', cond(leaf('event.properties.x', 'contains', null)), 'definition.conditions.value'],
  ['a value over 1024 characters', cond(leaf('event.properties.x', 'eq', 'x'.repeat(1025))), 'definition.conditions.value'],
  ['segments with eq', cond(leaf('customer.segments', 'eq', 'vip')), 'definition.conditions.op'],
  ['counter with contains', cond(leaf('customer.counters.n', 'contains', 3)), 'definition.conditions.op'],
  ['tier with gt', cond(leaf('customer.tiers.main', 'gt', 1)), 'definition.conditions.op'],
  ['event.name with gt', cond(leaf('event.name', 'gt', 1)), 'definition.conditions.op'],
  ['customer alone as a condition', cond(leaf('customer', 'exists')), 'definition.conditions.path'],
  ['unknown field in a leaf', cond({ path: 'event.properties.x', op: 'eq', value: 1, note: 'x' }), 'definition.conditions.note'],
  ['not a condition at all', cond({ all: [{ foo: 1 }] }), 'definition.conditions.all[0]'],
  ['empty all', cond({ all: [] }), 'definition.conditions.all'],
  ['any not an array', cond({ any: leaf('event.properties.x', 'eq', 1) }), 'definition.conditions.any'],
  ['mixed group and leaf keys', cond({ all: [leaf('event.properties.x', 'eq', 1)], path: 'event.properties.x' }), 'definition.conditions.path'],
  ['nested bad prefix', cond({ all: [{ any: [leaf('event.properties.x', 'eq', 1), { not: leaf('customer.foo', 'eq', 1) }] }] }), 'definition.conditions.all[0].any[1].not.path'],
  ['v1 with nested groups', v1({ conditions: { all: [] } }), 'definition.conditions'],
  ['v1 with trust', v1({ trust: { minimum: 'merchant_asserted' } }), 'definition.trust'],
  ['unknown trust level', v2({ trust: { minimum: 'root' } }), 'definition.trust.minimum'],
  ['trust without minimum', v2({ trust: {} }), 'definition.trust.minimum'],
  ['a trust level no event carries', v2({ trust: { minimum: 'service_verified' } }), 'definition.trust.minimum'],
  ['limit max zero', v2({ limits: [{ id: 'a', scope: ['customer'], max: 0 }] }), 'definition.limits[0].max'],
  ['limit max fractional', v2({ limits: [{ id: 'a', scope: ['customer'], max: 1.5 }] }), 'definition.limits[0].max'],
  ['limit empty scope', v2({ limits: [{ id: 'a', scope: [], max: 1 }] }), 'definition.limits[0].scope'],
  ['limit scope on segments', v2({ limits: [{ id: 'a', scope: ['customer.segments'], max: 1 }] }), 'definition.limits[0].scope[0]'],
  ['a shared scope reading the customer', v2({ limits: [{ id: 'country', scope: ['customer.attributes.country'], max: 1 }] }), 'definition.limits[0].scope[0]'],
  ['amount zero', v2({ actions: [{ type: 'points.award', currency: 'points', amount: 0 }] }), 'definition.actions[0].amount'],
  ['amount fractional', v2({ actions: [{ type: 'points.award', currency: 'points', amount: 1.5 }] }), 'definition.actions[0].amount'],
  ['amount unsafe', v2({ actions: [{ type: 'points.award', currency: 'points', amount: 2 ** 60 }] }), 'definition.actions[0].amount'],
  ['amount as a string', v2({ actions: [{ type: 'points.award', currency: 'points', amount: '5' }] }), 'definition.actions[0].amount'],
  ['no amount', v2({ actions: [{ type: 'points.award', currency: 'points' }] }), 'definition.actions[0].amount'],
  ['amount and amount_from', v2({ actions: [{ type: 'points.award', currency: 'points', amount: 1, amount_from: 'event.properties.total' }] }), 'definition.actions[0].amount_from'],
  ['amount_from a non-numeric path', v2({ actions: [{ type: 'points.award', currency: 'points', amount_from: 'event.name' }] }), 'definition.actions[0].amount_from'],
  ['multiplier without amount_from', v2({ actions: [{ type: 'points.award', currency: 'points', amount: 1, multiplier: 2 }] }), 'definition.actions[0].multiplier'],
  ['multiplier negative', v2({ actions: [{ type: 'points.award', currency: 'points', amount_from: 'event.properties.total', multiplier: -1 }] }), 'definition.actions[0].multiplier'],
  ['unknown action type', v2({ actions: [{ type: 'points.burn' }] }), 'definition.actions[0].type'],
  ['action without type', v2({ actions: [{ currency: 'points' }] }), 'definition.actions[0].type'],
  ['item.grant without quantity', v2({ actions: [{ type: 'item.grant', item: 'x' }] }), 'definition.actions[0].quantity'],
  ['reward.issue without id', v2({ actions: [{ type: 'reward.issue' }] }), 'definition.actions[0].reward_id'],
  ['challenge.progress extra field', v2({ actions: [{ type: 'challenge.progress', challenge_id: 'c', n: 2 }] }), 'definition.actions[0].n'],
];

/**
 * Rule definitions refused with rule_invalid that the schema accepts: JSON Schema cannot say (or
 * the document does not try to say) why. Each stays a semantic check of validateRule.
 */
const refusedRulesBeyondSchema: Array<[string, unknown, string]> = [
  ['duplicate limit ids', v2({ limits: [{ id: 'a', scope: ['customer'], max: 1 }, { id: 'a', scope: ['customer'], max: 2 }] }), 'definition.limits[1].id'],
  ['nested deeper than 8 groups', cond({ not: { not: { not: { not: { not: { not: { not: { not: { not: leaf('event.properties.x', 'exists') } } } } } } } } }), 'definition.conditions'],
  ['a counter compared with a string (a source fixes the type)', cond(leaf('customer.counters.n', 'eq', '3')), 'definition.conditions.value'],
  ['a segment name that is not a string', cond(leaf('customer.segments', 'contains', 3)), 'definition.conditions.value'],
];

/** Bodies of other routes refused with 400 validation_failed naming param; the schema must refuse them too. */
const refusedOthers = (reward: string): Array<[string, Omit<Body, 'label'>, string]> => [
  ['challenge: bad event name', { method: 'POST', template: '/v1/challenges', body: { name: 'x', target: 1, qualifying: { event: 'Bad Name' } } }, 'qualifying.event'],
  ['challenge: unknown op', { method: 'POST', template: '/v1/challenges', body: { name: 'x', target: 1, qualifying: { event: 'match.completed', conditions: leaf('event.properties.mode', 'nope', 1) } } }, 'qualifying.conditions.op'],
  ['challenge: unknown path', { method: 'POST', template: '/v1/challenges', body: { name: 'x', target: 1, qualifying: { event: 'match.completed', conditions: leaf('somewhere.else', 'eq', 1) } } }, 'qualifying.conditions.path'],
  ['challenge: amount_from', { method: 'POST', template: '/v1/challenges', body: { name: 'x', target: 1, qualifying: { event: 'a' }, completion_actions: [{ type: 'points.award', currency: 'coins', amount_from: 'event.properties.score' }] } }, 'completion_actions[0].amount_from'],
  ['challenge: no amount', { method: 'POST', template: '/v1/challenges', body: { name: 'x', target: 1, qualifying: { event: 'a' }, completion_actions: [{ type: 'points.award', currency: 'coins' }] } }, 'completion_actions[0].amount'],
  ['challenge: unknown action', { method: 'POST', template: '/v1/challenges', body: { name: 'x', target: 1, qualifying: { event: 'a' }, completion_actions: [{ type: 'teleport' }] } }, 'completion_actions[0].type'],
  ['challenge: challenge.progress', { method: 'POST', template: '/v1/challenges', body: { name: 'x', target: 1, qualifying: { event: 'a' }, completion_actions: [{ type: 'challenge.progress', challenge_id: 'chl_x' }] } }, 'completion_actions[0].type'],
  ['challenge: a reward without id', { method: 'POST', template: '/v1/challenges', body: { name: 'x', target: 1, qualifying: { event: 'a' }, completion_actions: [{ type: 'reward.issue' }] } }, 'completion_actions[0].reward_id'],
  ['challenge: a fractional quantity', { method: 'POST', template: '/v1/challenges', body: { name: 'x', target: 1, qualifying: { event: 'a' }, completion_actions: [{ type: 'item.grant', item: reward, quantity: 0.5 }] } }, 'completion_actions[0].quantity'],
  ['challenge: bad contribution key', { method: 'POST', template: '/v1/challenges', body: { name: 'x', target: 1, qualifying: { event: 'a' }, contribution_key: 'customer.segments' } }, 'contribution_key'],
  ['segment: an event path', { method: 'POST', template: '/v1/segments', body: { name: 'x1', kind: 'dynamic', condition: { all: [leaf('event.properties.a', 'eq', 1)] } } }, 'condition.all[0].path'],
  ['segment: customer.segments', { method: 'POST', template: '/v1/segments', body: { name: 'x2', kind: 'dynamic', condition: leaf('customer.segments', 'contains', 'vip') } }, 'condition.path'],
  ['segment: unknown op', { method: 'POST', template: '/v1/segments', body: { name: 'x3', kind: 'dynamic', condition: leaf('customer.attributes.a', 'zz', 1) } }, 'condition.op'],
  ['segment: gt with a string', { method: 'POST', template: '/v1/segments', body: { name: 'x4', kind: 'dynamic', condition: leaf('customer.attributes.a', 'gt', 'b') } }, 'condition.value'],
  ['counter: days 0', { method: 'POST', template: '/v1/counter_definitions', body: { name: 'x', event: 'purchase', window: { kind: 'rolling_days', days: 0 } } }, 'window.days'],
  ['counter: days 400', { method: 'POST', template: '/v1/counter_definitions', body: { name: 'x', event: 'purchase', window: { kind: 'rolling_days', days: 400 } } }, 'window.days'],
  ['counter: period year', { method: 'POST', template: '/v1/counter_definitions', body: { name: 'x', event: 'purchase', window: { kind: 'period', period: 'year' } } }, 'window.period'],
  ['counter: a customer path', { method: 'POST', template: '/v1/counter_definitions', body: { name: 'x', event: 'purchase', window: { kind: 'lifetime' }, filter: leaf('customer.attributes.vip', 'eq', true) } }, 'filter.path'],
  ['counter: unknown op', { method: 'POST', template: '/v1/counter_definitions', body: { name: 'x', event: 'purchase', window: { kind: 'lifetime' }, filter: { all: [leaf('event.properties.sku', 'near', 1)] } } }, 'filter.all[0].op'],
  ['tier program: fractional threshold', { method: 'POST', template: '/v1/tier_programs', body: { key: 'x1', name: 'X', currency: 'coins', basis: 'balance', levels: [{ key: 'a', title: 'A', threshold: 0 }, { key: 'b', title: 'B', threshold: 1.5 }] } }, 'levels[1].threshold'],
  ['tier program: no level', { method: 'POST', template: '/v1/tier_programs', body: { key: 'x2', name: 'X', currency: 'coins', basis: 'balance', levels: [] } }, 'levels'],
  ['tier program: rolling days 0', { method: 'POST', template: '/v1/tier_programs', body: { key: 'x3', name: 'X', currency: 'coins', basis: 'earned_rolling_days', rolling_days: 0, levels: [{ key: 'a', title: 'A', threshold: 0 }] } }, 'rolling_days'],
  ['tier program: every_days 0', { method: 'POST', template: '/v1/tier_programs', body: { key: 'x4', name: 'X', currency: 'coins', basis: 'balance', downgrade_check: { every_days: 0 }, levels: [{ key: 'a', title: 'A', threshold: 0 }] } }, 'downgrade_check.every_days'],
  ['tier program: a level key with a space', { method: 'POST', template: '/v1/tier_programs', body: { key: 'x5', name: 'X', currency: 'coins', basis: 'balance', levels: [{ key: 'a b', title: 'A', threshold: 0 }] } }, 'levels[0].key'],
  ['change set: update with an unknown field', { method: 'POST', template: '/v1/change_sets', body: { commands: [{ type: 'match_profile.update', key: 'ranked', colour: 'red' }] } }, 'commands[0].colour'],
  ['change set: create without metrics', { method: 'POST', template: '/v1/change_sets', body: { commands: [{ type: 'match_profile.create', key: 'empty', metrics: [] }] } }, 'commands[0].metrics'],
  ['change set: fractional duration', { method: 'POST', template: '/v1/change_sets', body: { commands: [{ type: 'match_profile.update', key: 'ranked', duration: { minimum_seconds: 1.5, maximum_seconds: 60 } }] } }, 'commands[0].duration.minimum_seconds'],
  ['change set: expected_version 0', { method: 'POST', template: '/v1/change_sets', body: { commands: [{ type: 'match_profile.archive', key: 'ranked', expected_version: 0 }] } }, 'commands[0].expected_version'],
  ['change set: no command', { method: 'POST', template: '/v1/change_sets', body: { commands: [] } }, 'commands'],
];

// ---- README bodies --------------------------------------------------------------------------

/**
 * The request bodies of the README's curl examples: [method, path, body]. A small reading of the
 * shell words: $(...) and $VAR become placeholders, quotes are joined as the shell joins them.
 */
function readmeBodies(readme: string): Array<{ method: string; path: string; body: unknown; text: string }> {
  const out: Array<{ method: string; path: string; body: unknown; text: string }> = [];
  for (const block of readme.matchAll(/```sh\n([\s\S]*?)```/g)) {
    let script = block[1]!;
    // Command substitutions, innermost first (they may hold quotes and -d of their own): a curl
    // is kept as a command of its own, a date stands for a timestamp, anything else for an id.
    for (let before = ''; before !== script; ) {
      before = script;
      script = script.replace(/\$\(([^()]*)\)/g, (_, cmd: string) =>
        cmd.startsWith('curl') ? `\n${cmd}\n` : cmd.startsWith('date') ? '2030-01-01T00:00:00Z' : 'X',
      );
    }
    script = script.replace(/\$\{?[A-Za-z_][A-Za-z0-9_]*\}?/g, 'X');
    const words = shellWords(script);
    for (let i = 0; i < words.length; i++) {
      if (words[i] !== 'curl') continue;
      let method = 'GET';
      let url = '';
      let data: string | undefined;
      for (let j = i + 1; j < words.length && words[j] !== '\n' && words[j] !== '|' && words[j] !== ')'; j++) {
        const w = words[j]!;
        if (w === '-X') method = words[++j]!;
        else if (w === '-d') data = words[++j]!;
        else if (w === '-H') j++;
        else if (w.startsWith('localhost:')) url = w;
      }
      if (data === undefined) continue;
      if (method === 'GET') method = 'POST';
      const path = url.replace(/^localhost:\d+/, '').split('?')[0]!;
      let body: unknown;
      try {
        body = JSON.parse(data);
      } catch {
        body = Symbol('unreadable');
      }
      out.push({ method, path, body, text: data });
    }
  }
  return out;
}

/** Shell words of a script, '\n', '|' and ')' kept as words of their own (line continuations joined). */
function shellWords(script: string): string[] {
  const words: string[] = [];
  let word: string | null = null;
  const s = script.replace(/\\\n/g, ' ');
  for (let i = 0; i < s.length; i++) {
    const c = s[i]!;
    if (c === "'") {
      const end = s.indexOf("'", i + 1);
      word = (word ?? '') + s.slice(i + 1, end);
      i = end;
    } else if (c === '"') {
      let j = i + 1;
      let text = '';
      for (; s[j] !== '"'; j++) text += s[j] === '\\' ? s[++j] : s[j];
      word = (word ?? '') + text;
      i = j;
    } else if (c === '#' && word === null) {
      while (i + 1 < s.length && s[i + 1] !== '\n') i++;
    } else if (c === ' ' || c === '\t' || c === '\n' || c === '|' || c === ')' || c === '(' || c === ';') {
      if (word !== null) words.push(word);
      word = null;
      if (c === '\n' || c === '|' || c === ')') words.push(c);
    } else {
      word = (word ?? '') + c;
    }
  }
  if (word !== null) words.push(word);
  return words;
}

// ---- the document as a validator ------------------------------------------------------------------

/** Request-body validators of one version of the document (the real one, or one taken apart). */
function validatorOf(doc: Json): (b: Pick<Body, 'method' | 'template' | 'body'>) => { ok: boolean; errors: string } {
  const ajv = new Ajv2020({ strict: false, allErrors: false, formats: { 'date-time': true, email: true } });
  const compiled = new Map<string, ValidateFunction>();
  return (b) => {
    const key = `${b.method} ${b.template}`;
    let v = compiled.get(key);
    if (v === undefined) {
      const schema = doc.paths[b.template]?.[b.method.toLowerCase()]?.requestBody?.content?.['application/json']?.schema;
      if (schema === undefined) throw new Error(`${key} documents no request body`);
      v = ajv.compile({ ...schema, components: { schemas: doc.components.schemas } });
      compiled.set(key, v);
    }
    const ok = v(b.body) === true;
    return { ok, errors: ok ? '' : JSON.stringify(v.errors?.slice(0, 3)) };
  };
}

/** The documented template a concrete path answers to (literal segments win over {params}). */
function templateOf(doc: Json, path: string): string | undefined {
  const templates = Object.keys(doc.paths).map((p) => ({
    template: p,
    params: (p.match(/\{/g) ?? []).length,
    re: new RegExp(`^${p.replace(/\{[^}]+\}/g, '[^/]+')}$`),
  }));
  return templates.filter((x) => x.re.test(path)).sort((a, b) => a.params - b.params)[0]?.template;
}

/**
 * Request-body and query fields that stay unconstrained on purpose: [operation, where, why]. A
 * `{}` (or a description only) anywhere else in a request body or a query parameter fails.
 */
const freeForm: Array<[string, string, string]> = [
  ['POST /v1/customers', 'attributes.*', 'keys without an attribute definition take any JSON value; defined keys take their type, which is environment data (GET /v1/attribute_definitions)'],
  ['PATCH /v1/customers/{id}', 'attributes.*', 'as on create'],
  ['POST /v1/events', 'properties.*', "an event's properties are the client's own JSON"],
  ['POST /v1/events', 'events[].properties.*', 'as a single event'],
  ['POST /v1/rules/{id}/simulate', 'event.properties.*', "as an event's properties"],
];

const annotations = new Set(['description', 'default', 'title', 'examples', 'deprecated', 'readOnly', 'writeOnly']);

/** The places under a schema that accept anything: `{}` or annotations only. $refs are followed once. */
function unconstrained(doc: Json, schema: Json, at: string, out: string[], seen = new Set<string>()): void {
  if (schema === true) {
    out.push(at);
    return;
  }
  if (schema === null || typeof schema !== 'object') return;
  if (typeof schema.$ref === 'string') {
    const name = schema.$ref.split('/').pop();
    if (seen.has(name)) return;
    seen.add(name);
    unconstrained(doc, doc.components.schemas[name], at, out, seen);
    return;
  }
  if (Object.keys(schema).every((k) => annotations.has(k))) {
    out.push(at);
    return;
  }
  for (const [k, v] of Object.entries(schema.properties ?? {})) unconstrained(doc, v, at === '' ? k : `${at}.${k}`, out, seen);
  if (schema.items !== undefined) unconstrained(doc, schema.items, `${at}[]`, out, seen);
  if (schema.additionalProperties !== undefined && schema.additionalProperties !== false) {
    unconstrained(doc, schema.additionalProperties, `${at}.*`, out, seen);
  }
  for (const k of ['anyOf', 'oneOf', 'allOf'] as const) for (const s of schema[k] ?? []) unconstrained(doc, s, at, out, seen);
}

// ---- the test ------------------------------------------------------------------------------------

t.test('request bodies the service accepts and refuses, against the schemas /v1/openapi.json gives them', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api: Client = tenant.server;
  const doc = (await anon.get('/v1/openapi.json')).body as Json;
  const check = validatorOf(doc);

  // What completions and tier programs name must exist.
  for (const key of ['coins', 'points', 'xp', 'gems']) {
    const c = await api.post('/v1/currencies', { key, name: key }, idem());
    t.equal(c.status, 201, `currency ${key}`);
  }
  const reward = await api.post('/v1/rewards', { name: 'Mug', cost: 500, currency: 'coins', availability: 100 }, idem());
  t.equal(reward.status, 201, 'a reward');
  const rewardId = reward.body.id as string;

  const accepted: Body[] = [];
  const refused: Body[] = [];

  /** Sends one accepted body: the service answers 2xx, the document's schema takes it. */
  const accept = async (b: Body, path: string): Promise<Json> => {
    const v = check(b);
    t.ok(v.ok, `${b.label}: the schema of ${b.method} ${b.template} takes it ${v.errors}`);
    const r = await api.request(b.method, path, b.body, b.method === 'POST' ? idem() : {});
    t.ok(r.status >= 200 && r.status < 300, `${b.label}: the service accepts it (${r.status} ${r.status >= 300 ? JSON.stringify(r.body) : ''})`);
    accepted.push(b);
    return r.body;
  };
  /** Sends one refused body: the service answers code naming param; the schema refuses it unless beyond it. */
  const refuse = async (b: Body, path: string, code: string, param: string, beyondSchema = false): Promise<void> => {
    const r = await api.request(b.method, path, b.body, b.method === 'POST' ? idem() : {});
    t.same({ code: r.body?.error?.code, param: r.body?.error?.param }, { code, param }, `${b.label}: the service refuses it`);
    const v = check(b);
    if (beyondSchema) t.ok(v.ok, `${b.label}: beyond what the schema says (it takes it)`);
    else {
      t.notOk(v.ok, `${b.label}: the schema refuses it too`);
      refused.push(b);
    }
  };

  // Rules: create, then PATCH the drafts and simulate them.
  const ruleIds: string[] = [];
  for (const [i, [label, definition]] of ruleDefinitions.entries()) {
    const r = await accept({ label: `rule: ${label}`, method: 'POST', template: '/v1/rules', body: { name: `Rule ${i}`, definition } }, '/v1/rules');
    if (r?.id !== undefined) ruleIds.push(r.id);
  }
  t.ok(ruleIds.length >= 12, 'rules were created');
  for (const [i, [label, definition]] of ruleDefinitions.slice(0, 6).entries()) {
    const id = ruleIds[ruleIds.length - 1 - i]!;
    await accept({ label: `rule PATCH: ${label}`, method: 'PATCH', template: '/v1/rules/{id}', body: { definition, priority: i } }, `/v1/rules/${id}`);
  }
  for (const [i, [label, body]] of simulations.entries()) {
    await accept({ label: `simulate: ${label}`, method: 'POST', template: '/v1/rules/{id}/simulate', body }, `/v1/rules/${ruleIds[i % ruleIds.length]}/simulate`);
  }
  for (const [label, definition, param] of refusedRules) {
    await refuse({ label: `rule: ${label}`, method: 'POST', template: '/v1/rules', body: { name: 'Refused', definition } }, '/v1/rules', 'rule_invalid', param);
  }
  await refuse(
    { label: 'rule PATCH: unknown schema', method: 'PATCH', template: '/v1/rules/{id}', body: { definition: { schema: 'service.rule/v9' } } },
    `/v1/rules/${ruleIds[0]}`,
    'rule_invalid',
    'definition.schema',
  );
  for (const [label, definition, param] of refusedRulesBeyondSchema) {
    await refuse({ label: `rule: ${label}`, method: 'POST', template: '/v1/rules', body: { name: 'Refused', definition } }, '/v1/rules', 'rule_invalid', param, true);
  }

  // Tier programs (main first: challenges name it).
  for (const [label, program] of [...tierPrograms].reverse()) {
    const key = label === 'main' ? 'main' : label.replace(/[^a-z0-9]+/gi, '_').toLowerCase().replace(/^_+|_+$/g, '');
    await accept({ label: `tier program: ${label}`, method: 'POST', template: '/v1/tier_programs', body: { key, ...program } }, '/v1/tier_programs');
  }

  // Challenges: create, then PATCH one.
  let challengeId = '';
  for (const [label, body] of challenges(rewardId)) {
    const c = await accept({ label: `challenge: ${label}`, method: 'POST', template: '/v1/challenges', body }, '/v1/challenges');
    if (challengeId === '' && c?.status === 'draft') challengeId = c.id;
  }
  for (const [label, body] of challenges(rewardId).slice(0, 4)) {
    const { qualifying, completion_actions } = body as Record<string, unknown>;
    const patch = completion_actions === undefined ? { qualifying } : { qualifying, completion_actions };
    await accept({ label: `challenge PATCH: ${label}`, method: 'PATCH', template: '/v1/challenges/{id}', body: patch }, `/v1/challenges/${challengeId}`);
  }

  // Segments: static ones, dynamic ones, a PATCH of a dynamic one.
  await accept({ label: 'segment: static', method: 'POST', template: '/v1/segments', body: { name: 'vip', kind: 'static' } }, '/v1/segments');
  await accept({ label: 'segment: static, null condition', method: 'POST', template: '/v1/segments', body: { name: 'club', kind: 'static', description: 'Members', condition: null } }, '/v1/segments');
  let segmentId = '';
  for (const [i, [label, condition]] of segmentConditions.entries()) {
    const s = await accept({ label: `segment: ${label}`, method: 'POST', template: '/v1/segments', body: { name: `dyn_${i}`, kind: 'dynamic', condition } }, '/v1/segments');
    segmentId ||= s?.id ?? '';
  }
  for (const [label, condition] of segmentConditions.slice(0, 4)) {
    await accept({ label: `segment PATCH: ${label}`, method: 'PATCH', template: '/v1/segments/{id}', body: { condition } }, `/v1/segments/${segmentId}`);
  }

  // Counters.
  for (const [i, [label, body]] of counters.entries()) {
    await accept({ label: `counter: ${label}`, method: 'POST', template: '/v1/counter_definitions', body: { name: `counter_${i}`, ...(body as object) } }, '/v1/counter_definitions');
  }

  // Change sets, one command each; then the README's profile applied and two match reports.
  for (const [label, command] of commands) {
    await accept({ label: `change set: ${label}`, method: 'POST', template: '/v1/change_sets', body: { commands: [command] } }, '/v1/change_sets');
  }
  const cs = await accept({ label: 'change set: the ranked profile', method: 'POST', template: '/v1/change_sets', body: { commands: [ranked] } }, '/v1/change_sets');
  t.equal((await api.post('/v1/change_set_applications', { change_set_id: cs.id }, idem())).status, 201, 'the profile is applied');
  const ago = (min: number) => new Date(Date.now() - min * 60_000).toISOString();
  const report = (matchId: string, kills: unknown) => ({
    profile: 'ranked',
    match_id: matchId,
    started_at: ago(30),
    ended_at: ago(10),
    players: [
      { customer: { external_id: 'alice' }, metrics: { kills: 12 }, won: true },
      { customer: { external_id: 'bob' }, metrics: { kills }, won: null },
    ],
  });
  await accept({ label: 'match result: README', method: 'POST', template: '/v1/match_results', body: report('match-1', 45) }, '/v1/match_results');
  await accept({ label: 'match result: fractional metric', method: 'POST', template: '/v1/match_results', body: report('match-2', 3.5) }, '/v1/match_results');
  await refuse({ label: 'match result: a metric that is not a number', method: 'POST', template: '/v1/match_results', body: report('match-3', '12') }, '/v1/match_results', 'validation_failed', 'players[1].metrics.kills');

  for (const [label, b, param] of refusedOthers(rewardId)) await refuse({ label, ...b }, b.template, 'validation_failed', param);

  await t.test('the corpus covers every action type, op and schema version', async (t) => {
    const seen = new Set<string>();
    JSON.stringify(accepted.map((b) => b.body), (k, v) => {
      if ((k === 'op' || k === 'type' || k === 'schema') && typeof v === 'string') seen.add(v);
      return v;
    });
    for (const name of [...opNames, ...actionTypes, 'service.rule/v1', 'service.rule/v2']) t.ok(seen.has(name), name);
  });

  await t.test('every README request body is a body the document describes', async (t) => {
    const bodies = readmeBodies(await readFile(new URL('../../README.md', import.meta.url), 'utf8'));
    t.ok(bodies.length >= 20, `${bodies.length} README bodies`);
    for (const b of bodies) {
      const template = templateOf(doc, b.path);
      t.ok(template, `${b.method} ${b.path} is documented`);
      t.equal(typeof b.body, 'object', `${b.method} ${b.path}: the body reads as JSON: ${b.text.slice(0, 80)}`);
      if (template === undefined || typeof b.body !== 'object') continue;
      const v = check({ method: b.method as Body['method'], template, body: b.body });
      t.ok(v.ok, `README ${b.method} ${template}: ${b.text.slice(0, 60)} ${v.errors}`);
    }
  });

  await t.test('no request body or query parameter is an unconstrained {} outside the free-form fields', async (t) => {
    const found: string[] = [];
    for (const [path, ops] of Object.entries<Json>(doc.paths)) {
      for (const [method, op] of Object.entries<Json>(ops)) {
        const where = `${method.toUpperCase()} ${path}`;
        const out: string[] = [];
        const body = op.requestBody?.content?.['application/json']?.schema;
        if (body !== undefined) unconstrained(doc, body, '', out);
        for (const p of op.parameters ?? []) if (p.in === 'query') unconstrained(doc, p.schema, `?${p.name}`, out);
        for (const at of out) found.push(`${where} ${at}`);
      }
    }
    t.same(found.sort(), freeForm.map(([op, at]) => `${op} ${at}`).sort(), 'only the free-form fields accept anything');
  });

  await t.test('the test fails when a documented shape loses a branch or is loosened', async (t) => {
    /** The unions the corpus must cover: a component's own, or one inside a request body. */
    const unions: Array<[string, (d: Json) => Json[]]> = [
      ['RuleDefinition', (d) => d.components.schemas.RuleDefinition.oneOf],
      ['RuleAction', (d) => d.components.schemas.RuleAction.oneOf],
      ['RuleCondition', (d) => d.components.schemas.RuleCondition.anyOf],
      ['RuleConditionLeaf', (d) => d.components.schemas.RuleConditionLeaf.oneOf],
      ['ChallengeCompletionAction', (d) => d.components.schemas.ChallengeCompletionAction.oneOf],
      ['SegmentCondition', (d) => d.components.schemas.SegmentCondition.anyOf],
      ['SegmentCondition leaf', (d) => d.components.schemas.SegmentCondition.anyOf[0].oneOf],
      ['CounterFilter', (d) => d.components.schemas.CounterFilter.anyOf],
      ['CounterFilter leaf', (d) => d.components.schemas.CounterFilter.anyOf[0].oneOf],
      ['counter window', (d) => d.paths['/v1/counter_definitions'].post.requestBody.content['application/json'].schema.properties.window.oneOf],
      ['change set command', (d) => d.paths['/v1/change_sets'].post.requestBody.content['application/json'].schema.properties.commands.items.oneOf],
    ];
    for (const [name, union] of unions) {
      const n = union(doc)?.length ?? 0;
      t.ok(n >= 2, `${name} is a union (${n} branches)`);
      for (let i = 0; i < n; i++) {
        const cut = structuredClone(doc);
        union(cut).splice(i, 1);
        const v = validatorOf(cut);
        const failing = accepted.filter((b) => !v(b).ok);
        t.ok(failing.length > 0, `${name} without branch ${i}: ${failing.length} accepted bodies fail (${failing[0]?.label ?? 'none'})`);
      }
    }
    for (const name of ['RuleDefinition', 'RuleAction', 'RuleCondition', 'RuleConditionLeaf', 'ChallengeCompletionAction', 'SegmentCondition', 'CounterFilter']) {
      const loose = structuredClone(doc);
      loose.components.schemas[name] = {};
      const v = validatorOf(loose);
      const through = refused.filter((b) => v(b).ok);
      t.ok(through.length > 0, `${name} loosened to {}: ${through.length} refused bodies get through (${through[0]?.label ?? 'none'})`);
    }
  });
});
