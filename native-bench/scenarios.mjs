// The bench scenarios as data: what each sends, to which servers, and the Foundation targets.
// Later issues append objects here (e.g. match results with 4 and 16 players, issue 4 item 6);
// run.mjs knows only the kinds 'load', 'memory' and 'restart'. Never put timing logic here.
import { batchJson, eventJson } from './templates.mjs';

/**
 * @typedef {import('./templates.mjs').RequestTemplate} RequestTemplate
 * @typedef {{server: 'bare' | 'service', auth: {osk: string, opat: string, envId: string} | null,
 *   api: ((method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
 *     Promise<{status: number, json: any}>) | null, vars: Record<string, any>}} ScenarioCtx
 * @typedef {{
 *   name: string, title: string, kind: 'load' | 'memory' | 'restart',
 *   servers: Array<'bare' | 'service'>,
 *   loop?: 'closed' | 'open',
 *   rate?: number | ((measured: (server: string, scenario: string) => any) => number | null),
 *   connections?: number,
 *   customers?: number,
 *   requests: (ctx: ScenarioCtx) => RequestTemplate[],
 *   setup?: (ctx: ScenarioCtx) => Promise<Record<string, any>>,
 *   expect: {bare: number, service: number}, failBody?: string,
 *   eventsPerRequest?: number, unit?: 'requests' | 'events',
 *   ratioOf?: 'rps' | 'events_per_s' | 'p99_ms',
 *   targets: Array<{metric: string, op: '>=' | '<=', value: number}>,
 *   wrk?: boolean, events?: number, batchSize?: number, snapshotEveryMs?: number,
 *   isolated?: boolean, note?: string, baseline?: string,
 * }} Scenario
 */

/** A 207 answer holding this (an item's error object) counts as an error for that request. */
const itemError = '"error":{';

/** @param {ScenarioCtx} ctx @param {string} [key] a secret key other than the tenant's */
function jsonHeaders(ctx, key) {
  /** @type {Record<string, string>} */
  const h = { 'Content-Type': 'application/json' };
  if (key) h.Authorization = `Bearer ${key}`;
  else if (ctx.auth) h.Authorization = `Bearer ${ctx.auth.osk}`;
  return h;
}

/**
 * The Core issue's workload: a second tenant whose test environment has a currency, a tier
 * program, 3 published rules on the bench event (one reading a counter) and an active challenge,
 * so every event runs rules, counters, challenge progress and tier placement. Returns its key.
 * @param {ScenarioCtx} ctx
 */
