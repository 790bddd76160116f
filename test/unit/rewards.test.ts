// Given/when/then tests of the pure reward issuance mechanic through the customer actor's
// decide/evolve: issue under a reserved id, redeem spends the price in the same facts (earliest
// expiry first), insufficient_balance keeps it issued, cancel from issued only, expiry (sweep and
// lapsed), invalid_state from every other state, the reconciler's settle, and the rule path's
// request -> fulfil / refuse. Replaying the facts (evolve only) rebuilds the same state.
import t from 'tap';
import { toView } from '../../src/actors/views.js';
import { type Command, type Ctx, type CustomerState, decide, evolve, type Fact } from '../../src/domain/customer.js';
import type { CurrencyConfig } from '../../src/domain/ledger.js';
import { type Issuance, parseExpiryAfter, type RewardCommand, type RewardTerms, emptyRewards, evolve as evolveRewards, takeOver } from '../../src/domain/rewards.js';

const day = 86_400_000;
const coins: CurrencyConfig = { key: 'coins', negativeBalance: 'forbid', expiryDays: null };
const currencies = [coins];
const mug: RewardTerms = { id: 'rw_mug', cost: 70, currency: 'coins', expiryAfterMs: 10 * day };

let seq = 0;
function ctxAt(nowMs: number): Ctx {
  return {
    nowMs,
    environmentId: 'env_1',
    newId: (prefix) => `${prefix}_${String(++seq).padStart(4, '0')}`,
    newCustomerId: () => 'cust_0001',
    newEventId: () => `evt_${++seq}`,
  };
}

interface World {
  state: CustomerState;
  facts: Fact[];
}

function given(): World {
  const d = decide(null, { kind: 'customer.create', externalId: 'alice', attributes: {} }, ctxAt(0));
  if (!d.ok) throw new Error('create');
  let state: CustomerState | null = null;
  for (const f of d.facts) state = evolve(state, f);
  return { state: state!, facts: [...d.facts] };
}

function when(w: World, cmd: Command, nowMs: number) {
  const before = JSON.stringify(w.state, (_k, v) => (v instanceof Map ? [...v] : v));
  const d = decide(w.state, cmd, ctxAt(nowMs));
  const untouched = JSON.stringify(w.state, (_k, v) => (v instanceof Map ? [...v] : v)) === before;
  if (d.ok) {
    for (const f of d.facts) evolve(w.state, f);
    w.facts.push(...d.facts);
  }
  return { d, untouched };
}

const reward = (command: RewardCommand): Command => ({ kind: 'reward.run', command, tierPrograms: [] });
const issue = (id: string, terms = mug) => reward({ kind: 'reward.issue', issuanceId: id, terms, sourceType: 'api', sourceId: 'key_1' });
const redeem = (id: string) => reward({ kind: 'reward.redeem', issuanceId: id, currencies });
const cancel = (id: string) => reward({ kind: 'reward.cancel', issuanceId: id, reason: 'r' });
const award = (amount: number, expiresAtMs: number | null): Command => ({
  kind: 'ledger.run',
  currencies,
  tierPrograms: [],
  command: { kind: 'ledger.adjust', currency: 'coins', amount, reason: 'test', expiresAtMs },
});

function issuance(w: World, id: string) {
  return w.state.rewards.issuances.find((i) => i.id === id);
}

t.test('issue records the issuance with the reserved id and expires_at from the terms', async (t) => {
  const w = given();
  const r = when(w, issue('rwi_a'), 1000);
  t.ok(r.d.ok);
  t.match(issuance(w, 'rwi_a'), { status: 'issued', rewardId: 'rw_mug', cost: 70, expiresAtMs: 1000 + 10 * day, version: 1, createdAtMs: 1000 });
  const again = when(w, issue('rwi_a'), 2000);
  t.same(again.d.ok && again.d.facts, [], 'a retried issue (same reservation) records nothing');
  t.equal(w.state.rewards.issuances.length, 1);
  when(w, issue('rwi_b', { ...mug, expiryAfterMs: null }), 1000);
  t.equal(issuance(w, 'rwi_b')?.expiresAtMs, null, 'no expiry_after: never expires');
});

