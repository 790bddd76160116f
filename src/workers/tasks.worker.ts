// Piscina worker: CPU-only tasks that must never run on the event loop of the hot path (rule
// compilation and simulation join here with the Core mechanics issue). Pure functions of their
// input: no I/O, no shared state, so any thread can run any task.
import { threadId } from 'node:worker_threads';
import type { RuleMeta, RulePlan } from '../domain/rules/compile.js';
import type { RuleProblem } from '../domain/rules/schema.js';
import type { SimulationInput, SimulationResult } from '../domain/rules/simulate.js';
import { canonicalJson, hash53 } from '../util/canonical-json.js';

export type Task =
  /** Health probe: proves a thread can take and finish work. */
  | { kind: 'ping'; nonce: number }
  /** Content fingerprints of many documents at once (bulk imports, backfills). */
  | { kind: 'fingerprint'; documents: unknown[] }
  /** Validate a rule definition document and compile it into an evaluation plan (plain data). */
  | { kind: 'rule.compile'; definition: unknown; meta: RuleMeta }
  /** Compile a definition and trace it against one event and customer snapshot (simulate). */
  | { kind: 'rule.simulate'; definition: unknown; meta: RuleMeta; input: SimulationInput };

export type TaskResult =
  | { kind: 'pong'; nonce: number; threadId: number }
  | { kind: 'fingerprints'; values: number[] }
  | { kind: 'rule.compiled'; ok: true; plan: RulePlan; threadId: number }
  | { kind: 'rule.simulated'; ok: true; plan: RulePlan; result: SimulationResult; threadId: number }
  | { kind: 'rule.compiled' | 'rule.simulated'; ok: false; problems: RuleProblem[]; threadId: number };

// The rules code (and zod) loads on the first rule task, not at thread start, so a fresh thread
// answers the health ping as fast as before.
let rules: Promise<typeof import('../domain/rules/index.js')> | null = null;
function loadRules(): Promise<typeof import('../domain/rules/index.js')> {
  rules ??= import('../domain/rules/index.js');
  return rules;
}

async function runRuleTask(task: Extract<Task, { kind: 'rule.compile' | 'rule.simulate' }>): Promise<TaskResult> {
  const { validateAndCompile, simulateRule } = await loadRules();
  const c = validateAndCompile(task.definition, task.meta);
  if (task.kind === 'rule.compile') {
    return c.ok ? { kind: 'rule.compiled', ok: true, plan: c.plan, threadId } : { kind: 'rule.compiled', ok: false, problems: c.problems, threadId };
  }
  if (!c.ok) return { kind: 'rule.simulated', ok: false, problems: c.problems, threadId };
  return { kind: 'rule.simulated', ok: true, plan: c.plan, result: simulateRule(c.plan, task.input), threadId };
}

export default function run(task: Task): TaskResult | Promise<TaskResult> {
  switch (task.kind) {
    case 'ping':
      return { kind: 'pong', nonce: task.nonce, threadId };
    case 'fingerprint':
      return { kind: 'fingerprints', values: task.documents.map((d) => hash53(canonicalJson(d))) };
    case 'rule.compile':
    case 'rule.simulate':
      return runRuleTask(task);
  }
}
