// IdempotencyStore contract, run against PostgreSQL, embedded PGlite and the in-memory twin with
// the same fake clock: claim/complete/replay/release, stale in_progress hand-over to exactly one
// claimer, expiry (an expired row is absent), scopes, purgeExpired.
// Time moves only through the injected clock; no test sleeps.
import t from 'tap';
import { MemoryIdempotencyStore } from '../../src/persistence/memory/idempotency-store.js';
import type { IdempotencyStore } from '../../src/persistence/ports.js';
import { idempotencyClaimTtlMs, PgIdempotencyStore } from '../../src/persistence/sql/idempotency-store.js';
import { sqlForTest, sqlKinds, type Teardown } from '../helpers/sql.js';

type Store = IdempotencyStore & { purgeExpired(): Promise<number> };

interface Adapter {
  name: string;
  make(t: Teardown, clock: () => number): Promise<Store>;
}

const adapters: Adapter[] = [
  { name: 'memory', make: async (_t, clock) => new MemoryIdempotencyStore(clock) },
  ...sqlKinds.map(
    (kind): Adapter => ({
      name: kind,
      make: async (t, clock) => new PgIdempotencyStore((await sqlForTest(t, kind)).sql, clock),
    }),
  ),
];

const stale = 30_000;
const inProgress = (fingerprint: string) => ({ fingerprint, state: 'in_progress', status: null, body: null });
const done = (fingerprint: string, status: number, body: string) => ({ fingerprint, state: 'done', status, body });

