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
 *   isolated?: boolean, note?: string,
 * }} Scenario
 */

/** A 207 answer holding this (an item's error object) counts as an error for that request. */
const itemError = '"error":{';

/** @param {ScenarioCtx} ctx */
function jsonHeaders(ctx) {
  /** @type {Record<string, string>} */
  const h = { 'Content-Type': 'application/json' };
  if (ctx.auth) h.Authorization = `Bearer ${ctx.auth.osk}`;
  return h;
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

/** @type {Scenario[]} */
export const scenarios = [
  {
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
  },
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
  {
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
