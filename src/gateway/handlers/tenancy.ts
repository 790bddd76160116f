// Account and management routes (spec 4.1, decisions.md "Tenancy and credentials"): signup, OIDC
// sessions, organizations and their environments, and API keys. Schemas carry the spec's part 8
// limits; the TenancyService does the work and the role checks. Handlers throw ApiError and never
// write an error status.
// Key-management routes name no scope: admin/owner is a role check in the service (no scope exists).
import { z } from 'zod';
import { limits } from '../../limits.js';
import { normalizeEmail, type TenancyService } from '../../tenancy/service.js';
import { allScopes } from '../../tenancy/types.js';
import { pageQuerySchema, pageRequest } from '../pagination.js';
import { type AnyRoute, route } from '../route.js';
import { pageOf, timestamp } from '../wire-schemas.js';
import { eventNamePattern } from './events.js';

const name = z.string().min(1).max(limits.nameCharsMax);
const timezone = z
  .string()
  .min(1)
  .max(limits.timezoneCharsMax)
  .default('UTC')
  .describe('IANA time zone name, e.g. "Europe/Berlin".');

const signupBody = z.strictObject({
  email: z.email().max(limits.emailCharsMax),
  name: name.optional(),
  organization_name: name,
  timezone,
});
const sessionBody = z.strictObject({
  id_token: z.string().min(limits.idTokenCharsMin).max(limits.idTokenCharsMax).describe('An OpenID Connect ID token.'),
});
const organizationBody = z.strictObject({ name, timezone });
const apiKeyBody = z.strictObject({
  kind: z.enum(['secret', 'publishable']),
  name,
  scopes: z
    .array(z.enum(allScopes))
    .max(allScopes.length * 2)
    .optional()
    .describe('Secret keys: default every scope but customer_sessions:write. Publishable keys: events:write only.'),
  allowed_events: z
    .array(z.string().min(1).max(limits.eventNameCharsMax).regex(eventNamePattern, 'Use dotted snake_case, e.g. level.completed.'))
    .max(100)
    .optional()
    .describe('Publishable keys (required, non-empty): event names the key may send, as POST /v1/events takes them; a repeated name is kept once.'),
  allowed_origins: z
    .array(z.string().min(1).max(255))
    .max(20)
    .optional()
    .describe('Publishable keys: allowed Origin values (scheme://host[:port]); empty or absent: any.'),
});
const keyParams = z.object({ id: z.string().min(1).max(64) });
const organizationParams = z.object({ id: z.string().min(1).max(64) });

const userSchema = z.object({ id: z.string(), email: z.string(), name: z.string().nullable(), created_at: timestamp });
const orgRef = z.object({ id: z.string(), name: z.string(), slug: z.string() });
const projectSchema = z.object({ id: z.string(), name: z.string() });
const environmentSchema = z.object({ id: z.string(), name: z.string(), runtime_class: z.enum(['test', 'live']) });
const tenantSchema = z.object({ organization: orgRef, project: projectSchema, environments: z.array(environmentSchema) });
const environmentListing = environmentSchema.extend({ project_id: z.string() });
const organizationListing = orgRef.extend({
  plan: z.object({ id: z.string(), version: z.number().int() }),
  billing_mode: z.enum(['card', 'invoice', 'none']),
  ai_drafting_disabled: z.boolean(),
  version: z.number().int(),
  created_at: timestamp,
  updated_at: timestamp,
});
const membershipSchema = z.object({
  organization_id: z.string(),
  user_id: z.string(),
  email: z.string(),
  role: z.enum(['owner', 'admin', 'editor', 'viewer']),
  created_at: timestamp,
});
const apiKeySchema = z.object({
  id: z.string(),
  kind: z.enum(['secret', 'publishable']),
  name: z.string(),
  token_hint: z.string(),
  scopes: z.array(z.string()),
  allowed_events: z.array(z.string()),
  allowed_origins: z.array(z.string()),
  environment_id: z.string(),
  created_at: timestamp,
  revoked_at: timestamp.nullable(),
});

export interface TenancyRouteDeps {
  tenancy: TenancyService;
}

