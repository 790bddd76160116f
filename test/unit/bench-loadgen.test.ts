// native-bench/loadgen.c correctness against a local node:http server: placeholder substitution,
// template cycling, status accounting, chunked and Connection: close answers, and open-loop
// latency charged from the intended send time. Functional checks at low rates, never a benchmark.
// Skipped when no C compiler is installed.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { templateFile } from '../../native-bench/templates.mjs';

const cc = process.env.CC ?? 'cc';
const hasCc = spawnSync(cc, ['--version'], { stdio: 'ignore' }).status === 0;
const dir = mkdtempSync(path.join(os.tmpdir(), 'bench-loadgen-test-'));
const bin = path.join(dir, 'loadgen');
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

interface Report {
  mode: string;
  requests: number;
  responses: number;
  responses_by_status: Record<string, number>;
  errors: number;
  error_detail: { parse: number; server_closed: number; [k: string]: number };
  unexpected?: number;
  fail_body_hits?: number;
  unexpected_sample?: { status: number; body: string };
  rps: number;
  backlog_at_end?: number;
  latency_us: { p50: number; p99: number; max: number; count: number };
  service_time_us?: { p50: number; p99: number; max: number; count: number };
  seq_next: number;
}

interface Seen {
  method: string;
  url: string;
  body: string;
  auth: string | undefined;
}

function startServer(handler: (req: http.IncomingMessage, body: string, res: http.ServerResponse) => void) {
  const seen: Seen[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      seen.push({ method: req.method ?? '', url: req.url ?? '', body, auth: req.headers.authorization });
      handler(req, body, res);
    });
  });
  return new Promise<{ port: number; seen: Seen[]; close: () => Promise<void> }>((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as AddressInfo).port;
      resolve({
        port,
        seen,
        close: () =>
          new Promise<void>((r) => {
            server.closeAllConnections();
            server.close(() => r());
          }),
      });
    });
  });
}

function runLoadgen(args: string[]): Promise<Report> {
  return new Promise((resolve, reject) => {
    const p = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (err += d));
    p.on('exit', (code) => {
      if (code !== 0) return reject(new Error(`loadgen exited ${code}: ${err}`));
      try {
        resolve(JSON.parse(out) as Report);
      } catch {
        reject(new Error(`no JSON from loadgen: ${out} ${err}`));
      }
    });
  });
}

function writeTemplates(name: string, text: string) {
  const f = path.join(dir, name);
  writeFileSync(f, text);
  return f;
}