t.test('redeem spends the cost in the same facts, earliest expiry first', async (t) => {
  const w = given();
  when(w, award(100, 20 * day), 0);
  when(w, award(50, 5 * day), 0);
  when(w, issue('rwi_a'), 0);
  const r = when(w, redeem('rwi_a'), day);
  if (!r.d.ok) return t.fail(r.d.code);
  t.same(r.d.facts.map((f) => f.kind), ['ledger.entry_recorded', 'reward.redeemed'], 'one record: the spend and the transition');
  const spend = r.d.facts[0]!;
  if (spend.kind !== 'ledger.entry_recorded') return t.fail();
  t.same(spend.entry.allocations.map((a) => a.amount), [50, 20], 'the day-5 lot first, then the day-20 lot');
  t.match(spend.entry, { type: 'spend', amount: -70, sourceType: 'reward_issuance', sourceId: 'rwi_a' });
  t.match(issuance(w, 'rwi_a'), { status: 'redeemed', costEntryId: spend.entry.id, redeemedAtMs: day, version: 2 });
  t.equal(w.state.ledger.books[0]!.lots.reduce((s, l) => s + l.remaining, 0), 80);
});

t.test('redeem with too little balance: insufficient_balance, still issued, nothing recorded', async (t) => {
  const w = given();
  when(w, award(69, null), 0);
  when(w, issue('rwi_a'), 0);
  const r = when(w, redeem('rwi_a'), 1);
  t.same(r.d.ok ? null : r.d.code, 'insufficient_balance');
  t.ok(r.untouched, 'state untouched by a refused decision');
  t.equal(issuance(w, 'rwi_a')?.status, 'issued');
  when(w, award(1, null), 2);
  t.ok(when(w, redeem('rwi_a'), 3).d.ok, 'redeemable once the balance covers it');
});

t.test('redeem in a currency whose negative_balance is allow still needs the whole cost available', async (t) => {
  const gems: CurrencyConfig = { key: 'gems', negativeBalance: 'allow', expiryDays: null };
  const both = [coins, gems];
  const fund = (amount: number): Command => ({
    kind: 'ledger.run',
    currencies: both,
    tierPrograms: [],
    command: { kind: 'ledger.adjust', currency: 'gems', amount, reason: 'test' },
  });
  const redeemGems = (id: string) => reward({ kind: 'reward.redeem', issuanceId: id, currencies: both });
  const w = given();
  when(w, fund(69), 0);
  when(w, issue('rwi_g', { ...mug, currency: 'gems' }), 0);
  const r = when(w, redeemGems('rwi_g'), 1);
  t.match(r.d, { ok: false, code: 'insufficient_balance', param: 'id' });
  t.ok(r.untouched, 'nothing spent, no debt');
  t.equal(issuance(w, 'rwi_g')?.status, 'issued');
  when(w, fund(1), 2);
  const ok = when(w, redeemGems('rwi_g'), 3);
  t.ok(ok.d.ok, 'redeemable once the balance covers it');
  t.match(w.state.ledger.books.find((b) => b.currency === 'gems'), { lots: [], debt: 0 });
});

t.test('a free reward is redeemed without a ledger entry', async (t) => {
  const w = given();
  when(w, issue('rwi_a', { ...mug, cost: 0 }), 0);
  const r = when(w, redeem('rwi_a'), 1);
  t.same(r.d.ok && r.d.facts.map((f) => f.kind), ['reward.redeemed']);
  t.equal(issuance(w, 'rwi_a')?.costEntryId, null);
});

