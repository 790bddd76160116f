// The match record in PostgreSQL (match_results + one match_result_players row per player): the
// claim of a report (the record with every player pending, or nothing when the match_id is already
// stored), the verdicts written back after admission, and the reads. Claims and verdicts of
// concurrent reports leave together per batch (GroupBatcher): the claims as one statement (the
// players are inserted only for records that were inserted), the verdicts as one short
// transaction (the records locked, the players still pending written, then each record's status
// derived from its stored players, so a concurrent review is never overwritten). A batch that
// fails is retried item by item, so one bad report cannot fail the others.
import type { CustomerRef } from '../../domain/match/report.js';
import type { Reason } from '../../domain/match/reasons.js';
import type { PlayerStatus, Review } from '../../domain/match/verdict.js';
import { GroupBatcher } from '../../util/group-batcher.js';
import type { Sql, Tx } from './db.js';
import { isoTime } from '../../util/iso-time.js';

export type StoredStatus = PlayerStatus | 'pending';

export interface PlayerRow {
  id: string;
  matchResultId: string;
  position: number;
  customerRef: CustomerRef;
  /**
   * null while a player named by an external id nobody had used yet is pending: its customer is
   * created by its own admission, which fills this in with the verdict.
   */
  customerId: string | null;
  metrics: Record<string, number>;
  won: boolean | null;
  status: StoredStatus;
  pendingVerdict: PlayerStatus;
  reasons: Reason[];
  eventId: string | null;
  clientEventId: string | null;
  review: Review | null;
  createdAtMs: number;
  updatedAtMs: number;
}

/** Shape of an admission_errors item (spec: not shown; ours). */
export interface AdmissionError {
  player_id: string;
  customer_id: string | null;
  code: string;
  message: string;
}

export interface MatchRow {
  id: string;
  matchId: string;
  profileId: string;
  profileKey: string;
  profileRevision: number;
  event: string;
  fingerprint: string;
  startedAtMs: number;
  endedAtMs: number;
  durationSeconds: number;
  reportingKeyId: string;
  status: string;
  admissionErrors: AdmissionError[];
  revision: number;
  createdAtMs: number;
  updatedAtMs: number;
  players: PlayerRow[];
}

interface MatchClaim {
  environmentId: string;
  record: MatchRow;
}

/**
 * A player's verdict after admission (only written while the stored player is still pending);
 * status 'pending' fills in only the customer id of a player that stays pending (rule 2's customer
 * created while its admission is blocked).
 */
export interface PlayerVerdictWrite {
  id: string;
  status: StoredStatus;
  customerId: string | null;
  reasons: Reason[];
  eventId: string | null;
  clientEventId: string | null;
}

/** Everything one report's admission writes back (the match status is derived from the stored players). */
export interface MatchVerdicts {
  environmentId: string;
  matchResultId: string;
  admissionErrors: AdmissionError[];
  players: PlayerVerdictWrite[];
  atMs: number;
}

/** What a verdict write left stored: the record's new revision and its derived status. */
export interface VerdictsWritten {
  revision: number;
  status: string;
}

/**
 * The match status derived from the record's stored players, as deriveMatchStatus does (a pending
 * player counts as the verdict the report reserved for it, as the claim's status does), for an
 * UPDATE of match_results aliased r. Read in a statement after the players' writes, so it sees them.
 */
function derivedStatus(sql: Sql) {
  return sql`(
    select case
      when bool_or(s.status = 'held') then 'held'
      when bool_and(s.status <> 'rejected') then 'admitted'
      when bool_and(s.status = 'rejected') then 'rejected'
      else 'partially_admitted' end
    from (select case when mp.status = 'pending' then mp.pending_verdict else mp.status end as status
          from match_result_players mp
          where mp.environment_id = r.environment_id and mp.match_result_id = r.id) s)`;
}

function json<T>(v: unknown): T {
  return (typeof v === 'string' ? JSON.parse(v) : v) as T;
}
const ms = (d: unknown) => (d as Date).getTime();
const iso = isoTime;

/** A reason read back from jsonb (which orders keys by length) with its keys in the order it was made with. */
function inWireOrder(r: Reason): Reason {
  const out: Reason = { code: r.code, message: r.message };
  if (r.metric !== undefined) out.metric = r.metric;
  if (r.value !== undefined) out.value = r.value;
  if (r.limit !== undefined) out.limit = r.limit;
  return out;
}