t.test('loadgen', { skip: hasCc ? false : `${cc} not installed` }, async (t) => {
  const build = spawnSync(cc, ['-O2', '-o', bin, path.resolve('native-bench/loadgen.c')], { encoding: 'utf8' });
  t.equal(build.status, 0, `compiles: ${build.stderr}`);

  t.test('placeholders, template cycling and the JSON report (closed loop)', async (t) => {
    const srv = await startServer((req, _body, res) => {
      res.writeHead(req.method === 'POST' ? 202 : 200, { 'Content-Type': 'application/json' });
      res.end('{"ok":true}');
    });
    t.teardown(srv.close);
    const file = writeTemplates(
      'cycle.txt',
      templateFile([
        {
          method: 'POST',
          path: '/v1/events',
          headers: { Authorization: 'Bearer osk_x', 'Content-Type': 'application/json' },
          body: '{"events":[{"id":"b-{{seq}}","c":"c-{{cust}}","at":"{{now}}"},\n{"id":"b-{{seq}}","c":"c-{{cust}}","at":"{{now}}"}]}',
        },
        { method: 'GET', path: '/readyz' },
      ]),
    );
    const before = Date.now();
    const r = await runLoadgen([
      '--port', String(srv.port), '--requests-file', file, '--closed', '--connections', '1',
      '--duration', '30', '--warmup', '0', '--max-requests', '200', '--customers', '100',
      '--cust-order', 'seq', '--seq-start', '1000',
    ]);
    t.equal(r.mode, 'closed');
    t.equal(r.requests, 200);
    t.same(r.responses_by_status, { '200': 100, '202': 100 });
    t.equal(r.errors, 0);
    t.equal(r.latency_us.count, 200);
    t.equal(r.seq_next, 1200, 'two {{seq}} per POST, 100 POSTs');
    const posts = srv.seen.filter((s) => s.method === 'POST');
    t.equal(posts.length, 100);
    t.equal(srv.seen[0]?.method, 'POST', 'templates are cycled in order');
    t.equal(srv.seen[1]?.method, 'GET');
    t.equal(posts[0]?.auth, 'Bearer osk_x');
    const events = posts.flatMap((p) => (JSON.parse(p.body) as { events: { id: string; c: string; at: string }[] }).events);
    const ids = events.map((e) => e.id);
    t.equal(new Set(ids).size, 200, 'every event id is unique');
    t.equal(ids[0], 'b-1000');
    t.equal(ids[199], 'b-1199');
    const custs = new Set(events.map((e) => e.c));
    t.equal(custs.size, 100, 'sequential customers cover the whole range');
    t.ok(custs.has('c-0') && custs.has('c-99') && !custs.has('c-100'));
    for (const e of events.slice(0, 5)) {
      t.match(e.at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      const ms = Date.parse(e.at);
      t.ok(ms >= before - 1000 && ms <= Date.now() + 1000, 'now is the current time');
    }
  });

  t.test('random customers stay inside --customers', async (t) => {
    const srv = await startServer((_req, _body, res) => {
      res.writeHead(202).end('{}');
    });
    t.teardown(srv.close);
    const file = writeTemplates('cust.txt', templateFile([{ method: 'POST', path: '/', body: '{{cust}}' }]));
    await runLoadgen([
      '--port', String(srv.port), '--requests-file', file, '--closed', '--connections', '4',
      '--duration', '30', '--warmup', '0', '--max-requests', '300', '--customers', '10',
    ]);
    const values = new Set(srv.seen.map((s) => Number(s.body)));
    t.ok([...values].every((v) => Number.isInteger(v) && v >= 0 && v < 10));
    t.ok(values.size > 5, 'draws are spread over the range');
  });

  t.test('unexpected statuses, chunked bodies and Connection: close', async (t) => {
    let n = 0;
    const srv = await startServer((_req, _body, res) => {
      n++;
      if (n % 10 === 0) {
        res.writeHead(429, { 'Content-Type': 'application/json' });
        res.write('{"error":{"code":');
        res.end('"rate_limited"}}'); // chunked: no Content-Length
        return;
      }
      if (n % 7 === 0) {
        res.writeHead(202, { Connection: 'close', 'Content-Length': '2' });
        res.end('{}');
        return;
      }
      res.writeHead(202, { 'Content-Length': '2' });
      res.end('{}');
    });
    t.teardown(srv.close);
    const file = writeTemplates('err.txt', templateFile([{ method: 'POST', path: '/', body: '{}' }]));
    const r = await runLoadgen([
      '--port', String(srv.port), '--requests-file', file, '--closed', '--connections', '2',
      '--duration', '30', '--warmup', '0', '--max-requests', '100', '--expect', '202',
    ]);
    t.equal(r.responses, 100);
    t.equal(r.responses_by_status['429'], 10);
    t.equal(r.unexpected, 10);
    t.equal(r.unexpected_sample?.status, 429);
    t.match(r.unexpected_sample?.body, /rate_limited/);
    t.equal(r.error_detail.parse, 0);
    t.ok(r.error_detail.server_closed > 0, 'reconnected after Connection: close');
  });

  t.test('--fail-body counts a 207 holding an item error as unexpected', async (t) => {
    let n = 0;
    const srv = await startServer((_req, _body, res) => {
      n++;
      const body = n % 4 === 0 ? '{"data":[{"id":"e1"},{"error":{"code":"rate_limited"}}]}' : '{"data":[{"id":"e1"}]}';
      res.writeHead(207, { 'Content-Type': 'application/json' }).end(body);
    });
    t.teardown(srv.close);
    const file = writeTemplates('fail.txt', templateFile([{ method: 'POST', path: '/', body: '{}' }]));
    const r = await runLoadgen([
      '--port', String(srv.port), '--requests-file', file, '--closed', '--connections', '1',
      '--duration', '30', '--warmup', '0', '--max-requests', '40', '--expect', '207', '--fail-body', '"error":{',
    ]);
    t.equal(r.responses_by_status['207'], 40);
    t.equal(r.unexpected, 10);
    t.equal(r.fail_body_hits, 10);
    t.match(r.unexpected_sample?.body, /rate_limited/);
  });

  t.test('open loop paces at the rate and charges latency from the intended send time', async (t) => {
    // A server that takes 20 ms per request, one connection: capacity 50/s. At 25/s the queue
    // stays empty; at 100/s it grows, and latency from the intended time must grow with it while
    // the per-request service time stays ~20 ms (the coordinated-omission trap).
    const srv = await startServer((_req, _body, res) => {
      setTimeout(() => res.writeHead(202, { 'Content-Length': '2' }).end('{}'), 20);
    });
    t.teardown(srv.close);
    const file = writeTemplates('slow.txt', templateFile([{ method: 'POST', path: '/', body: '{}' }]));
    const base = ['--port', String(srv.port), '--requests-file', file, '--connections', '1', '--warmup', '0', '--duration', '2', '--drain', '5'];
    const under = await runLoadgen([...base, '--rate', '25']);
    t.ok(Math.abs(under.requests - 50) <= 2, `~50 requests at 25/s in 2 s (got ${under.requests})`);
    // Thresholds are loose: the test box is shared, timers jitter by tens of ms.
    t.ok(under.latency_us.p50 < 150_000, `no queueing under capacity (p50 ${under.latency_us.p50} us)`);
    const over = await runLoadgen([...base, '--rate', '100']);
    const svc = over.service_time_us?.p50 ?? Number.POSITIVE_INFINITY;
    t.ok(svc < 150_000, `service time stays near 20 ms (p50 ${svc} us)`);
    t.ok(over.latency_us.max > 500_000, `queueing is charged (max ${over.latency_us.max} us)`);
    t.ok(over.latency_us.p50 > 3 * svc, 'median dominated by the queue, not the service time');
    t.ok(over.latency_us.p99 > 4 * under.latency_us.p99, 'p99 rises sharply above capacity');
    t.ok((over.backlog_at_end ?? 0) > 50, 'requests never sent are reported');
  });
});
