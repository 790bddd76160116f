// Rule definition validation: valid service.rule/v1 and v2 documents are accepted as parsed; each
// kind of invalid document answers every problem path with a reason (the 422 rule_invalid body).
import t from 'tap';
import { validateRule } from '../../src/domain/rules/schema.js';
import { acceptedRuleDefinitions, cond, leaf, v1, v2 } from '../fixtures/rule-definitions.js';

t.test('valid documents are accepted and returned as parsed', async (t) => {
  const valid: [string, unknown][] = [
    ...acceptedRuleDefinitions,
    ['v2 with a single leaf as conditions', cond(leaf('event.properties.total', 'lt', 5))],
  ];
  for (const [name, doc] of valid) {
    const r = validateRule(doc);
    t.same(r, { ok: true, definition: doc }, name);
  }
});

t.test('each kind of invalid document names every bad path and why', async (t) => {
  // [name, document, [[path, message pattern]...]] — the problems, in order.
  const table: [string, unknown, [string, RegExp][]][] = [
    ['not an object', 'rule', [['definition', /object/]]],
    ['missing schema', { trigger: { event: 'a' } }, [['schema', /required.*service\.rule\/v1 or service\.rule\/v2/]]],
    ['unknown schema', { ...v2(), schema: 'service.rule/v3' }, [['schema', /Unknown schema "service\.rule\/v3"/]]],
    ['unknown top-level field', v2({ color: 'red' }), [['color', /Unknown field/]]],
    ['v2 trigger kind', v2({ trigger: { kind: 'cron', event: 'a' } }), [['trigger.kind', /customer_event/]]],
    ['bad event name', v2({ trigger: { kind: 'customer_event', event: 'Order Completed' } }), [['trigger.event', /snake_case/]]],
    ['v1 trigger has no kind', v1({ trigger: { kind: 'customer_event', event: 'a' } }), [['trigger.kind', /Unknown field/]]],
    ['missing actions', { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: 'a' } }, [['actions', /Required/]]],
    ['empty actions', v2({ actions: [] }), [['actions', /at least one action/]]],
    ['unknown op', cond({ all: [leaf('event.properties.x', 'eq', 1), leaf('event.properties.x', 'like', 'a')] }), [['conditions.all[1].op', /Unknown op "like"/]]],
    ['missing op', cond({ path: 'event.properties.x', value: 1 }), [['conditions.op', /op is required/]]],
    ['bad path prefix', cond({ all: [leaf('order.total', 'eq', 1)] }), [['conditions.all[0].path', /Unknown path prefix in 'order\.total'/]]],
    ['path with nothing below', cond(leaf('customer.attributes', 'exists')), [['conditions.path', /must be followed by a field name/]]],
    ['counter with two names', cond(leaf('customer.counters.a.b', 'gt', 1)), [['conditions.path', /exactly one name/]]],
    ['event.name with a field', cond(leaf('event.name.x', 'eq', 'a')), [['conditions.path', /no fields below/]]],
    ['empty segment', cond(leaf('event.properties..x', 'eq', 1)), [['conditions.path', /empty segment/]]],
    ['gt with a string', cond(leaf('event.properties.total', 'gt', '10')), [['conditions.value', /finite number, got a string/]]],
    ['eq without value', cond(leaf('event.properties.total', 'eq')), [['conditions.value', /needs a value/]]],
    ['eq with an object', cond(leaf('event.properties.total', 'eq', { a: 1 })), [['conditions.value', /got an object/]]],
    ['in with a scalar', cond(leaf('event.properties.x', 'in', 'a')), [['conditions.value', /non-empty array/]]],
    ['in with an empty array', cond(leaf('event.properties.x', 'in', [])), [['conditions.value', /non-empty array.*; got an empty array\.$/]]],
    ['in with an object member', cond(leaf('event.properties.x', 'in', ['a', {}])), [['conditions.value', /item 1/]]],
    ['exists with a string', cond(leaf('event.properties.x', 'exists', 'yes')), [['conditions.value', /optional boolean/]]],
    ['contains with null', cond(leaf('event.properties.x', 'contains', null)), [['conditions.value', /string, number or boolean/]]],
    ['segments with eq', cond(leaf('customer.segments', 'eq', 'vip')), [['conditions.op', /customer\.segments does not support op 'eq'/]]],
    ['segment name not a string', cond(leaf('customer.segments', 'contains', 3)), [['conditions.value', /string; got a number/]]],
    ['counter compared with a string', cond(leaf('customer.counters.n', 'eq', '3')), [['conditions.value', /counter is a number/]]],
    ['counter with contains', cond(leaf('customer.counters.n', 'contains', 3)), [['conditions.op', /does not support op 'contains'/]]],
    ['tier with gt', cond(leaf('customer.tiers.main', 'gt', 1)), [['conditions.op', /tier level does not support op 'gt'/]]],
    ['event.name with gt', cond(leaf('event.name', 'gt', 1)), [['conditions.op', /event\.name does not support/]]],
    ['customer alone as a condition', cond(leaf('customer', 'exists')), [['conditions.path', /limit scope/]]],
    ['unknown field in a leaf', cond(leaf('event.properties.x', 'eq', 1) && { path: 'event.properties.x', op: 'eq', value: 1, note: 'x' }), [['conditions.note', /Unknown field/]]],
    ['not a condition at all', cond({ all: [{ foo: 1 }] }), [['conditions.all[0]', /A condition is \{path, op, value\?\}/]]],
    ['empty all', cond({ all: [] }), [['conditions.all', /at least one condition/]]],
    ['any not an array', cond({ any: leaf('event.properties.x', 'eq', 1) }), [['conditions.any', /array of conditions/]]],
    [
      'mixed group and leaf keys',
      cond({ all: [leaf('event.properties.x', 'eq', 1)], path: 'event.properties.x' }),
      [['conditions.path', /Unknown field/]],
    ],
    [
      'nested problems at depth',
      cond({ all: [{ any: [leaf('event.properties.x', 'eq', 1), { not: leaf('customer.foo', 'eq', 1) }] }] }),
      [['conditions.all[0].any[1].not.path', /Unknown path prefix/]],
    ],
    [
      'too deep',
      cond({ not: { not: { not: { not: { not: { not: { not: { not: { not: leaf('event.properties.x', 'exists') } } } } } } } } }),
      [['conditions', /nest at most 8/]],
    ],
    ['v1 with nested groups', v1({ conditions: { all: [] } }), [['conditions', /service\.rule\/v1.*array.*use service\.rule\/v2/]]],
    ['v1 with trust', v1({ trust: { minimum: 'merchant_asserted' } }), [['trust', /Unknown field/]]],
    ['unknown trust level', v2({ trust: { minimum: 'root' } }), [['trust.minimum', /Unknown trust level "root"; use one of client_reported, merchant_asserted \(lowest first\)/]]],
    ['trust without minimum', v2({ trust: {} }), [['trust.minimum', /^minimum is required; use one of client_reported, merchant_asserted/]]],
    [
      'a trust level no event carries',
      v2({ trust: { minimum: 'service_verified' } }),
      [['trust.minimum', /No event carries trust 'service_verified' \(events are client_reported or merchant_asserted\), so the rule would never fire/]],
    ],
    ['not_in with a string', cond(leaf('event.properties.x', 'not_in', 'a')), [['conditions.value', /non-empty array.*; got a string\.$/]]],
    ['limit max zero', v2({ limits: [{ id: 'a', scope: ['customer'], max: 0 }] }), [['limits[0].max', /positive integer/]]],
    ['limit max fractional', v2({ limits: [{ id: 'a', scope: ['customer'], max: 1.5 }] }), [['limits[0].max', /positive integer/]]],
    ['limit empty scope', v2({ limits: [{ id: 'a', scope: [], max: 1 }] }), [['limits[0].scope', /at least one path/]]],
    ['limit scope on segments', v2({ limits: [{ id: 'a', scope: ['customer.segments'], max: 1 }] }), [['limits[0].scope[0]', /cannot scope a limit/]]],
    [
      'duplicate limit ids',
      v2({ limits: [{ id: 'a', scope: ['customer'], max: 1 }, { id: 'a', scope: ['customer'], max: 2 }] }),
      [['limits[1].id', /Duplicate limit id 'a'/]],
    ],
    ['amount zero', v2({ actions: [{ type: 'points.award', currency: 'points', amount: 0 }] }), [['actions[0].amount', /positive integer/]]],
    ['amount negative', v2({ actions: [{ type: 'points.award', currency: 'points', amount: -5 }] }), [['actions[0].amount', /positive integer/]]],
    ['amount fractional', v2({ actions: [{ type: 'points.award', currency: 'points', amount: 1.5 }] }), [['actions[0].amount', /positive integer/]]],
    ['amount unsafe', v2({ actions: [{ type: 'points.award', currency: 'points', amount: 2 ** 60 }] }), [['actions[0].amount', /positive integer/]]],
    ['amount as a string', v2({ actions: [{ type: 'points.award', currency: 'points', amount: '5' }] }), [['actions[0].amount', /positive integer/]]],
    ['no amount', v2({ actions: [{ type: 'points.award', currency: 'points' }] }), [['actions[0].amount', /needs amount.*or amount_from/]]],
    [
      'amount and amount_from',
      v2({ actions: [{ type: 'points.award', currency: 'points', amount: 1, amount_from: 'event.properties.total' }] }),
      [['actions[0].amount_from', /not both/]],
    ],
    [
      'amount_from a non-numeric path',
      v2({ actions: [{ type: 'points.award', currency: 'points', amount_from: 'event.name' }] }),
      [['actions[0].amount_from', /not numeric/]],
    ],
    [
      'multiplier without amount_from',
      v2({ actions: [{ type: 'points.award', currency: 'points', amount: 1, multiplier: 2 }] }),
      [['actions[0].multiplier', /only with amount_from/]],
    ],
    [
      'multiplier negative',
      v2({ actions: [{ type: 'points.award', currency: 'points', amount_from: 'event.properties.total', multiplier: -1 }] }),
      [['actions[0].multiplier', /positive finite/]],
    ],
    ['unknown action type', v2({ actions: [{ type: 'points.burn' }] }), [['actions[0].type', /Unknown action type "points\.burn"/]]],
    ['action without type', v2({ actions: [{ currency: 'points' }] }), [['actions[0].type', /action type is required/]]],
    ['item.grant without quantity', v2({ actions: [{ type: 'item.grant', item: 'x' }] }), [['actions[0].quantity', /positive integer/]]],
    ['reward.issue without id', v2({ actions: [{ type: 'reward.issue' }] }), [['actions[0].reward_id', /reward_id.*required/]]],
    ['challenge.progress extra field', v2({ actions: [{ type: 'challenge.progress', challenge_id: 'c', n: 2 }] }), [['actions[0].n', /Unknown field/]]],
  ];
  for (const [name, doc, expected] of table) {
    const r = validateRule(doc);
    if (r.ok) {
      t.fail(`${name}: accepted`);
      continue;
    }
    t.same(
      r.problems.map((p) => p.path),
      expected.map(([p]) => p),
      `${name}: problem paths`,
    );
    for (const [i, [, re]] of expected.entries()) t.match(r.problems[i]?.message ?? '', re, `${name}: message`);
  }
});

t.test('every problem of one document is reported, not only the first', async (t) => {
  const r = validateRule(
    v2({
      trust: { minimum: 'nobody' },
      conditions: {
        all: [leaf('event.properties.total', 'gt', 'ten'), leaf('order.id', 'eq', 1), { any: [leaf('customer.segments', 'eq', 'vip')] }],
      },
      actions: [
        { type: 'points.award', currency: 'points', amount: -1 },
        { type: 'nope' },
      ],
    }),
  );
  t.equal(r.ok, false);
  if (r.ok) return;
  t.same(r.problems.map((p) => p.path).sort(), [
    'actions[0].amount',
    'actions[1].type',
    'conditions.all[0].value',
    'conditions.all[1].path',
    'conditions.all[2].any[0].op',
    'trust.minimum',
  ]);
});
