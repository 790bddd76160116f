// Black-box API tests of rules: create (idempotent, rule_invalid with every problem), list filters,
// get, PATCH with If-Match, the status machine (publish, pause, resume, archive), versions paging,
// rollback, simulate traces, and isolation between environments.
import t from 'tap';
import { idem, signUp, startForTest } from '../helpers/service.js';

const definition = (minTotal: number, amount = 10) => ({
  schema: 'service.rule/v2',
  trigger: { kind: 'customer_event', event: 'order.completed' },
  trust: { minimum: 'merchant_asserted' },
  conditions: { all: [{ path: 'event.properties.total', op: 'gte', value: minTotal }] },
  actions: [{ type: 'points.award', currency: 'points', amount }],
});

t.test('rules', async (t) => {
  const { anon } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;

  let ruleId = '';
  // Publish refuses a definition naming a currency the environment lacks: the rules award 'points'.
  t.equal((await api.post('/v1/currencies', { key: 'points', name: 'Points' }, idem())).status, 201);
  // Rules join a campaign through campaign_id, which must name a campaign of the environment.
  const camp1 = (await api.post('/v1/campaigns', { name: 'Campaign 1' }, idem())).body.id as string;
  const camp2 = (await api.post('/v1/campaigns', { name: 'Campaign 2' }, idem())).body.id as string;

  await t.test('create is idempotent and answers a draft', async (t) => {
    const key = idem();
    const body = { name: 'Big orders', definition: definition(10), priority: 5, campaign_id: camp1 };
    const r = await api.post('/v1/rules', body, key);
    t.equal(r.status, 201);
    t.match(r.body, {
      id: /^rule_/,
      name: 'Big orders',
      campaign_id: camp1,
      status: 'draft',
      priority: 5,
      active_version: null,
      draft_definition: definition(10),
      version: 1,
      created_at: String,
      updated_at: String,
    });
    t.equal(r.headers.get('etag'), '"1"');
    ruleId = r.body.id;
    const again = await api.post('/v1/rules', body, key);
    t.equal(again.status, 201);
    t.same(again.body, r.body, 'replayed, not created twice');
    const reused = await api.post('/v1/rules', { ...body, name: 'Other' }, key);
    t.equal(reused.body.error.code, 'idempotency_key_reused');
    t.equal((await api.post('/v1/rules', body)).body.error.code, 'idempotency_key_required');
    const list = await api.get('/v1/rules');
    t.equal(list.body.data.length, 1);
  });

  await t.test('an invalid definition is 422 rule_invalid naming every problem', async (t) => {
    const bad = {
      schema: 'service.rule/v2',
      trigger: { kind: 'customer_event', event: 'order.completed' },
      conditions: { all: [{ path: 'x.y', op: 'eq', value: 1 }, { path: 'event.properties.total', op: 'nope', value: 1 }] },
      actions: [{ type: 'points.award', currency: 'points' }],
    };
    const r = await api.post('/v1/rules', { name: 'Bad', definition: bad }, idem());
    t.equal(r.status, 422);
    t.equal(r.body.error.code, 'rule_invalid');
    t.ok(Array.isArray(r.body.error.details) && r.body.error.details.length >= 3, JSON.stringify(r.body.error.details));
    t.equal(r.body.error.param, r.body.error.details[0].param, 'param names the first problem');
    const params = r.body.error.details.map((d: { param: string }) => d.param);
    t.ok(params.includes('definition.conditions.all[0].path'), 'names the unknown path');
    t.ok(
      params.some((p: string) => p.startsWith('definition.conditions.all[1]')),
      'names the unknown operator',
    );
    t.ok(
      params.some((p: string) => p.startsWith('definition.actions[0]')),
      'names the action without an amount',
    );
    for (const d of r.body.error.details) t.type(d.message, 'string');
    const missing = await api.post('/v1/rules', { name: 'No definition' }, idem());
    t.equal(missing.body.error.code, 'validation_failed');
    t.equal(missing.body.error.param, 'definition');
  });

  await t.test('rule_invalid params are request fields: the definition travels in `definition`', async (t) => {
    const base = definition(1);
    const refused = async (def: unknown) => {
      const r = await api.post('/v1/rules', { name: 'Refused', definition: def }, idem());
      t.equal(r.status, 422);
      t.equal(r.body.error.code, 'rule_invalid');
      return r.body.error as { param: string; message: string; details: Array<{ param: string; message: string }> };
    };
    const scope = await refused({ ...base, limits: [{ id: 'l', scope: ['customer.counters.x'], max: 0 }] });
    t.same(
      scope.details.map((d) => d.param),
      ['definition.limits[0].scope[0]', 'definition.limits[0].max'],
    );
    t.equal(scope.param, 'definition.limits[0].scope[0]');
    t.match(scope.message, /^The rule definition is not valid: definition\.limits\[0\]\.scope\[0\]: /);
    t.same((await refused('x')).details.map((d) => d.param), ['definition'], 'a document that is not an object');
    t.same((await refused({ ...base, schema: 'service.rule/v9' })).details.map((d) => d.param), ['definition.schema']);
    // Messages that read right (trust without minimum; an empty in list).
    const trust = await refused({ ...base, trust: {} });
    t.same(trust.details, [{ param: 'definition.trust.minimum', message: 'minimum is required; use one of client_reported, merchant_asserted (lowest first).' }]);
    const empty = await refused({ ...base, conditions: { path: 'event.properties.x', op: 'in', value: [] } });
    t.match(empty.details, [{ param: 'definition.conditions.value', message: /got an empty array\.$/ }]);
  });

  await t.test('a trust minimum no event carries (service_verified) is refused, in rules and in simulate', async (t) => {
    const r = await api.post('/v1/rules', { name: 'Never', definition: { ...definition(1), trust: { minimum: 'service_verified' } } }, idem());
    t.equal(r.status, 422);
    t.match(r.body.error, {
      code: 'rule_invalid',
      param: 'definition.trust.minimum',
      details: [{ param: 'definition.trust.minimum', message: /^No event carries trust 'service_verified' \(events are client_reported or merchant_asserted\)/ }],
    });
    const sim = await api.post(`/v1/rules/${ruleId}/simulate`, { event: { name: 'order.completed', properties: {}, trust: 'service_verified' } });
    t.equal(sim.status, 400);
    t.match(sim.body.error, { code: 'validation_failed', param: 'event.trust' });
  });

  await t.test('PATCH edits the draft with If-Match; a stale version is stale_write', async (t) => {
    const r = await api.patch(`/v1/rules/${ruleId}`, { name: 'Bigger orders', definition: definition(20) }, { 'if-match': '"1"' });
    t.equal(r.status, 200);
    t.match(r.body, { name: 'Bigger orders', version: 2, draft_definition: definition(20), status: 'draft' });
    t.equal(r.headers.get('etag'), '"2"');
    const stale = await api.patch(`/v1/rules/${ruleId}`, { priority: 9 }, { 'if-match': '"1"' });
    t.equal(stale.status, 409);
    t.equal(stale.body.error.code, 'stale_write');
    const invalid = await api.patch(`/v1/rules/${ruleId}`, { definition: { schema: 'service.rule/v9' } }, { 'if-match': '"2"' });
    t.equal(invalid.body.error.code, 'rule_invalid');
    const empty = await api.patch(`/v1/rules/${ruleId}`, {});
    t.equal(empty.body.error.code, 'validation_failed');
    t.equal((await api.get(`/v1/rules/${ruleId}`)).body.version, 2, 'refused edits changed nothing');
  });

  await t.test('the status machine: publish, pause, resume, archive and invalid transitions', async (t) => {
    t.equal((await api.post(`/v1/rules/${ruleId}/pause`)).body.error.code, 'invalid_state', 'a draft cannot be paused');
    t.equal((await api.post(`/v1/rules/${ruleId}/resume`)).body.error.code, 'invalid_state', 'a draft cannot be resumed');
    const p = await api.post(`/v1/rules/${ruleId}/publish`);
    t.equal(p.status, 200);
    t.match(p.body, { status: 'published', version: 3, draft_definition: null, active_version: { id: /^rv_/, number: 1, definition: definition(20) } });
    const again = await api.post(`/v1/rules/${ruleId}/publish`);
    t.equal(again.status, 409, 'nothing changed since the active version');
    t.equal(again.body.error.code, 'invalid_state');
    t.equal((await api.post(`/v1/rules/${ruleId}/resume`)).body.error.code, 'invalid_state', 'a published rule cannot be resumed');
    const paused = await api.post(`/v1/rules/${ruleId}/pause`);
    t.match(paused.body, { status: 'paused', version: 4 });
    t.equal((await api.post(`/v1/rules/${ruleId}/pause`)).body.error.code, 'invalid_state');
    const resumed = await api.post(`/v1/rules/${ruleId}/resume`);
    t.match(resumed.body, { status: 'published', version: 5 });
    // Two more versions: edit and publish twice.
    await api.patch(`/v1/rules/${ruleId}`, { definition: definition(30) });
    const v2 = await api.post(`/v1/rules/${ruleId}/publish`);
    t.match(v2.body, { status: 'published', active_version: { number: 2 } });
    await api.patch(`/v1/rules/${ruleId}`, { definition: definition(40) });
    const v3 = await api.post(`/v1/rules/${ruleId}/publish`, {}, { 'if-match': `"${v2.body.version + 1}"` });
    t.match(v3.body, { active_version: { number: 3, definition: definition(40) } });
    const stalePublish = await api.post(`/v1/rules/${ruleId}/pause`, {}, { 'if-match': '"1"' });
    t.equal(stalePublish.body.error.code, 'stale_write');
  });

  await t.test('versions page newest first; rollback activates an earlier number', async (t) => {
    const first = await api.get(`/v1/rules/${ruleId}/versions?limit=2`);
    t.equal(first.status, 200);
    t.same(
      first.body.data.map((v: { number: number }) => v.number),
      [3, 2],
    );
    t.match(first.body.data[0], { id: /^rv_/, rule_id: ruleId, number: 3, definition: definition(40), created_by: String, created_at: String });
    t.equal(first.body.has_more, true);
    const rest = await api.get(`/v1/rules/${ruleId}/versions?limit=2&cursor=${first.body.next_cursor}`);
    t.same(
      rest.body.data.map((v: { number: number }) => v.number),
      [1],
    );
    t.equal(rest.body.has_more, false);
    t.equal((await api.get(`/v1/rules/${ruleId}/versions?cursor=abc`)).body.error.code, 'invalid_cursor');

    const before = (await api.get(`/v1/rules/${ruleId}`)).body;
    const rb = await api.post(`/v1/rules/${ruleId}/rollback`, { number: 1 });
    t.equal(rb.status, 200);
    t.match(rb.body, { status: 'published', version: before.version + 1, active_version: { number: 1, definition: definition(20) } });
    const unknown = await api.post(`/v1/rules/${ruleId}/rollback`, { number: 99 });
    t.equal(unknown.status, 404);
    t.equal(unknown.body.error.code, 'resource_not_found');
    t.equal((await api.post(`/v1/rules/${ruleId}/rollback`, { number: 0 })).body.error.code, 'validation_failed');
    t.equal((await api.get(`/v1/rules/${ruleId}/versions`)).body.data.length, 3, 'rollback adds no version');
  });

  await t.test('simulate traces the rule against an event and changes nothing', async (t) => {
    // The rule is in Campaign 1: while that is a draft, events skip it with campaign_inactive
    // (test/api/campaigns.test.ts); simulate still traces the definition and says it is not live.
    const inactive = await api.post(`/v1/rules/${ruleId}/simulate`, { event: { name: 'order.completed', properties: { total: 25 } } });
    t.match(inactive.body, {
      plan: [{ type: 'points.award', amount: 10 }],
      trace: {
        definition: { draft: false, version: 1 },
        live: false,
        not_live: [{ reason: 'campaign_inactive', detail: 'The campaign is draft.', param: 'campaign_id' }],
        outcome: { fired: true },
      },
    });
    t.equal((await api.post(`/v1/campaigns/${camp1}/activate`, {})).status, 200);
    const before = (await api.get(`/v1/rules/${ruleId}`)).body;
    const fire = await api.post(`/v1/rules/${ruleId}/simulate`, { event: { name: 'order.completed', properties: { total: 25 } } });
    t.equal(fire.status, 200);
    t.equal(fire.body.simulated, true);
    t.same(fire.body.plan, [{ type: 'points.award', currency: 'points', amount: 10 }], 'the active version (total >= 20) fires');
    t.match(fire.body.trace, { definition: { draft: false, version: 1 }, live: true, not_live: [], outcome: { fired: true, actions: [{ type: 'points.award' }], limit_keys: [] }, steps: Array });
    const cond = fire.body.trace.steps.find((s: { check: string }) => s.check === 'condition');
    t.match(cond, { at: 'conditions.all[0]', path: 'event.properties.total', op: 'gte', expected: 20, actual: 25, found: true, pass: true });

    const skip = await api.post(`/v1/rules/${ruleId}/simulate`, { event: { name: 'order.completed', properties: { total: 5 } }, customer_id: 'someone' });
    t.equal(skip.status, 200);
    t.same(skip.body.plan, []);
    t.match(skip.body.trace.outcome, { fired: false, reason: 'conditions_not_met' });
    const low = await api.post(`/v1/rules/${ruleId}/simulate`, { event: { name: 'order.completed', properties: { total: 50 }, trust: 'client_reported' } });
    t.match(low.body.trace.outcome, { fired: false, reason: 'trust_below_minimum' });
    const other = await api.post(`/v1/rules/${ruleId}/simulate`, { event: { name: 'signup', properties: {} } });
    t.match(other.body.trace.outcome, { fired: false, reason: 'trigger_mismatch' });

    // A draft edit is what simulate runs when there is one.
    await api.patch(`/v1/rules/${ruleId}`, { definition: definition(1, 3) });
    const draft = await api.post(`/v1/rules/${ruleId}/simulate`, { event: { name: 'order.completed', properties: { total: 5 } } });
    t.same(draft.body.plan, [{ type: 'points.award', currency: 'points', amount: 3 }]);
    t.match(draft.body.trace, { definition: { draft: true, version: null }, live: false, not_live: [{ reason: 'draft_not_published', param: 'draft_definition' }] });
    t.equal((await api.post(`/v1/rules/${ruleId}/simulate`, { event: { properties: {} } })).body.error.code, 'validation_failed');
    t.equal((await api.get(`/v1/rules/${ruleId}`)).body.version, before.version + 1, 'only the PATCH changed the rule');
  });

  await t.test('list filters by status and campaign_id and pages', async (t) => {
    const second = (await api.post('/v1/rules', { name: 'Second', definition: definition(1) }, idem())).body;
    const third = (await api.post('/v1/rules', { name: 'Third', definition: definition(1), campaign_id: camp2 }, idem())).body;
    const drafts = await api.get('/v1/rules?status=draft');
    t.same(drafts.body.data.map((r: { id: string }) => r.id).sort(), [second.id, third.id].sort());
    const published = await api.get('/v1/rules?status=published');
    t.same(
      published.body.data.map((r: { id: string }) => r.id),
      [ruleId],
    );
    const camp = await api.get(`/v1/rules?campaign_id=${camp2}`);
    t.same(
      camp.body.data.map((r: { id: string }) => r.id),
      [third.id],
    );
    const page = await api.get('/v1/rules?limit=2');
    t.equal(page.body.data.length, 2);
    t.equal(page.body.has_more, true);
    const rest = await api.get(`/v1/rules?limit=2&cursor=${page.body.next_cursor}`);
    t.equal(rest.body.data.length, 1);
    t.equal((await api.get('/v1/rules?status=nope')).body.error.code, 'validation_failed');

    // Archive: final; edits, publish and rollback are invalid_state afterwards.
    const archived = await api.post(`/v1/rules/${second.id}/archive`);
    t.match(archived.body, { status: 'archived', version: 2 });
    t.equal((await api.post(`/v1/rules/${second.id}/archive`)).body.error.code, 'invalid_state');
    t.equal((await api.patch(`/v1/rules/${second.id}`, { name: 'x' })).body.error.code, 'invalid_state');
    t.equal((await api.post(`/v1/rules/${second.id}/publish`)).body.error.code, 'invalid_state');
    t.equal((await api.post(`/v1/rules/${second.id}/rollback`, { number: 1 })).body.error.code, 'invalid_state');
    t.equal((await api.post(`/v1/rules/${third.id}/rollback`, { number: 1 })).body.error.code, 'invalid_state', 'a draft has no version to roll back to');
  });

  await t.test('scopes, unknown ids and other environments are 404', async (t) => {
    t.equal((await api.get('/v1/rules/rule_nope')).body.error.code, 'resource_not_found');
    t.equal((await api.post('/v1/rules/rule_nope/publish')).status, 404);
    const live = tenant.admin.with({ 'x-service-environment': tenant.liveEnv });
    const cases: Array<[string, string, unknown]> = [
      ['GET', `/v1/rules/${ruleId}`, undefined],
      ['GET', `/v1/rules/${ruleId}/versions`, undefined],
      ['PATCH', `/v1/rules/${ruleId}`, { name: 'hijack' }],
      ['POST', `/v1/rules/${ruleId}/publish`, {}],
      ['POST', `/v1/rules/${ruleId}/pause`, {}],
      ['POST', `/v1/rules/${ruleId}/archive`, {}],
      ['POST', `/v1/rules/${ruleId}/rollback`, { number: 1 }],
      ['POST', `/v1/rules/${ruleId}/simulate`, { event: { name: 'order.completed', properties: {} } }],
    ];
    for (const [method, path, body] of cases) {
      const r = await live.request(method, path, body);
      t.equal(r.status, 404, `${method} ${path}`);
      t.equal(r.body.error.code, 'resource_not_found', `${method} ${path}`);
    }
    t.equal((await live.get('/v1/rules')).body.data.length, 0);
    t.equal((await tenant.admin.get(`/v1/rules/${ruleId}`)).status, 200, 'a PAT reads it in its environment');
    t.equal((await anon.get('/v1/rules')).status, 401);
  });

  // Simulate compiles a rule once per stored record and reuses the plan: every change of the rule
  // must show in the next simulate.
  await t.test('simulate follows every change: draft edit (If-Match), publish, rollback', async (t) => {
    const sim = async (total: number) => {
      const r = await api.post(`/v1/rules/${id}/simulate`, { event: { name: 'order.completed', properties: { total } } });
      t.equal(r.status, 200);
      return r.body.plan as unknown[];
    };
    const points = (amount: number) => [{ type: 'points.award', currency: 'points', amount }];
    const created = await api.post('/v1/rules', { name: 'Follows changes', definition: definition(10, 1) }, idem());
    const id = created.body.id as string;
    t.same(await sim(15), points(1), 'the draft as created');
    t.same(await sim(15), points(1), 'again, from the same record');

    const edited = await api.patch(`/v1/rules/${id}`, { definition: definition(20, 2) }, { 'if-match': `"${created.body.version}"` });
    t.equal(edited.status, 200);
    t.same(await sim(15), [], 'the edited draft: 15 is below its minimum');
    t.same(await sim(25), points(2));

    const v1 = await api.post(`/v1/rules/${id}/publish`, {}, { 'if-match': `"${edited.body.version}"` });
    t.match(v1.body, { status: 'published', draft_definition: null, active_version: { number: 1 } });
    t.same(await sim(25), points(2), 'version 1');

    // Edit and publish with no simulate in between: the last plan used was version 1's.
    const edited2 = await api.patch(`/v1/rules/${id}`, { definition: definition(5, 3) }, { 'if-match': `"${v1.body.version}"` });
    const v2 = await api.post(`/v1/rules/${id}/publish`, {}, { 'if-match': `"${edited2.body.version}"` });
    t.match(v2.body, { active_version: { number: 2 }, draft_definition: null });
    t.same(await sim(7), points(3), 'version 2');

    const rb = await api.post(`/v1/rules/${id}/rollback`, { number: 1 }, { 'if-match': `"${v2.body.version}"` });
    t.match(rb.body, { active_version: { number: 1 } });
    t.same(await sim(7), [], 'rolled back to version 1: 7 is below its minimum');
    t.same(await sim(25), points(2));

    const stale = await api.patch(`/v1/rules/${id}`, { definition: definition(1, 9) }, { 'if-match': `"${v2.body.version}"` });
    t.equal(stale.body.error.code, 'stale_write');
    t.same(await sim(7), [], 'a refused edit changes nothing');
  });

  await t.test("simulate reports the rule's status and its campaign's state beside a trace of the definition", async (t) => {
    // A draft rule in a draft campaign: nothing is live, and the definition can still be tried.
    const camp = (await api.post('/v1/campaigns', { name: 'Preparing' }, idem())).body;
    const r = (await api.post('/v1/rules', { name: 'Prepared', definition: definition(1, 7), campaign_id: camp.id }, idem())).body;
    const sim = async () => (await api.post(`/v1/rules/${r.id}/simulate`, { event: { name: 'order.completed', properties: { total: 5 } } })).body;
    const prepared = await sim();
    t.same(prepared.plan, [{ type: 'points.award', currency: 'points', amount: 7 }], 'the draft of a draft campaign is dry-run');
    t.match(prepared.trace, {
      definition: { draft: true, version: null },
      live: false,
      not_live: [
        { reason: 'rule_not_published', param: 'status' },
        { reason: 'campaign_inactive', detail: 'The campaign is draft.', param: 'campaign_id' },
      ],
      outcome: { fired: true },
    });
    t.match(prepared.trace.steps[1], { check: 'campaign', pass: false }, 'the campaign step stays, as information');
    // Published and running: live. Paused: still traced, not live.
    t.equal((await api.post(`/v1/campaigns/${camp.id}/activate`, {})).status, 200);
    t.equal((await api.post(`/v1/rules/${r.id}/publish`)).status, 200);
    t.match((await sim()).trace, { definition: { draft: false, version: 1 }, live: true, not_live: [] });
    t.equal((await api.post(`/v1/rules/${r.id}/pause`)).status, 200);
    const paused = await sim();
    t.same(paused.plan, [{ type: 'points.award', currency: 'points', amount: 7 }]);
    t.match(paused.trace, { live: false, not_live: [{ reason: 'rule_paused', param: 'status' }] });
    t.equal((await api.post(`/v1/rules/${r.id}/archive`)).status, 200);
    t.match((await sim()).trace, { live: false, not_live: [{ reason: 'rule_archived' }], outcome: { fired: true } });
  });

  await t.test('a draft edited back to the active version (keys in another order) is nothing to publish', async (t) => {
    const id = (await api.post('/v1/rules', { name: 'same again', definition: definition(40) }, idem())).body.id as string;
    t.equal((await api.post(`/v1/rules/${id}/publish`)).status, 200);
    const reordered = Object.fromEntries(Object.entries(definition(40) as Record<string, unknown>).reverse());
    const edited = await api.patch(`/v1/rules/${id}`, { definition: reordered });
    t.equal(edited.status, 200);
    t.equal(edited.body.draft_definition, null, 'no unpublished edit: the draft is the active document');
    const unchanged = await api.post(`/v1/rules/${id}/publish`);
    t.match([unchanged.status, unchanged.body.error?.code], [409, 'invalid_state'], 'no new version for the same document');
    t.equal((await api.get(`/v1/rules/${id}/versions`)).body.data.length, 1, 'still one version');
    t.equal((await api.patch(`/v1/rules/${id}`, { definition: definition(41) })).status, 200);
    t.match((await api.post(`/v1/rules/${id}/publish`)).body, { active_version: { number: 2 } }, 'a real change publishes');
  });
});
