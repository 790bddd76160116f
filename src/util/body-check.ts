// Checks a parsed request body once, without recursion, before anything else reads it:
// - nesting: the service reads bodies recursively in many places (fingerprints, msgpack,
//   PostgreSQL's jsonb), and a body nested a few thousand levels deep (6 KB of '[') overflows
//   those stacks;
// - text: PostgreSQL text and jsonb hold neither U+0000 nor an unpaired surrogate (a '\ud800'
//   escape), so a string or key carrying one would fail every statement that writes it, for good
//   (a projection cycle or a snapshot save retried forever);
// - numbers: JSON.parse reads 1e400 as Infinity (gRPC can carry NaN too), which JSON writes back
//   as null: evaluated as Infinity in memory, null once journaled, stored or answered.
// One reused stack: no allocation per call once it has grown; a number costs one isFinite.

const stackValues: unknown[] = [];
const stackDepths: number[] = [];

/** Any NUL or surrogate code unit; only then is the exact (unpaired surrogate) check run. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: U+0000 is exactly what this looks for.
const suspect = /[\u0000\ud800-\udfff]/;
const unpaired = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** True when `s` holds U+0000 or an unpaired surrogate: text PostgreSQL refuses. */
export function isUnstorableText(s: string): boolean {
  return suspect.test(s) && (s.includes('\u0000') || unpaired.test(s));
}

export type BodyProblem = 'too_deep' | 'unstorable_text' | 'non_finite_number' | null;

/**
 * 'too_deep' when `value` holds an object or array more than `maxDepth` levels deep (the value
 * itself, if an object or array, is level 1); else the first found of 'unstorable_text' (a
 * string or key holds U+0000 or an unpaired surrogate) and 'non_finite_number' (a number is
 * ±Infinity or NaN, which JSON cannot carry); null when none. Arrays and plain objects only:
 * what JSON.parse makes.
 */
export function checkBody(value: unknown, maxDepth: number): BodyProblem {
  if (typeof value === 'string') return isUnstorableText(value) ? 'unstorable_text' : null;
  if (typeof value === 'number') return Number.isFinite(value) ? null : 'non_finite_number';
  if (value === null || typeof value !== 'object') return null;
  let problem: BodyProblem = null;
  stackValues[0] = value;
  stackDepths[0] = 1;
  let top = 1;
  while (top > 0) {
    top--;
    const v = stackValues[top] as object;
    const d = stackDepths[top]!;
    stackValues[top] = undefined;
    if (d > maxDepth) {
      problem = 'too_deep';
      break;
    }
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        const c: unknown = v[i];
        if (typeof c === 'string') {
          if (isUnstorableText(c)) problem ??= 'unstorable_text';
        } else if (typeof c === 'number') {
          if (!Number.isFinite(c)) problem ??= 'non_finite_number';
        } else if (c !== null && typeof c === 'object') {
          stackValues[top] = c;
          stackDepths[top++] = d + 1;
        }
      }
    } else {
      for (const k in v) {
        if (isUnstorableText(k)) problem ??= 'unstorable_text';
        const c: unknown = (v as Record<string, unknown>)[k];
        if (typeof c === 'string') {
          if (isUnstorableText(c)) problem ??= 'unstorable_text';
        } else if (typeof c === 'number') {
          if (!Number.isFinite(c)) problem ??= 'non_finite_number';
        } else if (c !== null && typeof c === 'object') {
          stackValues[top] = c;
          stackDepths[top++] = d + 1;
        }
      }
    }
  }
  // Drop references the walk left behind (an early exit leaves entries above 0).
  for (let i = 0; i < top; i++) stackValues[i] = undefined;
  return problem;
}

/**
 * The path (`events[2].properties.name`; for a key, the object holding it, '' for the body) of
 * the first string or key holding unstorable text, or null. Only for a body checkBody found such
 * text in, so its depth is bounded and recursion is safe.
 */
export function unstorableTextPath(value: unknown): string | null {
  return firstPath(value, '', (v) => typeof v === 'string' && isUnstorableText(v), isUnstorableText);
}

/**
 * The path (`attributes.score`, `events[2].properties.x`; '' for the body) of the first number
 * that is ±Infinity or NaN, or null. Only for a body checkBody found one in (bounded depth).
 */
export function nonFiniteNumberPath(value: unknown): string | null {
  return firstPath(value, '', (v) => typeof v === 'number' && !Number.isFinite(v), () => false);
}

/** The path of the first value `bad` holds for, or of the object holding the first key `badKey` holds for. */
function firstPath(value: unknown, at: string, bad: (v: unknown) => boolean, badKey: (k: string) => boolean): string | null {
  if (bad(value)) return at;
  if (value === null || typeof value !== 'object') return null;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const p = firstPath(value[i], `${at}[${i}]`, bad, badKey);
      if (p !== null) return p;
    }
    return null;
  }
  for (const k in value) {
    // A bad key is named by where it is (the key itself may not travel in the answer).
    if (badKey(k)) return at;
    const here = at === '' ? k : `${at}.${k}`;
    const p = firstPath((value as Record<string, unknown>)[k], here, bad, badKey);
    if (p !== null) return p;
  }
  return null;
}
