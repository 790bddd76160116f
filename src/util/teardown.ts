// The undo list of a start made of several parts: each part, once started, registers how it is
// stopped; stopping (or a later part failing to start) runs them newest first. A step that fails
// is reported and the older ones still run, so one stuck part cannot keep the rest open.

export class Teardown {
  private readonly steps: Array<{ name: string; undo: () => unknown }> = [];
  private running: Promise<void> | null = null;

  constructor(private readonly onError: (err: unknown, step: string) => void) {}

  /** Registers the undo of a part that has just started. */
  add(name: string, undo: () => unknown): void {
    if (this.running !== null) throw new Error(`teardown already ran; "${name}" started too late to be undone`);
    this.steps.push({ name, undo });
  }

  /**
   * Runs every registered undo, newest first, once; later calls wait for the same run. When a
   * step failed, the run still finishes the others, then rejects naming the failed steps.
   */
  run(): Promise<void> {
    this.running ??= (async () => {
      const failed: string[] = [];
      const errors: unknown[] = [];
      for (let step = this.steps.pop(); step !== undefined; step = this.steps.pop()) {
        try {
          await step.undo();
        } catch (err) {
          this.onError(err, step.name);
          failed.push(step.name);
          errors.push(err);
        }
      }
      if (failed.length > 0) throw new AggregateError(errors, `stopping failed: ${failed.join(', ')}`);
    })();
    return this.running;
  }
}
