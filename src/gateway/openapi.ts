// Builds the OpenAPI 3.1 document served at GET /v1/openapi.json from the RouteDefs: the SAME zod
// schemas that validate requests describe them (z.toJSONSchema, input shape for requests, output
// shape for responses), so the document cannot drift from the code. Response bodies come from
// wire-schemas.ts (test/api/openapi-responses.test.ts holds the real answers to them); If-Match,
// ETag and Idempotent-Replayed are declared from the route's flags. The Error schema's code enum
// is the whole error table. A field a semantic validator checks (a rule definition: 422
// rule_invalid) is declared loosely in its route and paired with documentAs (util/doc-schema.ts)
// with the schema of what that validator accepts; that schema is rendered in its place, as a
// named component when it has an id (RuleDefinition). Pure and deterministic; the server builds
// it once and caches it.
import { z } from 'zod';
import { limits } from '../limits.js';
import { roleScopes } from '../tenancy/roles.js';
import { documentationOf } from '../util/doc-schema.js';
import type { AnyRoute } from './route.js';
import { apiErrorBody } from './wire-schemas.js';

type JsonSchema = Record<string, unknown>;
type Io = 'input' | 'output';

export interface OpenApiDocument {
  openapi: '3.1.0';
  info: { title: string; version: string; description: string };
  servers: Array<{ url: string }>;
  paths: Record<string, Record<string, unknown>>;
  components: {
    securitySchemes: Record<string, unknown>;
    schemas: Record<string, JsonSchema>;
    responses: Record<string, unknown>;
    headers: Record<string, unknown>;
  };
  tags: Array<{ name: string }>;
}

/**
 * The role table (decisions.md roles), written from roles.ts so it cannot drift: each role's scopes
 * beyond the role below it, and what is a role check rather than a scope.
 */
export function rolesDescription(): string {
  const order = ['viewer', 'editor', 'admin', 'owner'] as const;
  const extra = order.map((role, i) => {
    const below = i === 0 ? new Set<string>() : roleScopes[order[i - 1]!];
    return [...roleScopes[role]].filter((s) => !below.has(s));
  });
  return (
    'A personal access token or session holds the scopes of its role in the organization of the ' +
    `environment it names (x-scopes lists what an operation needs). viewer: ${extra[0]!.join(', ')}. ` +
    `editor: also ${extra[1]!.join(', ')}. admin: also ${extra[2]!.join(', ')}; and manages API keys, ` +
    'members and change-set confirmations (role checks). owner: the admin\'s scopes; and grants or ' +
    'removes owner (a role check).'
  );
}

/** '/v1/customers/:id' -> '/v1/customers/{id}'. */
export function openApiPath(pattern: string): string {
  return pattern.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
}

function operationId(method: string, pattern: string): string {
  const parts = pattern
    .split('/')
    .filter((s) => s.length > 0)
    .map((s) => (s.startsWith(':') ? `by_${s.slice(1)}` : s.replace(/[^A-Za-z0-9]+/g, '_')));
  return `${method.toLowerCase()}_${parts.join('_')}`;
}

/** components.schemas.Error, from the same zod schema a batch item's error uses (wire-schemas.ts). */
export function errorSchema(): JsonSchema {
  const out = z.toJSONSchema(apiErrorBody, { io: 'output', unrepresentable: 'any' }) as JsonSchema;
  delete out.$schema;
  return out;
}

/** Response headers, declared once in components.headers. */
const headerRefs = {
  requestId: { $ref: '#/components/headers/Request-Id' },
  etag: { $ref: '#/components/headers/ETag' },
  replayed: { $ref: '#/components/headers/Idempotent-Replayed' },
};

class SchemaConverter {
  readonly components: Record<string, JsonSchema> = {};
  /** Documentation schemas being converted (a documentation that holds its own field is not expanded again). */
  private readonly documenting = new Set<z.ZodType>();

  /**
   * zod's override hook: a field paired with documentAs is rendered as its documentation, a
   * $ref to components.schemas.<id> when the documentation has an id, else inline. The field's
   * own description is kept when the documentation has none.
   */
  private document(zodSchema: z.core.$ZodType, json: JsonSchema, io: Io): void {
    const doc = documentationOf(zodSchema);
    if (doc === undefined || this.documenting.has(doc)) return;
    this.documenting.add(doc);
    let rendered: JsonSchema;
    try {
      const id = z.globalRegistry.get(doc)?.id;
      if (id === undefined) rendered = this.convert(doc, io);
      else {
        rendered = { $ref: `#/components/schemas/${id}` };
        if (this.components[id] === undefined) {
          // A named root may come back as a $ref to itself, its body hoisted already.
          const body = this.convert(doc, io);
          if (body.$ref !== rendered.$ref) this.components[id] = body;
        }
      }
    } finally {
      this.documenting.delete(doc);
    }
    const description = json.description;
    for (const k of Object.keys(json)) delete json[k];
    Object.assign(json, rendered);
    if (description !== undefined && json.description === undefined && json.$ref === undefined) json.description = description;
  }

