// Segments (spec 2.9; routes ours, Stripe-style): POST /v1/segments (idempotent), GET list and one,
// PATCH (If-Match), DELETE; static members: POST /v1/segments/{id}/members {customer_id} (service
// id or external id; 200 with the stored membership when already a member), DELETE
// /v1/segments/{id}/members/{customer_id}, GET members (a page from the projected segment_members
// table). Membership is journaled by the customer's actor, so a rule evaluates it with no I/O.
// Renaming or deleting a segment a rule, a campaign audience or a challenge's qualifying
// conditions name (challenges not ended): 409 resource_in_use.
import { z } from 'zod';
import type { Engine } from '../../actors/engine.js';
import type { Segment, SegmentCatalog } from '../../catalog/segments.js';
import { conditionTreeDoc, PathSource } from '../../domain/rules/index.js';
import { segmentKinds } from '../../domain/segments.js';
import { ApiError } from '../../errors/api-error.js';
import { limits } from '../../limits.js';
import { documentAs } from '../../util/doc-schema.js';
import { etagHeader, expectedVersion } from '../etag.js';
import { pageQuerySchema, pageRequest, toPage } from '../pagination.js';
import { type AnyRoute, type AuthSpec, environmentIdOf, type RequestContext, route } from '../route.js';
import { customerTarget, iso, namingCustomer, unwrap } from '../wire.js';
import { pageOf, segmentMemberSchema, segmentMembershipSchema, segmentSchema, timestamp } from '../wire-schemas.js';

export interface SegmentDeps {
  segments: SegmentCatalog;
  engine: Engine;
  now(environmentId: string): number | Promise<number>;
  members: {
    listSegmentMembers(
      environmentId: string,
      segmentId: string,
      q: { limit: number; after: string | null },
    ): Promise<Array<{ customerId: string; addedAtMs: number }>>;
    segmentMember(environmentId: string, segmentId: string, customerId: string): Promise<{ customerId: string; addedAtMs: number } | null>;
  };
  drainProjector(): Promise<void>;
}

const nameField = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9_.:-]+$/, 'Use letters, digits, _, ., : and -, e.g. vip.')
  .describe('Unique per environment; rules and challenge qualifying conditions (customer.segments contains <name>) and campaign audiences use it.');
const descriptionField = z.string().max(1000).nullable();
// The condition is checked by the rule language (validation_failed names condition.all[0].path);
// OpenAPI shows what that check accepts.
const conditionField = documentAs(
  z.unknown(),
  conditionTreeDoc('SegmentCondition', [PathSource.attribute], 'The rule condition language over customer.attributes.<name> only.').nullable(),
).describe('Dynamic segments: the condition (required); static segments take none (null or absent).');

const createBody = z.strictObject({
  name: nameField,
  description: descriptionField.default(null),
  kind: z.enum(segmentKinds),
  condition: conditionField.optional(),
});
const patchBody = z
  .strictObject({
    name: nameField.optional(),
    description: descriptionField.optional(),
    condition: conditionField.optional(),
  })
  .refine((b) => Object.keys(b).length > 0, 'Name at least one of name, description, condition.');
const memberBody = z.strictObject({
  customer_id: z.string().min(1).max(limits.externalIdCharsMax).describe("The customer's service id (cust_...) or external id."),
});

const readAuth: AuthSpec = { kind: 'credential', scopes: ['programs:read'], allow: ['secret', 'pat', 'session'] };
const writeAuth: AuthSpec = { kind: 'credential', scopes: ['programs:write'], allow: ['secret', 'pat', 'session'] };
const customersWrite: AuthSpec = { kind: 'credential', scopes: ['customers:write'], allow: ['secret', 'pat', 'session'] };

export function segmentWire(s: Segment) {
  return {
    id: s.id,
    name: s.name,
    description: s.description,
    kind: s.kind,
    condition: s.condition,
    version: s.version,
    created_at: iso(s.createdAtMs),
    updated_at: iso(s.updatedAtMs),
  };
}


