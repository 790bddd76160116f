// Types of report.mjs for the TypeScript tests (test/unit/bench-report.test.ts).
// Must stay in step with report.mjs; declares only what the tests import.
export const errorRateMax: number;
export interface Target {
  metric: string;
  op: '>=' | '<=';
  value: number;
  label?: string;
}
export interface LoadMetrics {
  rps: number;
  events_per_s: number;
  p50_ms: number;
  p90_ms: number;
  p99_ms: number;
  p999_ms: number | null;
  max_ms: number;
  errors: number;
  error_rate: number;
}
export function loadMetrics(loadgen: unknown, eventsPerRequest: number): LoadMetrics;
export function ratioToBare(
  service: Record<string, unknown>,
  bare: Record<string, unknown> | undefined,
  metric: string,
): number | null;
export function checkTargets(
  metrics: Record<string, number | null | undefined>,
  targets: Target[],
): {
  checks: Array<Target & { actual: number | null; ok: boolean }>;
  pass: boolean;
  errorsOk: boolean;
};
export function fmtInt(n: number): string;
export function fmtMs(ms: number | null | undefined): string;
export function describeTarget(t: Target): string;
export function renderMarkdown(rows: unknown[]): string;
