// Per-customer limit keys stay small and keep counting across the change that bounded them:
// given counts written before long scope values were hashed (a journal fact or a snapshot of the
// old code, whose key holds the whole value), when an event with the same value is stepped, then
// the limit is still reached, and the state holds the short key only. New firings write the short
// key (at most 57 characters for a long value's part).
import t from 'tap';
import { decodeSnapshot, encodeSnapshot } from '../../src/actors/codec.js';
import { type Command, type CustomerState, type Ctx, decide, evolve, type Fact } from '../../src/domain/customer.js';
import type { RulesContext } from '../../src/domain/rule-effects.js';
import { compileRule } from '../../src/domain/rules/compile.js';
import { validateRule } from '../../src/domain/rules/schema.js';
import { eventId } from '../../src/domain/seen-events.js';

function ctxAt(nowMs: number): Ctx {
  let n = 0;
  return {
    nowMs,
    environmentId: 'env_1',
    newId: (prefix) => `${prefix}_${nowMs}_${++n}`,
    newCustomerId: () => `cust_000${String(++n).padStart(26, '0')}`,
    newEventId: () => eventId(nowMs, ++n),
  };
}

function given(facts: Fact[]): CustomerState {
  let s: CustomerState | null = null;
  for (const f of facts) s = evolve(s, f);
  return s!;
}

const v = validateRule({
  schema: 'service.rule/v2',
  trigger: { kind: 'customer_event', event: 'order.completed' },
  limits: [{ id: 'once_per_order', scope: ['customer', 'event.properties.order_id'], max: 1 }],
  actions: [{ type: 'points.award', currency: 'coins', amount: 5 }],
});
if (!v.ok) throw new Error(JSON.stringify(v.problems));
const rules: RulesContext = {
  plans: [compileRule(v.definition, { ruleId: 'rule_1', versionNumber: 1, priority: 0 })],
  currencies: [{ key: 'coins', negativeBalance: 'forbid', expiryDays: null }],
  tierPrograms: [],
};

const longOrder = `order|${'7'.repeat(20_000)}`;
/** The key the code before hashing wrote: the whole value, '|' escaped. */
const oldKey = `rule_1|once_per_order|customer|s:${longOrder.replace('|', '\\|')}`;
const created: Fact = { kind: 'customer.created', id: 'cust_A', environmentId: 'env_1', externalId: 'u1', attributes: {}, atMs: 1 };

let n = 0;
function order(state: CustomerState, orderId: string, nowMs: number) {
  const cmd: Command = {
    kind: 'event.record',
    externalId: 'u1',
    clientEventId: `e${++n}`,
    name: 'order.completed',
    occurredAtMs: nowMs,
    properties: { order_id: orderId },
    fp: n,
    trust: 'merchant_asserted',
    source: { type: 'secret_key', id: 'key_test' },
    rules,
  };
  const d = decide(state, cmd, ctxAt(nowMs));
  if (!d.ok) throw new Error(d.code);
  let s = state;
  for (const f of d.facts) s = evolve(s, f);
  const effects = (d.reply as { effects?: Array<{ type: string; reason?: string }> }).effects ?? [];
  return { state: s, effects, facts: d.facts };
}

const maxKeyChars = (s: CustomerState) => Math.max(...Object.keys(s.ruleLimits).map((k) => k.length));

t.test('given an old journal fact with the whole value, when the same order comes again, then limit_reached; the state keeps the short key', async (t) => {
  const replayed = given([created, { kind: 'rule.fired', ruleId: 'rule_1', versionNumber: 1, limitKeys: [oldKey], atMs: 2 }]);
  t.equal(Object.keys(replayed.ruleLimits).length, 1);
  t.ok(maxKeyChars(replayed) < 120, `the replayed key is short (${maxKeyChars(replayed)} characters)`);
  const again = order(replayed, longOrder, 10);
  t.match(again.effects, [{ type: 'rule.skipped', reason: 'limit_reached' }]);
  t.match(order(replayed, `${longOrder}8`, 11).effects, [{ type: 'rule.fired' }], 'another long order still fires');
});

t.test('given an old snapshot with the whole value, when it is decoded and the order comes again, then limit_reached', async (t) => {
  const old = given([created]);
  old.ruleLimits = { [oldKey]: 1, 'rule_1|other|customer': 2 };
  const decoded = decodeSnapshot(encodeSnapshot(old));
  t.equal(decoded.ruleLimits['rule_1|other|customer'], 2, 'short keys are kept as they are');
  t.notOk(oldKey in decoded.ruleLimits, 'the long key is gone');
  t.ok(maxKeyChars(decoded) < 120);
  t.match(order(decoded, longOrder, 10).effects, [{ type: 'rule.skipped', reason: 'limit_reached' }]);
  const plain = given([created]);
  plain.ruleLimits = { 'rule_1|other|customer': 2 };
  const same = decodeSnapshot(encodeSnapshot(plain));
  t.same(same.ruleLimits, { 'rule_1|other|customer': 2 });
});

t.test("given an old merge fact with the whole value, the survivor's limit still holds", async (t) => {
  const s = given([created, { kind: 'rule.limits_merged', from: 'cust_B', counts: { [oldKey]: 1 }, atMs: 2 } as Fact]);
  t.ok(maxKeyChars(s) < 120);
  t.match(order(s, longOrder, 10).effects, [{ type: 'rule.skipped', reason: 'limit_reached' }]);
});

t.test('when a long order id fires now, then the journaled key is bounded and counts the next time', async (t) => {
  const first = order(given([created]), longOrder, 10);
  t.match(first.effects, [{ type: 'rule.fired' }, { type: 'points.awarded' }]);
  const fired = first.facts.find((f) => f.kind === 'rule.fired') as { limitKeys: string[] };
  t.equal(fired.limitKeys.length, 1);
  t.match(fired.limitKeys[0], /^rule_1\|once_per_order\|customer\|h:[0-9a-z]{22}:order\\\|7{10}$/);
  t.ok(fired.limitKeys[0]!.length <= 'rule_1|once_per_order|customer|'.length + 57);
  t.match(order(first.state, longOrder, 11).effects, [{ type: 'rule.skipped', reason: 'limit_reached' }]);
  // The journal of new code replays to the same state.
  const replayed = given([created, ...first.facts]);
  t.same(replayed.ruleLimits, first.state.ruleLimits);
});
