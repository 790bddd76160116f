// PgSharedLimits: the SharedLimits port on PostgreSQL or embedded PGlite (both modes; migration
// 026). A reservation is ONE statement: items whose slot this event holds are answered from it;
// the others bump their count with a guarded upsert (`taken < cap`, the row locked by ON
// CONFLICT, so racing callers for max K get exactly K) and take their slot in the same statement.
// Never read-modify-write a count. A slot a concurrent call of the same event took first (after
// this statement's snapshot) gives its bump back. Scope keys over 256 characters are stored as
// their sha256 (an index entry stays small).
import { createHash } from 'node:crypto';
import type { SharedLimitItem, SharedLimits, SharedLimitSlot } from '../ports.js';
import type { Sql } from './db.js';

const scopeKeyCharsMax = 256;

function storedKey(scopeKey: string): string {
  return scopeKey.length <= scopeKeyCharsMax ? scopeKey : `sha256:${createHash('sha256').update(scopeKey).digest('hex')}`;
}

type Key = Omit<SharedLimitItem, 'max'>;

/** Distinct items (by rule, limit, stored key) and, per input item, the index of its distinct one. */
function distinct<T extends Key>(items: ReadonlyArray<T>): { unique: T[]; at: number[] } {
  const seen = new Map<string, number>();
  const unique: T[] = [];
  const at: number[] = [];
  for (const it of items) {
    const k = { ...it, scopeKey: storedKey(it.scopeKey) };
    const id = `${k.ruleId}\u0000${k.limitId}\u0000${k.scopeKey}`;
    let i = seen.get(id);
    if (i === undefined) {
      i = unique.length;
      seen.set(id, i);
      unique.push(k);
    }
    at.push(i);
  }
  return { unique, at };
}

export class PgSharedLimits implements SharedLimits {
  constructor(private readonly sql: Sql) {}

  async reserve(environmentId: string, clientEventId: string, items: ReadonlyArray<SharedLimitItem>): Promise<SharedLimitSlot[]> {
    if (items.length === 0) return [];
    const { unique, at } = distinct(items);
    const rows = await this.sql`
      with t as (
        select * from unnest(${unique.map((u) => u.ruleId)}::text[], ${unique.map((u) => u.limitId)}::text[],
          ${unique.map((u) => u.scopeKey)}::text[], ${unique.map((u) => String(Math.max(0, u.max)))}::bigint[])
          with ordinality as t(rule_id, limit_id, scope_key, cap, i)),
      held as (
        select t.i from t join rule_limit_slots s on s.environment_id = ${environmentId} and s.client_event_id = ${clientEventId}
          and s.rule_id = t.rule_id and s.limit_id = t.limit_id and s.scope_key = t.scope_key),
      bump as (
        insert into rule_limit_counts as c (environment_id, rule_id, limit_id, scope_key, taken, cap)
        select ${environmentId}, t.rule_id, t.limit_id, t.scope_key, 1, t.cap from t
        where t.cap > 0 and not exists (select 1 from held h where h.i = t.i)
        order by t.rule_id, t.limit_id, t.scope_key
        on conflict (environment_id, rule_id, limit_id, scope_key)
        do update set taken = c.taken + 1, cap = excluded.cap where c.taken < excluded.cap
        returning c.rule_id, c.limit_id, c.scope_key, c.taken),
      slot as (
        insert into rule_limit_slots (environment_id, client_event_id, rule_id, limit_id, scope_key)
        select ${environmentId}, ${clientEventId}, b.rule_id, b.limit_id, b.scope_key from bump b
        on conflict do nothing
        returning rule_id, limit_id, scope_key)
      select t.i::int as i, t.cap::text as cap,
        exists (select 1 from held h where h.i = t.i) as held,
        b.taken::text as bumped,
        exists (select 1 from slot s where s.rule_id = t.rule_id and s.limit_id = t.limit_id and s.scope_key = t.scope_key) as slotted,
        n.taken::text as before
      from t
      left join bump b on b.rule_id = t.rule_id and b.limit_id = t.limit_id and b.scope_key = t.scope_key
      left join rule_limit_counts n on n.environment_id = ${environmentId} and n.rule_id = t.rule_id
        and n.limit_id = t.limit_id and n.scope_key = t.scope_key
      order by t.i`;
    const answers: SharedLimitSlot[] = [];
    const giveBack: Key[] = [];
    for (const r of rows) {
      const before = r.before === null ? 0 : Number(r.before);
      if (r.held === true) answers.push({ granted: true, created: false, taken: before });
      else if (r.bumped !== null && r.slotted === true) answers.push({ granted: true, created: true, taken: Number(r.bumped) });
      else if (r.bumped !== null) {
        // A concurrent call of this event took the slot after this statement's snapshot: it counted it.
        giveBack.push(unique[(r.i as number) - 1]!);
        answers.push({ granted: true, created: false, taken: Number(r.bumped) - 1 });
      } else {
        // Refused: the count had reached the cap (the snapshot's value may be older, never higher).
        answers.push({ granted: false, created: false, taken: Math.max(before, Number(r.cap)) });
      }
    }
    if (giveBack.length > 0) await this.decrement(environmentId, giveBack);
    return at.map((i) => ({ ...answers[i]! }));
  }

  async release(environmentId: string, clientEventId: string, items: ReadonlyArray<Key>): Promise<void> {
    if (items.length === 0) return;
    const { unique } = distinct(items);
    await this.sql`
      with t as (
        select * from unnest(${unique.map((u) => u.ruleId)}::text[], ${unique.map((u) => u.limitId)}::text[], ${unique.map((u) => u.scopeKey)}::text[])
          as t(rule_id, limit_id, scope_key)),
      gone as (
        delete from rule_limit_slots s using t
        where s.environment_id = ${environmentId} and s.client_event_id = ${clientEventId}
          and s.rule_id = t.rule_id and s.limit_id = t.limit_id and s.scope_key = t.scope_key
        returning s.rule_id, s.limit_id, s.scope_key)
      update rule_limit_counts c set taken = c.taken - 1 from gone g
      where c.environment_id = ${environmentId} and c.rule_id = g.rule_id and c.limit_id = g.limit_id and c.scope_key = g.scope_key
        and c.taken > 0`;
  }

  async counts(environmentId: string, items: ReadonlyArray<Key>): Promise<number[]> {
    if (items.length === 0) return [];
    const { unique, at } = distinct(items);
    const rows = await this.sql`
      select t.i::int as i, coalesce(c.taken, 0)::text as taken
      from unnest(${unique.map((u) => u.ruleId)}::text[], ${unique.map((u) => u.limitId)}::text[], ${unique.map((u) => u.scopeKey)}::text[])
        with ordinality as t(rule_id, limit_id, scope_key, i)
      left join rule_limit_counts c on c.environment_id = ${environmentId} and c.rule_id = t.rule_id
        and c.limit_id = t.limit_id and c.scope_key = t.scope_key
      order by t.i`;
    const taken = rows.map((r) => Number(r.taken));
    return at.map((i) => taken[i]!);
  }

  private async decrement(environmentId: string, items: Key[]): Promise<void> {
    await this.sql`
      update rule_limit_counts c set taken = c.taken - 1
      from unnest(${items.map((u) => u.ruleId)}::text[], ${items.map((u) => u.limitId)}::text[], ${items.map((u) => u.scopeKey)}::text[])
        as t(rule_id, limit_id, scope_key)
      where c.environment_id = ${environmentId} and c.rule_id = t.rule_id and c.limit_id = t.limit_id and c.scope_key = t.scope_key
        and c.taken > 0`;
  }
}
