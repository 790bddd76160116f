// pathPattern (the `pattern` /v1/openapi.json gives rule paths: conditions, limit scopes,
// amount_from, segment conditions, counter filters) matches exactly the paths parsePath accepts
// for the same sources, within the length bound: on hand-picked edge cases and on random paths
// built from the prefixes, names and separators paths are made of.
import fc from 'fast-check';
import t from 'tap';
import { ruleBounds } from '../../src/domain/rules/bounds.js';
import { opNames, opReadsSource } from '../../src/domain/rules/ops.js';
import { PathSource, parsePath, pathPattern, pathSources, type PathUse } from '../../src/domain/rules/paths.js';

const uses: PathUse[] = ['condition', 'scope', 'amount'];

/** parsePath's verdict for a use, narrowed to some of its sources (as a doc pattern of those sources is). */
function parses(path: string, use: PathUse, sources: readonly PathSource[]): boolean {
  const r = parsePath(path, use);
  return r.ok && sources.includes(r.src);
}

function matches(path: string, sources: readonly PathSource[]): boolean {
  return path.length <= ruleBounds.pathCharsMax && new RegExp(pathPattern(sources), 'u').test(path);
}

const edgeCases = [
  '',
  'customer',
  'customer.',
  'event',
  'event.name',
  'event.name.x',
  'event.names',
  'event.properties',
  'event.properties.',
  'event.properties.a',
  'event.properties.a.b.c.d.e.f.g.h',
  'event.properties.a.b.c.d.e.f.g.h.i',
  'event.properties..a',
  'event.properties.a b',
  'event.properties.$a:b-c_9',
  'event.properties.0',
  'event.properties.é',
  'customer.attributes.items.length',
  'customer.attributes',
  'customer.counters.n',
  'customer.counters.n.m',
  'customer.segments',
  'customer.segments.vip',
  'customer.tiers.main',
  'customer.tiers',
  'customer.external_id',
  'customer.external_id.x',
  'order.total',
  'Event.name',
  'xevent.name',
  'event.namex',
  `event.properties.${'a'.repeat(300)}`,
  `event.properties.${'a'.repeat(ruleBounds.pathCharsMax - 'event.properties.'.length)}`,
];

t.test('edge cases: the pattern and parsePath agree for every use', async (t) => {
  for (const use of uses) {
    const sources = pathSources[use];
    for (const p of edgeCases) t.equal(matches(p, sources), parses(p, use, sources), `${use}: ${JSON.stringify(p.slice(0, 40))}`);
  }
});

const prefix = fc.constantFrom('event', 'customer', 'event.name', 'event.properties', 'customer.attributes', 'customer.counters', 'customer.segments', 'customer.tiers', 'customer.external_id', 'order');
const name = fc.stringMatching(/^[A-Za-z0-9_$:. -]{0,6}$/);
const path = fc.tuple(prefix, fc.array(name, { maxLength: 10 })).map(([p, names]) => [p, ...names].join('.'));

t.test('random paths: the pattern of any set of sources matches exactly what parsePath accepts from them', async (t) => {
  // Every op's sources too: the leaf forms of the document read them (opReadsSource).
  const sets: Array<[PathUse, readonly PathSource[]]> = [
    ...uses.map((u): [PathUse, readonly PathSource[]] => [u, pathSources[u]]),
    ...opNames.map((op): [PathUse, readonly PathSource[]] => ['condition', pathSources.condition.filter((s) => opReadsSource(op, s))]),
    ['condition', [PathSource.attribute]],
    ['condition', [PathSource.eventProperty]],
    ['scope', [PathSource.eventName, PathSource.eventProperty]],
  ];
  fc.assert(
    fc.property(path, (p) => {
      for (const [use, sources] of sets) {
        if (matches(p, sources) !== parses(p, use, sources)) throw new Error(`${use} ${sources.join(',')}: ${JSON.stringify(p)}`);
      }
    }),
    { numRuns: 3000 },
  );
  t.pass('agree');
});
