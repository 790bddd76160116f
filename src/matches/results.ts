// Match results (spec 2.12, 3, 4.9): the coordinator of POST /match_results and of reviews. The
// match record lives in PostgreSQL keyed by (environment, match_id) (persistence/sql/
// match-records.ts, batched across concurrent reports). A report is checked without writing
// anything (profile, metrics, players resolved: a never-seen external id stays unresolved), then
// claimed: the record inserted with every player pending, or a conflict, and only then is the
// stored record read (replay or idempotency_key_reused). The players are admitted concurrently,
// each by a command to its customer's actor (the engine routes it to whichever partition and node
// owns the customer and follows merges to the survivor, whose actor holds the group's rate
// windows); a player named by a never-seen external id is created by that same command. Each
// player's event id `<match_id>:<customer id>` is the environment's, as for POST /v1/events: it is
// claimed in the environment's register with the content a client would send (before the actor's
// step, or right after it for a customer that step created), and an id already bound to other
// content keeps the player out of the actor (rejected, event_refused). Then the verdicts are
// stored. A repeat with the same body is a replay that also completes players an
// interrupted request left pending (rule 5); the actor step is idempotent (rate book + event id
// dedup), so a player is admitted exactly once however often the report is retried or a node dies.

import type { Engine, EventEntry } from '../actors/engine.js';
import type { CallResult, EngineCommand } from '../actors/partition.js';
import { countersUnavailable, withCountersContext } from '../catalog/counters.js';
import { type BudgetAllowance, grantFor, settleGrant } from '../catalog/event-grants.js';
import { type HeldSlots, reserveSharedLimits, settleSharedLimits } from '../catalog/shared-limit-slots.js';
import type { CountersContext } from '../domain/counters.js';
import { eventFingerprint } from '../domain/event-fingerprint.js';
import { type MatchEventSpec, type MatchPlayerReply, matchEventProperties } from '../domain/match/actor.js';
import { checkProfileOpen, preAdmit } from '../domain/match/admission.js';
import type { MatchProfile } from '../domain/match/profile.js';
import {
  checkReportMetrics,
  checkResolvedPlayers,
  compareRepeat,
  type MatchReport,
  parseReport,
  reportFingerprint,
} from '../domain/match/report.js';
import { clientEventId, decideReview, deriveMatchStatus, type PlayerRecord, type ReviewDecision } from '../domain/match/verdict.js';
import type { Effect, RulesContext } from '../domain/rule-effects.js';
import { ApiError } from '../errors/api-error.js';
import type { ErrorCode } from '../errors/codes.js';
import type { EventIdClaims } from '../gateway/event-id-claims.js';
import { newId } from '../ids.js';
import type { ErasedEvent, SharedLimits } from '../persistence/ports.js';
import type { Sql } from '../persistence/sql/db.js';
import { type AdmissionError, MatchRecords, type MatchRow, type PlayerRow } from '../persistence/sql/match-records.js';
import { isoTime } from '../util/iso-time.js';
import type { MatchProfileStore } from './change-sets.js';

export type { AdmissionError, MatchRow, PlayerRow } from '../persistence/sql/match-records.js';

interface EventContext {
  rules: RulesContext | null;
  counters: CountersContext | null;
}

export interface MatchResultsDeps {
  sql: Sql;
  engine: Engine;
  /** The environment-wide register of client event ids, shared with POST /v1/events. */
  eventIds: EventIdClaims;
  profiles: MatchProfileStore;
  nowMs(environmentId: string): number | Promise<number>;
  rules(environmentId: string): RulesContext | null | Promise<RulesContext | null>;
  /**
   * The environment's counter definitions in its time zone: match events are counted like any
   * other event. `context` answers synchronously once cached (read as each player's event is sent).
   */
  counters?: {
    timeZone(environmentId: string): Promise<string>;
    context(environmentId: string, timeZone: string): CountersContext | null | Promise<CountersContext | null>;
  };
  /** The node's campaign budget allowance: capped campaigns' awards on match events (rule 6, as for POST /v1/events). */
  budgets?: BudgetAllowance;
  /** Rule limits shared by every customer: a player's event reserves its slots as POST /v1/events does. */
  sharedLimits?: SharedLimits;
  /** Called with the effects of an admitted player's journaled event (e.g. rewards its rules requested), as for POST /v1/events. */
  afterEvent?(environmentId: string, customerId: string, effects: readonly Effect[]): void;
}

const iso = isoTime;

const customerDeletedMessage = "The player's customer was deleted; the player can only be rejected.";

