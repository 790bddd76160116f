// The HTTP gateway on uWebSockets.js and the transport-free pipeline behind it (invoke(), used by
// the gRPC public API): route -> auth -> body (415/invalid_json) -> validation -> idempotency ->
// handler -> error mapping. Every answer carries Request-Id; errors have the one wire shape.
// uWS rules: onAborted first, copy request data synchronously, cap the body, write inside cork(),
// never touch a response after abort. The pipeline stays synchronous until something really
// awaits, and the write path uses no per-request closures (hot path: POST /v1/events).
import { STATUS_CODES } from 'node:http';
import { performance } from 'node:perf_hooks';
import uWS from 'uWebSockets.js';
import { ApiError } from '../errors/api-error.js';
import { newId } from '../ids.js';
import { limits } from '../limits.js';
import type { Logger } from '../observability/logger.js';
import { HttpObserver, publicGrpcRequestDuration, registry } from '../observability/metrics.js';
import type { IdempotencyStore } from '../persistence/ports.js';
import type { Principal } from '../tenancy/types.js';
import {
  answerCustomerIds,
  callIdOf,
  ClaimKeeper,
  claimIdempotency,
  fingerprintOf,
  idempotencyKeyOf,
  idempotencyScopeOf,
  idempotencyStaleAfterMs,
  isStorable,
  replayedHeadersOf,
} from './idempotency.js';
import { buildOpenApiDocument } from './openapi.js';
import type { AnyRoute, AuthSpec, Method, Reply, RequestContext } from './route.js';
import { Router } from './router.js';
import { validate } from './validation.js';
import { type BodyProblem, checkBody, isUnstorableText, nonFiniteNumberPath, unstorableTextPath } from '../util/body-check.js';

export type CredentialSpec = Extract<AuthSpec, { kind: 'credential' }>;

export interface AuthInput {
  authorization?: string;
  environment?: string;
  origin?: string;
}

export type Authenticate = (req: AuthInput, spec: CredentialSpec) => Principal | Promise<Principal>;

export interface GatewayOptions {
  routes: readonly AnyRoute[];
  /** May throw ApiError (authentication_required, insufficient_scope, ...). */
  authenticate: Authenticate;
  idempotency: IdempotencyStore;
  /**
   * How long an in_progress Idempotency-Key claim may go untouched before a repeat takes it
   * over (its process died); running requests touch theirs every third of it. Default 60 s.
   */
  idempotencyStaleAfterMs?: number;
  logger: Logger;
  ready: () => Promise<{ ok: boolean; checks: Record<string, boolean | number | string> }>;
  /** How long close() waits for in-flight requests. Default 10 s. */
  drainTimeoutMs?: number;
  openapiInfo?: { title?: string; version?: string };
}

export interface InvokeRequest {
  method: string;
  /** Path without the query string. */
  path: string;
  /** Raw query string without '?'. */
  query?: string;
  headers: Record<string, string>;
  /** A JSON value, or the raw body as a string/Buffer (then parsed like HTTP). */
  body?: unknown;
  /**
   * Answered once the credential passed the route's checks, and nothing else runs: a field the
   * route needs and the caller's transport carries outside the path is missing (gRPC GetState
   * without customer_id). The credential is refused first, as HTTP refuses it before the body.
   */
  refuseAfterAuth?: ApiError;
}

export interface InvokeResponse {
  status: number;
  /** Lower-case names. */
  headers: Record<string, string>;
  /** Parsed JSON (or text for non-JSON answers such as /metrics); undefined when empty. */
  body: unknown;
}

export interface Gateway {
  /** Resolves with the bound port (port 0 picks a free one). */
  listen(host: string, port: number): Promise<number>;
  /** Stops accepting, waits (bounded) for in-flight requests, then drops idle connections. */
  close(): Promise<void>;
  /** The same pipeline as HTTP, without HTTP. */
  invoke(req: InvokeRequest): Promise<InvokeResponse>;
}

/** A finished answer before the transport writes it. */
interface Out {
  status: number;
  /** Extra headers, lower-case names; Request-Id and Content-Type are added by the writer. */
  headers: Record<string, string> | null;
  text: string | undefined;
  contentType: string;
  /** Error code, when the answer is an error (idempotency storage decisions). */
  code: string | undefined;
}

