// Given/when/then tests of the pure customer mechanic.
import t from 'tap';
import { type Command, type CustomerState, type Ctx, decide, evolve, type Fact, mergeFacts, mergeHandover } from '../../src/domain/customer.js';
import { balanceOf } from '../../src/domain/ledger.js';
import { eventId, recordCount, recordedEvents } from '../../src/domain/seen-events.js';
import { hash53 } from '../../src/util/canonical-json.js';

function ctxAt(nowMs: number): Ctx {
  let n = 0;
  return {
    nowMs,
    environmentId: 'env_1',
    newId: (prefix) => `${prefix}_${++n}`,
    newCustomerId: () => `cust_000${String(++n).padStart(26, '0')}`,
    newEventId: () => eventId(nowMs, ++n),
  };
}

function given(facts: Fact[]): CustomerState | null {
  let s: CustomerState | null = null;
  for (const f of facts) s = evolve(s, f);
  return s;
}

function when(state: CustomerState | null, cmd: Command, nowMs = 1000) {
  const d = decide(state, cmd, ctxAt(nowMs));
  if (d.ok) for (const f of d.facts) state = evolve(state, f);
  return { d, state };
}

const created: Fact = { kind: 'customer.created', id: 'cust_A', environmentId: 'env_1', externalId: 'u1', attributes: {}, atMs: 1 };
const ev = (id: string, fp: number): Command => ({
  kind: 'event.record',
  externalId: 'u1',
  clientEventId: id,
  name: 'level.completed',
  occurredAtMs: 500,
  properties: { level: 3 },
  fp,
  trust: 'merchant_asserted', source: { type: 'secret_key', id: 'key_test' },
  rules: null,
});

t.test('an event for an unknown customer creates it on first sight', async (t) => {
  const { d, state } = when(null, ev('e1', 7));
  t.ok(d.ok);
  if (!d.ok) return;
  t.same(d.facts.map((f) => f.kind), ['customer.created', 'event.recorded']);
  t.equal(state?.externalId, 'u1');
  t.equal(state?.events.get('e1')?.fp, 7);
});

t.test('the same event id with the same content is a duplicate answered with the first id', async (t) => {
  const first = when(given([created]), ev('e1', 7));
  const second = when(first.state, ev('e1', 7));
  t.ok(first.d.ok && second.d.ok);
  if (!first.d.ok || !second.d.ok) return;
  t.same(second.d.facts, [], 'nothing recorded twice');
  t.match(second.d.reply, { kind: 'event', duplicate: true, id: (first.d.reply as { id: string }).id });
});

t.test('a sync event keeps its answer: a repeat replays its effects, across a snapshot, for the last 64 sync events', async (t) => {
  const { decodeSnapshot, encodeSnapshot } = await import('../../src/actors/codec.js');
  const sync = (id: string): Command => ({ ...(ev(id, 7) as Command & { kind: 'event.record' }), sync: true });
  const first = when(given([created]), sync('s1'));
  t.ok(first.d.ok);
  if (!first.d.ok) return;
  t.same(
    first.d.facts.map((f) => f.kind),
    ['event.recorded', 'event.answered'],
  );
  // No rules here: the answer is the empty effect list, and it still says "evaluated".
  const again = when(first.state, sync('s1'));
  t.match(again.d, { ok: true, facts: [], reply: { duplicate: true, evaluated: true, effects: [] } });
  const async1 = when(first.state, ev('a1', 7));
  t.same(async1.d.ok && async1.d.facts.map((f) => f.kind), ['event.recorded'], 'an async event keeps no answer');
  t.match(when(async1.state, sync('a1')).d, { ok: true, reply: { duplicate: true, evaluated: false, effects: [] } }, 'its repeat answers as it did');
  let state = async1.state!;
  const copy = decodeSnapshot(encodeSnapshot(state));
  t.match(when(copy, ev('s1', 7)).d, { ok: true, reply: { evaluated: true } }, 'kept across a snapshot');
  for (let i = 0; i < 64; i++) state = when(state, sync(`s-more-${i}`)).state!;
  t.equal(state.recentAnswers.length, 64, 'bounded');
  t.match(when(state, sync('s1')).d, { ok: true, reply: { duplicate: true, evaluated: false } }, 'the oldest answer went first');
  t.match(when(state, sync('s-more-63')).d, { ok: true, reply: { duplicate: true, evaluated: true } });
});