function playerRow(r: Record<string, unknown>): PlayerRow {
  return {
    id: r.id as string,
    matchResultId: r.match_result_id as string,
    position: r.position as number,
    customerRef: json(r.customer_ref),
    customerId: (r.customer_id as string | null) ?? null,
    metrics: json(r.metrics),
    won: (r.won as boolean | null) ?? null,
    status: r.status as StoredStatus,
    pendingVerdict: r.pending_verdict as PlayerStatus,
    reasons: (json(r.reasons) as Reason[]).map(inWireOrder),
    eventId: (r.event_id as string | null) ?? null,
    clientEventId: (r.client_event_id as string | null) ?? null,
    review: r.review === null ? null : json(r.review),
    createdAtMs: ms(r.created_at),
    updatedAtMs: ms(r.updated_at),
  };
}

function matchRow(r: Record<string, unknown>, players: PlayerRow[]): MatchRow {
  return {
    id: r.id as string,
    matchId: r.match_id as string,
    profileId: r.profile_id as string,
    profileKey: r.profile_key as string,
    profileRevision: r.profile_revision as number,
    event: r.event as string,
    fingerprint: r.fingerprint as string,
    startedAtMs: ms(r.started_at),
    endedAtMs: ms(r.ended_at),
    durationSeconds: r.duration_seconds as number,
    reportingKeyId: r.reporting_key_id as string,
    status: r.status as string,
    admissionErrors: json(r.admission_errors),
    revision: r.revision as number,
    createdAtMs: ms(r.created_at),
    updatedAtMs: ms(r.updated_at),
    players,
  };
}

/**
 * Plans the transaction's statements at each execution instead of from a plan cached on the
 * connection (as the projector does, read-model.ts). A generic plan of the verdict statements,
 * built once while the match tables were small, made PostgreSQL's cost per report grow with the
 * number of stored reports: 0.9 -> 1.4 -> 2.1 ms of PostgreSQL CPU per 4-player report (claim and
 * verdicts) over three rounds of 4,800 reports, flat at about 0.38 ms planned each time
 * (docs/bench/2026-11-28-match-records.md). The claim's single statement keeps its cached plan
 * (no growth without it). Sent first, without a round trip of its own: the connection runs a
 * transaction's statements in order.
 */
function planCustom(tx: Tx): Promise<unknown> {
  // execute(): postgres.js sends a query when it is first awaited; this one must go first.
  return tx`set local plan_cache_mode = force_custom_plan`.execute();
}

/** Claims and verdicts per batch: bounded so one statement's arrays stay small (a report has <= 100 players). */
const claimsPerBatchMax = 200;

export class MatchRecords {
  private readonly claims: GroupBatcher<MatchClaim, boolean>;
  private readonly verdicts: GroupBatcher<MatchVerdicts, VerdictsWritten | null>;

  constructor(private readonly sql: Sql) {
    this.claims = new GroupBatcher((items) => this.claimMany(items), { itemsMax: claimsPerBatchMax });
    this.verdicts = new GroupBatcher((items) => this.writeVerdictsMany(items), { itemsMax: claimsPerBatchMax });
  }

  /**
   * Inserts the record of a new report, with its players as given (pending or final), unless the
   * environment already stores this match_id: true when inserted, false on that conflict (the
   * caller reads the stored record: a replay or idempotency_key_reused).
   */
  claim(environmentId: string, record: MatchRow): Promise<boolean> {
    return this.claims.submit({ environmentId, record });
  }

  /** Writes the verdicts of players still pending, then the record's derived status: what is stored now (null if the record vanished). */
  writeVerdicts(v: MatchVerdicts): Promise<VerdictsWritten | null> {
    return this.verdicts.submit(v);
  }