/** What the pipeline needs from a request, copied out of the transport. */
interface Incoming {
  requestId: string;
  method: string;
  path: string;
  query: string;
  headers: Record<string, string>;
  rawBody: Buffer;
  /** Set when the caller (invoke) passed an already-parsed JSON value. */
  /** A body handed over already parsed (invoke), with what checkBody found in it. */
  parsedBody: { value: unknown; problem: BodyProblem } | null;
  receivedAtMs: number;
  /** The matched route, set by run() or by a 413 before it (the metrics observer of the answer). */
  entry: Entry | null;
}

type RawHandler = (inc: Incoming) => Out | Promise<Out>;

interface Entry {
  route: AnyRoute | null;
  raw: RawHandler | null;
  observer: HttpObserver;
  /** The same route's work through invoke() (the public gRPC API). */
  invokeObserver: HttpObserver;
}

const jsonType = 'application/json';
const emptyBody = Buffer.alloc(0);
const bodyMethods = new Set(['POST', 'PATCH', 'PUT']);
const knownMethods = new Set(['GET', 'POST', 'PATCH', 'DELETE', 'PUT']);

// CORS. Every credential is a bearer token in Authorization (never a cookie), so a page of another
// origin learns nothing it could not ask for with its own token: any Origin is answered, and a
// publishable key's allowed_origins is enforced on the request itself (403 origin_not_allowed).
/** Request headers a browser may send (preflight answer). */
const corsRequestHeaders = 'Authorization, Content-Type, Idempotency-Key, If-Match, X-Service-Environment';
/** Response headers a browser's script may read. */
const corsExposedHeaders = 'Request-Id, ETag, Idempotent-Replayed, Retry-After';
const corsMaxAgeSeconds = '600';

function writeCors(res: uWS.HttpResponse, origin: string): void {
  res.writeHeader('access-control-allow-origin', origin);
  res.writeHeader('access-control-expose-headers', corsExposedHeaders);
  res.writeHeader('vary', 'Origin');
}

const statusLines = new Map<number, string>();
function statusLine(status: number): string {
  let line = statusLines.get(status);
  if (line === undefined) {
    line = `${status} ${STATUS_CODES[status] ?? 'Unknown'}`;
    statusLines.set(status, line);
  }
  return line;
}

function isThenable<T>(x: T | Promise<T>): x is Promise<T> {
  return typeof (x as { then?: unknown } | null)?.then === 'function';
}

const unstorableTextMessage = 'Strings and keys may not contain U+0000 or an unpaired surrogate (\\ud800-\\udfff without its pair).';
const nonFiniteNumberMessage = 'Numbers must be finite: beyond about ±1.8e308 (or NaN) a number cannot be stored.';

/**
 * The answer to a body checkBody refused (util/body-check.ts): too deep, holding text PostgreSQL
 * cannot store, or a number JSON cannot carry back; the last two name the first such value.
 */
function badBody(value: unknown, problem: Exclude<BodyProblem, null>): ApiError {
  if (problem === 'too_deep') {
    const message = `A request body nests objects and arrays at most ${limits.jsonDepthMax} levels deep.`;
    return new ApiError('validation_failed', { message, param: 'body', details: [{ param: 'body', message }] });
  }
  const text = problem === 'unstorable_text';
  const message = text ? unstorableTextMessage : nonFiniteNumberMessage;
  const param = (text ? unstorableTextPath(value) : nonFiniteNumberPath(value)) || 'body';
  return new ApiError('validation_failed', { message, param, details: [{ param, message }] });
}

/** application/json with optional parameters (charset); nothing else. */
export function isJsonContentType(value: string | undefined): boolean {
  if (value === undefined || value.length < 16) return false;
  const lower = value.toLowerCase();
  if (!lower.startsWith(jsonType)) return false;
  if (lower.length === 16) return true;
  const c = lower.charCodeAt(16);
  return c === 59 /* ; */ || c === 32 /* space */ || c === 9 /* tab */;
}