t.test('cancel from issued only; invalid_state from every other state', async (t) => {
  const w = given();
  when(w, award(1000, null), 0);
  for (const id of ['rwi_c', 'rwi_r', 'rwi_x']) when(w, issue(id), 0);
  const c = when(w, cancel('rwi_c'), 5);
  t.ok(c.d.ok);
  t.match(issuance(w, 'rwi_c'), { status: 'cancelled', cancelledAtMs: 5, reason: 'r', costEntryId: null, version: 2 });
  t.same(c.d.ok && c.d.facts.map((f) => f.kind), ['reward.cancelled'], 'nothing was paid while issued: no refund entry');
  when(w, redeem('rwi_r'), 5);
  when(w, reward({ kind: 'reward.expire_due' }), 11 * day);
  t.equal(issuance(w, 'rwi_x')?.status, 'expired');
  const table: Array<[string, string, Command]> = [
    ['cancelled', 'redeem', redeem('rwi_c')],
    ['cancelled', 'cancel', cancel('rwi_c')],
    ['redeemed', 'redeem', redeem('rwi_r')],
    ['redeemed', 'cancel', cancel('rwi_r')],
    ['expired', 'redeem', redeem('rwi_x')],
    ['expired', 'cancel', cancel('rwi_x')],
  ];
  for (const [from, verb, cmd] of table) {
    const r = when(w, cmd, 12 * day);
    t.same(r.d.ok ? 'ok' : r.d.code, 'invalid_state', `${verb} from ${from}: invalid_state`);
    t.ok(r.untouched, `${verb} from ${from}: nothing changed`);
  }
  t.same(when(w, redeem('rwi_none'), 0).d.ok ? 'ok' : 'resource_not_found', 'resource_not_found');
});

t.test('expiry: the sweep expires what is due (no refund); past expires_at before the sweep is invalid_state', async (t) => {
  const w = given();
  when(w, award(1000, null), 0);
  when(w, issue('rwi_a'), 0);
  when(w, issue('rwi_b', { ...mug, expiryAfterMs: 20 * day }), 0);
  const late = when(w, redeem('rwi_a'), 10 * day);
  t.same(late.d.ok ? 'ok' : late.d.code, 'invalid_state', 'at expires_at the issuance can no longer be redeemed');
  const sweep = when(w, reward({ kind: 'reward.expire_due' }), 10 * day);
  t.same(sweep.d.ok && sweep.d.reply, { kind: 'reward', reply: { kind: 'reward.expired', ids: ['rwi_a'] }, customerId: w.state.id });
  t.match(issuance(w, 'rwi_a'), { status: 'expired', version: 2 });
  t.equal(issuance(w, 'rwi_b')?.status, 'issued', 'not due yet');
  t.equal(w.state.ledger.books[0]!.lots[0]!.remaining, 1000, 'no refund, no spend');
  t.same(when(w, reward({ kind: 'reward.expire_due' }), 10 * day).d.ok && [], [], 'a second sweep records nothing');
});

t.test('settle (reconciler): present keeps the unit; an unknown id is voided forever', async (t) => {
  const w = given();
  when(w, issue('rwi_a'), 0);
  const present = when(w, reward({ kind: 'reward.settle', issuanceId: 'rwi_a', terms: mug }), 1);
  t.match(present.d.ok && present.d.reply, { reply: { kind: 'reward.settled', outcome: 'present' } });
  const lost = when(w, reward({ kind: 'reward.settle', issuanceId: 'rwi_lost', terms: mug }), 1);
  t.match(lost.d.ok && lost.d.reply, { reply: { kind: 'reward.settled', outcome: 'voided' } });
  t.same(w.state.rewards.voided, ['rwi_lost']);
  const tooLate = when(w, issue('rwi_lost'), 2);
  t.same(tooLate.d.ok ? 'ok' : tooLate.d.code, 'reward_unavailable', 'a voided id is never issued (its unit went back)');
});

