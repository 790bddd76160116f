// Segments, given/when/then: dynamic conditions validated and evaluated by the rule language
// (attributes only), static membership facts (idempotent, replayable), the names a customer is
// in, and the segment names a rule definition references.
import t from 'tap';
import {
  compileSegmentCondition,
  decideMembership,
  evolveMembership,
  matchesDynamic,
  type SegmentDef,
  segmentNames,
  segmentsReferenced,
  validateSegmentCondition,
} from '../../src/domain/segments.js';

function dynamic(id: string, name: string, condition: unknown): SegmentDef {
  const v = validateSegmentCondition(condition);
  if (!v.ok) throw new Error(JSON.stringify(v.problems));
  return { id, name, kind: 'dynamic', plan: compileSegmentCondition(id, v.condition) };
}

t.test('dynamic conditions: the rule language over customer.attributes only', async (t) => {
  t.match(validateSegmentCondition({ path: 'customer.attributes.spend', op: 'gte', value: 100 }), { ok: true });
  t.match(validateSegmentCondition({ any: [{ path: 'customer.attributes.country', op: 'in', value: ['DE', 'FR'] }, { not: { path: 'customer.attributes.churned', op: 'exists' } }] }), { ok: true });
  t.match(validateSegmentCondition(null), { ok: false, problems: [{ path: 'condition' }] });
  t.match(validateSegmentCondition({ all: [{ path: 'customer.attributes.a', op: 'eq', value: 1 }, { path: 'event.properties.b', op: 'eq', value: 1 }] }), {
    ok: false,
    problems: [{ path: 'condition.all[1].path', message: /customer\.attributes/ }],
  });
  t.match(validateSegmentCondition({ path: 'customer.segments', op: 'contains', value: 'vip' }), { ok: false, problems: [{ path: 'condition.path' }] }, 'no segments of segments');
  t.match(validateSegmentCondition({ path: 'customer.attributes.a', op: 'nope', value: 1 }), { ok: false, problems: [{ path: /^condition/ }] });
});

t.test('given a dynamic segment, when attributes change, then membership follows them', async (t) => {
  const whales = dynamic('seg_1', 'whales', { all: [{ path: 'customer.attributes.spend', op: 'gte', value: 1000 }, { path: 'customer.attributes.country', op: 'eq', value: 'DE' }] });
  t.equal(matchesDynamic(whales.plan!, { spend: 1500, country: 'DE' }), true);
  t.equal(matchesDynamic(whales.plan!, { spend: 999, country: 'DE' }), false);
  t.equal(matchesDynamic(whales.plan!, { spend: '1500', country: 'DE' }), false, 'type mismatch is no match');
  t.equal(matchesDynamic(whales.plan!, {}), false, 'absent attributes are no match');
});

t.test('given static and dynamic segments, the customer is in static ones by id and dynamic ones by condition', async (t) => {
  const defs: SegmentDef[] = [
    { id: 'seg_a', name: 'beta', kind: 'static', plan: null },
    dynamic('seg_b', 'gold', { path: 'customer.attributes.tier', op: 'eq', value: 'gold' }),
    { id: 'seg_c', name: 'vip', kind: 'static', plan: null },
  ];
  t.same(segmentNames(defs, ['seg_c'], { tier: 'gold' }), ['gold', 'vip']);
  t.same(segmentNames(defs, ['seg_deleted'], {}), [], "a deleted segment's leftover membership is ignored");
  t.same(segmentNames(defs, ['seg_b'], {}), [], 'a dynamic segment has no explicit members');
});

t.test('membership: facts only when something changes; replay rebuilds the list', async (t) => {
  const ctx = { nowMs: 1000 };
  const added = decideMembership([], { kind: 'segment.add_member', segmentId: 'seg_1' }, ctx);
  t.same(added, [{ kind: 'segment.member_added', segmentId: 'seg_1', atMs: 1000 }]);
  t.same(decideMembership(['seg_1'], { kind: 'segment.add_member', segmentId: 'seg_1' }, ctx), [], 'adding twice: no fact');
  t.same(decideMembership([], { kind: 'segment.remove_member', segmentId: 'seg_1' }, ctx), [], 'removing a non-member: no fact');
  let state: string[] = [];
  for (const f of [...added, { kind: 'segment.member_added' as const, segmentId: 'seg_2', atMs: 2 }, { kind: 'segment.member_removed' as const, segmentId: 'seg_1', atMs: 3 }]) {
    state = evolveMembership(state, f);
  }
  t.same(state, ['seg_2']);
});

t.test('segment names a rule references (customer.segments contains, at any depth)', async (t) => {
  const def = {
    schema: 'service.rule/v2',
    conditions: {
      all: [
        { path: 'customer.segments', op: 'contains', value: 'vip' },
        { any: [{ not: { path: 'customer.segments', op: 'contains', value: 'banned' } }, { path: 'customer.attributes.vip', op: 'eq', value: 'whales' }] },
      ],
    },
  };
  t.same(segmentsReferenced(def).sort(), ['banned', 'vip']);
  t.same(segmentsReferenced({ schema: 'service.rule/v1', conditions: [{ path: 'customer.segments', op: 'contains', value: 'x' }] }), ['x']);
  t.same(segmentsReferenced(null), []);
});
