// Piscina worker: CPU-only tasks that must never run on the event loop of the hot path (rule
// compilation and simulation join here with the Core mechanics issue). Pure functions of their
// input: no I/O, no shared state, so any thread can run any task.
import { threadId } from 'node:worker_threads';
import { canonicalJson, hash53 } from '../util/canonical-json.js';

export type Task =
  /** Health probe: proves a thread can take and finish work. */
  | { kind: 'ping'; nonce: number }
  /** Content fingerprints of many documents at once (bulk imports, backfills). */
  | { kind: 'fingerprint'; documents: unknown[] };

export type TaskResult = { kind: 'pong'; nonce: number; threadId: number } | { kind: 'fingerprints'; values: number[] };

export default function run(task: Task): TaskResult {
  switch (task.kind) {
    case 'ping':
      return { kind: 'pong', nonce: task.nonce, threadId };
    case 'fingerprint':
      return { kind: 'fingerprints', values: task.documents.map((d) => hash53(canonicalJson(d))) };
  }
}
