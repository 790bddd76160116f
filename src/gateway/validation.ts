// Turns zod failures into the one validation_failed ApiError: `param` names the first failing
// field the way a client writes it (`events[3].occurred_at`), `details` lists every issue as
// {param, message}. Parsing is synchronous (safeParse) because it runs on the hot path; schemas
// used at the wire must not carry async refinements. Never leaks the raw zod issue objects.
import type { z } from 'zod';
import { formatPath } from '../util/param-path.js';
import { ApiError } from '../errors/api-error.js';

export type IssueDetail = { param: string; message: string };



/** One zod issue -> one or more details (unknown keys get one detail each, naming the key). */
function issueDetails(issue: z.core.$ZodIssue, root: string, out: IssueDetail[]): void {
  const base = formatPath(issue.path);
  if (issue.code === 'unrecognized_keys') {
    for (const key of issue.keys) {
      out.push({ param: prefixed(root, formatPath([...issue.path, key])), message: 'Unknown field.' });
    }
    return;
  }
  let message = issue.message;
  // zod says "expected string, received undefined" for a missing field; say what a client means.
  if (issue.code === 'invalid_type' && message.endsWith('received undefined')) {
    message = `Required (expected ${issue.expected}).`;
  }
  out.push({ param: prefixed(root, base), message });
}

function prefixed(root: string, param: string): string {
  if (root.length === 0) return param;
  if (param.length === 0) return root;
  return param.startsWith('[') ? `${root}${param}` : `${root}.${param}`;
}

/**
 * The validation_failed error for a zod error. `root` prefixes every param (empty for bodies
 * and queries, whose fields are named bare); an issue about the whole input names `rootName`.
 */
export function zodToApiError(error: z.ZodError, opts: { root?: string; rootName?: string } = {}): ApiError {
  const details: IssueDetail[] = [];
  for (const issue of error.issues) issueDetails(issue, opts.root ?? '', details);
  for (const d of details) if (d.param.length === 0) d.param = opts.rootName ?? 'body';
  const first = details[0] ?? { param: opts.rootName ?? 'body', message: 'Invalid input.' };
  const more = details.length > 1 ? ` (and ${details.length - 1} more; see details)` : '';
  return new ApiError('validation_failed', {
    message: `${first.param}: ${first.message}${more}`,
    param: first.param,
    details,
  });
}

/** Parses `input` with `schema` or throws validation_failed. `where` names whole-input issues. */
export function validate<T>(schema: z.ZodType<T>, input: unknown, where: 'body' | 'query' | 'params'): T {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  throw zodToApiError(result.error, { rootName: where });
}

export { formatPath };

/**
 * The refine of a PATCH body that must name something to change: at least one of `fields` set
 * (null counts: it clears a nullable field). Use as `.refine(...namesOneOf(fields))`.
 */
export function namesOneOf<K extends string>(fields: readonly K[]): [(body: Partial<Record<K, unknown>>) => boolean, string] {
  return [(body) => fields.some((f) => body[f] !== undefined), `Name at least one of ${fields.join(', ')}.`];
}
