// Paged lists (spec part 1): query `limit` 1-200 in decimal digits (default 50) and an opaque
// `cursor` of at most 2048 characters; a page is {data, next_cursor, has_more}. Cursors are
// base64url JSON {v: 2, s: scope, k: sort key}: the last item's sort key, bound to the list that
// wrote it. The scope is a short hash of the request path (so the list and its parent resource,
// e.g. which customer's ledger), the environment (the user on environment-less routes such as
// /v1/organizations) and every query value but `limit` and `cursor` (the filters). A cursor
// used on another list, with other filter values or in another environment would page from a
// position that means something else there: it is 400 invalid_cursor, as is any cursor the
// service could not have written (empty, too long, not base64url JSON, a part with NUL or a
// lone surrogate, a part too long, a number out of its column's range), before a database sees
// it: never a 500. `limit` is not bound: a client may change the page size between pages.
// Cursors of the previous format (v: 1, unbound) are refused like any other.
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { ApiError } from '../errors/api-error.js';
import { limits } from '../limits.js';
import type { Principal } from '../tenancy/types.js';
import { isUnstorableText } from '../util/body-check.js';
import { canonicalJson } from '../util/canonical-json.js';

/** Longest sort-key part the service writes is an id (~31 characters); anything longer is forged. */
export const cursorPartCharsMax = 256;
/** Sort keys have 1-3 parts today. */
export const cursorPartsMax = 8;
/** Largest value of a PostgreSQL `int` column (e.g. challenge progress `cycle`). */
export const cursorInt4Max = 2_147_483_647;
/** Largest millisecond timestamp a JS Date (and so the wire's RFC 3339) can hold. */
export const cursorEpochMsMax = 8_640_000_000_000_000;

/** `limit` as written in a query: decimal digits only (Number() would also take 0x10, 1e1, " 5"). */
const decimalDigits = /^[0-9]+$/;

export const pageQuerySchema = z.strictObject({
  // A string of digits becomes its number; anything else stays as sent and fails as not a number.
  limit: z.preprocess(
    (v) => (typeof v === 'string' && decimalDigits.test(v) ? Number(v) : v),
    z
      .number({ error: `An integer from ${limits.pageLimitMin} to ${limits.pageLimitMax}, in decimal digits.` })
      .int()
      .min(limits.pageLimitMin)
      .max(limits.pageLimitMax)
      .default(limits.pageLimitDefault),
  ),
  // Length is checked by decodeCursor, not here: an unusable cursor is invalid_cursor, not
  // validation_failed. The bounds are still documented in OpenAPI through meta.
  cursor: z
    .string()
    .meta({
      minLength: 1,
      maxLength: limits.cursorCharsMax,
      description: "The previous page's next_cursor; an unusable one is 400 invalid_cursor.",
    })
    .optional(),
});

export interface PageRequest {
  limit: number;
  /** Decoded sort key of the last item of the previous page, or null for the first page. */
  after: string[] | null;
  /** The list's cursorScope: the cursor was checked against it, and next_cursor is bound to it. */
  scope: string;
}

/** Query of a paged list: limit and cursor, plus the list's filters (any other keys). */
export interface PageQuery {
  limit: number;
  cursor?: string | undefined;
}

/** The parts of a request a list is identified by (a RequestContext is one). */
export interface ListRequest {
  /** Request path without the query string: the list and its parent resource. */
  path: string;
  principal: Pick<Principal, 'environment' | 'userId'>;
  /** The parsed (validated) query: defaults applied, so an omitted default equals the default. */
  query: PageQuery;
}

/** What a cursor is bound to; `filters` is the query without limit and cursor. */
export interface ListIdentity {
  path: string;
  /** The environment listed in, or null on environment-less routes. */
  environmentId: string | null;
  /** Environment-less routes only (their lists are the caller's, e.g. its organizations); else null. */
  userId: string | null;
  filters: Record<string, unknown>;
}

/** Characters of a cursor's scope: 16 base64url characters are 96 bits of SHA-256. */
export const cursorScopeChars = 16;

