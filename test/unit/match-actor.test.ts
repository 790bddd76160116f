// Given/when/then tests of the match commands of the customer actor (domain/match/actor.ts via
// customer.decide): the group stage and the rule-6 event in one step, replays, merges, event
// refusal and reviews. Replay (evolve only) must rebuild the same rate books.
import t from 'tap';
import { type Command, type CustomerState, type Ctx, decide, evolve, type Fact, mergeHandover } from '../../src/domain/customer.js';
import { eventFingerprint } from '../../src/domain/event-fingerprint.js';
import type { MatchEventSpec } from '../../src/domain/match/actor.js';
import { eventId } from '../../src/domain/seen-events.js';

const minute = 60_000;
const nowMs = 10_000 * minute;

function ctxAt(at: number): Ctx {
  let n = 0;
  return {
    nowMs: at,
    environmentId: 'env_1',
    newId: (prefix) => `${prefix}_${++n}`,
    newCustomerId: () => `cust_NEW${String(++n).padStart(26, '0')}`,
    newEventId: () => eventId(at, ++n),
  };
}

const created = (id: string, ext: string): Fact => ({ kind: 'customer.created', id, environmentId: 'env_1', externalId: ext, attributes: {}, atMs: 1 });

function run(state: CustomerState | null, cmd: Command, facts: Fact[] = []) {
  const d = decide(state, cmd, ctxAt(nowMs));
  if (d.ok) for (const f of d.facts) state = evolve(state, f);
  if (d.ok) facts.push(...d.facts);
  return { d, state };
}

const event = (matchId: string, over: Partial<MatchEventSpec> = {}): MatchEventSpec => ({
  name: 'match.completed',
  matchId,
  profileKey: 'arena',
  occurredAtMs: nowMs - 5 * minute,
  metrics: { kills: 3 },
  won: true,
  // As the coordinator computes it for the player named by external id 'a'.
  fp: eventFingerprint('match.completed', 'a', nowMs - 5 * minute, { kills: 3, match_id: matchId, match_profile: 'arena', won: true }),
  trust: 'merchant_asserted',
  source: { type: 'secret_key', id: 'key_reporter' },
  rules: null,
  ...over,
});

const admit = (matchId: string, customerId: string, over: Partial<Extract<Command, { kind: 'match.admit' }>> = {}): Command => ({
  kind: 'match.admit',
  customerId,
  externalId: null,
  profileId: 'mpf_1',
  rateLimits: [{ windowSeconds: 3600, maxMatches: 2 }],
  endedAtMs: nowMs - 5 * minute,
  pending: 'admitted',
  outlierReasons: [],
  event: event(matchId),
  ...over,
});

t.test('admitted: the rate count and the rule-6 event are facts of one step', async (t) => {
  const { d, state } = run(evolve(null, created('cust_A', 'a')), admit('m1', 'cust_A'));
  t.ok(d.ok);
  if (!d.ok) return;
  t.same(d.facts.map((f) => f.kind), ['match_rate.counted', 'event.recorded']);
  t.match(d.reply, { kind: 'match_player', customerId: 'cust_A', status: 'admitted', reasons: [], eventId: /^evt_/, clientEventId: 'm1:cust_A' });
  const rec = d.facts[1] as Extract<Fact, { kind: 'event.recorded' }>;
  t.same(rec.properties, { kills: 3, match_id: 'm1', match_profile: 'arena', won: true });
  t.equal(rec.occurredAtMs, nowMs - 5 * minute);
  t.equal(state!.matchRates.mpf_1!.entries.length, 1);
});

t.test('a retry is a replay: no new facts, the same event id', async (t) => {
  const facts: Fact[] = [];
  const first = run(evolve(null, created('cust_A', 'a')), admit('m1', 'cust_A'), facts);
  const again = run(first.state, admit('m1', 'cust_A'));
  t.ok(again.d.ok && first.d.ok);
  if (!again.d.ok || !first.d.ok) return;
  t.same(again.d.facts, []);
  t.equal(again.d.reply.kind === 'match_player' && again.d.reply.eventId, first.d.reply.kind === 'match_player' && first.d.reply.eventId);
});

