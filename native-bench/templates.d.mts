// Types of templates.mjs for the TypeScript tests (test/unit/bench-*.test.ts).
// Must stay in step with templates.mjs; declares only what the tests import.
export interface RequestTemplate {
  method: string;
  path: string;
  headers?: Record<string, string>;
  body?: string;
}
export function eventJson(prefix?: string): string;
export function batchJson(n: number, prefix?: string): string;
export function templateFile(requests: RequestTemplate[]): string;
export function wrkScript(
  requests: RequestTemplate[],
  opts: { customers: number; seqStart: number },
): string;
export function parseWrk(text: string): {
  mode: string;
  tool: string;
  requests: number;
  responses: number;
  errors: number;
  unexpected: number;
  rps: number;
  latency_us: { p50: number; p90: number; p99: number; max: number };
};
export function startNodeArgs(packageJsonText: string): string[];
