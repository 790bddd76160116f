// ClaimKeeper (gateway/idempotency.ts): a running request's Idempotency-Key claim is touched
// every interval until stop(); nothing is written for a request that ends sooner; a touch that
// finds no claim stops it; a failed touch is reported and the next one still comes; a window too
// long for a timer does not make it spin. Real timers with short intervals.
import t from 'tap';
import { ClaimKeeper } from '../../src/gateway/idempotency.js';
import { MemoryIdempotencyStore } from '../../src/persistence/memory/idempotency-store.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls until `cond` holds: a loaded box runs the keeper's timers late, so counts are awaited, not timed. */
async function until(what: string, cond: () => boolean, withinMs = 10_000): Promise<void> {
  const deadline = Date.now() + withinMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`not in ${withinMs} ms: ${what}`);
    await sleep(5);
  }
}

class Spy extends MemoryIdempotencyStore {
  touches = 0;
  failNext = false;
  override async touch(scope: string, key: string): Promise<boolean> {
    this.touches++;
    if (this.failNext) {
      this.failNext = false;
      throw new Error('connection reset');
    }
    return super.touch(scope, key);
  }
}

t.test('touches until stopped, and not before the first interval', async (t) => {
  const store = new Spy();
  await store.claim('env', 'k', 'fp', 60_000);
  const problems: string[] = [];
  const keeper = new ClaimKeeper(store, 'env', 'k', 30, (p) => problems.push(p));
  await sleep(10);
  // The 10 ms timer expires before the keeper's 30 ms one, so it runs first however late both fire.
  t.equal(store.touches, 0, 'a request that ends within the interval writes nothing');
  await until('two touches', () => store.touches >= 2);
  t.ok(store.touches >= 2, `touched while running (${store.touches})`);
  keeper.stop();
  const atStop = store.touches;
  await sleep(100);
  t.equal(store.touches, atStop, 'no touch after stop()');
  t.same(problems, []);
});

t.test('a failed touch is reported and the next still comes; a lost claim stops the keeper', async (t) => {
  const store = new Spy();
  await store.claim('env', 'k', 'fp', 60_000);
  const problems: string[] = [];
  store.failNext = true;
  const keeper = new ClaimKeeper(store, 'env', 'k', 20, (p) => problems.push(p));
  await until('a touch after the failed one', () => store.touches >= 2);
  t.equal(problems[0], 'touch_failed');
  t.ok(store.touches >= 2, 'touched again after the failure');
  await store.release('env', 'k');
  await until('the lost claim reported', () => problems.length >= 2);
  await sleep(60);
  t.same(problems, ['touch_failed', 'claim_lost'], 'reported once');
  const atLoss = store.touches;
  await sleep(60);
  t.equal(store.touches, atLoss, 'stopped touching a claim that is gone');
  keeper.stop();
});

t.test('a window longer than a timer can wait does not fire at once', async (t) => {
  const store = new Spy();
  await store.claim('env', 'k', 'fp', Number.MAX_SAFE_INTEGER);
  const keeper = new ClaimKeeper(store, 'env', 'k', Number.MAX_SAFE_INTEGER / 3, () => {});
  await sleep(50);
  t.equal(store.touches, 0);
  keeper.stop();
});
