// Group batching of one kind of write: callers submit an item and get a promise for its result;
// the items submitted during the current tick, and those that arrive while a batch is in flight,
// leave together as ONE call of `runMany` (one multi-row statement), with one batch in flight at a
// time (group commit). If a batch fails, its items are retried one by one, so one bad item fails
// alone instead of failing everyone it happened to share a statement with. Never reorders results:
// runMany must answer one result per item, in order.

export interface GroupBatcherOptions {
  /** Most items in one batch; more wait for the next one. */
  itemsMax: number;
}

interface Waiting<I, R> {
  item: I;
  resolve: (r: R) => void;
  reject: (err: unknown) => void;
}

export class GroupBatcher<I, R> {
  private queue: Array<Waiting<I, R>> = [];
  private inFlight = false;
  private scheduled = false;

  constructor(
    private readonly runMany: (items: readonly I[]) => Promise<readonly R[]>,
    private readonly options: GroupBatcherOptions,
  ) {}

  submit(item: I): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      if (!this.inFlight && !this.scheduled) {
        this.scheduled = true;
        // After the current tick: everything submitted by the work of this tick joins the batch.
        setImmediate(() => {
          this.scheduled = false;
          void this.drain();
        });
      }
    });
  }

  /** Items waiting (not yet sent). */
  get waiting(): number {
    return this.queue.length;
  }

  private async drain(): Promise<void> {
    if (this.inFlight) return;
    this.inFlight = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.length <= this.options.itemsMax ? this.queue : this.queue.slice(0, this.options.itemsMax);
        this.queue = batch === this.queue ? [] : this.queue.slice(batch.length);
        await this.send(batch);
      }
    } finally {
      this.inFlight = false;
    }
  }

  private async send(batch: Array<Waiting<I, R>>): Promise<void> {
    let results: readonly R[];
    try {
      results = await this.runMany(batch.map((w) => w.item));
      if (results.length !== batch.length) throw new Error(`group batch answered ${results.length} results for ${batch.length} items`);
    } catch (err) {
      if (batch.length === 1) {
        batch[0]!.reject(err);
        return;
      }
      // One item may be the cause: each alone, so only the bad ones fail.
      await Promise.all(
        batch.map(async (w) => {
          try {
            const one = await this.runMany([w.item]);
            if (one.length !== 1) throw new Error(`group batch answered ${one.length} results for 1 item`);
            w.resolve(one[0]!);
          } catch (e) {
            w.reject(e);
          }
        }),
      );
      return;
    }
    for (let i = 0; i < batch.length; i++) batch[i]!.resolve(results[i]!);
  }
}
