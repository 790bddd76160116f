// The public gRPC API (Events, Matches, Customers) as a thin adapter over the HTTP gateway's
// in-process pipeline (invoke): every RPC becomes the equivalent /v1 request, so routing, auth,
// validation, idempotency and handlers are the HTTP ones and semantics cannot drift.
// Invariants: a batch answers one result per event in request order; a stream acknowledges every
// message it runs (every message it reads, unless the credential is refused), events of one
// customer in arrival order; a failed call carries the API error code in trailing metadata. Never
// decides anything an HTTP handler decides.
import type { InvokeRequest, InvokeResponse } from '../gateway/server.js';
import {
  Metadata,
  type sendUnaryData,
  Server,
  type ServerCredentials,
  type ServerDuplexStream,
  type ServerUnaryCall,
  ServerCredentials as ServerCreds,
  type StatusObject,
  status as grpcStatus,
} from '@grpc/grpc-js';
import { ApiError } from '../errors/api-error.js';
import type { Error as ErrorMessage } from './gen/public/v1/common.js';
import { CustomersService, type GetStateRequest, type GetStateResponse } from './gen/public/v1/customers.js';
import {
  type Event,
  type EventResult,
  EventsService,
  type IngestBatchRequest,
  type IngestBatchResponse,
  IngestMode,
  type IngestStreamRequest,
  type IngestStreamResponse,
} from './gen/public/v1/events.js';
import { MatchesService, type ReportRequest, type ReportResponse } from './gen/public/v1/matches.js';
import { isRecord } from '../util/is-record.js';

/** The gateway pipeline without HTTP (gateway.invoke). */
export type { InvokeRequest, InvokeResponse };
export type Invoke = (req: InvokeRequest) => Promise<InvokeResponse>;

export const publicGrpcLimits = {
  /**
   * Messages of one IngestStream running, or answered with an ack the client has not taken yet
   * (not yet handed to the connection: HTTP/2 flow control holds acks back while the client
   * reads none); reading pauses at this many.
   */
  streamInFlightMax: 64,
  /**
   * Calls open at once on one connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): with the
   * window above, what one connection can make the server hold is bounded too.
   */
  streamsPerConnectionMax: 100,
  closeGraceMsDefault: 10_000,
  /** error-param and error-details longer than this (encoded) are left out of the trailers. */
  metadataValueCharsMax: 8192,
} as const;

/** Metadata keys copied to the gateway request as headers (credentials and their scope). */
const forwardedMetadata = ['authorization', 'x-service-environment', 'idempotency-key', 'origin'] as const;

/** 409 codes meaning "this already exists" (a create or an id collided). */
const alreadyExistsCodes = new Set(['already_exists', 'event_id_conflict', 'alias_conflict']);
/** 409 codes that are concurrency conflicts: read again or wait, then retry. */
const abortedCodes = new Set(['stale_write', 'idempotency_in_progress']);

/** The gRPC status for an HTTP error status (and, for 409, the API error code). */
export function grpcStatusFor(httpStatus: number, code = ''): grpcStatus {
  switch (httpStatus) {
    case 400:
    case 413:
    case 415:
    case 422:
      return grpcStatus.INVALID_ARGUMENT;
    case 401:
      return grpcStatus.UNAUTHENTICATED;
    case 403:
      return grpcStatus.PERMISSION_DENIED;
    case 404:
      return grpcStatus.NOT_FOUND;
    case 409:
      if (alreadyExistsCodes.has(code)) return grpcStatus.ALREADY_EXISTS;
      // Other conflicts are about the resource's state (balance, status, in use): retrying the
      // same call will not help until something else changes it.
      return abortedCodes.has(code) ? grpcStatus.ABORTED : grpcStatus.FAILED_PRECONDITION;
    case 429:
      return grpcStatus.RESOURCE_EXHAUSTED;
    case 501:
      return grpcStatus.UNIMPLEMENTED;
    case 502:
    case 503:
    case 504:
      return grpcStatus.UNAVAILABLE;
    default:
      return httpStatus >= 500 ? grpcStatus.INTERNAL : grpcStatus.UNKNOWN;
  }
}

interface WireError {
  code: string;
  type: string;
  message: string;
  param?: string;
  details?: unknown;
  request_id?: string;
}

