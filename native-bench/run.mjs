// `npm run bench`: builds loadgen, runs the scenarios of scenarios.mjs against a bare uWS server
// and then the real service (dist/), server pinned to core 0 and loadgen to core 1, sequentially in
// one run; writes native-bench/results/<timestamp>.{json,md} and prints the markdown table.
// Invariants: every child (servers, redis-server, loadgen) is killed by PID on any exit; each run
// uses its own Redis, DB_SCHEMA, KEY_PREFIX and tmp dirs. Never run in CI; never touch other data.
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import {
  addAsyncCleanup,
  freePort,
  installCleanup,
  redisPing,
  removeOnExit,
  setPinning,
  sleep,
  startChild,
  tcpReachable,
} from './procs.mjs';
import { checkTargets, loadMetrics, ratioToBare, renderMarkdown } from './report.mjs';
import { scenarios } from './scenarios.mjs';
import { parseWrk, startNodeArgs, templateFile, wrkScript } from './templates.mjs';

const benchDir = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(benchDir, '..');
const loadgenBin = path.join(benchDir, 'bin', 'loadgen');
const SERVER_CPU = 0;
const LOADGEN_CPU = 1;

const usage = `usage: npm run bench -- [options]
  --only <a,b>        run only these scenarios (${scenarios.map((s) => s.name).join(', ')})
  --duration <s>      measured seconds per load scenario (default 10)
  --warmup <s>        warm-up seconds excluded from stats (default 2)
  --settle <s>        before each service scenario, wait until the service is idle (projection caught up,
                      every changed actor snapshotted, the service, Redis and PostgreSQL each under 5 %
                      of a core for 0.5 s) so the last one's backlog is not charged to it; at most this
                      many seconds (default 30)
  --connections <n>   override every scenario's connection count
  --embedded          service without Redis/PostgreSQL (DATA_DIR in a tmp dir)
  --skip-service      bare server only
  --skip-bare         service only (no ratio to bare)
  --no-build          do not run \`npm run build\` first
  --service-main <f>  service entry point (default dist/src/main.js), e.g. another build to compare
  --wrk               install wrk if missing (apt-get) for the closed-loop cross-check
  --no-wrk            skip the wrk cross-check rows
  --database-url <u>  PostgreSQL for the service (default postgres://postgres@127.0.0.1:5432/test)
  --service-log <f>   append the service's stdout and stderr to file f
  --node-args "<a b>" extra node options for the service (e.g. "--trace-gc" with --service-log)
  --cpu-prof <dir>    write a V8 CPU profile of each service process into dir (written when it stops)`;

const { values: opt } = parseArgs({
  options: {
    only: { type: 'string' },
    duration: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '2' },
    settle: { type: 'string', default: '30' },
    connections: { type: 'string' },
    embedded: { type: 'boolean', default: false },
    'skip-service': { type: 'boolean', default: false },
    'skip-bare': { type: 'boolean', default: false },
    'no-build': { type: 'boolean', default: false },
    'service-main': { type: 'string', default: 'dist/src/main.js' },
    wrk: { type: 'boolean', default: false },
    'no-wrk': { type: 'boolean', default: false },
    'database-url': { type: 'string', default: 'postgres://postgres@127.0.0.1:5432/test' },
    'cpu-prof': { type: 'string' },
    'service-log': { type: 'string' },
    'node-args': { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
if (opt.help) {
  console.log(usage);
  process.exit(0);
}
const durationS = Number(opt.duration);
const warmupS = Number(opt.warmup);
if (!(durationS > 0) || !(warmupS >= 0)) {
  console.error(`bench: bad --duration/--warmup\n${usage}`);
  process.exit(2);
}

const log = (msg) => console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}`);

// ------------------------------------------------------------------------------------------------
// Set-up helpers

function buildLoadgen() {
  mkdirSync(path.join(benchDir, 'bin'), { recursive: true });
  const cc = process.env.CC ?? 'cc';
  const r = spawnSync(cc, ['-O2', '-o', loadgenBin, path.join(benchDir, 'loadgen.c')], {
    encoding: 'utf8',
  });
  if (r.status !== 0) {
    throw new Error(`cannot compile loadgen with ${cc}: ${r.error?.message ?? r.stderr}`);
  }
}

function hasCommand(cmd) {
  return spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
}

function ensureWrk() {
  if (opt['no-wrk']) return false;
  if (hasCommand('wrk')) return true;
  if (!opt.wrk) {
    log('wrk not installed: skipping the wrk cross-check (pass --wrk to install it)');
    return false;
  }
  log('installing wrk (apt-get)');
  const r = spawnSync('sh', ['-c', 'apt-get update -qq && apt-get install -y -qq wrk'], {
    stdio: 'inherit',
  });
  return r.status === 0 && hasCommand('wrk');
}

/** Scenario results so far, for rates derived from other scenarios. */
const measuredRows = new Map();
const measured = (server, scenario) => measuredRows.get(`${server}/${scenario}`)?.metrics ?? null;

/** Pause before each service scenario (ms). */
const settleMs = Number(opt.settle ?? 30) * 1000;

let nextSeq = Date.now() * 1000;

/**
 * Runs loadgen once (pinned to the loadgen core) and returns its JSON report.
 * @param {{port: number, requests: any[], loop: 'closed' | 'open', rate?: number, connections: number,
 *   duration: number, warmup: number, expect: number, failBody?: string, customers?: number, custOrder?: string,
 *   maxRequests?: number, tmp: string}} o
 */
async function runLoadgen(o) {
  const file = path.join(o.tmp, `requests-${randomUUID()}.txt`);
  writeFileSync(file, templateFile(o.requests));
  const args = [
    '--port',
    String(o.port),
    '--requests-file',
    file,
    '--connections',
    String(o.connections),
    '--duration',
    String(o.duration),
    '--warmup',
    String(o.warmup),
    '--expect',
    String(o.expect),
    '--customers',
    String(o.customers ?? 1_000_000),
    '--cust-order',
    o.custOrder ?? 'random',
    '--seq-start',
    String(nextSeq),
  ];
  if (o.loop === 'closed') args.push('--closed');
  else args.push('--rate', String(o.rate));
  if (o.maxRequests) args.push('--max-requests', String(o.maxRequests));
  if (o.failBody) args.push('--fail-body', o.failBody);
  const child = startChild('loadgen', loadgenBin, args, { cpu: LOADGEN_CPU, captureStdout: true });
  await child.exitPromise;
  if (child.exitCode !== 0) throw new Error(child.describeExit());
  let out;
  try {
    out = JSON.parse(child.stdout);
  } catch {
    throw new Error(`loadgen printed no JSON: ${child.stdout.slice(0, 300)}`);
  }
  if (typeof out.seq_next === 'number') nextSeq = out.seq_next + 1;
  return out;
}

/** wrk closed-loop cross-check with the same requests. */
async function runWrk(o) {
  const script = path.join(o.tmp, `wrk-${randomUUID()}.lua`);
  writeFileSync(
    script,
    wrkScript(o.requests, { customers: o.customers ?? 1_000_000, seqStart: nextSeq }),
  );
  nextSeq += 10_000_000_000; // wrk does not report how far it counted
  const args = [
    '-t1',
    `-c${o.connections}`,
    `-d${Math.round(o.duration)}s`,
    '--latency',
    '-s',
    script,
    `http://127.0.0.1:${o.port}/`,
  ];
  const child = startChild('wrk', 'wrk', args, { cpu: LOADGEN_CPU, captureStdout: true });
  await child.exitPromise;
  if (child.exitCode !== 0) throw new Error(child.describeExit());
  return parseWrk(child.stdout);
}

