// Commands in flight, by epoch: enter() tags a command with the current epoch, leave() ends it;
// settled() opens a new epoch and resolves once every command of the earlier epochs has left.
// The engine keeps one for the commands that record an event (engine.ts, settled), the barrier a
// new counter definition needs (cluster/counters-barrier.ts). O(1) per command: the current
// epoch's count is a field; earlier epochs that still have commands out are a few map entries
// (one per settled() call at most).
export class InFlight {
  private epoch = 0;
  private current = 0;
  /** Earlier epochs with commands still out, and how many. */
  private readonly older = new Map<number, number>();
  private waiters: Array<{ upTo: number; resolve: () => void }> = [];

  /** A command starts; pass the answer to leave() when it settles. */
  enter(): number {
    this.current++;
    return this.epoch;
  }

  leave(epoch: number): void {
    if (epoch === this.epoch) {
      this.current--;
      return;
    }
    const n = (this.older.get(epoch) ?? 1) - 1;
    if (n > 0) {
      this.older.set(epoch, n);
      return;
    }
    this.older.delete(epoch);
    if (this.waiters.length > 0) this.wake();
  }

  /** Resolves once every command that entered before this call has left (at once when none is out). */
  settled(): Promise<void> {
    const upTo = this.epoch;
    if (this.current > 0) this.older.set(upTo, this.current);
    this.current = 0;
    this.epoch++;
    if (!this.openUpTo(upTo)) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ upTo, resolve }));
  }

  /** Commands out now, whatever their epoch. */
  get size(): number {
    let n = this.current;
    for (const c of this.older.values()) n += c;
    return n;
  }

  private openUpTo(upTo: number): boolean {
    for (const e of this.older.keys()) if (e <= upTo) return true;
    return false;
  }

  private wake(): void {
    this.waiters = this.waiters.filter((w) => {
      if (this.openUpTo(w.upTo)) return true;
      w.resolve();
      return false;
    });
  }
}