t.test('the same event id with different content is event_id_conflict', async (t) => {
  const first = when(given([created]), ev('e1', 7));
  const second = when(first.state, ev('e1', 8));
  t.match(second.d, { ok: false, code: 'event_id_conflict' });
});

t.test('update merges attributes, null removes, version increases; a stale expected version is refused', async (t) => {
  const s = given([{ ...created, attributes: { a: 1, b: 2 } } as Fact]);
  const r = when(s, { kind: 'customer.update', attributes: { b: null, c: 3 }, expectedVersion: 1 });
  t.same(r.state?.attributes, { a: 1, c: 3 });
  t.equal(r.state?.version, 2);
  const stale = when(r.state, { kind: 'customer.update', attributes: { d: 1 }, expectedVersion: 1 });
  t.match(stale.d, { ok: false, code: 'stale_write' });
});

t.test('an update that changes nothing records nothing and keeps the version', async (t) => {
  const s = given([{ ...created, attributes: { a: 1, o: { x: [1, 2] } } } as Fact]);
  for (const attributes of [{}, { a: 1 }, { gone: null }, { o: { x: [1, 2] } }]) {
    const r = when(s, { kind: 'customer.update', attributes, expectedVersion: null });
    t.match(r.d, { ok: true, facts: [] }, JSON.stringify(attributes));
    t.equal(r.state?.version, 1);
  }
  const ordered = given([{ ...created, attributes: { o: { a: 1, b: 2 } } } as Fact]);
  t.match(when(ordered, { kind: 'customer.update', attributes: { o: { b: 2, a: 1 } }, expectedVersion: null }).d, { ok: true, facts: [] }, 'the same object, keys in another order');
  t.equal(when(s, { kind: 'customer.update', attributes: { a: 2 }, expectedVersion: null }).state?.version, 2, 'a change still counts');
  t.match(when(s, { kind: 'customer.update', attributes: {}, expectedVersion: 7 }).d, { ok: false, code: 'stale_write' }, 'and a stale version is still refused');
});

t.test('create on an existing customer is already_exists', async (t) => {
  t.match(when(given([created]), { kind: 'customer.create', externalId: 'u1', attributes: {} }).d, {
    ok: false,
    code: 'already_exists',
  });
});

t.test('delete erases personal data and then the customer answers not found', async (t) => {
  const s = given([{ ...created, attributes: { email: 'x@y.z' } } as Fact]);
  const r = when(s, { kind: 'customer.delete', eventsErased: 0 });
  t.equal(r.state?.externalId, null);
  t.same(r.state?.attributes, {});
  t.ok(r.state?.deletedAtMs);
  t.match(when(r.state, { kind: 'customer.get' }).d, { ok: false, code: 'resource_not_found' });
  t.match(when(r.state, ev('e9', 1)).d, { ok: false, code: 'resource_not_found' });
});

t.test('delete answers the recorded events not yet erased in the register, and deletes once they all are', async (t) => {
  const e1 = when(given([created]), ev('e1', 7));
  const e2 = when(e1.state, ev('e2', 8));
  const ids = [e1, e2].map((r) => (r.d.ok && r.d.reply.kind === 'event' ? r.d.reply.id : ''));
  const first = when(e2.state, { kind: 'customer.delete', eventsErased: 0 });
  t.match(first.d, { ok: true, facts: [], reply: { kind: 'events_to_erase' } });
  const records = first.d.ok && first.d.reply.kind === 'events_to_erase' ? first.d.reply.records : [];
  t.same(recordedEvents(records, 0, recordCount(records)), [
    { idHash: hash53('e1'), fp: 7, eventId: ids[0] },
    { idHash: hash53('e2'), fp: 8, eventId: ids[1] },
  ]);
  t.equal(first.state?.deletedAtMs, null, 'not deleted yet');
  const e3 = when(first.state, ev('e3', 9));
  const second = when(e3.state, { kind: 'customer.delete', eventsErased: 2 });
  const rest = second.d.ok && second.d.reply.kind === 'events_to_erase' ? second.d.reply.records : [];
  t.same(recordedEvents(rest, 0, recordCount(rest)).map((r) => r.fp), [9], 'only the event recorded since');
  const third = when(second.state, { kind: 'customer.delete', eventsErased: 3 });
  t.match(third.d, { ok: true, facts: [{ kind: 'customer.deleted' }], reply: { kind: 'deleted' } });
  t.ok(third.state?.deletedAtMs);
});