t.test('rate windows: the third match of the hour is rate_limited and records nothing', async (t) => {
  let s: CustomerState | null = evolve(null, created('cust_A', 'a'));
  for (const m of ['m1', 'm2']) s = run(s, admit(m, 'cust_A')).state;
  const third = run(s, admit('m3', 'cust_A'));
  t.ok(third.d.ok);
  if (!third.d.ok) return;
  t.same(third.d.facts, []);
  t.match(third.d.reply, { status: 'rejected', reasons: [{ code: 'rate_limited', limit: 2 }], eventId: null });
});

t.test('held counts without an event; a rejected outlier does not count', async (t) => {
  let s: CustomerState | null = evolve(null, created('cust_A', 'a'));
  const held = run(s, admit('m1', 'cust_A', { pending: 'held', outlierReasons: [{ code: 'outlier', message: 'x' }] }));
  t.ok(held.d.ok);
  if (!held.d.ok) return;
  t.same(held.d.facts.map((f) => f.kind), ['match_rate.counted']);
  t.match(held.d.reply, { status: 'held', reasons: [{ code: 'outlier' }], eventId: null });
  s = held.state;
  const rej = run(s, admit('m2', 'cust_A', { pending: 'rejected', outlierReasons: [{ code: 'outlier', message: 'x' }] }));
  t.ok(rej.d.ok && rej.d.facts.length === 0);
  t.equal(rej.state!.matchRates.mpf_1!.entries.length, 1);
});

t.test('an unknown external id creates the customer in the same step', async (t) => {
  const { d, state } = run(null, admit('m1', '', { externalId: 'newbie' }));
  t.ok(d.ok);
  if (!d.ok) return;
  t.same(d.facts.map((f) => f.kind), ['customer.created', 'match_rate.counted', 'event.recorded']);
  t.equal(state!.externalId, 'newbie');
  t.match(d.reply, { customerId: state!.id, clientEventId: `m1:${state!.id}` });
  const byId = decide(null, admit('m1', 'cust_X'), ctxAt(nowMs));
  t.match(byId, { ok: false, code: 'resource_not_found' });
});

t.test('after a merge, another player of the same group in one match is duplicate_player_after_merge', async (t) => {
  // cust_B was merged into cust_A after the report; its command reaches A's actor.
  const s = run(evolve(null, created('cust_A', 'a')), admit('m1', 'cust_A')).state;
  const b = run(s, admit('m1', 'cust_B'));
  t.ok(b.d.ok);
  if (!b.d.ok) return;
  t.same(b.d.facts, []);
  t.match(b.d.reply, { customerId: 'cust_B', status: 'rejected', reasons: [{ code: 'duplicate_player_after_merge' }] });
});

t.test('the merged customer brings its rate book (alias.add with matchRates)', async (t) => {
  const bState = run(evolve(null, created('cust_B', 'b')), admit('m1', 'cust_B')).state!;
  let a = run(evolve(null, created('cust_A', 'a')), admit('m2', 'cust_A')).state;
  const merged = run(a, { kind: 'alias.add', alias: 'b', aliasKind: 'anonymous', mergedFrom: 'cust_B', matchRates: bState.matchRates });
  t.ok(merged.d.ok);
  if (!merged.d.ok) return;
  t.same(merged.d.facts.map((f) => f.kind), ['alias.added', 'match_rate.merged']);
  a = merged.state;
  t.equal(a!.matchRates.mpf_1!.entries.length, 2);
  t.match(run(a, admit('m3', 'cust_A')).d, { ok: true, reply: { status: 'rejected', reasons: [{ code: 'rate_limited' }] } });
});