/** Polls GET /readyz until 200; throws with the child's output if it exits first. */
async function waitReady(child, port, timeoutMs, intervalMs = 50) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exited) throw new Error(`service failed to start: ${child.describeExit()}`);
    try {
      const r = await fetch(`http://127.0.0.1:${port}/readyz`, {
        signal: AbortSignal.timeout(1000),
      });
      await r.arrayBuffer();
      if (r.status === 200) return;
    } catch {
      // not listening yet
    }
    await sleep(intervalMs);
  }
  throw new Error(
    `service not ready (GET /readyz != 200) within ${timeoutMs} ms\n  last output:\n    ${child.tail.join('\n    ')}`,
  );
}

/** JSON API call against the service. */
function apiClient(port) {
  return async (method, p, body, headers = {}) => {
    const r = await fetch(`http://127.0.0.1:${port}${p}`, {
      method,
      headers: { 'Content-Type': 'application/json', ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(10000),
    });
    const text = await r.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = { raw: text };
    }
    return { status: r.status, json };
  };
}

/** Signs up a fresh tenant and creates a secret key in its test environment. */
async function setupTenant(api) {
  const id = randomUUID().slice(0, 8);
  const signup = await api(
    'POST',
    '/v1/auth/signup',
    { email: `bench-${id}@example.com`, name: 'Bench', organization_name: `Bench ${id}` },
    { 'Idempotency-Key': randomUUID() },
  );
  if (signup.status < 200 || signup.status > 299) {
    throw new Error(`POST /v1/auth/signup answered ${signup.status}: ${JSON.stringify(signup.json)}`);
  }
  const opat = signup.json?.token?.token;
  const envId = signup.json?.environments?.find((e) => e.name === 'test')?.id;
  if (typeof opat !== 'string' || typeof envId !== 'string') {
    throw new Error(`signup answer lacks token.token or a test environment: ${JSON.stringify(signup.json)}`);
  }
  const key = await api(
    'POST',
    '/v1/api_keys',
    { kind: 'secret', name: 'bench' },
    {
      Authorization: `Bearer ${opat}`,
      'X-Service-Environment': envId,
      'Idempotency-Key': randomUUID(),
    },
  );
  const osk = key.json?.token;
  if (key.status < 200 || key.status > 299 || typeof osk !== 'string') {
    throw new Error(`POST /v1/api_keys answered ${key.status}: ${JSON.stringify(key.json)}`);
  }
  return { opat, osk, envId };
}