/** Query string -> object; a repeated key becomes an array. */
export function parseQuery(query: string): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  if (query.length === 0) return out;
  for (const [k, v] of new URLSearchParams(query)) {
    const prev = out[k];
    if (prev === undefined) out[k] = v;
    else if (Array.isArray(prev)) prev.push(v);
    else out[k] = [prev, v];
  }
  return out;
}

function jsonOut(status: number, body: unknown, headers: Record<string, string> | null = null): Out {
  return { status, headers, text: JSON.stringify(body), contentType: jsonType, code: undefined };
}

// uWS calls forEach/cork callbacks synchronously, so these module slots stand in for closures.
let copyTarget: Record<string, string> = {};
function copyHeader(key: string, value: string): void {
  const prev = copyTarget[key];
  copyTarget[key] = prev === undefined ? value : `${prev}, ${value}`;
}

export function createGateway(opts: GatewayOptions): Gateway {
  const { authenticate, idempotency, logger } = opts;
  const drainTimeoutMs = opts.drainTimeoutMs ?? 10_000;
  const staleAfterMs = opts.idempotencyStaleAfterMs ?? idempotencyStaleAfterMs;
  const router = new Router<Entry>();

  for (const r of opts.routes) {
    if (!r.path.startsWith('/v1/')) throw new Error(`route ${r.method} ${r.path}: API routes live under /v1/`);
    if ((r.idempotent === true || r.idempotent === 'optional') && r.auth.kind === 'none' && r.idempotencyIdentity === undefined) {
      throw new Error(`route ${r.method} ${r.path}: an open idempotent route names its idempotencyIdentity`);
    }
    router.add(r.method, r.path, {
      route: r,
      raw: null,
      observer: new HttpObserver(r.method, r.path),
      invokeObserver: new HttpObserver(r.method, r.path, publicGrpcRequestDuration),
    });
  }

  let openapiText: string | undefined;
  const addRaw = (path: string, raw: RawHandler) =>
    router.add('GET', path, { route: null, raw, observer: new HttpObserver('GET', path), invokeObserver: new HttpObserver('GET', path, publicGrpcRequestDuration) });
  addRaw('/healthz', () => jsonOut(200, { status: 'ok' }));
  addRaw('/readyz', async () => {
    let result: { ok: boolean; checks: Record<string, boolean | number | string> };
    try {
      result = await opts.ready();
    } catch (err) {
      logger.warn({ err }, 'readiness check threw');
      result = { ok: false, checks: { ready: err instanceof Error ? err.message : 'failed' } };
    }
    return jsonOut(result.ok ? 200 : 503, { status: result.ok ? 'ok' : 'unavailable', checks: result.checks });
  });
  addRaw('/metrics', async () => ({
    status: 200,
    headers: null,
    text: await registry.metrics(),
    contentType: registry.contentType,
    code: undefined,
  }));
  addRaw('/v1/openapi.json', () => {
    openapiText ??= JSON.stringify(buildOpenApiDocument(opts.routes, opts.openapiInfo));
    return { status: 200, headers: null, text: openapiText, contentType: jsonType, code: undefined };
  });

  const unmatched = new Map<string, HttpObserver>();
  const unmatchedInvoke = new Map<string, HttpObserver>();
  for (const m of [...knownMethods, 'OTHER']) {
    unmatched.set(m, new HttpObserver(m, 'unmatched'));
    unmatchedInvoke.set(m, new HttpObserver(m, 'unmatched', publicGrpcRequestDuration));
  }

  // ---- pipeline -------------------------------------------------------------------------------

  function errorOut(err: unknown, inc: Incoming): Out {
    let api: ApiError;
    if (err instanceof ApiError) {
      api = err;
      if (api.status >= 500) logger.warn({ code: api.code, request_id: inc.requestId, path: inc.path }, api.message);
    } else {
      logger.error({ err, request_id: inc.requestId, method: inc.method, path: inc.path }, 'unhandled error');
      api = new ApiError('internal_error');
    }
    let text: string;
    try {
      text = JSON.stringify(api.toBody(inc.requestId));
    } catch (serErr) {
      // details that do not serialize (BigInt, cycles) are a bug in the thrower; keep the code.
      logger.error({ err: serErr, request_id: inc.requestId }, 'error details not serializable');
      text = JSON.stringify(new ApiError(api.code).toBody(inc.requestId));
    }
    const headers =
      api.retryAfterSeconds === undefined ? null : { 'retry-after': String(Math.max(0, Math.ceil(api.retryAfterSeconds))) };
    return { status: api.status, headers, text, contentType: jsonType, code: api.code };
  }

  function replyOut(reply: Reply, inc: Incoming): Out {
    let headers: Record<string, string> | null = null;
    if (reply.headers !== undefined) {
      headers = {};
      for (const k in reply.headers) headers[k.toLowerCase()] = reply.headers[k]!;
    }
    let text: string | undefined;
    try {
      text = reply.body === undefined ? undefined : JSON.stringify(reply.body);
    } catch (err) {
      return errorOut(err, inc);
    }
    return { status: reply.status, headers, text, contentType: jsonType, code: undefined };
  }

  /** The request body as JSON, or undefined when empty / not a body method. Throws 415/400. */
  function bodyOf(inc: Incoming): unknown {
    if (inc.parsedBody !== null) {
      if (inc.parsedBody.problem !== null) throw badBody(inc.parsedBody.value, inc.parsedBody.problem);
      return inc.parsedBody.value;
    }
    if (!bodyMethods.has(inc.method) || inc.rawBody.length === 0) return undefined;
    const ct = inc.headers['content-type'];
    if (!isJsonContentType(ct)) throw new ApiError('unsupported_media_type', { param: 'Content-Type' });
    let value: unknown;
    try {
      value = JSON.parse(inc.rawBody.toString('utf8')) as unknown;
    } catch {
      throw new ApiError('invalid_json');
    }
    const problem = checkBody(value, limits.jsonDepthMax);
    if (problem !== null) throw badBody(value, problem);
    return value;
  }

  /**
   * A request no route takes as it is: OPTIONS (a CORS preflight, or a plain question) answers
   * 204 with the path's methods; a known path with another method stays 404 route_not_found (the
   * spec's code for it) but names the methods the path takes.
   */
  function unrouted(inc: Incoming): Out {
    const methods = methodsAt(inc.path);
    if (methods.length === 0) return errorOut(new ApiError('route_not_found'), inc);
    const allow = [...methods, ...(methods.includes('GET') ? ['HEAD'] : []), 'OPTIONS'].join(', ');
    if (inc.method !== 'OPTIONS') {
      const message = `No route for ${inc.method} ${inc.path}; it takes ${allow}.`;
      const out = errorOut(new ApiError('route_not_found', { message }), inc);
      return { ...out, headers: { ...out.headers, allow } };
    }
    const headers: Record<string, string> = { allow };
    if (inc.headers.origin !== undefined && inc.headers['access-control-request-method'] !== undefined) {
      headers['access-control-allow-methods'] = allow;
      headers['access-control-allow-headers'] = corsRequestHeaders;
      headers['access-control-max-age'] = corsMaxAgeSeconds;
    }
    return { status: 204, headers, text: undefined, contentType: jsonType, code: undefined };
  }

  /** The methods some route takes at this path (OPTIONS and wrong-method answers only). */
  function methodsAt(path: string): string[] {
    const out: string[] = [];
    for (const m of knownMethods) if (router.find(m, path) !== null) out.push(m);
    return out;
  }

  /**
   * A body too large is answered before run() looks the route up (by Content-Length, or as the
   * upload passes the cap): look it up here so the answer is counted under the route it was sent
   * to, not under "unmatched" with the 404s.
   */
  function tooLargeOut(inc: Incoming): Out {
    inc.entry ??= router.find(inc.method === 'HEAD' ? 'GET' : inc.method, inc.path)?.value ?? null;
    return errorOut(new ApiError('body_too_large'), inc);
  }

  function run(inc: Incoming): Out | Promise<Out> {
    // HEAD is GET without the body (the writer leaves it out).
    const match = router.find(inc.method === 'HEAD' ? 'GET' : inc.method, inc.path);
    if (match === null) return unrouted(inc);
    const entry = match.value;
    inc.entry = entry;
    if (entry.raw !== null) {
      try {
        const out = entry.raw(inc);
        return isThenable(out) ? out.catch((err: unknown) => errorOut(err, inc)) : out;
      } catch (err) {
        return errorOut(err, inc);
      }
    }
    const route = entry.route!;
    const auth = route.auth;
    if (auth.kind === 'none') return afterAuth(route, match.params, inc, null);
    try {
      const h = inc.headers;
      const p = authenticate(
        { authorization: h.authorization, environment: h['x-service-environment'], origin: h.origin },
        auth,
      );
      if (isThenable(p)) {
        return p.then(
          (principal) => afterAuth(route, match.params, inc, principal),
          (err: unknown) => errorOut(err, inc),
        );
      }
      return afterAuth(route, match.params, inc, p);
    } catch (err) {
      return errorOut(err, inc);
    }
  }

  function afterAuth(
    route: AnyRoute,
    rawParams: Record<string, string>,
    inc: Incoming,
    principal: Principal | null,
  ): Out | Promise<Out> {
    try {
      const json = bodyOf(inc);
      // An id PostgreSQL cannot even hold names nothing; a filter it cannot hold is bad input.
      for (const k in rawParams) if (isUnstorableText(rawParams[k]!)) throw new ApiError('resource_not_found', { param: k });
      const params = route.params === undefined ? rawParams : validate(route.params, rawParams, 'params');
      const rawQuery = parseQuery(inc.query);
      for (const k in rawQuery) {
        const v = rawQuery[k]!;
        if (isUnstorableText(k) || (typeof v === 'string' ? isUnstorableText(v) : v.some(isUnstorableText))) {
          throw new ApiError('validation_failed', { param: isUnstorableText(k) ? undefined : k, message: unstorableTextMessage });
        }
      }
      const query = route.query === undefined ? rawQuery : validate(route.query, rawQuery, 'query');
      // Creating POSTs require a key; where it is optional, one that is sent counts the same (an
      // empty or overlong one is refused), and without one the request simply runs.
      const key =
        route.idempotent === true || (route.idempotent === 'optional' && inc.headers['idempotency-key'] !== undefined)
          ? idempotencyKeyOf(inc.headers)
          : null;
      // An empty body counts as {} for routes with a body schema (bodiless creating POSTs).
      const body = route.body === undefined ? json : validate(route.body, json === undefined ? {} : json, 'body');
      const ctx: RequestContext = {
        requestId: inc.requestId,
        method: inc.method as Method,
        path: inc.path,
        params,
        query,
        headers: inc.headers,
        body,
        rawBody: inc.rawBody,
        // Routes with auth 'none' have no principal; RouteDef documents principal as credential-only.
        principal: principal as Principal,
        receivedAtMs: inc.receivedAtMs,
      };
      if (key !== null) return runIdempotent(route, ctx, inc, principal, key, json);
      const reply = route.handler(ctx);
      if (isThenable(reply)) {
        return reply.then(
          (r) => replyOut(r, inc),
          (err: unknown) => errorOut(err, inc),
        );
      }
      return replyOut(reply, inc);
    } catch (err) {
      return errorOut(err, inc);
    }
  }

  async function runIdempotent(
    route: AnyRoute,
    ctx: RequestContext,
    inc: Incoming,
    principal: Principal | null,
    key: string,
    json: unknown,
  ): Promise<Out> {
    const scope = idempotencyScopeOf(principal, principal === null ? route.idempotencyIdentity?.(ctx.body) : undefined);
    const fingerprint = fingerprintOf(inc.method, inc.path, json);
    let stored: Awaited<ReturnType<typeof claimIdempotency>>;
    try {
      stored = await claimIdempotency(idempotency, scope, key, fingerprint, staleAfterMs);
    } catch (err) {
      return errorOut(err, inc);
    }
    if (stored !== null) return replayOut(route, stored.status, stored.body, stored.headers, inc);
    ctx.callId = callIdOf(scope, key, fingerprint);

    // While the handler runs, its claim is touched so no repeat takes it for a dead one.
    const keeper = new ClaimKeeper(idempotency, scope, key, staleAfterMs / 3, (problem, err) =>
      logger.warn({ err, problem, request_id: inc.requestId, path: inc.path }, 'idempotency claim not kept alive'),
    );
    let out: Out;
    let customerIds: readonly string[] | undefined;
    try {
      const reply = await route.handler(ctx);
      customerIds = reply.customerIds;
      out = replyOut(reply, inc);
    } catch (err) {
      out = errorOut(err, inc);
    } finally {
      keeper.stop();
    }
    try {
      if (isStorable(out.status, out.code)) {
        // Secrets shown once (tokens) must not rest in the store: keep what a replay would show.
        let text = out.text ?? '';
        if (route.replayTransform !== undefined && out.status < 300 && text.length > 0) {
          text = JSON.stringify(route.replayTransform(JSON.parse(text)));
        }
        const about = answerCustomerIds(out.text ?? '', customerIds);
        await idempotency.complete(scope, key, out.status, text, replayedHeadersOf(out.headers), limits.idempotencyRetentionMs, about);
      } else {
        await idempotency.release(scope, key);
      }
    } catch (err) {
      // The work is done; answer it. The claim goes stale and a retry runs the handler again after
      // staleAfterMs (as after a 5xx, whose claim is released). What the actors applied is not
      // applied twice: the handlers pass ctx.callId, the same in every run, on the commands the
      // actors remember (actors/calls.ts: ledger entries, issuances, customers created, segment
      // members), and a run again gets the first run's answer; match reviews dedupe by their
      // event ids. Creates that insert rows in PostgreSQL (rewards, rules, segments, currencies,
      // campaigns, API keys, organizations, change sets and their applications, ...) record
      // ctx.callId with the resource in the same transaction (persistence/sql/create-calls.ts): a
      // run again answers the resource the first run created, as it is now (an API key's or a
      // signup's token null: shown once); a test clock's advance records it the same way and a run
      // again answers the clock as it is. Not covered (README, durability contract): other action
      // POSTs (rule publish and rollback, campaign and challenge operations, counter backfills)
      // change nothing twice but may answer a run again differently (409 where the first run
      // already did it), and a customer session mint makes another token.
      logger.error({ err, request_id: inc.requestId, path: inc.path }, 'idempotency store write failed');
    }
    return out;
  }

  function replayOut(
    route: AnyRoute,
    status: number,
    text: string,
    stored: Record<string, string> | null,
    inc: Incoming,
  ): Out {
    let body = text.length === 0 ? undefined : text;
    if (body !== undefined && route.replayTransform !== undefined) {
      try {
        body = JSON.stringify(route.replayTransform(JSON.parse(body)));
      } catch (err) {
        return errorOut(err, inc);
      }
    }
    // Answers stored before headers were have none: they replay as they did then.
    const headers: Record<string, string> = stored === null ? {} : { ...stored };
    headers['idempotent-replayed'] = 'true';
    return { status, headers, text: body, contentType: jsonType, code: undefined };
  }

  // ---- in-flight accounting ---------------------------------------------------------------------

  let inflight = 0;
  let closing = false;
  const drainWaiters: Array<() => void> = [];
  function done(): void {
    inflight--;
    if (inflight === 0 && drainWaiters.length > 0) for (const w of drainWaiters.splice(0)) w();
  }

  // ---- invoke -----------------------------------------------------------------------------------

  /** invoke's refuseAfterAuth: run()'s route lookup and authentication, then that error. */
  function refuseAfterAuth(inc: Incoming, refusal: ApiError): Out | Promise<Out> {
    const match = router.find(inc.method, inc.path);
    if (match === null) return unrouted(inc);
    inc.entry = match.value;
    const route = match.value.route;
    if (route === null || route.auth.kind === 'none') return errorOut(refusal, inc);
    try {
      const h = inc.headers;
      const p = authenticate({ authorization: h.authorization, environment: h['x-service-environment'], origin: h.origin }, route.auth);
      if (isThenable(p)) {
        return p.then(
          () => errorOut(refusal, inc),
          (err: unknown) => errorOut(err, inc),
        );
      }
      return errorOut(refusal, inc);
    } catch (err) {
      return errorOut(err, inc);
    }
  }

  async function invoke(req: InvokeRequest): Promise<InvokeResponse> {
    const headers: Record<string, string> = {};
    for (const k in req.headers) headers[k.toLowerCase()] = req.headers[k]!;
    const inc: Incoming = {
      requestId: newId('req'),
      method: req.method.toUpperCase(),
      path: req.path,
      query: req.query ?? '',
      headers,
      rawBody: emptyBody,
      parsedBody: null,
      receivedAtMs: Date.now(),
      entry: null,
    };
    const startedAt = performance.now();
    inflight++;
    try {
      const b = req.body;
      if (typeof b === 'string' || b instanceof Uint8Array) {
        inc.rawBody = typeof b === 'string' ? Buffer.from(b) : Buffer.from(b.buffer, b.byteOffset, b.byteLength);
        // gRPC callers send no Content-Type; their bodies are JSON by contract.
        headers['content-type'] ??= jsonType;
      } else if (b !== undefined) {
        // One walk; what it finds (too deep, unstorable text, numbers JSON cannot carry: NaN,
        // ±Infinity, which stringify writes as null) is refused after auth by bodyOf, in the same
        // order as over HTTP. A body too deep for JSON.stringify's stack keeps an unknown size (0):
        // refused as too deep, never as too large.
        const problem = checkBody(b, limits.jsonDepthMax);
        let text: string | undefined;
        try {
          text = JSON.stringify(b);
        } catch (err) {
          if (problem !== 'too_deep') throw err;
        }
        if (text !== undefined) inc.rawBody = Buffer.from(text);
        if (bodyMethods.has(inc.method)) inc.parsedBody = { value: b, problem };
      }
      const refusal = req.refuseAfterAuth;
      const out =
        inc.rawBody.length > limits.bodyBytesMax
          ? tooLargeOut(inc)
          : refusal === undefined
            ? await run(inc)
            : await refuseAfterAuth(inc, refusal);
      const outHeaders: Record<string, string> = { 'request-id': inc.requestId };
      if (out.text !== undefined) outHeaders['content-type'] = out.contentType;
      if (out.headers !== null) Object.assign(outHeaders, out.headers);
      let body: unknown;
      if (out.text !== undefined) body = out.contentType === jsonType ? JSON.parse(out.text) : out.text;
      const observer = inc.entry?.invokeObserver ?? unmatchedInvoke.get(knownMethods.has(inc.method) ? inc.method : 'OTHER')!;
      observer.observe(out.status, (performance.now() - startedAt) / 1000);
      return { status: out.status, headers: outHeaders, body };
    } finally {
      done();
    }
  }

  // ---- HTTP transport -----------------------------------------------------------------------------

  /** Per-request transport state; the uWS callbacks are its two bound methods. */
  class Exchange {
    aborted = false;
    finished = false;
    received = 0;
    chunks: Buffer[] | null = null;
    readonly startedAt = performance.now();
    constructor(
      readonly res: uWS.HttpResponse,
      readonly inc: Incoming,
    ) {}

    onAborted = (): void => {
      this.aborted = true;
      if (!this.finished) {
        this.finished = true;
        done();
      }
    };

    onData = (chunk: ArrayBuffer, isLast: boolean): void => {
      if (this.finished) return;
      const n = chunk.byteLength;
      this.received += n;
      if (this.received > limits.bodyBytesMax) {
        // Stop buffering: answer now and close, so the rest of the upload is never read.
        this.chunks = null;
        this.write(tooLargeOut(this.inc), true);
        return;
      }
      // uWS neuters the ArrayBuffer after this callback: slice() copies it.
      if (n > 0) (this.chunks ??= []).push(Buffer.from(chunk.slice(0)));
      if (!isLast) return;
      const chunks = this.chunks;
      this.chunks = null;
      this.inc.rawBody = chunks === null ? emptyBody : chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
      this.dispatch();
    };

    dispatch(): void {
      let out: Out | Promise<Out>;
      try {
        out = run(this.inc);
      } catch (err) {
        // run() maps errors itself; this only guards the native callback from a throw.
        out = { status: 500, headers: null, text: undefined, contentType: jsonType, code: 'internal_error' };
        try {
          out = errorOut(err, this.inc);
        } catch {
          // keep the bare 500
        }
      }
      if (isThenable(out)) {
        out.then(
          (o) => this.write(o, false),
          (err: unknown) => this.write(errorOut(err, this.inc), false),
        );
      } else this.write(out, false);
    }

    write(out: Out, close: boolean): void {
      if (this.finished) return;
      this.finished = true;
      corkExchange = this;
      corkOut = out;
      corkClose = close || closing;
      this.res.cork(writeCorked);
      corkExchange = null;
      corkOut = null;
      done();
      const seconds = (performance.now() - this.startedAt) / 1000;
      const observer =
        this.inc.entry?.observer ?? unmatched.get(knownMethods.has(this.inc.method) ? this.inc.method : 'OTHER')!;
      observer.observe(out.status, seconds);
    }
  }

  let corkExchange: Exchange | null = null;
  let corkOut: Out | null = null;
  let corkClose = false;
  function writeCorked(): void {
    const x = corkExchange!;
    const out = corkOut!;
    const res = x.res;
    res.writeStatus(statusLine(out.status));
    res.writeHeader('request-id', x.inc.requestId);
    if (out.text !== undefined) res.writeHeader('content-type', out.contentType);
    const h = out.headers;
    if (h !== null) for (const k in h) res.writeHeader(k, h[k]!);
    const origin = x.inc.headers.origin;
    if (origin !== undefined) writeCors(res, origin);
    if (x.inc.method === 'HEAD') res.endWithoutBody(out.text === undefined ? 0 : Buffer.byteLength(out.text), corkClose);
    else res.end(out.text, corkClose);
  }

  const app = uWS.App();
  app.any('/*', (res, req) => {
    const headers: Record<string, string> = {};
    copyTarget = headers;
    req.forEach(copyHeader);
    const inc: Incoming = {
      requestId: newId('req'),
      method: req.getCaseSensitiveMethod().toUpperCase(),
      path: req.getUrl(),
      query: req.getQuery() ?? '',
      headers,
      rawBody: emptyBody,
      parsedBody: null,
      receivedAtMs: Date.now(),
      entry: null,
    };
    const x = new Exchange(res, inc);
    res.onAborted(x.onAborted);
    inflight++;
    const cl = headers['content-length'];
    if (cl !== undefined && Number(cl) > limits.bodyBytesMax) {
      x.write(tooLargeOut(inc), true);
      return;
    }
    res.onData(x.onData);
  });

  let listenSocket: uWS.us_listen_socket | null = null;

  return {
    listen(host: string, port: number): Promise<number> {
      return new Promise((resolve, reject) => {
        // Exclusive: uWebSockets.js otherwise sets SO_REUSEPORT, and a second process started on
        // a taken port would share it (the kernel splitting requests between two services).
        // (The typings offer the option only without a host; the module exports its value.)
        const exclusive = (uWS as unknown as { LIBUS_LISTEN_EXCLUSIVE_PORT: uWS.ListenOptions }).LIBUS_LISTEN_EXCLUSIVE_PORT;
        const listenWith = app.listen as unknown as (
          host: string,
          port: number,
          options: uWS.ListenOptions,
          cb: (socket: uWS.us_listen_socket | false) => void,
        ) => uWS.TemplatedApp;
        listenWith.call(app, host, port, exclusive, (socket) => {
          if (socket === false) {
            reject(new Error(`cannot listen on ${host}:${port}`));
            return;
          }
          listenSocket = socket;
          const bound = uWS.us_socket_local_port(socket as unknown as uWS.us_socket);
          logger.info({ host, port: bound }, 'http gateway listening');
          resolve(bound);
        });
      });
    },

    async close(): Promise<void> {
      closing = true;
      if (listenSocket !== null) {
        uWS.us_listen_socket_close(listenSocket);
        listenSocket = null;
      }
      if (inflight > 0) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, drainTimeoutMs);
          timer.unref();
          drainWaiters.push(() => {
            clearTimeout(timer);
            resolve();
          });
        });
        if (inflight > 0) logger.warn({ inflight }, 'closing with requests still in flight');
      }
      // Idle keep-alive connections would keep the process alive; this build has app.close().
      const closable = app as unknown as { close?: () => void };
      if (typeof closable.close === 'function') closable.close();
    },

    invoke,
  };
}
