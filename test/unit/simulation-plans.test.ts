// Simulate's plan cache: one compilation per rule record (concurrent calls share it), a new record
// (the catalog reloads one after every change) compiles again with the record's own definition
// and meta, a definition with problems is kept, a compilation that failed is tried again.
import t from 'tap';
import type { Rule } from '../../src/catalog/rules.js';
import { type RuleCompilation, type RuleMeta, validateAndCompile } from '../../src/domain/rules/compile.js';
import { SimulationPlans, simulatedDefinition } from '../../src/gateway/simulation-plans.js';

const definition = (minTotal: number) => ({
  schema: 'service.rule/v2',
  trigger: { kind: 'customer_event', event: 'order.completed' },
  conditions: { all: [{ path: 'event.properties.total', op: 'gte', value: minTotal }] },
  actions: [{ type: 'points.award', currency: 'points', amount: 10 }],
});

function record(over: Partial<Rule>): Rule {
  return {
    id: 'rule_1',
    name: 'r',
    campaignId: null,
    status: 'draft',
    priority: 4,
    draftDefinition: definition(10),
    activeVersion: null,
    version: 1,
    createdAtMs: 0,
    updatedAtMs: 0,
    ...over,
  };
}

function counting(): { compile: (d: unknown, m: RuleMeta) => Promise<RuleCompilation>; calls: Array<{ definition: unknown; meta: RuleMeta }> } {
  const calls: Array<{ definition: unknown; meta: RuleMeta }> = [];
  return {
    calls,
    compile: async (d, m) => {
      calls.push({ definition: d, meta: m });
      return validateAndCompile(d, m);
    },
  };
}

function plan(c: RuleCompilation) {
  if (!c.ok) throw new Error(JSON.stringify(c.problems));
  return c.plan;
}

/** The minimum total the plan's one condition asks for. */
function minOf(c: RuleCompilation): unknown {
  let n = plan(c).conditions;
  while (n !== null && n.k !== 0) n = n.k === 3 ? n.c : (n.c[0] ?? null);
  return n?.v;
}

t.test('one compilation per record, shared by concurrent and later calls', async (t) => {
  const { compile, calls } = counting();
  const plans = new SimulationPlans(compile);
  const rule = record({});
  const [a, b] = await Promise.all([plans.of(rule), plans.of(rule)]);
  const c = await plans.of(rule);
  t.equal(calls.length, 1);
  t.equal(a, b);
  t.equal(a, c);
  t.match(plan(a), { ruleId: 'rule_1', versionNumber: 0, priority: 4 });
});

t.test('a new record of the same rule compiles its own definition (draft edit, publish, rollback)', async (t) => {
  const { compile, calls } = counting();
  const plans = new SimulationPlans(compile);
  const draft = record({ draftDefinition: definition(10) });
  const edited = record({ draftDefinition: definition(20), version: 2 });
  const published = record({
    status: 'published',
    draftDefinition: null,
    activeVersion: { id: 'rv_2', number: 2, definition: definition(30), createdAtMs: 0 },
    version: 3,
  });
  const rolledBack = record({
    status: 'published',
    draftDefinition: null,
    activeVersion: { id: 'rv_1', number: 1, definition: definition(5), createdAtMs: 0 },
    version: 4,
  });
  t.equal(minOf(await plans.of(draft)), 10);
  t.equal(minOf(await plans.of(edited)), 20);
  t.equal(minOf(await plans.of(published)), 30);
  t.equal(plan(await plans.of(published)).versionNumber, 2, 'the active version: its number');
  t.equal(minOf(await plans.of(rolledBack)), 5);
  t.equal(plan(await plans.of(rolledBack)).versionNumber, 1);
  t.equal(calls.length, 4);
  t.equal(minOf(await plans.of(draft)), 10, 'each record keeps its own plan');
  t.equal(calls.length, 4);
});

t.test('the draft wins over the active version', async (t) => {
  const r = record({ draftDefinition: definition(7), activeVersion: { id: 'rv_1', number: 1, definition: definition(1), createdAtMs: 0 } });
  t.same(simulatedDefinition(r), { definition: definition(7), meta: { ruleId: 'rule_1', versionNumber: 0, priority: 4 } });
});

t.test('problems are kept; a failed compilation is tried again', async (t) => {
  let fail = true;
  let calls = 0;
  const plans = new SimulationPlans(async (d, m) => {
    calls++;
    if (fail) throw new Error('pool down');
    return validateAndCompile(d, m);
  });
  const rule = record({});
  await t.rejects(plans.of(rule), /pool down/);
  fail = false;
  t.ok((await plans.of(rule)).ok, 'compiled on the next call');
  t.equal(calls, 2);

  const bad = record({ draftDefinition: { schema: 'service.rule/v9' } });
  const first = await plans.of(bad);
  t.equal(first.ok, false);
  t.equal(await plans.of(bad), first);
  t.equal(calls, 3);
});
