// The one scheduler of due work. Every job that falls due with time (ledger confirmations and
// expiries and the tier downgrade checks they drive, reward issuance expiry, re-drives and stock
// reconciliation, challenge and campaign ends) runs from here: every minute, each environment by its
// own clock (a test clock's offset counts), and for one environment right after its test clock
// moves. Jobs are idempotent (each settles through the customers' actors or one conditional
// statement), so nodes sweeping together is harmless.
import type { Logger } from 'pino';

/** What one environment's run settled: the customers whose actors ran due work, challenges and campaigns ended. */
export interface DueRun {
  customerIds: readonly string[];
  challengesEnded: number;
  /** Absent: the job ends no campaigns. */
  campaignsEnded?: number;
}

export interface DueJob {
  readonly name: string;
  /** Everything due, in every environment, each by its own clock. */
  sweep(): Promise<void>;
  /** Everything due in one environment at `nowMs` (a test clock's time), and what it settled. */
  runForEnvironment(environmentId: string, nowMs: number): Promise<DueRun>;
}

const everyMs = 60_000;

export class Scheduler {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;

  constructor(
    private readonly jobs: readonly DueJob[],
    private readonly logger: Logger,
  ) {}

  start(): void {
    this.timer = setInterval(() => {
      this.running ??= this.sweep().finally(() => {
        this.running = null;
      });
    }, everyMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.running;
  }

  /** One pass of every job, in order; a failing job is logged and the next sweep retries it. */
  async sweep(): Promise<void> {
    for (const job of this.jobs) {
      await job.sweep().catch((err: unknown) => this.logger.warn({ err, job: job.name }, 'due-work sweep failed; the next one retries'));
    }
  }

  /**
   * Runs every job for one environment at `nowMs` (after a test clock advance), in order. A
   * customer settled by several jobs (ledger and reward expiry) counts once.
   */
  async runForEnvironment(environmentId: string, nowMs: number): Promise<{ customersSettled: number; challengesEnded: number; campaignsEnded: number }> {
    const customers = new Set<string>();
    let challengesEnded = 0;
    let campaignsEnded = 0;
    for (const job of this.jobs) {
      const run = await job.runForEnvironment(environmentId, nowMs);
      for (const id of run.customerIds) customers.add(id);
      challengesEnded += run.challengesEnded;
      campaignsEnded += run.campaignsEnded ?? 0;
    }
    return { customersSettled: customers.size, challengesEnded, campaignsEnded };
  }
}