/** @param {number} pid */
function readRssMb(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field) => Number(status.match(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm'))?.[1] ?? 0);
  return { rss_mb: (kb('VmRSS') * 1024) / 1e6, rss_peak_mb: (kb('VmHWM') * 1024) / 1e6 };
}

// ------------------------------------------------------------------------------------------------
// Servers

async function startBare(tmp) {
  const port = await freePort();
  const child = startChild('bare-server', process.execPath, [path.join(benchDir, 'bare-server.mjs'), String(port)], {
    cpu: SERVER_CPU,
  });
  const deadline = Date.now() + 15000;
  for (;;) {
    if (child.exited) throw new Error(`bare server failed to start: ${child.describeExit()}`);
    if (await tcpReachable('127.0.0.1', port, 200)) break;
    if (Date.now() > deadline) throw new Error('bare server did not listen within 15 s');
    await sleep(50);
  }
  return { name: 'bare', port, child, pid: child.pid, tmp };
}

/** Redis (dedicated, AOF everysec) and PostgreSQL, or nothing in embedded mode. */
async function startBackend(tmp) {
  if (opt.embedded) return { embedded: true, stop: async () => {}, schemas: [] };
  if (!hasCommand('redis-server')) {
    throw new Error('redis-server not found on PATH: install it or run with --embedded');
  }
  const dbUrl = new URL(opt['database-url']);
  const dbPort = Number(dbUrl.port || 5432);
  if (!(await tcpReachable(dbUrl.hostname, dbPort, 2000))) {
    throw new Error(
      `PostgreSQL not reachable at ${dbUrl.hostname}:${dbPort} (--database-url): start it or run with --embedded`,
    );
  }
  await vacuumCatalogs(opt['database-url']);
  const redisDir = path.join(tmp, 'redis');
  mkdirSync(redisDir, { recursive: true });
  const redisPort = await freePort();
  const redis = startChild('redis-server', 'redis-server', [
    '--port', String(redisPort),
    '--bind', '127.0.0.1',
    '--appendonly', 'yes',
    '--appendfsync', 'everysec',
    '--save', '',
    '--dir', redisDir,
    '--daemonize', 'no',
    '--loglevel', 'warning',
  ]);
  const deadline = Date.now() + 10000;
  while (!(await redisPing(redisPort))) {
    if (redis.exited) throw new Error(`redis-server failed to start: ${redis.describeExit()}`);
    if (Date.now() > deadline) throw new Error('redis-server did not answer PING within 10 s');
    await sleep(50);
  }
  log(`redis-server pid ${redis.pid} on :${redisPort} (appendonly, everysec), dir ${redisDir}`);
  /** @type {string[]} */
  const schemas = [];
  const unregister = addAsyncCleanup(() => dropSchemas(opt['database-url'], schemas));
  return {
    embedded: false,
    redisPid: redis.pid,
    redisUrl: `redis://127.0.0.1:${redisPort}`,
    databaseUrl: opt['database-url'],
    schemas,
    async stop() {
      await redis.stop();
      await dropSchemas(opt['database-url'], schemas);
      unregister();
    },
  };
}

/**
 * Every run creates and drops schemas of ~40 tables; where autovacuum is off (this box), the dead
 * catalog rows pile up (pg_attribute grew to 41 MB with 195k dead rows) and later runs get slower
 * than earlier ones. Vacuuming the catalogs first keeps runs comparable. Touches no table data.
 */
async function vacuumCatalogs(databaseUrl) {
  try {
    const { default: postgres } = await import('postgres');
    const sql = postgres(databaseUrl, { max: 1, onnotice: () => {}, connect_timeout: 5 });
    await sql.unsafe('vacuum pg_catalog.pg_attribute, pg_catalog.pg_class, pg_catalog.pg_depend, pg_catalog.pg_type, pg_catalog.pg_index, pg_catalog.pg_constraint');
    await sql.end({ timeout: 5 });
  } catch (err) {
    log(`could not vacuum the catalogs (runs may drift slower): ${err.message}`);
  }
}

async function dropSchemas(databaseUrl, schemas) {
  if (schemas.length === 0) return;
  try {
    const { default: postgres } = await import('postgres');
    const sql = postgres(databaseUrl, { max: 1, onnotice: () => {}, connect_timeout: 5 });
    for (const s of schemas) await sql.unsafe(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
    await sql.end({ timeout: 5 });
  } catch (err) {
    log(`could not drop bench schemas ${schemas.join(', ')}: ${err.message}`);
  }
}

/**
 * Starts the service from dist with a unique schema/prefix (or data dir). Returns a handle that can
 * restart the same instance (same env) after a kill.
 */
async function startService(backend, tmp, extraEnv = {}) {
  const tag = `bench_${Date.now().toString(36)}_${randomUUID().slice(0, 6)}`;
  const port = await freePort();
  const grpcPort = await freePort();
  const env = { ...process.env };
  for (const k of ['REDIS_URL', 'DATABASE_URL', 'DATA_DIR', 'DB_SCHEMA', 'KEY_PREFIX']) delete env[k];
  Object.assign(env, {
    NODE_ENV: 'production',
    PORT: String(port),
    GRPC_PORT: String(grpcPort),
    HOST: '127.0.0.1',
    NODE_ID: 'bench-1',
    LOG_LEVEL: 'warn',
    ...extraEnv,
  });
  if (backend.embedded) {
    const dataDir = path.join(tmp, `data-${tag}`);
    mkdirSync(dataDir, { recursive: true });
    env.DATA_DIR = dataDir;
  } else {
    env.REDIS_URL = backend.redisUrl;
    env.DATABASE_URL = backend.databaseUrl;
    env.DB_SCHEMA = tag;
    env.KEY_PREFIX = tag;
    backend.schemas.push(tag);
  }
  const main = path.resolve(root, opt['service-main']);
  // The service runs with the node options of `npm start` (one source of truth), then any extras.
  const profArgs = [...startNodeArgs(readFileSync(path.join(root, 'package.json'), 'utf8'))];
  if (opt['cpu-prof']) profArgs.push('--cpu-prof', `--cpu-prof-dir=${path.resolve(opt['cpu-prof'])}`);
  if (opt['node-args']) profArgs.push(...opt['node-args'].split(' ').filter(Boolean));
  const spawnIt = () =>
    startChild('service', process.execPath, [...profArgs, main], { cpu: SERVER_CPU, env, cwd: root, logFile: opt['service-log'] });
  const inst = { name: 'service', port, env, tag, child: spawnIt(), api: apiClient(port), redisPid: backend.redisPid ?? null };
  inst.respawn = () => {
    inst.child = spawnIt();
    return inst.child;
  };
  await waitReady(inst.child, port, 120000);
  log(`service pid ${inst.child.pid} ready on :${port} (${backend.embedded ? 'embedded' : `schema/prefix ${tag}`})`);
  return inst;
}

// ------------------------------------------------------------------------------------------------
// Scenario runners

function scenarioConnections(sc) {
  return Number(opt.connections ?? sc.connections ?? 64);
}

/** @returns {Promise<any>} a result row */
async function runLoadScenario(sc, server, tmp, ctx) {
  let rate;
  if (sc.loop === 'open') {
    rate = typeof sc.rate === 'function' ? sc.rate(measured) : sc.rate;
    if (!rate) {
      // Derived rate without its source scenario in this run: probe the capacity quickly.
      const probe = await runLoadgen({
        port: server.port, requests: sc.requests(ctx), loop: 'closed', connections: 64,
        duration: 3, warmup: 1, expect: sc.expect[server.name], tmp,
      });
      rate = Math.round(probe.rps * 1.5);
    }
  }
  const conns = scenarioConnections(sc);
  log(`${sc.name} on ${server.name}: ${sc.loop} loop${rate ? ` at ${rate}/s` : ''}, ${conns} connections, ${durationS}s (+${warmupS}s warm-up)`);
  // CPU time over the measured window of the server, its Redis, PostgreSQL and the load
  // generator: CPU per event holds even when other work shares the core, where throughput does not.
  const cpu = sampleCpuWindow({ server: server.child.pid, redis: server.redisPid ?? null }, warmupS, durationS);
  const flushes = server.name === 'service' ? sampleFlushWindow(server.port, warmupS, durationS) : null;
  const raw = await runLoadgen({
    port: server.port,
    requests: sc.requests(ctx),
    loop: sc.loop ?? 'closed',
    rate,
    connections: conns,
    duration: durationS,
    warmup: warmupS,
    expect: sc.expect[server.name],
    failBody: sc.failBody,
    customers: sc.customers,
    tmp,
  });
  const row = finishLoadRow(sc, server.name, raw, rate);
  const window = cpu.window();
  const events = row.metrics.events_per_s * durationS;
  if (window !== null && events > 0) {
    const perEvent = (seconds) => (seconds === null ? undefined : (seconds * 1e6) / events);
    row.metrics.cpu_us_per_event = perEvent(window.server);
    if (server.name === 'service' && window.redis !== null) {
      row.metrics.redis_cpu_us_per_event = perEvent(window.redis);
      row.metrics.postgres_cpu_us_per_event = perEvent(window.postgres);
    }
    row.metrics.loadgen_cpu_us_per_event = perEvent(window.loadgen);
    row.metrics.cores_busy = window.coresBusy;
    row.metrics.cores_stolen = window.coresStolen;
  }
  const flushWindow = await flushes?.delta();
  if (flushWindow) Object.assign(row.metrics, flushWindow);
  return row;
}

const idleCpuShare = 0.05;
const idleSampleMs = 500;

/**
 * Waits until the service and its storage are idle: the projector has caught up
 * (projector_lag_records 0), every changed actor is in a snapshot (actors_unsnapshotted 0: the
 * snapshot cycle's saves would otherwise land in the next scenario), and the service, its Redis
 * and PostgreSQL (every `postgres` process: checkpoints, and autovacuum where it is on, after a
 * write-heavy scenario) each used under 5 % of a core over the last 0.5 s (passivation and GC of
 * the previous scenario done). At least one sample, at most `maxMs`; logs how long it took and
 * what was still busy at the end.
 */
async function settleService(inst, maxMs) {
  const started = Date.now();
  const pids = { server: inst.child.pid, redis: inst.redisPid };
  for (;;) {
    const before = cpuSnapshot(pids);
    await sleep(idleSampleMs);
    const after = cpuSnapshot(pids);
    const seconds = idleSampleMs / 1000;
    const shareOf = (a, b) => (a === null || b === null ? 0 : (b - a) / seconds);
    let postgres = 0;
    for (const [pid, e] of after.byPid) if (e.group === 'postgres') postgres += e.t - (before.byPid.get(pid)?.t ?? 0);
    const busy = { service: shareOf(before.server, after.server), redis: shareOf(before.redis, after.redis), postgres: postgres / seconds };
    const { lag, unsnapshotted } = await backlog(inst.port);
    const waited = Date.now() - started;
    const quiet = busy.service < idleCpuShare && busy.redis < idleCpuShare && busy.postgres < idleCpuShare;
    if ((quiet && !lag && !unsnapshotted) || waited >= maxMs) {
      const pct = (x) => `${(x * 100).toFixed(1)} %`;
      log(
        `settled in ${(waited / 1000).toFixed(1)} s (cpu: service ${pct(busy.service)}, Redis ${pct(busy.redis)}, ` +
          `PostgreSQL ${pct(busy.postgres)} of a core; projector lag ${lag ?? '?'}, actors not snapshotted ${unsnapshotted ?? '?'})`,
      );
      return;
    }
  }
}

/**
 * The service's backlog gauges (null when unreadable): records not yet projected into the read
 * tables, and actors changed since their last snapshot (saved at the snapshot cycle, up to
 * SNAPSHOT_EVERY_MS later).
 */
async function backlog(port) {
  try {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    const gauge = (name) => {
      const v = Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? Number.NaN);
      return Number.isFinite(v) ? v : null;
    };
    return { lag: gauge('projector_lag_records'), unsnapshotted: gauge('actors_unsnapshotted') };
  } catch {
    return { lag: null, unsnapshotted: null };
  }
}

/** Sums of the service's journal-flush histograms from its /metrics text (null when unreadable). */
async function journalFlushTotals(port) {
  try {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    const num = (name) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? Number.NaN);
    const t = {
      flushes: num('journal_flush_records_count'),
      records: num('journal_flush_records_sum'),
      seconds: num('journal_flush_seconds_sum'),
    };
    return Number.isFinite(t.flushes) && Number.isFinite(t.records) ? t : null;
  } catch {
    return null;
  }
}