t.test('replaying the facts rebuilds the identical state', async (t) => {
  const facts: Fact[] = [created];
  let s = given(facts);
  for (const cmd of [ev('e1', 1), ev('e2', 2), { kind: 'customer.update', attributes: { x: 1 }, expectedVersion: null } as Command]) {
    const d = decide(s, cmd, ctxAt(2000));
    if (!d.ok) continue;
    for (const f of d.facts) {
      facts.push(f);
      s = evolve(s, f);
    }
  }
  t.same(given(facts), s);
});

t.test('a merged customer hands over again only to its survivor, recording nothing', async (t) => {
  const merged = when(given([created]), ev('e1', 7)).state;
  const s = evolve(merged, { kind: 'customer.merged', into: 'cust_S', atMs: 2 });
  const again = when(s, { kind: 'customer.handover', survivorId: 'cust_S' });
  t.ok(again.d.ok);
  if (!again.d.ok) return;
  t.same(again.d.facts, [], 'no facts');
  t.match(again.d.reply, { kind: 'handover', seenEvents: s.events.records() }, "its recorded event ids, for the survivor's dedup");
  const other = when(s, { kind: 'customer.handover', survivorId: 'cust_X' });
  t.match(other.d, { ok: false, code: 'invalid_state' }, 'not merged into that customer');
  const notMerged = when(given([created]), { kind: 'customer.handover', survivorId: 'cust_S' });
  t.match(notMerged.d, { ok: false, code: 'invalid_state' }, 'a customer merged into nobody hands over nothing');
});

t.test("erasing a merged customer answers its recorded events first (a merge whose alias step never ran left them out of the survivor's)", async (t) => {
  const merged = when(given([created]), ev('e1', 7)).state;
  const s = evolve(merged, { kind: 'customer.merged', into: 'cust_S', atMs: 2 });
  const first = when(s, { kind: 'customer.erase_merged', survivorId: 'cust_S', eventsErased: 0 });
  t.match(first.d, { ok: true, facts: [], reply: { kind: 'events_to_erase' } });
  const records = first.d.ok && first.d.reply.kind === 'events_to_erase' ? first.d.reply.records : [];
  t.same(recordedEvents(records, 0, recordCount(records)).map((r) => [r.idHash, r.fp]), [[hash53('e1'), 7]]);
  t.equal(first.state?.deletedAtMs, null, 'not erased yet');
  const done = when(first.state, { kind: 'customer.erase_merged', survivorId: 'cust_S', eventsErased: 1 });
  t.match(done.d, { ok: true, facts: [{ kind: 'customer.deleted' }], reply: { kind: 'erased' } });
  const other = evolve(when(given([created]), ev('e1', 7)).state, { kind: 'customer.merged', into: 'cust_S', atMs: 2 });
  t.match(when(other, { kind: 'customer.erase_merged', survivorId: 'cust_X', eventsErased: 1 }).d, { ok: false, code: 'invalid_state' }, 'only for its survivor');
});

t.test('a merge hands the ledger over once: the merged customer keeps nothing, the survivor takes it, a snapshot keeps what was handed over', async (t) => {
  const { decodeSnapshot, encodeSnapshot } = await import('../../src/actors/codec.js');
  const coins = [{ key: 'coins', negativeBalance: 'forbid' as const, expiryDays: null }];
  const award = (amount: number): Command => ({
    kind: 'ledger.run',
    currencies: coins,
    tierPrograms: [],
    command: { kind: 'ledger.award', currency: 'coins', amount, reason: null, sourceType: null, sourceId: null },
  });
  const m = when(given([created]), award(40)).state!;
  const survivorCreated: Fact = { ...created, id: 'cust_S', externalId: 'u2' } as Fact;
  const sv = when(given([survivorCreated]), award(5)).state!;

  // The merged side: merged, then a transfer debit of its lot; the fact carries what moved.
  const facts = mergeFacts(m, 'cust_S', ctxAt(2000));
  t.same(facts.map((f) => (f.kind === 'ledger.entry_recorded' ? `${f.kind}:${f.entry.type}:${f.entry.amount}` : f.kind)), ['customer.merged', 'ledger.entry_recorded:transfer:-40']);
  let merged: CustomerState = m;
  for (const f of facts) merged = evolve(merged, f);
  t.equal(balanceOf(merged.ledger, 'coins').available, 0, 'the merged customer holds nothing');
  const handover = mergeHandover(decodeSnapshot(encodeSnapshot(merged)));
  t.match(handover.ledger, [{ currency: 'coins', lots: [{ remaining: 40 }], lifetimeEarned: 40 }], 'kept across a snapshot for a repeat');

  // The survivor takes it over once.
  const add = (): Command => ({ kind: 'alias.add', alias: 'u1', aliasKind: 'anonymous', mergedFrom: 'cust_A', ledger: handover.ledger, tierPrograms: [] });
  const first = when(sv, add(), 3000);
  t.equal(balanceOf(first.state!.ledger, 'coins').available, 45);
  t.equal(balanceOf(first.state!.ledger, 'coins').lifetimeEarned, 45);
  const again = when(first.state, add(), 4000);
  t.same(again.d.ok && again.d.facts, [], 'a repeat of the alias addition moves nothing again');
  t.equal(balanceOf(again.state!.ledger, 'coins').available, 45);
  // Another alias naming the same merged customer (not a repeat of this alias) takes nothing again either.
  const other = when(first.state, { ...(add() as Command & { kind: 'alias.add' }), alias: 'u1-device' }, 5000);
  t.same(other.d.ok && other.d.facts.map((f) => f.kind), ['alias.added'], 'a customer already merged in is not taken over twice');
  t.equal(balanceOf(other.state!.ledger, 'coins').available, 45);
});

