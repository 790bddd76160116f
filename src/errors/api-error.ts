// ApiError: the one exception type handlers throw; the gateway turns it into the wire shape
// {"error": {code, type, message, param?, details?, request_id}}. Anything else thrown is a bug
// and answers internal_error without leaking its message.
import { type ErrorCode, errorTable } from './codes.js';

export interface ErrorBody {
  error: {
    code: ErrorCode;
    type: string;
    message: string;
    param?: string;
    details?: unknown;
    request_id: string;
  };
}

export class ApiError extends Error {
  readonly code: ErrorCode;
  readonly param: string | undefined;
  readonly details: unknown;
  /** Seconds for a Retry-After header (rate_limited, some 409s). */
  readonly retryAfterSeconds: number | undefined;

  constructor(
    code: ErrorCode,
    opts: { message?: string; param?: string; details?: unknown; retryAfterSeconds?: number } = {},
  ) {
    super(opts.message ?? errorTable[code].message);
    this.code = code;
    this.param = opts.param;
    this.details = opts.details;
    this.retryAfterSeconds = opts.retryAfterSeconds;
  }

  get status(): number {
    return errorTable[this.code].status;
  }

  toBody(requestId: string): ErrorBody {
    const error: ErrorBody['error'] = {
      code: this.code,
      type: errorTable[this.code].type,
      message: this.message,
      request_id: requestId,
    };
    if (this.param !== undefined) error.param = this.param;
    if (this.details !== undefined) error.details = this.details;
    return { error };
  }
}

export function toApiError(err: unknown): ApiError {
  return err instanceof ApiError ? err : new ApiError('internal_error');
}
