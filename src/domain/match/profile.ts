// Match profiles (spec 2.11): one per game mode. The wire schema (snake_case, as change-set commands
// carry it), validation of every field and bound with wire params (`metrics[2].key`), the domain
// profile (camelCase), and the profile mechanic: create, update (replaces each section it names,
// keeps the others, bumps the revision) and archive. Invariants: minimum <= maximum everywhere;
// metric keys unique and never reserved; hold metrics name metrics of the profile. Pure; never throws.
import { formatPath as formatParam } from '../../util/param-path.js';
import { z } from 'zod';
import type { ErrorCode } from '../../errors/codes.js';

/** Bounds of a profile. Spec part 8 values, plus our choices for what the spec leaves open. */
export const matchLimits = {
  metricsMin: 1,
  metricsMax: 16,
  durationSecondsMin: 1,
  durationSecondsMax: 86_400,
  playersMin: 1,
  playersMax: 100,
  rateLimitsMax: 8,
  rateWindowSecondsMin: 60,
  rateWindowSecondsMax: 86_400,
  /** Our choice: keeps a group's rate book bounded. */
  rateMaxMatchesMax: 10_000,
  /** Our choice: one hold threshold per metric at most. */
  holdMetricsMax: 16,
  profileKeyCharsMax: 64,
  metricKeyCharsMax: 64,
  eventNameCharsMax: 128,
  /** Spec 4.9 rule 3. */
  endedAtFutureSkewMs: 5 * 60_000,
  endedAtMaxAgeMs: 7 * 24 * 3_600_000,
  matchIdCharsMax: 200,
} as const;

export const defaultMatchEvent = 'match.completed';
/** Event property names the admission adds itself (spec 4.9 rule 6). */
export const reservedMetricKeys = ['match_id', 'match_profile', 'won'] as const;

export type OutlierAction = 'hold' | 'reject';

export interface MetricSpec {
  key: string;
  minimum: number;
  maximum: number;
  /** Caps value / match minutes; null when not set. */
  perMinuteMaximum: number | null;
}
export interface RateLimit {
  windowSeconds: number;
  maxMatches: number;
}
export interface HoldMetric {
  key: string;
  above: number;
}
export interface Outliers {
  action: OutlierAction;
  holdMetrics: HoldMetric[];
}

/** The checkable part of a profile: everything admission reads. */
export interface ProfileSections {
  event: string;
  metrics: MetricSpec[];
  duration: { minimumSeconds: number; maximumSeconds: number };
  players: { minimum: number; maximum: number };
  rateLimits: RateLimit[];
  /** null: no outlier checks. */
  outliers: Outliers | null;
}

export type ProfileStatus = 'active' | 'archived';

export interface MatchProfile extends ProfileSections {
  id: string;
  key: string;
  /** The spec's profile `version`: 1 on create, +1 on every update and on archive. */
  revision: number;
  status: ProfileStatus;
  createdAtMs: number;
  updatedAtMs: number;
  archivedAtMs: number | null;
}

export interface IssueDetail {
  param: string;
  message: string;
}

export type ProfileValidation<T> =
  | { ok: true; value: T }
  | { ok: false; code: 'validation_failed'; param: string; message: string; details: IssueDetail[] };

// ---------------------------------------------------------------------------------------------
// Wire schema (the body of match_profile.create; update takes the same sections, each optional)

const profileKeyPattern = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;
/** Profile ids are `mpf_...`; a key may not start so (see profileCreateSchema). */
export const profileIdPrefix = 'mpf';
const metricKeyPattern = /^[A-Za-z][A-Za-z0-9_]*$/;
// Same shape as event names everywhere else (dotted snake_case).
const eventNamePattern = /^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$/;

const finite = (what: string) =>
  z.number({ error: `${what} must be a finite number.` }).refine(Number.isFinite, { message: `${what} must be a finite number.` });

const intIn = (what: string, min: number, max: number) => {
  const message = `${what} must be an integer from ${min} to ${max}.`;
  return z
    .number({ error: message })
    .refine((n) => Number.isSafeInteger(n) && n >= min && n <= max, { message })
    .meta({ type: 'integer', minimum: min, maximum: max });
};

const eventSchema = z
  .string({ error: 'event must be an event name (string).' })
  .min(1, 'event must not be empty.')
  .max(matchLimits.eventNameCharsMax, `event has at most ${matchLimits.eventNameCharsMax} characters.`)
  .regex(eventNamePattern, 'event uses dotted snake_case, e.g. match.completed.');

