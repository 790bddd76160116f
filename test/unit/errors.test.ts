import t from 'tap';
import { ApiError } from '../../src/errors/api-error.js';
import { errorTable, isErrorCode } from '../../src/errors/codes.js';

// Spec part 7, verbatim: code, status, type.
const spec = `validation_failed 400 invalid_request
invalid_cursor 400 invalid_request
invalid_json 400 invalid_request
batch_too_large 400 invalid_request
occurred_at_in_future 400 invalid_request
body_too_large 413 invalid_request
event_too_large 413 invalid_request
unsupported_media_type 415 invalid_request
rule_invalid 422 invalid_request
ai_draft_rejected 422 invalid_request
authentication_required 401 authentication
invalid_credentials 401 authentication
credentials_revoked 401 authentication
environment_required 403 permission
insufficient_scope 403 permission
event_requires_secret_key 403 permission
origin_not_allowed 403 permission
audit_reason_required 403 permission
forbidden 403 permission
ai_drafting_disabled 403 permission
route_not_found 404 not_found
resource_not_found 404 not_found
stale_write 409 conflict
resource_in_use 409 conflict
already_exists 409 conflict
event_id_conflict 409 conflict
alias_conflict 409 conflict
invalid_state 409 conflict
insufficient_balance 409 conflict
reward_unavailable 409 conflict
last_owner 409 conflict
idempotency_key_required 400 idempotency
idempotency_key_reused 422 idempotency
idempotency_in_progress 409 idempotency
rate_limited 429 rate_limited
quota_exceeded 429 rate_limited
ai_unavailable 503 api_error
evaluation_failed 502 api_error
internal_error 500 api_error`;

t.test('every code of spec part 7 has its status and type', async (t) => {
  for (const line of spec.split('\n')) {
    const [code, status, type] = line.split(' ') as [string, string, string];
    t.ok(isErrorCode(code), code);
    if (!isErrorCode(code)) continue;
    t.equal(errorTable[code].status, Number(status), `${code} status`);
    t.equal(errorTable[code].type, type, `${code} type`);
  }
});

t.test('the table adds exactly capability_unavailable and match_profile_archived', async (t) => {
  const specCodes = new Set(spec.split('\n').map((l) => l.split(' ')[0]));
  const extra = Object.keys(errorTable).filter((c) => !specCodes.has(c)).sort();
  t.same(extra, ['capability_unavailable', 'match_profile_archived']);
  t.equal(errorTable.capability_unavailable.status, 501);
});

t.test('ApiError renders the wire shape', async (t) => {
  const body = new ApiError('validation_failed', { param: 'events[3].name', message: 'name is required' }).toBody('req_1');
  t.same(body, {
    error: {
      code: 'validation_failed',
      type: 'invalid_request',
      message: 'name is required',
      param: 'events[3].name',
      request_id: 'req_1',
    },
  });
});
