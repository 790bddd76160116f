// Membership routes (spec 2.1, part 7 last_owner; decisions.md "admin also ... members"): list, add,
// change the role of and remove the members of an organization. Management credentials only (PAT,
// session) with environment: false: the organization is named by the path, and MembershipService
// reads the caller's role from the database on every call. A role change reaches the changed user's
// cached credentials on other routes within the Authenticator's cache TTL (60 s). An invitation
// waits for the invitee's first sign-in with the identity provider (README, accounts).
import { z } from 'zod';
import { limits } from '../../limits.js';
import type { Sql } from '../../persistence/sql/db.js';
import { MembershipService } from '../../tenancy/memberships.js';
import { pageQuerySchema, pageRequest } from '../pagination.js';
import { type AnyRoute, route } from '../route.js';
import { pageOf, timestamp } from '../wire-schemas.js';

const roles = ['owner', 'admin', 'editor', 'viewer'] as const;
const role = z.enum(roles);
const orgParams = z.object({ id: z.string().min(1).max(64) });
const memberParams = orgParams.extend({ user_id: z.string().min(1).max(64) });
const addBody = z.strictObject({ email: z.email().max(limits.emailCharsMax), role });
const patchBody = z.strictObject({ role });

const membershipSchema = z.object({
  organization_id: z.string(),
  user_id: z.string(),
  email: z.string(),
  role,
  created_at: timestamp,
});
const pageSchema = pageOf(membershipSchema);

export interface MembershipRouteDeps {
  sql: Sql;
  /** POST /v1/auth/sessions works here (an identity provider is configured). */
  signInConfigured: boolean;
  memberships?: MembershipService;
}

export function membershipRoutes(deps: MembershipRouteDeps): AnyRoute[] {
  const memberships = deps.memberships ?? new MembershipService(deps.sql, { signInConfigured: deps.signInConfigured });
  return [
    route({
      method: 'GET',
      path: '/v1/organizations/:id/memberships',
      summary: "List an organization's members, by user id (any member)",
      tag: 'Account',
      auth: { kind: 'credential', scopes: [], allow: ['pat', 'session'], environment: false },
      params: orgParams,
      query: pageQuerySchema,
      responses: { 200: { description: 'A page of memberships', schema: pageSchema } },
      handler: async (ctx) => ({
        status: 200,
        body: await memberships.list(ctx.principal, ctx.params.id!, pageRequest(ctx)),
      }),
    }),
    route({
      method: 'POST',
      path: '/v1/organizations/:id/memberships',
      summary:
        'Add a member by email, creating the user if unknown (admin or owner; only an owner grants owner). The membership takes effect once the user has signed in with the identity provider; without one configured, only such users can be added (501 capability_unavailable)',
      tag: 'Account',
      auth: { kind: 'credential', scopes: [], allow: ['pat', 'session'], environment: false },
      params: orgParams,
      body: addBody,
      idempotent: true,
      responses: { 201: { description: 'Membership created', schema: membershipSchema } },
      handler: async (ctx) => ({ status: 201, body: await memberships.add(ctx.principal, ctx.params.id!, ctx.body, ctx.callId) }),
    }),
    route({
      method: 'PATCH',
      path: '/v1/organizations/:id/memberships/:user_id',
      summary: "Change a member's role (admin or owner; only an owner grants or removes owner; never the last owner)",
      tag: 'Account',
      auth: { kind: 'credential', scopes: [], allow: ['pat', 'session'], environment: false },
      params: memberParams,
      body: patchBody,
      responses: { 200: { description: 'The membership', schema: membershipSchema } },
      handler: async (ctx) => ({
        status: 200,
        body: await memberships.changeRole(ctx.principal, ctx.params.id!, ctx.params.user_id!, ctx.body.role),
      }),
    }),
    route({
      method: 'DELETE',
      path: '/v1/organizations/:id/memberships/:user_id',
      summary: 'Remove a member (admin or owner, or the member themselves; only an owner removes an owner; never the last owner)',
      tag: 'Account',
      auth: { kind: 'credential', scopes: [], allow: ['pat', 'session'], environment: false },
      params: memberParams,
      responses: { 204: { description: 'Removed.' } },
      handler: async (ctx) => {
        await memberships.remove(ctx.principal, ctx.params.id!, ctx.params.user_id!);
        return { status: 204 };
      },
    }),
  ];
}
