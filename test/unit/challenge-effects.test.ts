// Given/when/then tests of challenges inside the customer step: qualifying conditions in the rule
// condition language, rule-requested progress, completion actions as ledger and tier facts in the
// same decision as the event, at most one contribution per event, skips for inactive challenges,
// validation of definitions with wire paths, and that replaying the step's facts rebuilds the state.
import t from 'tap';
import { applyChallenges, type ChallengeContext, compileChallenge, runChallengeCommand, validateChallengeDefinition } from '../../src/domain/challenge-effects.js';
import type { ChallengeConfig } from '../../src/domain/challenges.js';
import { type Ctx, type CustomerState, decide, evolve, type Fact } from '../../src/domain/customer.js';
import { balanceOf } from '../../src/domain/ledger.js';
import type { TierProgram } from '../../src/domain/tiers.js';

const T0 = Date.parse('2026-11-23T12:00:00Z');

function config(over: Partial<ChallengeConfig> = {}): ChallengeConfig {
  return {
    id: 'chl_1',
    name: 'Three ranked matches',
    qualifying: { event: 'match.completed', conditions: { path: 'event.properties.mode', op: 'eq', value: 'ranked' } },
    target: 3,
    period: 'none',
    contributionKey: 'event.properties.match_id',
    enrollment: 'automatic',
    repeatable: false,
    startsAtMs: null,
    endsAtMs: null,
    status: 'active',
    completionActions: [{ type: 'points.award', currency: 'coins', amount: 100 }, { type: 'tier.evaluate' }],
    ...over,
  };
}

const program: TierProgram = {
  id: 'tp_1',
  key: 'status',
  currency: 'coins',
  basis: 'lifetime_earned',
  rollingDays: null,
  levels: [
    { key: 'bronze', title: 'Bronze', threshold: 0 },
    { key: 'silver', title: 'Silver', threshold: 100 },
  ],
  downgradeCheck: null,
};

function context(challenges: ChallengeConfig[]): ChallengeContext {
  return {
    challenges: challenges.map((c) => compileChallenge(c, 1)),
    timeZone: 'UTC',
    currencies: [{ key: 'coins', negativeBalance: 'forbid', expiryDays: null }],
    tierPrograms: [program],
  };
}

/** A customer world driven through the real customer decide/evolve, journaling every fact. */
class World {
  state: CustomerState | null = null;
  journal: Fact[] = [];
  n = 0;
  nowMs = T0;
  ctx(): Ctx {
    return {
      nowMs: this.nowMs,
      environmentId: 'env_1',
      newId: (p) => `${p}_${++this.n}`,
      newCustomerId: () => 'cust_1',
      newEventId: () => `evt_${++this.n}`,
    };
  }
  event(ctxChallenges: ChallengeContext, properties: Record<string, unknown>, name = 'match.completed', plans: unknown[] = []) {
    const d = decide(
      this.state,
      {
        kind: 'event.record',
        externalId: 'p1',
        clientEventId: `c${++this.n}`,
        name,
        occurredAtMs: this.nowMs,
        properties,
        fp: this.n,
        trust: 'merchant_asserted', source: { type: 'secret_key', id: 'key_test' },
        rules: { plans: plans as never[], currencies: ctxChallenges.currencies, tierPrograms: ctxChallenges.tierPrograms, challenges: ctxChallenges.challenges, timeZone: 'UTC' },
      },
      this.ctx(),
    );
    if (!d.ok) throw new Error(d.code);
    for (const f of d.facts) {
      this.state = evolve(this.state, f);
      this.journal.push(f);
    }
    return d;
  }
  effects(d: ReturnType<World['event']>) {
    return d.ok && d.reply.kind === 'event' ? d.reply.effects : [];
  }
}

