// canonicalJson and hash53 are the formula of every content fingerprint the service has stored
// (event ids in the environment's register and in customers' records, match reports' rule-4
// fingerprints): a change of spelling or hash turns a client's exact resend into a conflict. The
// fast paths must spell exactly what the definition below spells, for any value.
import fc from 'fast-check';
import t from 'tap';
import type { MatchReport } from '../../src/domain/match/report.js';
import { reportFingerprint } from '../../src/domain/match/report.js';
import { canonicalJson, hash53, hash53Pair } from '../../src/util/canonical-json.js';

/** The definition: JSON.stringify of every primitive and key, object keys sorted, undefined members left out. */
function definition(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(definition).join(',')}]`;
  const parts: string[] = [];
  for (const k of Object.keys(value).sort()) {
    const v = (value as Record<string, unknown>)[k];
    if (v !== undefined) parts.push(`${JSON.stringify(k)}:${definition(v)}`);
  }
  return `{${parts.join(',')}}`;
}

/** Keys and strings with quotes, backslashes, control characters, lone and paired surrogates. */
const anyText = fc.oneof(fc.string(), fc.string({ unit: 'binary' }), fc.constantFrom('"', '\\', '\u0000', '\u001f', '\ud800', '\udc00x', '😀', '\u2028', '__proto__'));
const anyValue = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    anyText,
    fc.double(),
    fc.integer(),
    fc.constantFrom(true, false, null, undefined, -0, Number.NaN, Number.POSITIVE_INFINITY, 1e21, 5e-324),
    fc.array(tie('value'), { maxLength: 4 }),
    fc.dictionary(anyText, tie('value'), { maxKeys: 5 }),
  ),
})).value;

t.test('canonicalJson spells any value exactly as the definition does', async (t) => {
  fc.assert(
    fc.property(anyValue, (v) => canonicalJson(v) === definition(v)),
    { numRuns: 3000 },
  );
  t.pass('3,000 arbitrary values');
  t.equal(canonicalJson({ b: 1, a: [true, null, 'x"y'], c: undefined }), '{"a":[true,null,"x\\"y"],"b":1}');
  t.equal(canonicalJson({ 'k"ey': 1, '\u0001': 2 }), '{"\\u0001":2,"k\\"ey":1}');
  t.equal(canonicalJson([Number.NaN, -0, 1e21]), '[null,0,1e+21]');
});

t.test('hash53Pair is hash53 with each seed, in one pass', async (t) => {
  fc.assert(
    fc.property(anyText, fc.integer(), fc.integer(), (s, a, b) => {
      const [x, y] = hash53Pair(s, a, b);
      return x === hash53(s, a) && y === hash53(s, b);
    }),
    { numRuns: 2000 },
  );
  t.pass('2,000 arbitrary strings and seeds');
});

t.test('the values fingerprints were stored with before the fast paths (pinned)', async (t) => {
  const text = canonicalJson(['ranked', 'm-1', 1764200000000, 1764200900000, [['e:p1', { kills: 3, deaths: 1 }, true]]]);
  t.equal(text, '["ranked","m-1",1764200000000,1764200900000,[["e:p1",{"deaths":1,"kills":3},true]]]');
  t.equal(hash53(text), 128823765030903);
  t.same(hash53Pair(text, 1, 2), [8249977221087863, 2619209506612585]);
  t.equal(hash53('evt-1', 0x9e3779b9), 6897129070319342);
  const report = {
    profileKey: 'ranked',
    matchId: 'm-1',
    startedAtMs: 1764200000000,
    endedAtMs: 1764200900000,
    durationSeconds: 900,
    players: [
      { customer: { by: 'external_id', value: 'p2' }, metrics: { deaths: 2, kills: 5 }, won: false },
      { customer: { by: 'external_id', value: 'p1' }, metrics: { kills: 3, deaths: 1 }, won: true },
    ],
  } as unknown as MatchReport;
  t.equal(reportFingerprint(report), '0e21aafd69f9de19665be6048a58');
});
