// Match results (spec 2.12, 3, 4.9): the coordinator of POST /match_results and of reviews. The
// match record lives in PostgreSQL keyed by (environment, match_id): the first report inserts it
// with every player pending, then admits the players concurrently, each through a command to its
// customer's actor (the engine routes it to whichever partition and node owns the customer and
// follows merges to the survivor, whose actor holds the group's rate windows), then stores the
// verdicts. A repeat with the same body is a replay that also completes players an interrupted
// request left pending (rule 5); the actor step is idempotent (rate book + event id dedup), so a
// player is admitted exactly once however often the report is retried or a node dies.
import type { CountersContext } from '../domain/counters.js';
import type { Engine } from '../actors/engine.js';
import type { CallResult, EngineCommand } from '../actors/partition.js';
import type { MatchEventSpec, MatchPlayerReply } from '../domain/match/actor.js';
import { preAdmit, checkProfileOpen } from '../domain/match/admission.js';
import type { MatchProfile } from '../domain/match/profile.js';
import type { Reason } from '../domain/match/reasons.js';
import {
  checkReportMetrics,
  checkResolvedPlayers,
  compareRepeat,
  type CustomerRef,
  type MatchReport,
  parseReport,
  reportFingerprint,
} from '../domain/match/report.js';
import { decideReview, deriveMatchStatus, type PlayerRecord, type PlayerStatus, type Review, type ReviewDecision } from '../domain/match/verdict.js';
import type { RulesContext } from '../domain/rule-effects.js';
import { ApiError } from '../errors/api-error.js';
import { newId } from '../ids.js';
import type { Sql } from '../persistence/sql/db.js';
import type { MatchProfileStore } from './change-sets.js';


interface EventContext {
  rules: RulesContext | null;
  counters: CountersContext | null;
}

export interface MatchResultsDeps {
  sql: Sql;
  engine: Engine;
  profiles: MatchProfileStore;
  nowMs(environmentId: string): number | Promise<number>;
  rules(environmentId: string): RulesContext | null | Promise<RulesContext | null>;
  /** The environment's counter definitions: match events are counted like any other event. */
  counters?(environmentId: string): CountersContext | null | Promise<CountersContext | null>;
}

type StoredStatus = PlayerStatus | 'pending';

export interface PlayerRow {
  id: string;
  matchResultId: string;
  position: number;
  customerRef: CustomerRef;
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

/** Shape of an admission_errors item (spec: not shown; ours). */
export interface AdmissionError {
  player_id: string;
  customer_id: string | null;
  code: string;
  message: string;
}

function json<T>(v: unknown): T {
  return (typeof v === 'string' ? JSON.parse(v) : v) as T;
}
const ms = (d: unknown) => (d as Date).getTime();

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
    reasons: json(r.reasons),
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

const iso = (t: number) => new Date(t).toISOString();

export function playerWire(p: PlayerRow) {
  return {
    id: p.id,
    customer_id: p.customerId,
    metrics: p.metrics,
    won: p.won,
    // Rule 5: a player whose admission did not finish shows admitted with event_id null (listed in admission_errors).
    status: p.status === 'pending' ? 'admitted' : p.status,
    reasons: p.reasons,
    event_id: p.eventId,
    client_event_id: p.clientEventId,
    review:
      p.review === null
        ? null
        : { decision: p.review.decision, reason: p.review.reason, actor: p.review.actor, reviewed_at: iso(p.review.reviewedAtMs) },
    created_at: iso(p.createdAtMs),
    updated_at: iso(p.updatedAtMs),
  };
}

export function matchWire(m: MatchRow, replayed: boolean) {
  return {
    id: m.id,
    match_id: m.matchId,
    profile: m.profileKey,
    match_profile_id: m.profileId,
    profile_revision: m.profileRevision,
    event: m.event,
    started_at: iso(m.startedAtMs),
    ended_at: iso(m.endedAtMs),
    duration_seconds: m.durationSeconds,
    status: m.status,
    players: [...m.players].sort((a, b) => a.position - b.position).map(playerWire),
    replayed,
    admission_errors: m.admissionErrors,
    revision: m.revision,
    created_at: iso(m.createdAtMs),
    updated_at: iso(m.updatedAtMs),
  };
}

function refKey(r: CustomerRef): string {
  return `${r.by}:${r.value}`;
}

function statusOf(players: readonly PlayerRow[]): string {
  return deriveMatchStatus(players.map((p) => (p.status === 'pending' ? 'admitted' : p.status)));
}

function throwResult(r: Extract<CallResult, { ok: false }>, param?: string): never {
  throw new ApiError(r.code, { message: r.message, param: param ?? r.param, retryAfterSeconds: r.retryAfterSeconds });
}

export class MatchResults {
  constructor(private readonly deps: MatchResultsDeps) {}

