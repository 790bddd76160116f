// Read tables of challenges, written by the projector from the customer actors' challenge facts:
// challenge_progress (one row per customer, challenge, period and cycle) and challenge_enrollments.
// Writes are idempotent: a batch folds its facts per row in fact order first (count and target
// from the last fact, completed_at from the first completion), and an upsert never un-completes a
// row. Reads back the progress list, the enrollments list and a customer's progress for exports.
import type postgres from 'postgres';
import type { ChallengeFact } from '../../domain/challenges.js';
import type { Sql } from './db.js';
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
    }
  | {
      kind: 'challenge.enrollment';
      environmentId: string;
      customerId: string;
      challengeId: string;
      /** null: unenrolled. */
      enrolledAtMs: number | null;
    };

/** One challenge fact -> its projection (pure). */
export function challengeProjection(environmentId: string, customerId: string, f: Exclude<ChallengeFact, { kind: 'challenge.merged' }>): ChallengeProjection {
  switch (f.kind) {
    case 'challenge.enrolled':
      return { kind: 'challenge.enrollment', environmentId, customerId, challengeId: f.challengeId, enrolledAtMs: f.atMs };
    case 'challenge.unenrolled':
      return { kind: 'challenge.enrollment', environmentId, customerId, challengeId: f.challengeId, enrolledAtMs: null };
    case 'challenge.progressed':
      return { kind: 'challenge.progress', environmentId, customerId, challengeId: f.challengeId, periodKey: f.periodKey, cycle: f.cycle, count: f.count, target: f.target, completedAtMs: null, atMs: f.atMs };
    case 'challenge.completed':
      return { kind: 'challenge.progress', environmentId, customerId, challengeId: f.challengeId, periodKey: f.periodKey, cycle: f.cycle, count: f.count, target: f.target, completedAtMs: f.atMs, atMs: f.atMs };
    case 'challenge.revoked':
      return { kind: 'challenge.progress', environmentId, customerId, challengeId: f.challengeId, periodKey: f.periodKey, cycle: f.cycle, count: f.count, target: null, completedAtMs: null, atMs: f.atMs };
  }
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
      }),
    ),
  ];
}

type Progress = Extract<ChallengeProjection, { kind: 'challenge.progress' }>;
type Enrollment = Extract<ChallengeProjection, { kind: 'challenge.enrollment' }>;

/** Folds one row's key; the parts are service ids, a period key and a number (no NUL in any). */
const rowKey = (...parts: Array<string | number>) => parts.join('\u0000');

export async function writeChallengeProgress(tx: Tx, run: Progress[]): Promise<void> {
  const rows = new Map<string, Progress>();
  for (const p of run) {
    const k = rowKey(p.environmentId, p.challengeId, p.customerId, p.periodKey, p.cycle);
    const seen = rows.get(k);
    rows.set(
      k,
      seen === undefined
        ? p
        : { ...p, target: p.target ?? seen.target, completedAtMs: seen.completedAtMs ?? p.completedAtMs, atMs: Math.max(seen.atMs, p.atMs) },
    );
  }
  for (const part of chunks([...rows.values()], rowsPerStatementMax)) await upsertProgress(tx, part);
}

async function upsertProgress(tx: Tx, part: Progress[]): Promise<void> {
  const doc = JSON.stringify(
    part.map((p) => ({ e: p.environmentId, h: p.challengeId, c: p.customerId, k: p.periodKey, y: p.cycle, n: p.count, t: p.target, d: p.completedAtMs, a: p.atMs })),
  );
  await tx`
    insert into challenge_progress as p (environment_id, challenge_id, customer_id, period_key, cycle, count, target, status, completed_at, updated_at)
    select u.e, u.h, u.c, u.k, u.y, u.n, coalesce(u.t, 0), case when u.d is null then 'active' else 'completed' end,
           to_timestamp(u.d / 1000), to_timestamp(u.a / 1000)
    from jsonb_to_recordset((${doc}::text)::jsonb) as u(e text, h text, c text, k text, y int, n int, t int, d float8, a float8)
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
    const doc = JSON.stringify(part.map((p) => ({ e: p.environmentId, h: p.challengeId, c: p.customerId, a: p.enrolledAtMs })));
    await tx`
      insert into challenge_enrollments (environment_id, challenge_id, customer_id, enrolled_at)
      select u.e, u.h, u.c, to_timestamp(u.a / 1000)
      from jsonb_to_recordset((${doc}::text)::jsonb) as u(e text, h text, c text, a float8)
      on conflict (environment_id, challenge_id, customer_id) do update set enrolled_at = excluded.enrolled_at`;
  }
  for (const part of chunks(removed, rowsPerStatementMax)) {
    const doc = JSON.stringify(part.map((p) => ({ e: p.environmentId, h: p.challengeId, c: p.customerId })));
    await tx`
      delete from challenge_enrollments x
      using jsonb_to_recordset((${doc}::text)::jsonb) as u(e text, h text, c text)
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
    completedAtMs: (r.completed_at_ms as number | null) ?? null,
    updatedAtMs: r.updated_at_ms as number,
  };
}

const progressColumns = `challenge_id, customer_id, period_key, cycle, count, target, status, ${ms('completed_at')} as completed_at_ms, ${ms('updated_at')} as updated_at_ms`;

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

  /** Every progress record of a customer (exports), oldest first. */
  async customerProgress(environmentId: string, customerId: string): Promise<ProgressRow[]> {
    const rows = await this.sql.unsafe(
      `select ${progressColumns} from challenge_progress where environment_id = $1 and customer_id = $2 order by updated_at, challenge_id limit 10000`,
      [environmentId, customerId],
    );
    return rows.map(progressRow);
  }

  async listEnrollments(environmentId: string, challengeId: string, q: { after: string | null; limit: number }): Promise<EnrollmentRow[]> {
    const rows = await this.sql.unsafe(
      `select challenge_id, customer_id, ${ms('enrolled_at')} as enrolled_at_ms from challenge_enrollments
       where environment_id = $1 and challenge_id = $2 and ($3::text is null or customer_id > $3)
       order by customer_id limit $4`,
      [environmentId, challengeId, q.after, q.limit],
    );
    return rows.map((r) => ({ challengeId: r.challenge_id as string, customerId: r.customer_id as string, enrolledAtMs: r.enrolled_at_ms as number }));
  }
}
