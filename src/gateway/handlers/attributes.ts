// GET/POST /v1/attribute_definitions: typed customer attribute keys of the environment.
import { z } from 'zod';
import { type AttributeCatalog, type AttributeDefinition, attributeTypes } from '../../catalog/attributes.js';
import { pageQuerySchema, pageRequest, toPage } from '../pagination.js';
import { type AnyRoute, environmentIdOf, type RequestContext, route } from '../route.js';
import { iso } from '../wire.js';
import { attributeDefinitionSchema, pageOf } from '../wire-schemas.js';

const createBody = z.strictObject({
  key: z
    .string()
    .min(1)
    .max(128)
    .regex(/^[a-z][a-z0-9_]*$/, 'Use snake_case, e.g. favourite_mode.'),
  type: z.enum(attributeTypes),
  description: z.string().max(500).nullable().optional(),
  pii: z.boolean().default(false).describe('Informational: every attribute is erased with its customer and listed in exports, whatever this says.'),
});

function wire(d: AttributeDefinition) {
  return {
    id: d.id,
    key: d.key,
    type: d.type,
    description: d.description,
    pii: d.pii,
    created_at: iso(d.createdAtMs),
    updated_at: iso(d.updatedAtMs),
  };
}


export function attributeRoutes(deps: { attributes: AttributeCatalog }): AnyRoute[] {
  return [
    route({
      method: 'GET',
      path: '/v1/attribute_definitions',
      summary: 'List attribute definitions',
      tag: 'Customers',
      auth: { kind: 'credential', scopes: ['customers:read'], allow: ['secret', 'pat', 'session'] },
      query: pageQuerySchema,
      responses: { 200: { description: 'A page of attribute definitions.', schema: pageOf(attributeDefinitionSchema) } },
      handler: async (ctx: RequestContext<unknown, z.infer<typeof pageQuerySchema>>) => {
        const page = pageRequest(ctx);
        const rows = await deps.attributes.list(environmentIdOf(ctx.principal), { limit: page.limit + 1, after: page.after?.[0] ?? null });
        return { status: 200, body: toPage(rows, page, (r) => [r.id], wire) };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/attribute_definitions',
      summary: 'Define a typed customer attribute (types: string, number, integer, boolean, timestamp, json)',
      tag: 'Customers',
      auth: { kind: 'credential', scopes: ['customers:write'], allow: ['secret', 'pat', 'session'] },
      body: createBody,
      idempotent: true,
      responses: { 201: { description: 'The attribute definition.', schema: attributeDefinitionSchema } },
      handler: async (ctx: RequestContext<z.infer<typeof createBody>>) => {
        const d = await deps.attributes.create(environmentIdOf(ctx.principal), ctx.body, ctx.callId);
        return { status: 201, body: wire(d) };
      },
    }),
  ];
}