const metricSchema = z
  .strictObject(
    {
      key: z
        .string({ error: 'A metric key (string) is required.' })
        .min(1, 'A metric key must not be empty.')
        .max(matchLimits.metricKeyCharsMax, `A metric key has at most ${matchLimits.metricKeyCharsMax} characters.`)
        .regex(metricKeyPattern, 'A metric key starts with a letter and holds only letters, digits and _.')
        .refine((k) => !(reservedMetricKeys as readonly string[]).includes(k), {
          message: `Metric keys ${reservedMetricKeys.join(', ')} are reserved.`,
        }),
      minimum: finite('minimum'),
      maximum: finite('maximum'),
      per_minute_maximum: finite('per_minute_maximum')
        .refine((n) => n >= 0, { message: 'per_minute_maximum must not be negative.' })
        .nullable()
        .optional(),
    },
    { error: 'A metric is {key, minimum, maximum, per_minute_maximum?}.' },
  )
  .superRefine((m, ctx) => {
    if (Number.isFinite(m.minimum) && Number.isFinite(m.maximum) && m.minimum > m.maximum) {
      ctx.addIssue({ code: 'custom', message: 'minimum must not exceed maximum.', path: ['minimum'] });
    }
  });

const metricsSchema = z
  .array(metricSchema, { error: 'metrics is an array of {key, minimum, maximum, per_minute_maximum?}.' })
  .min(matchLimits.metricsMin, 'A profile needs at least one metric.')
  .max(matchLimits.metricsMax, `A profile has at most ${matchLimits.metricsMax} metrics.`)
  .superRefine((ms, ctx) => {
    const seen = new Set<string>();
    ms.forEach((m, i) => {
      if (typeof m?.key !== 'string') return;
      if (seen.has(m.key)) ctx.addIssue({ code: 'custom', message: `Duplicate metric key '${m.key}'.`, path: [i, 'key'] });
      seen.add(m.key);
    });
  });

const durationSchema = z
  .strictObject(
    {
      minimum_seconds: intIn('minimum_seconds', matchLimits.durationSecondsMin, matchLimits.durationSecondsMax),
      maximum_seconds: intIn('maximum_seconds', matchLimits.durationSecondsMin, matchLimits.durationSecondsMax),
    },
    { error: 'duration is {minimum_seconds, maximum_seconds}.' },
  )
  .superRefine((d, ctx) => {
    if (d.minimum_seconds > d.maximum_seconds) {
      ctx.addIssue({ code: 'custom', message: 'minimum_seconds must not exceed maximum_seconds.', path: ['minimum_seconds'] });
    }
  });

const playersSchema = z
  .strictObject(
    {
      minimum: intIn('minimum', matchLimits.playersMin, matchLimits.playersMax),
      maximum: intIn('maximum', matchLimits.playersMin, matchLimits.playersMax),
    },
    { error: 'players is {minimum, maximum}.' },
  )
  .superRefine((p, ctx) => {
    if (p.minimum > p.maximum) ctx.addIssue({ code: 'custom', message: 'minimum must not exceed maximum.', path: ['minimum'] });
  });

const rateLimitsSchema = z
  .array(
    z.strictObject(
      {
        window_seconds: intIn('window_seconds', matchLimits.rateWindowSecondsMin, matchLimits.rateWindowSecondsMax),
        max_matches: intIn('max_matches', 1, matchLimits.rateMaxMatchesMax),
      },
      { error: 'A rate limit is {window_seconds, max_matches}.' },
    ),
    { error: 'rate_limits is an array of {window_seconds, max_matches}.' },
  )
  .max(matchLimits.rateLimitsMax, `A profile has at most ${matchLimits.rateLimitsMax} rate limits.`)
  .superRefine((ls, ctx) => {
    const seen = new Set<number>();
    ls.forEach((l, i) => {
      if (typeof l?.window_seconds !== 'number') return;
      if (seen.has(l.window_seconds)) {
        ctx.addIssue({ code: 'custom', message: `Two rate limits share window_seconds ${l.window_seconds}.`, path: [i, 'window_seconds'] });
      }
      seen.add(l.window_seconds);
    });
  });

