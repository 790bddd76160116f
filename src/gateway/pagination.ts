// Paged lists (spec part 1): query `limit` 1-200 (default 50) and an opaque `cursor` of at most
// 2048 characters; a page is {data, next_cursor, has_more}. Cursors are base64url JSON of the
// last item's sort key; a cursor that does not decode is invalid_cursor, never a 500.
import { z } from 'zod';
import { ApiError } from '../errors/api-error.js';
import { limits } from '../limits.js';

export const pageQuerySchema = z.object({
  limit: z.coerce.number().int().min(limits.pageLimitMin).max(limits.pageLimitMax).default(limits.pageLimitDefault),
  cursor: z.string().min(1).max(limits.cursorCharsMax).optional(),
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

export function decodeCursor(cursor: string): string[] {
  if (cursor.length > limits.cursorCharsMax || !/^[A-Za-z0-9_-]+$/.test(cursor)) {
    throw new ApiError('invalid_cursor', { param: 'cursor' });
  }
  try {
    const parsed = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown;
    if (
      parsed &&
      typeof parsed === 'object' &&
      (parsed as { v?: unknown }).v === 1 &&
      Array.isArray((parsed as { k?: unknown }).k) &&
      (parsed as { k: unknown[] }).k.every((x) => typeof x === 'string')
    ) {
      return (parsed as { k: string[] }).k;
    }
  } catch {
    // fall through
  }
  throw new ApiError('invalid_cursor', { param: 'cursor' });
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