/**
 * Group-commit figures over the measured window: partition flushes per second, records per flush and the
 * mean flush time (how well appends are batched explains much of the journal's cost per event).
 */
function sampleFlushWindow(port, warmup, duration) {
  const start = new Promise((r) => setTimeout(() => r(journalFlushTotals(port)), warmup * 1000));
  const end = new Promise((r) => setTimeout(() => r(journalFlushTotals(port)), (warmup + duration) * 1000));
  return {
    async delta() {
      const [a, b] = await Promise.all([start, end]);
      if (!a || !b || b.flushes <= a.flushes) return null;
      const n = b.flushes - a.flushes;
      return {
        partition_flushes_per_s: n / duration,
        records_per_partition_flush: (b.records - a.records) / n,
        partition_flush_ms: (1000 * (b.seconds - a.seconds)) / n,
      };
    },
  };
}

/** utime + stime of a process in seconds (Linux /proc), or null when unreadable. */
function processCpuSeconds(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / clockTicks;
  } catch {
    return null;
  }
}

const clockTicks = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

/**
 * Each core's seconds since boot (/proc/stat): busy (user, nice, system, irq, softirq) and stolen
 * (steal: the core had work but the hypervisor ran something else; on a shared VM this is
 * time nothing on the box could use, and every wait in it shows up as latency).
 */
