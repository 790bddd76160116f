// Read tables of challenges, written by the projector from the customer actors' challenge facts:
// challenge_progress (one row per customer, challenge, period and cycle, with its contributions)
// and challenge_enrollments. Writes are idempotent: a batch folds its facts per row in fact order
// first (count and target from the last fact, completed_at from the first completion, the
// contributions' adds and removes as the actor's evolve applies them), and an upsert never
// un-completes a row. Reads back the progress list, the enrollments list and a customer's progress
// for exports.
import type postgres from 'postgres';
import type { ChallengeFact } from '../../domain/challenges.js';
import { jsonDocument, type Sql } from './db.js';
import { chunks, rowsPerStatementMax } from './pipelined.js';

type Tx = postgres.TransactionSql<Record<string, unknown>>;

export type ChallengeProjection =
  | {
      kind: 'challenge.progress';
      environmentId: string;
      customerId: string;
      challengeId: string;
      periodKey: string;
      cycle: number;
      count: number;
      /** null: unchanged (revokes carry no target). */
      target: number | null;
      completedAtMs: number | null;
      atMs: number;
      /**
       * What the fact does to the row's contributions, as the actor's evolve does to its record:
       * add a counted value, remove a revoked one, set them all (a merge adopting a record), or
       * nothing (a completion, or a progress of a challenge without contribution_key).
       */
      contributions: ContributionChange | null;
    }
  | {
      kind: 'challenge.enrollment';
      environmentId: string;
      customerId: string;
      challengeId: string;
      /** null: unenrolled. */
      enrolledAtMs: number | null;
    };

export type ContributionChange = { add: string } | { remove: string } | { set: string[] };

/** One challenge fact -> its projection (pure). */
export function challengeProjection(environmentId: string, customerId: string, f: Exclude<ChallengeFact, { kind: 'challenge.merged' }>): ChallengeProjection {
  switch (f.kind) {
    case 'challenge.enrolled':
      return { kind: 'challenge.enrollment', environmentId, customerId, challengeId: f.challengeId, enrolledAtMs: f.atMs };
    case 'challenge.unenrolled':
      return { kind: 'challenge.enrollment', environmentId, customerId, challengeId: f.challengeId, enrolledAtMs: null };
    case 'challenge.progressed':
      return progressProjection(environmentId, customerId, f, f.target, null, f.contribution === null ? null : { add: f.contribution });
    case 'challenge.completed':
      return progressProjection(environmentId, customerId, f, f.target, f.atMs, null);
    case 'challenge.revoked':
      // Without a contribution key the value was never stored: removing it changes nothing, as in evolve.
      return progressProjection(environmentId, customerId, f, null, null, { remove: f.contribution });
  }
}

/** A progress fact's row: target null keeps the stored one; completedAtMs set by a completion only. */
function progressProjection(
  environmentId: string,
  customerId: string,
  f: { challengeId: string; periodKey: string; cycle: number; count: number; atMs: number },
  target: number | null,
  completedAtMs: number | null,
  contributions: ContributionChange | null,
): ChallengeProjection {
  return { kind: 'challenge.progress', environmentId, customerId, challengeId: f.challengeId, periodKey: f.periodKey, cycle: f.cycle, count: f.count, target, completedAtMs, atMs: f.atMs, contributions };
}

/** The rows a merge's challenge.merged writes for the survivor: its new enrollments and adopted progress records. */
export function challengeMergeProjections(environmentId: string, customerId: string, f: Extract<ChallengeFact, { kind: 'challenge.merged' }>): ChallengeProjection[] {
  return [
    ...f.enrollments.map((e): ChallengeProjection => ({ kind: 'challenge.enrollment', environmentId, customerId, challengeId: e.challengeId, enrolledAtMs: e.enrolledAtMs })),
    ...f.progress.map(
      (p): ChallengeProjection => ({
        kind: 'challenge.progress',
        environmentId,
        customerId,
        challengeId: p.challengeId,
        periodKey: p.periodKey,
        cycle: p.cycle,
        count: p.count,
        target: p.target,
        completedAtMs: p.completedAtMs,
        atMs: p.updatedAtMs,
        contributions: { set: [...p.contributions] },
      }),
    ),
  ];
}

type Progress = Extract<ChallengeProjection, { kind: 'challenge.progress' }>;
type Enrollment = Extract<ChallengeProjection, { kind: 'challenge.enrollment' }>;

/** Folds one row's key; the parts are service ids, a period key and a number (no NUL in any). */
const rowKey = (...parts: Array<string | number>) => parts.join('\u0000');

/**
 * A row's contribution changes of one batch, folded in fact order: the row's list becomes
 * (set ?? stored) without the values in remove or add, then add in order. An add moves its value
 * last and cancels an earlier remove of it; a remove cancels an earlier add; a set starts over.
 * Applied to the stored list this is what evolve's push-if-absent and filter give in sequence
 * (the actor adds a value only while it is absent), and applying it twice changes nothing more.
 */
interface ContributionOps {
  set: string[] | null;
  add: string[];
  remove: string[];
}

