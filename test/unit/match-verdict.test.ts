// Match player verdicts after the report (spec 3): the review state machine as a table (from
// state, decision, condition -> to state or code, replayed, effects), the derived match status
// table, and the rule-6 event an admitted player becomes.
import t from 'tap';
import {
  buildPlayerEvent,
  decideReview,
  deriveMatchStatus,
  evolveReview,
  type MatchStatus,
  type PlayerRecord,
  type PlayerStatus,
  type Review,
  type ReviewCommand,
  reviewBodySchema,
} from '../../src/domain/match/index.js';

const outlier = { code: 'outlier' as const, message: 'score is 9500, above 9000.', metric: 'score', value: 9500, limit: 9000 };

function player(status: PlayerStatus, review: Review | null = null): PlayerRecord {
  return { id: 'mrp_1', customerId: 'cust_1', status, reasons: status === 'admitted' ? [] : [outlier], review };
}
const given = (decision: 'admit' | 'reject', status: PlayerStatus): PlayerRecord =>
  player(status, { decision, reason: null, actor: 'usr_1', reviewedAtMs: 1 });

const cmd = (decision: 'admit' | 'reject', over: Partial<ReviewCommand> = {}): ReviewCommand => ({
  kind: 'match_player.review',
  decision,
  reason: 'looked at the replay',
  actor: 'usr_2',
  reportingKeyRevoked: false,
  ...over,
});

t.test('review table', async (t) => {
  type Row = [
    name: string,
    from: PlayerRecord,
    command: ReviewCommand,
    expect: { to: PlayerStatus; replayed: boolean; recordEvent: boolean; releaseRateCount: boolean } | { code: string },
  ];
  const rows: Row[] = [
    ['held + admit -> admitted, event recorded now', player('held'), cmd('admit'), { to: 'admitted', replayed: false, recordEvent: true, releaseRateCount: false }],
    ['held + reject -> rejected, final; the count is released', player('held'), cmd('reject'), { to: 'rejected', replayed: false, recordEvent: false, releaseRateCount: true }],
    ['held + admit, key revoked -> refused, stays held', player('held'), cmd('admit', { reportingKeyRevoked: true }), { code: 'forbidden' }],
    ['held + reject, key revoked -> rejected', player('held'), cmd('reject', { reportingKeyRevoked: true }), { to: 'rejected', replayed: false, recordEvent: false, releaseRateCount: true }],
    [
      'held + admit, event refused -> rejected',
      player('held'),
      cmd('admit', { eventRefused: { message: 'Below the trust floor.' } }),
      { to: 'rejected', replayed: false, recordEvent: false, releaseRateCount: true },
    ],
    ['never held (admitted) + admit -> invalid_state', player('admitted'), cmd('admit'), { code: 'invalid_state' }],
    ['never held (admitted) + reject -> invalid_state', player('admitted'), cmd('reject'), { code: 'invalid_state' }],
    ['never held (rejected) + admit -> invalid_state', player('rejected'), cmd('admit'), { code: 'invalid_state' }],
    ['never held (rejected) + reject -> invalid_state', player('rejected'), cmd('reject'), { code: 'invalid_state' }],
    ['admitted by review + admit -> replayed', given('admit', 'admitted'), cmd('admit'), { to: 'admitted', replayed: true, recordEvent: false, releaseRateCount: false }],
    ['admitted by review + reject -> invalid_state', given('admit', 'admitted'), cmd('reject'), { code: 'invalid_state' }],
    ['rejected by review + reject -> replayed', given('reject', 'rejected'), cmd('reject'), { to: 'rejected', replayed: true, recordEvent: false, releaseRateCount: false }],
    ['rejected by review + admit -> invalid_state', given('reject', 'rejected'), cmd('admit'), { code: 'invalid_state' }],
    [
      'admitted by review + admit, key revoked since -> still a replay',
      given('admit', 'admitted'),
      cmd('admit', { reportingKeyRevoked: true }),
      { to: 'admitted', replayed: true, recordEvent: false, releaseRateCount: false },
    ],
  ];
  for (const [name, from, command, expect] of rows) {
    const d = decideReview(from, command, { nowMs: 5000 });
    if ('code' in expect) {
      t.match(d, { ok: false, code: expect.code }, name);
      continue;
    }
    t.ok(d.ok, name);
    if (!d.ok) continue;
    t.equal(d.reply.player.status, expect.to, `${name}: status`);
    t.equal(d.reply.replayed, expect.replayed, `${name}: replayed`);
    t.same(d.effects, { recordEvent: expect.recordEvent, releaseRateCount: expect.releaseRateCount }, `${name}: effects`);
    if (expect.replayed) {
      t.same(d.facts, [], `${name}: nothing new`);
      t.same(d.reply.player, from, `${name}: unchanged`);
    } else {
      t.equal(d.facts.length, 1);
      t.same(evolveReview(from, d.facts[0]!), d.reply.player, `${name}: evolve gives the reply`);
      t.same(d.reply.player.review, { decision: command.decision, reason: command.reason, actor: 'usr_2', reviewedAtMs: 5000 });
    }
  }
});