const outliersSchema = z
  .strictObject(
    {
      action: z.enum(['hold', 'reject'], { error: "outliers.action is 'hold' or 'reject'." }),
      hold_metrics: z
        .array(
          z.strictObject(
            { key: z.string({ error: 'A hold metric names a metric key (string).' }), above: finite('above') },
            { error: 'A hold metric is {key, above}.' },
          ),
          { error: 'hold_metrics is an array of {key, above}.' },
        )
        .max(matchLimits.holdMetricsMax, `At most ${matchLimits.holdMetricsMax} hold metrics.`)
        .superRefine((hs, ctx) => {
          const seen = new Set<string>();
          hs.forEach((h, i) => {
            if (typeof h?.key !== 'string') return;
            if (seen.has(h.key)) ctx.addIssue({ code: 'custom', message: `Duplicate hold metric '${h.key}'.`, path: [i, 'key'] });
            seen.add(h.key);
          });
        }),
    },
    { error: 'outliers is {action, hold_metrics}.' },
  )
  .nullable();

const sectionShapes = {
  event: eventSchema,
  metrics: metricsSchema,
  duration: durationSchema,
  players: playersSchema,
  rate_limits: rateLimitsSchema,
  outliers: outliersSchema,
};

const profileKeySchema = z
  .string({ error: 'key (string) is required.' })
  .min(1, 'key must not be empty.')
  .max(matchLimits.profileKeyCharsMax, `key has at most ${matchLimits.profileKeyCharsMax} characters.`)
  .regex(profileKeyPattern, 'key holds letters, digits, _, . and -, starting with a letter or digit.');

/**
 * The body of `match_profile.create` (command fields minus `type`). Defaults: event
 * `match.completed`, duration 1..86400 s, players 1..100, no rate limits, no outlier checks.
 */
export const profileCreateSchema = z.strictObject({
  // A key never looks like a profile id: GET /match_profiles/{id} takes either, so `mpf_...` is refused.
  key: profileKeySchema.refine((k) => !k.startsWith(`${profileIdPrefix}_`), `key must not start with ${profileIdPrefix}_ (the prefix of profile ids).`),
  event: eventSchema.optional(),
  metrics: metricsSchema,
  duration: durationSchema.optional(),
  players: playersSchema.optional(),
  rate_limits: rateLimitsSchema.optional(),
  outliers: outliersSchema.optional(),
});

/** The body of `match_profile.update` (minus `type` and `expected_version`): any subset of the sections. */
export const profileUpdateSchema = z.strictObject({
  key: profileKeySchema.optional(),
  event: sectionShapes.event.optional(),
  metrics: sectionShapes.metrics.optional(),
  duration: sectionShapes.duration.optional(),
  players: sectionShapes.players.optional(),
  rate_limits: sectionShapes.rate_limits.optional(),
  outliers: sectionShapes.outliers.optional(),
});

export type ProfileCreateBody = z.infer<typeof profileCreateSchema>;
export type ProfileUpdateBody = z.infer<typeof profileUpdateSchema>;

/** A parsed create body, camelCase, with defaults filled in. */
export interface ProfileDraft extends ProfileSections {
  key: string;
}

/** A parsed update: the sections it names (absent ones are kept). */
export type ProfileUpdate = Partial<ProfileSections>;

// ---------------------------------------------------------------------------------------------
// Validation



export function issuesFromZod(issues: readonly z.core.$ZodIssue[], rootName = 'body'): IssueDetail[] {
  const out: IssueDetail[] = [];
  for (const issue of issues) {
    if (issue.code === 'unrecognized_keys') {
      for (const k of issue.keys) out.push({ param: formatParam([...issue.path, k]), message: 'Unknown field.' });
      continue;
    }
    let message = issue.message;
    if (issue.code === 'invalid_type' && message.endsWith('received undefined')) message = `Required (expected ${issue.expected}).`;
    out.push({ param: formatParam(issue.path) || rootName, message });
  }
  return out;
}

export function failed<T>(details: IssueDetail[]): ProfileValidation<T> {
  const first = details[0] ?? { param: 'body', message: 'Invalid input.' };
  return { ok: false, code: 'validation_failed', param: first.param, message: `${first.param}: ${first.message}`, details };
}

type WireSections = {
  event?: string | undefined;
  metrics?: z.infer<typeof metricsSchema> | undefined;
  duration?: z.infer<typeof durationSchema> | undefined;
  players?: z.infer<typeof playersSchema> | undefined;
  rate_limits?: z.infer<typeof rateLimitsSchema> | undefined;
  outliers?: z.infer<typeof outliersSchema> | undefined;
};

