// A rule definition's references (pure): each kind found with its client path, in document order;
// given what an environment has, one problem per missing reference; tier programs by key or id;
// a tier.evaluate without program and item.grant name nothing; customer.tiers.<key> in conditions
// and limit scopes names a program by key, and the levels compared with it.
import t from 'tap';
import { type KnownResources, referenceProblems, ruleReferences } from '../../src/domain/rules/references.js';
import { type RuleDefinition, validateRule } from '../../src/domain/rules/schema.js';

function parsed(doc: unknown): RuleDefinition {
  const v = validateRule(doc);
  if (!v.ok) throw new Error(JSON.stringify(v.problems));
  return v.definition;
}

const empty: KnownResources = {
  currencies: new Set(),
  rewards: new Set(),
  challenges: new Set(),
  tierPrograms: new Set(),
  tierLevels: new Map(),
  segments: new Set(),
  counters: new Set(),
};

const doc = parsed({
  schema: 'service.rule/v2',
  trigger: { kind: 'customer_event', event: 'order.completed' },
  conditions: {
    any: [
      { path: 'customer.segments', op: 'contains', value: 'vip' },
      { not: { path: 'customer.segments', op: 'contains', value: 'lapsed' } },
      { path: 'event.properties.total', op: 'gte', value: 1 },
    ],
  },
  actions: [
    { type: 'points.award', currency: 'gems', amount_from: 'event.properties.total' },
    { type: 'item.grant', item: 'sword', quantity: 1 },
    { type: 'tier.evaluate' },
    { type: 'tier.evaluate', program: 'club' },
    { type: 'reward.issue', reward_id: 'rw_1' },
    { type: 'challenge.progress', challenge_id: 'chl_1' },
  ],
});

t.test('every reference, in document order, with its path', async (t) => {
  t.same(ruleReferences(doc), [
    { kind: 'currency', name: 'gems', path: 'actions[0].currency' },
    { kind: 'tier_program', name: 'club', path: 'actions[3].program' },
    { kind: 'reward', name: 'rw_1', path: 'actions[4].reward_id' },
    { kind: 'challenge', name: 'chl_1', path: 'actions[5].challenge_id' },
    { kind: 'segment', name: 'vip', path: 'conditions.any[0].value' },
    { kind: 'segment', name: 'lapsed', path: 'conditions.any[1].not.value' },
  ]);
});

t.test('given nothing exists, every reference is a problem', async (t) => {
  t.same(
    referenceProblems(ruleReferences(doc), empty).map((p) => p.message),
    [
      "No currency 'gems' in this environment.",
      "No tier program 'club' in this environment.",
      "No reward 'rw_1' in this environment.",
      "No challenge 'chl_1' in this environment.",
      "No segment 'vip' in this environment.",
      "No segment 'lapsed' in this environment.",
    ],
  );
});

t.test('given everything exists (the program by id), nothing is a problem', async (t) => {
  const byId = parsed({ ...(doc as object), actions: [{ type: 'tier.evaluate', program: 'tp_1' }] });
  const known: KnownResources = {
    currencies: new Set(['gems']),
    rewards: new Set(['rw_1']),
    challenges: new Set(['chl_1']),
    tierPrograms: new Set(['club', 'tp_1']),
    tierLevels: new Map([['club', new Set(['bronze'])]]),
    segments: new Set(['vip', 'lapsed']),
    counters: new Set(),
  };
  t.same(referenceProblems(ruleReferences(doc), known), []);
  t.same(referenceProblems(ruleReferences(byId), known), []);
});

