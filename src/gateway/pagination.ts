// Paged lists (spec part 1): query `limit` 1-200 (default 50) and an opaque `cursor` of at most
// 2048 characters; a page is {data, next_cursor, has_more}. Cursors are base64url JSON of the
// last item's sort key. Any cursor the service could not have written (empty, too long, not
// base64url JSON, a part with NUL or a lone surrogate, a part too long, a number out of its
// column's range) is 400 invalid_cursor here, before a database sees it: never a 500.
import { z } from 'zod';
import { ApiError } from '../errors/api-error.js';
import { limits } from '../limits.js';
import { isUnstorableText } from '../util/body-check.js';

/** Longest sort-key part the service writes is an id (~31 characters); anything longer is forged. */
export const cursorPartCharsMax = 256;
/** Sort keys have 1-3 parts today. */
export const cursorPartsMax = 8;
/** Largest value of a PostgreSQL `int` column (e.g. challenge progress `cycle`). */
export const cursorInt4Max = 2_147_483_647;
/** Largest millisecond timestamp a JS Date (and so the wire's RFC 3339) can hold. */
export const cursorEpochMsMax = 8_640_000_000_000_000;

export const pageQuerySchema = z.strictObject({
  limit: z.coerce.number().int().min(limits.pageLimitMin).max(limits.pageLimitMax).default(limits.pageLimitDefault),
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
}

export interface Page<T> {
  data: T[];
  next_cursor: string | null;
  has_more: boolean;
}

export function encodeCursor(key: string[]): string {
  return Buffer.from(JSON.stringify({ v: 1, k: key })).toString('base64url');
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

/** The sort key in a cursor, or invalid_cursor. Numeric parts still need cursorInt. */
export function decodeCursor(cursor: string): string[] {
  if (cursor.length === 0 || cursor.length > limits.cursorCharsMax || !/^[A-Za-z0-9_-]+$/.test(cursor)) {
    throw invalidCursor();
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    throw invalidCursor();
  }
  if (parsed === null || typeof parsed !== 'object' || (parsed as { v?: unknown }).v !== 1) throw invalidCursor();
  const k = (parsed as { k?: unknown }).k;
  if (!Array.isArray(k) || k.length > cursorPartsMax || !k.every(isUsablePart)) throw invalidCursor();
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

export function pageRequest(query: { limit: number; cursor?: string | undefined }): PageRequest {
  return { limit: query.limit, after: query.cursor === undefined ? null : decodeCursor(query.cursor) };
}

/**
 * Builds a page from up to limit+1 rows fetched after the cursor: the extra row only tells
 * has_more. `keyOf` gives the sort key written into next_cursor.
 */
export function toPage<R, T>(rows: R[], limit: number, keyOf: (row: R) => string[], map: (row: R) => T): Page<T> {
  const hasMore = rows.length > limit;
  const pageRows = hasMore ? rows.slice(0, limit) : rows;
  const last = pageRows[pageRows.length - 1];
  return {
    data: pageRows.map(map),
    next_cursor: hasMore && last !== undefined ? encodeCursor(keyOf(last)) : null,
    has_more: hasMore,
  };
}