function toSections(w: WireSections): Partial<ProfileSections> {
  const out: Partial<ProfileSections> = {};
  if (w.event !== undefined) out.event = w.event;
  if (w.metrics !== undefined) {
    out.metrics = w.metrics.map((m) => ({
      key: m.key,
      minimum: m.minimum,
      maximum: m.maximum,
      perMinuteMaximum: m.per_minute_maximum ?? null,
    }));
  }
  if (w.duration !== undefined) out.duration = { minimumSeconds: w.duration.minimum_seconds, maximumSeconds: w.duration.maximum_seconds };
  if (w.players !== undefined) out.players = { minimum: w.players.minimum, maximum: w.players.maximum };
  if (w.rate_limits !== undefined) out.rateLimits = w.rate_limits.map((l) => ({ windowSeconds: l.window_seconds, maxMatches: l.max_matches }));
  if (w.outliers !== undefined) {
    out.outliers =
      w.outliers === null
        ? null
        : { action: w.outliers.action, holdMetrics: w.outliers.hold_metrics.map((h) => ({ key: h.key, above: h.above })) };
  }
  return out;
}

/** The cross-section rule: every hold metric names a metric of the profile. */
function crossCheck(s: ProfileSections): IssueDetail[] {
  const out: IssueDetail[] = [];
  const keys = new Set(s.metrics.map((m) => m.key));
  s.outliers?.holdMetrics.forEach((h, i) => {
    if (!keys.has(h.key)) out.push({ param: `outliers.hold_metrics[${i}].key`, message: `'${h.key}' is not a metric of the profile.` });
  });
  return out;
}

export const defaultSections: Omit<ProfileSections, 'metrics'> = {
  event: defaultMatchEvent,
  duration: { minimumSeconds: matchLimits.durationSecondsMin, maximumSeconds: matchLimits.durationSecondsMax },
  players: { minimum: matchLimits.playersMin, maximum: matchLimits.playersMax },
  rateLimits: [],
  outliers: null,
};

/** Validates a create body; every problem is listed in details, the first one is `param`. */
export function validateProfileCreate(body: unknown): ProfileValidation<ProfileDraft> {
  const r = profileCreateSchema.safeParse(body);
  if (!r.success) return failed(issuesFromZod(r.error.issues));
  const s = toSections(r.data);
  const draft: ProfileDraft = { key: r.data.key, ...defaultSections, ...s, metrics: s.metrics ?? [] };
  const cross = crossCheck(draft);
  return cross.length > 0 ? failed(cross) : { ok: true, value: draft };
}

/** Validates an update body on its own (shapes and bounds of the sections it names). */
export function validateProfileUpdate(body: unknown): ProfileValidation<ProfileUpdate> {
  const r = profileUpdateSchema.safeParse(body);
  if (!r.success) return failed(issuesFromZod(r.error.issues));
  const { key: _key, ...sections } = r.data;
  return { ok: true, value: toSections(sections) };
}

/**
 * The profile after an update: each section the update names replaces the profile's, the others
 * are kept, and the revision goes up by one. Cross-section rules are checked on the result
 * (removing a metric a hold threshold names fails on `outliers.hold_metrics[i].key`).
 */
export function applyUpdate(profile: MatchProfile, update: ProfileUpdate, atMs: number): ProfileValidation<MatchProfile> {
  const next: MatchProfile = {
    ...profile,
    revision: profile.revision + 1,
    updatedAtMs: atMs,
    event: update.event ?? profile.event,
    metrics: update.metrics ?? profile.metrics,
    duration: update.duration ?? profile.duration,
    players: update.players ?? profile.players,
    rateLimits: update.rateLimits ?? profile.rateLimits,
    outliers: update.outliers !== undefined ? update.outliers : profile.outliers,
  };
  const cross = crossCheck(next);
  return cross.length > 0 ? failed(cross) : { ok: true, value: next };
}