function foldContribution(ops: ContributionOps | null, change: ContributionChange): ContributionOps {
  if ('set' in change) return { set: [...change.set], add: [], remove: [] };
  const o = ops ?? { set: null, add: [], remove: [] };
  if ('add' in change) {
    o.add = o.add.filter((x) => x !== change.add);
    o.add.push(change.add);
    o.remove = o.remove.filter((x) => x !== change.add);
  } else {
    o.add = o.add.filter((x) => x !== change.remove);
    if (!o.remove.includes(change.remove)) o.remove.push(change.remove);
  }
  return o;
}

type FoldedProgress = Progress & { ops: ContributionOps | null };

export async function writeChallengeProgress(tx: Tx, run: Progress[]): Promise<void> {
  const rows = new Map<string, FoldedProgress>();
  for (const p of run) {
    const k = rowKey(p.environmentId, p.challengeId, p.customerId, p.periodKey, p.cycle);
    const seen = rows.get(k);
    const ops = p.contributions === null ? (seen?.ops ?? null) : foldContribution(seen?.ops ?? null, p.contributions);
    rows.set(
      k,
      seen === undefined
        ? { ...p, ops }
        : { ...p, target: p.target ?? seen.target, completedAtMs: seen.completedAtMs ?? p.completedAtMs, atMs: Math.max(seen.atMs, p.atMs), ops },
    );
  }
  const all = [...rows.values()];
  for (const part of chunks(all, rowsPerStatementMax)) await upsertProgress(tx, part);
  // After the upserts (the same transaction keeps the order): a new row starts from '{}'.
  for (const part of contributionChunks(all.filter((r) => r.ops !== null))) await updateContributions(tx, part);
}

/** Parts of at most rowsPerStatementMax values (a merge's set carries up to a record's whole list). */
function contributionChunks(rows: FoldedProgress[]): FoldedProgress[][] {
  const out: FoldedProgress[][] = [];
  let part: FoldedProgress[] = [];
  let size = 0;
  for (const r of rows) {
    const n = 1 + (r.ops!.set?.length ?? 0) + r.ops!.add.length + r.ops!.remove.length;
    if (part.length > 0 && size + n > rowsPerStatementMax) {
      out.push(part);
      part = [];
      size = 0;
    }
    part.push(r);
    size += n;
  }
  if (part.length > 0) out.push(part);
  return out;
}

async function updateContributions(tx: Tx, part: FoldedProgress[]): Promise<void> {
  const doc = jsonDocument(
    part.map((p) => ({ e: p.environmentId, h: p.challengeId, c: p.customerId, k: p.periodKey, y: p.cycle, s: p.ops!.set, a: p.ops!.add, r: p.ops!.remove })),
  );
  await tx`
    update challenge_progress as p
    set contributions = array(
          select b.x from unnest(coalesce(u.s, p.contributions)) with ordinality as b(x, o)
          where not (b.x = any(u.a)) and not (b.x = any(u.r))
          order by b.o
        ) || u.a
    from (
      select v.e, v.h, v.c, v.k, v.y,
             case when v.s is null or jsonb_typeof(v.s) = 'null' then null else array(select jsonb_array_elements_text(v.s)) end as s,
             array(select jsonb_array_elements_text(v.a)) as a,
             array(select jsonb_array_elements_text(v.r)) as r
      from json_to_recordset((${doc}::text)::json) as v(e text, h text, c text, k text, y int, s jsonb, a jsonb, r jsonb)
    ) as u
    where p.environment_id = u.e and p.challenge_id = u.h and p.customer_id = u.c and p.period_key = u.k and p.cycle = u.y`;
}

async function upsertProgress(tx: Tx, part: Progress[]): Promise<void> {
  const doc = jsonDocument(
    part.map((p) => ({ e: p.environmentId, h: p.challengeId, c: p.customerId, k: p.periodKey, y: p.cycle, n: p.count, t: p.target, d: p.completedAtMs, a: p.atMs })),
  );
  await tx`
    insert into challenge_progress as p (environment_id, challenge_id, customer_id, period_key, cycle, count, target, status, completed_at, updated_at)
    select u.e, u.h, u.c, u.k, u.y, u.n, coalesce(u.t, 0), case when u.d is null then 'active' else 'completed' end,
           to_timestamp(u.d / 1000), to_timestamp(u.a / 1000)
    from json_to_recordset((${doc}::text)::json) as u(e text, h text, c text, k text, y int, n int, t int, d float8, a float8)
    on conflict (environment_id, challenge_id, customer_id, period_key, cycle) do update
    set count = excluded.count,
        target = case when excluded.target = 0 then p.target else excluded.target end,
        status = case when p.status = 'completed' or excluded.status = 'completed' then 'completed' else 'active' end,
        completed_at = coalesce(p.completed_at, excluded.completed_at),
        updated_at = greatest(p.updated_at, excluded.updated_at)`;
}

