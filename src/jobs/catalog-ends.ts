// The end sweeps of the due-work scheduler for catalog items with an `ends_at`: a challenge whose
// ends_at has passed becomes `ended` (progress already stops at ends_at inside the actor, which
// compares with the event's time), and so does an active or paused campaign (its rules already
// stop at ends_at, gated at processing time by the customer's step; ending it also gives back the
// budget chunks nodes leased for it). This makes the status and the status filters say so. Runs
// every minute, each environment by its own clock (a test clock's offset counts), and for one
// environment right after its test clock moves. Ending is one conditional UPDATE per catalog, so
// overlapping sweeps (or nodes) are harmless.
import type { DueJob, DueRun } from './scheduler.js';

/** What the sweep needs of a catalog (ChallengeCatalog, CampaignCatalog). */
export interface EndingCatalog {
  /** Ends the environment's items whose ends_at is at or before nowMs; counts them. */
  endDue(environmentId: string, nowMs: number): Promise<number>;
  /** Environments with an item due to end by their own clock when the real clock reads nowMs (a test clock runs ahead). */
  environmentsWithEndsDue(nowMs: number): Promise<string[]>;
}

export class CatalogEnds implements DueJob {
  constructor(
    readonly name: string,
    private readonly catalog: EndingCatalog,
    private readonly now: (environmentId: string) => number | Promise<number>,
    /** The run's report: how many ended, under the field the test clock's answer shows. */
    private readonly report: (ended: number) => DueRun,
  ) {}

  /** Everything due, each environment by its own clock (the scheduler calls it every minute). */
  async sweep(): Promise<void> {
    for (const env of await this.catalog.environmentsWithEndsDue(Date.now())) {
      await this.runForEnvironment(env, await this.now(env));
    }
  }

  /** Ends the environment's items whose ends_at is at or before nowMs. */
  async runForEnvironment(environmentId: string, nowMs: number): Promise<DueRun> {
    return this.report(await this.catalog.endDue(environmentId, nowMs));
  }
}
