// The OpenAPI document against the service's real answers: a session walks through the API (an
// account, one of each resource, events single, sync and in a batch, every list, a customer's
// state and export, a match report and its review, change sets held and confirmed in a live
// environment) and EVERY answer is validated (Ajv, JSON Schema 2020-12) against the schema that
// GET /v1/openapi.json declares for its route and status: a success against the response's
// schema, an error against components.schemas.Error. An answer with a status the route does not
// document, an ETag or Idempotent-Replayed header the response does not declare (or a declared
// ETag missing), or a documented success response the walk never reached (outside the short list
// of those it cannot reach, each with its reason) fails. So does a 2xx response but 204 without a
// schema. A handler whose answer drifts from its declared schema fails here.
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import t from 'tap';
import { testIssuer } from '../fixtures/oidc/issuer.js';
import { type Client, idem, signUp, startForTest, uniqueName } from '../helpers/service.js';

type Json = any;

interface Operation {
  parameters?: Array<{ name: string; in: string }>;
  responses: Record<string, Json>;
}

/** Documented success responses the walk cannot reach, and why. */
const unreachable: Record<string, string> = {};

const now = (agoMs = 1000) => new Date(Date.now() - agoMs).toISOString();

t.test('every answer of a realistic session matches the schema /v1/openapi.json declares for it', async (t) => {
  // Every backfill runs as a job (202), so both of its answers are reached. An identity provider is
  // configured: a held change set is confirmed by a signed-in admin (a session), and an invitation
  // takes effect at the invitee's sign-in (without one, it could never and is refused: 501).
  const idp = await testIssuer(t);
  const { anon } = await startForTest(t, {
    env: { COUNTER_BACKFILL_INLINE_MAX: '0', OIDC_ISSUER: idp.issuer, OIDC_AUDIENCE: idp.audience, OIDC_JWKS_FILE: idp.jwksFile },
  });
  const tenant = await signUp(anon);
  const doc = (await anon.get('/v1/openapi.json')).body as Json;

  // Formats are not checked (a timestamp's pattern is); OpenAPI keywords are not JSON Schema's.
  const ajv = new Ajv2020({ strict: false, allErrors: true, formats: { 'date-time': true, email: true } });
  const validators = new Map<string, ValidateFunction>();
  /** A schema of the document, compiled with the document's components (its $refs point there). */
  const validatorOf = (key: string, schema: Json): ValidateFunction => {
    let v = validators.get(key);
    if (v === undefined) {
      v = ajv.compile({ ...schema, components: { schemas: doc.components.schemas } });
      validators.set(key, v);
    }
    return v;
  };

  const templates = Object.keys(doc.paths).map((p) => ({
    template: p,
    params: (p.match(/\{/g) ?? []).length,
    re: new RegExp(`^${p.replace(/\{[^}]+\}/g, '[^/]+')}$`),
  }));
  /** The documented path a concrete path answers to (literal segments win over {params}). */
  const templateOf = (path: string): string | undefined =>
    templates.filter((x) => x.re.test(path.split('?')[0]!)).sort((a, b) => a.params - b.params)[0]?.template;

  const exercised = new Set<string>();
  let checked = 0;

  /** Sends a request and checks its answer against the document; returns the answer. */
  const call = async (client: Client, method: string, path: string, body?: unknown, headers?: Record<string, string>) => {
    const res = await client.request(method, path, body, headers);
    const where = `${method} ${path} -> ${res.status}`;
    const template = templateOf(path);
    if (template === undefined) {
      t.fail(`${where}: no documented path`);
      return res;
    }
    const op = doc.paths[template][method.toLowerCase()] as Operation | undefined;
    if (op === undefined) {
      t.fail(`${where}: ${method} ${template} is not documented`);
      return res;
    }
    const status = String(res.status);
    const declared = op.responses[status];
    checked++;
    if (res.status >= 200 && res.status < 300) {
      if (declared === undefined) {
        t.fail(`${where}: status ${status} not documented for ${method} ${template}`, { body: res.body });
        return res;
      }
      exercised.add(`${method} ${template} ${status}`);
      const declaredHeaders = Object.keys(declared.headers ?? {});
      const etag = res.headers.get('etag') !== null;
      if (etag !== declaredHeaders.includes('ETag')) t.fail(`${where}: ${etag ? 'answers an undeclared ETag' : 'declares ETag but answers none'}`);
      if (res.headers.get('idempotent-replayed') !== null && !declaredHeaders.includes('Idempotent-Replayed')) {
        t.fail(`${where}: answers an undeclared Idempotent-Replayed`);
      }
      if (res.status === 204) {
        if (res.body !== undefined) t.fail(`${where}: a 204 with a body`);
        return res;
      }
      const v = validatorOf(`${method} ${template} ${status}`, declared.content['application/json'].schema);
      if (!v(res.body)) t.fail(`${where}: the body does not match its declared schema`, { errors: v.errors, body: res.body });
      return res;
    }
    // An error: documented as the default response (components.schemas.Error), or under its own status.
    const v = validatorOf('Error', { $ref: '#/components/schemas/Error' });
    if (!v(res.body)) t.fail(`${where}: the error body does not match components.schemas.Error`, { errors: v.errors, body: res.body });
    return res;
  };
  /** call() that also insists on one status. */
  const expect = async (status: number, client: Client, method: string, path: string, body?: unknown, headers?: Record<string, string>) => {
    const res = await call(client, method, path, body, headers);
    if (res.status !== status) t.fail(`${method} ${path}: expected ${status}, got ${res.status}`, { body: res.body });
    return res.body as Json;
  };

  await t.test('no 2xx response but 204 is without a schema', async (t) => {
    const missing: string[] = [];
    let total = 0;
    for (const [path, ops] of Object.entries<Json>(doc.paths)) {
      for (const [method, op] of Object.entries<Json>(ops)) {
        for (const [status, res] of Object.entries<Json>(op.responses)) {
          if (!/^2\d\d$/.test(status) || status === '204') continue;
          total++;
          if (res.content === undefined) missing.push(`${method.toUpperCase()} ${path} ${status}`);
        }
      }
    }
    t.ok(total > 100, `${total} success responses (2xx but 204), ${missing.length} without a schema`);
    t.same(missing, [], 'every one has a schema');
    const copies = Object.keys(doc.components.schemas).filter((k) => /(Input|Output)$/.test(k));
    t.same(copies, [], 'a named schema is one component, also where another named schema nests it');
  });

  await t.test('If-Match is declared where honoured; ETag and Idempotent-Replayed are declared', async (t) => {
    const ifMatch = (path: string, method: string) => (doc.paths[path][method] as Operation).parameters?.some((p) => p.name === 'If-Match' && p.in === 'header');
    for (const [path, method] of [
      ['/v1/customers/{id}', 'patch'],
      ['/v1/customers/{id}', 'delete'],
      ['/v1/rules/{id}', 'patch'],
      ['/v1/rules/{id}/publish', 'post'],
      ['/v1/rewards/{id}', 'patch'],
      ['/v1/rewards/{id}', 'delete'],
      ['/v1/segments/{id}', 'patch'],
      ['/v1/challenges/{id}', 'delete'],
      ['/v1/tier_programs/{id}', 'patch'],
      ['/v1/campaigns/{id}/activate', 'post'],
      ['/v1/environment_settings', 'patch'],
      ['/v1/counter_definitions/{id}', 'delete'],
    ] as const) {
      t.ok(ifMatch(path, method), `If-Match on ${method.toUpperCase()} ${path}`);
    }
    t.notOk(ifMatch('/v1/customers/{id}', 'get'), 'not on a read');
    t.match(doc.components.headers, { ETag: { schema: { type: 'string' } }, 'Idempotent-Replayed': { schema: { enum: ['true'] } } });
    t.same(doc.paths['/v1/customers'].post.responses['201'].headers, {
      'Request-Id': { $ref: '#/components/headers/Request-Id' },
      ETag: { $ref: '#/components/headers/ETag' },
      'Idempotent-Replayed': { $ref: '#/components/headers/Idempotent-Replayed' },
    });
    t.match(doc.components.schemas.Error.properties.error.properties.request_id.description, /replayed .* keeps the id of the request that was answered first/);
  });

  await t.test('bounds the server enforces are in the document', async (t) => {
    const body = (path: string) => doc.paths[path].post.requestBody.content['application/json'].schema;
    const batch = body('/v1/events').anyOf.find((s: Json) => s.properties?.events !== undefined);
    t.match(batch.properties.events, { minItems: 1, maxItems: 100 });
    t.equal(body('/v1/customers').properties.attributes.maxProperties, 100);
    t.match(body('/v1/ledger_entries').properties.amount, { type: 'integer', not: { const: 0 } });
    const expiry = body('/v1/rewards').properties.expiry_after;
    const pattern = new RegExp((expiry.anyOf ?? [expiry]).find((s: Json) => s.type === 'string').pattern);
    t.ok(pattern.test('30d') && pattern.test('12h'), 'expiry_after pattern takes 30d and 12h');
    t.notOk(pattern.test('10x') || pattern.test('0d'), 'and refuses 10x and 0d');
  });

  await t.test('a session through the API', async (t) => {
    const admin = tenant.admin;
    const api = tenant.server;
    const live = anon.with({ authorization: `Bearer ${tenant.pat}`, 'x-service-environment': tenant.liveEnv });
    const owner = anon.with({ authorization: `Bearer ${tenant.pat}` });

    // ---- account, organizations, keys, memberships
    const other = await expect(201, anon, 'POST', '/v1/auth/signup', { email: `${uniqueName('u')}@example.com`, organization_name: 'Other' }, idem());
    t.ok(other.token.token);
    await expect(201, owner, 'POST', '/v1/organizations', { name: 'Second org' }, idem());
    await expect(200, owner, 'GET', '/v1/organizations');
    await expect(200, owner, 'GET', `/v1/organizations/${tenant.orgId}/environments`);
    const sessionKey = await expect(
      201,
      admin,
      'POST',
      '/v1/api_keys',
      { kind: 'secret', name: 'sessions', scopes: ['customers:read', 'customer_sessions:write'] },
      idem(),
    );
    const pk = await expect(201, admin, 'POST', '/v1/api_keys', { kind: 'publishable', name: 'web', allowed_events: ['page.viewed'] }, idem());
    await expect(200, admin, 'GET', '/v1/api_keys');
    await expect(200, admin, 'POST', `/v1/api_keys/${pk.id}/revoke`, {});
    const members = `/v1/organizations/${tenant.orgId}/memberships`;
    await expect(200, owner, 'GET', members);
    const memberEmail = `${uniqueName('m')}@example.com`;
    const member = await expect(201, owner, 'POST', members, { email: memberEmail, role: 'viewer' }, idem());
    const signedIn = await expect(201, anon, 'POST', '/v1/auth/sessions', { id_token: await idp.sign({ sub: uniqueName('sub'), email: memberEmail, name: 'Member' }) });
    t.equal(signedIn.created, true, "the invited address's first sign-in");
    await expect(200, owner, 'PATCH', `${members}/${member.user_id}`, { role: 'editor' });
    await expect(204, owner, 'DELETE', `${members}/${member.user_id}`);

    // ---- catalog
    await expect(201, api, 'POST', '/v1/attribute_definitions', { key: 'country', type: 'string' }, idem());
    await expect(200, api, 'GET', '/v1/attribute_definitions');
    await expect(201, api, 'POST', '/v1/currencies', { key: 'coins', name: 'Coins', expiry_days: 365 }, idem());
    await expect(200, api, 'GET', '/v1/currencies');
    const tiers = await expect(
      201,
      api,
      'POST',
      '/v1/tier_programs',
      {
        key: 'rank',
        name: 'Rank',
        currency: 'coins',
        basis: 'lifetime_earned',
        levels: [
          { key: 'bronze', title: 'Bronze', threshold: 0 },
          { key: 'silver', title: 'Silver', threshold: 50 },
        ],
      },
      idem(),
    );
    await expect(200, api, 'GET', '/v1/tier_programs');
    await expect(200, api, 'GET', `/v1/tier_programs/${tiers.id}`);
    await expect(200, api, 'PATCH', `/v1/tier_programs/${tiers.id}`, { name: 'Rank!' }, { 'if-match': `"${tiers.version}"` });

    const vip = await expect(201, api, 'POST', '/v1/segments', { name: 'vip', kind: 'static' }, idem());
    const fans = await expect(
      201,
      api,
      'POST',
      '/v1/segments',
      { name: 'fans', kind: 'dynamic', condition: { path: 'customer.attributes.country', op: 'eq', value: 'DE' } },
      idem(),
    );
    await expect(200, api, 'GET', '/v1/segments');
    await expect(200, api, 'GET', `/v1/segments/${vip.id}`);
    await expect(200, api, 'PATCH', `/v1/segments/${fans.id}`, { description: 'From Germany' }, { 'if-match': `"${fans.version}"` });

    const campaign = await expect(201, api, 'POST', '/v1/campaigns', { name: 'Spring', budgets: [{ currency: 'coins', amount: 100000 }] }, idem());
    await expect(200, api, 'GET', '/v1/campaigns');
    await expect(200, api, 'GET', `/v1/campaigns/${campaign.id}`);
    const edited = await expect(200, api, 'PATCH', `/v1/campaigns/${campaign.id}`, { description: 'Spring sale' }, { 'if-match': `"${campaign.version}"` });
    await expect(200, api, 'POST', `/v1/campaigns/${campaign.id}/activate`, {}, { 'if-match': `"${edited.version}"` });
    await expect(200, api, 'POST', `/v1/campaigns/${campaign.id}/pause`, {});

    const rule = await expect(
      201,
      api,
      'POST',
      '/v1/rules',
      {
        name: 'Level points',
        definition: {
          schema: 'service.rule/v2',
          trigger: { kind: 'customer_event', event: 'level.completed' },
          limits: [{ id: 'daily', scope: ['customer'], max: 100 }],
          actions: [
            { type: 'points.award', currency: 'coins', amount: 30 },
            { type: 'item.grant', item: 'gem', quantity: 1 },
          ],
        },
      },
      idem(),
    );
    await expect(200, api, 'GET', '/v1/rules');
    await expect(200, api, 'GET', `/v1/rules/${rule.id}`);
    const patched = await expect(200, api, 'PATCH', `/v1/rules/${rule.id}`, { priority: 5 }, { 'if-match': `"${rule.version}"` });
    await expect(200, api, 'POST', `/v1/rules/${rule.id}/publish`, {}, { 'if-match': `"${patched.version}"` });
    await expect(200, api, 'GET', `/v1/rules/${rule.id}/versions`);
    await expect(200, api, 'POST', `/v1/rules/${rule.id}/simulate`, { event: { name: 'level.completed', properties: {} } });
    await expect(200, api, 'POST', `/v1/rules/${rule.id}/simulate`, { event: { name: 'other.event' } });
    const spare = await expect(
      201,
      api,
      'POST',
      '/v1/rules',
      {
        name: 'Spare',
        definition: { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: 'spare.done' }, actions: [{ type: 'item.grant', item: 'medal', quantity: 1 }] },
      },
      idem(),
    );
    await expect(200, api, 'POST', `/v1/rules/${spare.id}/publish`, {});
    await expect(200, api, 'POST', `/v1/rules/${spare.id}/pause`, {});
    await expect(200, api, 'POST', `/v1/rules/${spare.id}/resume`, {});
    await expect(200, api, 'POST', `/v1/rules/${spare.id}/rollback`, { number: 1 });
    await expect(200, api, 'POST', `/v1/rules/${spare.id}/archive`, {});

    const reward = await expect(201, api, 'POST', '/v1/rewards', { name: 'Mug', cost: 10, currency: 'coins', availability: 10, expiry_after: '30d' }, idem());
    await expect(200, api, 'GET', '/v1/rewards');
    await expect(200, api, 'GET', `/v1/rewards/${reward.id}`);
    await expect(200, api, 'PATCH', `/v1/rewards/${reward.id}`, { name: 'Big mug' }, { 'if-match': `"${reward.version}"` });
    const oldReward = await expect(201, api, 'POST', '/v1/rewards', { name: 'Old', cost: 0, currency: 'coins', availability: 1, expiry_after: null }, idem());
    await expect(204, api, 'DELETE', `/v1/rewards/${oldReward.id}`, undefined, { 'if-match': `"${oldReward.version}"` });

    const challenge = await expect(
      201,
      api,
      'POST',
      '/v1/challenges',
      {
        name: 'Play 2 ranked matches',
        qualifying: { event: 'match.completed', conditions: { path: 'event.properties.mode', op: 'eq', value: 'ranked' } },
        target: 2,
        contribution_key: 'event.properties.match_id',
        completion_actions: [{ type: 'points.award', currency: 'coins', amount: 100 }],
        status: 'active',
      },
      idem(),
    );
    await expect(200, api, 'GET', '/v1/challenges');
    await expect(200, api, 'GET', `/v1/challenges/${challenge.id}`);
    await expect(200, api, 'PATCH', `/v1/challenges/${challenge.id}`, { name: 'Play 2 ranked' }, { 'if-match': `"${challenge.version}"` });
    const explicit = await expect(201, api, 'POST', '/v1/challenges', { name: 'Opt in', qualifying: { event: 'quest.done' }, target: 1, enrollment: 'explicit', status: 'active' }, idem());
    const draft = await expect(201, api, 'POST', '/v1/challenges', { name: 'Draft', qualifying: { event: 'x.y' }, target: 1 }, idem());
    await expect(204, api, 'DELETE', `/v1/challenges/${draft.id}`, undefined, { 'if-match': `"${draft.version}"` });

    // ---- customers and events
    const customer = await expect(201, api, 'POST', '/v1/customers', { external_id: 'alice', attributes: { country: 'DE' } }, idem());
    const replay = await call(api, 'POST', '/v1/customers', { external_id: 'alice', attributes: { country: 'DE' } }, { 'idempotency-key': 'same-alice' });
    const replayed = await call(api, 'POST', '/v1/customers', { external_id: 'alice', attributes: { country: 'DE' } }, { 'idempotency-key': 'same-alice' });
    t.equal(replayed.headers.get('idempotent-replayed'), 'true', `a replay (first answer ${replay.status})`);
    await expect(200, api, 'GET', '/v1/customers');
    await expect(200, api, 'GET', '/v1/customers?external_id=alice');
    await expect(200, api, 'GET', `/v1/customers/${customer.id}`);
    const updated = await expect(200, api, 'PATCH', `/v1/customers/${customer.id}`, { attributes: { level: 3 } }, { 'if-match': `"${customer.version}"` });
    t.equal(updated.attributes.level, 3);

    await expect(202, api, 'POST', '/v1/events', { id: 'ev-1', name: 'level.completed', customer_id: 'alice', occurred_at: now(), properties: { level: 1 } });
    const syncEvent = { id: 'ev-2', name: 'level.completed', customer_id: 'alice', occurred_at: now(), properties: { level: 2 }, mode: 'sync' };
    const sync = await expect(200, api, 'POST', '/v1/events', syncEvent);
    t.ok(sync.effects.some((e: Json) => e.type === 'points.awarded'), 'the rule awarded points');
    const duplicate = await expect(200, api, 'POST', '/v1/events', syncEvent);
    t.equal(duplicate.duplicate, true, 'a repeat answers as the first, marked duplicate');
    const batch = await expect(207, api, 'POST', '/v1/events', {
      mode: 'sync',
      events: [
        { id: 'ev-3', name: 'match.completed', customer_id: 'alice', occurred_at: now(), properties: { mode: 'ranked', match_id: 'g1' } },
        { id: 'ev-4', name: 'match.completed', customer_id: 'alice', occurred_at: now(), properties: { mode: 'ranked', match_id: 'g2' } },
        { id: 'ev-5', name: 'Not A Name', customer_id: 'alice', occurred_at: now() },
        { id: 'ev-6', name: 'level.completed', customer_id: 'bob', occurred_at: now(), properties: { level: 9 } },
      ],
    });
    t.match(batch.data, [{ status: 'evaluated' }, { status: 'evaluated' }, { error: { code: 'validation_failed' } }, { status: 'evaluated' }]);
    const eventId = sync.id as string;
    await expect(200, api, 'GET', `/v1/events/${eventId}`);

    // Sends with a publishable key and a customer token answer the same shapes.
    const pk2 = await expect(201, admin, 'POST', '/v1/api_keys', { kind: 'publishable', name: 'web2', allowed_events: ['page.viewed'] }, idem());
    const browser = anon.with({ authorization: `Bearer ${pk2.token}` });
    await expect(202, browser, 'POST', '/v1/events', { id: 'pv-1', name: 'page.viewed', customer_id: 'alice', occurred_at: now() });

    // ---- ledger, rewards, segments, challenges of the customer
    await expect(201, api, 'POST', '/v1/ledger_entries', { customer_id: customer.id, currency: 'coins', amount: 500, reason: 'welcome' }, idem());
    await expect(201, api, 'POST', '/v1/ledger_entries', { customer_id: 'alice', currency: 'coins', amount: -5, reason: 'fee' }, idem());
    await expect(200, api, 'GET', `/v1/customers/${customer.id}/ledger_entries`);
    await expect(200, api, 'GET', `/v1/customers/${customer.id}/balances`);
    const issued = await expect(201, api, 'POST', '/v1/reward_issuances', { reward_id: reward.id, customer_id: 'alice' }, idem());
    const toCancel = await expect(201, api, 'POST', '/v1/reward_issuances', { reward_id: reward.id, customer_id: customer.id }, idem());
    await expect(200, api, 'GET', '/v1/reward_issuances');
    await expect(200, api, 'GET', `/v1/reward_issuances?customer_id=alice`);
    await expect(200, api, 'GET', `/v1/reward_issuances/${issued.id}`);
    await expect(200, api, 'POST', `/v1/reward_issuances/${issued.id}/redeem`, {});
    await expect(200, api, 'POST', `/v1/reward_issuances/${toCancel.id}/cancel`, { reason: 'changed mind' });

    await expect(201, api, 'POST', `/v1/segments/${vip.id}/members`, { customer_id: 'alice' }, idem());
    await expect(200, api, 'POST', `/v1/segments/${vip.id}/members`, { customer_id: customer.id }, idem());
    await expect(200, api, 'GET', `/v1/segments/${vip.id}/members`);

    await expect(201, api, 'POST', `/v1/challenges/${explicit.id}/enrollments`, { customer_id: 'alice' });
    await expect(200, api, 'POST', `/v1/challenges/${explicit.id}/enrollments`, { customer_id: customer.id });
    await expect(200, api, 'GET', `/v1/challenges/${explicit.id}/enrollments`);
    await expect(204, api, 'DELETE', `/v1/challenges/${explicit.id}/enrollments/alice`);
    await expect(200, api, 'GET', `/v1/challenges/${challenge.id}/progress`);
    await expect(200, api, 'POST', `/v1/challenges/${challenge.id}/progress/revoke`, { customer_id: 'alice', contribution: 'g2', reason: 'own goal' });
    await expect(200, api, 'POST', `/v1/challenges/${challenge.id}/reevaluate`, { customer_id: 'alice', reason: 'support ticket' });
    await expect(200, api, 'POST', '/v1/events', {
      id: 'ev-7',
      name: 'match.completed',
      customer_id: 'alice',
      occurred_at: now(),
      properties: { mode: 'ranked', match_id: 'g3' },
      mode: 'sync',
    });

    // ---- counters (the environment has events: created backfilling, backfilled by a job)
    const counter = await expect(201, api, 'POST', '/v1/counter_definitions', { name: 'levels', event: 'level.completed', window: { kind: 'lifetime' } }, idem());
    t.equal(counter.status, 'backfilling');
    await expect(202, api, 'POST', `/v1/counter_definitions/${counter.id}/backfill`);
    // The job's worker thread loads the domain on its first task: generous under a loaded machine.
    for (const until = Date.now() + 30_000; (await api.get(`/v1/counter_definitions/${counter.id}`)).body.status !== 'ready' && Date.now() < until; ) {
      await new Promise((r) => setTimeout(r, 50));
    }
    await expect(200, api, 'POST', `/v1/counter_definitions/${counter.id}/backfill`);
    await expect(200, api, 'GET', '/v1/counter_definitions');
    await expect(200, api, 'GET', `/v1/counter_definitions/${counter.id}`);
    const rolling = await expect(
      201,
      api,
      'POST',
      '/v1/counter_definitions',
      { name: 'weekly', event: 'level.completed', window: { kind: 'period', period: 'week' } },
      idem(),
    );
    const rollingNow = await expect(200, api, 'GET', `/v1/counter_definitions/${rolling.id}`);
    await expect(204, api, 'DELETE', `/v1/counter_definitions/${rolling.id}`, undefined, { 'if-match': `"${rollingNow.version}"` });

    // ---- the customer's views
    const state = await expect(200, api, 'GET', `/v1/customers/${customer.id}/state`);
    t.ok(state.inventory.length > 0 && state.segments.includes('vip') && state.segments.includes('fans'), 'state carries inventory and segments');
    const exported = await expect(200, api, 'GET', `/v1/customers/${customer.id}/export`);
    t.ok(exported.events.length > 0 && exported.ledger_entries.length > 0);
    await expect(201, api, 'POST', `/v1/customers/${customer.id}/aliases`, { alias: 'anon-1' }, idem());
    await expect(200, api, 'POST', `/v1/customers/${customer.id}/aliases`, { alias: 'anon-1' }, idem());
    const bob = (await expect(200, api, 'GET', '/v1/customers?external_id=bob')).data[0];
    const merged = await expect(201, api, 'POST', `/v1/customers/${customer.id}/aliases`, { alias: 'bob' }, idem());
    t.equal(merged.merged_from, bob.id, 'adding an external id as an alias merges its customer');
    const token = await expect(200, admin, 'POST', `/v1/customers/${customer.id}/client_token`, {});
    const sessions = anon.with({ authorization: `Bearer ${sessionKey.token}` });
    const minted = await expect(201, sessions, 'POST', '/v1/customer_sessions', { grant_type: 'secret_key', customer_id: 'alice' }, { 'idempotency-key': 'sess-1' });
    t.ok(minted.customer_token);
    const again = await expect(201, sessions, 'POST', '/v1/customer_sessions', { grant_type: 'secret_key', customer_id: 'alice' }, { 'idempotency-key': 'sess-1' });
    t.equal(again.customer_token, null, 'a replay shows no token');
    const asCustomer = anon.with({ authorization: `Bearer ${token.customer_token}` });
    await expect(200, asCustomer, 'GET', `/v1/customers/${customer.id}`);
    await expect(200, asCustomer, 'GET', `/v1/customers/${customer.id}/state`);
    await expect(200, asCustomer, 'GET', `/v1/customers/${customer.id}/balances`);

    // ---- change sets and match profiles: applied in the test environment
    const arena = {
      type: 'match_profile.create',
      key: 'arena',
      metrics: [{ key: 'kills', minimum: 0, maximum: 100, per_minute_maximum: 10 }, { key: 'score', minimum: 0, maximum: 100000 }],
      duration: { minimum_seconds: 60, maximum_seconds: 3600 },
      players: { minimum: 1, maximum: 10 },
      rate_limits: [{ window_seconds: 3600, max_matches: 5 }],
      outliers: { action: 'hold', hold_metrics: [{ key: 'score', above: 50000 }] },
    };
    const cs = await expect(201, admin, 'POST', '/v1/change_sets', { commands: [arena] }, idem());
    await expect(200, admin, 'GET', `/v1/change_sets/${cs.id}`);
    await expect(201, admin, 'POST', '/v1/change_set_applications', { change_set_id: cs.id }, idem());
    await expect(200, admin, 'GET', `/v1/change_sets/${cs.id}`);
    const profiles = await expect(200, api, 'GET', '/v1/match_profiles');
    await expect(200, api, 'GET', `/v1/match_profiles/${profiles.data[0].id}`);
    await expect(200, api, 'GET', '/v1/match_profiles/arena');

    // ... held and confirmed in the live environment (under autonomy limits)
    const settings = await expect(200, live, 'GET', '/v1/environment_settings');
    const set = await expect(200, live, 'PATCH', '/v1/environment_settings', { autonomy: 'limits' }, { 'if-match': `"${settings.version}"` });
    await expect(200, admin, 'GET', '/v1/environment_settings');
    const createLive = await expect(201, live, 'POST', '/v1/change_sets', { commands: [arena] }, idem());
    await expect(201, live, 'POST', '/v1/change_set_applications', { change_set_id: createLive.id }, idem());
    const archive = await expect(201, live, 'POST', '/v1/change_sets', { commands: [{ type: 'match_profile.archive', key: 'arena' }] }, idem());
    const held = await expect(202, live, 'POST', '/v1/change_set_applications', { change_set_id: archive.id }, idem());
    t.equal(held.status, 'awaiting_confirmation', `autonomy ${set.autonomy}`);
    // A held set is confirmed by a signed-in owner or admin: a session, not a PAT.
    const confirmerEmail = `${uniqueName('c')}@example.com`;
    await expect(201, owner, 'POST', members, { email: confirmerEmail, role: 'admin' }, idem());
    const confirmer = await expect(201, anon, 'POST', '/v1/auth/sessions', { id_token: await idp.sign({ sub: uniqueName('sub'), email: confirmerEmail }) });
    const confirming = anon.with({ authorization: `Bearer ${confirmer.token.token}`, 'x-service-environment': tenant.liveEnv });
    await expect(201, confirming, 'POST', `/v1/change_sets/${archive.id}/confirm`, undefined, idem());

    // ---- match results
    const at = Date.now();
    const report = (matchId: string, score: number) => ({
      profile: 'arena',
      match_id: matchId,
      started_at: new Date(at - 20 * 60_000).toISOString(),
      ended_at: new Date(at - 10 * 60_000).toISOString(),
      players: [
        { customer: { external_id: 'alice' }, metrics: { kills: 5, score }, won: true },
        { customer: { external_id: 'carol' }, metrics: { kills: 120, score: 10 }, won: false },
      ],
    });
    const match = await expect(201, api, 'POST', '/v1/match_results', report('m-1', 1000));
    await expect(200, api, 'POST', '/v1/match_results', report('m-1', 1000));
    const heldMatch = await expect(201, api, 'POST', '/v1/match_results', report('m-2', 60000));
    await expect(200, api, 'GET', '/v1/match_results');
    await expect(200, api, 'GET', '/v1/match_results?status=held');
    await expect(200, api, 'GET', `/v1/match_results/${match.id}`);
    await expect(200, api, 'GET', '/v1/match_results/m-2');
    const heldPlayer = heldMatch.players.find((p: Json) => p.status === 'held');
    t.ok(heldPlayer, 'a player is held for review');
    await expect(200, admin, 'POST', `/v1/match_result_players/${heldPlayer.id}/reviews`, { decision: 'admit', reason: 'checked the replay' }, idem());

    // ---- test clock, deletes
    await expect(200, api, 'GET', '/v1/test_clock');
    await expect(200, api, 'POST', '/v1/test_clock/advance', { seconds: 3600 });
    await expect(204, api, 'DELETE', `/v1/segments/${vip.id}/members/alice`);
    await expect(204, api, 'DELETE', `/v1/segments/${fans.id}`);
    await expect(200, api, 'POST', `/v1/campaigns/${campaign.id}/end`, {});
    await expect(204, api, 'DELETE', `/v1/campaigns/${campaign.id}`);
    const doomed = await expect(201, api, 'POST', '/v1/customers', { external_id: 'doomed' }, idem());
    await expect(204, api, 'DELETE', `/v1/customers/${doomed.id}`, undefined, { 'if-match': `"${doomed.version}"` });

    // ---- errors answer the Error schema, a replayed one too
    await call(api, 'GET', '/v1/customers/cust_nope');
    await call(api, 'PATCH', `/v1/customers/${customer.id}`, { attributes: { a: 1 } }, { 'if-match': '"1"' });
    const first = await call(api, 'POST', '/v1/segments', { name: 'vip', kind: 'static' }, { 'idempotency-key': 'dup-vip' });
    const second = await call(api, 'POST', '/v1/segments', { name: 'vip', kind: 'static' }, { 'idempotency-key': 'dup-vip' });
    t.equal(second.headers.get('idempotent-replayed'), 'true');
    t.equal(second.body.error.request_id, first.body.error.request_id, 'a replayed error keeps the first request id (documented)');
    t.not(second.headers.get('request-id'), second.body.error.request_id);
  });

  await t.test('every documented success response was answered and matched its schema', async (t) => {
    const notReached: string[] = [];
    for (const [path, ops] of Object.entries<Json>(doc.paths)) {
      if (!path.startsWith('/v1/') || path === '/v1/openapi.json') continue;
      for (const [method, op] of Object.entries<Json>(ops)) {
        for (const status of Object.keys(op.responses)) {
          if (!/^2\d\d$/.test(status)) continue;
          const key = `${method.toUpperCase()} ${path} ${status}`;
          if (!exercised.has(key) && !(key in unreachable)) notReached.push(key);
        }
      }
    }
    t.same(notReached, [], 'none left out (or listed in `unreachable` with the reason)');
    t.ok(checked > 140, `${checked} answers checked`);
  });
});