t.test('a review keeps the report reasons; an event refusal adds event_refused', async (t) => {
  const admitted = decideReview(player('held'), cmd('admit'), { nowMs: 1 });
  t.ok(admitted.ok);
  if (admitted.ok) t.same(admitted.reply.player.reasons, [outlier]);
  const refused = decideReview(player('held'), cmd('admit', { eventRefused: { message: 'Below the trust floor.' } }), { nowMs: 1 });
  t.ok(refused.ok);
  if (refused.ok) t.same(refused.reply.player.reasons.map((r) => r.code), ['outlier', 'event_refused']);
});

t.test('after a refused admit (key revoked) the player can still be rejected, and then admit is invalid_state', async (t) => {
  const p = player('held');
  t.match(decideReview(p, cmd('admit', { reportingKeyRevoked: true }), { nowMs: 1 }), { ok: false, code: 'forbidden', param: 'decision' });
  const r = decideReview(p, cmd('reject'), { nowMs: 2 });
  t.ok(r.ok);
  if (!r.ok) return;
  const after = evolveReview(p, r.facts[0]!);
  t.match(decideReview(after, cmd('admit'), { nowMs: 3 }), { ok: false, code: 'invalid_state' });
  t.match(decideReview(after, cmd('reject'), { nowMs: 3 }), { ok: true, facts: [], reply: { replayed: true } });
});

t.test('review body: decision admit or reject, reason optional up to 500 characters', async (t) => {
  t.ok(reviewBodySchema.safeParse({ decision: 'admit' }).success);
  t.ok(reviewBodySchema.safeParse({ decision: 'reject', reason: 'cheating', }).success);
  t.notOk(reviewBodySchema.safeParse({ decision: 'approve' }).success);
  t.notOk(reviewBodySchema.safeParse({ decision: 'admit', reason: 'x'.repeat(501) }).success);
  t.notOk(reviewBodySchema.safeParse({ decision: 'admit', extra: 1 }).success);
});

t.test('derived match status table', async (t) => {
  const rows: [PlayerStatus[], MatchStatus][] = [
    [['admitted'], 'admitted'],
    [['admitted', 'admitted', 'admitted'], 'admitted'],
    [['rejected'], 'rejected'],
    [['rejected', 'rejected'], 'rejected'],
    [['held'], 'held'],
    [['admitted', 'held'], 'held'],
    [['rejected', 'held', 'admitted'], 'held'],
    [['held', 'held'], 'held'],
    [['admitted', 'rejected'], 'partially_admitted'],
    [['rejected', 'admitted', 'admitted'], 'partially_admitted'],
  ];
  for (const [statuses, status] of rows) t.equal(deriveMatchStatus(statuses), status, statuses.join(','));
});

t.test('rule 6: the event of an admitted player', async (t) => {
  const endedAtMs = Date.parse('2025-03-10T11:59:00Z');
  const ev = buildPlayerEvent({
    matchId: 'm-42',
    customerId: 'cust_7',
    profile: { key: 'ranked', event: 'ranked.completed' },
    endedAtMs,
    metrics: { kills: 12, score: 3400 },
    won: false,
    source: 'key_1',
  });
  t.same(ev, {
    id: 'm-42:cust_7',
    name: 'ranked.completed',
    customerId: 'cust_7',
    occurredAtMs: endedAtMs,
    properties: { kills: 12, score: 3400, match_id: 'm-42', match_profile: 'ranked', won: false },
    trust: 'merchant_asserted',
    source: 'key_1',
  });
  const noWon = buildPlayerEvent({
    matchId: 'm-42',
    customerId: 'cust_8',
    profile: { key: 'ranked', event: 'match.completed' },
    endedAtMs,
    metrics: { kills: 0, score: 10 },
    won: null,
    source: 'key_1',
  });
  t.notOk('won' in noWon.properties, 'won only when given');
  t.same(noWon.properties, { kills: 0, score: 10, match_id: 'm-42', match_profile: 'ranked' });
  t.equal(noWon.id, 'm-42:cust_8');
});
