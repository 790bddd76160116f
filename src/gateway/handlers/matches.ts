// Change sets, environment settings (autonomy), match profiles, match results and reviews
// (spec 2.11, 2.12, 3, 4.8, 4.9; decisions.md "Change sets"). Thin: the stores in src/matches do
// the work; this file is auth, shapes and wire mapping.
import { z } from 'zod';
import { commandDocSchema, type EnvironmentSettings, type MatchProfileStore, profileToWire, testAutonomyMessage } from '../../matches/change-sets.js';
import type { MatchResults } from '../../matches/results.js';
import { matchWire } from '../../matches/results.js';
import { reportBodySchema } from '../../domain/match/report.js';
import { reviewBodySchema } from '../../domain/match/verdict.js';
import type { MatchProfile } from '../../domain/match/profile.js';
import type { ChangeSetRecord } from '../../matches/change-sets.js';
import { ApiError } from '../../errors/api-error.js';
import { etagHeader, expectedVersion } from '../etag.js';
import { pageQuerySchema, pageRequest, toPage } from '../pagination.js';
import { type AnyRoute, type AuthSpec, environmentIdOf, type RequestContext, route } from '../route.js';
import { validate } from '../validation.js';
import { iso } from '../wire.js';
import { changeSetApplicationSchema, changeSetSchema, matchProfileSchema, matchResultSchema, matchReviewSchema, pageOf } from '../wire-schemas.js';
import type { Principal, Role } from '../../tenancy/types.js';
import { isRecord } from '../../util/is-record.js';

export interface MatchDeps {
  profiles: MatchProfileStore;
  results: MatchResults;
  nowMs(environmentId: string): number | Promise<number>;
  /** The role the user holds now in the organization (read from the database), null when none. */
  roleNow(organizationId: string, userId: string): Promise<Role | null>;
}

const changeSetsMax = 100;

const changeSetBody = z.strictObject({
  commands: z
    .array(commandDocSchema)
    .min(1)
    .max(changeSetsMax)
    .describe(`1 to ${changeSetsMax} commands, each {type, key, expected_version?, ...fields}.`),
});
const applicationBody = z.strictObject({ change_set_id: z.string().min(1).max(64) });
const settingsBody = z.strictObject({
  autonomy: z.enum(['auto', 'limits']).describe('Live environments: auto applies every change set on request; limits holds destructive ones until a signed-in owner or admin confirms them.'),
});
const settingsSchema = z.strictObject({
  environment_id: z.string(),
  runtime_class: z.enum(['test', 'live']),
  autonomy: z.enum(['auto', 'limits']).describe('In effect: always auto in a test environment.'),
  version: z.number().int().min(1).describe('The settings version; the ETag is "<version>".'),
});
const matchListQuery = pageQuerySchema.extend({
  status: z.enum(['held', 'admitted', 'rejected', 'partially_admitted']).optional(),
});

export function matchProfileWire(p: MatchProfile) {
  const { createdAtMs, updatedAtMs, archivedAtMs, ...rest } = profileToWire(p);
  return { ...rest, archived_at: iso(archivedAtMs), created_at: iso(createdAtMs), updated_at: iso(updatedAtMs) };
}

function settingsWire(environmentId: string, a: EnvironmentSettings): z.infer<typeof settingsSchema> {
  return { environment_id: environmentId, runtime_class: a.runtimeClass, autonomy: a.autonomy, version: a.version };
}

export function changeSetWire(cs: ChangeSetRecord) {
  return {
    id: cs.id,
    status: cs.status,
    commands: cs.commands,
    results: cs.results,
    revision: cs.revision,
    confirmed_by: cs.confirmedBy,
    applied_at: iso(cs.appliedAtMs),
    created_at: iso(cs.createdAtMs),
    updated_at: iso(cs.updatedAtMs),
  };
}

function applicationWire(cs: ChangeSetRecord, awaiting: boolean) {
  return { change_set_id: cs.id, status: awaiting ? 'awaiting_confirmation' : 'applied', results: awaiting ? [] : (cs.results ?? []) };
}