function coresSeconds() {
  const busy = [];
  const stolen = [];
  for (const line of readFileSync('/proc/stat', 'utf8').split('\n')) {
    const m = /^cpu(\d+) (.*)$/.exec(line);
    if (!m) continue;
    const [user, nice, system, , , irq, softirq, steal] = m[2].trim().split(/\s+/).map(Number);
    busy[Number(m[1])] = (user + nice + system + irq + softirq) / clockTicks;
    stolen[Number(m[1])] = (steal ?? 0) / clockTicks;
  }
  return { busy, stolen };
}

/**
 * CPU seconds of the server and Redis (by PID), of every `postgres` process and of the load
 * generator (by name: PostgreSQL's backends and the loadgen start on their own), and each core's
 * busy seconds. Processes that exit before the window ends are not counted.
 */
function cpuSnapshot(pids) {
  const byPid = new Map();
  for (const d of readdirSync('/proc')) {
    const c = d.charCodeAt(0);
    if (c < 48 || c > 57) continue;
    let comm;
    try {
      comm = readFileSync(`/proc/${d}/comm`, 'utf8').trim();
    } catch {
      continue;
    }
    if (comm !== 'postgres' && comm !== 'loadgen') continue;
    const t = processCpuSeconds(d);
    if (t !== null) byPid.set(d, { group: comm, t });
  }
  return {
    server: processCpuSeconds(pids.server),
    redis: pids.redis === null ? null : processCpuSeconds(pids.redis),
    byPid,
    cores: coresSeconds(),
    at: performance.now(),
  };
}

/** Each core's share of `wall` seconds between two readings of one counter. */
function share(start, end, wall) {
  return end.map((x, i) => Math.min(1, (x - (start[i] ?? x)) / wall));
}

/** Samples CPU time at the end of the warm-up and at the end of the measured window. */
function sampleCpuWindow(pids, warmup, duration) {
  let start = null;
  let end = null;
  const t1 = setTimeout(() => {
    start = cpuSnapshot(pids);
  }, warmup * 1000);
  const t2 = setTimeout(() => {
    end = cpuSnapshot(pids);
  }, (warmup + duration) * 1000);
  const delta = (a, b) => (a === null || b === null ? null : b - a);
  return {
    /** @returns {{server: number|null, redis: number|null, postgres: number, loadgen: number, coresBusy: number[], coresStolen: number[]} | null} */
    window() {
      clearTimeout(t1);
      clearTimeout(t2);
      if (start === null || end === null) return null;
      const groups = { postgres: 0, loadgen: 0 };
      // A process that started inside the window counts from zero.
      for (const [pid, e] of end.byPid) groups[e.group] += e.t - (start.byPid.get(pid)?.t ?? 0);
      const wall = (end.at - start.at) / 1000;
      return {
        server: delta(start.server, end.server),
        redis: delta(start.redis, end.redis),
        postgres: groups.postgres,
        loadgen: groups.loadgen,
        coresBusy: share(start.cores.busy, end.cores.busy, wall),
        coresStolen: share(start.cores.stolen, end.cores.stolen, wall),
      };
    },
  };
}

function finishLoadRow(sc, serverName, raw, rate, scenarioName = sc.name) {
  const metrics = loadMetrics(raw, sc.eventsPerRequest ?? 1);
  // A scenario with a baseline compares with another service scenario of the same run (the Core
  // issue's "0.8 x the Foundation's rate"); the others compare with the bare server.
  const base = serverName !== 'service' ? null : sc.baseline ? measured('service', sc.baseline) : measured('bare', scenarioName);
  const ratio = serverName === 'service' ? ratioToBare(metrics, base ?? undefined, sc.ratioOf ?? 'rps') : null;
  const targets = serverName === 'service' ? sc.targets : [];
  const { checks, pass, errorsOk } = checkTargets({ ...metrics, ratio }, targets);
  const row = {
    scenario: scenarioName,
    title: sc.title,
    server: serverName,
    kind: 'load',
    unit: sc.unit ?? 'requests',
    rate: rate ?? null,
    metrics,
    ratio,
    ratioOf: sc.ratioOf ?? 'rps',
    baseline: sc.baseline ?? null,
    checks,
    pass,
    errorsOk,
    note: describeErrors(raw) ?? (serverName === 'bare' ? sc.note : undefined),
    raw,
  };
  measuredRows.set(`${serverName}/${scenarioName}`, row);
  return row;
}

