// Bench results: turns raw loadgen/wrk/probe output into rows, checks targets, renders markdown.
// Pure functions only (no I/O, no clock): run.mjs feeds them and writes the files.
// Invariant: a row with errors above errorRateMax fails whatever its throughput, so a server that
// answers fast with the wrong status can never pass.

/** Share of requests that may fail (transport error or unexpected status) before a row fails. */
export const errorRateMax = 0.001;

/**
 * Metrics of one load run. `loadgen` is the parsed JSON of native-bench/bin/loadgen.
 * @param {any} loadgen
 * @param {number} eventsPerRequest
 */
export function loadMetrics(loadgen, eventsPerRequest) {
  const lat = loadgen.latency_us ?? {};
  const unexpected = loadgen.unexpected ?? 0;
  const transport = loadgen.errors ?? 0;
  const answered = loadgen.responses ?? 0;
  const rps = loadgen.rps ?? 0;
  return {
    rps,
    events_per_s: rps * eventsPerRequest,
    p50_ms: (lat.p50 ?? 0) / 1000,
    p90_ms: (lat.p90 ?? 0) / 1000,
    p99_ms: (lat.p99 ?? 0) / 1000,
    p999_ms: typeof lat.p999 === 'number' ? lat.p999 / 1000 : null,
    max_ms: (lat.max ?? 0) / 1000,
    errors: transport + unexpected,
    // Nothing answered and nothing failed: only an overloaded open loop (all unsent) is not an error.
    error_rate:
      answered + transport > 0
        ? (transport + unexpected) / (answered + transport)
        : (loadgen.unsent_recorded ?? 0) > 0
          ? 0
          : 1,
  };
}

/**
 * Ratio to bare for one metric: throughput metrics are service/bare (higher is better), latency
 * metrics are service/bare too (lower is better); the caller says which in `ratioOf`.
 * @param {Record<string, number>} service
 * @param {Record<string, number> | undefined} bare
 * @param {string} metric
 */
export function ratioToBare(service, bare, metric) {
  if (!bare) return null;
  const b = bare[metric];
  const s = service[metric];
  if (typeof b !== 'number' || typeof s !== 'number' || b === 0) return null;
  return s / b;
}

/**
 * @typedef {{metric: string, op: '>=' | '<=', value: number, label?: string}} Target
 * @param {Record<string, number | null>} metrics  includes `ratio` when a bare row exists
 * @param {Target[]} targets
 */
export function checkTargets(metrics, targets) {
  const checks = targets.map((t) => {
    const actual = metrics[t.metric];
    const ok =
      typeof actual === 'number' && Number.isFinite(actual)
        ? t.op === '>=' ? actual >= t.value : actual <= t.value
        : false;
    return { ...t, actual: typeof actual === 'number' ? actual : null, ok };
  });
  const errorsOk = metrics.error_rate === undefined || (metrics.error_rate ?? 1) <= errorRateMax;
  return { checks, pass: checks.every((c) => c.ok) && errorsOk, errorsOk };
}

/** @param {number} n */
export function fmtInt(n) {
  return Math.round(n).toLocaleString('en-US');
}

/** @param {number | null | undefined} ms */
export function fmtMs(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '-';
  if (ms >= 1000) return `${(ms / 1000).toFixed(2)} s`;
  if (ms >= 10) return `${ms.toFixed(1)} ms`;
  return `${ms.toFixed(2)} ms`;
}

/** @param {Target} t */
export function describeTarget(t) {
  const unit = {
    rps: ' req/s',
    events_per_s: ' events/s',
    p99_ms: ' ms p99',
    ratio: ' x bare',
    rss_peak_mb: ' MB peak RSS',
    restart_ms: ' ms to serve',
  }[t.metric];
  const v = t.metric.endsWith('_s') || t.metric === 'rps' ? fmtInt(t.value) : String(t.value);
  return t.label ?? `${t.op} ${v}${unit ?? ` ${t.metric}`}`;
}

/**
 * What else ran per event (PostgreSQL, Redis, the load generator), how busy each core was and how
 * much of each core's time the hypervisor took (steal), when it took any.
 */
