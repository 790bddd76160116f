// A route is data: method, path pattern, who may call it, the zod schemas that validate it (and
// feed /v1/openapi.json), and a handler. The server (gateway/server.ts) does parsing, limits,
// auth, validation and idempotency before the handler runs; handlers only do the work and
// either return a Reply or throw ApiError. No handler writes an error status number.
import type { z } from 'zod';
import { ApiError } from '../errors/api-error.js';
import type { CredentialKind, Principal, Scope } from '../tenancy/types.js';

export type Method = 'GET' | 'POST' | 'PATCH' | 'DELETE' | 'PUT';

export type AuthSpec =
  /** No credential (signup, sessions, unsubscribe links). */
  | { kind: 'none' }
  | {
      kind: 'credential';
      /** Every listed scope is required (insufficient_scope otherwise). */
      scopes: Scope[];
      /** Credential kinds allowed; others get forbidden (publishable: event_requires_secret_key). */
      allow: CredentialKind[];
      /** Management credentials (pat, session) must name an environment (environment_required). Default true. */
      environment?: boolean;
    };

export interface RequestContext<B = unknown, Q = unknown> {
  requestId: string;
  method: Method;
  /** Path without the query string. */
  path: string;
  params: Record<string, string>;
  query: Q;
  /** Lower-cased header names, copied synchronously from uWS. */
  headers: Record<string, string>;
  body: B;
  rawBody: Buffer;
  /** Set when the route's auth kind is 'credential'. */
  principal: Principal;
  /** Milliseconds since epoch at arrival (real clock). */
  receivedAtMs: number;
  /**
   * Set for a request under an Idempotency-Key (idempotent routes): the same for every run of it,
   * also one after its claim went stale or a 5xx released it (the answer was never stored). A
   * handler passes it on the calls whose commands the actors remember (actors/calls.ts), so a
   * run again is answered what the first run applied instead of applying it twice.
   */
  callId?: string;
}

export interface Reply {
  status: number;
  /** JSON-serialized unless undefined (empty body, e.g. 204). */
  body?: unknown;
  headers?: Record<string, string>;
  /**
   * The customers (cust_ ids) the answer is about when its body need not show them (a ledger
   * entry names none): stored with an Idempotency-Key answer so that erasing the customer forgets
   * it. Ids the body shows are found without this.
   */
  customerIds?: readonly string[];
}

export interface RouteDef<B = unknown, Q = unknown> {
  method: Method;
  /** Express-style pattern under /v1, e.g. '/v1/customers/:id'. */
  path: string;
  summary: string;
  tag: string;
  auth: AuthSpec;
  body?: z.ZodType<B>;
  /**
   * Documents the body in OpenAPI without validating it in the server (the handler validates,
   * e.g. POST /v1/events reports per-item errors for batches). Ignored when `body` is set.
   */
  docBody?: z.ZodType;
  query?: z.ZodType<Q>;
  /**
   * Optional check of the path params (e.g. an id prefix); a failure is validation_failed with
   * `param` = the param name. Params stay strings either way.
   */
  params?: z.ZodType<Record<string, string>>;
  /**
   * true: a creating POST, Idempotency-Key required and results stored (spec part 1 rules 1-4).
   * 'optional': a POST that changes state without creating (an action, an enrollment): a key,
   * when sent, is claimed, stored and replayed exactly as on creating POSTs; without one the
   * request simply runs.
   */
  idempotent?: boolean | 'optional';
  /**
   * Required on idempotent open routes (auth none): whom the request speaks for (signup: the
   * normalized email). Keys are scoped by its hash, so two people never share a key's answer.
   */
  idempotencyIdentity?: (body: B) => string;
  /**
   * Idempotent routes (true or 'optional') only: rewrites a stored body before it is replayed (the customer-session
   * mint answers customer_token: null on a replay, rule 4). Must not mutate its argument.
   */
  replayTransform?: (body: unknown) => unknown;
  /**
   * The route honours If-Match (a safe edit: 409 stale_write when it names another version);
   * OpenAPI declares the header. Documentation only: the handler reads it.
   */
  ifMatch?: boolean;
  /**
   * Documented success responses, for OpenAPI: `schema` is the body (every 2xx but 204 has one),
   * `etag` says the answer carries ETag: "<version>" (set by the handler).
   */
  responses: Record<number, { description: string; schema?: z.ZodType; etag?: boolean }>;
  handler: (ctx: RequestContext<B, Q>) => Promise<Reply> | Reply;
}

/** Helper that keeps B and Q inferred from the schemas. */
export function route<B, Q>(def: RouteDef<B, Q>): RouteDef<B, Q> {
  return def;
}

/**
 * A route of any body/query type, for lists of routes. `any` is needed because handler
 * parameters are contravariant: a RouteDef<{a: string}> is not a RouteDef<unknown>.
 */
// biome-ignore lint/suspicious/noExplicitAny: see above; the schemas keep each route's types.
export type AnyRoute = RouteDef<any, any>;

/** The environment a credential acts in; routes that need one call this (environment_required). */
export function environmentIdOf(principal: Principal): string {
  if (principal.environment === null) throw new ApiError('environment_required');
  return principal.environment.id;
}
