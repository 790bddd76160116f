// Condition operators: names, their small-integer codes (stored in compiled plans), what value
// each accepts at validation time, and how each compares at evaluation time. Comparisons never
// coerce and never throw: a type mismatch (gt on a string, contains on a number) is false, and
// the negations ne / not_in are exactly "not eq" / "not in" (so a missing value is ne anything).
import { ruleBounds } from './bounds.js';
import { PathSource } from './paths.js';

export const opNames = ['eq', 'ne', 'gt', 'gte', 'lt', 'lte', 'in', 'not_in', 'exists', 'contains'] as const;
export type OpName = (typeof opNames)[number];

export const Op = { eq: 0, ne: 1, gt: 2, gte: 3, lt: 4, lte: 5, in: 6, not_in: 7, exists: 8, contains: 9 } as const;
export type OpCode = (typeof Op)[keyof typeof Op];

export type Primitive = string | number | boolean | null;

/** An `in` / `not_in` list split by type and sorted, for binary search. b: bit 1 = false, bit 2 = true. */
export interface InSet {
  s: string[];
  n: number[];
  b: number;
}

export function isPrimitive(v: unknown): v is Primitive {
  return v === null || typeof v === 'string' || typeof v === 'boolean' || (typeof v === 'number' && Number.isFinite(v));
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'number' && !Number.isFinite(v)) return 'a non-finite number';
  return typeof v === 'object' ? 'an object' : `a ${typeof v}`;
}

function tooLong(v: unknown): boolean {
  return typeof v === 'string' && v.length > ruleBounds.valueCharsMax;
}

/** Which ops each restricted source allows, and the value type its comparisons take. */
const restricted: Partial<Record<PathSource, { ops: readonly OpName[]; type: 'string' | 'number'; name: string }>> = {
  [PathSource.eventName]: { ops: ['eq', 'ne', 'in', 'not_in', 'contains'], type: 'string', name: 'event.name' },
  [PathSource.counter]: {
    ops: ['eq', 'ne', 'gt', 'gte', 'lt', 'lte', 'in', 'not_in', 'exists'],
    type: 'number',
    name: 'a counter',
  },
  [PathSource.segments]: { ops: ['contains'], type: 'string', name: 'customer.segments' },
  [PathSource.tier]: { ops: ['eq', 'ne', 'in', 'not_in', 'exists'], type: 'string', name: 'a tier level' },
  [PathSource.externalId]: { ops: ['eq', 'ne', 'in', 'not_in', 'exists', 'contains'], type: 'string', name: 'customer.external_id' },
};

/**
 * The value each op takes (checkOpValue's cases, for the OpenAPI document): primitive a string,
 * number, boolean or null; scalar the same but null; number a finite number; list a non-empty
 * array of scalars; flag an optional boolean.
 */
export type OpValueForm = 'primitive' | 'scalar' | 'number' | 'list' | 'flag';
export const opValueForms: Readonly<Record<OpName, OpValueForm>> = {
  eq: 'primitive',
  ne: 'primitive',
  gt: 'number',
  gte: 'number',
  lt: 'number',
  lte: 'number',
  in: 'list',
  not_in: 'list',
  exists: 'flag',
  contains: 'scalar',
};

/** Whether op may read a path of this source (a restricted source allows only some ops). */
export function opReadsSource(op: OpName, src: PathSource): boolean {
  const r = restricted[src];
  return r === undefined || r.ops.includes(op);
}

/**
 * Checks an op against its value and the path it reads. Returns null when fine, else one
 * problem: `field` is 'op' or 'value' (where the client should look) and a message.
 */