/** The `error` object of an HTTP error body (or of a batch item); internal_error when absent. */
function wireErrorOf(body: unknown): WireError {
  const e = isRecord(body) ? body.error : undefined;
  if (isRecord(e) && typeof e.code === 'string') {
    const out: WireError = {
      code: e.code,
      type: typeof e.type === 'string' ? e.type : '',
      message: typeof e.message === 'string' ? e.message : '',
    };
    if (typeof e.param === 'string') out.param = e.param;
    if (e.details !== undefined) out.details = e.details;
    if (typeof e.request_id === 'string') out.request_id = e.request_id;
    return out;
  }
  const internal = new ApiError('internal_error').toBody('');
  return { code: internal.error.code, type: internal.error.type, message: internal.error.message };
}

/**
 * The gateway names an event's JSON field `properties`; over gRPC the caller sent
 * `properties_json`. Only that field is renamed (`properties...` or `events[N].properties...`), not
 * a caller's own key that happens to be called so (a metric or attribute named `properties`).
 */
function grpcParam(param: string | undefined): string {
  return param === undefined ? '' : param.replace(/^((?:events\[\d+\]\.)?)properties(?=$|\.)/, '$1properties_json');
}

/** `details` with each item's `param` named as over gRPC (a validation error's list of issues). */
function grpcDetails(details: unknown): unknown {
  if (!Array.isArray(details)) return details;
  return details.map((d: unknown) => (isRecord(d) && typeof d.param === 'string' ? { ...d, param: grpcParam(d.param) } : d));
}

function errorMessageOf(e: WireError): ErrorMessage {
  return {
    code: e.code,
    type: e.type,
    message: e.message,
    param: grpcParam(e.param),
    detailsJson: e.details === undefined ? '' : JSON.stringify(grpcDetails(e.details)),
    retryAfterSeconds: 0,
  };
}

/** An HTTP Retry-After header (whole seconds) as retry_after_seconds; 0 when absent. */
function retryAfterSecondsOf(headers: Record<string, string>): number {
  const v = headers['retry-after'];
  return v !== undefined && /^\d{1,9}$/.test(v) ? Number(v) : 0;
}

/** Matches text a metadata value carries as it is: printable ASCII without '%'. */
const plainMetadataText = /^[ -$&-~]*$/;

/**
 * Text as a metadata value, which gRPC allows only in printable ASCII: percent-encoded as
 * grpc-message is (each UTF-8 byte outside 0x20-0x7E, and '%', as %XX; decodeURIComponent reads
 * it back); plain ASCII is unchanged. Params and details quote the caller's own property names.
 * Null past metadataValueCharsMax: a trailer of a few hundred KB is dropped, or stalls the call
 * until its deadline (seen with grpc-js over HTTP/2).
 */
function metadataText(s: string): string | null {
  let out = s;
  if (!plainMetadataText.test(s)) {
    out = '';
    for (const byte of Buffer.from(s, 'utf8')) {
      out += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
    }
  }
  return out.length > publicGrpcLimits.metadataValueCharsMax ? null : out;
}

/**
 * A failed call: status from the HTTP status, API error fields in trailing metadata (details as
 * the JSON of the HTTP body's `details`).
 */
function callError(httpStatus: number, e: WireError, headers: Record<string, string> = {}): Partial<StatusObject> {
  const metadata = new Metadata();
  metadata.set('error-code', e.code);
  if (e.type !== '') metadata.set('error-type', e.type);
  const param = metadataText(grpcParam(e.param));
  if (param !== null && param !== '') metadata.set('error-param', param);
  const details = e.details === undefined ? null : metadataText(JSON.stringify(grpcDetails(e.details)));
  if (details !== null) metadata.set('error-details', details);
  const requestId = headers['request-id'] ?? e.request_id;
  if (requestId) metadata.set('request-id', requestId);
  const retryAfter = headers['retry-after'];
  if (retryAfter) metadata.set('retry-after', retryAfter);
  return { code: grpcStatusFor(httpStatus, e.code), details: e.message, metadata };
}

/** The trailing metadata of a successful call: its request-id, as every HTTP answer carries. */
function okTrailers(headers: Record<string, string>): Metadata {
  const metadata = new Metadata();
  const requestId = headers['request-id'];
  if (requestId) metadata.set('request-id', requestId);
  return metadata;
}

function apiCallError(err: ApiError): Partial<StatusObject> {
  return callError(err.status, wireErrorOf(err.toBody('')));
}

/** invoke() threw: a bug in the pipeline; never leak its message. */
function internalCallError(): Partial<StatusObject> {
  return apiCallError(new ApiError('internal_error'));
}

function headersOf(metadata: Metadata): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const key of forwardedMetadata) {
    const v = metadata.get(key)[0];
    if (typeof v === 'string') headers[key] = v;
  }
  return headers;
}

const is2xx = (status: number) => status >= 200 && status < 300;

