// The piscina worker pool for CPU work off the event loop. Resolves the worker file next to this
// module (.js in dist, .ts under the test loader, whose flags worker threads inherit). Its health
// (a ping answered within a bound) is part of /readyz.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Piscina } from 'piscina';
import type { Task, TaskResult } from './tasks.worker.js';

export class WorkerPool {
  private readonly piscina: Piscina;
  private nonce = 0;

  constructor(threads: number) {
    const js = new URL('./tasks.worker.js', import.meta.url);
    const filename = existsSync(fileURLToPath(js)) ? js.href : new URL('./tasks.worker.ts', import.meta.url).href;
    this.piscina = new Piscina({ filename, minThreads: 1, maxThreads: threads, idleTimeout: 30_000 });
  }

  run(task: Task): Promise<TaskResult> {
    return this.piscina.run(task) as Promise<TaskResult>;
  }

  /** True when a worker answers a ping within timeoutMs. */
  async healthy(timeoutMs = 1000): Promise<boolean> {
    const nonce = ++this.nonce;
    const timeout = new Promise<false>((r) => setTimeout(r, timeoutMs, false).unref());
    const ping = this.run({ kind: 'ping', nonce }).then((r) => r.kind === 'pong' && r.nonce === nonce, () => false);
    return Promise.race([ping, timeout]);
  }

  get threads(): number {
    return this.piscina.threads.length;
  }

  close(): Promise<void> {
    return this.piscina.destroy();
  }
}