for (const adapter of adapters) {
  t.test(`idempotency store on ${adapter.name}`, async (t) => {
    let nowMs = Date.UTC(2030, 0, 1);
    const store = await adapter.make(t, () => nowMs);

    t.test('first claim runs the request; repeats see it in progress, then done', async (t) => {
      t.equal(await store.claim('env_1', 'k1', 'fp-a', stale), null, 'new claim');
      t.same(await store.claim('env_1', 'k1', 'fp-a', stale), inProgress('fp-a'), 'same request while running');
      t.same(await store.claim('env_1', 'k1', 'fp-b', stale), inProgress('fp-a'), 'a different body sees the first fingerprint');
      nowMs += 10;
      const body = JSON.stringify({ id: 'cust_1', name: 'Zoë "quoted" \\ ✓' });
      await store.complete('env_1', 'k1', 201, body, 60_000);
      t.same(await store.claim('env_1', 'k1', 'fp-a', stale), done('fp-a', 201, body), 'replay');
      t.same(await store.claim('env_1', 'k1', 'fp-b', stale), done('fp-a', 201, body), 'reuse is detectable');
    });

    t.test('scopes are separate', async (t) => {
      t.equal(await store.claim('env_2', 'k1', 'fp-x', stale), null);
      t.same(await store.claim('env_2', 'k1', 'fp-x', stale), inProgress('fp-x'));
      t.same(await store.claim('env_1', 'k1', 'fp-a', stale), done('fp-a', 201, JSON.stringify({ id: 'cust_1', name: 'Zoë "quoted" \\ ✓' })));
    });

    t.test('release frees an in_progress claim but never a stored answer', async (t) => {
      t.equal(await store.claim('env_1', 'rel', 'fp-1', stale), null);
      await store.release('env_1', 'rel');
      t.equal(await store.claim('env_1', 'rel', 'fp-2', stale), null, 'claimable again, by another body too');
      t.same(await store.claim('env_1', 'rel', 'fp-1', stale), inProgress('fp-2'));
      await store.complete('env_1', 'rel', 200, '{}', 60_000);
      await store.release('env_1', 'rel');
      t.same(await store.claim('env_1', 'rel', 'fp-2', stale), done('fp-2', 200, '{}'));
      await store.release('env_1', 'never-claimed');
    });

    t.test('forget deletes the stored answers of a scope that mention a string, and nothing else', async (t) => {
      const answer = (id: string) => JSON.stringify({ id, external_id: 'player-9', attributes: { email: 'p9@example.com' } });
      for (const [scope, key, body] of [
        ['env_f', 'a', answer('cust_GONE')],
        ['env_f', 'b', JSON.stringify({ customer_id: 'cust_GONE', amount: 5 })],
        ['env_f', 'c', answer('cust_KEPT')],
        ['env_g', 'a', answer('cust_GONE')],
      ] as const) {
        t.equal(await store.claim(scope, key, `fp-${key}`, stale), null);
        await store.complete(scope, key, 201, body, 60_000);
      }
      t.equal(await store.claim('env_f', 'running', 'fp-r', stale), null, 'an in-progress claim has no answer yet');
      t.equal(await store.forget('env_f', ['cust_GONE', 'cust_NEVER']), 2);
      t.equal(await store.claim('env_f', 'a', 'fp-a', stale), null, 'forgotten: the key runs again');
      t.equal(await store.claim('env_f', 'b', 'fp-b', stale), null);
      t.same(await store.claim('env_f', 'c', 'fp-c', stale), done('fp-c', 201, answer('cust_KEPT')), 'other customers kept');
      t.same(await store.claim('env_g', 'a', 'fp-a', stale), done('fp-a', 201, answer('cust_GONE')), 'other scopes kept');
      t.same(await store.claim('env_f', 'running', 'fp-r', stale), inProgress('fp-r'), 'claims in progress kept');
      t.equal(await store.forget('env_f', ['%']), 0, 'no pattern characters');
      t.equal(await store.forget('env_f', []), 0, 'nothing named, nothing deleted');
    });

    t.test('an in_progress claim older than staleAfterMs goes to exactly one new claimer', async (t) => {
      t.equal(await store.claim('env_1', 'st', 'fp-old', stale), null);
      nowMs += stale;
      t.same(await store.claim('env_1', 'st', 'fp-new', stale), inProgress('fp-old'), 'exactly staleAfterMs old is not stale');
      nowMs += 1;
      t.equal(await store.claim('env_1', 'st', 'fp-new', stale), null, 'older than staleAfterMs: handed over');
      t.same(await store.claim('env_1', 'st', 'fp-new', stale), inProgress('fp-new'), 'the new claim is fresh');
      nowMs += 5;
      await store.complete('env_1', 'st', 201, 'answer', 60_000);
      nowMs += stale * 2;
      t.same(await store.claim('env_1', 'st', 'fp-other', stale), done('fp-new', 201, 'answer'), 'a done row is never stale');
    });

    t.test('concurrent claims: exactly one wins, on a fresh key and on an abandoned one', async (t) => {
      const fresh = await Promise.all(Array.from({ length: 12 }, (_, i) => store.claim('env_1', 'race', `fp-${i}`, stale)));
      t.equal(fresh.filter((r) => r === null).length, 1);
      const winner = fresh.indexOf(null);
      for (const r of fresh) if (r !== null) t.same(r, inProgress(`fp-${winner}`), 'losers see the winner');

      nowMs += stale + 1;
      const takeover = await Promise.all(Array.from({ length: 12 }, (_, i) => store.claim('env_1', 'race', `fq-${i}`, stale)));
      t.equal(takeover.filter((r) => r === null).length, 1, 'one takes the abandoned claim over');
      const next = takeover.indexOf(null);
      for (const r of takeover) if (r !== null) t.same(r, inProgress(`fq-${next}`));
    });

    t.test('an expired answer counts as absent and purgeExpired drops it', async (t) => {
      t.equal(await store.claim('env_3', 'exp', 'fp-1', stale), null);
      await store.complete('env_3', 'exp', 201, 'first', 1000);
      t.equal(await store.claim('env_3', 'keep', 'fp-k', stale), null);
      await store.complete('env_3', 'keep', 201, 'kept', 10_000);
      nowMs += 1000;
      t.same(await store.claim('env_3', 'exp', 'fp-2', stale), done('fp-1', 201, 'first'), 'kept for at least retentionMs');
      nowMs += 1;
      const purged = await store.purgeExpired();
      t.ok(purged >= 1, 'purged the expired row');
      t.same(await store.claim('env_3', 'keep', 'fp-k', stale), done('fp-k', 201, 'kept'), 'unexpired rows survive a purge');
      t.equal(await store.claim('env_3', 'exp', 'fp-2', stale), null, 'gone: a new claim');
      nowMs += 1000;
      t.equal(await store.purgeExpired(), 0, 'nothing else expired');
      nowMs += 10_000;
      // Not yet purged, but expired: it still counts as absent.
      t.equal(await store.claim('env_3', 'keep', 'fp-other', stale), null, 'an expired row is absent before any purge');
    });

    t.test('abandoned claims are eventually purged too', async (t) => {
      t.equal(await store.claim('env_4', 'lost', 'fp', stale), null);
      t.same(await store.claim('env_4', 'lost', 'fp', Number.MAX_SAFE_INTEGER), inProgress('fp'), 'a huge staleAfterMs means never stale');
      nowMs += idempotencyClaimTtlMs + 1;
      t.ok((await store.purgeExpired()) >= 1);
      t.equal(await store.claim('env_4', 'lost', 'fp2', Number.MAX_SAFE_INTEGER), null, 'gone although never stale');
    });

    t.test('complete without a claim is refused', async (t) => {
      await t.rejects(store.complete('env_5', 'nobody', 200, '{}', 1000));
      t.equal(await store.claim('env_5', 'nobody', 'fp', stale), null, 'and stores nothing');
    });
  });
}