  /** zod -> JSON Schema; named ($defs) parts are hoisted into components.schemas. */
  convert(schema: z.ZodType, io: Io): JsonSchema {
    let out: JsonSchema;
    try {
      out = z.toJSONSchema(schema, {
        io,
        unrepresentable: 'any',
        override: (ctx) => this.document(ctx.zodSchema, ctx.jsonSchema as JsonSchema, io),
      }) as JsonSchema;
    } catch {
      // Cyclic or otherwise unconvertible: document it as "any JSON" rather than failing startup.
      return { description: 'Schema not representable in JSON Schema.' };
    }
    delete out.$schema;
    const defs = out.$defs as Record<string, JsonSchema> | undefined;
    if (defs === undefined) return out;
    delete out.$defs;
    const renames = new Map<string, string>();
    for (const [name, def] of Object.entries(defs)) {
      const existing = this.components[name];
      let target = name;
      // A stored component's refs are rewritten already: compare this one as it will be stored, so
      // a named schema nesting another (EventEvaluated holds Effect) is one component, not two.
      const stored = JSON.stringify(def).replaceAll('"#/$defs/', '"#/components/schemas/');
      if (existing !== undefined && JSON.stringify(existing) !== stored) {
        target = `${name}${io === 'input' ? 'Input' : 'Output'}`;
      }
      renames.set(name, target);
      this.components[target] = def;
    }
    const rewrite = (node: unknown): void => {
      if (node === null || typeof node !== 'object') return;
      if (Array.isArray(node)) {
        for (const n of node) rewrite(n);
        return;
      }
      const obj = node as Record<string, unknown>;
      const ref = obj.$ref;
      if (typeof ref === 'string' && ref.startsWith('#/$defs/')) {
        const name = ref.slice('#/$defs/'.length);
        obj.$ref = `#/components/schemas/${renames.get(name) ?? name}`;
      }
      for (const v of Object.values(obj)) rewrite(v);
    };
    rewrite(out);
    for (const target of renames.values()) rewrite(this.components[target]);
    return out;
  }
}

/** Query/params object schemas become one parameter per property. */
function parametersFrom(json: JsonSchema, where: 'query' | 'path'): Array<Record<string, unknown>> {
  const props = (json.properties ?? {}) as Record<string, JsonSchema>;
  const required = new Set((json.required ?? []) as string[]);
  return Object.entries(props).map(([name, schema]) => {
    const p: Record<string, unknown> = { name, in: where, required: where === 'path' || required.has(name), schema };
    if (typeof schema.description === 'string') p.description = schema.description;
    return p;
  });
}

function acceptsEmpty(schema: z.ZodType): boolean {
  return schema.safeParse({}).success;
}

