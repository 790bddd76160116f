// Black-box API tests of a rule's references at publish and rollback: a definition naming a
// currency, reward, challenge, tier program (also as customer.tiers.<key>, with its level keys) or
// segment the environment lacks is 422 rule_invalid
// with one problem per bad reference (path and message); a draft may name them (create, PATCH);
// publish succeeds once they exist; rollback re-checks the version; another environment's
// resources do not count.
import t from 'tap';
import { idem, signUp, startForTest } from '../helpers/service.js';

type Body = Record<string, unknown>;

const rule = (actions: unknown[], conditions?: unknown) => ({
  schema: 'service.rule/v2',
  trigger: { kind: 'customer_event', event: 'order.completed' },
  ...(conditions === undefined ? {} : { conditions }),
  actions,
});

const award = (currency: string) => ({ type: 'points.award', currency, amount: 10 });
const member = (segment: string) => ({ path: 'customer.segments', op: 'contains', value: segment });

t.test('rule references at publish and rollback', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);

  const draft = async (definition: unknown): Promise<Body> => {
    const r = await api.post('/v1/rules', { name: 'refs', definition }, idem());
    t.equal(r.status, 201, 'a draft may name resources that do not exist yet');
    return r.body;
  };
  const publish = (id: string) => api.post(`/v1/rules/${id}/publish`);
  const problems = (r: { body: Body }) => (r.body.error as { details: Array<{ param: string; message: string }> }).details;

  await t.test('every bad reference is one problem, in document order; nothing is written', async (t) => {
    const r0 = await draft(
      rule(
        [
          award('coins'),
          award('gems'),
          { type: 'reward.issue', reward_id: 'rw_missing' },
          { type: 'challenge.progress', challenge_id: 'chl_missing' },
          { type: 'tier.evaluate', program: 'club' },
          { type: 'tier.evaluate' },
        ],
        { all: [member('vip'), { any: [{ path: 'event.properties.total', op: 'gte', value: 1 }, { not: member('lapsed') }] }] },
      ),
    );
    const r = await publish(r0.id as string);
    t.equal(r.status, 422);
    t.equal(r.body.error.code, 'rule_invalid');
    t.same(problems(r), [
      { param: 'definition.actions[1].currency', message: "No currency 'gems' in this environment." },
      { param: 'definition.actions[2].reward_id', message: "No reward 'rw_missing' in this environment." },
      { param: 'definition.actions[3].challenge_id', message: "No challenge 'chl_missing' in this environment." },
      { param: 'definition.actions[4].program', message: "No tier program 'club' in this environment." },
      { param: 'definition.conditions.all[0].value', message: "No segment 'vip' in this environment." },
      { param: 'definition.conditions.all[1].any[1].not.value', message: "No segment 'lapsed' in this environment." },
    ]);
    t.equal(r.body.error.param, 'definition.actions[1].currency', 'param names the first problem');
    const after = await api.get(`/v1/rules/${r0.id}`);
    t.match(after.body, { status: 'draft', version: 1, active_version: null }, 'the rule is unchanged');
    t.equal((await api.get(`/v1/rules/${r0.id}/versions`)).body.data.length, 0, 'no version written');
  });

  await t.test('v1 conditions are named by their index', async (t) => {
    const r0 = await draft({ schema: 'service.rule/v1', trigger: { event: 'order.completed' }, conditions: [member('gold')], actions: [award('coins')] });
    t.same(problems(await publish(r0.id as string)), [{ param: 'definition.conditions[0].value', message: "No segment 'gold' in this environment." }]);
  });

  // One kind at a time: refused while missing, published once the resource exists (a PATCH of the
  // draft names the generated id of a reward or challenge).
  await t.test('currency: refused, then published once created', async (t) => {
    const r0 = await draft(rule([award('gems')]));
    t.same(problems(await publish(r0.id as string)), [{ param: 'definition.actions[0].currency', message: "No currency 'gems' in this environment." }]);
    t.equal((await api.post('/v1/currencies', { key: 'gems', name: 'Gems' }, idem())).status, 201);
    const p = await publish(r0.id as string);
    t.equal(p.status, 200);
    t.match(p.body, { status: 'published', active_version: { number: 1 } });
  });

  await t.test('segment: refused, then published once created', async (t) => {
    const r0 = await draft(rule([award('coins')], { all: [member('vip')] }));
    t.same(problems(await publish(r0.id as string)), [{ param: 'definition.conditions.all[0].value', message: "No segment 'vip' in this environment." }]);
    t.equal((await api.post('/v1/segments', { name: 'vip', kind: 'static' }, idem())).status, 201);
    t.equal((await publish(r0.id as string)).status, 200);
  });

  await t.test('counter: refused (a typo would never fire: counter_not_ready), then published once created', async (t) => {
    const r0 = await draft(rule([award('coins')], { all: [{ path: 'customer.counters.plays', op: 'gte', value: 2 }] }));
    t.same(problems(await publish(r0.id as string)), [{ param: 'definition.conditions.all[0].path', message: "No counter 'plays' in this environment." }]);
    const ctr = await api.post('/v1/counter_definitions', { name: 'plays', event: 'play', window: { kind: 'lifetime' } }, idem());
    t.equal(ctr.status, 201);
    t.equal((await publish(r0.id as string)).status, 200);
  });

  await t.test('tier program: by key or by id, as tier.evaluate accepts', async (t) => {
    const r0 = await draft(rule([{ type: 'tier.evaluate', program: 'club' }]));
    t.same(problems(await publish(r0.id as string)), [{ param: 'definition.actions[0].program', message: "No tier program 'club' in this environment." }]);
    const levels = [
      { key: 'bronze', title: 'Bronze', threshold: 0 },
      { key: 'silver', title: 'Silver', threshold: 100 },
    ];
    const program = await api.post('/v1/tier_programs', { key: 'club', name: 'Club', currency: 'coins', basis: 'lifetime_earned', levels }, idem());
    t.equal(program.status, 201);
    t.equal((await publish(r0.id as string)).status, 200, 'by key');
    const byId = await draft(rule([{ type: 'tier.evaluate', program: program.body.id }]));
    t.equal((await publish(byId.id as string)).status, 200, 'by id');
  });

  await t.test('customer.tiers.<program key> in conditions and limit scopes names a tier program (by key) and its levels', async (t) => {
    // 'club' exists (levels bronze, silver): a typo in its key or a level key would never hold.
    const def = {
      ...rule([award('coins')], {
        all: [{ path: 'customer.tiers.clb', op: 'eq', value: 'silver' }, { path: 'customer.tiers.club', op: 'in', value: ['silver', 'silvr'] }],
      }),
      limits: [{ id: 'per_level', scope: ['customer', 'customer.tiers.nope'], max: 1 }],
    };
    const r0 = await draft(def);
    const r = await publish(r0.id as string);
    t.equal(r.status, 422);
    t.same(problems(r), [
      { param: 'definition.conditions.all[0].path', message: "No tier program with key 'clb' in this environment." },
      { param: 'definition.conditions.all[1].value[1]', message: "Tier program 'club' has no level 'silvr'." },
      { param: 'definition.limits[0].scope[1]', message: "No tier program with key 'nope' in this environment." },
    ]);
    const fixed = {
      ...rule([award('coins')], { all: [{ path: 'customer.tiers.club', op: 'in', value: ['silver', 'bronze'] }] }),
      limits: [{ id: 'per_level', scope: ['customer', 'customer.tiers.club'], max: 1 }],
    };
    t.equal((await api.patch(`/v1/rules/${r0.id}`, { definition: fixed })).status, 200);
    t.equal((await publish(r0.id as string)).status, 200);
  });

  await t.test('reward: a missing id is refused; an existing one (archived too) is published', async (t) => {
    const r0 = await draft(rule([{ type: 'reward.issue', reward_id: 'rw_missing' }]));
    t.same(problems(await publish(r0.id as string)), [{ param: 'definition.actions[0].reward_id', message: "No reward 'rw_missing' in this environment." }]);
    const mug = await api.post('/v1/rewards', { name: 'Mug', cost: 10, currency: 'coins', availability: 5 }, idem());
    t.equal(mug.status, 201);
    const edited = await api.patch(`/v1/rules/${r0.id}`, { definition: rule([{ type: 'reward.issue', reward_id: mug.body.id }]) });
    t.equal(edited.status, 200);
    t.equal((await publish(r0.id as string)).status, 200);
    // An archived reward exists (issuing it answers reward_unavailable at runtime): not a bad reference.
    t.equal((await api.delete(`/v1/rewards/${mug.body.id}`)).status, 204);
    const archived = await draft(rule([{ type: 'reward.issue', reward_id: mug.body.id }]));
    t.equal((await publish(archived.id as string)).status, 200, 'an archived reward is not missing');
  });

  await t.test('challenge: a missing id is refused; a draft challenge counts as existing', async (t) => {
    const r0 = await draft(rule([{ type: 'challenge.progress', challenge_id: 'chl_missing' }]));
    t.same(problems(await publish(r0.id as string)), [{ param: 'definition.actions[0].challenge_id', message: "No challenge 'chl_missing' in this environment." }]);
    const c = await api.post('/v1/challenges', { name: 'Three orders', qualifying: { event: 'order.completed' }, target: 3 }, idem());
    t.equal(c.status, 201);
    t.equal((await api.patch(`/v1/rules/${r0.id}`, { definition: rule([{ type: 'challenge.progress', challenge_id: c.body.id }]) })).status, 200);
    t.equal((await publish(r0.id as string)).status, 200);
  });

  await t.test("another environment's resources do not count", async (t) => {
    const other = (await signUp(anon)).server;
    t.equal((await other.post('/v1/currencies', { key: 'stars', name: 'Stars' }, idem())).status, 201);
    const r0 = await draft(rule([award('stars')]));
    t.same(problems(await publish(r0.id as string)), [{ param: 'definition.actions[0].currency', message: "No currency 'stars' in this environment." }]);
  });

  await t.test('rollback re-checks the version: a segment deleted since refuses it', async (t) => {
    const seg = await api.post('/v1/segments', { name: 'dormant', kind: 'static' }, idem());
    t.equal(seg.status, 201);
    const r0 = await draft(rule([award('coins')], { all: [member('dormant')] }));
    t.equal((await publish(r0.id as string)).status, 200, 'version 1 names the segment');
    t.equal((await api.patch(`/v1/rules/${r0.id}`, { definition: rule([award('coins')]) })).status, 200);
    const v2 = await publish(r0.id as string);
    t.match(v2.body, { active_version: { number: 2 } });
    // Only version 1 (not active, not the draft) names it: the segment may go.
    t.equal((await api.delete(`/v1/segments/${seg.body.id}`)).status, 204);
    const rb = await api.post(`/v1/rules/${r0.id}/rollback`, { number: 1 });
    t.equal(rb.status, 422);
    t.equal(rb.body.error.code, 'rule_invalid');
    t.same(problems(rb), [{ param: 'definition.conditions.all[0].value', message: "No segment 'dormant' in this environment." }]);
    const still = await api.get(`/v1/rules/${r0.id}`);
    t.match(still.body, { version: v2.body.version, active_version: { number: 2 } }, 'version 2 stays active');
    t.equal((await api.post(`/v1/rules/${r0.id}/rollback`, { number: 99 })).body.error.code, 'resource_not_found', 'an unknown number is still 404');
    t.equal((await api.post(`/v1/rules/${r0.id}/rollback`, { number: 2 })).status, 200, 'the active version: no change, no check');
    t.equal((await api.post('/v1/segments', { name: 'dormant', kind: 'static' }, idem())).status, 201);
    const again = await api.post(`/v1/rules/${r0.id}/rollback`, { number: 1 });
    t.equal(again.status, 200);
    t.match(again.body, { active_version: { number: 1 } });
  });

  await t.test('state comes before references: an archived rule is invalid_state', async (t) => {
    const r0 = await draft(rule([award('nowhere')]));
    t.equal((await api.post(`/v1/rules/${r0.id}/archive`)).status, 200);
    t.equal((await publish(r0.id as string)).body.error.code, 'invalid_state');
  });
});