export function checkOpValue(
  op: OpName,
  value: unknown,
  hasValue: boolean,
  src: PathSource | null,
): { field: 'op' | 'value'; message: string } | null {
  const r = src === null ? undefined : restricted[src];
  if (r !== undefined && !r.ops.includes(op)) {
    return { field: 'op', message: `${r.name} does not support op '${op}'; use one of ${r.ops.join(', ')}.` };
  }
  const typed = (v: unknown): string | null => {
    if (r === undefined) return null;
    if (r.type === 'number' && typeof v !== 'number') return `${r.name} is a number; got ${describe(v)}.`;
    if (r.type === 'string' && typeof v !== 'string') return `${r.name} is a string; got ${describe(v)}.`;
    return null;
  };
  switch (op) {
    case 'eq':
    case 'ne':
    case 'contains': {
      if (!hasValue) return { field: 'value', message: `op '${op}' needs a value.` };
      if (!isPrimitive(value) || (op === 'contains' && value === null)) {
        const allowed = op === 'contains' ? 'a string, number or boolean' : 'a string, number, boolean or null';
        return { field: 'value', message: `op '${op}' compares with ${allowed}; got ${describe(value)}.` };
      }
      if (tooLong(value)) return { field: 'value', message: `A value has at most ${ruleBounds.valueCharsMax} characters.` };
      const t = typed(value);
      return t === null ? null : { field: 'value', message: t };
    }
    case 'gt':
    case 'gte':
    case 'lt':
    case 'lte':
      if (!hasValue) return { field: 'value', message: `op '${op}' needs a value.` };
      if (typeof value !== 'number' || !Number.isFinite(value)) {
        return { field: 'value', message: `op '${op}' compares numbers; value must be a finite number, got ${describe(value)}.` };
      }
      return null;
    case 'in':
    case 'not_in': {
      if (!hasValue) return { field: 'value', message: `op '${op}' needs a value (a non-empty array).` };
      if (!Array.isArray(value) || value.length === 0) {
        const got = Array.isArray(value) ? 'an empty array' : describe(value);
        return { field: 'value', message: `op '${op}' takes a non-empty array of strings, numbers or booleans; got ${got}.` };
      }
      if (value.length > ruleBounds.inValuesMax) return { field: 'value', message: `op '${op}' takes at most ${ruleBounds.inValuesMax} values.` };
      for (let i = 0; i < value.length; i++) {
        const v: unknown = value[i];
        if (!isPrimitive(v) || v === null) {
          return { field: 'value', message: `op '${op}': item ${i} must be a string, number or boolean; got ${describe(v)}.` };
        }
        if (tooLong(v)) return { field: 'value', message: `op '${op}': item ${i} has more than ${ruleBounds.valueCharsMax} characters.` };
        const t = typed(v);
        if (t !== null) return { field: 'value', message: `op '${op}': item ${i}: ${t}` };
      }
      return null;
    }
    case 'exists':
      if (hasValue && typeof value !== 'boolean') {
        return { field: 'value', message: `op 'exists' takes an optional boolean value (default true); got ${describe(value)}.` };
      }
      return null;
  }
}

export function buildInSet(values: readonly Primitive[]): InSet {
  const s: string[] = [];
  const n: number[] = [];
  let b = 0;
  for (const v of values) {
    if (typeof v === 'string') s.push(v);
    else if (typeof v === 'number') n.push(v);
    else if (v === false) b |= 1;
    else if (v === true) b |= 2;
  }
  const uniq = <T>(a: T[]): T[] => a.filter((x, i) => i === 0 || x !== a[i - 1]);
  return { s: uniq(s.sort()), n: uniq(n.sort((x, y) => x - y)), b };
}

function searchStrings(a: readonly string[], x: string): boolean {
  let lo = 0;
  let hi = a.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1;
    const m = a[mid]!;
    if (m === x) return true;
    if (m < x) lo = mid + 1;
    else hi = mid - 1;
  }
  return false;
}

function searchNumbers(a: readonly number[], x: number): boolean {
  let lo = 0;
  let hi = a.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1;
    const m = a[mid]!;
    if (m === x) return true;
    if (m < x) lo = mid + 1;
    else hi = mid - 1;
  }
  return false;
}

export function inSetHas(set: InSet, actual: unknown): boolean {
  if (typeof actual === 'string') return searchStrings(set.s, actual);
  if (typeof actual === 'number') return searchNumbers(set.n, actual);
  if (actual === false) return (set.b & 1) !== 0;
  if (actual === true) return (set.b & 2) !== 0;
  return false;
}

/**
 * One comparison. `actual` is undefined when the path is absent. `expected` is the leaf's
 * value (the exists flag for `exists`); `set` is the leaf's InSet for in / not_in.
 */
export function applyOp(op: OpCode, actual: unknown, expected: unknown, set: InSet | undefined): boolean {
  switch (op) {
    case Op.eq:
      return actual === expected;
    case Op.ne:
      return actual !== expected;
    case Op.gt:
      return typeof actual === 'number' && actual > (expected as number);
    case Op.gte:
      return typeof actual === 'number' && actual >= (expected as number);
    case Op.lt:
      return typeof actual === 'number' && actual < (expected as number);
    case Op.lte:
      return typeof actual === 'number' && actual <= (expected as number);
    case Op.in:
      return set !== undefined && inSetHas(set, actual);
    case Op.not_in:
      return set === undefined || !inSetHas(set, actual);
    case Op.exists:
      return (actual !== undefined && actual !== null) === expected;
    case Op.contains:
      if (typeof actual === 'string') return typeof expected === 'string' && actual.includes(expected);
      if (Array.isArray(actual)) {
        for (let i = 0; i < actual.length; i++) if (actual[i] === expected) return true;
      }
      return false;
    default:
      return false;
  }
}