/** Event -> the HTTP JSON event. badProperties: properties_json did not parse. */
function eventBody(e: Event | undefined): { body: Record<string, unknown>; badProperties: boolean } {
  const body: Record<string, unknown> = {};
  if (e === undefined) return { body, badProperties: false };
  // Empty proto3 strings are "not sent": omit them so validation reports a missing field.
  if (e.id !== '') body.id = e.id;
  if (e.name !== '') body.name = e.name;
  if (e.customerId !== '') body.customer_id = e.customerId;
  if (e.occurredAt !== '') body.occurred_at = e.occurredAt;
  if (e.propertiesJson === '') return { body, badProperties: false };
  try {
    body.properties = JSON.parse(e.propertiesJson);
    return { body, badProperties: false };
  } catch {
    // Sent on as a string: the gateway refuses it as not an object (nothing is journaled), in
    // its usual check order, and the refusal is then reworded below.
    body.properties = e.propertiesJson;
    return { body, badProperties: true };
  }
}

function badPropertiesError(param: string): ErrorMessage {
  return {
    code: 'validation_failed',
    type: 'invalid_request',
    message: 'properties_json is not valid JSON.',
    param,
    detailsJson: '',
    retryAfterSeconds: 0,
  };
}

/** Replaces the gateway's "properties is not an object" with "properties_json is not JSON". */
function rewordIfProperties(e: ErrorMessage, at: string): ErrorMessage {
  const expected = at === '' ? 'properties_json' : `${at}.properties_json`;
  return e.code === 'validation_failed' && e.param.startsWith(expected) ? badPropertiesError(expected) : e;
}

function modeOf(mode: IngestMode): string | undefined {
  if (mode === IngestMode.INGEST_MODE_UNSPECIFIED) return undefined;
  if (mode === IngestMode.INGEST_MODE_SYNC) return 'sync';
  return `unknown(${mode})`; // refused by validation with param "mode"
}

/** One successful or failed item of the HTTP answer -> EventResult. */
function eventResultOf(item: unknown, fallbackClientEventId: string): EventResult {
  const r = isRecord(item) ? item : {};
  const clientEventId = typeof r.client_event_id === 'string' ? r.client_event_id : fallbackClientEventId;
  if (r.error !== undefined || !isRecord(item)) {
    return { error: errorMessageOf(wireErrorOf(item)), clientEventId };
  }
  return {
    accepted: {
      id: typeof r.id === 'string' ? r.id : '',
      clientEventId,
      status: typeof r.status === 'string' ? r.status : '',
      duplicate: r.duplicate === true,
      effectsJson: r.effects === undefined ? '' : JSON.stringify(r.effects),
      fallback: r.fallback === true,
    },
    clientEventId,
  };
}

export interface PublicGrpcServerOptions {
  credentials?: ServerCredentials;
  streamInFlightMax?: number;
}

export interface PublicGrpcServer {
  /** The grpc-js server, for registering more services (health, reflection) before listen. */
  readonly server: Server;
  /** Resolves with the bound port (port 0 picks a free one). */
  listen(host: string, port: number): Promise<number>;
  /** Stops accepting; open calls get graceMs to finish, then are cut. */
  close(graceMs?: number): Promise<void>;
}