  private async now(env: string): Promise<number> {
    return await this.deps.nowMs(env);
  }

  /** What a player's event is evaluated with (loaded before the actor's step), as for POST /v1/events. */
  private async eventContext(env: string): Promise<EventContext> {
    const [rules, counters] = await Promise.all([this.deps.rules(env), this.deps.counters?.(env) ?? null]);
    return { rules, counters };
  }

  private async load(env: string, where: { id?: string; matchId?: string }, tx: Sql = this.deps.sql): Promise<MatchRow | null> {
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

  async get(env: string, ref: string): Promise<MatchRow> {
    const m = ref.startsWith('mr_') ? ((await this.load(env, { id: ref })) ?? (await this.load(env, { matchId: ref }))) : await this.load(env, { matchId: ref });
    if (m === null) throw new ApiError('resource_not_found', { message: `No match result ${ref}.`, param: 'id' });
    return m;
  }

  /** Oldest first for the review queue (status held); newest first otherwise. */
  async list(env: string, q: { status: string | null; limit: number; after: string | null }): Promise<MatchRow[]> {
    const sql = this.deps.sql;
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

  // ---- reporting ------------------------------------------------------------------------------

  async report(env: string, reportingKeyId: string, body: unknown): Promise<{ status: 200 | 201; body: unknown }> {
    const nowMs = await this.now(env);
    const parsed = parseReport(body, nowMs);
    if (!parsed.ok) throw new ApiError('validation_failed', { param: parsed.param, message: parsed.message, details: parsed.details });
    const report = parsed.value;

    const existing = await this.load(env, { matchId: report.matchId });
    if (existing !== null) return this.repeat(env, existing, report);

    const profile = (await this.deps.profiles.byKey(env)).get(report.profileKey);
    if (profile === undefined) throw new ApiError('resource_not_found', { message: `No match profile ${report.profileKey}.`, param: 'profile' });
    const open = checkProfileOpen(profile);
    if (!open.ok) throw new ApiError(open.code, { param: open.param, message: open.message });
    const metrics = checkReportMetrics(report, profile);
    if (!metrics.ok) throw new ApiError('validation_failed', { param: metrics.param, message: metrics.message, details: metrics.details });

    const customerIds = await this.resolvePlayers(env, report, nowMs);
    const dup = checkResolvedPlayers(customerIds);
    if (!dup.ok) throw new ApiError('validation_failed', { param: dup.param, message: dup.message, details: dup.details });

    const pre = preAdmit(profile, report);
    const matchResultId = newId('mr', nowMs);
    const at = new Date(nowMs);
    const fingerprint = reportFingerprint(report);
    const status = deriveMatchStatus(pre.map((p) => (p.stage === 'final' ? p.verdict.status : p.pending)));
    const ids = report.players.map(() => newId('mrp', nowMs));
    const inserted = await this.deps.sql.begin(async (tx) => {
      const r = await tx`
        insert into match_results (environment_id, id, match_id, profile_id, profile_key, profile_revision, event, fingerprint,
          started_at, ended_at, duration_seconds, reporting_key_id, status, created_at, updated_at)
        values (${env}, ${matchResultId}, ${report.matchId}, ${profile.id}, ${profile.key}, ${profile.revision}, ${profile.event},
          ${fingerprint}, ${new Date(report.startedAtMs)}, ${new Date(report.endedAtMs)}, ${report.durationSeconds}, ${reportingKeyId},
          ${status}, ${at}, ${at})
        on conflict (environment_id, match_id) do nothing returning id`;
      if (r.length === 0) return false;
      // One statement for every player (unnest of parallel arrays).
      const refs = report.players.map((p) => JSON.stringify(p.customer));
      const metricsJson = report.players.map((p) => JSON.stringify(p.metrics));
      const won = report.players.map((p) => (p.won === null ? null : String(p.won)));
      const statuses = pre.map((pp) => (pp.stage === 'final' ? 'rejected' : 'pending'));
      const verdicts = pre.map((pp) => (pp.stage === 'final' ? 'rejected' : pp.pending));
      const reasons = pre.map((pp) => JSON.stringify(pp.stage === 'final' ? pp.verdict.reasons : []));
      const clientIds = customerIds.map((c) => `${report.matchId}:${c}`);
      await tx`
        insert into match_result_players (environment_id, id, match_result_id, position, customer_ref, customer_id, metrics, won,
          status, pending_verdict, reasons, client_event_id, created_at, updated_at)
        select ${env}, v.id, ${matchResultId}, v.ord - 1, v.ref::jsonb, v.customer_id, v.metrics::jsonb, v.won::boolean,
          v.status, v.verdict, v.reasons::jsonb, v.client_event_id, ${at}, ${at}
        from unnest(${ids}::text[], ${refs}::text[], ${customerIds}::text[], ${metricsJson}::text[], ${won}::text[],
          ${statuses}::text[], ${verdicts}::text[], ${reasons}::text[], ${clientIds}::text[])
          with ordinality as v(id, ref, customer_id, metrics, won, status, verdict, reasons, client_event_id, ord)`;
      return true;
    });
    if (!inserted) {
      const other = await this.load(env, { matchId: report.matchId });
      if (other === null) throw new ApiError('internal_error');
      return this.repeat(env, other, report);
    }
    // The record as just inserted (no read back).
    const stored: MatchRow = {
      id: matchResultId,
      matchId: report.matchId,
      profileId: profile.id,
      profileKey: profile.key,
      profileRevision: profile.revision,
      event: profile.event,
      fingerprint,
      startedAtMs: report.startedAtMs,
      endedAtMs: report.endedAtMs,
      durationSeconds: report.durationSeconds,
      reportingKeyId,
      status,
      admissionErrors: [],
      revision: 1,
      createdAtMs: nowMs,
      updatedAtMs: nowMs,
      players: report.players.map((p, i): PlayerRow => {
        const pp = pre[i]!;
        return {
          id: ids[i]!,
          matchResultId,
          position: i,
          customerRef: p.customer,
          customerId: customerIds[i]!,
          metrics: p.metrics,
          won: p.won,
          status: pp.stage === 'final' ? 'rejected' : 'pending',
          pendingVerdict: pp.stage === 'final' ? 'rejected' : pp.pending,
          reasons: pp.stage === 'final' ? pp.verdict.reasons : [],
          eventId: null,
          clientEventId: `${report.matchId}:${customerIds[i]!}`,
          review: null,
          createdAtMs: nowMs,
          updatedAtMs: nowMs,
        };
      }),
    };
    const done = await this.complete(env, stored, profile, report, pre);
    return { status: 201, body: matchWire(done, false) };
  }

  /** Rule 4: identical body = replay (completing pending players, rule 5); another body = idempotency_key_reused. */
  private async repeat(env: string, existing: MatchRow, report: MatchReport): Promise<{ status: 200; body: unknown }> {
    const same = compareRepeat(existing.fingerprint, report);
    if (!same.ok) throw new ApiError(same.code, { param: same.param, message: same.message });
    let m = existing;
    if (m.players.some((p) => p.status === 'pending')) {
      const profile = await this.deps.profiles.revision(env, m.profileId, m.profileRevision);
      if (profile === null) throw new ApiError('internal_error');
      // The stored report and this one are identical up to player order: match them by reference.
      const pre = preAdmit(profile, report);
      const byRef = new Map(report.players.map((p, i) => [refKey(p.customer), pre[i]!] as const));
      const ordered = [...m.players].sort((a, b) => a.position - b.position).map((p) => byRef.get(refKey(p.customerRef))!);
      m = await this.complete(env, m, profile, report, ordered);
    }
    return { status: 200, body: matchWire(m, true) };
  }

  /** Each player named by `{id}` must exist (resource_not_found); unknown external ids are created. */
  private async resolvePlayers(env: string, report: MatchReport, nowMs: number): Promise<string[]> {
    const { engine } = this.deps;
    return Promise.all(
      report.players.map(async (p, i) => {
        const target = p.customer.by === 'id' ? { by: 'id' as const, id: p.customer.value } : { by: 'key' as const, key: p.customer.value };
        const param = `players[${i}].customer.${p.customer.by}`;
        let r: CallResult;
        try {
          r = await engine.execute({ env, target, command: { kind: 'customer.view' }, nowMs });
        } catch (err) {
          if (err instanceof ApiError && err.code === 'resource_not_found') throw new ApiError('resource_not_found', { message: 'No customer with this id.', param });
          throw err;
        }
        if (r.ok === true && r.reply.kind === 'customer') return r.reply.customer.id;
        if (r.ok === true || r.ok === 'redirect') throw new ApiError('internal_error');
        if (r.code !== 'resource_not_found') throwResult(r, param);
        if (p.customer.by === 'id') throw new ApiError('resource_not_found', { message: 'No customer with this id.', param });
        const c = await engine.execute({ env, target, command: { kind: 'customer.create', externalId: p.customer.value, attributes: {} }, nowMs });
        if (c.ok === true && c.reply.kind === 'customer') return c.reply.customer.id;
        if (c.ok === false && c.code === 'already_exists') {
          const again = await engine.execute({ env, target, command: { kind: 'customer.view' }, nowMs });
          if (again.ok === true && again.reply.kind === 'customer') return again.reply.customer.id;
        }
        if (c.ok === false) throwResult(c, param);
        throw new ApiError('internal_error');
      }),
    );
  }

  /** Admits every pending player through its actor (concurrently), then stores the verdicts. */
  private async complete(
    env: string,
    m: MatchRow,
    profile: MatchProfile,
    report: MatchReport,
    pre: ReturnType<typeof preAdmit>,
  ): Promise<MatchRow> {
    const nowMs = await this.now(env);
    const rules = await this.eventContext(env);
    // Copies: the stored rows (m.players) keep telling which players were pending.
    const players = [...m.players].sort((a, b) => a.position - b.position).map((p) => ({ ...p }));
    const errors: AdmissionError[] = [];
    await Promise.all(
      players.map(async (p, i) => {
        if (p.status !== 'pending') return;
        const pp = pre[i]!;
        if (pp.stage === 'final') {
          Object.assign(p, { status: 'rejected', reasons: pp.verdict.reasons });
          return;
        }
        const command: EngineCommand = {
          kind: 'match.admit',
          customerId: p.customerId ?? '',
          externalId: null,
          profileId: profile.id,
          rateLimits: profile.rateLimits,
          endedAtMs: report.endedAtMs,
          pending: pp.pending,
          outlierReasons: pp.outlierReasons,
          event: this.eventSpec(m, profile.event, p, rules),
        };
        let r: CallResult;
        try {
          r = await this.deps.engine.execute({ env, target: { by: 'id', id: p.customerId ?? '' }, command, nowMs });
        } catch (err) {
          const e = err instanceof ApiError ? err : new ApiError('internal_error');
          errors.push({ player_id: p.id, customer_id: p.customerId, code: e.code, message: e.message });
          return;
        }
        if (r.ok !== true || r.reply.kind !== 'match_player') {
          const code = r.ok === false ? r.code : 'internal_error';
          const message = r.ok === false ? (r.message ?? code) : 'Unexpected reply.';
          errors.push({ player_id: p.id, customer_id: p.customerId, code, message });
          return;
        }
        const v: MatchPlayerReply = r.reply;
        Object.assign(p, { status: v.status, reasons: v.reasons, eventId: v.eventId, clientEventId: v.clientEventId });
      }),
    );
    const status = statusOf(players);
    const completed = players.filter((p) => p.status !== 'pending' && m.players.some((q) => q.id === p.id && q.status === 'pending'));
    const updatedAt = new Date(nowMs);
    const rows = await this.deps.sql.begin(async (tx) => {
      if (completed.length > 0) {
        // Only players still pending: a concurrent repeat that completed them first wins (same verdicts).
        await tx`
          update match_result_players p set status = v.status, reasons = v.reasons::jsonb, event_id = v.event_id,
            client_event_id = v.client_event_id, updated_at = ${updatedAt}
          from unnest(${completed.map((p) => p.id)}::text[], ${completed.map((p) => p.status)}::text[],
            ${completed.map((p) => JSON.stringify(p.reasons))}::text[], ${completed.map((p) => p.eventId)}::text[],
            ${completed.map((p) => p.clientEventId)}::text[]) as v(id, status, reasons, event_id, client_event_id)
          where p.environment_id = ${env} and p.id = v.id and p.status = 'pending'`;
      }
      return tx`
        update match_results set status = ${status}, admission_errors = (${JSON.stringify(errors)}::text)::jsonb,
          revision = revision + 1, updated_at = ${updatedAt}
        where environment_id = ${env} and id = ${m.id} returning revision`;
    });
    for (const p of completed) p.updatedAtMs = nowMs;
    return { ...m, players, status, admissionErrors: errors, revision: (rows[0]?.revision as number | undefined) ?? m.revision + 1, updatedAtMs: nowMs };
  }

  private eventSpec(m: MatchRow, eventName: string, p: PlayerRow, context: EventContext | null): MatchEventSpec {
    return {
      name: eventName,
      matchId: m.matchId,
      profileKey: m.profileKey,
      occurredAtMs: m.endedAtMs,
      metrics: p.metrics,
      won: p.won,
      trust: 'merchant_asserted',
      rules: context?.rules ?? null,
      counters: context?.counters ?? null,
    };
  }

  // ---- reviews --------------------------------------------------------------------------------

  /**
   * A review of a held player. Serialized per player by a row lock held across the actor call, so
   * two racing decisions cannot both apply. Codes: resource_not_found, invalid_state (never held,
   * opposite decision), forbidden (admit while the reporting key is revoked; the player stays held).
   */
  async review(
    env: string,
    playerId: string,
    decision: ReviewDecision,
    reason: string | null,
    actor: string,
  ): Promise<{ player: ReturnType<typeof playerWire>; match_result: { id: string; match_id: string; status: string }; replayed: boolean }> {
    const nowMs = await this.now(env);
    const rules = decision === 'admit' ? await this.eventContext(env) : null;
    return this.deps.sql.begin(async (tx) => {
      const rows = await tx`select * from match_result_players where environment_id = ${env} and id = ${playerId} for update`;
      if (rows.length === 0) throw new ApiError('resource_not_found', { message: `No match result player ${playerId}.`, param: 'id' });
      const p = playerRow(rows[0]!);
      const m = await this.load(env, { id: p.matchResultId }, tx as unknown as Sql);
      if (m === null) throw new ApiError('internal_error');
      const revoked = await tx`select revoked_at from credentials where id = ${m.reportingKeyId} and revoked_at is not null`;
      const record: PlayerRecord = {
        id: p.id,
        customerId: p.customerId ?? '',
        status: p.status === 'pending' ? 'admitted' : p.status,
        reasons: p.reasons,
        review: p.review,
      };
      const d = decideReview(record, { kind: 'match_player.review', decision, reason, actor, reportingKeyRevoked: revoked.length > 0 }, { nowMs });
      if (!d.ok) throw new ApiError(d.code, { param: d.param, message: d.message });
      const matchRef = { id: m.id, match_id: m.matchId, status: m.status };
      if (d.reply.replayed) return { player: playerWire(p), match_result: matchRef, replayed: true };
      const r = await this.deps.engine.execute({
        env,
        target: { by: 'id', id: p.customerId ?? '' },
        command: { kind: 'match.review', decision, customerId: p.customerId ?? '', profileId: m.profileId, event: this.eventSpec(m, m.event, p, rules) },
        nowMs,
      });
      if (r.ok !== true) {
        if (r.ok === 'redirect') throw new ApiError('internal_error');
        throwResult(r);
      }
      if (r.reply.kind !== 'match_player') throw new ApiError('internal_error');
      const v = r.reply;
      const fact = d.facts[0]!;
      const reasons = v.status === 'rejected' && decision === 'admit' ? [...p.reasons, ...v.reasons] : fact.reasons;
      const next: PlayerRow = { ...p, status: v.status, reasons, review: fact.review, eventId: v.eventId, updatedAtMs: nowMs };
      await tx`
        update match_result_players set status = ${next.status}, reasons = (${JSON.stringify(next.reasons)}::text)::jsonb,
          review = (${JSON.stringify(next.review)}::text)::jsonb, event_id = ${next.eventId}, updated_at = ${new Date(nowMs)}
        where environment_id = ${env} and id = ${p.id}`;
      const all = m.players.map((x) => (x.id === p.id ? next : x));
      const status = statusOf(all);
      await tx`
        update match_results set status = ${status}, revision = revision + 1, updated_at = now() where environment_id = ${env} and id = ${m.id}`;
      return { player: playerWire(next), match_result: { ...matchRef, status }, replayed: false };
    });
  }
}