async function programsSetup(ctx) {
  if (ctx.vars.programsKey) return {};
  const api = /** @type {NonNullable<ScenarioCtx['api']>} */ (ctx.api);
  const uuid = () => crypto.randomUUID();
  const must = async (what, r) => {
    const res = await r;
    if (res.status < 200 || res.status > 299) throw new Error(`${what} answered ${res.status}: ${JSON.stringify(res.json)}`);
    return res.json;
  };
  const id = uuid().slice(0, 8);
  const signup = await must(
    'signup',
    api('POST', '/v1/auth/signup', { email: `bench-programs-${id}@example.com`, name: 'Bench', organization_name: `Programs ${id}` }, { 'Idempotency-Key': uuid() }),
  );
  const envId = signup.environments.find((e) => e.name === 'test').id;
  const admin = { Authorization: `Bearer ${signup.token.token}`, 'X-Service-Environment': envId };
  const key = await must('api key', api('POST', '/v1/api_keys', { kind: 'secret', name: 'bench-programs' }, { ...admin, 'Idempotency-Key': uuid() }));
  const h = { Authorization: `Bearer ${key.token}` };
  const post = (what, path, body) => must(what, api('POST', path, body, { ...h, 'Idempotency-Key': uuid() }));
  await post('currency', '/v1/currencies', { key: 'coins', name: 'Coins' });
  await post('tier program', '/v1/tier_programs', {
    key: 'rank',
    name: 'Rank',
    currency: 'coins',
    basis: 'lifetime_earned',
    levels: [
      { key: 'bronze', title: 'Bronze', threshold: 0 },
      { key: 'silver', title: 'Silver', threshold: 100 },
      { key: 'gold', title: 'Gold', threshold: 1000 },
    ],
  });
  const counter = await post('counter', '/v1/counter_definitions', { name: 'levels_today', event: 'level.completed', window: { kind: 'period', period: 'day' } });
  if (counter.status !== 'ready') await post('counter backfill', `/v1/counter_definitions/${counter.id}/backfill`, {});
  const trigger = { kind: 'customer_event', event: 'level.completed' };
  const rules = [
    { name: 'level points', definition: { schema: 'service.rule/v2', trigger, conditions: { all: [{ path: 'event.properties.level', op: 'gte', value: 1 }] }, actions: [{ type: 'points.award', currency: 'coins', amount: 10 }] } },
    { name: 'daily grind', definition: { schema: 'service.rule/v2', trigger, conditions: { all: [{ path: 'customer.counters.levels_today', op: 'gte', value: 3 }] }, limits: [{ id: 'daily', scope: ['customer'], max: 1000 }], actions: [{ type: 'points.award', currency: 'coins', amount: 5 }] } },
    { name: 'high level', definition: { schema: 'service.rule/v2', trigger, conditions: { any: [{ path: 'event.properties.level', op: 'gt', value: 50 }, { path: 'customer.attributes.vip', op: 'eq', value: true }] }, actions: [{ type: 'tier.evaluate' }] } },
  ];
  let firstRule = '';
  for (const r of rules) {
    const rule = await post(`rule ${r.name}`, '/v1/rules', r);
    firstRule ||= rule.id;
    await must(`publish ${r.name}`, api('POST', `/v1/rules/${rule.id}/publish`, {}, h));
  }
  await post('challenge', '/v1/challenges', {
    name: 'Ten levels',
    qualifying: { event: 'level.completed' },
    target: 10,
    contribution_key: null,
    status: 'active',
    period: 'daily',
    enrollment: 'automatic',
    repeatable: true,
    completion_actions: [{ type: 'points.award', currency: 'coins', amount: 50 }],
  });
  return { programsKey: key.token, programsRule: firstRule };
}

/** @param {ScenarioCtx} ctx @returns {RequestTemplate[]} */
export const singleEvent = (ctx) => [
  { method: 'POST', path: '/v1/events', headers: jsonHeaders(ctx), body: eventJson() },
];

/** @param {number} n */
export const eventBatch = (n) => (/** @type {ScenarioCtx} */ ctx) => [
  { method: 'POST', path: '/v1/events', headers: jsonHeaders(ctx), body: batchJson(n) },
];

/**
 * A match report of n players for POST /v1/match_results: match_id from {{seq}}, ended_at
 * {{now}}, started_at fixed at setup (10 minutes before the run). Player k is `m<k>-{{cust}}`, so
 * the players of one report are always distinct customers.
 * @param {number} n
 */
export const matchReport = (n) => (/** @type {ScenarioCtx} */ ctx) => {
  const startedAt = ctx.vars.matchStartedAt ?? new Date(Date.now() - 600_000).toISOString();
  const players = Array.from({ length: n }, (_, k) => `{"customer":{"external_id":"m${k}-{{cust}}"},"metrics":{"score":${10 + k}},"won":${k === 0}}`);
  const body = `{"profile":"bench","match_id":"bm-{{seq}}","started_at":"${startedAt}","ended_at":"{{now}}","players":[${players.join(',')}]}`;
  return [{ method: 'POST', path: '/v1/match_results', headers: jsonHeaders(ctx), body }];
};

/**
 * Creates the bench match profile once per service instance (through a change set).
 * @param {ScenarioCtx} ctx
 */
async function matchProfileSetup(ctx) {
  if (!ctx.api || !ctx.auth || ctx.vars.matchProfile) return {};
  const headers = { Authorization: `Bearer ${ctx.auth.osk}`, 'Idempotency-Key': `bench-mp-${Date.now()}` };
  const profile = {
    type: 'match_profile.create',
    key: 'bench',
    metrics: [{ key: 'score', minimum: 0, maximum: 1000 }],
    players: { minimum: 1, maximum: 100 },
    rate_limits: [{ window_seconds: 3600, max_matches: 10000 }],
    outliers: { action: 'hold', hold_metrics: [{ key: 'score', above: 900 }] },
  };
  const cs = await ctx.api('POST', '/v1/change_sets', { commands: [profile] }, headers);
  if (cs.status !== 201) throw new Error(`POST /v1/change_sets answered ${cs.status}: ${JSON.stringify(cs.json)}`);
  const ap = await ctx.api('POST', '/v1/change_set_applications', { change_set_id: cs.json.id }, { ...headers, 'Idempotency-Key': `bench-ap-${Date.now()}` });
  if (ap.status !== 201) throw new Error(`POST /v1/change_set_applications answered ${ap.status}: ${JSON.stringify(ap.json)}`);
  return { matchProfile: true, matchStartedAt: new Date(Date.now() - 600_000).toISOString() };
}