t.test('rule path: a pending request is fulfilled with the reserved unit or refused', async (t) => {
  const w = given();
  const rq: Fact = {
    kind: 'reward.issue_requested',
    issuance: {
      id: 'rwi_p',
      rewardId: 'rw_mug',
      status: 'pending',
      sourceType: 'rule_execution',
      sourceId: 'rule_1',
      cost: null,
      currency: null,
      costEntryId: null,
      expiresAtMs: null,
      redeemedAtMs: null,
      cancelledAtMs: null,
      reason: null,
      version: 1,
      createdAtMs: 0,
    },
  };
  evolve(w.state, rq);
  const q = { ...rq, issuance: { ...rq.issuance, id: 'rwi_q' } };
  evolve(w.state, q);
  t.same(when(w, redeem('rwi_p'), 1).d.ok ? 'ok' : 'resource_not_found', 'resource_not_found', 'a pending request is not an issuance');
  const ok = when(w, reward({ kind: 'reward.fulfil', issuanceId: 'rwi_p', terms: mug, reason: null }), 5);
  t.ok(ok.d.ok);
  t.match(issuance(w, 'rwi_p'), { status: 'issued', sourceType: 'rule_execution', sourceId: 'rule_1', expiresAtMs: 5 + 10 * day, version: 2 });
  const no = when(w, reward({ kind: 'reward.fulfil', issuanceId: 'rwi_q', terms: null, reason: 'reward_unavailable' }), 5);
  t.ok(no.d.ok);
  t.match(issuance(w, 'rwi_q'), { status: 'refused', reason: 'reward_unavailable' });
  const twice = when(w, reward({ kind: 'reward.fulfil', issuanceId: 'rwi_p', terms: mug, reason: null }), 6);
  t.same(twice.d.ok && twice.d.facts, [], 're-driving a fulfilled request records nothing');
});

t.test('replaying the facts (evolve only) rebuilds the same issuances', async (t) => {
  const w = given();
  when(w, award(500, 3 * day), 0);
  for (const id of ['rwi_1', 'rwi_2', 'rwi_3', 'rwi_4']) when(w, issue(id), 0);
  when(w, redeem('rwi_1'), 1);
  when(w, cancel('rwi_2'), 2);
  when(w, reward({ kind: 'reward.expire_due' }), 10 * day);
  when(w, reward({ kind: 'reward.settle', issuanceId: 'rwi_gone', terms: null }), 10 * day);
  let replayed: CustomerState | null = null;
  for (const f of w.facts) replayed = evolve(replayed, f);
  t.same(replayed!.rewards, w.state.rewards);
  t.same(replayed!.ledger, w.state.ledger);
  t.same(w.state.rewards.issuances.map((i) => i.status), ['redeemed', 'cancelled', 'expired', 'expired']);
});

t.test('expiry_after: <n>d and <n>h', async (t) => {
  t.equal(parseExpiryAfter('30d'), 30 * day);
  t.equal(parseExpiryAfter('12h'), 12 * 3_600_000);
  for (const bad of ['0d', '3w', 'd', '1.5d', ' 1d', '-1d', '1234567d']) t.equal(parseExpiryAfter(bad), null, bad);
});

t.test("a survivor takes a merged customer's issuances over once, oldest first, with their voided ids", async (t) => {
  const iss = (id: string, createdAtMs: number): Issuance => ({
    id,
    rewardId: 'rew_1',
    status: 'issued',
    sourceType: 'api',
    sourceId: null,
    cost: 10,
    currency: 'coins',
    costEntryId: null,
    expiresAtMs: null,
    redeemedAtMs: null,
    cancelledAtMs: null,
    reason: null,
    version: 1,
    createdAtMs,
  });
  const survivor = emptyRewards();
  evolveRewards(survivor, { kind: 'reward.issued', issuance: iss('rwi_b', 20) });
  const handed = { issuances: [iss('rwi_a', 10), iss('rwi_c', 30)], voided: ['rwi_v'] };
  const facts = takeOver(survivor, handed, 'cust_M', { nowMs: 99 });
  t.same(facts.map((f) => f.kind), ['reward.taken_over', 'reward.taken_over', 'reward.reservation_voided']);
  for (const f of facts) evolveRewards(survivor, f);
  t.same(survivor.issuances.map((i) => [i.id, i.version]), [['rwi_a', 2], ['rwi_b', 1], ['rwi_c', 2]], 'oldest first; a taken issuance is a new version');
  t.same(survivor.voided, ['rwi_v']);
  t.same(takeOver(survivor, handed, 'cust_M', { nowMs: 100 }), [], 'nothing taken twice');
});

