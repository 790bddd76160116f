// Rule paths: the one place that knows which dotted paths a rule may read and what each refers
// to. A path is parsed once (at validation and compile time) into a small-integer source and the
// segments below it, so evaluation walks arrays and never splits strings. Pure; never throws.
import { ruleBounds } from './bounds.js';

/** Where a path reads from. Small integers: they are stored in compiled plans. */
export const PathSource = {
  eventName: 0,
  eventProperty: 1,
  attribute: 2,
  counter: 3,
  segments: 4,
  tier: 5,
  externalId: 6,
  /** Only in a limit scope: the customer itself (limits are kept per customer). */
  customer: 7,
} as const;
export type PathSource = (typeof PathSource)[keyof typeof PathSource];

/** What the path is used for; each use accepts a subset of the sources. */
export type PathUse = 'condition' | 'scope' | 'amount';

export type ParsedPath = { ok: true; src: PathSource; seg: string[] } | { ok: false; message: string };

const segmentPattern = /^[A-Za-z0-9_$:-]+$/;

const conditionPrefixes =
  'event.name, event.properties.<name>, customer.attributes.<name>, customer.counters.<name>, customer.segments, customer.tiers.<program key> or customer.external_id';
const scopePrefixes =
  'customer, event.name, event.properties.<name>, customer.attributes.<name>, customer.tiers.<program key> or customer.external_id';
const amountPrefixes = 'event.properties.<name>, customer.attributes.<name> or customer.counters.<name>';

function expected(use: PathUse): string {
  return use === 'condition' ? conditionPrefixes : use === 'scope' ? scopePrefixes : amountPrefixes;
}

function fail(message: string): ParsedPath {
  return { ok: false, message };
}

/** The sources each use of a path may read (parsePath refuses the others). */
export const pathSources: Readonly<Record<PathUse, readonly PathSource[]>> = {
  condition: [
    PathSource.eventName,
    PathSource.eventProperty,
    PathSource.attribute,
    PathSource.counter,
    PathSource.segments,
    PathSource.tier,
    PathSource.externalId,
  ],
  scope: [PathSource.customer, PathSource.eventName, PathSource.eventProperty, PathSource.attribute, PathSource.tier, PathSource.externalId],
  amount: [PathSource.eventProperty, PathSource.attribute, PathSource.counter],
};

/** Each source's prefix and how many names follow it (as parsePath reads them). */
const sourceShapes: Readonly<Record<PathSource, { prefix: string; below: 'none' | 'one' | 'many' }>> = {
  [PathSource.eventName]: { prefix: 'event.name', below: 'none' },
  [PathSource.eventProperty]: { prefix: 'event.properties', below: 'many' },
  [PathSource.attribute]: { prefix: 'customer.attributes', below: 'many' },
  [PathSource.counter]: { prefix: 'customer.counters', below: 'one' },
  [PathSource.segments]: { prefix: 'customer.segments', below: 'none' },
  [PathSource.tier]: { prefix: 'customer.tiers', below: 'one' },
  [PathSource.externalId]: { prefix: 'customer.external_id', below: 'none' },
  [PathSource.customer]: { prefix: 'customer', below: 'none' },
};

/**
 * A regular expression (JSON Schema `pattern`) matching exactly the paths of the given sources
 * that parsePath accepts, length aside (at most ruleBounds.pathCharsMax characters). For the
 * OpenAPI document; test/api/openapi-request-bodies.test.ts holds it to parsePath.
 */
export function pathPattern(sources: readonly PathSource[]): string {
  const segment = segmentPattern.source.slice(1, -1);
  const alternatives = sources.map((src) => {
    const { prefix, below } = sourceShapes[src];
    const head = prefix.replaceAll('.', '\\.');
    if (below === 'none') return head;
    return below === 'one' ? `${head}\\.${segment}` : `${head}(?:\\.${segment}){1,${ruleBounds.pathSegmentsMax}}`;
  });
  return `^(?:${alternatives.join('|')})$`;
}

/** Classifies a dotted path for one use; the message says what is wrong and what is expected. */
export function parsePath(path: string, use: PathUse): ParsedPath {
  if (path.length === 0) return fail(`A path is required; use ${expected(use)}.`);
  if (path.length > ruleBounds.pathCharsMax) return fail(`A path has at most ${ruleBounds.pathCharsMax} characters.`);
  const parts = path.split('.');
  for (const p of parts) {
    if (p.length === 0) return fail(`'${path}' has an empty segment.`);
    if (!segmentPattern.test(p)) return fail(`'${path}': segment '${p}' may hold only letters, digits, _, $, : and -.`);
  }
  const head = `${parts[0]}.${parts[1] ?? ''}`;
  const rest = parts.slice(2);
  let src: PathSource;
  let arity: 'none' | 'one' | 'many';
  if (path === 'customer') {
    if (use !== 'scope') return fail(`'customer' alone is a limit scope, not a value; use ${expected(use)}.`);
    return { ok: true, src: PathSource.customer, seg: [] };
  }
  switch (head) {
    case 'event.name':
      [src, arity] = [PathSource.eventName, 'none'];
      break;
    case 'event.properties':
      [src, arity] = [PathSource.eventProperty, 'many'];
      break;
    case 'customer.attributes':
      [src, arity] = [PathSource.attribute, 'many'];
      break;
    case 'customer.counters':
      [src, arity] = [PathSource.counter, 'one'];
      break;
    case 'customer.segments':
      [src, arity] = [PathSource.segments, 'none'];
      break;
    case 'customer.tiers':
      [src, arity] = [PathSource.tier, 'one'];
      break;
    case 'customer.external_id':
      [src, arity] = [PathSource.externalId, 'none'];
      break;
    default:
      return fail(`Unknown path prefix in '${path}'; use ${expected(use)}.`);
  }
  if (arity === 'none' && rest.length > 0) return fail(`'${head}' has no fields below it.`);
  if (arity !== 'none' && rest.length === 0) {
    const what = src === PathSource.tier ? 'a program key' : src === PathSource.counter ? 'a counter name' : 'a field name';
    return fail(`'${head}' must be followed by ${what}, as in '${head}.<name>'.`);
  }
  if (arity === 'one' && rest.length > 1) return fail(`'${head}' takes exactly one name after it.`);
  if (rest.length > ruleBounds.pathSegmentsMax) return fail(`A path has at most ${ruleBounds.pathSegmentsMax} segments after its prefix.`);
  if (use === 'scope' && (src === PathSource.segments || src === PathSource.counter)) {
    return fail(`'${head}' cannot scope a limit; use ${scopePrefixes}.`);
  }
  if (use === 'amount' && src !== PathSource.eventProperty && src !== PathSource.attribute && src !== PathSource.counter) {
    return fail(`'${path}' is not numeric; amount_from reads ${amountPrefixes}.`);
  }
  return { ok: true, src, seg: rest };
}
