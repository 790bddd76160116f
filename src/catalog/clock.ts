// Environment clocks: the real clock, plus a forward-only offset for test environments (the test
// clock of decisions.md). Offsets are cached per environment on every node and dropped through the
// bus when any node advances one, so reading "now" costs no I/O once warm.
import { ApiError } from '../errors/api-error.js';
import type { Bus } from '../persistence/ports.js';
import { createOncePerCall, recordCreate } from '../persistence/sql/create-calls.js';
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

  /**
   * Moves a test environment's clock forward; live environments have no test clock (forbidden).
   * `callId`: the request's (an Idempotency-Key's), recorded with the move in its transaction: a
   * run again of the request (its answer lost) moves nothing and answers the clock as it is now.
   */
  async advance(environmentId: string, runtimeClass: 'test' | 'live', seconds: number, callId?: string): Promise<number> {
    if (runtimeClass !== 'test') throw new ApiError('forbidden', { message: 'Only test environments have a test clock.' });
    const again = {
      found: async () => {
        // Read again, and told again: a first run that died may not have told the other nodes.
        const rows = await this.sql`select clock_offset_ms::float8 as o from environments where id = ${environmentId}`;
        const o = rows[0]?.o as number | undefined;
        if (o === undefined) throw new ApiError('resource_not_found', { message: 'No such environment.' });
        this.offsets.set(environmentId, o);
        await this.bus.publish(channel, environmentId).catch(() => {});
        return this.realNow() + o;
      },
      gone: (envId: string) => `An earlier run of this request moved the clock of environment ${envId}, which is gone since.`,
    };
    return createOncePerCall(this.sql, callId, again, async () => {
      const o = await this.sql.begin(async (tx) => {
        await recordCreate(tx, callId, environmentId);
        const rows = await tx`
          update environments set clock_offset_ms = clock_offset_ms + ${Math.round(seconds * 1000)}
          where id = ${environmentId} returning clock_offset_ms::float8 as o`;
        // Thrown inside: the record of this call goes with the transaction.
        if (rows.length === 0) throw new ApiError('resource_not_found', { message: 'No such environment.' });
        return rows[0]!.o as number;
      });
      this.offsets.set(environmentId, o);
      await this.bus.publish(channel, environmentId).catch(() => {});
      return this.realNow() + o;
    });
  }
}