t.test("a merge adds the merged customer's counters, items and rule limit counts to the survivor's, once", async (t) => {
  const m = given([
    created,
    { kind: 'counter.counted', eventId: 'evt_1', bumps: [{ id: 'ctr_l', w: 'l' }] },
    { kind: 'counter.counted', eventId: 'evt_2', bumps: [{ id: 'ctr_l', w: 'l' }] },
    { kind: 'item.granted', item: 'sword', quantity: 2, sourceId: 'rule_1', atMs: 1 },
    { kind: 'rule.fired', ruleId: 'rule_1', versionNumber: 1, limitKeys: ['rule_1|once|customer'], atMs: 1 },
  ])!;
  const survivorCreated: Fact = { ...created, id: 'cust_S', externalId: 'u2' } as Fact;
  const sv = given([
    survivorCreated,
    { kind: 'counter.counted', eventId: 'evt_3', bumps: [{ id: 'ctr_l', w: 'l' }] },
    { kind: 'item.granted', item: 'sword', quantity: 1, sourceId: 'rule_1', atMs: 1 },
  ])!;
  let merged: CustomerState = m;
  for (const f of mergeFacts(m, 'cust_S', ctxAt(2000))) merged = evolve(merged, f);
  t.same({ ...merged.inventory }, {}, 'the merged customer holds no items');
  const h = mergeHandover(merged);
  const add = (): Command => ({ kind: 'alias.add', alias: 'u1', aliasKind: 'anonymous', mergedFrom: 'cust_A', ...h, tierPrograms: [] });
  const first = when(sv, add(), 3000);
  t.equal(first.state!.counters.ctr_l?.n, 3, 'lifetime counts add');
  t.same({ ...first.state!.inventory }, { sword: 3 }, 'items add');
  t.same(first.state!.ruleLimits, { 'rule_1|once|customer': 1 }, "its rule limit counts hold for the survivor (a once-per-customer rule stays spent)");
  const again = when(first.state, add(), 4000);
  t.same(again.d.ok && again.d.facts, [], 'nothing added twice');
  const other = when(first.state, { ...(add() as Command & { kind: 'alias.add' }), alias: 'u1-device' }, 5000);
  t.same(other.d.ok && other.d.facts.map((f) => f.kind), ['alias.added'], 'nor under another alias');
  t.equal(other.state!.counters.ctr_l?.n, 3);
});

t.test('a delete begins under its If-Match, in one step; once begun, its repeat is not checked again', async (t) => {
  const s = given([{ ...created, attributes: { email: 'x@y.z' } } as Fact]);
  t.match(when(s, { kind: 'customer.delete_begin', expectedVersion: 2 }).d, { ok: false, code: 'stale_write', currentVersion: 1 }, 'another version: refused, nothing recorded');
  const begun = when(s, { kind: 'customer.delete_begin', expectedVersion: 1 });
  t.match(begun.d, { ok: true, facts: [{ kind: 'customer.deletion_begun', atMs: 1000 }], reply: { kind: 'deletion_begun', mergedFrom: [] } });
  t.equal(begun.state?.version, 1, 'the version stays');
  t.equal(begun.state?.deletedAtMs, null, 'nothing erased yet');
  const patched = when(begun.state, { kind: 'customer.update', attributes: { level: 2 }, expectedVersion: null });
  t.equal(patched.state?.version, 2);
  t.match(when(patched.state, { kind: 'customer.delete_begin', expectedVersion: 1 }).d, { ok: true, facts: [], reply: { kind: 'deletion_begun' } }, 'a repeat with the first If-Match finishes it');
  const { decodeSnapshot, encodeSnapshot } = await import('../../src/actors/codec.js');
  t.equal(decodeSnapshot(encodeSnapshot(patched.state!)).deletingSinceMs, 1000, 'the mark is kept in a snapshot');
  t.notOk('deletingSinceMs' in decodeSnapshot(encodeSnapshot(given([created])!)), 'and absent where no delete began');
});