export function segmentRoutes(deps: SegmentDeps): AnyRoute[] {
  const { segments, engine } = deps;

  /** The static segment (dynamic ones have no explicit members: invalid_state). */
  const staticSegment = async (env: string, id: string): Promise<Segment> => {
    const s = await segments.get(env, id);
    if (s.kind !== 'static') {
      throw new ApiError('invalid_state', {
        message: `Segment ${s.name} is dynamic: its members are the customers matching its condition.`,
        details: { kind: s.kind },
      });
    }
    return s;
  };

  /**
   * The customer's id, only if it belongs to `env` (a by-id call may reach any environment's actor).
   * The body's or the path's customer_id named it: an unknown one is a 404 naming customer_id.
   */
  const customerOf = async (env: string, ref: string, nowMs: number): Promise<string> => {
    const reply = await namingCustomer('customer_id', async () =>
      unwrap(await engine.execute({ env, target: customerTarget(ref), command: { kind: 'customer.view' }, nowMs })),
    );
    if (reply.kind !== 'customer' || reply.customer.environmentId !== env) {
      throw new ApiError('resource_not_found', { message: `No customer ${ref}.`, param: 'customer_id' });
    }
    return reply.customer.id;
  };

  /** `callId`: the request's (RequestContext.callId): a run again of an add that added answers 201 again. */
  const membership = async (env: string, segmentId: string, ref: string, add: boolean, callId?: string) => {
    const nowMs = await deps.now(env);
    const customerId = await customerOf(env, ref, nowMs);
    const reply = unwrap(
      await engine.execute({
        env,
        target: { by: 'id', id: customerId },
        command: { kind: add ? 'segment.add_member' : 'segment.remove_member', segmentId },
        nowMs,
        callId,
      }),
    );
    if (reply.kind !== 'segment_membership') throw new ApiError('internal_error');
    return { customerId, changed: reply.changed, atMs: nowMs };
  };

  return [
    route({
      method: 'POST',
      path: '/v1/segments',
      summary: 'Create a segment: static (explicit members) or dynamic (a condition over customer.attributes.*)',
      tag: 'Segments',
      auth: writeAuth,
      body: createBody,
      idempotent: true,
      responses: { 201: { description: 'The segment.', schema: segmentSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof createBody>>) => {
        const b = ctx.body;
        const s = await segments.create(
          environmentIdOf(ctx.principal),
          { name: b.name, description: b.description, kind: b.kind, condition: b.condition },
          ctx.callId,
        );
        return { status: 201, body: segmentWire(s), headers: etagHeader(s.version) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/segments',
      summary: 'List segments',
      tag: 'Segments',
      auth: readAuth,
      query: pageQuerySchema,
      responses: { 200: { description: 'A page of segments.', schema: pageOf(segmentSchema) } },
      handler: async (ctx: RequestContext<unknown, z.infer<typeof pageQuerySchema>>) => {
        const page = pageRequest(ctx);
        const rows = await segments.list(environmentIdOf(ctx.principal), { limit: page.limit + 1, after: page.after?.[0] ?? null });
        return { status: 200, body: toPage(rows, page, (r) => [r.id], segmentWire) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/segments/:id',
      summary: 'Read a segment (ETag = version)',
      tag: 'Segments',
      auth: readAuth,
      responses: { 200: { description: 'The segment.', schema: segmentSchema, etag: true } },
      handler: async (ctx: RequestContext) => {
        const s = await segments.get(environmentIdOf(ctx.principal), ctx.params.id ?? '');
        return { status: 200, body: segmentWire(s), headers: etagHeader(s.version) };
      },
    }),
    route({
      method: 'PATCH',
      path: '/v1/segments/:id',
      summary: 'Edit name, description or (dynamic) condition (If-Match); renaming a segment in use is 409 resource_in_use',
      tag: 'Segments',
      auth: writeAuth,
      body: patchBody,
      ifMatch: true,
      responses: { 200: { description: 'The segment.', schema: segmentSchema, etag: true } },
      handler: async (ctx: RequestContext<z.infer<typeof patchBody>>) => {
        const b = ctx.body;
        const patch: { name?: string; description?: string | null; condition?: unknown } = {};
        if (b.name !== undefined) patch.name = b.name;
        if (b.description !== undefined) patch.description = b.description;
        if ('condition' in b) patch.condition = b.condition ?? null;
        const s = await segments.update(environmentIdOf(ctx.principal), ctx.params.id ?? '', expectedVersion(ctx.headers), patch);
        return { status: 200, body: segmentWire(s), headers: etagHeader(s.version) };
      },
    }),
    route({
      method: 'DELETE',
      path: '/v1/segments/:id',
      summary: 'Delete a segment (409 resource_in_use while a rule, a campaign audience or a challenge not ended names it)',
      tag: 'Segments',
      auth: writeAuth,
      ifMatch: true,
      responses: { 204: { description: 'Deleted.' } },
      handler: async (ctx: RequestContext) => {
        await segments.delete(environmentIdOf(ctx.principal), ctx.params.id ?? '', expectedVersion(ctx.headers));
        return { status: 204 };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/segments/:id/members',
      summary: 'Add a customer (service id or external id) to a static segment; 201 when added, 200 when already a member',
      tag: 'Segments',
      auth: customersWrite,
      body: memberBody,
      idempotent: true,
      responses: {
        201: { description: 'Added: the membership.', schema: segmentMembershipSchema },
        200: {
          description: 'Already a member: the stored membership (added_at as first stored; null only if it was never projected).',
          schema: segmentMembershipSchema.extend({ added_at: timestamp.nullable() }),
        },
      },
      handler: async (ctx: RequestContext<z.infer<typeof memberBody>>) => {
        const env = environmentIdOf(ctx.principal);
        const s = await staticSegment(env, ctx.params.id ?? '');
        const m = await membership(env, s.id, ctx.body.customer_id, true, ctx.callId);
        if (m.changed) return { status: 201, body: { segment_id: s.id, customer_id: m.customerId, added_at: iso(m.atMs) } };
        // Already a member: the stored membership, read from the projection (as the members list).
        await deps.drainProjector();
        const stored = await deps.members.segmentMember(env, s.id, m.customerId);
        return { status: 200, body: { segment_id: s.id, customer_id: m.customerId, added_at: iso(stored?.addedAtMs ?? null) } };
      },
    }),
    route({
      method: 'DELETE',
      path: '/v1/segments/:id/members/:customer_id',
      summary: 'Remove a customer (service id or external id) from a static segment (idempotent)',
      tag: 'Segments',
      auth: customersWrite,
      responses: { 204: { description: 'Not a member (any more).' } },
      handler: async (ctx: RequestContext) => {
        const env = environmentIdOf(ctx.principal);
        const s = await staticSegment(env, ctx.params.id ?? '');
        await membership(env, s.id, ctx.params.customer_id ?? '', false);
        return { status: 204 };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/segments/:id/members',
      summary: "A static segment's members, by customer id",
      tag: 'Segments',
      auth: { kind: 'credential', scopes: ['customers:read'], allow: ['secret', 'pat', 'session'] },
      query: pageQuerySchema,
      responses: { 200: { description: 'A page of members.', schema: pageOf(segmentMemberSchema) } },
      handler: async (ctx: RequestContext<unknown, z.infer<typeof pageQuerySchema>>) => {
        const env = environmentIdOf(ctx.principal);
        const s = await staticSegment(env, ctx.params.id ?? '');
        const page = pageRequest(ctx);
        await deps.drainProjector();
        const rows = await deps.members.listSegmentMembers(env, s.id, { limit: page.limit + 1, after: page.after?.[0] ?? null });
        return {
          status: 200,
          body: toPage(rows, page, (r) => [r.customerId], (r) => ({ customer_id: r.customerId, added_at: iso(r.addedAtMs) })),
        };
      },
    }),
  ];
}
