// IdempotencyStore contract, run against PostgreSQL, embedded PGlite and the in-memory twin with
// the same fake clock: claim/complete/replay (with the stored headers)/release, touch keeping a
// running claim alive, stale in_progress hand-over to exactly one claimer, expiry (an expired row
// is absent), scopes, forget by the customers an answer is about, purgeExpired; on SQL, rows
// written by the builds before headers and touches, and before customer_ids.
// Time moves only through the injected clock; no test sleeps.
import t from 'tap';
import { MemoryIdempotencyStore } from '../../src/persistence/memory/idempotency-store.js';
import type { IdempotencyStore } from '../../src/persistence/ports.js';
import { idempotencyClaimTtlMs, PgIdempotencyStore } from '../../src/persistence/sql/idempotency-store.js';
import type { Sql } from '../../src/persistence/sql/db.js';
import { sqlForTest, sqlKinds, type Teardown } from '../helpers/sql.js';

type Store = IdempotencyStore & { purgeExpired(): Promise<number> };

interface Adapter {
  name: string;
  /** `sql` only for the SQL adapters (rows written by an earlier build). */
  make(t: Teardown, clock: () => number): Promise<{ store: Store; sql: Sql | null }>;
}

const adapters: Adapter[] = [
  { name: 'memory', make: async (_t, clock) => ({ store: new MemoryIdempotencyStore(clock), sql: null }) },
  ...sqlKinds.map(
    (kind): Adapter => ({
      name: kind,
      make: async (t, clock) => {
        const { sql } = await sqlForTest(t, kind);
        return { store: new PgIdempotencyStore(sql, clock), sql };
      },
    }),
  ),
];

const stale = 30_000;
const answer9 = (id: string) => JSON.stringify({ id, external_id: 'player-9' });
const inProgress = (fingerprint: string) => ({ fingerprint, state: 'in_progress', status: null, body: null, headers: null });
const done = (fingerprint: string, status: number, body: string, headers: Record<string, string> | null = null) => ({
  fingerprint,
  state: 'done',
  status,
  body,
  headers,
});

