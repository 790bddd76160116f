// Match reports (spec 4.9 rules 1-4): the wire body's shape, then the checks that answer
// validation_failed before any verdict: 1 to 100 players, each once; exactly the profile's metrics,
// finite numbers; ended_at within 5 minutes ahead / 7 days old of ctx.nowMs. The order of
// started_at and ended_at is not checked here: a zero or negative duration is a stored result,
// rejected for everyone by the profile's duration bounds (duration_out_of_bounds, spec 2.12).
// The fingerprint decides rule 4 (identical repeat = replay, any other body = idempotency_key_reused).
// Pure: now comes from the caller; never throws.
import { z } from 'zod';
import { canonicalJson, hash53Pair } from '../../util/canonical-json.js';
import { failed, formatParam, type IssueDetail, issuesFromZod, matchLimits, type ProfileSections, type ProfileValidation } from './profile.js';

/** How a report names a player: the caller's external id (created when unknown) or a `cust_` id. */
export type CustomerRef = { by: 'external_id'; value: string } | { by: 'id'; value: string };

export interface ReportPlayer {
  customer: CustomerRef;
  metrics: Record<string, number>;
  /** null when the report did not say. */
  won: boolean | null;
}

export interface MatchReport {
  profileKey: string;
  matchId: string;
  startedAtMs: number;
  endedAtMs: number;
  /**
   * (ended_at - started_at) in seconds, fractional when the timestamps carry milliseconds; negative
   * when started_at is after ended_at (the duration bounds reject it).
   */
  durationSeconds: number;
  players: ReportPlayer[];
}

const matchIdPattern = /^[A-Za-z0-9_.:-]+$/;

const customerRefSchema = z.union(
  [
    z.strictObject({ external_id: z.string().min(1).max(255) }),
    z.strictObject({ id: z.string().min(1).max(255) }),
  ],
  { error: 'customer is {external_id} or {id}.' },
);

const playerSchema = z.strictObject(
  {
    customer: customerRefSchema,
    // Values are checked against the profile's metrics (checkReportMetrics); OpenAPI says what they are.
    metrics: z.record(z.string(), z.unknown().meta({ type: 'number' }), { error: 'metrics is a map of metric key to number.' }).describe(
      "Every metric of the profile, and only those, by key: a finite number.",
    ),
    won: z.boolean({ error: 'won must be a boolean.' }).nullable().optional(),
  },
  { error: 'A player is {customer, metrics, won?}.' },
);

const timestamp = (what: string) => z.iso.datetime({ offset: true, error: `${what} must be an RFC 3339 timestamp.` });

/** The body of POST /match_results. Rule 1's count is part of the shape. */
export const reportBodySchema = z.strictObject({
  profile: z.string({ error: 'profile (a match profile key) is required.' }).min(1, 'profile must not be empty.'),
  match_id: z
    .string({ error: 'match_id (string) is required.' })
    .min(1, 'match_id must not be empty.')
    .max(matchLimits.matchIdCharsMax, `match_id has at most ${matchLimits.matchIdCharsMax} characters.`)
    .regex(matchIdPattern, 'match_id holds letters, digits, _, ., : and -.'),
  started_at: timestamp('started_at'),
  ended_at: timestamp('ended_at'),
  players: z
    .array(playerSchema, { error: 'players is an array of {customer, metrics, won?}.' })
    .min(matchLimits.playersMin, 'A report names at least one player.')
    .max(matchLimits.playersMax, `A report names at most ${matchLimits.playersMax} players.`),
});

export type ReportBody = z.infer<typeof reportBodySchema>;

function refKey(r: CustomerRef): string {
  return `${r.by}:${r.value}`;
}

/**
 * Shape, rule 1 (count, each player once by customer reference) and rule 3 (the ended_at window).
 * started_at may be at or after ended_at: a zero or negative duration is left to the profile's
 * duration bounds (spec 4.9 lists no such rule; 2.12 gives duration_out_of_bounds).
 * Metrics are only checked to be a map here; checkReportMetrics compares them with the profile
 * once the caller has loaded it by `profileKey`. `window: false` skips the ended_at window: a
 * repeat of a stored match is answered from the record however long ago it ended (rule 4 first).
 */
