// PgEventIds: the EventIds port on PostgreSQL or embedded PGlite (embedded mode's register; the
// external mode keeps it in Redis). A claim is two statements: insert every new id with the
// fingerprint of its first item (on conflict nothing), then read what each id is bound to. The
// read runs after the insert committed, so it also sees ids a concurrent claimer inserted first.
import type { EventIds } from '../ports.js';
import type { Sql } from './db.js';

export class PgEventIds implements EventIds {
  constructor(private readonly sql: Sql) {}

  async claim(environmentId: string, items: ReadonlyArray<{ id: string; fp: number }>): Promise<number[]> {
    if (items.length === 0) return [];
    const first = new Map<string, number>();
    for (const { id, fp } of items) if (!first.has(id)) first.set(id, fp);
    const ids = [...first.keys()];
    const fps = ids.map((id) => String(first.get(id)));
    await this.sql`
      insert into event_ids (environment_id, client_event_id, fp)
      select ${environmentId}, id, fp from unnest(${ids}::text[], ${fps}::bigint[]) as t(id, fp)
      on conflict do nothing`;
    const rows = await this.sql`
      select client_event_id, fp::text as fp from event_ids
      where environment_id = ${environmentId} and client_event_id = any(${ids}::text[])`;
    const bound = new Map<string, number>();
    for (const r of rows) bound.set(r.client_event_id as string, Number(r.fp));
    return items.map(({ id }) => {
      const fp = bound.get(id);
      if (fp === undefined) throw new Error(`event id ${id} is missing from event_ids after its claim`);
      return fp;
    });
  }
}