export function tenancyRoutes(deps: TenancyRouteDeps): AnyRoute[] {
  const { tenancy } = deps;
  return [
    route({
      method: 'POST',
      path: '/v1/auth/signup',
      summary: 'Create an account: user, organization, default project, test and live environments, owner PAT',
      tag: 'Account',
      auth: { kind: 'none' },
      body: signupBody,
      idempotent: true,
      // No caller yet: keys are scoped by the address signing up, so two people never collide.
      idempotencyIdentity: (body) => normalizeEmail(body.email),
      // Whoever replays the key and body (knowing the address) must not receive the PAT again (as
      // customer-session mints answer customer_token: null, rule 4). Stored 4xx answers replay unchanged.
      replayTransform: (body) => {
        const b = body as Record<string, unknown>;
        if (b.token === null || typeof b.token !== 'object') return b;
        return { ...b, token: { ...(b.token as Record<string, unknown>), token: null } };
      },
      responses: {
        201: {
          description: 'Account created; token.token is an opat_ personal access token, shown once (null on an idempotent replay)',
          schema: tenantSchema.extend({
            user: userSchema,
            token: z.object({ id: z.string(), token: z.string().nullable(), scopes: z.array(z.string()) }),
          }),
        },
      },
      handler: async (ctx) => ({ status: 201, body: await tenancy.signup(ctx.body, ctx.callId) }),
    }),
    route({
      method: 'POST',
      path: '/v1/auth/sessions',
      summary: 'Exchange an OpenID Connect ID token for a 30-day session token',
      tag: 'Account',
      auth: { kind: 'none' },
      body: sessionBody,
      responses: {
        201: {
          description: 'Session created; the user is created on first sign-in',
          schema: z.object({
            user: userSchema,
            created: z.boolean(),
            memberships: z.array(membershipSchema),
            token: z.object({ id: z.string(), token: z.string(), scopes: z.array(z.string()), expires_at: timestamp }),
          }),
        },
      },
      handler: async (ctx) => ({ status: 201, body: await tenancy.createSession(ctx.body.id_token) }),
    }),
    route({
      method: 'POST',
      path: '/v1/organizations',
      summary: 'Create an organization (with a default project and test and live environments); the caller owns it',
      tag: 'Account',
      auth: { kind: 'credential', scopes: [], allow: ['pat', 'session'], environment: false },
      body: organizationBody,
      idempotent: true,
      responses: { 201: { description: 'Organization created', schema: tenantSchema } },
      handler: async (ctx) => ({ status: 201, body: await tenancy.createOrganization(ctx.principal, ctx.body, ctx.callId) }),
    }),
    route({
      method: 'GET',
      path: '/v1/organizations',
      summary: 'List the organizations the caller belongs to, newest first',
      tag: 'Account',
      auth: { kind: 'credential', scopes: [], allow: ['pat', 'session'], environment: false },
      query: pageQuerySchema,
      responses: { 200: { description: 'A page of organizations', schema: pageOf(organizationListing) } },
      handler: async (ctx) => ({ status: 200, body: await tenancy.listOrganizations(ctx.principal, pageRequest(ctx)) }),
    }),
    route({
      method: 'GET',
      path: '/v1/organizations/:id/environments',
      summary:
        "List an organization's environments (the ids X-Service-Environment takes), by id: a project's test environment before its live one (any member)",
      tag: 'Account',
      auth: { kind: 'credential', scopes: [], allow: ['pat', 'session'], environment: false },
      params: organizationParams,
      query: pageQuerySchema,
      responses: { 200: { description: 'A page of environments', schema: pageOf(environmentListing) } },
      handler: async (ctx) => ({
        status: 200,
        body: await tenancy.listEnvironments(ctx.principal, ctx.params.id!, pageRequest(ctx)),
      }),
    }),
    route({
      method: 'POST',
      path: '/v1/api_keys',
      summary: 'Create a secret or publishable key in the environment named by X-Service-Environment (admin or owner)',
      tag: 'API keys',
      auth: { kind: 'credential', scopes: [], allow: ['pat', 'session'] },
      body: apiKeyBody,
      idempotent: true,
      // The token is shown once: an idempotent replay answers token: null (stored errors unchanged).
      replayTransform: (body) => ('token' in (body as object) ? { ...(body as Record<string, unknown>), token: null } : body),
      responses: {
        201: {
          description: 'Key created; token (osk_/opk_) is returned only here (null on an idempotent replay)',
          schema: apiKeySchema.extend({ token: z.string().nullable() }),
        },
      },
      handler: async (ctx) => ({ status: 201, body: await tenancy.createApiKey(ctx.principal, ctx.body, ctx.callId) }),
    }),
    route({
      method: 'GET',
      path: '/v1/api_keys',
      summary: "List the environment's API keys, newest first (never the token)",
      tag: 'API keys',
      auth: { kind: 'credential', scopes: [], allow: ['pat', 'session'] },
      query: pageQuerySchema,
      responses: { 200: { description: 'A page of keys', schema: pageOf(apiKeySchema) } },
      handler: async (ctx) => ({ status: 200, body: await tenancy.listApiKeys(ctx.principal, pageRequest(ctx)) }),
    }),
    route({
      method: 'POST',
      path: '/v1/api_keys/:id/revoke',
      summary: 'Revoke an API key; every node refuses it within about a second (admin or owner)',
      tag: 'API keys',
      auth: { kind: 'credential', scopes: [], allow: ['pat', 'session'] },
      idempotent: 'optional',
      params: keyParams,
      responses: { 200: { description: 'The key, with revoked_at set', schema: apiKeySchema } },
      handler: async (ctx) => ({ status: 200, body: await tenancy.revokeApiKey(ctx.principal, ctx.params.id!) }),
    }),
  ];
}
