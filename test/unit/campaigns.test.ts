// Campaigns in the customer's step, given/when/then: the status machine, the gate (status and
// schedule), the audience as a hoisted segment check, and the budget grant: an award beyond the
// command's grant is skipped with budget_exhausted, what is awarded is journaled as campaign.spent;
// a firing none of whose actions applied for budget is rule.skipped and counts against no limit.
import t from 'tap';
import { withAudience } from '../../src/catalog/rules-context.js';
import { allowed, budgetWants, type CampaignGate, campaignInactiveReason, grantUsed, wantAll } from '../../src/domain/campaigns.js';
import { emptyLedger } from '../../src/domain/ledger.js';
import { applyRules, type RulesContext } from '../../src/domain/rule-effects.js';
import { compileRule, type RulePlan } from '../../src/domain/rules/compile.js';
import { validateRule } from '../../src/domain/rules/schema.js';

function plan(ruleId: string, campaignId: string | null, actions: unknown[], event = 'order.completed'): RulePlan {
  const v = validateRule({ schema: 'service.rule/v2', trigger: { kind: 'customer_event', event }, actions });
  if (!v.ok) throw new Error(JSON.stringify(v.problems));
  return { ...compileRule(v.definition, { ruleId, versionNumber: 1, priority: 0 }), campaignId };
}

const gate = (over: Partial<CampaignGate> = {}): CampaignGate => ({
  id: 'cmp_1',
  status: 'active',
  startsAtMs: null,
  endsAtMs: null,
  audienceSegment: null,
  capped: ['coins'],
  ...over,
});

let ids = 0;
const ctx = { nowMs: 10_000, newId: (p: string) => `${p}_${++ids}` };
const subject = () => ({ externalId: 'u1', attributes: {}, ledger: emptyLedger(), ruleLimits: {}, tiers: {}, inventory: {}, segmentIds: [] as string[] });
const event = { name: 'order.completed', properties: { total: 12.5 }, trust: 'merchant_asserted' };

function context(plans: RulePlan[], campaigns: Record<string, CampaignGate>, budget?: Record<string, number>): RulesContext {
  return {
    plans: plans.map((p) => withAudience(p, campaigns)),
    currencies: [{ key: 'coins', negativeBalance: 'forbid', expiryDays: null }],
    tierPrograms: [],
    segments: [{ id: 'seg_vip', name: 'vip', kind: 'static', plan: null }],
    campaigns,
    budget,
  };
}

t.test('status transitions', async (t) => {
  t.ok(allowed('draft', 'activate'));
  t.ok(allowed('paused', 'activate'));
  t.notOk(allowed('active', 'activate'));
  t.ok(allowed('active', 'pause'));
  t.notOk(allowed('draft', 'pause'));
  t.ok(allowed('draft', 'end'));
  t.notOk(allowed('ended', 'end'), 'ended is final');
  t.notOk(allowed('ended', 'edit'));
  t.notOk(allowed('active', 'delete'), 'pause or end before deleting');
});

t.test('the gate: status, then schedule (start inclusive, end exclusive)', async (t) => {
  t.equal(campaignInactiveReason(gate(), 5), null);
  t.match(campaignInactiveReason(gate({ status: 'paused' }), 5), /paused/);
  t.match(campaignInactiveReason(undefined, 5), /does not exist/);
  t.match(campaignInactiveReason(gate({ startsAtMs: 10 }), 9), /not started/);
  t.equal(campaignInactiveReason(gate({ startsAtMs: 10 }), 10), null);
  t.equal(campaignInactiveReason(gate({ endsAtMs: 10 }), 9), null);
  t.match(campaignInactiveReason(gate({ endsAtMs: 10 }), 10), /over/);
});

t.test('given a paused campaign, when its rule triggers, then it is skipped with campaign_inactive', async (t) => {
  const r = applyRules(context([plan('rule_1', 'cmp_1', [{ type: 'points.award', currency: 'coins', amount: 5 }])], { cmp_1: gate({ status: 'paused' }) }, { 'cmp_1|coins': 100 }), event, subject(), ctx);
  t.same(r.facts, []);
  t.match(r.effects, [{ type: 'rule.skipped', reason: 'campaign_inactive' }]);
});