/** @type {Scenario} */
const singleClosed = {
  name: 'single-closed',
  title: 'single events, closed loop (max throughput)',
  kind: 'load',
  servers: ['bare', 'service'],
  loop: 'closed',
  connections: 64,
  requests: singleEvent,
  expect: { bare: 202, service: 202 },
  eventsPerRequest: 1,
  unit: 'requests',
  ratioOf: 'rps',
  wrk: true,
  targets: [
    { metric: 'rps', op: '>=', value: 40000 },
    { metric: 'ratio', op: '>=', value: 0.5 },
  ],
};

/** @type {Scenario} */
const batch100Closed = {
  name: 'batch-100-closed',
  title: '100-event batches, closed loop',
  kind: 'load',
  servers: ['bare', 'service'],
  loop: 'closed',
  connections: 32,
  requests: eventBatch(100),
  expect: { bare: 202, service: 207 },
  failBody: itemError,
  eventsPerRequest: 100,
  unit: 'events',
  ratioOf: 'events_per_s',
  targets: [{ metric: 'events_per_s', op: '>=', value: 150000 }],
};

/**
 * A service-only variant of `base` for 10k returning customers, reported as a ratio to `base`.
 * @param {Scenario} base @param {string} name @param {string} title @returns {Scenario}
 */
function steadyState(base, name, title) {
  return { ...base, name, title, servers: ['service'], customers: 10_000, wrk: false, baseline: base.name, targets: [] };
}

