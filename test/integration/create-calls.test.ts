// Creates remembered by their call id (persistence/sql/create-calls.ts), on PostgreSQL and PGlite:
// two runs of one call at once (a claim taken over from a process that was only slow) make one
// resource and both answer it, the second through the first's record met inside its transaction;
// a run refused by a check the first run's insert made fail answers that insert; runs without a
// call id stay independent; a refused create records nothing; a record answers runs of its request
// only (not the same key and body sent again after the key's answer expired); a run again is
// answered only to a caller allowed now, with a message true to what the request did; records
// unused for longer than a claim lives are purged, others kept, without waiting on another purge.
import t, { type Test } from 'tap';
import { CounterCatalog } from '../../src/catalog/counters.js';
import type { Currency, CurrencyCatalog } from '../../src/catalog/currencies.js';
import { RewardCatalog } from '../../src/catalog/rewards.js';
import { SegmentCatalog } from '../../src/catalog/segments.js';
import { ApiError } from '../../src/errors/api-error.js';
import { MemoryBus } from '../../src/persistence/memory/bus.js';
import {
  createCallsKeptMs,
  createCallsLiveMs,
  createdEarlier,
  createOncePerCall,
  purgeCreateCalls,
  recordCreate,
} from '../../src/persistence/sql/create-calls.js';
import { openSql, type Sql } from '../../src/persistence/sql/db.js';
import { sqlForTest, sqlKinds, testDatabaseUrl } from '../helpers/sql.js';

const currencies = { all: async () => [{ key: 'coins' } as Currency] } as unknown as Pick<CurrencyCatalog, 'all'>;
const env = 'env_calls';
const mug = { name: 'Mug', cost: 5, currency: 'coins', availability: 3, expiryAfter: null };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitFor<T>(what: string, probe: () => Promise<T | null>): Promise<T> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const v = await probe();
    if (v !== null) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await sleep(20);
  }
}

/** The backend waiting on `pid` (its lock, or its place in a lock's queue) whose statement matches, or null. */
async function waiterOn(sql: Sql, pid: number, statement: RegExp): Promise<{ pid: number; query: string } | null> {
  const rows = await sql`select pid, query from pg_stat_activity where ${pid}::int = any(pg_blocking_pids(pid))`;
  const row = rows.find((r) => statement.test(r.query as string));
  return row === undefined ? null : { pid: row.pid as number, query: row.query as string };
}

/**
 * A transaction on a connection of its own (PostgreSQL only) that runs `statement` (a lock) and
 * stays open until release(): `pid` is its backend, `locked` resolves once the lock is granted.
 */
async function holding(t: Test, schema: string, statement: string) {
  const conn = openSql({ url: testDatabaseUrl, schema, max: 1 });
  t.teardown(() => conn.end());
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let pidIs!: (pid: number) => void;
  const pid = new Promise<number>((r) => (pidIs = r));
  let lockedNow!: () => void;
  const locked = new Promise<void>((r) => (lockedNow = r));
  const done = conn.begin(async (tx) => {
    pidIs((await tx`select pg_backend_pid() as p`)[0]!.p as number);
    await tx.unsafe(statement);
    lockedNow();
    await released;
  });
  return { pid: await pid, locked, release, done };
}