t.test('counters read by conditions and amount_from are references; deeper paths and other roots are not', async (t) => {
  const d = parsed({
    schema: 'service.rule/v2',
    trigger: { kind: 'customer_event', event: 'play' },
    conditions: { all: [{ path: 'customer.counters.plays', op: 'gte', value: 2 }, { not: { path: 'customer.counters.wins', op: 'eq', value: 0 } }] },
    actions: [{ type: 'points.award', currency: 'gems', amount_from: 'customer.counters.plays' }],
  });
  t.same(
    ruleReferences(d).filter((r) => r.kind === 'counter'),
    [
      { kind: 'counter', name: 'plays', path: 'actions[0].amount_from' },
      { kind: 'counter', name: 'plays', path: 'conditions.all[0].path' },
      { kind: 'counter', name: 'wins', path: 'conditions.all[1].not.path' },
    ],
  );
  const problems = referenceProblems(ruleReferences(d), { ...empty, currencies: new Set(['gems']), counters: new Set(['plays']) });
  t.same(problems, [{ path: 'conditions.all[1].not.path', message: "No counter 'wins' in this environment." }]);
});

t.test('v1 conditions are named by index; a rule naming nothing has no references', async (t) => {
  const v1 = parsed({
    schema: 'service.rule/v1',
    trigger: { event: 'order.completed' },
    conditions: [{ path: 'customer.segments', op: 'contains', value: 'gold' }],
    actions: [{ type: 'item.grant', item: 'badge', quantity: 1 }],
  });
  t.same(ruleReferences(v1), [{ kind: 'segment', name: 'gold', path: 'conditions[0].value' }]);
  t.same(ruleReferences(parsed({ schema: 'service.rule/v1', trigger: { event: 'x' }, actions: [{ type: 'tier.evaluate' }] })), []);
});

t.test('customer.tiers.<key> names a tier program by key (conditions and limit scopes) and the levels it is compared with', async (t) => {
  const d = parsed({
    schema: 'service.rule/v2',
    trigger: { kind: 'customer_event', event: 'order.completed' },
    limits: [{ id: 'per_level', scope: ['customer', 'customer.tiers.status'], max: 1 }],
    conditions: {
      all: [
        { path: 'customer.tiers.statsu', op: 'eq', value: 'silver' },
        { any: [{ path: 'customer.tiers.status', op: 'in', value: ['silver', 'gld'] }, { path: 'customer.tiers.status', op: 'exists' }] },
        { not: { path: 'customer.tiers.status', op: 'ne', value: 'bronze' } },
      ],
    },
    actions: [{ type: 'tier.evaluate' }],
  });
  t.same(ruleReferences(d), [
    { kind: 'tier_program_key', name: 'statsu', path: 'conditions.all[0].path' },
    { kind: 'tier_level', name: 'silver', path: 'conditions.all[0].value', program: 'statsu' },
    { kind: 'tier_program_key', name: 'status', path: 'conditions.all[1].any[0].path' },
    { kind: 'tier_level', name: 'silver', path: 'conditions.all[1].any[0].value[0]', program: 'status' },
    { kind: 'tier_level', name: 'gld', path: 'conditions.all[1].any[0].value[1]', program: 'status' },
    { kind: 'tier_program_key', name: 'status', path: 'conditions.all[1].any[1].path' },
    { kind: 'tier_program_key', name: 'status', path: 'conditions.all[2].not.path' },
    { kind: 'tier_level', name: 'bronze', path: 'conditions.all[2].not.value', program: 'status' },
    { kind: 'tier_program_key', name: 'status', path: 'limits[0].scope[1]' },
  ]);
  // The program exists by key ('status'; its id does not count for a path), with levels bronze and silver.
  const known = { ...empty, tierPrograms: new Set(['status', 'tp_1']), tierLevels: new Map([['status', new Set(['bronze', 'silver'])]]) };
  t.same(referenceProblems(ruleReferences(d), known), [
    { path: 'conditions.all[0].path', message: "No tier program with key 'statsu' in this environment." },
    { path: 'conditions.all[1].any[0].value[1]', message: "Tier program 'status' has no level 'gld'." },
  ]);
  const byId = parsed({ ...(d as object), limits: [], conditions: { path: 'customer.tiers.tp_1', op: 'exists' } });
  t.same(referenceProblems(ruleReferences(byId), known), [{ path: 'conditions.path', message: "No tier program with key 'tp_1' in this environment." }]);
});
