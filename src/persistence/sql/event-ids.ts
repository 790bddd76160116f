// PgEventIds: the EventIds port on PostgreSQL or embedded PGlite (embedded mode's register; the
// external mode keeps it in Redis). A claim is one statement: insert every new id with the
// fingerprint of its first item (on conflict nothing) and, in the same statement, read the ids that
// were bound before it. An id in neither part was inserted by a concurrent claimer after this
// statement's snapshot; a second read, after that claimer committed, finds it (bound during the
// call, not before it: never answered erased). The ids bound before also read their erased event
// (erased_event_ids, by hash53(id) and the bound fingerprint) in the same statement, an index
// look-up only for them.
import { hash53 } from '../../util/canonical-json.js';
import type { ErasedEvent, ErasedEventRecord, EventIds } from '../ports.js';
import type { Sql } from './db.js';

export class PgEventIds implements EventIds {
  constructor(private readonly sql: Sql) {}

  async claim(environmentId: string, items: ReadonlyArray<{ id: string; fp: number }>): Promise<Array<number | ErasedEvent>> {
    if (items.length === 0) return [];
    const first = new Map<string, number>();
    for (const { id, fp } of items) if (!first.has(id)) first.set(id, fp);
    const ids = [...first.keys()];
    const fps = ids.map((id) => String(first.get(id)));
    const hashes = ids.map((id) => String(hash53(id)));
    const rows = await this.sql`
      with t as (select * from unnest(${ids}::text[], ${fps}::bigint[], ${hashes}::bigint[]) as t(id, fp, h)),
      ins as (
        insert into event_ids (environment_id, client_event_id, fp)
        select ${environmentId}, id, fp from t
        on conflict do nothing
        returning client_event_id, fp)
      select client_event_id, fp::text as fp, null::text as erased from ins
      union all
      select e.client_event_id, e.fp::text, x.event_id from event_ids e join t on e.client_event_id = t.id
      left join erased_event_ids x on x.environment_id = ${environmentId} and x.id_hash = t.h and x.fp = e.fp
      where e.environment_id = ${environmentId}`;
    const bound = new Map<string, number>();
    const erased = new Map<string, string>();
    for (const r of rows) {
      bound.set(r.client_event_id as string, Number(r.fp));
      if (r.erased !== null) erased.set(r.client_event_id as string, r.erased as string);
    }
    const raced = ids.filter((id) => !bound.has(id));
    if (raced.length > 0) {
      const late = await this.sql`
        select client_event_id, fp::text as fp from event_ids
        where environment_id = ${environmentId} and client_event_id = any(${raced}::text[])`;
      for (const r of late) bound.set(r.client_event_id as string, Number(r.fp));
    }
    return items.map(({ id, fp }) => {
      const boundFp = bound.get(id);
      if (boundFp === undefined) throw new Error(`event id ${id} is missing from event_ids after its claim`);
      const erasedEventId = boundFp === fp ? erased.get(id) : undefined;
      return erasedEventId === undefined ? boundFp : { erasedEventId };
    });
  }

  async erase(environmentId: string, records: ReadonlyArray<ErasedEventRecord>): Promise<void> {
    if (records.length === 0) return;
    const hashes = records.map((r) => String(r.idHash));
    const fps = records.map((r) => String(r.fp));
    const eventIds = records.map((r) => r.eventId);
    await this.sql`
      insert into erased_event_ids (environment_id, id_hash, fp, event_id)
      select ${environmentId}, h, fp, event_id from unnest(${hashes}::bigint[], ${fps}::bigint[], ${eventIds}::text[]) as t(h, fp, event_id)
      on conflict do nothing`;
  }
}