function describeErrors(raw) {
  const parts = [];
  const byStatus = Object.entries(raw.responses_by_status ?? {})
    .filter(([s]) => Number(s) !== raw.expect)
    .map(([s, n]) => `${n} x ${s}`);
  if (byStatus.length) parts.push(`unexpected statuses: ${byStatus.join(', ')}`);
  if (raw.fail_body_hits) parts.push(`${raw.fail_body_hits} answers held an item error`);
  if (raw.unexpected_sample) parts.push(`first: ${raw.unexpected_sample.status} ${raw.unexpected_sample.body}`);
  const d = raw.error_detail ?? {};
  const transport = Object.entries(d).filter(([k, n]) => n > 0 && k !== 'server_closed');
  if (transport.length) parts.push(`transport errors: ${transport.map(([k, n]) => `${k} ${n}`).join(', ')}`);
  if (raw.tool === 'wrk' && raw.unexpected) parts.push(`${raw.unexpected} non-2xx/3xx responses`);
  if (raw.backlog_at_end > 0 && raw.mode === 'open') parts.push(`${raw.backlog_at_end} requests never sent (backlog at end)`);
  return parts.length ? parts.join('; ') : undefined;
}

async function runWrkRow(sc, server, tmp, ctx) {
  const conns = scenarioConnections(sc);
  log(`${sc.name} on ${server.name}: wrk cross-check, ${conns} connections, ${durationS}s`);
  const raw = await runWrk({ port: server.port, requests: sc.requests(ctx), connections: conns, duration: durationS, customers: sc.customers, tmp });
  raw.expect = sc.expect[server.name];
  const row = finishLoadRow({ ...sc, targets: [] }, server.name, raw, undefined, `${sc.name} (wrk)`);
  row.note = [describeErrors(raw), 'wrk: closed loop, warm-up included, no p99.9'].filter(Boolean).join('; ');
  return row;
}

async function runMemoryScenario(sc, inst, tmp, ctx) {
  const batch = sc.batchSize ?? 100;
  const customers = sc.customers ?? 1_000_000;
  log(`${sc.name}: ${customers} customers in batches of ${batch}, then VmRSS of pid ${inst.child.pid}`);
  const raw = await runLoadgen({
    port: inst.port,
    requests: sc.requests(ctx),
    loop: 'closed',
    connections: scenarioConnections(sc),
    duration: 900,
    warmup: 0,
    expect: sc.expect.service,
    failBody: sc.failBody,
    customers,
    custOrder: 'seq',
    maxRequests: Math.ceil(customers / batch),
    tmp,
  });
  await sleep(3000); // let projections and passivation settle before reading RSS
  if (inst.child.exited) throw new Error(`service died: ${inst.child.describeExit()}`);
  const load = loadMetrics(raw, batch);
  const mem = readRssMb(inst.child.pid);
  const metrics = { ...mem, events_per_s: load.events_per_s, errors: load.errors, error_rate: load.error_rate };
  const { checks, pass, errorsOk } = checkTargets(metrics, sc.targets);
  return { scenario: sc.name, title: sc.title, server: 'service', kind: 'memory', metrics, ratio: null, checks, pass, errorsOk, note: describeErrors(raw), raw };
}