t.test("the delete's answer names what the customer held: its aliases (to release) and the customers merged into it", async (t) => {
  const s = given([
    created,
    { kind: 'alias.added', alias: 'u1-device', aliasKind: 'anonymous', mergedFrom: null, atMs: 2 },
    { kind: 'alias.added', alias: 'u9', aliasKind: 'anonymous', mergedFrom: 'cust_M', atMs: 3 },
  ]);
  t.match(when(s, { kind: 'customer.delete', eventsErased: 0 }).d, {
    ok: true,
    facts: [{ kind: 'customer.deleted' }],
    reply: { kind: 'deleted', mergedFrom: ['cust_M'], aliases: ['u1-device', 'u9'] },
  });
});

t.test('an erased merged customer still answers its survivor (a repeated delete, the export), and nobody else', async (t) => {
  const merged = evolve(when(given([{ ...created, attributes: { email: 'x@y.z' } } as Fact]), ev('e1', 7)).state, { kind: 'customer.merged', into: 'cust_S', atMs: 2 });
  const erased = when(merged, { kind: 'customer.erase_merged', survivorId: 'cust_S', eventsErased: 1 }).state;
  t.ok(erased?.deletedAtMs);
  t.match(when(erased, { kind: 'customer.erase_merged', survivorId: 'cust_S', eventsErased: 0 }).d, { ok: true, facts: [], reply: { kind: 'erased', aliases: [] } }, 'erased once');
  t.match(when(erased, { kind: 'customer.merged_from', survivorId: 'cust_S' }).d, { ok: true, facts: [], reply: { kind: 'merged_from', attributes: {}, aliases: [] } });
  t.match(when(erased, { kind: 'customer.merged_from', survivorId: 'cust_X' }).d, { ok: false, code: 'resource_not_found' }, 'another survivor');
  t.match(when(erased, ev('e2', 1)).d, { ok: false, code: 'resource_not_found' }, 'anything else');
});

t.test(`a customer's attributes are at most ${32 * 1024} bytes as JSON; a patch that shrinks them is accepted`, async (t) => {
  const { limits } = await import('../../src/limits.js');
  const { attributesBytes } = await import('../../src/domain/customer.js');
  t.equal(attributesBytes({ a: 'é€😀' }), Buffer.byteLength(JSON.stringify({ a: 'é€😀' })), 'UTF-8 bytes of the JSON text');
  const text = (bytes: number) => 'x'.repeat(bytes - '{"big":""}'.length);
  const create = (attributes: Record<string, unknown>): Command => ({ kind: 'customer.create', externalId: 'u1', attributes });
  t.match(when(null, create({ big: text(limits.attributesBytesMax) })).d, { ok: true }, 'exactly the bound');
  t.match(when(null, create({ big: `${text(limits.attributesBytesMax)}x` })).d, { ok: false, code: 'validation_failed', param: 'attributes' }, 'a byte more');
  const s = given([{ ...created, attributes: { big: text(limits.attributesBytesMax - 100) } } as Fact]);
  const patch = (attributes: Record<string, unknown>): Command => ({ kind: 'customer.update', attributes, expectedVersion: null });
  t.match(when(s, patch({ more: 'y'.repeat(100) })).d, { ok: false, code: 'validation_failed', param: 'attributes' }, 'a patch taking them past the bound');
  // A customer stored before the bound existed can still be trimmed.
  const old = given([{ ...created, attributes: { a: text(limits.attributesBytesMax), b: 'y'.repeat(5000) } } as Fact]);
  t.match(when(old, patch({ b: null })).d, { ok: true, facts: [{ kind: 'customer.updated' }] }, 'a patch that shrinks them');
  t.match(when(old, patch({ c: 1 })).d, { ok: false, code: 'validation_failed' }, 'but not one that grows them');
});
