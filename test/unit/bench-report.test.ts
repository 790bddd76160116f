// native-bench reporting and templates: metrics, targets, markdown and wrk parsing.
import { readFileSync } from 'node:fs';
// Pure functions only; no server, no timing (benchmarks never run as tests).
import t from 'tap';
import {
  checkTargets,
  errorRateMax,
  loadMetrics,
  ratioToBare,
  renderMarkdown,
} from '../../native-bench/report.mjs';
import { batchJson, eventJson, parseWrk, startNodeArgs, templateFile } from '../../native-bench/templates.mjs';

const loadgenOut = {
  mode: 'closed',
  connections: 64,
  duration_s: 10,
  requests: 500000,
  responses: 500000,
  responses_by_status: { '202': 500000 },
  errors: 0,
  expect: 202,
  unexpected: 0,
  rps: 50000,
  latency_us: { p50: 900, p90: 1500, p99: 3000, p999: 9000, max: 20000, mean: 1000 },
};

t.test('load metrics convert microseconds to ms and requests to events', async (t) => {
  const m = loadMetrics(loadgenOut, 100);
  t.equal(m.rps, 50000);
  t.equal(m.events_per_s, 5_000_000);
  t.equal(m.p99_ms, 3);
  t.equal(m.p999_ms, 9);
  t.equal(m.errors, 0);
  t.equal(m.error_rate, 0);
});

t.test('unexpected statuses count as errors and fail a row above the error budget', async (t) => {
  const m = loadMetrics({ ...loadgenOut, unexpected: 1000, errors: 5 }, 1);
  t.equal(m.errors, 1005);
  t.ok(m.error_rate > errorRateMax);
  const r = checkTargets({ ...m }, [{ metric: 'rps', op: '>=', value: 40000 }]);
  t.equal(r.checks[0]?.ok, true, 'the throughput target alone is met');
  t.equal(r.errorsOk, false);
  t.equal(r.pass, false, 'but the row fails on errors');
});

t.test('an overloaded open loop with nothing answered is slow, not erroneous', async (t) => {
  const m = loadMetrics(
    { ...loadgenOut, responses: 0, responses_by_status: {}, unsent_recorded: 5000, latency_us: { p99: 2_000_000 } },
    1,
  );
  t.equal(m.error_rate, 0);
  t.equal(m.p99_ms, 2000);
  t.equal(loadMetrics({ ...loadgenOut, responses: 0 }, 1).error_rate, 1, 'no answers and no backlog: failure');
});

t.test('targets: >= and <=, missing metric fails', async (t) => {
  const r = checkTargets({ rps: 45000, p99_ms: 6, error_rate: 0 }, [
    { metric: 'rps', op: '>=', value: 40000 },
    { metric: 'p99_ms', op: '<=', value: 5 },
    { metric: 'ratio', op: '>=', value: 0.5 },
  ]);
  t.same(
    r.checks.map((c) => c.ok),
    [true, false, false],
  );
  t.equal(r.pass, false);
  t.equal(checkTargets({ rps: 1, error_rate: 0 }, []).pass, true, 'no targets: pass');
});

t.test('ratio to bare is service over bare for the named metric', async (t) => {
  t.equal(ratioToBare({ rps: 40000 }, { rps: 80000 }, 'rps'), 0.5);
  t.equal(ratioToBare({ p99_ms: 4 }, { p99_ms: 2 }, 'p99_ms'), 2);
  t.equal(ratioToBare({ rps: 1 }, undefined, 'rps'), null);
  t.equal(ratioToBare({ rps: 1 }, { rps: 0 }, 'rps'), null);
});