const management = ['secret', 'pat', 'session'] as const;
const configWrite: AuthSpec = { kind: 'credential', scopes: ['config:write'], allow: [...management] };
const configRead: AuthSpec = { kind: 'credential', scopes: ['config:read'], allow: [...management] };
const programsRead: AuthSpec = { kind: 'credential', scopes: ['programs:read'], allow: [...management] };

/**
 * Confirmations and the autonomy setting: a signed-in owner or admin (decisions.md roles), by the
 * role held now, not the one cached with the credential (a removed admin must not confirm for 60 s).
 */
async function requireOwnerOrAdmin(deps: MatchDeps, p: Principal): Promise<void> {
  const forbidden = () => new ApiError('forbidden', { message: 'Only a signed-in owner or admin may do this.' });
  if ((p.kind !== 'pat' && p.kind !== 'session') || p.userId === null || p.environment === null) throw forbidden();
  const role = await deps.roleNow(p.environment.organizationId, p.userId);
  if (role === null) throw new ApiError('resource_not_found', { message: 'No environment with this id in an organization you belong to.' });
  if (role !== 'owner' && role !== 'admin') throw forbidden();
}

function actorOf(p: Principal): string {
  return p.userId ?? p.credentialId;
}

export function matchRoutes(deps: MatchDeps): AnyRoute[] {
  return [
    // ---- change sets -----------------------------------------------------------------------------
    route({
      method: 'POST',
      path: '/v1/change_sets',
      summary: 'Store a change set after validating every command (match_profile.create | update | archive); an invalid command is named by index',
      tag: 'Change sets',
      auth: configWrite,
      docBody: changeSetBody,
      idempotent: true,
      responses: { 201: { description: 'The change set, pending.', schema: changeSetSchema } },
      handler: async (ctx: RequestContext) => {
        const env = environmentIdOf(ctx.principal);
        const b = ctx.body as Record<string, unknown> | null;
        if (b === null || typeof b !== 'object' || Array.isArray(b)) throw new ApiError('validation_failed', { param: 'commands', message: 'The body is {commands: [...]}.' });
        const extra = Object.keys(b).filter((k) => k !== 'commands');
        if (extra.length > 0) throw new ApiError('validation_failed', { param: extra[0], message: `${extra[0]}: Unknown field.` });
        const commands = b.commands;
        if (!Array.isArray(commands) || commands.length === 0 || commands.length > changeSetsMax) {
          throw new ApiError('validation_failed', { param: 'commands', message: `commands holds 1 to ${changeSetsMax} commands.` });
        }
        const cs = await deps.profiles.createChangeSet(env, commands, actorOf(ctx.principal), await deps.nowMs(env), ctx.callId);
        return { status: 201, body: changeSetWire(cs) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/change_sets/:id',
      summary: 'Read a change set (status pending, awaiting_confirmation or applied; results once applied)',
      tag: 'Change sets',
      auth: configRead,
      responses: { 200: { description: 'The change set.', schema: changeSetSchema } },
      handler: async (ctx: RequestContext) => {
        const cs = await deps.profiles.getChangeSet(environmentIdOf(ctx.principal), ctx.params.id ?? '').catch((e: unknown) => {
          if (e instanceof ApiError && e.code === 'resource_not_found') throw new ApiError('resource_not_found', { message: e.message, param: 'id' });
          throw e;
        });
        return { status: 200, body: changeSetWire(cs) };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/change_set_applications',
      summary:
        'Apply a change set atomically (one transaction). A live environment under autonomy limits answers 202 awaiting_confirmation for a set with a destructive command',
      tag: 'Change sets',
      auth: configWrite,
      body: applicationBody,
      idempotent: true,
      responses: {
        201: { description: 'Applied: status applied, one result per command.', schema: changeSetApplicationSchema },
        202: {
          description: 'Held: status awaiting_confirmation, results []; POST /v1/change_sets/{id}/confirm (a signed-in owner or admin) applies it.',
          schema: changeSetApplicationSchema,
        },
      },
      handler: async (ctx: RequestContext<z.infer<typeof applicationBody>>) => {
        const env = environmentIdOf(ctx.principal);
        const r = await deps.profiles.apply(env, ctx.body.change_set_id, 'apply', actorOf(ctx.principal), await deps.nowMs(env), ctx.callId);
        return { status: r.awaiting ? 202 : 201, body: applicationWire(r.changeSet, r.awaiting) };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/change_sets/:id/confirm',
      summary:
        'Confirm and apply a change set awaiting confirmation: a signed-in owner or admin, with the session token of POST /v1/auth/sessions (a personal access token or a secret key is 403 forbidden, so a client that applies sets cannot confirm them itself). Like /change_set_applications it needs an Idempotency-Key, and a retry with the same key replays the answer',
      tag: 'Change sets',
      auth: { kind: 'credential', scopes: ['config:write'], allow: ['session'] },
      // Confirming applies the set, as /change_set_applications does: a retried confirm gets the result, not invalid_state.
      idempotent: true,
      responses: { 201: { description: 'Applied: status applied, one result per command.', schema: changeSetApplicationSchema } },
      handler: async (ctx: RequestContext) => {
        await requireOwnerOrAdmin(deps, ctx.principal);
        const env = environmentIdOf(ctx.principal);
        const r = await deps.profiles.apply(env, ctx.params.id ?? '', 'confirm', actorOf(ctx.principal), await deps.nowMs(env), ctx.callId);
        return { status: 201, body: applicationWire(r.changeSet, false) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/environment_settings',
      summary: "The environment's settings: autonomy (auto | limits; live environments start under limits, test environments apply every change set on request)",
      tag: 'Change sets',
      auth: { kind: 'credential', scopes: [], allow: ['pat', 'session'] },
      responses: { 200: { description: 'The settings; a test environment reports auto.', schema: settingsSchema, etag: true } },
      handler: async (ctx: RequestContext) => {
        const env = environmentIdOf(ctx.principal);
        const a = await deps.profiles.autonomy(env);
        return { status: 200, body: settingsWire(env, a), headers: etagHeader(a.version) };
      },
    }),
    route({
      method: 'PATCH',
      path: '/v1/environment_settings',
      summary:
        "Set a live environment's autonomy (owner or admin); If-Match names the version read (409 stale_write). A test environment has no autonomy setting: 403 forbidden, before the body is checked",
      tag: 'Change sets',
      auth: { kind: 'credential', scopes: [], allow: ['pat', 'session'] },
      // Validated in the handler, after the environment check (a test environment is 403 whatever the body).
      docBody: settingsBody,
      ifMatch: true,
      responses: { 200: { description: 'The settings.', schema: settingsSchema, etag: true } },
      handler: async (ctx: RequestContext) => {
        await requireOwnerOrAdmin(deps, ctx.principal);
        const env = environmentIdOf(ctx.principal);
        if (ctx.principal.environment?.runtimeClass !== 'live') throw new ApiError('forbidden', { message: testAutonomyMessage });
        const expected = expectedVersion(ctx.headers);
        const body = validate(settingsBody, ctx.body ?? {}, 'body');
        const a = await deps.profiles.setAutonomy(env, body.autonomy, expected);
        return { status: 200, body: settingsWire(env, a), headers: etagHeader(a.version) };
      },
    }),
    // ---- match profiles ------------------------------------------------------------------------
    route({
      method: 'GET',
      path: '/v1/match_profiles',
      summary: 'List match profiles (written through change sets)',
      tag: 'Matches',
      auth: programsRead,
      query: pageQuerySchema,
      responses: { 200: { description: 'A page of match profiles.', schema: pageOf(matchProfileSchema) } },
      handler: async (ctx: RequestContext<unknown, z.infer<typeof pageQuerySchema>>) => {
        const page = pageRequest(ctx);
        const rows = await deps.profiles.list(environmentIdOf(ctx.principal), { limit: page.limit + 1, after: page.after?.[0] ?? null });
        return { status: 200, body: toPage(rows, page, (r) => [r.id], matchProfileWire) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/match_profiles/:id',
      summary: 'Read a match profile by id or key, with its version (revision)',
      tag: 'Matches',
      auth: programsRead,
      responses: { 200: { description: 'The match profile.', schema: matchProfileSchema } },
      handler: async (ctx: RequestContext) => {
        const p = await deps.profiles.get(environmentIdOf(ctx.principal), ctx.params.id ?? '');
        return { status: 200, body: matchProfileWire(p) };
      },
    }),
    // ---- match results -------------------------------------------------------------------------
    route({
      method: 'POST',
      path: '/v1/match_results',
      summary: 'Report a match (secret key only; match_id is the idempotency key: an identical repeat answers 200 with replayed: true)',
      tag: 'Matches',
      auth: { kind: 'credential', scopes: ['events:write'], allow: ['secret'] },
      docBody: reportBodySchema,
      responses: {
        201: {
          description:
            'The match result with a verdict per player. A player whose admission did not finish shows status admitted with event_id null (listed in admission_errors) until the same report is sent again.',
          schema: matchResultSchema,
        },
        200: { description: 'An identical repeat: the stored result with replayed: true (pending players completed).', schema: matchResultSchema },
      },
      handler: async (ctx: RequestContext) => {
        const r = await deps.results.report(environmentIdOf(ctx.principal), ctx.principal.credentialId, ctx.body);
        return { status: r.status, body: r.body };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/match_results',
      summary: 'List match results; status=held is the review queue, oldest first (other lists newest first)',
      tag: 'Matches',
      auth: { kind: 'credential', scopes: ['events:read'], allow: [...management] },
      query: matchListQuery,
      responses: { 200: { description: 'A page of match results.', schema: pageOf(matchResultSchema) } },
      handler: async (ctx: RequestContext<unknown, z.infer<typeof matchListQuery>>) => {
        const page = pageRequest(ctx);
        const rows = await deps.results.list(environmentIdOf(ctx.principal), {
          status: ctx.query.status ?? null,
          limit: page.limit + 1,
          after: page.after?.[0] ?? null,
        });
        return { status: 200, body: toPage(rows, page, (r) => [r.id], (r) => matchWire(r, false)) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/match_results/:id',
      summary: "Read a match result by its mr_ id or the caller's match_id",
      tag: 'Matches',
      auth: { kind: 'credential', scopes: ['events:read'], allow: [...management] },
      responses: { 200: { description: 'The match result.', schema: matchResultSchema } },
      handler: async (ctx: RequestContext) => {
        const m = await deps.results.get(environmentIdOf(ctx.principal), ctx.params.id ?? '');
        return { status: 200, body: matchWire(m, false) };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/match_result_players/:id/reviews',
      summary:
        'Review a held player: admit records its event now (occurred_at = ended_at), unless another player of the match in its customer group (after a merge) was admitted: rejected with duplicate_player_after_merge; reject is final. The same decision again: replayed: true. Never held or the opposite decision: invalid_state; admit while the reporting key is revoked: forbidden (stays held)',
      tag: 'Matches',
      auth: { kind: 'credential', scopes: ['programs:write'], allow: [...management] },
      body: reviewBodySchema,
      idempotent: true,
      // Spec 3: the same decision repeated answers replayed: true, also from the stored answer of
      // the same Idempotency-Key (stored errors have no `replayed` and replay unchanged).
      replayTransform: (body) => (isRecord(body) && 'replayed' in body ? { ...body, replayed: true } : body),
      responses: { 200: { description: 'The player after the review, and its match result.', schema: matchReviewSchema } },
      handler: async (ctx: RequestContext<z.infer<typeof reviewBodySchema>>) => {
        const r = await deps.results.review(
          environmentIdOf(ctx.principal),
          ctx.params.id ?? '',
          ctx.body.decision,
          ctx.body.reason ?? null,
          actorOf(ctx.principal),
        );
        return { status: 200, body: r };
      },
    }),
  ];
}
