// THE error table: every code the API can answer with, its HTTP status and its type (spec part 7,
// plus capability_unavailable and match_profile_archived). Handlers and domain code name a code;
// nothing else writes a status number for an error. Tested against the spec in test/unit/errors.

export type ErrorType =
  | 'invalid_request'
  | 'authentication'
  | 'permission'
  | 'not_found'
  | 'conflict'
  | 'idempotency'
  | 'rate_limited'
  | 'api_error';

export const errorTable = {
  validation_failed: { status: 400, type: 'invalid_request', message: 'The request is not valid.' },
  invalid_cursor: { status: 400, type: 'invalid_request', message: 'The cursor is not valid.' },
  invalid_json: { status: 400, type: 'invalid_request', message: 'The body is not valid JSON.' },
  batch_too_large: { status: 400, type: 'invalid_request', message: 'A batch holds at most 100 events.' },
  occurred_at_in_future: {
    status: 400,
    type: 'invalid_request',
    message: 'occurred_at is more than 5 minutes ahead of the environment clock.',
  },
  body_too_large: { status: 413, type: 'invalid_request', message: 'The request body is too large.' },
  event_too_large: { status: 413, type: 'invalid_request', message: 'The event is too large.' },
  unsupported_media_type: {
    status: 415,
    type: 'invalid_request',
    message: 'Send the body as application/json.',
  },
  rule_invalid: { status: 422, type: 'invalid_request', message: 'The rule definition is not valid.' },
  ai_draft_rejected: { status: 422, type: 'invalid_request', message: 'The AI draft was rejected.' },
  authentication_required: {
    status: 401,
    type: 'authentication',
    message: 'Send a credential in the Authorization header as a bearer token.',
  },
  invalid_credentials: { status: 401, type: 'authentication', message: 'The credential is not valid.' },
  credentials_revoked: { status: 401, type: 'authentication', message: 'The credential has been revoked.' },
  environment_required: {
    status: 403,
    type: 'permission',
    message: 'Name an environment with the X-Service-Environment header.',
  },
  insufficient_scope: { status: 403, type: 'permission', message: 'The credential lacks the required scope.' },
  event_requires_secret_key: {
    status: 403,
    type: 'permission',
    message: 'This route needs a secret key.',
  },
  origin_not_allowed: { status: 403, type: 'permission', message: 'The request origin is not allowed.' },
  audit_reason_required: { status: 403, type: 'permission', message: 'An audit reason is required.' },
  forbidden: { status: 403, type: 'permission', message: 'The credential may not do this.' },
  ai_drafting_disabled: { status: 403, type: 'permission', message: 'AI drafting is disabled.' },
  route_not_found: { status: 404, type: 'not_found', message: 'No route matches the request.' },
  resource_not_found: { status: 404, type: 'not_found', message: 'The resource does not exist.' },
  stale_write: {
    status: 409,
    type: 'conflict',
    message: 'The resource changed since you read it; read it again and retry.',
  },
  resource_in_use: { status: 409, type: 'conflict', message: 'The resource is in use.' },
  already_exists: { status: 409, type: 'conflict', message: 'The resource already exists.' },
  event_id_conflict: {
    status: 409,
    type: 'conflict',
    message: 'An event with this id and different content was already received.',
  },
  alias_conflict: { status: 409, type: 'conflict', message: 'The alias belongs to another customer.' },
  invalid_state: { status: 409, type: 'conflict', message: 'The resource is not in a state that allows this.' },
  insufficient_balance: { status: 409, type: 'conflict', message: 'The balance is too low.' },
  reward_unavailable: { status: 409, type: 'conflict', message: 'The reward is not available.' },
  last_owner: { status: 409, type: 'conflict', message: 'An organization keeps at least one owner.' },
  match_profile_archived: {
    status: 409,
    type: 'conflict',
    message: 'The match profile is archived and takes no new reports.',
  },
  idempotency_key_required: {
    status: 400,
    type: 'idempotency',
    message: 'Send an Idempotency-Key header (1 to 255 characters).',
  },
  idempotency_key_reused: {
    status: 422,
    type: 'idempotency',
    message: 'This Idempotency-Key was used with a different request.',
  },
  idempotency_in_progress: {
    status: 409,
    type: 'idempotency',
    message: 'A request with this Idempotency-Key is still running.',
  },
  rate_limited: { status: 429, type: 'rate_limited', message: 'Too many requests; retry after a pause.' },
  quota_exceeded: { status: 429, type: 'rate_limited', message: 'The usage quota is exhausted.' },
  capability_unavailable: {
    status: 501,
    type: 'api_error',
    message: 'This capability is not configured on this deployment.',
  },
  ai_unavailable: { status: 503, type: 'api_error', message: 'AI drafting is unavailable.' },
  evaluation_failed: { status: 502, type: 'api_error', message: 'Evaluation failed.' },
  internal_error: { status: 500, type: 'api_error', message: 'An internal error occurred.' },
} as const satisfies Record<string, { status: number; type: ErrorType; message: string }>;

export type ErrorCode = keyof typeof errorTable;

export function isErrorCode(code: string): code is ErrorCode {
  return Object.hasOwn(errorTable, code);
}