/** The binding written into and checked against a list's cursors: a short hash, never the values. */
export function cursorScope(list: ListIdentity): string {
  const text = canonicalJson([list.path, list.environmentId, list.userId, list.filters]);
  return createHash('sha256').update(text).digest('base64url').slice(0, cursorScopeChars);
}

/** The identity of the list a request reads: every query value but limit and cursor is a filter. */
export function listIdentityOf(req: ListRequest): ListIdentity {
  const filters: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(req.query)) if (k !== 'limit' && k !== 'cursor') filters[k] = v;
  const environmentId = req.principal.environment?.id ?? null;
  return { path: req.path, environmentId, userId: environmentId === null ? req.principal.userId : null, filters };
}

export interface Page<T> {
  data: T[];
  next_cursor: string | null;
  has_more: boolean;
}

/** A cursor at sort key `key` of the list with cursorScope `scope`. */
export function encodeCursor(key: string[], scope: string): string {
  return Buffer.from(JSON.stringify({ v: 2, s: scope, k: key })).toString('base64url');
}

function invalidCursor(): ApiError {
  return new ApiError('invalid_cursor', { param: 'cursor' });
}

/**
 * A part the database can take as text: bounded, no NUL (PostgreSQL text cannot hold one), and
 * well-formed UTF-16 (a lone surrogate cannot be encoded as UTF-8).
 */
function isUsablePart(x: unknown): x is string {
  return typeof x === 'string' && x.length <= cursorPartCharsMax && !isUnstorableText(x);
}

/**
 * The sort key in a cursor written for the list with cursorScope `scope`, or invalid_cursor
 * (also for a cursor of another list). Numeric parts still need cursorInt.
 */
export function decodeCursor(cursor: string, scope: string): string[] {
  if (cursor.length === 0 || cursor.length > limits.cursorCharsMax || !/^[A-Za-z0-9_-]+$/.test(cursor)) {
    throw invalidCursor();
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    throw invalidCursor();
  }
  if (parsed === null || typeof parsed !== 'object' || (parsed as { v?: unknown }).v !== 2) throw invalidCursor();
  const { s, k } = parsed as { s?: unknown; k?: unknown };
  if (!Array.isArray(k) || k.length > cursorPartsMax || !k.every(isUsablePart)) throw invalidCursor();
  // Another list's cursor (or another filter's, or another environment's): well-formed, unusable here.
  if (s !== scope) throw invalidCursor();
  return k;
}

/**
 * A numeric cursor part as an integer in [min, max], or invalid_cursor (absent, not decimal
 * digits, not a safe integer, out of range). `max` is the column's bound: cursorEpochMsMax for
 * a millisecond timestamp, cursorInt4Max for an `int`.
 */
export function cursorInt(part: string | undefined, min: number, max: number): number {
  if (part === undefined || !/^-?\d{1,16}$/.test(part)) throw invalidCursor();
  const n = Number(part);
  if (!Number.isSafeInteger(n) || n < min || n > max) throw invalidCursor();
  return n;
}

/**
 * The page a list request asks for: its limit, and the sort key of its cursor, which must have
 * been written by this same list (path, environment, filter values; see the top of the file).
 * Every paged list starts here and hands the result to toPage, so none can skip the binding.
 */
export function pageRequest(req: ListRequest): PageRequest {
  const scope = cursorScope(listIdentityOf(req));
  const cursor = req.query.cursor;
  return { limit: req.query.limit, after: cursor === undefined ? null : decodeCursor(cursor, scope), scope };
}

/**
 * Builds a page from up to limit+1 rows fetched after the cursor: the extra row only tells
 * has_more. `keyOf` gives the sort key written into next_cursor, bound to the page's list.
 */
export function toPage<R, T>(rows: R[], page: PageRequest, keyOf: (row: R) => string[], map: (row: R) => T): Page<T> {
  const limit = page.limit;
  const hasMore = rows.length > limit;
  const pageRows = hasMore ? rows.slice(0, limit) : rows;
  const last = pageRows[pageRows.length - 1];
  return {
    data: pageRows.map(map),
    next_cursor: hasMore && last !== undefined ? encodeCursor(keyOf(last), page.scope) : null,
    has_more: hasMore,
  };
}
