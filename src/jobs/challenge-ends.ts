// The challenge-end sweep: a challenge whose ends_at has passed becomes `ended` in the catalog
// (progress already stops at ends_at inside the actor, which compares with the event's time; this
// makes the status say so). Runs on the real clock every minute, and for one environment right
// after its test clock moves. Ending is idempotent, so overlapping sweeps (or nodes) are harmless.
import type { Logger } from 'pino';
import type { DueJob, DueRun } from './scheduler.js';
import type { ChallengeCatalog } from '../catalog/challenges.js';


export interface ChallengeEndsDeps {
  challenges: Pick<ChallengeCatalog, 'endDue' | 'environmentsWithEndsDue'>;
  now(environmentId: string): number | Promise<number>;
  logger: Logger;
}

export class ChallengeEnds implements DueJob {
  readonly name = 'challenge ends';

  constructor(private readonly deps: ChallengeEndsDeps) {}


  /** Everything due by the real clock (the scheduler calls it every minute). */
  async sweep(): Promise<void> {
    for (const env of await this.deps.challenges.environmentsWithEndsDue(Date.now())) {
      await this.runForEnvironment(env, await this.deps.now(env));
    }
  }

  /** Ends the environment's challenges whose ends_at is at or before nowMs; counts them. */
  async runForEnvironment(environmentId: string, nowMs: number): Promise<DueRun> {
    return { customerIds: [], challengesEnded: await this.deps.challenges.endDue(environmentId, nowMs) };
  }
}