export function playerWire(p: PlayerRow) {
  return {
    id: p.id,
    customer_id: p.customerId,
    metrics: p.metrics,
    won: p.won,
    // Rule 5: a player whose admission did not finish shows the verdict the report reserved for it:
    // held or rejected with its outlier reasons, or admitted with event_id null (listed in admission_errors).
    status: p.status === 'pending' ? p.pendingVerdict : p.status,
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

/** The match status of these players; a pending player counts as its reserved verdict (as the stored status does). */
function statusOf(players: readonly PlayerRow[]): string {
  return deriveMatchStatus(players.map((p) => (p.status === 'pending' ? p.pendingVerdict : p.status)));
}

/** The report a stored record was made from (players in their stored order): what completing its pending players needs. */
function storedReport(m: MatchRow): MatchReport {
  return {
    profileKey: m.profileKey,
    matchId: m.matchId,
    startedAtMs: m.startedAtMs,
    endedAtMs: m.endedAtMs,
    durationSeconds: m.durationSeconds,
    players: [...m.players].sort((a, b) => a.position - b.position).map((p) => ({ customer: p.customerRef, metrics: p.metrics, won: p.won })),
  };
}

function throwResult(r: Extract<CallResult, { ok: false }>, param?: string): never {
  throw new ApiError(r.code, { message: r.message, param: param ?? r.param, retryAfterSeconds: r.retryAfterSeconds });
}

export class MatchResults {
  private readonly records: MatchRecords;
  /** The shared limit slots a player's event spec took (grantedEventSpec), settled by execute. */
  private readonly heldSlots = new WeakMap<MatchEventSpec, HeldSlots>();

  constructor(private readonly deps: MatchResultsDeps) {
    this.records = new MatchRecords(deps.sql);
  }

  private async now(env: string): Promise<number> {
    return await this.deps.nowMs(env);
  }

  /** What a player's event is evaluated with (loaded before the actor's step), as for POST /v1/events. */
  private async eventContext(env: string): Promise<EventContext> {
    const c = this.deps.counters;
    const [rules, counters] = await Promise.all([this.deps.rules(env), c === undefined ? null : c.timeZone(env).then((tz) => c.context(env, tz))]);
    return { rules, counters };
  }

  async get(env: string, ref: string): Promise<MatchRow> {
    const m = ref.startsWith('mr_')
      ? ((await this.records.load(env, { id: ref })) ?? (await this.records.load(env, { matchId: ref })))
      : await this.records.load(env, { matchId: ref });
    if (m === null) throw new ApiError('resource_not_found', { message: `No match result ${ref}.`, param: 'id' });
    return m;
  }

  /** Oldest first for the review queue (status held); newest first otherwise. */
  list(env: string, q: { status: string | null; limit: number; after: string | null }): Promise<MatchRow[]> {
    return this.records.list(env, q);
  }

  // ---- reporting ------------------------------------------------------------------------------

  /**
   * A report: checks that need no write (profile, metrics, players resolved), then the claim (the
   * record inserted with its players pending, or a conflict when the match_id is stored: the
   * stored record is read only then), then admission. No lookup precedes the claim.
   */
  async report(env: string, reportingKeyId: string, body: unknown): Promise<{ status: 200 | 201; body: unknown }> {
    const nowMs = await this.now(env);
    const parsed = parseReport(body, nowMs);
    if (!parsed.ok) {
      const invalid = new ApiError('validation_failed', { param: parsed.param, message: parsed.message, details: parsed.details });
      // Rule 4 first: a repeat of a stored match is answered from its record even once its
      // ended_at left the window (a replay then also completes players left pending, rule 5).
      const repeat = parseReport(body, nowMs, { window: false });
      if (!repeat.ok) throw invalid;
      const existing = await this.records.load(env, { matchId: repeat.value.matchId });
      if (existing === null) throw invalid;
      return this.repeat(env, existing, repeat.value);
    }
    const report = parsed.value;

    let checked: { profile: MatchProfile; customerIds: Array<string | null> };
    try {
      checked = await this.check(env, report, nowMs);
    } catch (err) {
      // Rule 4 comes first for a match_id already stored: a repeat is answered from the stored
      // record even when the profile was archived or changed since, or a player no longer resolves.
      if (!(err instanceof ApiError)) throw err;
      const existing = await this.records.load(env, { matchId: report.matchId });
      if (existing === null) throw err;
      return this.repeat(env, existing, report);
    }
    const { profile, customerIds } = checked;

    const pre = preAdmit(profile, report);
    const matchResultId = newId('mr', nowMs);
    const stored: MatchRow = {
      id: matchResultId,
      matchId: report.matchId,
      profileId: profile.id,
      profileKey: profile.key,
      profileRevision: profile.revision,
      event: profile.event,
      fingerprint: reportFingerprint(report),
      startedAtMs: report.startedAtMs,
      endedAtMs: report.endedAtMs,
      durationSeconds: report.durationSeconds,
      reportingKeyId,
      status: deriveMatchStatus(pre.map((p) => (p.stage === 'final' ? p.verdict.status : p.pending))),
      admissionErrors: [],
      revision: 1,
      createdAtMs: nowMs,
      updatedAtMs: nowMs,
      players: report.players.map((p, i): PlayerRow => {
        const pp = pre[i]!;
        const customerId = customerIds[i]!;
        return {
          id: newId('mrp', nowMs),
          matchResultId,
          position: i,
          customerRef: p.customer,
          customerId,
          metrics: p.metrics,
          won: p.won,
          status: pp.stage === 'final' ? 'rejected' : 'pending',
          pendingVerdict: pp.stage === 'final' ? 'rejected' : pp.pending,
          // A pending player shows its reserved verdict until its actor decides (rule 5): with its outlier reasons.
          reasons: pp.stage === 'final' ? pp.verdict.reasons : pp.outlierReasons,
          eventId: null,
          clientEventId: customerId === null ? null : `${report.matchId}:${customerId}`,
          review: null,
          createdAtMs: nowMs,
          updatedAtMs: nowMs,
        };
      }),
    };
    if (!(await this.records.claim(env, stored))) {
      const other = await this.records.load(env, { matchId: report.matchId });
      if (other === null) throw new ApiError('internal_error');
      return this.repeat(env, other, report);
    }
    const done = await this.complete(env, stored, profile, report, pre);
    return { status: 201, body: matchWire(done, false) };
  }

  /** The checks of a new report that write nothing: profile open, rule 1's metrics, the players (rule 2) each once. */
  private async check(env: string, report: MatchReport, nowMs: number): Promise<{ profile: MatchProfile; customerIds: Array<string | null> }> {
    const profile = (await this.deps.profiles.byKey(env)).get(report.profileKey);
    if (profile === undefined) throw new ApiError('resource_not_found', { message: `No match profile ${report.profileKey}.`, param: 'profile' });
    const open = checkProfileOpen(profile);
    if (!open.ok) throw new ApiError(open.code, { param: open.param, message: open.message });
    const metrics = checkReportMetrics(report, profile);
    if (!metrics.ok) throw new ApiError('validation_failed', { param: metrics.param, message: metrics.message, details: metrics.details });
    const customerIds = await this.resolvePlayers(env, report, nowMs);
    // Players never seen are distinct new customers; the known ones must be distinct customers too.
    const dup = checkResolvedPlayers(customerIds.map((id, i) => id ?? `\u0000new:${i}`));
    if (!dup.ok) throw new ApiError('validation_failed', { param: dup.param, message: dup.message, details: dup.details });
    return { profile, customerIds };
  }

  /** Rule 4: identical body = replay (completing pending players, rule 5); another body = idempotency_key_reused. */
  private async repeat(env: string, existing: MatchRow, report: MatchReport): Promise<{ status: 200; body: unknown }> {
    const same = compareRepeat(existing.fingerprint, report);
    if (!same.ok) throw new ApiError(same.code, { param: same.param, message: same.message });
    let m = existing;
    // Players left pending, or rejected before admission without the customer rule 2 creates.
    if (m.players.some((p) => p.status === 'pending' || (p.customerId === null && p.customerRef.by === 'external_id'))) {
      m = await this.completePending(env, m);
    }
    return { status: 200, body: matchWire(m, true) };
  }

  /**
   * Rule 5: completes the players an interrupted report left pending (and creates the customers
   * rule 2 owes players rejected before admission), decided on the stored report (a repeat is
   * identical to it up to player order), against the profile revision it was stored with.
   */
  private async completePending(env: string, m: MatchRow): Promise<MatchRow> {
    const profile = await this.deps.profiles.revision(env, m.profileId, m.profileRevision);
    if (profile === null) throw new ApiError('internal_error');
    const report = storedReport(m);
    // Rule 5: a player the revoked reporting key would admit stays listed, not admitted.
    const revoked = await this.records.credentialRevoked(m.reportingKeyId);
    return this.complete(env, m, profile, report, preAdmit(profile, report), revoked);
  }

  /**
   * Rule 2 without a write: each player's customer id, or null for an external id no customer has
   * (its own admission creates it, in the same journal record as its admission). A `cust_` id
   * nobody has is resource_not_found.
   */
  private async resolvePlayers(env: string, report: MatchReport, nowMs: number): Promise<Array<string | null>> {
    const { engine } = this.deps;
    return Promise.all(
      report.players.map(async (p, i) => {
        const target = p.customer.by === 'id' ? { by: 'id' as const, id: p.customer.value } : { by: 'key' as const, key: p.customer.value };
        const param = `players[${i}].customer.${p.customer.by}`;
        let r: CallResult;
        try {
          r = await engine.execute({ env, target, command: { kind: 'customer.resolve' }, nowMs });
        } catch (err) {
          if (err instanceof ApiError && err.code === 'resource_not_found') throw new ApiError('resource_not_found', { message: 'No customer with this id.', param });
          throw err;
        }
        if (r.ok === true && r.reply.kind === 'resolved') return r.reply.customerId;
        if (r.ok === true || r.ok === 'redirect') throw new ApiError('internal_error');
        if (r.code !== 'resource_not_found') throwResult(r, param);
        if (p.customer.by === 'id') throw new ApiError('resource_not_found', { message: 'No customer with this id.', param });
        return null;
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
    reportingKeyRevoked = false,
  ): Promise<MatchRow> {
    const nowMs = await this.now(env);
    const rules = await this.eventContext(env);
    // Copies: the stored rows (m.players) keep telling which players were pending.
    const players = [...m.players].sort((a, b) => a.position - b.position).map((p) => ({ ...p }));
    const wasPending = new Set(m.players.filter((p) => p.status === 'pending').map((p) => p.id));
    const errors: AdmissionError[] = [];
    /** Players rejected before admission whose new customer this call created (rule 2). */
    const created = new Set<string>();
    // Rule 2 holds whatever the verdict: an unknown external id becomes a customer. False when it
    // could not (listed in the errors).
    const ensureCustomer = async (p: PlayerRow): Promise<boolean> => {
      try {
        p.customerId = await this.ensureCustomer(env, p.customerRef.value, nowMs);
        p.clientEventId = clientEventId(m.matchId, p.customerId);
        created.add(p.id);
        return true;
      } catch (err) {
        const e = err instanceof ApiError ? err : new ApiError('internal_error');
        errors.push({ player_id: p.id, customer_id: null, code: e.code, message: e.message });
        return false;
      }
    };
    await Promise.all(
      players.map(async (p, i) => {
        if (p.status === 'rejected' && p.customerId === null && p.customerRef.by === 'external_id') {
          await ensureCustomer(p);
          return;
        }
        if (p.status !== 'pending') return;
        const pp = pre[i]!;
        if (pp.stage === 'final') {
          Object.assign(p, { status: 'rejected', reasons: pp.verdict.reasons });
          return;
        }
        // A player named by an external id no customer had is created by its own admission.
        const byKey = p.customerId === null;
        if (byKey && p.customerRef.by !== 'external_id') {
          errors.push({ player_id: p.id, customer_id: null, code: 'internal_error', message: 'The player has no customer.' });
          return;
        }
        if (reportingKeyRevoked && pp.pending === 'admitted') {
          // Rule 5: the revoked key blocks only what it would admit (the event); the player stays
          // pending, shown admitted with event_id null and listed. A held or outlier-rejected
          // verdict records no event: such a player completes below (its rate count). Rule 2 holds
          // whatever the verdict: an unknown external id still becomes a customer.
          if (byKey && !(await ensureCustomer(p))) return;
          errors.push({ player_id: p.id, customer_id: p.customerId, code: 'credentials_revoked', message: 'The key that reported this match was revoked.' });
          return;
        }
        let spec: MatchEventSpec;
        let properties: Record<string, unknown>;
        try {
          ({ spec, properties } = this.eventSpec(m, profile.event, p, rules, await this.eventCustomerId(env, p, nowMs)));
        } catch (err) {
          const e = err instanceof ApiError ? err : new ApiError('internal_error');
          errors.push({ player_id: p.id, customer_id: p.customerId, code: e.code, message: e.message });
          return;
        }
        // The id is bound before the step that may record its event, as POST /v1/events binds it
        // before the actor: bound to other content, the player does not reach its actor and is
        // rejected with event_refused, as its actor rejects an id it recorded with other content
        // (permanent: the id stays bound). A repeat binds the same content again and passes.
        if (p.customerId !== null && pp.pending === 'admitted') {
          const refused = await this.claimEventId(env, clientEventId(m.matchId, p.customerId), spec.fp);
          if (refused?.code === 'event_id_conflict') {
            Object.assign(p, { status: 'rejected', reasons: [{ code: 'event_refused', message: refused.message }] });
            return;
          }
          if (refused !== null) {
            errors.push({ player_id: p.id, customer_id: p.customerId, ...refused });
            return;
          }
        }
        const command: EngineCommand = {
          kind: 'match.admit',
          customerId: p.customerId ?? '',
          externalId: byKey ? p.customerRef.value : null,
          profileId: profile.id,
          rateLimits: profile.rateLimits,
          endedAtMs: report.endedAtMs,
          pending: pp.pending,
          outlierReasons: pp.outlierReasons,
          event: spec,
        };
        const target = p.customerId === null ? { by: 'key' as const, key: p.customerRef.value } : { by: 'id' as const, id: p.customerId };
        // Shared limit slots are held under the player's event id; a player named by an unknown
        // external id has none yet: `<match_id>:<external id>` (stable across repeats of the report).
        const slotsFor = pp.pending !== 'admitted' ? null : clientEventId(m.matchId, p.customerId ?? p.customerRef.value);
        let r: CallResult;
        try {
          await this.grantedEventSpec(env, spec, properties, nowMs, slotsFor);
          r = await this.execute(env, target, command, nowMs);
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
        if (v.effects.length > 0) this.deps.afterEvent?.(env, v.customerId, v.effects);
        if (byKey && v.eventId !== null) {
          // Its id names a customer nobody had when the report was checked (this step, or an
          // interrupted attempt of this report, created it), so it is bound only now. The event is
          // recorded whatever the register answers; a store failure leaves the player pending, and
          // the repeat binds it.
          const refused = await this.claimEventId(env, v.clientEventId, spec.fp);
          if (refused?.code === 'internal_error') {
            errors.push({ player_id: p.id, customer_id: p.customerId, ...refused });
            return;
          }
        }
        Object.assign(p, {
          status: v.status,
          reasons: v.reasons,
          eventId: v.eventId,
          clientEventId: v.clientEventId,
          customerId: p.customerId ?? v.customerId,
        });
      }),
    );
    const completed = players.filter((p) => (p.status !== 'pending' && wasPending.has(p.id)) || created.has(p.id));
    const written = await this.records.writeVerdicts({
      environmentId: env,
      matchResultId: m.id,
      admissionErrors: errors,
      players: completed.map((p) => ({
        id: p.id,
        status: p.status,
        customerId: p.customerId,
        reasons: p.reasons,
        eventId: p.eventId,
        clientEventId: p.clientEventId,
      })),
      atMs: nowMs,
    });
    for (const p of completed) p.updatedAtMs = nowMs;
    // The stored status is derived from the stored players: a review that ran meanwhile counts.
    const status = written?.status ?? statusOf(players);
    return { ...m, players, status, admissionErrors: errors, revision: written?.revision ?? m.revision + 1, updatedAtMs: nowMs };
  }

  /** The customer of an external id: created when nobody has it (its actor decides, so a race creates one). */
  private async ensureCustomer(env: string, externalId: string, nowMs: number): Promise<string> {
    const target = { by: 'key' as const, key: externalId };
    const r = await this.deps.engine.execute({ env, target, command: { kind: 'customer.create', externalId, attributes: {} }, nowMs });
    if (r.ok === true && r.reply.kind === 'customer') return r.reply.customer.id;
    if (r.ok === false && r.code !== 'already_exists') throwResult(r);
    const again = await this.deps.engine.execute({ env, target, command: { kind: 'customer.resolve' }, nowMs });
    if (again.ok === true && again.reply.kind === 'resolved') return again.reply.customerId;
    if (again.ok === false) throwResult(again);
    throw new ApiError('internal_error');
  }

  /**
   * The customer identifier of a player's event as a client would send it through POST /v1/events
   * (part of its fingerprint): the external id the report named the player by, else its customer's.
   */
  private async eventCustomerId(env: string, p: PlayerRow, nowMs: number): Promise<string> {
    if (p.customerRef.by === 'external_id') return p.customerRef.value;
    const r = await this.deps.engine.execute({ env, target: { by: 'id', id: p.customerRef.value }, command: { kind: 'customer.resolve' }, nowMs });
    if (r.ok === true && r.reply.kind === 'resolved') return r.reply.externalId ?? '';
    if (r.ok === false) throwResult(r);
    throw new ApiError('internal_error');
  }

  /**
   * Binds a player's event id to its content in the environment's register, as POST /v1/events
   * does: null once bound to this content (also by an earlier attempt of the same report), else
   * the admission error (event_id_conflict, also for an id recorded for a customer since erased;
   * or internal_error when the store failed).
   */
  private async claimEventId(env: string, id: string, fp: number): Promise<{ code: ErrorCode; message: string } | null> {
    let bound: number | ErasedEvent;
    try {
      bound = await this.deps.eventIds.claim(env, id, fp);
    } catch {
      return { code: 'internal_error', message: 'Storage is unavailable; retry.' };
    }
    // Erased: the id was recorded for the player's customer, erased since; it stays taken, as
    // an id bound to other content is (the erased customer's admission is not run again).
    if (typeof bound !== 'number') return { code: 'event_id_conflict', message: `Event ${id} belongs to an erased customer.` };
    return bound === fp ? null : { code: 'event_id_conflict', message: `Event ${id} was already received with different content.` };
  }

  /**
   * A player's event spec with the campaign budget grant its step may award from and, when the
   * step may record the event (`slotsFor`: the id its slots are held under), its shared limit
   * slots (as for POST /v1/events). A store failure is internal_error.
   */
  private async grantedEventSpec(
    env: string,
    spec: MatchEventSpec,
    properties: Record<string, unknown>,
    nowMs: number,
    slotsFor: string | null,
  ): Promise<MatchEventSpec> {
    const reserving =
      slotsFor === null ? null : reserveSharedLimits(this.deps.sharedLimits, env, slotsFor, spec.rules, { name: spec.name, properties, trust: spec.trust }, nowMs);
    if (reserving !== null) {
      try {
        const slots = await reserving;
        spec.rules = slots.rules;
        if (slots.held !== null) this.heldSlots.set(spec, slots.held);
      } catch {
        throw new ApiError('internal_error', { message: 'Storage is unavailable; retry.' });
      }
    }
    const g = grantFor(this.deps.budgets, env, spec.rules, { name: spec.name, properties }, nowMs);
    spec.rules = (g instanceof Promise ? await g : g).rules;
    return spec;
  }

  /**
   * An engine call carrying a player's event: the unused part of its budget grant and its unused
   * shared limit slots go back after the reply. Without `entered` the event's counters context is
   * read as it is sent; with it (enterWithCounters), the event already carries the context read
   * when the entry was taken, and nothing is read here (a review sends from inside its transaction).
   */
  private execute(
    env: string,
    target: { by: 'id'; id: string } | { by: 'key'; key: string },
    command: EngineCommand & { event: MatchEventSpec },
    nowMs: number,
    entered?: EventEntry,
  ): Promise<CallResult> {
    const c = this.deps.counters;
    const send = () => this.deps.engine.execute({ env, target, command, nowMs }, entered);
    // The event carries the counter definitions as they are when it enters the engine, as on
    // POST /v1/events (withCountersContext): the context read with the report may be older. When
    // they cannot be read nothing is sent, and the grant and slots go back (countersUnavailable).
    const pending =
      c === undefined || entered !== undefined
        ? send()
        : c.timeZone(env).then(
            (tz) =>
              withCountersContext(
                () => c.context(env, tz),
                (counters) => {
                  command.event.counters = counters;
                  return send();
                },
                countersUnavailable,
              ),
            () => countersUnavailable,
          );
    settleGrant(this.deps.budgets, env, command.event.rules?.budget ?? null, pending);
    settleSharedLimits(this.deps.sharedLimits, this.heldSlots.get(command.event) ?? null, pending);
    return pending;
  }

  /**
   * The environment's counters context, read with no await between the read and the entry it
   * comes with (Engine.enterEvent): the event is counted in flight from the read, as if it were
   * sent then, so a review can read it before its transaction and send from inside it without a
   * catalog load there. Hand the entry to execute, or give it back (Engine.leaveEvent).
   * Definitions that cannot be read answer 429 (nothing was taken yet).
   */
  private async enterWithCounters(env: string): Promise<{ counters: CountersContext | null; entry: EventEntry }> {
    const c = this.deps.counters;
    const engine = this.deps.engine;
    if (c === undefined) return { counters: null, entry: engine.enterEvent() };
    const tz = await c.timeZone(env).catch(() => null);
    const entered =
      tz === null
        ? null
        : await withCountersContext(
            () => c.context(env, tz),
            (counters) => Promise.resolve({ counters, entry: engine.enterEvent() }),
            null,
          );
    if (entered === null) throw new ApiError('rate_limited', { message: 'The counter definitions could not be read; retry.', retryAfterSeconds: 1 });
    return entered;
  }

  /** An event prepared by grantedEventSpec that no engine call will carry: its grant and slots go back. */
  private giveBack(env: string, event: MatchEventSpec): void {
    const notRun: Promise<CallResult> = Promise.resolve({ ok: false, code: 'invalid_state' });
    settleGrant(this.deps.budgets, env, event.rules?.budget ?? null, notRun);
    settleSharedLimits(this.deps.sharedLimits, this.heldSlots.get(event) ?? null, notRun);
  }

  /**
   * A player's rule-6 event and its properties (built once: the fingerprint and the budget grant
   * read them); `customerId` is the identifier a client would send it with (eventCustomerId).
   */
  private eventSpec(
    m: MatchRow,
    eventName: string,
    p: PlayerRow,
    context: EventContext | null,
    customerId: string,
  ): { spec: MatchEventSpec; properties: Record<string, unknown> } {
    const properties = matchEventProperties({ metrics: p.metrics, matchId: m.matchId, profileKey: m.profileKey, won: p.won });
    const spec: MatchEventSpec = {
      name: eventName,
      matchId: m.matchId,
      profileKey: m.profileKey,
      occurredAtMs: m.endedAtMs,
      metrics: p.metrics,
      won: p.won,
      fp: eventFingerprint(eventName, customerId, m.endedAtMs, properties),
      trust: 'merchant_asserted',
      source: { type: 'secret_key', id: m.reportingKeyId },
      rules: context?.rules ?? null,
      counters: context?.counters ?? null,
    };
    return { spec, properties };
  }

  // ---- reviews --------------------------------------------------------------------------------

  /**
   * A review of a held player. Serialized per player by a row lock held across the actor call, so
   * two racing decisions cannot both apply. Codes: resource_not_found, invalid_state (never held,
   * opposite decision; an admit of a player whose customer was deleted, or whose admission is still
   * unfinished), forbidden (admit while the reporting key is revoked; the player stays held),
   * event_id_conflict (admit while the player's event id is bound to other content; it stays held).
   * An admit its actor turns down (duplicate_player_after_merge: customers merged since the report
   * and another player of the match in the group was admitted; or event_refused) answers 200 with
   * the player rejected, that reason added, the review's decision still admit.
   * A player an interrupted report left pending on a held verdict first has its admission completed
   * (rule 5, as a repeat of the report would), so the review decides on its actor's verdict (rate
   * windows come before outliers). A reject needs no actor when the player has no customer left
   * (deleted: there is no rate count to release): it is recorded as decided, so the review queue
   * can always be cleared.
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
    let first = await this.records.player(env, playerId);
    if (first !== null && first.status === 'pending' && first.pendingVerdict === 'held') {
      const pendingMatch = await this.records.load(env, { id: first.matchResultId });
      if (pendingMatch !== null) await this.completePending(env, pendingMatch);
      first = await this.records.player(env, playerId);
    }
    // Every statement outside the transaction runs before it: with one connection, as in embedded
    // mode, the transaction holds it, and a statement outside (the event id's claim, a shared limit
    // slot, a budget lease, a snapshot read) would wait for it forever. So the review is checked
    // first without a lock, its event prepared (id claimed, grants taken), and checked again under
    // the lock; a concurrent review that won in between makes this one a replay or invalid_state,
    // and what it prepared is given back. The actor is brought into memory first for the same
    // reason (its call runs inside the transaction and must need no snapshot read); its answer
    // also tells a deleted customer.
    const customerGone = first?.customerId != null && (await this.customerDeleted(env, first.customerId, nowMs));
    const decideNow = async (tx: Sql, p: PlayerRow | null) => {
      if (p === null) throw new ApiError('resource_not_found', { message: `No match result player ${playerId}.`, param: 'id' });
      const m = await this.records.load(env, { id: p.matchResultId }, tx);
      if (m === null) throw new ApiError('internal_error');
      const revoked = await tx`select revoked_at from credentials where id = ${m.reportingKeyId} and revoked_at is not null`;
      const record: PlayerRecord = {
        id: p.id,
        customerId: p.customerId ?? '',
        status: p.status === 'pending' ? p.pendingVerdict : p.status,
        reasons: p.reasons,
        review: p.review,
      };
      const d = decideReview(record, { kind: 'match_player.review', decision, reason, actor, reportingKeyRevoked: revoked.length > 0 }, { nowMs });
      if (!d.ok) throw new ApiError(d.code, { param: d.param, message: d.message });
      if (!d.reply.replayed && decision === 'admit') {
        if (customerGone) throw new ApiError('invalid_state', { param: 'decision', message: customerDeletedMessage });
        if (p.status === 'pending') {
          // Its admission (the rate count) did not complete even now: it can be rejected, not admitted.
          const listed = m.admissionErrors.find((e) => e.player_id === p.id);
          throw new ApiError('invalid_state', {
            param: 'decision',
            message: `The player's admission has not completed${listed === undefined ? '' : ` (${listed.message})`}; report the match again, or reject the player.`,
          });
        }
      }
      return { p, m, d, matchRef: { id: m.id, match_id: m.matchId, status: m.status } };
    };
    const before = await decideNow(this.deps.sql, first);
    if (before.d.reply.replayed) return { player: playerWire(before.p), match_result: before.matchRef, replayed: true };
    const { p: prepared, m: pm } = before;
    // No customer to ask (deleted, or never created by an unfinished admission): only a reject
    // gets here (decideNow refuses such an admit), and it is recorded without the actor.
    let event: MatchEventSpec | null = null;
    // The event's entry in flight, taken with its counters context before the transaction (no
    // catalog load may run inside it); handed to the engine call, or given back in the finally.
    let entry: EventEntry | null = null;
    // The prepared event's grant and slots are settled once: by the engine call that carries it, or
    // given back (a replay, or any way out before that call).
    let settled = false;
    try {
      if (!customerGone && prepared.customerId !== null) {
        const { spec, properties } = this.eventSpec(pm, pm.event, prepared, rules, await this.eventCustomerId(env, prepared, nowMs));
        if (decision === 'admit') {
          // As in a report, the id is bound before the actor records the event; bound to other
          // content, the admit is refused and the player stays held (it can still be rejected).
          const refused = await this.claimEventId(env, clientEventId(pm.matchId, prepared.customerId), spec.fp);
          if (refused !== null) throw new ApiError(refused.code, { message: refused.message });
        }
        const entered = await this.enterWithCounters(env);
        entry = entered.entry;
        spec.counters = entered.counters;
        event = await this.grantedEventSpec(env, spec, properties, nowMs, decision === 'admit' ? clientEventId(pm.matchId, prepared.customerId) : null);
      }
      return await this.deps.sql.begin(async (txn) => {
        const tx = txn as unknown as Sql;
        const { p, m, d, matchRef } = await decideNow(tx, await this.records.lockPlayer(tx, env, playerId));
        if (d.reply.replayed) {
          settled = true;
          if (event !== null) this.giveBack(env, event);
          return { player: playerWire(p), match_result: matchRef, replayed: true };
        }
        // A held player's customer is set when it is reported and never changes.
        if (p.customerId !== prepared.customerId) throw new ApiError('internal_error');
        settled = true;
        const fact = d.facts[0]!;
        const r =
          event === null
            ? null
            : await this.execute(
                env,
                { by: 'id', id: p.customerId ?? '' },
                { kind: 'match.review', decision, customerId: p.customerId ?? '', profileId: m.profileId, event },
                nowMs,
                entry ?? undefined,
              );
        let next: PlayerRow;
        if (r === null || (r.ok === false && r.code === 'resource_not_found' && decision === 'reject')) {
          // The customer was deleted (also since the check above): no rate count is left to release.
          next = { ...p, status: fact.status, reasons: fact.reasons, review: fact.review, eventId: null, updatedAtMs: nowMs };
        } else {
          if (r.ok !== true) {
            if (r.ok === 'redirect') throw new ApiError('internal_error');
            if (r.code === 'resource_not_found') throw new ApiError('invalid_state', { param: 'decision', message: customerDeletedMessage });
            throwResult(r);
          }
          if (r.reply.kind !== 'match_player') throw new ApiError('internal_error');
          const v = r.reply;
          if (v.effects.length > 0) this.deps.afterEvent?.(env, v.customerId, v.effects);
          const reasons = v.status === 'rejected' && decision === 'admit' ? [...p.reasons, ...v.reasons] : fact.reasons;
          next = { ...p, status: v.status, reasons, review: fact.review, eventId: v.eventId, updatedAtMs: nowMs };
        }
        const status = await this.records.writeReview(tx, env, m.id, next, nowMs);
        return { player: playerWire(next), match_result: { ...matchRef, status }, replayed: false };
      });
    } catch (err) {
      if (!settled && event !== null) this.giveBack(env, event);
      throw err;
    } finally {
      // Left by the engine call when it was made (leaveEvent is idempotent).
      if (entry !== null) this.deps.engine.leaveEvent(entry);
    }
  }

  /** Whether a customer was deleted (its tombstone answers resource_not_found); loads its actor into memory either way. */
  private async customerDeleted(env: string, customerId: string, nowMs: number): Promise<boolean> {
    try {
      const r = await this.deps.engine.execute({ env, target: { by: 'id', id: customerId }, command: { kind: 'customer.resolve' }, nowMs });
      return r.ok === false && r.code === 'resource_not_found';
    } catch (err) {
      if (err instanceof ApiError && err.code === 'resource_not_found') return true;
      throw err;
    }
  }
}