t.test('markdown has one row per result with ratio, target and verdict', async (t) => {
  const metrics = loadMetrics(loadgenOut, 1);
  const md = renderMarkdown([
    { scenario: 'single-closed', server: 'bare', kind: 'load', unit: 'requests', metrics, checks: [] },
    {
      scenario: 'single-closed',
      server: 'service',
      kind: 'load',
      unit: 'requests',
      metrics: {
        ...metrics,
        cpu_us_per_event: 41.25,
        postgres_cpu_us_per_event: 30.4,
        redis_cpu_us_per_event: 9.6,
        loadgen_cpu_us_per_event: 5,
        cores_busy: [0.974, 0.5],
        cores_stolen: [0.17, 0.002],
      },
      ratio: 0.62,
      ratioOf: 'rps',
      ...checkTargets({ ...metrics, ratio: 0.62 }, [{ metric: 'rps', op: '>=', value: 40000 }]),
    },
    {
      scenario: 'customers-1m',
      server: 'service',
      kind: 'memory',
      metrics: { rss_mb: 600, rss_peak_mb: 700, events_per_s: 150000, errors: 0 },
      ...checkTargets({ rss_peak_mb: 700 }, [{ metric: 'rss_peak_mb', op: '<=', value: 1000 }]),
    },
    { scenario: 'restart-500k', server: 'service', kind: 'restart', error: 'service failed to start' },
  ]);
  const lines = md.trim().split('\n');
  t.match(lines[0], /^\| scenario \| server \| throughput/);
  t.equal(lines.length, 6, 'header, rule and four rows');
  t.match(lines[2], /\| single-closed \| bare \| 50,000 req\/s \| 0\.90 ms \| 3\.00 ms \| 9\.00 ms \| 0 \| - \| - \| info \|/);
  t.match(lines[3], /\| 0\.62 \| >= 40,000 req\/s \| pass \|$/);
  t.match(
    lines[3],
    /50,000 req\/s; 41\.3 µs server CPU\/event \(PostgreSQL 30, Redis 10, loadgen 5 µs; cores 97 % \/ 50 % busy, 17 % \/ 0 % stolen\) \|/,
    'the server CPU per event when measured, what else ran per event, and what the hypervisor took',
  );
  t.match(lines[2], /\| 50,000 req\/s \|/, 'nothing added when the split was not measured');
  t.match(lines[4], /RSS 600 MB, peak 700 MB/);
  t.match(lines[4], /pass \|$/);
  t.match(lines[5], /ERROR: service failed to start/);
});

t.test('steal is shown only when the hypervisor took 1 % of a core or more', async (t) => {
  const row = (stolen: number[]) =>
    renderMarkdown([
      {
        scenario: 'simulate-open',
        server: 'service',
        kind: 'load',
        unit: 'requests',
        metrics: { ...loadMetrics(loadgenOut, 1), cpu_us_per_event: 300, cores_busy: [0.1, 0.05], cores_stolen: stolen },
        checks: [],
      },
    ]).trim().split('\n')[2];
  t.match(row([0.004, 0]), /cores 10 % \/ 5 % busy\) \|/, 'under 1 %: busy only');
  t.match(row([0.004, 0.23]), /cores 10 % \/ 5 % busy, 0 % \/ 23 % stolen\) \|/);
});

t.test('template file: request line, headers, blank line, body, separator', async (t) => {
  const text = templateFile([
    { method: 'POST', path: '/v1/events', headers: { Authorization: 'Bearer k' }, body: '{"a":1}' },
    { method: 'GET', path: '/readyz' },
  ]);
  t.equal(text, 'POST /v1/events\nAuthorization: Bearer k\n\n{"a":1}\n###\nGET /readyz\n\n\n###\n');
  t.throws(() => templateFile([{ method: 'POST', path: '/', body: 'x\n###\ny' }]), /###/);
  t.throws(() => templateFile([{ method: 'GET', path: '/', headers: { a: 'b\r\nc: d' } }]), /newline/);
});

t.test('event and batch bodies are valid JSON once placeholders are filled', async (t) => {
  const fill = (s: string) =>
    s.replaceAll('{{seq}}', '7').replaceAll('{{cust}}', '42').replaceAll('{{now}}', '2025-01-01T00:00:00.000Z');
  const one = JSON.parse(fill(eventJson()));
  t.same(one, {
    id: 'b-7',
    name: 'level.completed',
    customer_id: 'c-42',
    occurred_at: '2025-01-01T00:00:00.000Z',
    properties: { level: 3 },
  });
  const batch = JSON.parse(fill(batchJson(100)));
  t.equal(batch.events.length, 100);
});

t.test('wrk report parsing', async (t) => {
  const text = `Running 10s test @ http://127.0.0.1:8080/
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.10ms  300.00us  12.50ms   90.00%
    Req/Sec    58.00k     2.00k   60.00k    70.00%
  Latency Distribution
     50%    1.00ms
     75%    1.20ms
     90%    1.50ms
     99%    2.50ms
  580000 requests in 10.00s, 120.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec:  58000.00
Transfer/sec:     12.00MB
`;
  const r = parseWrk(text);
  t.equal(r.rps, 58000);
  t.equal(r.requests, 580000);
  t.equal(r.errors, 3);
  t.equal(r.unexpected, 7);
  t.same(r.latency_us, { p50: 1000, p90: 1500, p99: 2500, max: 12500 });
});

t.test('the bench runs the service with the node options of npm start', async (t) => {
  const pkg = readFileSync(new URL('../../package.json', import.meta.url), 'utf8');
  t.same(startNodeArgs(pkg), ['--max-semi-space-size=32'], 'the options of the real start script');
  t.same(startNodeArgs('{"scripts":{"start":"node dist/src/main.js"}}'), []);
  t.throws(() => startNodeArgs('{"scripts":{"start":"tsx src/main.ts"}}'), /does not run node/);
});