export function buildOpenApiDocument(
  routes: readonly AnyRoute[],
  info: { title?: string; version?: string } = {},
): OpenApiDocument {
  const conv = new SchemaConverter();
  const paths: OpenApiDocument['paths'] = {};
  const tags = new Set<string>();

  for (const r of routes) {
    const path = openApiPath(r.path);
    const op: Record<string, unknown> = {
      operationId: operationId(r.method, r.path),
      summary: r.summary,
      tags: [r.tag],
    };
    tags.add(r.tag);

    const parameters: Array<Record<string, unknown>> = [];
    const pathNames = [...r.path.matchAll(/:([A-Za-z0-9_]+)/g)].map((m) => m[1]!);
    const paramsJson = r.params === undefined ? undefined : conv.convert(r.params, 'input');
    const paramProps = (paramsJson?.properties ?? {}) as Record<string, JsonSchema>;
    for (const name of pathNames) {
      parameters.push({ name, in: 'path', required: true, schema: paramProps[name] ?? { type: 'string' } });
    }
    if (r.query !== undefined) parameters.push(...parametersFrom(conv.convert(r.query, 'input'), 'query'));
    if (r.idempotent === true || r.idempotent === 'optional') {
      parameters.push({
        name: 'Idempotency-Key',
        in: 'header',
        required: r.idempotent === true,
        description:
          'Repeat a request with the same key to get the stored answer (Idempotent-Replayed: true). ' +
          'Kept at least 24 hours.' +
          (r.idempotent === true ? '' : ' Optional: without a key the request runs each time it is sent.'),
        schema: { type: 'string', minLength: 1, maxLength: limits.idempotencyKeyCharsMax },
      });
    }
    if (r.ifMatch === true) {
      parameters.push({
        name: 'If-Match',
        in: 'header',
        required: false,
        description:
          'A safe edit: the ETag of the version read, e.g. "3" (or *). Another version is 409 stale_write ' +
          '(details.current_version); absent, the change is unconditional.',
        schema: { type: 'string' },
      });
    }
    if (r.auth.kind === 'credential' && (r.auth.allow.includes('pat') || r.auth.allow.includes('session'))) {
      parameters.push({
        name: 'X-Service-Environment',
        in: 'header',
        required: false,
        description: 'Management credentials name the environment they act in (environment id).',
        schema: { type: 'string' },
      });
    }
    if (parameters.length > 0) op.parameters = parameters;

    // docBody documents a body that the handler validates itself (per-item batch errors).
    const bodySchema: z.ZodType | undefined = r.body ?? r.docBody;
    if (bodySchema !== undefined) {
      op.requestBody = {
        required: !acceptsEmpty(bodySchema),
        content: { 'application/json': { schema: conv.convert(bodySchema, 'input') } },
      };
    }

    const responses: Record<string, unknown> = {};
    for (const [status, res] of Object.entries(r.responses)) {
      const entry: Record<string, unknown> = { description: res.description };
      const headers: Record<string, unknown> = { 'Request-Id': headerRefs.requestId };
      if (res.etag === true) headers.ETag = headerRefs.etag;
      // A repeat with the same Idempotency-Key replays the stored answer, marked so.
      if (r.idempotent === true || r.idempotent === 'optional') headers['Idempotent-Replayed'] = headerRefs.replayed;
      entry.headers = headers;
      if (res.schema !== undefined) {
        entry.content = { 'application/json': { schema: conv.convert(res.schema, 'output') } };
      }
      responses[status] = entry;
    }
    responses.default = { $ref: '#/components/responses/Error' };
    op.responses = responses;

    if (r.auth.kind === 'credential') {
      op.security = [{ bearer: [] }];
      op['x-scopes'] = r.auth.scopes;
      op['x-credential-kinds'] = r.auth.allow;
    } else {
      op.security = [];
    }

    paths[path] ??= {};
    paths[path][r.method.toLowerCase()] = op;
  }

  addOperationalPaths(paths);

  return {
    openapi: '3.1.0',
    info: {
      title: info.title ?? 'Loyalty and Engagement Service API',
      version: info.version ?? '1.0.0',
      description:
        'Errors share one shape (components.schemas.Error); match on error.code. Every response ' +
        'carries a Request-Id header. Creating POSTs take an Idempotency-Key header. A versioned ' +
        'resource answers ETag: "<version>"; the edits that declare If-Match take it back for a safe edit. ' +
        rolesDescription(),
    },
    servers: [{ url: '/' }],
    paths,
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'API key or token.' } },
      schemas: { ...conv.components, Error: errorSchema() },
      responses: {
        Error: {
          description: 'An error; the status comes from error.code.',
          headers: {
            'Request-Id': headerRefs.requestId,
            'Retry-After': { schema: { type: 'integer' }, description: 'Seconds to wait before resending unchanged.' },
            'Idempotent-Replayed': headerRefs.replayed,
          },
          content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
        },
      },
      headers: {
        'Request-Id': { description: 'The id of this request (req_...); every response carries it.', schema: { type: 'string' } },
        ETag: {
          description: 'The version of the resource answered, as a strong ETag ("<version>"); send it back in If-Match for a safe edit.',
          schema: { type: 'string', pattern: '^"[0-9]+"$' },
        },
        'Idempotent-Replayed': {
          description: 'true when the answer is the stored one of an earlier request with the same Idempotency-Key.',
          schema: { type: 'string', enum: ['true'] },
        },
      },
    },
    tags: [...tags, 'operations'].map((name) => ({ name })),
  };
}

function addOperationalPaths(paths: OpenApiDocument['paths']): void {
  const op = (summary: string, id: string, responses: Record<string, unknown>) => ({
    get: { operationId: id, summary, tags: ['operations'], security: [], responses },
  });
  const json = (schema: JsonSchema) => ({ 'application/json': { schema } });
  const readiness = {
    type: 'object',
    required: ['status', 'checks'],
    properties: { status: { type: 'string' }, checks: { type: 'object', additionalProperties: true } },
  };
  paths['/healthz'] = op('Process is up', 'get_healthz', {
    200: { description: 'Up.', content: json({ type: 'object', properties: { status: { const: 'ok' } } }) },
  });
  paths['/readyz'] = op('Storage reachable and partitions held (serving or replaying)', 'get_readyz', {
    200: { description: 'Ready.', content: json(readiness) },
    503: { description: 'Not ready; checks say why.', content: json(readiness) },
  });
  paths['/metrics'] = op('Prometheus metrics', 'get_metrics', {
    200: { description: 'Prometheus text format.', content: { 'text/plain': { schema: { type: 'string' } } } },
  });
  paths['/v1/openapi.json'] = op('This document', 'get_v1_openapi_json', {
    200: { description: 'OpenAPI 3.1 document.', content: json({ type: 'object' }) },
  });
}