t.test('given an audience, when a non-member triggers the rule, then segment_not_matched; a member gets the award', async (t) => {
  const campaigns = { cmp_1: gate({ audienceSegment: 'vip' }) };
  const rules = context([plan('rule_1', 'cmp_1', [{ type: 'points.award', currency: 'coins', amount: 5 }])], campaigns, { 'cmp_1|coins': 5 });
  t.match(applyRules(rules, event, subject(), ctx).effects, [{ type: 'rule.skipped', reason: 'segment_not_matched', detail: /vip/ }]);
  const member = { ...subject(), segmentIds: ['seg_vip'] };
  const r = applyRules(rules, event, member, ctx);
  t.match(r.effects, [{ type: 'rule.fired' }, { type: 'points.awarded', amount: 5, campaignId: 'cmp_1' }]);
  t.match(r.facts, [{ kind: 'rule.fired' }, { kind: 'ledger.entry_recorded' }, { kind: 'campaign.spent', campaignId: 'cmp_1', currency: 'coins', amount: 5 }]);
});

t.test('given a grant of 12, when two rules award 5 and 10, then the first fits and the second is budget_exhausted', async (t) => {
  const plans = [plan('rule_1', 'cmp_1', [{ type: 'points.award', currency: 'coins', amount: 5 }]), plan('rule_2', 'cmp_1', [{ type: 'points.award', currency: 'coins', amount: 10 }])];
  const grant = { 'cmp_1|coins': 12 };
  const r = applyRules(context(plans, { cmp_1: gate() }, grant), event, subject(), ctx);
  t.same(r.effects.map((e) => [e.type, 'ruleId' in e ? e.ruleId : null]), [
    ['rule.fired', 'rule_1'],
    ['points.awarded', 'rule_1'],
    ['rule.skipped', 'rule_2'],
  ]);
  t.match(r.effects[2], {
    reason: 'budget_exhausted',
    detail: "The budget of campaign 'cmp_1' cannot cover the rule's awards (10 coins): nothing was applied, and the firing is not counted against the rule's limits.",
  });
  t.same(r.facts.filter((f) => f.kind === 'rule.fired').map((f) => (f as { ruleId: string }).ruleId), ['rule_1'], 'rule_2 fired nothing: no rule.fired fact');
  t.same(grant, { 'cmp_1|coins': 12 }, 'the grant handed in is not mutated (the step is pure)');
  t.same(grantUsed(r.effects), { 'cmp_1|coins': 5 }, 'what goes back: 12 - 5');
});

t.test('given no grant, a capped award is budget_exhausted; an uncapped currency or a rule without campaign is not limited', async (t) => {
  const capped = applyRules(context([plan('rule_1', 'cmp_1', [{ type: 'points.award', currency: 'coins', amount: 1 }])], { cmp_1: gate() }), event, subject(), ctx);
  t.match(capped.effects, [{ type: 'rule.skipped', reason: 'budget_exhausted' }]);
  t.equal(capped.effects.length, 1);
  t.same(capped.facts, [], 'nothing recorded: no ledger entry, no rule.fired');
  const uncapped = applyRules(context([plan('rule_1', 'cmp_1', [{ type: 'points.award', currency: 'coins', amount: 1 }])], { cmp_1: gate({ capped: [] }) }), event, subject(), ctx);
  t.match(uncapped.effects, [{ type: 'rule.fired' }, { type: 'points.awarded' }]);
  const loose = applyRules(context([plan('rule_1', null, [{ type: 'points.award', currency: 'coins', amount: 1 }])], {}), event, subject(), ctx);
  t.match(loose.effects, [{ type: 'rule.fired' }, { type: 'points.awarded' }]);
  t.equal(loose.facts.filter((f) => f.kind === 'campaign.spent').length, 0);
});

t.test('budget wants: live campaign rules the event triggers, per capped currency', async (t) => {
  const campaigns = { cmp_1: gate(), cmp_2: gate({ id: 'cmp_2', status: 'paused' }) };
  const plans = [
    plan('rule_1', 'cmp_1', [{ type: 'points.award', currency: 'coins', amount: 5 }, { type: 'points.award', currency: 'coins', amount_from: 'event.properties.total', multiplier: 2 }]),
    plan('rule_2', 'cmp_1', [{ type: 'points.award', currency: 'coins', amount_from: 'customer.attributes.level' }]),
    plan('rule_3', 'cmp_2', [{ type: 'points.award', currency: 'coins', amount: 100 }]),
    plan('rule_4', 'cmp_1', [{ type: 'points.award', currency: 'coins', amount: 100 }], 'other.event'),
    plan('rule_5', null, [{ type: 'points.award', currency: 'coins', amount: 100 }]),
  ];
  t.same(budgetWants(plans.slice(0, 1), campaigns, event, ctx.nowMs), { 'cmp_1|coins': 5 + 25 }, 'static + event amount (rounded up)');
  t.same(budgetWants(plans, campaigns, event, ctx.nowMs), { 'cmp_1|coins': wantAll }, 'a customer-path amount wants what the node holds');
  t.same(budgetWants(plans.slice(2), campaigns, event, ctx.nowMs), {}, 'paused campaigns, other triggers and loose rules want nothing');
  const huge = { ...event, properties: { ...event.properties, total: 1e300 } };
  t.same(budgetWants(plans.slice(0, 1), campaigns, huge, ctx.nowMs), { 'cmp_1|coins': 5 }, 'an amount past the ledger maximum wants nothing (the step refuses it)');
});