export async function writeChallengeEnrollments(tx: Tx, run: Enrollment[]): Promise<void> {
  const rows = new Map<string, Enrollment>();
  for (const p of run) rows.set(rowKey(p.environmentId, p.challengeId, p.customerId), p);
  const all = [...rows.values()];
  const added = all.filter((p) => p.enrolledAtMs !== null);
  const removed = all.filter((p) => p.enrolledAtMs === null);
  for (const part of chunks(added, rowsPerStatementMax)) {
    const doc = jsonDocument(part.map((p) => ({ e: p.environmentId, h: p.challengeId, c: p.customerId, a: p.enrolledAtMs })));
    await tx`
      insert into challenge_enrollments (environment_id, challenge_id, customer_id, enrolled_at)
      select u.e, u.h, u.c, to_timestamp(u.a / 1000)
      from json_to_recordset((${doc}::text)::json) as u(e text, h text, c text, a float8)
      on conflict (environment_id, challenge_id, customer_id) do update set enrolled_at = excluded.enrolled_at`;
  }
  for (const part of chunks(removed, rowsPerStatementMax)) {
    const doc = jsonDocument(part.map((p) => ({ e: p.environmentId, h: p.challengeId, c: p.customerId })));
    await tx`
      delete from challenge_enrollments x
      using json_to_recordset((${doc}::text)::json) as u(e text, h text, c text)
      where x.environment_id = u.e and x.challenge_id = u.h and x.customer_id = u.c`;
  }
}

export interface ProgressRow {
  challengeId: string;
  customerId: string;
  periodKey: string;
  cycle: number;
  count: number;
  target: number;
  status: string;
  /** The distinct contribution values counted in this period and cycle, in the order counted; [] without contribution_key. */
  contributions: string[];
  completedAtMs: number | null;
  updatedAtMs: number;
}

export interface EnrollmentRow {
  challengeId: string;
  customerId: string;
  enrolledAtMs: number;
}

const ms = (col: string) => `(extract(epoch from ${col}) * 1000)::float8`;

function progressRow(r: Record<string, unknown>): ProgressRow {
  return {
    challengeId: r.challenge_id as string,
    customerId: r.customer_id as string,
    periodKey: r.period_key as string,
    cycle: r.cycle as number,
    count: r.count as number,
    target: r.target as number,
    status: r.status as string,
    contributions: (r.contributions as string[] | null) ?? [],
    completedAtMs: (r.completed_at_ms as number | null) ?? null,
    updatedAtMs: r.updated_at_ms as number,
  };
}

const progressColumns = `challenge_id, customer_id, period_key, cycle, count, target, status, contributions, ${ms('completed_at')} as completed_at_ms, ${ms('updated_at')} as updated_at_ms`;

export class ChallengeReadModel {
  constructor(private readonly sql: Sql) {}

  /** Progress records of a challenge, keyset (customer_id, period_key, cycle); limit+1 rows. */
  async listProgress(
    environmentId: string,
    challengeId: string,
    q: { customerId: string | null; status: string | null; after: [string, string, number] | null; limit: number },
  ): Promise<ProgressRow[]> {
    const rows = await this.sql.unsafe(
      `select ${progressColumns} from challenge_progress
       where environment_id = $1 and challenge_id = $2
         and ($3::text is null or customer_id = $3) and ($4::text is null or status = $4)
         and ($5::text is null or (customer_id, period_key, cycle) > ($5::text, $6::text, $7::int))
       order by customer_id, period_key, cycle limit $8`,
      [environmentId, challengeId, q.customerId, q.status, q.after?.[0] ?? null, q.after?.[1] ?? '', q.after?.[2] ?? 0, q.limit],
    );
    return rows.map(progressRow);
  }

  /**
   * Every progress record of these customers (an export: a survivor and the customers merged into
   * it, whose own rows stay under their ids as history), oldest first.
   */
  async customerProgress(environmentId: string, customerIds: string | readonly string[]): Promise<ProgressRow[]> {
    const rows = await this.sql.unsafe(
      `select ${progressColumns} from challenge_progress where environment_id = $1 and customer_id = any($2::text[])
       order by updated_at, challenge_id, customer_id limit 10000`,
      [environmentId, typeof customerIds === 'string' ? [customerIds] : [...customerIds]],
    );
    return rows.map(progressRow);
  }

  async listEnrollments(environmentId: string, challengeId: string, q: { after: string | null; limit: number }): Promise<EnrollmentRow[]> {
    const rows = await this.sql.unsafe(
      // A customer merged into another is left out: its enrollments moved to the survivor (and
      // its id now answers as the survivor, so it could not be unenrolled by it). So is a deleted
      // one: a delete removes its enrollments (one deleted before deletes did keeps its rows).
      `select challenge_id, customer_id, ${ms('enrolled_at')} as enrolled_at_ms from challenge_enrollments x
       where environment_id = $1 and challenge_id = $2 and ($3::text is null or customer_id > $3)
         and not exists (
           select 1 from customers c where c.environment_id = $1 and c.id = x.customer_id and (c.merged_into is not null or c.deleted_at is not null))
       order by customer_id limit $4`,
      [environmentId, challengeId, q.after, q.limit],
    );
    return rows.map((r) => ({ challengeId: r.challenge_id as string, customerId: r.customer_id as string, enrolledAtMs: r.enrolled_at_ms as number }));
  }
}