  private async claimMany(claims: readonly MatchClaim[]): Promise<boolean[]> {
    const env: string[] = [];
    const id: string[] = [];
    const matchId: string[] = [];
    const profileId: string[] = [];
    const profileKey: string[] = [];
    const profileRevision: number[] = [];
    const event: string[] = [];
    const fingerprint: string[] = [];
    const startedAt: string[] = [];
    const endedAt: string[] = [];
    const duration: number[] = [];
    const keyId: string[] = [];
    const status: string[] = [];
    const at: string[] = [];
    const pEnv: string[] = [];
    const pId: string[] = [];
    const pMatch: string[] = [];
    const pPosition: number[] = [];
    const pRef: string[] = [];
    const pCustomer: Array<string | null> = [];
    const pMetrics: string[] = [];
    const pWon: Array<string | null> = [];
    const pStatus: string[] = [];
    const pVerdict: string[] = [];
    const pReasons: string[] = [];
    const pClientEvent: Array<string | null> = [];
    const pAt: string[] = [];
    for (const { environmentId, record: m } of claims) {
      const created = iso(m.createdAtMs);
      env.push(environmentId);
      id.push(m.id);
      matchId.push(m.matchId);
      profileId.push(m.profileId);
      profileKey.push(m.profileKey);
      profileRevision.push(m.profileRevision);
      event.push(m.event);
      fingerprint.push(m.fingerprint);
      startedAt.push(iso(m.startedAtMs));
      endedAt.push(iso(m.endedAtMs));
      duration.push(m.durationSeconds);
      keyId.push(m.reportingKeyId);
      status.push(m.status);
      at.push(created);
      for (const p of m.players) {
        pEnv.push(environmentId);
        pId.push(p.id);
        pMatch.push(m.id);
        pPosition.push(p.position);
        pRef.push(JSON.stringify(p.customerRef));
        pCustomer.push(p.customerId);
        pMetrics.push(JSON.stringify(p.metrics));
        pWon.push(p.won === null ? null : String(p.won));
        pStatus.push(p.status);
        pVerdict.push(p.pendingVerdict);
        pReasons.push(JSON.stringify(p.reasons));
        pClientEvent.push(p.clientEventId);
        pAt.push(iso(p.createdAtMs));
      }
    }
    // One statement: the records (a stored match_id inserts nothing), then the players of the
    // records that were inserted. Atomic like any single statement.
    const rows = await this.sql`
      with m as (
        insert into match_results (environment_id, id, match_id, profile_id, profile_key, profile_revision, event, fingerprint,
          started_at, ended_at, duration_seconds, reporting_key_id, status, created_at, updated_at)
        select v.env, v.id, v.match_id, v.profile_id, v.profile_key, v.profile_revision, v.event, v.fingerprint,
          v.started_at, v.ended_at, v.duration_seconds, v.key_id, v.status, v.at, v.at
        from unnest(${env}::text[], ${id}::text[], ${matchId}::text[], ${profileId}::text[], ${profileKey}::text[],
          ${profileRevision}::int[], ${event}::text[], ${fingerprint}::text[], ${startedAt}::timestamptz[], ${endedAt}::timestamptz[],
          ${duration}::float8[], ${keyId}::text[], ${status}::text[], ${at}::timestamptz[])
          as v(env, id, match_id, profile_id, profile_key, profile_revision, event, fingerprint, started_at, ended_at,
            duration_seconds, key_id, status, at)
        on conflict (environment_id, match_id) do nothing
        returning environment_id, id
      ), p as (
        insert into match_result_players (environment_id, id, match_result_id, position, customer_ref, customer_id, metrics, won,
          status, pending_verdict, reasons, client_event_id, created_at, updated_at)
        select v.env, v.id, v.match_result_id, v.position, v.ref::jsonb, v.customer_id, v.metrics::jsonb, v.won::boolean,
          v.status, v.verdict, v.reasons::jsonb, v.client_event_id, v.at, v.at
        from unnest(${pEnv}::text[], ${pId}::text[], ${pMatch}::text[], ${pPosition}::int[], ${pRef}::text[], ${pCustomer}::text[],
          ${pMetrics}::text[], ${pWon}::text[], ${pStatus}::text[], ${pVerdict}::text[], ${pReasons}::text[],
          ${pClientEvent}::text[], ${pAt}::timestamptz[])
          as v(env, id, match_result_id, position, ref, customer_id, metrics, won, status, verdict, reasons, client_event_id, at)
        join m on m.environment_id = v.env and m.id = v.match_result_id
      )
      select environment_id, id from m`;
    const inserted = new Set(rows.map((r) => `${r.environment_id as string}\u0000${r.id as string}`));
    return claims.map((c) => inserted.has(`${c.environmentId}\u0000${c.record.id}`));
  }