t.test('given a per-customer limit, when every award of a firing is skipped for budget, then the firing is not counted; a top-up awards it later', async (t) => {
  const limited = (id: string) => {
    const v = validateRule({
      schema: 'service.rule/v2',
      trigger: { kind: 'customer_event', event: 'order.completed' },
      limits: [{ id: 'twice', scope: ['customer'], max: 2 }],
      actions: [
        { type: 'points.award', currency: 'coins', amount: 100 },
        { type: 'points.award', currency: 'coins', amount: 20 },
      ],
    });
    if (!v.ok) throw new Error(JSON.stringify(v.problems));
    return { ...compileRule(v.definition, { ruleId: id, versionNumber: 1, priority: 0 }), campaignId: 'cmp_1' };
  };
  const campaigns = { cmp_1: gate() };
  // Given one firing already counted, when the budget covers neither award, then rule.skipped
  // budget_exhausted: no rule.fired fact, so the limit key is not counted again.
  const spent = { ...subject(), ruleLimits: { 'rule_1|twice|customer': 1 } };
  const dry = applyRules(context([limited('rule_1')], campaigns, { 'cmp_1|coins': 19 }), event, spent, ctx);
  t.same(dry.effects, [
    {
      type: 'rule.skipped',
      ruleId: 'rule_1',
      reason: 'budget_exhausted',
      detail: "The budget of campaign 'cmp_1' cannot cover the rule's awards (100 coins, 20 coins): nothing was applied, and the firing is not counted against the rule's limits.",
    },
  ]);
  t.same(dry.facts, []);
  t.same(grantUsed(dry.effects), {}, 'the whole grant goes back');
  // When the budget is topped up, then the same customer still has its second firing.
  const topped = applyRules(context([limited('rule_1')], campaigns, { 'cmp_1|coins': 500 }), event, spent, ctx);
  t.match(topped.effects, [{ type: 'rule.fired' }, { type: 'points.awarded', amount: 100 }, { type: 'points.awarded', amount: 20 }]);
  t.match(topped.facts[0], { kind: 'rule.fired', limitKeys: ['rule_1|twice|customer'] });
  // Given part of the awards fits, then the firing applied something: it counts (the rest is action.skipped).
  const part = applyRules(context([limited('rule_1')], campaigns, { 'cmp_1|coins': 20 }), event, spent, ctx);
  t.match(part.effects, [{ type: 'rule.fired' }, { type: 'action.skipped', reason: 'budget_exhausted' }, { type: 'points.awarded', amount: 20 }]);
  t.match(part.facts[0], { kind: 'rule.fired', limitKeys: ['rule_1|twice|customer'] });
});

t.test('given an award skipped for budget next to an action that applies, then the firing counts', async (t) => {
  const mixed = plan('rule_1', 'cmp_1', [
    { type: 'points.award', currency: 'coins', amount: 5 },
    { type: 'item.grant', item: 'sticker', quantity: 1 },
  ]);
  const r = applyRules(context([mixed], { cmp_1: gate() }, { 'cmp_1|coins': 0 }), event, subject(), ctx);
  t.match(r.effects, [{ type: 'rule.fired' }, { type: 'action.skipped', reason: 'budget_exhausted' }, { type: 'item.granted', item: 'sticker' }]);
  t.match(r.facts, [{ kind: 'rule.fired' }, {}]);
  // An award refused for another reason (here an unknown currency: the ledger refuses it) still counts, as before.
  const other = plan('rule_2', null, [{ type: 'points.award', currency: 'gems', amount: 5 }]);
  const refused = applyRules(context([other], {}), event, subject(), ctx);
  t.match(refused.effects, [{ type: 'rule.fired' }, { type: 'action.skipped', action: 'points.award' }]);
  t.not((refused.effects[1] as { reason: string }).reason, 'budget_exhausted');
});