export function createPublicGrpcServer(invoke: Invoke, opts: PublicGrpcServerOptions = {}): PublicGrpcServer {
  const inFlightMax = opts.streamInFlightMax ?? publicGrpcLimits.streamInFlightMax;
  const server = new Server({ 'grpc.max_concurrent_streams': publicGrpcLimits.streamsPerConnectionMax });

  /** Runs invoke and turns a thrown bug into a 500 answer. */
  async function call(req: InvokeRequest): Promise<InvokeResponse> {
    try {
      return await invoke(req);
    } catch {
      return { status: 500, headers: {}, body: new ApiError('internal_error').toBody('') };
    }
  }

  function post(path: string, headers: Record<string, string>, body: unknown): Promise<InvokeResponse> {
    return call({ method: 'POST', path, headers: { ...headers, 'content-type': 'application/json' }, body });
  }

  // ---- Events ---------------------------------------------------------------------------------

  async function ingestBatch(
    rpc: ServerUnaryCall<IngestBatchRequest, IngestBatchResponse>,
    done: sendUnaryData<IngestBatchResponse>,
  ): Promise<void> {
    const req = rpc.request;
    const bad: boolean[] = [];
    const events = req.events.map((e, i) => {
      const { body, badProperties } = eventBody(e);
      bad[i] = badProperties;
      return body;
    });
    const body: Record<string, unknown> = { events };
    const mode = modeOf(req.mode);
    if (mode !== undefined) body.mode = mode;
    const res = await post('/v1/events', headersOf(rpc.metadata), body);
    if (!is2xx(res.status)) return done(callError(res.status, wireErrorOf(res.body), res.headers));
    const data = isRecord(res.body) ? res.body.data : undefined;
    if (!Array.isArray(data) || data.length !== req.events.length) return done(internalCallError());
    const results = data.map((item, i) => {
      const r = eventResultOf(item, req.events[i]?.id ?? '');
      if (bad[i] && r.error) r.error = rewordIfProperties(r.error, `events[${i}]`);
      return r;
    });
    done(null, { results }, okTrailers(res.headers));
  }

  /**
   * One stream message as POST /v1/events. `refused`: the credential itself was refused (401:
   * missing, unknown or revoked), which every later message would meet too, so the stream ends
   * with that status instead of acknowledging each message with the same error.
   */
  async function ingestOne(
    headers: Record<string, string>,
    msg: IngestStreamRequest,
  ): Promise<{ ack: IngestStreamResponse; refused: Partial<StatusObject> | null }> {
    const { body, badProperties } = eventBody(msg.event);
    const mode = modeOf(msg.mode);
    if (mode !== undefined) body.mode = mode;
    const res = await post('/v1/events', headers, body);
    const clientEventId = msg.event?.id ?? '';
    let result: EventResult;
    if (is2xx(res.status)) result = eventResultOf(res.body, clientEventId);
    else {
      let error = errorMessageOf(wireErrorOf(res.body));
      if (badProperties) error = rewordIfProperties(error, '');
      // A single POST /v1/events says when to resend in its Retry-After header: so does the ack.
      error.retryAfterSeconds = retryAfterSecondsOf(res.headers);
      result = { error, clientEventId };
    }
    const refused = res.status === 401 ? callError(res.status, wireErrorOf(res.body), res.headers) : null;
    return { ack: { correlationId: msg.correlationId, result }, refused };
  }

  /**
   * One POST /v1/events per message. Events of one customer run one after another in arrival
   * order (their acks too); different customers run concurrently. At most inFlightMax messages
   * are running or have an ack the client has not taken yet; reading pauses beyond it, so HTTP/2
   * flow control pushes back on the client, and a client that stops reading its acks stops
   * being read rather than having the server run its messages and hold their acks.
   */
  function ingestStream(stream: ServerDuplexStream<IngestStreamRequest, IngestStreamResponse>): void {
    const headers = headersOf(stream.metadata);
    const tails = new Map<string, Promise<void>>();
    let inFlight = 0;
    let paused = false;
    let inputEnded = false;
    let gone = false;
    /** The credential's refusal: the call ends with it once the messages running are answered. */
    let refusal: Partial<StatusObject> | null = null;

    const maybeFinish = () => {
      if (gone || inFlight > 0) return;
      if (refusal !== null) {
        gone = true;
        stream.emit('error', refusal);
      } else if (inputEnded) {
        gone = true;
        stream.end();
      }
    };

    stream.on('data', (msg: IngestStreamRequest) => {
      inFlight++;
      if (inFlight >= inFlightMax && !paused) {
        paused = true;
        stream.pause();
      }
      const key = msg.event?.customerId ?? '';
      /** Frees the message's place in the window: once its ack is taken, or when it has none. */
      const release = () => {
        inFlight--;
        if (paused && inFlight < inFlightMax && refusal === null) {
          paused = false;
          stream.resume();
        }
        maybeFinish();
      };
      const run: Promise<void> = (tails.get(key) ?? Promise.resolve())
        .then(() => (gone || refusal !== null ? null : ingestOne(headers, msg)))
        .then((one) => {
          if (one === null || gone) return false;
          if (one.refused !== null) {
            // Nothing read from now on runs, and reading stops; the messages already running
            // (other customers': they passed the credential check before it was revoked, and may
            // be journaled) are answered, then the call fails with the credential's status.
            refusal ??= one.refused;
            if (!paused) {
              paused = true;
              stream.pause();
            }
            return false;
          }
          // The callback runs once grpc-js's write of the ack is done, i.e. once Node's HTTP/2
          // stream has handed it to the connection, which flow control holds back while the
          // client reads nothing: an ack not yet taken keeps its place in the window, so a
          // client that stops reading stops the stream being read instead of piling acks up
          // here. (Not called if the call is cancelled first: nothing waits then.) Only public
          // API; that grpc-js calls back this late is its behaviour, not its contract: the
          // stalled-client tests (test/integration/grpc-public-server.test.ts,
          // test/api/grpc-public.test.ts) fail if an update calls back before the hand-over.
          stream.write(one.ack, release);
          return true;
        })
        .catch(() => false) // ingestOne answers every failure; were anything to throw, the place is freed
        .then((written) => {
          // The customer's next message may run now (its ack is written after this one).
          if (tails.get(key) === run) tails.delete(key);
          if (!written) release();
        });
      tails.set(key, run);
    });
    stream.on('end', () => {
      inputEnded = true;
      maybeFinish();
    });
    const abandon = () => {
      gone = true;
    };
    stream.on('cancelled', abandon);
    stream.on('error', abandon);
  }

  server.addService(EventsService, {
    ingestBatch: (rpc: ServerUnaryCall<IngestBatchRequest, IngestBatchResponse>, done: sendUnaryData<IngestBatchResponse>) => {
      ingestBatch(rpc, done).catch(() => done(internalCallError()));
    },
    ingestStream,
  });

  // ---- Matches --------------------------------------------------------------------------------

  async function report(rpc: ServerUnaryCall<ReportRequest, ReportResponse>, done: sendUnaryData<ReportResponse>): Promise<void> {
    const r = rpc.request;
    const body: Record<string, unknown> = {};
    if (r.profile !== '') body.profile = r.profile;
    if (r.matchId !== '') body.match_id = r.matchId;
    if (r.startedAt !== '') body.started_at = r.startedAt;
    if (r.endedAt !== '') body.ended_at = r.endedAt;
    body.players = r.players.map((p) => {
      const customer: Record<string, string> = {};
      if (p.customer?.externalId !== undefined) customer.external_id = p.customer.externalId;
      if (p.customer?.id !== undefined) customer.id = p.customer.id;
      const player: Record<string, unknown> = { customer, metrics: { ...p.metrics } };
      if (p.won !== undefined) player.won = p.won;
      return player;
    });
    const res = await post('/v1/match_results', headersOf(rpc.metadata), body);
    if (!is2xx(res.status)) return done(callError(res.status, wireErrorOf(res.body), res.headers));
    const m = isRecord(res.body) ? res.body : {};
    done(
      null,
      {
        id: typeof m.id === 'string' ? m.id : '',
        status: typeof m.status === 'string' ? m.status : '',
        replayed: m.replayed === true,
        resultJson: JSON.stringify(res.body ?? null),
      },
      okTrailers(res.headers),
    );
  }

  server.addService(MatchesService, {
    report: (rpc: ServerUnaryCall<ReportRequest, ReportResponse>, done: sendUnaryData<ReportResponse>) => {
      report(rpc, done).catch(() => done(internalCallError()));
    },
  });

  // ---- Customers ------------------------------------------------------------------------------

  async function getState(
    rpc: ServerUnaryCall<GetStateRequest, GetStateResponse>,
    done: sendUnaryData<GetStateResponse>,
  ): Promise<void> {
    const id = rpc.request.customerId;
    const req: InvokeRequest = { method: 'GET', path: `/v1/customers/${encodeURIComponent(id)}/state`, headers: headersOf(rpc.metadata) };
    if (id === '') {
      // No id for the path: the route's credential checks run first (HTTP's order), then this.
      req.path = '/v1/customers/_/state';
      req.refuseAfterAuth = new ApiError('validation_failed', { param: 'customer_id', message: 'customer_id is required.' });
    }
    const res = await call(req);
    if (!is2xx(res.status)) return done(callError(res.status, wireErrorOf(res.body), res.headers));
    done(null, { stateJson: JSON.stringify(res.body ?? null) }, okTrailers(res.headers));
  }

  server.addService(CustomersService, {
    getState: (rpc: ServerUnaryCall<GetStateRequest, GetStateResponse>, done: sendUnaryData<GetStateResponse>) => {
      getState(rpc, done).catch(() => done(internalCallError()));
    },
  });

  let listening = false;
  return {
    server,
    listen(host: string, port: number): Promise<number> {
      const target = `${host.includes(':') ? `[${host}]` : host}:${port}`;
      return new Promise((resolve, reject) => {
        server.bindAsync(target, opts.credentials ?? ServerCreds.createInsecure(), (err, bound) => {
          if (err) reject(err);
          else {
            listening = true;
            resolve(bound);
          }
        });
      });
    },
    close(graceMs: number = publicGrpcLimits.closeGraceMsDefault): Promise<void> {
      if (!listening) {
        server.forceShutdown();
        return Promise.resolve();
      }
      listening = false;
      return new Promise((resolve) => {
        const timer = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, graceMs);
        server.tryShutdown(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    },
  };
}