  private async writeVerdictsMany(items: readonly MatchVerdicts[]): Promise<Array<VerdictsWritten | null>> {
    const pEnv: string[] = [];
    const pId: string[] = [];
    const pStatus: string[] = [];
    const pCustomer: Array<string | null> = [];
    const pReasons: string[] = [];
    const pEvent: Array<string | null> = [];
    const pClientEvent: Array<string | null> = [];
    const pAt: string[] = [];
    const env: string[] = [];
    const id: string[] = [];
    const errors: string[] = [];
    const at: string[] = [];
    for (const v of items) {
      const t = iso(v.atMs);
      env.push(v.environmentId);
      id.push(v.matchResultId);
      errors.push(JSON.stringify(v.admissionErrors));
      at.push(t);
      for (const p of v.players) {
        pEnv.push(v.environmentId);
        pId.push(p.id);
        pStatus.push(p.status);
        pCustomer.push(p.customerId);
        pReasons.push(JSON.stringify(p.reasons));
        pEvent.push(p.eventId);
        pClientEvent.push(p.clientEventId);
        pAt.push(t);
      }
    }
    return this.sql.begin(async (tx) => {
      const planned = planCustom(tx);
      // The records first, in one order (concurrent batches cannot deadlock on them): a review of
      // one of their players holds the same lock, so the status below is derived from players as
      // they are once both are done, never from a read taken before the other committed.
      await Promise.all([
        planned,
        tx`
          select 1 from match_results r
          join unnest(${env}::text[], ${id}::text[]) as v(env, id) on r.environment_id = v.env and r.id = v.id
          order by r.environment_id, r.id
          for update of r`.execute(),
      ]);
      // Only players still pending: a concurrent repeat that completed them first wins (same
      // verdicts: the actors answer a repeat as a replay). A customer id already stored is kept; a
      // player rejected before admission gets the customer id its admission step resolved.
      await tx`
        update match_result_players p set status = case when p.status = 'pending' then v.status else p.status end,
          customer_id = coalesce(p.customer_id, v.customer_id),
          reasons = case when p.status = 'pending' then v.reasons::jsonb else p.reasons end,
          event_id = case when p.status = 'pending' then v.event_id else p.event_id end,
          client_event_id = coalesce(p.client_event_id, v.client_event_id),
          updated_at = v.at
        from unnest(${pEnv}::text[], ${pId}::text[], ${pStatus}::text[], ${pCustomer}::text[], ${pReasons}::text[],
          ${pEvent}::text[], ${pClientEvent}::text[], ${pAt}::timestamptz[])
          as v(env, id, status, customer_id, reasons, event_id, client_event_id, at)
        where p.environment_id = v.env and p.id = v.id and (p.status = 'pending' or p.customer_id is null)`;
      // admission_errors: this write's errors for players still pending now (rule 5: the players
      // whose admission has not completed); an error for a player another writer completed meanwhile
      // does not stay listed against its verdict. Each error's player is read by its primary key,
      // and a write without errors reads none: as an EXISTS over the array, the planner scanned
      // every player of the environment for each record (5 ms per report at 36k players).
      const rows = await tx`
        update match_results r set status = ${derivedStatus(tx as unknown as Sql)},
          admission_errors = case when v.errors = '[]' then '[]'::jsonb else (
            select coalesce(jsonb_agg(e), '[]'::jsonb) from jsonb_array_elements(v.errors::jsonb) e
            where (select mp.status from match_result_players mp
                   where mp.environment_id = r.environment_id and mp.id = e->>'player_id') = 'pending') end,
          revision = r.revision + 1, updated_at = v.at
        from unnest(${env}::text[], ${id}::text[], ${errors}::text[], ${at}::timestamptz[]) as v(env, id, errors, at)
        where r.environment_id = v.env and r.id = v.id
        returning r.environment_id, r.id, r.revision, r.status`;
      const written = new Map(
        rows.map((r) => [`${r.environment_id as string}\u0000${r.id as string}`, { revision: r.revision as number, status: r.status as string }] as const),
      );
      return items.map((v) => written.get(`${v.environmentId}\u0000${v.matchResultId}`) ?? null);
    }) as Promise<Array<VerdictsWritten | null>>;
  }