t.test('given an automatic keyed challenge, when ranked matches arrive, then each distinct match counts once', async (t) => {
  const w = new World();
  const ctx = context([config()]);
  t.match(w.effects(w.event(ctx, { match_id: 'm1', mode: 'ranked' })), [{ type: 'challenge.progressed', count: 1, periodKey: 'all' }]);
  t.match(w.effects(w.event(ctx, { match_id: 'm1', mode: 'ranked' })), [{ type: 'challenge.skipped', reason: 'duplicate_contribution' }]);
  t.match(w.effects(w.event(ctx, { match_id: 'm2', mode: 'casual' })), [{ type: 'challenge.skipped', reason: 'not_qualifying' }]);
  t.match(w.effects(w.event(ctx, { match_id: 'm2', mode: 'ranked' })), [{ type: 'challenge.progressed', count: 2 }]);
  t.equal(w.state?.challenges.progress.chl_1?.count, 2);
});

t.test('given two contributions, when the third completes, then the award and the tier move are facts of the same decision', async (t) => {
  const w = new World();
  const ctx = context([config()]);
  w.event(ctx, { match_id: 'm1', mode: 'ranked' });
  w.event(ctx, { match_id: 'm2', mode: 'ranked' });
  const d = w.event(ctx, { match_id: 'm3', mode: 'ranked' });
  t.ok(d.ok);
  const kinds = d.ok ? d.facts.map((f) => f.kind) : [];
  t.same(kinds, ['event.recorded', 'challenge.progressed', 'challenge.completed', 'ledger.entry_recorded', 'tier.changed']);
  t.match(w.effects(d), [
    { type: 'challenge.progressed', count: 3 },
    { type: 'challenge.completed', completions: 1 },
    { type: 'challenge.points_awarded', currency: 'coins', amount: 100 },
  ]);
  t.equal(balanceOf(w.state!.ledger, 'coins', T0).available, 100);
  t.equal(w.state?.tiers.tp_1?.level, 'silver');
  t.match(w.effects(w.event(ctx, { match_id: 'm4', mode: 'ranked' })), [{ type: 'challenge.skipped', reason: 'already_completed' }]);
  t.equal(balanceOf(w.state!.ledger, 'coins', T0).available, 100, 'completion happens exactly once');
});

t.test('given a completion into an unknown currency, then that action is reported skipped, the others apply and the completion stands', async (t) => {
  const w = new World();
  const ctx = context([config({ target: 1, completionActions: [{ type: 'points.award', currency: 'gems', amount: 5 }, { type: 'item.grant', item: 'sword', quantity: 1 }] })]);
  const effects = w.effects(w.event(ctx, { match_id: 'm1', mode: 'ranked' }));
  t.match(effects, [
    { type: 'challenge.progressed' },
    { type: 'challenge.completed' },
    { type: 'challenge.action_skipped', action: 'points.award' },
    { type: 'challenge.item_granted', item: 'sword', quantity: 1 },
  ]);
  t.equal(w.state?.challenges.completions.chl_1, 1);
  t.equal(w.state?.inventory.sword, 1, 'the item is in the inventory');
});

t.test('given a rule that progresses a challenge, when it fires, then the challenge counts once even if its own event also matches', async (t) => {
  const subject = { externalId: 'p1', attributes: {}, ledger: { currencies: {} } as never, ruleLimits: {}, tiers: {}, inventory: {}, challenges: { enrollments: {}, progress: {}, completions: {} } };
  const ctx = context([config({ contributionKey: null, qualifying: { event: 'quest.done' }, target: 5 })]);
  const ids = { nowMs: T0, newId: (p: string) => `${p}_x` };
  const r = applyChallenges(ctx, [{ challengeId: 'chl_1', ruleId: 'rule_1' }], { id: 'evt_1', name: 'quest.done', properties: {}, trust: 'merchant_asserted' }, subject, [], ids);
  t.same(r.facts.map((f) => f.kind), ['challenge.progressed']);
  const unknown = applyChallenges(ctx, [{ challengeId: 'chl_paused', ruleId: 'rule_1' }], { id: 'evt_2', name: 'other.event', properties: {}, trust: 'merchant_asserted' }, subject, [], ids);
  t.same(unknown.effects, [{ type: 'challenge.skipped', challengeId: 'chl_paused', reason: 'challenge_not_active' }]);
  t.same(unknown.facts, []);
});

