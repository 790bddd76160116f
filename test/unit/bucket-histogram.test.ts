import { Histogram, Registry } from 'prom-client';
import t from 'tap';
import { BucketHistogram } from '../../src/observability/bucket-histogram.js';

const buckets = [0.001, 0.01, 0.1, 1];
// Values on, between, below and above the bounds, twice for some label sets.
const observations: Array<[string, string, number]> = [
  ['GET', '200', 0.0005],
  ['GET', '200', 0.001],
  ['GET', '200', 0.05],
  ['GET', '200', 7],
  ['POST', '202', 0.01],
  ['POST', '202', 0.0100001],
  ['POST', '429', 1],
];

t.test('the scrape text equals prom-client Histogram text for the same observations', async (t) => {
  const ours = new Registry();
  const theirs = new Registry();
  const a = new BucketHistogram({ name: 'd', help: 'Durations.', labelNames: ['method', 'status'], buckets, registers: [ours] });
  const b = new Histogram({ name: 'd', help: 'Durations.', labelNames: ['method', 'status'], buckets, registers: [theirs] });
  for (const [m, s, v] of observations) {
    a.child(m, s).observe(v);
    b.labels(m, s).observe(v);
  }
  t.equal(await ours.metrics(), await theirs.metrics());
});

t.test('an unlabelled histogram observes directly; reset forgets the counts', async (t) => {
  const ours = new Registry();
  const theirs = new Registry();
  const a = new BucketHistogram({ name: 'n', help: 'Sizes.', buckets: [1, 2, 4], registers: [ours] });
  const b = new Histogram({ name: 'n', help: 'Sizes.', buckets: [1, 2, 4], registers: [theirs] });
  for (const v of [0, 1, 3, 3, 9]) {
    a.observe(v);
    b.observe(v);
  }
  t.equal(await ours.metrics(), await theirs.metrics());
  t.match(await ours.metrics(), /n_bucket\{le="4"\} 4\nn_bucket\{le="\+Inf"\} 5\nn_sum 16\nn_count 5/);
  a.reset();
  t.match(await ours.metrics(), /n_bucket\{le="\+Inf"\} 0\nn_sum 0\nn_count 0/);
});

t.test('a child is made once per label set and keeps its counts', async (t) => {
  const h = new BucketHistogram({ name: 'c', help: 'x', labelNames: ['k'], buckets, registers: [] });
  t.equal(h.child('a'), h.child('a'));
  t.not(h.child('a'), h.child('b'));
  h.child('a').observe(0.5);
  h.child('a').observe(Number.NaN);
  t.equal(h.child('a').count, 1, 'a non-finite value is not counted');
  t.throws(() => h.child(), /expected 1 label values/);
  t.throws(() => h.observe(1), /has labels/);
  t.throws(() => new BucketHistogram({ name: 'e', help: 'x', buckets: [1, 1], registers: [] }), /distinct/);
});