function cpuSplit(m) {
  const parts = [];
  if (typeof m.postgres_cpu_us_per_event === 'number') parts.push(`PostgreSQL ${m.postgres_cpu_us_per_event.toFixed(0)}`);
  if (typeof m.redis_cpu_us_per_event === 'number') parts.push(`Redis ${m.redis_cpu_us_per_event.toFixed(0)}`);
  if (typeof m.loadgen_cpu_us_per_event === 'number') parts.push(`loadgen ${m.loadgen_cpu_us_per_event.toFixed(0)}`);
  const pct = (xs) => xs.map((b) => `${Math.round(b * 100)} %`).join(' / ');
  let cores = Array.isArray(m.cores_busy) ? `cores ${pct(m.cores_busy)} busy` : '';
  if (cores !== '' && Array.isArray(m.cores_stolen) && m.cores_stolen.some((s) => s >= 0.01)) {
    cores += `, ${pct(m.cores_stolen)} stolen`;
  }
  if (parts.length === 0 && cores === '') return '';
  return ` (${[parts.length ? `${parts.join(', ')} µs` : '', cores].filter(Boolean).join('; ')})`;
}

/**
 * One markdown table for every row.
 * @param {Array<any>} rows  {scenario, server, kind, metrics, ratio, ratioOf, checks, pass, note}
 */
export function renderMarkdown(rows) {
  const head =
    '| scenario | server | throughput | p50 | p99 | p999 | errors | vs bare (or baseline) | target | result |\n' +
    '|---|---|---|---|---|---|---|---|---|---|\n';
  const lines = rows.map((r) => {
    const m = r.metrics ?? {};
    let throughput = '-';
    if (r.error) {
      throughput = '-';
    } else if (r.kind === 'memory') {
      throughput = `RSS ${fmtInt(m.rss_mb)} MB, peak ${fmtInt(m.rss_peak_mb)} MB (${fmtInt(m.events_per_s)} events/s load)`;
    } else if (r.kind === 'restart') {
      throughput = `ready ${fmtInt(m.ready_ms)} ms${m.ready_cpu_s == null ? '' : ` (${m.ready_cpu_s.toFixed(1)} s server CPU, peak RSS ${fmtInt(m.ready_rss_peak_mb)} MB)`}, first event ${fmtInt(m.restart_ms)} ms${m.recovered_ms == null ? '' : `, every partition replayed ${fmtInt(m.recovered_ms)} ms (${m.recovered_cpu_s == null ? "?" : m.recovered_cpu_s.toFixed(1)} s CPU, peak RSS ${fmtInt(m.recovered_rss_peak_mb)} MB)`} (${fmtInt(m.events_loaded)} events journaled)`;
    } else if (r.unit === 'events') {
      throughput = `${fmtInt(m.events_per_s)} events/s (${fmtInt(m.rps)} req/s)`;
    } else if (m.rps !== undefined) {
      throughput = `${fmtInt(m.rps)} req/s`;
    }
    if (r.rate) throughput += ` @ ${fmtInt(r.rate)}/s offered`;
    if (typeof m.cpu_us_per_event === 'number') throughput += `; ${m.cpu_us_per_event.toFixed(1)} µs server CPU/event`;
    throughput += cpuSplit(m);
    const ratio =
      r.ratio === null || r.ratio === undefined
        ? '-'
        : `${r.ratio.toFixed(2)}${r.ratioOf === 'p99_ms' ? ' (p99)' : ''}${r.baseline ? ` x ${r.baseline}` : ''}`;
    const target = (r.checks ?? []).map((c) => describeTarget(c)).join('; ') || '-';
    const result = r.error
      ? `ERROR: ${r.error}`
      : !r.checks || r.checks.length === 0
        ? r.errorsOk === false ? 'fail (errors)' : 'info'
        : r.pass ? 'pass' : r.errorsOk === false ? 'fail (errors)' : 'fail';
    const errs = m.errors === undefined ? '-' : fmtInt(m.errors);
    const cells = [
      r.scenario,
      r.server,
      throughput,
      r.kind === 'load' ? fmtMs(m.p50_ms) : '-',
      r.kind === 'load' ? fmtMs(m.p99_ms) : '-',
      r.kind === 'load' ? fmtMs(m.p999_ms) : '-',
      errs,
      ratio,
      target,
      result,
    ];
    return `| ${cells.map((c) => String(c).replaceAll('|', '\\|')).join(' | ')} |`;
  });
  const notes = rows
    .filter((r) => r.note)
    .map((r) => `- ${r.scenario} / ${r.server}: ${r.note}`)
    .join('\n');
  return head + lines.join('\n') + '\n' + (notes ? `\nNotes:\n${notes}\n` : '');
}
