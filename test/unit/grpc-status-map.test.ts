// The HTTP -> gRPC status mapping of the public gRPC API, checked for every code of the error
// table (so a new code with a new HTTP status cannot slip through as UNKNOWN) and for the 409
// split between ALREADY_EXISTS, ABORTED and FAILED_PRECONDITION.
import { status } from '@grpc/grpc-js';
import t from 'tap';
import { errorTable } from '../../src/errors/codes.js';
import { grpcStatusFor } from '../../src/grpc/public-server.js';

t.test('HTTP statuses map to the documented gRPC codes', async (t) => {
  const table: Array<[number, string, status]> = [
    [400, 'validation_failed', status.INVALID_ARGUMENT],
    [401, 'invalid_credentials', status.UNAUTHENTICATED],
    [403, 'insufficient_scope', status.PERMISSION_DENIED],
    [404, 'resource_not_found', status.NOT_FOUND],
    [409, 'already_exists', status.ALREADY_EXISTS],
    [409, 'event_id_conflict', status.ALREADY_EXISTS],
    [409, 'alias_conflict', status.ALREADY_EXISTS],
    [409, 'stale_write', status.ABORTED],
    [409, 'idempotency_in_progress', status.ABORTED],
    [409, 'insufficient_balance', status.FAILED_PRECONDITION],
    [409, 'invalid_state', status.FAILED_PRECONDITION],
    [413, 'body_too_large', status.INVALID_ARGUMENT],
    [415, 'unsupported_media_type', status.INVALID_ARGUMENT],
    [422, 'idempotency_key_reused', status.INVALID_ARGUMENT],
    [429, 'rate_limited', status.RESOURCE_EXHAUSTED],
    [500, 'internal_error', status.INTERNAL],
    [501, 'capability_unavailable', status.UNIMPLEMENTED],
    [502, 'evaluation_failed', status.UNAVAILABLE],
    [503, 'ai_unavailable', status.UNAVAILABLE],
  ];
  for (const [http, code, want] of table) t.equal(grpcStatusFor(http, code), want, `${http} ${code}`);
});

t.test('every code of the error table maps to a specific gRPC status', async (t) => {
  for (const [code, { status: http }] of Object.entries(errorTable)) {
    const got = grpcStatusFor(http, code);
    t.not(got, status.UNKNOWN, `${code} (${http})`);
    t.not(got, status.OK, `${code} (${http})`);
  }
});