for (const kind of sqlKinds) {
  t.test(`${kind}: creates once per call`, async (t) => {
    const { sql, schema } = await sqlForTest(t, kind);
    const rewards = new RewardCatalog(sql, currencies);
    const rewardCount = async () => (await sql`select count(*)::int as n from rewards where environment_id = ${env}`)[0]!.n as number;

    await t.test('given two runs of one call at once, then one reward, which both answer', async (t) => {
      let a: Awaited<ReturnType<RewardCatalog['create']>>;
      let b: typeof a;
      if (kind === 'postgres') {
        // The first run's transaction is held (its reward insert waits on a table lock) until the
        // second waits on the first's record: it sees none before its transaction (uncommitted),
        // so it can only answer the first run's reward through the conflict inside it.
        const lock = await holding(t, schema, 'lock table rewards in exclusive mode');
        await lock.locked;
        const first = rewards.create(env, mug, 'call-1');
        const run1 = await waitFor('the first run waits on the lock', () => waiterOn(sql, lock.pid, /insert into rewards/));
        const second = rewards.create(env, mug, 'call-1');
        // Its only statement that can wait on the first run: the record's insert, in its transaction.
        await waitFor('the second run waits on the first run’s record', () => waiterOn(sql, run1.pid, /insert into create_calls/));
        lock.release();
        await lock.done;
        [a, b] = await Promise.all([first, second]);
      } else {
        // One connection: the runs take turns, the second finding the record before its transaction.
        [a, b] = await Promise.all([rewards.create(env, mug, 'call-1'), rewards.create(env, mug, 'call-1')]);
      }
      t.equal(a.id, b.id);
      t.same(a, b);
      t.equal(await rewardCount(), 1);
      t.equal(await createdEarlier(sql, 'call-1'), a.id, 'the call is recorded with the reward');
      const later = await rewards.create(env, mug, 'call-1');
      t.equal(later.id, a.id, 'a later run answers it too');
      t.equal(await rewardCount(), 1);
    });

    await t.test('given runs without a call id, then each creates', async (t) => {
      const [a, b] = await Promise.all([rewards.create(env, mug), rewards.create(env, mug)]);
      t.not(a.id, b.id);
      t.equal(await rewardCount(), 3);
    });

    await t.test('given a create refused (its name taken), then nothing is recorded for its call', async (t) => {
      const segments = new SegmentCatalog(sql, new MemoryBus());
      await segments.create(env, { name: 'vip', description: null, kind: 'static', condition: null }, 'call-2');
      await t.rejects(segments.create(env, { name: 'vip', description: null, kind: 'static', condition: null }, 'call-3'), { code: 'already_exists' });
      t.equal(await createdEarlier(sql, 'call-3'), null);
      await t.rejects(segments.create(env, { name: 'vip', description: null, kind: 'static', condition: null }, 'call-3'), { code: 'already_exists' }, 'refused again');
    });

    await t.test('given a create that fails after a run of its call recorded, then it answers what that run made', async (t) => {
      // As a check before the transaction refusing what the first run, finishing meanwhile, made.
      const answer = await createOncePerCall(sql, 'call-4', async (id) => `found ${id}`, async () => {
        await sql.begin((tx) => recordCreate(tx, 'call-4', 'rw_first'));
        throw new ApiError('validation_failed', { message: 'At most 200.' });
      });
      t.equal(answer, 'found rw_first');
      await t.rejects(
        createOncePerCall(sql, 'call-5', async (id) => `found ${id}`, async () => {
          throw new ApiError('validation_failed', { message: 'At most 200.' });
        }),
        { code: 'validation_failed' },
        'nothing recorded: the create’s own error',
      );
    });

    await t.test('given a record unused for longer than a claim lives, then it answers nothing and a create takes it over', async (t) => {
      // The key's stored answer expired (a day after the last run completed): the same key and body
      // are a new request, with the same call id, and must create.
      const first = await rewards.create(env, mug, 'call-6');
      await sql`update create_calls set used_at = now() - make_interval(secs => ${createCallsLiveMs / 1000 + 1}) where call_id = 'call-6'`;
      const usedAt = async () => (await sql`select used_at from create_calls where call_id = 'call-6'`)[0]!.used_at as Date;
      const before = await usedAt();
      t.equal(await createdEarlier(sql, 'call-6'), null, 'an earlier request’s record answers nothing');
      t.same(await usedAt(), before, 'nor is it refreshed');
      const fresh = await rewards.create(env, mug, 'call-6');
      t.not(fresh.id, first.id, 'the new request creates');
      t.equal(await createdEarlier(sql, 'call-6'), fresh.id, 'its record replaces the old one');
      t.equal((await rewards.create(env, mug, 'call-6')).id, fresh.id, 'and answers its runs again');
    });

    await t.test('given a record used within a claim’s life, then a run again answers it and keeps it live', async (t) => {
      const first = await rewards.create(env, mug, 'call-7');
      await sql`update create_calls set used_at = now() - make_interval(secs => ${createCallsLiveMs / 1000 - 60}) where call_id = 'call-7'`;
      t.equal((await rewards.create(env, mug, 'call-7')).id, first.id);
      const [r] = await sql`select used_at > now() - interval '1 minute' as fresh from create_calls where call_id = 'call-7'`;
      t.equal(r!.fresh, true, 'marked used now');
    });

    await t.test('given a run again, then the caller is checked now and a gone resource is named as the use says', async (t) => {
      await sql.begin((tx) => recordCreate(tx, 'call-8', 'usr_member'));
      let created = 0;
      const create = async () => {
        created++;
        return 'made';
      };
      const refused = new ApiError('forbidden', { message: 'Only an admin or owner manages members.' });
      await t.rejects(
        createOncePerCall(sql, 'call-8', { found: async () => 'member', allowed: async () => Promise.reject(refused) }, create),
        { code: 'forbidden', message: refused.message },
        'a caller not allowed now is refused as the create refuses',
      );
      const gone = (id: string) => `An earlier run of this request added ${id} to the organization, who is not a member any more.`;
      const notFound = async (): Promise<string> => {
        throw new ApiError('resource_not_found', { message: 'No such member.' });
      };
      await t.rejects(createOncePerCall(sql, 'call-8', { found: notFound, gone }, create), { code: 'resource_not_found', message: gone('usr_member') });
      await t.rejects(createOncePerCall(sql, 'call-8', notFound, create), {
        code: 'resource_not_found',
        message: 'An earlier run of this request created usr_member, which was deleted since.',
      });
      t.equal(created, 0, 'nothing made again');
    });

    await t.test('given records used long ago and lately, then the purge takes only the old', async (t) => {
      await sql`insert into create_calls (call_id, resource_id, used_at) values ('old', 'rw_x', now() - make_interval(secs => ${createCallsKeptMs / 1000 + 60}))`;
      t.equal(await purgeCreateCalls(sql), 1);
      t.equal((await sql`select count(*)::int as n from create_calls where call_id = 'old'`)[0]!.n, 0);
      t.equal(await createdEarlier(sql, 'call-1'), (await rewards.list(env, { limit: 1, after: null, status: null }))[0]!.id, 'a recent record stays');
    });

    if (kind !== 'postgres') return;

    await t.test('given a purge holding old records, then another purge skips them instead of waiting', async (t) => {
      await sql`
        insert into create_calls (call_id, resource_id, used_at)
        select 'old-' || g, 'rw_x', now() - make_interval(secs => ${createCallsKeptMs / 1000 + 60}) from generate_series(1, 3) g`;
      const other = await holding(t, schema, "select 1 from create_calls where call_id = 'old-1' for update");
      await other.locked;
      const purged = await Promise.race([purgeCreateCalls(sql), sleep(5000).then(() => 'waited' as const)]);
      other.release();
      await other.done;
      t.equal(purged, 2, 'the two records nobody held');
      t.equal(await purgeCreateCalls(sql), 1, 'the held one on the next round');
    });

    await t.test('given a run again whose cap check sees the first run’s counter, then it answers that counter', async (t) => {
      // The first run passed the cap (199 of 200) and waits to insert; the second finds no record
      // (uncommitted), then counts after the first committed: 200, which refuses it, though the
      // 200th is the counter its own request created.
      const counters = new CounterCatalog(sql, new MemoryBus());
      const cenv = 'env_capped';
      await sql`
        insert into counter_definitions (environment_id, id, name, event, time_window, filter, status)
        select ${cenv}, 'ctr_fill' || g, 'fill' || g, 'x', '{"kind":"lifetime"}'::jsonb, null, 'ready' from generate_series(1, 199) g`;
      const input = { name: 'orders', event: 'order.completed', window: { kind: 'lifetime' }, filter: null };
      const notEmpty = async () => false;
      const inserts = await holding(t, schema, 'lock table counter_definitions in exclusive mode');
      await inserts.locked;
      const first = counters.create(cenv, input, notEmpty, 'call-9');
      await waitFor('the first run waits to insert', () => waiterOn(sql, inserts.pid, /insert into counter_definitions/));
      // Queued behind the first run's insert: the second run's count then waits behind it in turn.
      const reads = await holding(t, schema, 'lock table counter_definitions in access exclusive mode');
      await waitFor('the read lock queues', () => waiterOn(sql, inserts.pid, /access exclusive/));
      const second = counters.create(cenv, input, notEmpty, 'call-9');
      await waitFor('the second run counts, waiting', () => waiterOn(sql, reads.pid, /count\(\*\)/));
      inserts.release();
      await inserts.done;
      const made = await first;
      reads.release();
      await reads.done;
      const again = await second;
      t.equal(again.id, made.id, 'the run again answers the first run’s counter, not the cap');
      t.equal((await sql`select count(*)::int as n from counter_definitions where environment_id = ${cenv}`)[0]!.n, 200);
    });
  });
}