async function runRestartScenario(sc, backend, tmp) {
  const batch = sc.batchSize ?? 100;
  const events = sc.events ?? 500_000;
  // No snapshot at all (neither the cycle nor the early triggers): every record is replayed.
  const inst = await startService(backend, tmp, {
    SNAPSHOT_EVERY_MS: String(sc.snapshotEveryMs ?? 3_600_000),
    SNAPSHOT_DIRTY_ACTORS_MAX: String(Number.MAX_SAFE_INTEGER),
    SNAPSHOT_TAIL_RECORDS_MAX: String(Number.MAX_SAFE_INTEGER),
  });
  try {
    const auth = await setupTenant(inst.api);
    const ctx = { server: 'service', auth, api: inst.api, vars: {} };
    log(`${sc.name}: journaling ${events} events (no snapshot), then kill -9 pid ${inst.child.pid}`);
    const raw = await runLoadgen({
      port: inst.port,
      requests: sc.requests(ctx),
      loop: 'closed',
      connections: scenarioConnections(sc),
      duration: 900,
      warmup: 0,
      expect: sc.expect.service,
      failBody: sc.failBody,
      maxRequests: Math.ceil(events / batch),
      tmp,
    });
    // A 207 whose body holds an item error is not counted as journaled.
    const accepted =
      ((raw.responses_by_status?.[String(sc.expect.service)] ?? 0) - (raw.fail_body_hits ?? 0)) * batch;
    await inst.child.kill('SIGKILL');
    const t0 = performance.now();
    const child = inst.respawn();
    await waitReady(child, inst.port, 120000, 10);
    const readyMs = performance.now() - t0;
    // CPU the recovery took (steadier than the wall time when other work shares the box).
    const readyCpuS = processCpuSeconds(child.pid);
    const readyRss = readRssMb(child.pid);
    let restartMs = null;
    let lastAnswer = '';
    const one = { 'Content-Type': 'application/json', Authorization: `Bearer ${auth.osk}` };
    while (performance.now() - t0 < 120000) {
      if (child.exited) throw new Error(`service died after restart: ${child.describeExit()}`);
      const body = {
        id: `restart-${randomUUID()}`,
        name: 'level.completed',
        customer_id: 'c-1',
        occurred_at: new Date().toISOString(),
        properties: { level: 3 },
      };
      try {
        const r = await inst.api('POST', '/v1/events', body, one);
        if (r.status === 202 || r.status === 200) {
          restartMs = performance.now() - t0;
          break;
        }
        lastAnswer = `${r.status} ${JSON.stringify(r.json)}`;
      } catch (err) {
        lastAnswer = err.message;
      }
      await sleep(10);
    }
    if (restartMs === null) throw new Error(`no POST /v1/events succeeded within 120 s after restart: ${lastAnswer}`);
    // Partitions replay in the background once the node serves (a call's own partition first):
    // the whole replay ends when /readyz reports none recovering; its CPU and peak memory are read then.
    let recoveredMs = null;
    while (performance.now() - t0 < 120000) {
      if (child.exited) throw new Error(`service died after restart: ${child.describeExit()}`);
      try {
        const r = await fetch(`http://127.0.0.1:${inst.port}/readyz`, { signal: AbortSignal.timeout(1000) });
        const body = await r.json();
        if (Number(body.checks?.partitions_recovering ?? 0) === 0) {
          recoveredMs = performance.now() - t0;
          break;
        }
      } catch {
        // busy replaying: ask again
      }
      await sleep(20);
    }
    const recoveredCpuS = processCpuSeconds(child.pid);
    const recoveredRss = readRssMb(child.pid);
    const load = loadMetrics(raw, batch);
    const metrics = {
      ready_ms: readyMs,
      ready_cpu_s: readyCpuS,
      ready_rss_peak_mb: readyRss.rss_peak_mb,
      restart_ms: restartMs,
      recovered_ms: recoveredMs,
      recovered_cpu_s: recoveredCpuS,
      recovered_rss_peak_mb: recoveredRss.rss_peak_mb,
      events_loaded: accepted,
      events_per_s: load.events_per_s,
      errors: load.errors,
      error_rate: load.error_rate,
    };
    const { checks, pass, errorsOk } = checkTargets(metrics, sc.targets);
    const notes = [describeErrors(raw)];
    if (accepted < events) notes.push(`only ${accepted} of ${events} events acknowledged before the kill`);
    return { scenario: sc.name, title: sc.title, server: 'service', kind: 'restart', metrics, ratio: null, checks, pass: pass && accepted >= events, errorsOk, note: notes.filter(Boolean).join('; ') || undefined, raw };
  } finally {
    // With --cpu-prof the restarted process writes its profile (the recovery) when it stops.
    await inst.child.stop(opt['cpu-prof'] ? 120000 : 3000);
  }
}

// ------------------------------------------------------------------------------------------------
// Main