t.test('event_refused: the event id was used with other content; nothing is counted', async (t) => {
  let s: CustomerState | null = evolve(null, created('cust_A', 'a'));
  s = run(s, { kind: 'event.record', externalId: 'a', clientEventId: 'm1:cust_A', name: 'other', occurredAtMs: 1, properties: {}, fp: 1, trust: 'merchant_asserted', source: { type: 'secret_key', id: 'key_test' }, rules: null }).state;
  const r = run(s, admit('m1', 'cust_A'));
  t.ok(r.d.ok);
  if (!r.d.ok) return;
  t.same(r.d.facts, []);
  t.match(r.d.reply, { status: 'rejected', reasons: [{ code: 'event_refused' }], eventId: null });
});

t.test('the event is recorded with the fingerprint of the same event sent through POST /v1/events: a resend is a duplicate', async (t) => {
  const s = run(evolve(null, created('cust_A', 'a')), admit('m1', 'cust_A')).state;
  const resend = (properties: Record<string, unknown>): Command => ({
    kind: 'event.record',
    externalId: 'a',
    clientEventId: 'm1:cust_A',
    name: 'match.completed',
    occurredAtMs: nowMs - 5 * minute,
    properties,
    // What the events handler computes for {customer_id: 'a', occurred_at, properties}.
    fp: eventFingerprint('match.completed', 'a', nowMs - 5 * minute, properties),
    trust: 'merchant_asserted',
    source: { type: 'secret_key', id: 'key_test' },
    rules: null,
  });
  const same = run(s, resend({ won: true, match_profile: 'arena', match_id: 'm1', kills: 3 }));
  t.match(same.d, { ok: true, facts: [], reply: { kind: 'event', duplicate: true } });
  t.match(run(s, resend({ kills: 4, match_id: 'm1', match_profile: 'arena', won: true })).d, { ok: false, code: 'event_id_conflict' });
});

t.test('reviews: admit records the event (once); reject releases the count', async (t) => {
  let s = run(evolve(null, created('cust_A', 'a')), admit('m1', 'cust_A', { pending: 'held' })).state;
  const review = (decision: 'admit' | 'reject', matchId = 'm1'): Command => ({ kind: 'match.review', decision, customerId: 'cust_A', profileId: 'mpf_1', event: event(matchId) });
  const a = run(s, review('admit'));
  t.ok(a.d.ok);
  if (!a.d.ok) return;
  t.same(a.d.facts.map((f) => f.kind), ['event.recorded']);
  t.match(a.d.reply, { status: 'admitted', eventId: /^evt_/ });
  t.same(run(a.state, review('admit')).d.ok && (run(a.state, review('admit')).d as { facts: Fact[] }).facts, [], 'a second admit records nothing');
  s = run(a.state, admit('m2', 'cust_A', { pending: 'held' })).state;
  const r = run(s, review('reject', 'm2'));
  t.ok(r.d.ok);
  if (!r.d.ok) return;
  t.same(r.d.facts.map((f) => f.kind), ['match_rate.released']);
  t.equal(r.state!.matchRates.mpf_1!.entries.length, 1);
});

t.test('replay of the facts (evolve only) rebuilds the same rate books', async (t) => {
  const facts: Fact[] = [created('cust_A', 'a')];
  let s: CustomerState | null = evolve(null, facts[0]!);
  for (const m of ['m1', 'm2', 'm3']) s = run(s, admit(m, 'cust_A'), facts).state;
  let replayed: CustomerState | null = null;
  for (const f of facts) replayed = evolve(replayed, f);
  t.same(replayed!.matchRates, s!.matchRates);
  t.equal(replayed!.events.size, 2);
});

t.test('snapshots keep the rate books', async (t) => {
  const { encodeSnapshot, decodeSnapshot } = await import('../../src/actors/codec.js');
  const s = run(evolve(null, created('cust_A', 'a')), admit('m1', 'cust_A')).state!;
  t.same(decodeSnapshot(encodeSnapshot(s)).matchRates, s.matchRates);
});