/** @type {Scenario[]} */
export const scenarios = [
  singleClosed,
  {
    name: 'single-open-20k',
    title: 'single events, open loop at 20k req/s',
    kind: 'load',
    servers: ['bare', 'service'],
    loop: 'open',
    rate: 20000,
    connections: 128,
    requests: singleEvent,
    expect: { bare: 202, service: 202 },
    eventsPerRequest: 1,
    unit: 'requests',
    ratioOf: 'p99_ms',
    targets: [{ metric: 'p99_ms', op: '<=', value: 5 }],
  },
  {
    name: 'single-open-overload',
    title: 'single events, open loop at 1.5x the bare closed-loop rate (coordinated-omission check)',
    kind: 'load',
    servers: ['bare'],
    loop: 'open',
    rate: (measured) => {
      const closed = measured('bare', 'single-closed');
      return closed ? Math.round(closed.rps * 1.5) : null;
    },
    connections: 128,
    requests: singleEvent,
    expect: { bare: 202, service: 202 },
    eventsPerRequest: 1,
    unit: 'requests',
    targets: [],
    note: 'offered load above capacity: latency from the intended send time must grow with the queue',
  },
  batch100Closed,
  {
    name: 'single-closed-programs',
    title: 'single events with 3 rules (one reading a counter), a challenge and a tier program active',
    kind: 'load',
    servers: ['service'],
    loop: 'closed',
    connections: 64,
    setup: programsSetup,
    requests: (ctx) => [{ method: 'POST', path: '/v1/events', headers: jsonHeaders(ctx, ctx.vars.programsKey), body: eventJson('p') }],
    expect: { bare: 202, service: 202 },
    eventsPerRequest: 1,
    unit: 'requests',
    ratioOf: 'rps',
    baseline: 'single-closed',
    targets: [{ metric: 'ratio', op: '>=', value: 0.8, label: '>= 0.8 x single-closed' }],
  },
  {
    name: 'batch-100-closed-programs',
    title: '100-event batches with the same programs active',
    kind: 'load',
    servers: ['service'],
    loop: 'closed',
    connections: 32,
    setup: programsSetup,
    requests: (ctx) => [{ method: 'POST', path: '/v1/events', headers: jsonHeaders(ctx, ctx.vars.programsKey), body: batchJson(100, 'q') }],
    expect: { bare: 202, service: 207 },
    failBody: itemError,
    eventsPerRequest: 100,
    unit: 'events',
    ratioOf: 'events_per_s',
    baseline: 'batch-100-closed',
    targets: [{ metric: 'ratio', op: '>=', value: 0.7, label: '>= 0.7 x batch-100-closed' }],
  },
  // Steady state: events for 10k returning customers (after the first 10k, no customer is
  // created), against the 1M-customer runs where nearly every event creates one. No target.
  steadyState(singleClosed, 'single-closed-10k', 'single events for 10k returning customers (steady state)'),
  steadyState(batch100Closed, 'batch-100-closed-10k', '100-event batches for 10k returning customers (steady state)'),
  {
    name: 'simulate-open',
    title: 'rule simulation (POST /v1/rules/{id}/simulate), open loop at 500/s',
    kind: 'load',
    // The bare server at the same rate: on a VM whose idle cores wait for the host at every
    // wakeup, its own p99 is what the 5 ms budget starts from (1.9-4.1 ms measured).
    servers: ['bare', 'service'],
    loop: 'open',
    rate: 500,
    connections: 16,
    setup: programsSetup,
    requests: (ctx) => [
      {
        method: 'POST',
        path: `/v1/rules/${ctx.vars.programsRule}/simulate`,
        headers: jsonHeaders(ctx, ctx.vars.programsKey),
        body: '{"event":{"name":"level.completed","properties":{"level":7}},"customer_id":"c-{{cust}}"}',
      },
    ],
    customers: 1000,
    expect: { bare: 202, service: 200 },
    eventsPerRequest: 1,
    unit: 'requests',
    ratioOf: 'p99_ms',
    targets: [{ metric: 'p99_ms', op: '<=', value: 5 }],
  },
  {
    name: 'customers-1m',
    title: '1M distinct customers receive events, then resident memory',
    kind: 'memory',
    servers: ['service'],
    customers: 1_000_000,
    batchSize: 100,
    connections: 32,
    requests: eventBatch(100),
    expect: { bare: 202, service: 207 },
    failBody: itemError,
    targets: [{ metric: 'rss_peak_mb', op: '<=', value: 1000 }],
  },
  {
    name: 'restart-500k',
    title: 'restart after kill -9 with 500k journal records past the last checkpoint',
    kind: 'restart',
    servers: ['service'],
    isolated: true,
    events: 500_000,
    batchSize: 100,
    connections: 32,
    snapshotEveryMs: 3_600_000,
    requests: eventBatch(100),
    expect: { bare: 202, service: 207 },
    failBody: itemError,
    targets: [{ metric: 'restart_ms', op: '<=', value: 10000 }],
  },
  {
    name: 'match-4-closed',
    title: '4-player match reports, closed loop (matches/s; 4 verdicts each)',
    kind: 'load',
    servers: ['bare', 'service'],
    loop: 'closed',
    connections: 64,
    setup: matchProfileSetup,
    requests: matchReport(4),
    expect: { bare: 202, service: 201 },
    eventsPerRequest: 4,
    unit: 'requests',
    ratioOf: 'rps',
    targets: [{ metric: 'rps', op: '>=', value: 10000 }],
  },
  {
    name: 'match-4-open-5k',
    title: '4-player match reports, open loop at 5k matches/s (admission latency)',
    kind: 'load',
    servers: ['bare', 'service'],
    loop: 'open',
    rate: 5000,
    connections: 128,
    setup: matchProfileSetup,
    requests: matchReport(4),
    expect: { bare: 202, service: 201 },
    eventsPerRequest: 4,
    unit: 'requests',
    ratioOf: 'p99_ms',
    targets: [{ metric: 'p99_ms', op: '<=', value: 10 }],
  },
  {
    name: 'match-16-open-1k',
    title: '16-player match reports, open loop at 1k matches/s (admission latency)',
    kind: 'load',
    servers: ['bare', 'service'],
    loop: 'open',
    rate: 1000,
    connections: 128,
    setup: matchProfileSetup,
    requests: matchReport(16),
    expect: { bare: 202, service: 201 },
    eventsPerRequest: 16,
    unit: 'requests',
    ratioOf: 'p99_ms',
    targets: [],
    note: 'no stated target for 16 players; reported for comparison with the 4-player rows',
  },
];