  /** A record with its players (by `mr_` id or by match_id), or null. */
  async load(env: string, where: { id?: string; matchId?: string }, tx: Sql = this.sql): Promise<MatchRow | null> {
    const rows =
      where.id !== undefined
        ? await tx`select * from match_results where environment_id = ${env} and id = ${where.id}`
        : await tx`select * from match_results where environment_id = ${env} and match_id = ${where.matchId ?? ''}`;
    if (rows.length === 0) return null;
    const r = rows[0]!;
    const players = await tx`
      select * from match_result_players where environment_id = ${env} and match_result_id = ${r.id as string} order by position`;
    return matchRow(r, players.map(playerRow));
  }

  /** Oldest first for the review queue (status held); newest first otherwise. */
  async list(env: string, q: { status: string | null; limit: number; after: string | null }): Promise<MatchRow[]> {
    const sql = this.sql;
    const oldestFirst = q.status === 'held';
    const rows = oldestFirst
      ? await sql`
          select * from match_results where environment_id = ${env} and status = 'held' and (${q.after}::text is null or id > ${q.after})
          order by id limit ${q.limit}`
      : await sql`
          select * from match_results where environment_id = ${env} and (${q.status}::text is null or status = ${q.status})
            and (${q.after}::text is null or id < ${q.after})
          order by id desc limit ${q.limit}`;
    if (rows.length === 0) return [];
    const ids = rows.map((r) => r.id as string);
    const players = await sql`
      select * from match_result_players where environment_id = ${env} and match_result_id = any(${ids}) order by position`;
    const byMatch = new Map<string, PlayerRow[]>();
    for (const p of players.map(playerRow)) {
      let l = byMatch.get(p.matchResultId);
      if (!l) byMatch.set(p.matchResultId, (l = []));
      l.push(p);
    }
    return rows.map((r) => matchRow(r, byMatch.get(r.id as string) ?? []));
  }

  /** Whether a credential (a match's reporting key) is revoked. */
  async credentialRevoked(credentialId: string): Promise<boolean> {
    const rows = await this.sql`select 1 from credentials where id = ${credentialId} and revoked_at is not null`;
    return rows.length > 0;
  }

  /** A player row as it is now, unlocked (a review's first check; lockPlayer reads it again under the lock). */
  async player(env: string, playerId: string): Promise<PlayerRow | null> {
    const rows = await this.sql`select * from match_result_players where environment_id = ${env} and id = ${playerId}`;
    return rows.length === 0 ? null : playerRow(rows[0]!);
  }

  /**
   * A player row, locked until the transaction `tx` ends (reviews), after its match record: the
   * record is locked first, as verdict writes do, so two reviews of players of one match (or a
   * review and a report's verdicts) run one after the other and each derives the match status
   * from what the other wrote.
   */
  async lockPlayer(tx: Sql, env: string, playerId: string): Promise<PlayerRow | null> {
    const [owner] = await tx`select match_result_id from match_result_players where environment_id = ${env} and id = ${playerId}`;
    if (owner === undefined) return null;
    await tx`select 1 from match_results where environment_id = ${env} and id = ${owner.match_result_id as string} for update`;
    const rows = await tx`select * from match_result_players where environment_id = ${env} and id = ${playerId} for update`;
    return rows.length === 0 ? null : playerRow(rows[0]!);
  }

  /** A review's outcome: the player row, then the record's status derived from its stored players (inside the review's transaction), both at atMs (the environment's clock). */
  async writeReview(tx: Sql, env: string, matchResultId: string, p: PlayerRow, atMs: number): Promise<string> {
    await tx`
      update match_result_players set status = ${p.status}, reasons = (${JSON.stringify(p.reasons)}::text)::jsonb,
        review = (${JSON.stringify(p.review)}::text)::jsonb, event_id = ${p.eventId}, updated_at = ${new Date(atMs)}
      where environment_id = ${env} and id = ${p.id}`;
    const [row] = await tx`
      update match_results r set status = ${derivedStatus(tx)}, revision = r.revision + 1, updated_at = ${new Date(atMs)}
      where r.environment_id = ${env} and r.id = ${matchResultId}
      returning r.status`;
    return row!.status as string;
  }
}
