// Environment clocks: the real clock, plus a forward-only offset for test environments (the test
// clock of decisions.md). Offsets are cached per environment on every node and dropped through the
// bus when any node advances one, so reading "now" costs no I/O once warm.
import { ApiError } from '../errors/api-error.js';
import type { Bus } from '../persistence/ports.js';
import type { Sql } from '../persistence/sql/db.js';

const channel = 'clock.advanced';

export class EnvironmentClocks {
  private readonly offsets = new Map<string, number>();
  private readonly loading = new Map<string, Promise<number>>();

  constructor(
    private readonly sql: Sql,
    private readonly bus: Bus,
    private readonly realNow: () => number = Date.now,
  ) {}

  async start(): Promise<void> {
    await this.bus.subscribe(channel, (envId) => this.offsets.delete(envId));
  }

  /** The environment's now in ms (synchronous while its offset is cached). */
  now(environmentId: string): number | Promise<number> {
    const offset = this.offsets.get(environmentId);
    if (offset !== undefined) return this.realNow() + offset;
    return this.load(environmentId).then((o) => this.realNow() + o);
  }

  private load(environmentId: string): Promise<number> {
    let p = this.loading.get(environmentId);
    if (!p) {
      p = this.sql`select clock_offset_ms::float8 as o from environments where id = ${environmentId}`
        .then((rows) => {
          const o = (rows[0]?.o as number | undefined) ?? 0;
          this.offsets.set(environmentId, o);
          return o;
        })
        .finally(() => this.loading.delete(environmentId));
      this.loading.set(environmentId, p);
    }
    return p;
  }

  /** Moves a test environment's clock forward; live environments have no test clock (forbidden). */
  async advance(environmentId: string, runtimeClass: 'test' | 'live', seconds: number): Promise<number> {
    if (runtimeClass !== 'test') throw new ApiError('forbidden', { message: 'Only test environments have a test clock.' });
    const rows = await this.sql`
      update environments set clock_offset_ms = clock_offset_ms + ${Math.round(seconds * 1000)}
      where id = ${environmentId} returning clock_offset_ms::float8 as o`;
    const o = rows[0]?.o as number | undefined;
    if (o === undefined) throw new ApiError('resource_not_found', { message: 'No such environment.' });
    this.offsets.set(environmentId, o);
    await this.bus.publish(channel, environmentId).catch(() => {});
    return this.realNow() + o;
  }
}
