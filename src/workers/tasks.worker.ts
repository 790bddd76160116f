// Piscina worker: CPU-only tasks that must never run on the event loop of the hot path (rule
// validation and compilation, counter backfill bases). Pure functions of their input: no I/O, no
// shared state, so any thread can run any task. (Simulate compiles here once per rule record and
// traces on the request thread: src/gateway/simulation-plans.ts.)
import { threadId } from 'node:worker_threads';
import type { CounterState, CounterWindow } from '../domain/counters.js';
import type { RuleMeta, RulePlan } from '../domain/rules/compile.js';
import type { RuleProblem } from '../domain/rules/schema.js';
import { canonicalJson, hash53 } from '../util/canonical-json.js';

export type Task =
  /** Health probe: proves a thread can take and finish work. */
  | { kind: 'ping'; nonce: number }
  /** Content fingerprints of many documents at once (bulk imports, backfills). */
  | { kind: 'fingerprint'; documents: unknown[] }
  /** Validate a rule definition document and compile it into an evaluation plan (plain data). */
  | { kind: 'rule.compile'; definition: unknown; meta: RuleMeta }
  /** A counter backfill's historical bases for a page of customers (their past events). */
  | { kind: 'counter.bases'; def: CounterDefSource; timeZone: string; nowMs: number; customers: BackfillCustomer[] };

export type TaskResult =
  | { kind: 'pong'; nonce: number; threadId: number }
  | { kind: 'fingerprints'; values: number[] }
  | { kind: 'rule.compiled'; ok: true; plan: RulePlan; threadId: number }
  | { kind: 'rule.compiled'; ok: false; problems: RuleProblem[]; threadId: number }
  | { kind: 'counter.bases'; bases: Array<{ customerId: string; base: CounterState }>; threadId: number };

/** A counter definition as stored (the filter uncompiled: plans are compiled in the thread). */
export interface CounterDefSource {
  id: string;
  name: string;
  event: string;
  window: CounterWindow;
  filter: unknown;
}

export interface BackfillCustomer {
  customerId: string;
  events: Array<{ occurredAtMs: number; properties: Record<string, unknown> }>;
}

// The rules code (and zod) loads on the first rule task, not at thread start, so a fresh thread
// answers the health ping as fast as before.
let rules: Promise<typeof import('../domain/rules/index.js')> | null = null;
function loadRules(): Promise<typeof import('../domain/rules/index.js')> {
  rules ??= import('../domain/rules/index.js');
  return rules;
}

// Compiled definitions, most recently used last: a definition asked for again (simulate compiles
// again whenever its rule record is reloaded, which any rule change of the environment causes) is
// validated and compiled once per thread, not per call.
const compiledMax = 256;
const compiled = new Map<string, ReturnType<Awaited<ReturnType<typeof loadRules>>['validateAndCompile']>>();

async function runRuleTask(task: Extract<Task, { kind: 'rule.compile' }>): Promise<TaskResult> {
  const { validateAndCompile } = await loadRules();
  const key = canonicalJson([task.definition, task.meta]);
  let c = compiled.get(key);
  if (c === undefined) {
    c = validateAndCompile(task.definition, task.meta);
    if (compiled.size >= compiledMax) compiled.delete(compiled.keys().next().value as string);
  } else {
    compiled.delete(key);
  }
  compiled.set(key, c);
  return c.ok ? { kind: 'rule.compiled', ok: true, plan: c.plan, threadId } : { kind: 'rule.compiled', ok: false, problems: c.problems, threadId };
}

let counters: Promise<typeof import('../domain/counters.js')> | null = null;

async function runBases(task: Extract<Task, { kind: 'counter.bases' }>): Promise<TaskResult> {
  counters ??= import('../domain/counters.js');
  const { historicalBasesOf } = await counters;
  return { kind: 'counter.bases', bases: historicalBasesOf(task.def, task.customers, task.timeZone, task.nowMs), threadId };
}

export default function run(task: Task): TaskResult | Promise<TaskResult> {
  switch (task.kind) {
    case 'ping':
      return { kind: 'pong', nonce: task.nonce, threadId };
    case 'fingerprint':
      return { kind: 'fingerprints', values: task.documents.map((d) => hash53(canonicalJson(d))) };
    case 'rule.compile':
      return runRuleTask(task);
    case 'counter.bases':
      return runBases(task);
  }
}
