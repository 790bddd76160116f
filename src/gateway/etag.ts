// Safe edits (spec part 1): a resource's integer `version` is its ETag ("<version>", strong);
// If-Match and a body's expected_version both name the version the caller read. A mismatch is
// stale_write (409). These helpers only compare; they never read storage, so the real check
// must still happen atomically where the write happens (UPDATE ... WHERE version = $expected).
import { z } from 'zod';
import { ApiError } from '../errors/api-error.js';

export function etagFor(version: number): string {
  return `"${version}"`;
}

/** Header fragment for a Reply: `headers: { ...etagHeader(v) }`. */
export function etagHeader(version: number): { etag: string } {
  return { etag: etagFor(version) };
}

/**
 * Versions listed in an If-Match header value; '*' gives 'any'. Weak tags (W/"3") are accepted
 * as their version because proxies weaken tags; anything unparsable is validation_failed.
 */
export function parseIfMatch(value: string): number[] | 'any' {
  const trimmed = value.trim();
  if (trimmed === '*') return 'any';
  const out: number[] = [];
  for (const raw of trimmed.split(',')) {
    const tag = raw.trim().replace(/^W\//, '');
    const m = /^"(\d{1,15})"$/.exec(tag);
    if (m === null) {
      throw new ApiError('validation_failed', {
        param: 'If-Match',
        message: 'If-Match: expected an ETag from this API, e.g. "3".',
        details: [{ param: 'If-Match', message: 'Expected an ETag such as "3".' }],
      });
    }
    out.push(Number(m[1]));
  }
  return out;
}

/** Throws stale_write when If-Match is present and does not name currentVersion. */
export function checkIfMatch(headers: Record<string, string>, currentVersion: number): void {
  const value = headers['if-match'];
  if (value === undefined) return;
  const versions = parseIfMatch(value);
  if (versions === 'any' || versions.includes(currentVersion)) return;
  throw new ApiError('stale_write', { details: { current_version: currentVersion } });
}

/** The body field `expected_version`, for route schemas. */
export const expectedVersionField = z.number().int().min(0).optional();

/** Throws stale_write when the body named an expected_version that is not currentVersion. */
export function checkExpectedVersion(expected: number | undefined, currentVersion: number): void {
  if (expected === undefined || expected === currentVersion) return;
  throw new ApiError('stale_write', { param: 'expected_version', details: { current_version: currentVersion } });
}

/**
 * The version the caller says it read, from If-Match (a single tag) or the body's
 * expected_version, for writes that compare atomically in storage. undefined: unconditional.
 * Both given and different is validation_failed (the request contradicts itself).
 */
export function expectedVersion(headers: Record<string, string>, bodyExpected?: number): number | undefined {
  const value = headers['if-match'];
  let fromHeader: number | undefined;
  if (value !== undefined) {
    const versions = parseIfMatch(value);
    if (versions !== 'any') {
      if (versions.length !== 1) {
        throw new ApiError('validation_failed', {
          param: 'If-Match',
          message: 'If-Match: name exactly one ETag for a write.',
          details: [{ param: 'If-Match', message: 'Name exactly one ETag.' }],
        });
      }
      fromHeader = versions[0];
    }
  }
  if (fromHeader !== undefined && bodyExpected !== undefined && fromHeader !== bodyExpected) {
    throw new ApiError('validation_failed', {
      param: 'expected_version',
      message: 'expected_version: differs from the If-Match header.',
      details: [{ param: 'expected_version', message: 'Differs from the If-Match header.' }],
    });
  }
  return fromHeader ?? bodyExpected;
}
