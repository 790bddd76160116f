// How deeply a parsed JSON value nests, checked without recursion: the service walks request
// bodies recursively in many places (fingerprints, msgpack, PostgreSQL's jsonb), and a body nested
// a few thousand levels deep (6 KB of '[') overflows those stacks. The gateway refuses such bodies
// before anything else reads them. One reused stack: no allocation per call once it has grown.

const stackValues: unknown[] = [];
const stackDepths: number[] = [];

/**
 * True when `value` holds an object or array more than `max` levels deep (the value itself, if an
 * object or array, is level 1). Arrays and plain objects only: what JSON.parse makes.
 */
export function nestsDeeperThan(value: unknown, max: number): boolean {
  if (value === null || typeof value !== 'object') return false;
  let top = 0;
  stackValues[0] = value;
  stackDepths[0] = 1;
  top = 1;
  let deeper = false;
  while (top > 0) {
    top--;
    const v = stackValues[top] as object;
    const d = stackDepths[top]!;
    stackValues[top] = undefined;
    if (d > max) {
      deeper = true;
      break;
    }
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        const c: unknown = v[i];
        if (c !== null && typeof c === 'object') {
          stackValues[top] = c;
          stackDepths[top++] = d + 1;
        }
      }
    } else {
      for (const k in v) {
        const c: unknown = (v as Record<string, unknown>)[k];
        if (c !== null && typeof c === 'object') {
          stackValues[top] = c;
          stackDepths[top++] = d + 1;
        }
      }
    }
  }
  // Drop references the walk left behind (an early exit leaves entries above 0).
  for (let i = 0; i < top; i++) stackValues[i] = undefined;
  return deeper;
}