t.test('given a challenge with a window, when the event is outside it, then nothing counts', async (t) => {
  const w = new World();
  const ctx = context([config({ startsAtMs: T0 + 1000, endsAtMs: T0 + 2000 })]);
  t.match(w.effects(w.event(ctx, { match_id: 'm1', mode: 'ranked' })), [{ type: 'challenge.skipped', reason: 'challenge_not_started' }]);
  w.nowMs = T0 + 1500;
  t.match(w.effects(w.event(ctx, { match_id: 'm1', mode: 'ranked' })), [{ type: 'challenge.progressed' }]);
  w.nowMs = T0 + 2000;
  t.match(w.effects(w.event(ctx, { match_id: 'm2', mode: 'ranked' })), [{ type: 'challenge.skipped', reason: 'challenge_ended' }]);
});

t.test('given progress at the old target, when reevaluated after the target is lowered, then it completes once with its award', async (t) => {
  const w = new World();
  const ctx = context([config()]);
  w.event(ctx, { match_id: 'm1', mode: 'ranked' });
  w.event(ctx, { match_id: 'm2', mode: 'ranked' });
  const lowered = config({ target: 2 });
  const run = () => runChallengeCommand(ctx, compileChallenge(lowered, 2), { kind: 'challenge.reevaluate', challenge: lowered, timeZone: 'UTC' }, w.state!, { nowMs: T0, newId: (p) => `${p}_r` });
  const r = run();
  t.ok(r.ok);
  if (!r.ok) return;
  t.same(r.facts.map((f) => f.kind), ['challenge.completed', 'ledger.entry_recorded', 'tier.changed']);
  for (const f of r.facts) w.state = evolve(w.state, f);
  const again = run();
  t.ok(again.ok && again.facts.length === 0 && again.reply.kind === 'reevaluated' && again.reply.completed === 0);
});

t.test('replaying the journal rebuilds the same challenge state and balances', async (t) => {
  const w = new World();
  const ctx = context([config({ repeatable: true, period: 'daily', target: 2 })]);
  for (let day = 0; day < 3; day++) {
    w.nowMs = T0 + day * 86_400_000;
    for (const m of ['a', 'b', 'b', 'c']) w.event(ctx, { match_id: `${m}${day}`, mode: 'ranked' });
  }
  let replayed: CustomerState | null = null;
  for (const f of w.journal) replayed = evolve(replayed, f);
  t.same(replayed?.challenges, w.state?.challenges);
  t.same(replayed?.ledger, w.state?.ledger);
  t.equal(w.state?.challenges.completions.chl_1, 3, 'one completion per day');
});

t.test('definitions are validated with the rules schema and named by wire path', async (t) => {
  t.same(validateChallengeDefinition({ event: 'match.completed' }, []), []);
  const cases: Array<[unknown, unknown, string]> = [
    [null, [], 'qualifying'],
    [{ event: 'x', extra: 1 }, [], 'qualifying.extra'],
    [{ event: 'Not Snake' }, [], 'qualifying.event'],
    [{ event: 'a.b', conditions: { all: [] } }, [], 'qualifying.conditions.all'],
    [{ event: 'a.b', conditions: { path: 'event.properties.x', op: 'gt', value: 'text' } }, [], 'qualifying.conditions.value'],
    [{ event: 'a.b' }, [{ type: 'points.award', currency: 'coins', amount: -1 }], 'completion_actions[0].amount'],
    [{ event: 'a.b' }, [{ type: 'points.award', currency: 'coins', amount_from: 'event.properties.n' }], 'completion_actions[0].amount_from'],
    [{ event: 'a.b' }, [{ type: 'challenge.progress', challenge_id: 'chl_2' }], 'completion_actions[0].type'],
  ];
  for (const [q, actions, param] of cases) {
    const problems = validateChallengeDefinition(q, actions);
    t.equal(problems[0]?.param, param, JSON.stringify([q, actions]));
  }
});