t.test('an issuance voided on the survivor while in transit is not taken over (its unit went back)', async (t) => {
  const survivor = emptyRewards();
  evolveRewards(survivor, { kind: 'reward.reservation_voided', issuanceId: 'rwi_x', atMs: 1 });
  const handed = {
    issuances: [{ id: 'rwi_x', rewardId: 'rew_1', status: 'issued' as const, sourceType: 'api', sourceId: null, cost: 1, currency: 'coins', costEntryId: null, expiresAtMs: null, redeemedAtMs: null, cancelledAtMs: null, reason: null, version: 1, createdAtMs: 1 }],
    voided: [],
  };
  t.same(takeOver(survivor, handed, 'cust_M', { nowMs: 2 }), []);
});

/** A pending request of the rule path (the outbox entry an event or a completion journaled). */
function requestFact(id: string): Fact {
  return {
    kind: 'reward.issue_requested',
    issuance: {
      id,
      rewardId: 'rw_mug',
      status: 'pending',
      sourceType: 'rule_execution',
      sourceId: 'rule_1',
      cost: null,
      currency: null,
      costEntryId: null,
      expiresAtMs: null,
      redeemedAtMs: null,
      cancelledAtMs: null,
      reason: null,
      version: 1,
      createdAtMs: 0,
    },
  };
}

t.test('a delete ends the open issuances in its own record: cancelled, expired when past expires_at, requests refused; units named', async (t) => {
  // Given an issuance of each state, a pending request and an enrollment.
  const w = given();
  when(w, award(1000, null), 0);
  when(w, issue('rwi_open'), 0);
  when(w, issue('rwi_lapsed', { ...mug, expiryAfterMs: day }), 0);
  when(w, issue('rwi_used'), 0);
  when(w, redeem('rwi_used'), 1);
  when(w, issue('rwi_gone'), 0);
  when(w, cancel('rwi_gone'), 1);
  evolve(w.state, requestFact('rwi_wait'));
  evolve(w.state, { kind: 'challenge.enrolled', challengeId: 'ch_1', atMs: 0 });
  // When the customer is deleted two days later.
  const r = when(w, { kind: 'customer.delete', eventsErased: 0 }, 2 * day);
  // Then its open issuances ended with the delete, and nothing else changed.
  t.ok(r.d.ok);
  t.same(r.d.ok && r.d.facts.map((f) => f.kind), ['reward.cancelled', 'reward.expired', 'reward.issue_refused', 'challenge.unenrolled', 'customer.deleted']);
  t.match(issuance(w, 'rwi_open'), { status: 'cancelled', reason: 'customer_deleted', cancelledAtMs: 2 * day, version: 2 });
  t.match(issuance(w, 'rwi_lapsed'), { status: 'expired', version: 2 });
  t.match(issuance(w, 'rwi_wait'), { status: 'refused', reason: 'customer_deleted' });
  t.match(issuance(w, 'rwi_used'), { status: 'redeemed', version: 2 });
  t.match(issuance(w, 'rwi_gone'), { status: 'cancelled', reason: 'r', version: 2 });
  t.same(r.d.ok && r.d.reply.kind === 'deleted' && r.d.reply.released, ['rwi_open', 'rwi_wait'], 'the units to give back: not the expired one (an expiry keeps it)');
  t.same(w.state.challenges.enrollments, {}, 'the enrollment is removed');
  t.equal(w.state.deletedAtMs, 2 * day);
});