async function main() {
  installCleanup();
  const startedAt = new Date();
  const loadAvgAtStart = os.loadavg();
  const only = opt.only ? new Set(opt.only.split(',').map((s) => s.trim())) : null;
  if (only) {
    const unknown = [...only].filter((n) => !scenarios.some((s) => s.name === n));
    if (unknown.length) throw new Error(`unknown scenario(s): ${unknown.join(', ')}\n${usage}`);
  }
  const selected = scenarios.filter((s) => !only || only.has(s.name));
  const cpus = os.availableParallelism();
  const pin = cpus >= 2 && hasCommand('taskset');
  setPinning(pin);
  if (!pin) log(`WARNING: ${cpus} CPU(s) or no taskset: server and loadgen are NOT pinned; figures are not comparable`);

  buildLoadgen();
  const wrkOk = ensureWrk();
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'native-bench-'));
  removeOnExit(tmp);
  /** @type {any[]} */
  const rows = [];
  let failed = false;
  let buildWarning = '';

  const record = (row) => {
    rows.push(row);
    const m = row.metrics ?? {};
    const tp = row.kind === 'load' ? `${Math.round(row.unit === 'events' ? m.events_per_s : m.rps)} ${row.unit === 'events' ? 'events' : 'req'}/s p99 ${m.p99_ms?.toFixed(2)} ms errors ${m.errors}` : JSON.stringify(m);
    log(`  -> ${row.scenario} / ${row.server}: ${row.error ? `ERROR ${row.error}` : tp}`);
  };
  const errorRow = (sc, server, err) => {
    failed = true;
    const message = err instanceof Error ? err.message : String(err);
    console.error(`\nbench: ${sc.name} on ${server} failed:\n${message}\n`);
    record({ scenario: sc.name, title: sc.title, server, kind: sc.kind, error: message.split('\n')[0], detail: message });
  };

  try {
    // 1. The bare server: the ceiling.
    const bareScenarios = selected.filter((s) => s.kind === 'load' && s.servers.includes('bare'));
    if (!opt['skip-bare'] && bareScenarios.length) {
      const bare = await startBare(tmp);
      log(`bare server pid ${bare.pid} on :${bare.port}, pinned to cpu ${SERVER_CPU}`);
      const ctx = { server: 'bare', auth: null, api: null, vars: {} };
      try {
        for (const sc of bareScenarios) {
          try {
            record(await runLoadScenario(sc, bare, tmp, ctx));
            if (sc.wrk && wrkOk) record(await runWrkRow(sc, bare, tmp, ctx));
          } catch (err) {
            errorRow(sc, 'bare', err);
            if (bare.child.exited) break;
          }
        }
      } finally {
        await bare.child.stop();
      }
    }

    // 2. The service.
    const serviceScenarios = selected.filter((s) => s.servers.includes('service'));
    if (!opt['skip-service'] && serviceScenarios.length) {
      const distMain = path.resolve(root, opt['service-main']);
      if (!opt['no-build']) {
        log('npm run build');
        const build = spawnSync('npm', ['run', 'build'], { cwd: root, encoding: 'utf8' });
        if (build.status !== 0) {
          const out = `${build.stdout ?? ''}${build.stderr ?? ''}`.trim().split('\n').slice(-15).join('\n  ');
          if (!existsSync(distMain)) {
            throw new Error(`\`npm run build\` failed and ${distMain} does not exist:\n  ${out}`);
          }
          // tsc still emits on type errors: measure what was emitted, but say so everywhere.
          buildWarning = '`npm run build` reported errors; the emitted dist was benchmarked';
          log(`WARNING: ${buildWarning}:\n  ${out}`);
        }
      }
      if (!existsSync(distMain)) throw new Error(`${distMain} does not exist (run \`npm run build\`)`);
      const backend = await startBackend(tmp);
      try {
        const shared = serviceScenarios.filter((s) => !s.isolated);
        if (shared.length) {
          let inst;
          try {
            inst = await startService(backend, tmp);
          } catch (err) {
            for (const sc of shared) errorRow(sc, 'service', err);
          }
          if (inst) {
            try {
              let ctx;
              try {
                const auth = await setupTenant(inst.api);
                ctx = { server: 'service', auth, api: inst.api, vars: {} };
              } catch (err) {
                for (const sc of shared) errorRow(sc, 'service', err);
              }
              for (const sc of ctx ? shared : []) {
                try {
                  if (inst.child.exited) throw new Error(`service is not running: ${inst.child.describeExit()}`);
                  if (sc.setup) ctx.vars = { ...ctx.vars, ...(await sc.setup(ctx)) };
                  // Let the previous scenario's after-the-ack work (projection, snapshots) settle,
                  // so each scenario measures its own load rather than the last one's backlog.
                  await settleService(inst, settleMs);
                  if (sc.kind === 'load') {
                    record(await runLoadScenario(sc, inst, tmp, ctx));
                    if (sc.wrk && wrkOk) record(await runWrkRow(sc, inst, tmp, ctx));
                  } else if (sc.kind === 'memory') {
                    record(await runMemoryScenario(sc, inst, tmp, ctx));
                  } else {
                    throw new Error(`scenario kind ${sc.kind} cannot share an instance`);
                  }
                } catch (err) {
                  errorRow(sc, 'service', err);
                }
              }
            } finally {
              // A profiled service writes its profile on exit, after draining: give it time.
              await inst.child.stop(opt['cpu-prof'] ? 120000 : 3000);
            }
          }
        }
        for (const sc of serviceScenarios.filter((s) => s.isolated)) {
          try {
            if (sc.kind !== 'restart') throw new Error(`isolated scenario kind ${sc.kind} is not supported`);
            record(await runRestartScenario(sc, backend, tmp));
          } catch (err) {
            errorRow(sc, 'service', err);
          }
        }
      } finally {
        await backend.stop();
      }
    }
  } catch (err) {
    failed = true;
    const message = err instanceof Error ? err.message : String(err);
    console.error(`\nbench: ${message}\n`);
    // Every selected scenario without a row gets one that names the failure.
    for (const sc of selected) {
      for (const server of sc.servers) {
        if (server === 'bare' && (opt['skip-bare'] || sc.kind !== 'load')) continue;
        if (server === 'service' && opt['skip-service']) continue;
        if (!rows.some((r) => r.scenario === sc.name && r.server === server)) {
          rows.push({ scenario: sc.name, title: sc.title, server, kind: sc.kind, error: message.split('\n')[0], detail: message });
        }
      }
    }
  }

  // 3. Results.
  const resultsDir = path.join(benchDir, 'results');
  mkdirSync(resultsDir, { recursive: true });
  const stamp = startedAt.toISOString().replace(/[:.]/g, '-');
  const header =
    `# native-bench ${startedAt.toISOString()}\n\n` +
    `${os.cpus()[0]?.model ?? 'cpu'} x ${cpus}, node ${process.version}, kernel ${os.release()}; ` +
    `server on cpu ${pin ? SERVER_CPU : '-'}, loadgen on cpu ${pin ? LOADGEN_CPU : '-'}; ` +
    `load average at start ${loadAvgAtStart.map((l) => l.toFixed(2)).join(' ')} (anything well above 0 means other work shared the cores); ` +
    `${durationS}s measured after ${warmupS}s warm-up; service ${opt['skip-service'] ? 'skipped' : opt.embedded ? 'embedded' : 'Redis (AOF everysec) + PostgreSQL'}.\n` +
    `Latency: closed loop from the actual send; open loop from the intended send time (coordinated-omission free).\n` +
    (buildWarning ? `\n**WARNING: ${buildWarning}.**\n` : '') +
    '\n';
  const md = header + renderMarkdown(rows);
  const json = {
    started_at: startedAt.toISOString(),
    finished_at: new Date().toISOString(),
    host: {
      cpu: os.cpus()[0]?.model,
      cpus,
      node: process.version,
      kernel: os.release(),
      loadavg_at_start: loadAvgAtStart,
    },
    pinning: pin ? { server_cpu: SERVER_CPU, loadgen_cpu: LOADGEN_CPU } : null,
    options: { ...opt },
    warnings: buildWarning ? [buildWarning] : [],
    rows,
  };
  writeFileSync(path.join(resultsDir, `${stamp}.json`), `${JSON.stringify(json, null, 2)}\n`);
  writeFileSync(path.join(resultsDir, `${stamp}.md`), md);
  console.log(`\n${md}`);
  log(`results: native-bench/results/${stamp}.json and .md`);
  process.exitCode = failed ? 1 : 0;
}

await main();