/** The profile as the API shows it (snake_case, RFC 3339 left to the gateway: times stay ms). */
export function profileToWire(p: MatchProfile) {
  return {
    id: p.id,
    key: p.key,
    event: p.event,
    metrics: p.metrics.map((m) => ({
      key: m.key,
      minimum: m.minimum,
      maximum: m.maximum,
      ...(m.perMinuteMaximum !== null ? { per_minute_maximum: m.perMinuteMaximum } : {}),
    })),
    duration: { minimum_seconds: p.duration.minimumSeconds, maximum_seconds: p.duration.maximumSeconds },
    players: { minimum: p.players.minimum, maximum: p.players.maximum },
    rate_limits: p.rateLimits.map((l) => ({ window_seconds: l.windowSeconds, max_matches: l.maxMatches })),
    outliers: p.outliers === null ? null : { action: p.outliers.action, hold_metrics: p.outliers.holdMetrics.map((h) => ({ ...h })) },
    version: p.revision,
    status: p.status,
    createdAtMs: p.createdAtMs,
    updatedAtMs: p.updatedAtMs,
    archivedAtMs: p.archivedAtMs,
  };
}

// ---------------------------------------------------------------------------------------------
// The profile mechanic (the change-set applier calls it once per command, in command order)

export interface ProfileCtx {
  nowMs: number;
  newId(prefix: string): string;
}

export type ProfileCommand =
  | { kind: 'match_profile.create'; body: unknown }
  | { kind: 'match_profile.update'; body: unknown; expectedVersion: number | null }
  | { kind: 'match_profile.archive'; expectedVersion: number | null };

/** Facts carry the whole resulting profile, so evolve and projections need nothing else. */
export type ProfileFact =
  | { kind: 'match_profile.created'; profile: MatchProfile }
  | { kind: 'match_profile.updated'; profile: MatchProfile }
  | { kind: 'match_profile.archived'; revision: number; atMs: number };

export type ProfileDecision =
  | { ok: true; facts: ProfileFact[]; profile: MatchProfile }
  | { ok: false; code: ErrorCode; param?: string; message: string; details?: IssueDetail[]; currentVersion?: number };

/**
 * `state` is the profile stored under the command's key (null when none). Codes:
 * validation_failed (param names the field), already_exists (create over an existing key),
 * resource_not_found, stale_write (expected_version differs; currentVersion is the stored one), invalid_state (update of an archived
 * profile). Archiving an archived profile answers it again with no facts.
 */
export function decideProfile(state: MatchProfile | null, cmd: ProfileCommand, ctx: ProfileCtx): ProfileDecision {
  if (cmd.kind === 'match_profile.create') {
    const v = validateProfileCreate(cmd.body);
    if (!v.ok) return v;
    if (state !== null) return { ok: false, code: 'already_exists', param: 'key', message: `A match profile with key '${state.key}' exists.` };
    const profile: MatchProfile = {
      id: ctx.newId(profileIdPrefix),
      ...v.value,
      revision: 1,
      status: 'active',
      createdAtMs: ctx.nowMs,
      updatedAtMs: ctx.nowMs,
      archivedAtMs: null,
    };
    return { ok: true, facts: [{ kind: 'match_profile.created', profile }], profile };
  }
  if (state === null) return { ok: false, code: 'resource_not_found', param: 'key', message: 'No match profile with this key.' };
  if (cmd.expectedVersion !== null && cmd.expectedVersion !== state.revision) {
    return { ok: false, code: 'stale_write', param: 'expected_version', message: `The match profile is at version ${state.revision}.`, currentVersion: state.revision };
  }
  if (cmd.kind === 'match_profile.archive') {
    if (state.status === 'archived') return { ok: true, facts: [], profile: state };
    const fact: ProfileFact = { kind: 'match_profile.archived', revision: state.revision + 1, atMs: ctx.nowMs };
    return { ok: true, facts: [fact], profile: evolveProfile(state, fact) ?? state };
  }
  const u = validateProfileUpdate(cmd.body);
  if (!u.ok) return u;
  if (state.status === 'archived') return { ok: false, code: 'invalid_state', message: 'The match profile is archived.' };
  const merged = applyUpdate(state, u.value, ctx.nowMs);
  if (!merged.ok) return merged;
  const profile = merged.value;
  return { ok: true, facts: [{ kind: 'match_profile.updated', profile }], profile };
}

export function evolveProfile(state: MatchProfile | null, fact: ProfileFact): MatchProfile | null {
  switch (fact.kind) {
    case 'match_profile.created':
    case 'match_profile.updated':
      return fact.profile;
    case 'match_profile.archived':
      return state === null
        ? null
        : { ...state, status: 'archived', revision: fact.revision, updatedAtMs: fact.atMs, archivedAtMs: fact.atMs };
  }
}

export { formatParam };