t.test("a customer deleted before deletes ended its issuances: expiry ends them all, cancel works, redeem is 404, a request is refused", async (t) => {
  // Given a tombstone that still holds open issuances (deleted by an earlier version).
  const w = given();
  when(w, issue('rwi_a', { ...mug, expiryAfterMs: day }), 0);
  when(w, issue('rwi_b'), 0);
  when(w, issue('rwi_c'), 0);
  evolve(w.state, requestFact('rwi_p'));
  evolve(w.state, { kind: 'customer.deleted', version: 2, atMs: 1 });
  // Then redeem still answers that the customer was deleted.
  const spend = when(w, redeem('rwi_b'), 2);
  t.match(spend.d, { ok: false, code: 'resource_not_found', message: 'The customer was deleted.' });
  // When an operator cancels one, it is cancelled as for a live customer.
  const c = when(w, cancel('rwi_c'), 2);
  t.match(c.d.ok && c.d.reply, { kind: 'reward', reply: { kind: 'reward.issuance', issuance: { id: 'rwi_c', status: 'cancelled' } } });
  // When the expiry sweep finds its lapsed issuance, every open one ends (as a delete now does).
  const sweep = when(w, reward({ kind: 'reward.expire_due' }), 2 * day);
  t.match(sweep.d.ok && sweep.d.reply, { kind: 'reward', reply: { kind: 'reward.expired', ids: ['rwi_a'] } });
  t.same(w.state.rewards.issuances.map((i) => [i.id, i.status]), [['rwi_a', 'expired'], ['rwi_b', 'cancelled'], ['rwi_c', 'cancelled'], ['rwi_p', 'refused']]);
  const again = when(w, reward({ kind: 'reward.expire_due' }), 3 * day);
  t.same(again.d.ok && again.d.facts, [], 'a second sweep records nothing (no issuance of it is open: the sweep finds it no more)');
  // And a request re-driven meanwhile is refused, never issued to the deleted customer.
  const w2 = given();
  evolve(w2.state, requestFact('rwi_q'));
  evolve(w2.state, { kind: 'customer.deleted', version: 2, atMs: 1 });
  const f = when(w2, reward({ kind: 'reward.fulfil', issuanceId: 'rwi_q', terms: mug, reason: null }), 2);
  t.match(f.d.ok && f.d.reply, { reply: { kind: 'reward.issuance', issuance: { status: 'refused', reason: 'customer_deleted' } } });
});

t.test('past expires_at before the sweep: the view and a retried issue show it expired, exactly as the sweep then records it', async (t) => {
  // Given an issuance that expires after a day.
  const w = given();
  when(w, issue('rwi_x', { ...mug, expiryAfterMs: day }), 0);
  const shown = (nowMs: number) => toView(w.state, nowMs).issuances.find((i) => i.id === 'rwi_x');
  t.match(shown(day - 1), { status: 'issued', version: 1 }, 'issued until expires_at');
  // When it is read at expires_at, before any sweep.
  const early = shown(day);
  t.match(early, { status: 'expired', version: 2, expiresAtMs: day });
  t.equal(issuance(w, 'rwi_x')!.status, 'issued', 'reading records nothing');
  // And a retried issue of it (the same reservation) answers it as it is now.
  const retry = when(w, issue('rwi_x', { ...mug, expiryAfterMs: day }), 2 * day);
  t.same(retry.d.ok && retry.d.facts, []);
  t.same(retry.d.ok && retry.d.reply.kind === 'reward' && retry.d.reply.reply, { kind: 'reward.issuance', issuance: early });
  // Then the sweep, later, records the very issuance the reads showed.
  const sweep = when(w, reward({ kind: 'reward.expire_due' }), 3 * day);
  t.same(sweep.d.ok && sweep.d.facts, [{ kind: 'reward.expired', issuance: early }]);
  t.same(shown(3 * day), early, 'and reads after it answer the same');
});