export function parseReport(body: unknown, nowMs: number, options: { window?: boolean } = {}): ProfileValidation<MatchReport> {
  const r = reportBodySchema.safeParse(body);
  if (!r.success) return failed(issuesFromZod(r.error.issues));
  const b = r.data;
  const issues: IssueDetail[] = [];
  const startedAtMs = Date.parse(b.started_at);
  const endedAtMs = Date.parse(b.ended_at);
  if (options.window === false) {
    // A repeat: checked against its stored record instead.
  } else if (endedAtMs > nowMs + matchLimits.endedAtFutureSkewMs) {
    issues.push({ param: 'ended_at', message: 'ended_at is more than 5 minutes ahead of the server clock.' });
  } else if (endedAtMs < nowMs - matchLimits.endedAtMaxAgeMs) {
    issues.push({ param: 'ended_at', message: 'ended_at is more than 7 days old.' });
  }

  const seen = new Map<string, number>();
  const players: ReportPlayer[] = b.players.map((p, i) => {
    const customer: CustomerRef = 'external_id' in p.customer ? { by: 'external_id', value: p.customer.external_id } : { by: 'id', value: p.customer.id };
    const k = refKey(customer);
    const first = seen.get(k);
    if (first !== undefined) issues.push({ param: `players[${i}]`, message: `The same customer as players[${first}]; each player appears once.` });
    else seen.set(k, i);
    return { customer, metrics: p.metrics as Record<string, number>, won: p.won ?? null };
  });
  if (issues.length > 0) return failed(issues);
  return {
    ok: true,
    value: {
      profileKey: b.profile,
      matchId: b.match_id,
      startedAtMs,
      endedAtMs,
      durationSeconds: (endedAtMs - startedAtMs) / 1000,
      players,
    },
  };
}

/** Rule 1: every player carries exactly the profile's metrics, each a finite number. */
export function checkReportMetrics(report: MatchReport, profile: Pick<ProfileSections, 'metrics'>): ProfileValidation<MatchReport> {
  const issues: IssueDetail[] = [];
  const keys = new Set(profile.metrics.map((m) => m.key));
  report.players.forEach((p, i) => {
    const at = (k: string) => formatParam(['players', i, 'metrics', k]);
    for (const m of profile.metrics) {
      if (!Object.hasOwn(p.metrics, m.key)) issues.push({ param: at(m.key), message: `Required: the profile's metric '${m.key}'.` });
      else {
        const v: unknown = p.metrics[m.key];
        if (typeof v !== 'number' || !Number.isFinite(v)) issues.push({ param: at(m.key), message: 'A metric is a finite number.' });
      }
    }
    for (const k of Object.keys(p.metrics)) {
      if (!keys.has(k)) issues.push({ param: at(k), message: `'${k}' is not a metric of the profile.` });
    }
  });
  return issues.length > 0 ? failed(issues) : { ok: true, value: report };
}

/** parseReport then checkReportMetrics, for callers that already hold the profile. */
export function validateReport(body: unknown, profile: Pick<ProfileSections, 'metrics'>, nowMs: number): ProfileValidation<MatchReport> {
  const parsed = parseReport(body, nowMs);
  return parsed.ok ? checkReportMetrics(parsed.value, profile) : parsed;
}

/**
 * Rule 1 after the caller resolved each player's reference to a customer id (an external_id and a
 * `cust_` id, or two aliases, may name the same customer): the second occurrence is named.
 */
export function checkResolvedPlayers(customerIds: readonly string[]): ProfileValidation<readonly string[]> {
  const seen = new Map<string, number>();
  const issues: IssueDetail[] = [];
  customerIds.forEach((id, i) => {
    const first = seen.get(id);
    if (first !== undefined) issues.push({ param: `players[${i}]`, message: `The same customer as players[${first}]; each player appears once.` });
    else seen.set(id, i);
  });
  return issues.length > 0 ? failed(issues) : { ok: true, value: customerIds };
}

/**
 * Rule 4's content fingerprint (106 bits, as hex): profile, match_id, both instants, and per
 * player the reference, metrics and won. Key order, timestamp spelling (`Z` vs `+00:00`,
 * `.000`) and the order of players do not change it (players are a set: each appears once);
 * any other difference, a different `won` included, does.
 */
export function reportFingerprint(report: MatchReport): string {
  const players = report.players
    .map((p) => [refKey(p.customer), p.metrics, p.won] as const)
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const text = canonicalJson([report.profileKey, report.matchId, report.startedAtMs, report.endedAtMs, players]);
  const [a, b] = hash53Pair(text, 1, 2);
  return a.toString(16).padStart(14, '0') + b.toString(16).padStart(14, '0');
}

export type RepeatVerdict = { ok: true; replay: true } | { ok: false; code: 'idempotency_key_reused'; param: 'match_id'; message: string };

/** Rule 4: a report whose match_id is already stored is a replay when the body is identical. */
export function compareRepeat(storedFingerprint: string, report: MatchReport): RepeatVerdict {
  if (reportFingerprint(report) === storedFingerprint) return { ok: true, replay: true };
  return {
    ok: false,
    code: 'idempotency_key_reused',
    param: 'match_id',
    message: `Match ${report.matchId} was already reported with a different body.`,
  };
}
