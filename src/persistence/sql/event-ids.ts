// PgEventIds: the EventIds port on PostgreSQL or embedded PGlite (embedded mode's register; the
// external mode keeps it in Redis). A claim is one statement: insert every new id with the
// fingerprint of its first item (on conflict nothing) and, in the same statement, read the ids that
// were bound before it. An id in neither part was inserted by a concurrent claimer after this
// statement's snapshot; a second read, after that claimer committed, finds it.
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
    const rows = await this.sql`
      with t as (select * from unnest(${ids}::text[], ${fps}::bigint[]) as t(id, fp)),
      ins as (
        insert into event_ids (environment_id, client_event_id, fp)
        select ${environmentId}, id, fp from t
        on conflict do nothing
        returning client_event_id, fp)
      select client_event_id, fp::text as fp from ins
      union all
      select e.client_event_id, e.fp::text from event_ids e join t on e.client_event_id = t.id
      where e.environment_id = ${environmentId}`;
    const bound = new Map<string, number>();
    for (const r of rows) bound.set(r.client_event_id as string, Number(r.fp));
    const raced = ids.filter((id) => !bound.has(id));
    if (raced.length > 0) {
      const late = await this.sql`
        select client_event_id, fp::text as fp from event_ids
        where environment_id = ${environmentId} and client_event_id = any(${raced}::text[])`;
      for (const r of late) bound.set(r.client_event_id as string, Number(r.fp));
    }
    return items.map(({ id }) => {
      const fp = bound.get(id);
      if (fp === undefined) throw new Error(`event id ${id} is missing from event_ids after its claim`);
      return fp;
    });
  }
}