for (const adapter of adapters) {
  t.test(`idempotency store on ${adapter.name}`, async (t) => {
    let nowMs = Date.UTC(2030, 0, 1);
    const { store, sql } = await adapter.make(t, () => nowMs);

    t.test('first claim runs the request; repeats see it in progress, then done', async (t) => {
      t.equal(await store.claim('env_1', 'k1', 'fp-a', stale), null, 'new claim');
      t.same(await store.claim('env_1', 'k1', 'fp-a', stale), inProgress('fp-a'), 'same request while running');
      t.same(await store.claim('env_1', 'k1', 'fp-b', stale), inProgress('fp-a'), 'a different body sees the first fingerprint');
      nowMs += 10;
      const body = JSON.stringify({ id: 'cust_1', name: 'Zoë "quoted" \\ ✓' });
      await store.complete('env_1', 'k1', 201, body, null, 60_000);
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
      await store.complete('env_1', 'rel', 200, '{}', null, 60_000);
      await store.release('env_1', 'rel');
      t.same(await store.claim('env_1', 'rel', 'fp-2', stale), done('fp-2', 200, '{}'));
      await store.release('env_1', 'never-claimed');
    });

    t.test('forget deletes the answers about the customers in every scope of the environment, and nothing else', async (t) => {
      const answer = (id: string) => JSON.stringify({ id, external_id: 'player-9', attributes: { email: 'p9@example.com' } });
      // A ledger entry's answer does not show its customer: only its label names it.
      const entry = JSON.stringify({ id: 'le_1', amount: 5, reason: 'goodwill for Jane Doe' });
      for (const [scope, key, body, about] of [
        ['env_f', 'a', answer('cust_GONE'), ['cust_GONE']],
        ['env_f', 'b', entry, ['cust_GONE']],
        ['env_f', 'c', answer('cust_KEPT'), ['cust_KEPT']],
        ['env_f', 'd', JSON.stringify({ merged_from: 'cust_MERGED' }), ['cust_KEPT', 'cust_MERGED']],
        ['env_f', 'none', '{"id":"cur_1"}', []],
        ['env_f/usr_1', 'a', answer('cust_GONE'), ['cust_GONE']],
        ['env_f/usr_2', 'b', entry, ['cust_GONE']],
        ['env_fx', 'a', answer('cust_GONE'), ['cust_GONE']],
        ['env_fx/usr_1', 'a', answer('cust_GONE'), ['cust_GONE']],
        ['env_g', 'a', answer('cust_GONE'), ['cust_GONE']],
      ] as const) {
        t.equal(await store.claim(scope, key, `fp-${key}`, stale), null);
        await store.complete(scope, key, 201, body, null, 60_000, about);
      }
      t.equal(await store.claim('env_f', 'running', 'fp-r', stale), null, 'an in-progress claim has no answer yet');
      t.equal(await store.forget('env_f', ['cust_GONE', 'cust_NEVER', 'cust_MERGED']), 5);
      t.equal(await store.claim('env_f', 'a', 'fp-a', stale), null, 'forgotten: the key runs again');
      t.equal(await store.claim('env_f', 'b', 'fp-b', stale), null, 'an answer that does not show the customer too');
      t.equal(await store.claim('env_f', 'd', 'fp-d', stale), null, 'any customer named is enough');
      t.equal(await store.claim('env_f/usr_1', 'a', 'fp-a', stale), null, "a person's scope in the environment too");
      t.equal(await store.claim('env_f/usr_2', 'b', 'fp-b', stale), null);
      t.same(await store.claim('env_f', 'c', 'fp-c', stale), done('fp-c', 201, answer('cust_KEPT')), 'other customers kept');
      t.same(await store.claim('env_f', 'none', 'fp-none', stale), done('fp-none', 201, '{"id":"cur_1"}'), 'answers about no customer kept');
      for (const scope of ['env_fx', 'env_fx/usr_1', 'env_g']) {
        t.same(await store.claim(scope, 'a', 'fp-a', stale), done('fp-a', 201, answer('cust_GONE')), `other environments kept: ${scope}`);
      }
      t.same(await store.claim('env_f', 'running', 'fp-r', stale), inProgress('fp-r'), 'claims in progress kept');
      t.equal(await store.forget('env_f', ['%']), 0, 'no pattern characters');
      t.equal(await store.forget('env_f', []), 0, 'nothing named, nothing deleted');
    });

    t.test('an answer goes by the customers it was stored about, not by the text it shows', async (t) => {
      t.equal(await store.claim('env_l', 'a', 'fp', stale), null);
      await store.complete('env_l', 'a', 201, answer9('cust_SHOWN'), null, 60_000, []);
      t.equal(await store.claim('env_l', 'b', 'fp', stale), null);
      await store.complete('env_l', 'b', 201, answer9('cust_SHOWN'), null, 60_000);
      t.equal(await store.forget('env_l', ['cust_SHOWN']), 0, 'stored about nobody (complete without customerIds too)');
      t.same(await store.claim('env_l', 'a', 'fp', stale), done('fp', 201, answer9('cust_SHOWN')));
    });

    t.test('an in_progress claim older than staleAfterMs goes to exactly one new claimer', async (t) => {
      t.equal(await store.claim('env_1', 'st', 'fp-old', stale), null);
      nowMs += stale;
      t.same(await store.claim('env_1', 'st', 'fp-new', stale), inProgress('fp-old'), 'exactly staleAfterMs old is not stale');
      nowMs += 1;
      t.equal(await store.claim('env_1', 'st', 'fp-new', stale), null, 'older than staleAfterMs: handed over');
      t.same(await store.claim('env_1', 'st', 'fp-new', stale), inProgress('fp-new'), 'the new claim is fresh');
      nowMs += 5;
      await store.complete('env_1', 'st', 201, 'answer', null, 60_000);
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
      await store.complete('env_3', 'exp', 201, 'first', null, 1000);
      t.equal(await store.claim('env_3', 'keep', 'fp-k', stale), null);
      await store.complete('env_3', 'keep', 201, 'kept', null, 10_000);
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

    t.test('the stored headers come back with the answer, as a copy', async (t) => {
      t.equal(await store.claim('env_h', 'h1', 'fp', stale), null);
      const headers = { etag: '"1"', location: '/v1/customers/cust_1' };
      await store.complete('env_h', 'h1', 201, '{"id":"cust_1"}', headers, 60_000);
      headers.etag = '"2"';
      const replay = await store.claim('env_h', 'h1', 'fp', stale);
      t.same(replay, done('fp', 201, '{"id":"cust_1"}', { etag: '"1"', location: '/v1/customers/cust_1' }));
      replay!.headers!.etag = 'changed';
      t.same((await store.claim('env_h', 'h1', 'fp', stale))?.headers, { etag: '"1"', location: '/v1/customers/cust_1' });
      t.equal(await store.claim('env_h', 'h2', 'fp', stale), null);
      await store.complete('env_h', 'h2', 409, '{"error":{}}', null, 60_000);
      t.same(await store.claim('env_h', 'h2', 'fp', stale), done('fp', 409, '{"error":{}}', null), 'no headers: null');
    });

    t.test('a touched claim is never stale while its request runs; an untouched one still goes stale', async (t) => {
      t.equal(await store.claim('env_t', 'run', 'fp-run', stale), null);
      for (let i = 0; i < 5; i++) {
        nowMs += stale / 3;
        t.equal(await store.touch('env_t', 'run'), true, `touch ${i + 1}`);
      }
      nowMs += stale;
      t.same(await store.claim('env_t', 'run', 'fp-run', stale), inProgress('fp-run'), 'staleAfterMs since the last touch: kept');
      nowMs += 1;
      t.equal(await store.claim('env_t', 'run', 'fp-next', stale), null, 'untouched for longer: its process died, taken over');
      t.same(await store.claim('env_t', 'run', 'fp-run', stale), inProgress('fp-next'));
    });

    t.test('touch finds no claim once it is completed, released, expired or never made', async (t) => {
      t.equal(await store.claim('env_t', 'c', 'fp', stale), null);
      await store.complete('env_t', 'c', 201, 'x', { etag: '"1"' }, 60_000);
      t.equal(await store.touch('env_t', 'c'), false, 'completed');
      t.same(await store.claim('env_t', 'c', 'fp', stale), done('fp', 201, 'x', { etag: '"1"' }), 'the answer is untouched');
      t.equal(await store.claim('env_t', 'r', 'fp', stale), null);
      await store.release('env_t', 'r');
      t.equal(await store.touch('env_t', 'r'), false, 'released');
      t.equal(await store.claim('env_t', 'r', 'fp', stale), null, 'and not recreated by the touch');
      t.equal(await store.touch('env_t', 'never'), false, 'never claimed');
      t.equal(await store.claim('env_t', 'exp', 'fp', stale), null);
      nowMs += idempotencyClaimTtlMs + 1;
      t.equal(await store.touch('env_t', 'exp'), false, 'expired');
      t.equal(await store.claim('env_t', 'exp', 'fp2', stale), null, 'still absent');
    });

    if (sql !== null) {
      t.test('rows written before headers and touches: they replay without headers and go stale from created_at', async (t) => {
        const at = (ms: number) => new Date(ms);
        await sql`
          insert into idempotency_keys (scope, key, fingerprint, state, status, body, created_at, expires_at)
          values ('env_old', 'done', 'fp', 'done', 201, '{"id":"cust_9"}', ${at(nowMs)}, ${at(nowMs + 60_000)}),
                 ('env_old', 'running', 'fp', 'in_progress', null, null, ${at(nowMs)}, ${at(nowMs + idempotencyClaimTtlMs)})`;
        t.same(await store.claim('env_old', 'done', 'fp', stale), done('fp', 201, '{"id":"cust_9"}', null));
        nowMs += stale;
        t.same(await store.claim('env_old', 'running', 'fp', stale), inProgress('fp'));
        nowMs += 1;
        t.equal(await store.claim('env_old', 'running', 'fp', stale), null, 'stale from created_at');
      });
    }

    if (sql !== null) {
      t.test('answers stored before customer_ids (migration 030) are forgotten by the id in their body', async (t) => {
        const at = (ms: number) => new Date(ms);
        await sql`
          insert into idempotency_keys (scope, key, fingerprint, state, status, body, headers, created_at, expires_at)
          values ('env_m', 'a', 'fp', 'done', 201, ${answer9('cust_GONE')}, null, ${at(nowMs)}, ${at(nowMs + 60_000)}),
                 ('env_m/usr_1', 'a', 'fp', 'done', 201, ${answer9('cust_GONE')}, null, ${at(nowMs)}, ${at(nowMs + 60_000)}),
                 ('env_m', 'b', 'fp', 'done', 201, ${answer9('cust_KEPT')}, null, ${at(nowMs)}, ${at(nowMs + 60_000)}),
                 ('env_mx', 'a', 'fp', 'done', 201, ${answer9('cust_GONE')}, null, ${at(nowMs)}, ${at(nowMs + 60_000)})`;
        t.equal(await store.claim('env_m', 'c', 'fp', stale), null);
        await store.complete('env_m', 'c', 201, answer9('cust_GONE'), null, 60_000, []);
        t.equal(await store.forget('env_m', ['cust_GONE']), 2, 'the old rows naming it, in every scope of the environment');
        t.equal(await store.claim('env_m', 'a', 'fp', stale), null);
        t.equal(await store.claim('env_m/usr_1', 'a', 'fp', stale), null);
        t.same(await store.claim('env_m', 'b', 'fp', stale), done('fp', 201, answer9('cust_KEPT')));
        t.same(await store.claim('env_mx', 'a', 'fp', stale), done('fp', 201, answer9('cust_GONE')));
        t.same(await store.claim('env_m', 'c', 'fp', stale), done('fp', 201, answer9('cust_GONE')), 'a labelled row goes by its label');
        // A claim taken over from an old answer is labelled afresh when completed.
        nowMs += 60_001;
        t.equal(await store.claim('env_m', 'b', 'fp2', stale), null, 'expired: taken over');
        await store.complete('env_m', 'b', 201, answer9('cust_NEW'), null, 60_000, ['cust_NEW']);
        t.equal(await store.forget('env_m', ['cust_KEPT']), 0);
        t.equal(await store.forget('env_m', ['cust_NEW']), 1);
      });
    }

    t.test('complete without a claim is refused', async (t) => {
      await t.rejects(store.complete('env_5', 'nobody', 200, '{}', null, 1000));
      t.equal(await store.claim('env_5', 'nobody', 'fp', stale), null, 'and stores nothing');
    });
  });
}
