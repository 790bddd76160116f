// The challenge-end sweep: a challenge whose ends_at has passed becomes `ended` in the catalog
// (progress already stops at ends_at inside the actor, which compares with the event's time; this
// makes the status say so). Runs on the real clock every minute, and for one environment right
// after its test clock moves. Ending is idempotent, so overlapping sweeps (or nodes) are harmless.
import type { Logger } from 'pino';
import type { ChallengeCatalog } from '../catalog/challenges.js';

const everyMs = 60_000;

export interface ChallengeEndsDeps {
  challenges: Pick<ChallengeCatalog, 'endDue' | 'environmentsWithEndsDue'>;
  now(environmentId: string): number | Promise<number>;
  logger: Logger;
}

export class ChallengeEnds {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;

  constructor(private readonly deps: ChallengeEndsDeps) {}

  start(): void {
    this.timer = setInterval(() => {
      this.running ??= this.sweep()
        .catch((err: unknown) => this.deps.logger.warn({ err }, 'challenge-end sweep failed'))
        .finally(() => {
          this.running = null;
        });
    }, everyMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.running;
  }

  private async sweep(): Promise<void> {
    for (const env of await this.deps.challenges.environmentsWithEndsDue(Date.now())) {
      await this.runForEnvironment(env, await this.deps.now(env));
    }
  }

  /** Ends the environment's challenges whose ends_at is at or before nowMs; returns how many. */
  runForEnvironment(environmentId: string, nowMs: number): Promise<number> {
    return this.deps.challenges.endDue(environmentId, nowMs);
  }
}