t.test('a retry after a merge of a player the merged customer already admitted records nothing again', async (t) => {
  const bState = run(evolve(null, created('cust_B', 'b')), admit('m1', 'cust_B')).state!;
  const a = run(evolve(null, created('cust_A', 'a')), { kind: 'alias.add', alias: 'b', aliasKind: 'anonymous', mergedFrom: 'cust_B', matchRates: bState.matchRates }).state;
  const retry = run(a, admit('m1', 'cust_B'));
  t.ok(retry.d.ok);
  if (!retry.d.ok) return;
  t.same(retry.d.facts, [], 'no second event');
  t.match(retry.d.reply, { customerId: 'cust_B', status: 'admitted', eventId: null });
});

t.test('a review admit after a merge: another player of the match in the group was already admitted, so duplicate_player_after_merge', async (t) => {
  const review = (customerId: string): Command => ({ kind: 'match.review', decision: 'admit', customerId, profileId: 'mpf_1', event: event('m1') });
  const merge = (into: CustomerState | null, from: CustomerState): CustomerState =>
    run(into, { kind: 'alias.add', alias: from.externalId!, aliasKind: 'anonymous', mergedFrom: from.id, ...mergeHandover(from) }).state!;
  const heldReasons = [{ code: 'outlier' as const, message: 'x' }];

  // The survivor admitted; the merged customer's player is held.
  const a1 = run(evolve(null, created('cust_A', 'a')), admit('m1', 'cust_A')).state;
  const b1 = run(evolve(null, created('cust_B', 'b')), admit('m1', 'cust_B', { pending: 'held', outlierReasons: heldReasons })).state!;
  const g1 = merge(a1, b1);
  const dup = run(g1, review('cust_B'));
  t.ok(dup.d.ok);
  if (!dup.d.ok) return;
  t.match(dup.d.reply, { customerId: 'cust_B', status: 'rejected', reasons: [{ code: 'duplicate_player_after_merge' }], eventId: null });
  t.same(dup.d.facts.map((f) => f.kind), ['match_rate.released'], 'no second event; the held count is released');
  t.same(dup.state!.matchRates.mpf_1!.entries.map((e) => e.customerId), ['cust_A']);

  // The merged customer admitted; the survivor's own player is held.
  const a2 = run(evolve(null, created('cust_A', 'a')), admit('m1', 'cust_A', { pending: 'held', outlierReasons: heldReasons })).state;
  const b2 = run(evolve(null, created('cust_B', 'b')), admit('m1', 'cust_B')).state!;
  const g2 = run(merge(a2, b2), review('cust_A'));
  t.match(g2.d, { ok: true, facts: [{ kind: 'match_rate.released', customerId: 'cust_A' }], reply: { status: 'rejected', reasons: [{ code: 'duplicate_player_after_merge' }] } });

  // Both held when they merged: the first admit records the event, the second is the duplicate.
  const a3 = run(evolve(null, created('cust_A', 'a')), admit('m1', 'cust_A', { pending: 'held', outlierReasons: heldReasons })).state;
  const b3 = run(evolve(null, created('cust_B', 'b')), admit('m1', 'cust_B', { pending: 'held', outlierReasons: heldReasons })).state!;
  const first = run(merge(a3, b3), review('cust_B'));
  t.match(first.d, { ok: true, reply: { status: 'admitted', eventId: /^evt_/ } });
  t.match(run(first.state, review('cust_A')).d, { ok: true, reply: { status: 'rejected', reasons: [{ code: 'duplicate_player_after_merge' }] } });
  // A retry of the admit that went through is still a replay of it, not a duplicate.
  t.match(run(first.state, review('cust_B')).d, { ok: true, facts: [], reply: { status: 'admitted', eventId: /^evt_/ } });
});
