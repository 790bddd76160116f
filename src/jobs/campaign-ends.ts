// The campaign-end sweep: an active or paused campaign whose ends_at has passed becomes `ended` in
// the catalog (its rules already stop at ends_at, gated at processing time by the customer's
// step; this makes the status and the status filter say so, and gives back the budget chunks
// nodes leased for it). Runs on the real clock every minute, and for one environment right after
// its test clock moves. Ending is one conditional UPDATE, so overlapping sweeps (or nodes) are harmless.
import type { Logger } from 'pino';
import type { CampaignCatalog } from '../catalog/campaigns.js';
import type { DueJob, DueRun } from './scheduler.js';

export interface CampaignEndsDeps {
  campaigns: Pick<CampaignCatalog, 'endDue' | 'environmentsWithEndsDue'>;
  now(environmentId: string): number | Promise<number>;
  logger: Logger;
}

export class CampaignEnds implements DueJob {
  readonly name = 'campaign ends';

  constructor(private readonly deps: CampaignEndsDeps) {}

  /** Everything due by the real clock (the scheduler calls it every minute). */
  async sweep(): Promise<void> {
    for (const env of await this.deps.campaigns.environmentsWithEndsDue(Date.now())) {
      await this.runForEnvironment(env, await this.deps.now(env));
    }
  }

  /** Ends the environment's campaigns whose ends_at is at or before nowMs; counts them. */
  async runForEnvironment(environmentId: string, nowMs: number): Promise<DueRun> {
    return { customerIds: [], challengesEnded: 0, campaignsEnded: await this.deps.campaigns.endDue(environmentId, nowMs) };
  }
}
