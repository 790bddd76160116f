// A tier program's pending move runs once at a time (review B #5): two runs of the same program's
// move, on one node or on two (two catalogs on one database), never overlap (the sweep skips a
// program being moved; a PATCH waits for it and then finds nothing owed), also over PGlite's one
// connection without a deadlock; and a move stops before its next page once the stored program is
// past the version it carries out.
import { pino } from 'pino';
import t from 'tap';
import type { Currency } from '../../src/catalog/currencies.js';
import { type MoveHolders, MoveSuperseded, TierProgramCatalog, type TierProgramRecord } from '../../src/catalog/tier-programs.js';
import { TierMoves } from '../../src/jobs/tier-moves.js';
import { MemoryBus } from '../../src/persistence/memory/bus.js';
import type { Sql } from '../../src/persistence/sql/db.js';
import { sqlForTest, sqlKinds } from '../helpers/sql.js';

const levels = [
  { key: 'bronze', title: 'Bronze', threshold: 0 },
  { key: 'silver', title: 'Silver', threshold: 1000 },
];
const currencies = { all: async () => [{ key: 'coins' } as Currency] };
const env = 'env_claims';

/** A move that records its runs and blocks until released; it reads the database meanwhile, as the projector does. */
function blockingMove(sql: Sql) {
  const runs: number[] = [];
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let started!: () => void;
  const startedOnce = new Promise<void>((r) => (started = r));
  const move: MoveHolders = async (_env, program) => {
    runs.push(program.version);
    started();
    await sql`select 1`;
    await released;
  };
  return { runs, move, release, started: startedOnce };
}

async function programOwingAMove(sql: Sql, catalog: TierProgramCatalog): Promise<TierProgramRecord> {
  const p = await catalog.create(env, { key: 'vip', name: 'VIP', currency: 'coins', basis: 'lifetime_earned', rollingDays: null, levels, downgradeCheck: null });
  await sql`update tier_programs set pending_move = '{"retiredLevels":[],"reevaluate":true,"scheduleChecks":false}'::jsonb where id = ${p.id}`;
  return p;
}

const owed = async (sql: Sql, id: string) => (await sql`select pending_move is not null as owed from tier_programs where id = ${id}`)[0]!.owed as boolean;

for (const kind of sqlKinds) {
  t.test(`${kind}: two runs of one program's move on one node: only one runs; a PATCH waits for it`, async (t) => {
    // Given a program owing a move, and a move that blocks
    const { sql } = await sqlForTest(t, kind);
    const blocking = blockingMove(sql);
    const catalog = new TierProgramCatalog(sql, new MemoryBus(), currencies, undefined, blocking.move, { oneConnection: kind === 'pglite' });
    const p = await programOwingAMove(sql, catalog);

    // When two finishMove calls run at once
    const first = catalog.finishMove(env, p.id);
    await blocking.started;
    const second = await catalog.finishMove(env, p.id);
    // Then the second skips at once, while the first still runs
    t.equal(second, null, 'skipped: another run holds the claim');
    // and a PATCH meanwhile waits for the move rather than running it again
    let patched = false;
    const patch = catalog.update(env, p.id, { name: 'Renamed' }).then((r) => {
      patched = true;
      return r;
    });
    await new Promise((r) => setTimeout(r, 100));
    t.equal(patched, false, 'the PATCH waits');
    blocking.release();
    t.match(await first, { id: p.id, version: 1, pendingMove: null });
    t.match(await patch, { name: 'Renamed', version: 2, pendingMove: null });
    t.same(blocking.runs, [1], 'the move ran once');
    t.equal(await owed(sql, p.id), false);
  });
}

t.test('postgres: two nodes sweeping at once move a program once', async (t) => {
  // Given two catalogs (two nodes) on one database and a program owing a move
  const { sql } = await sqlForTest(t, 'postgres');
  const blocking = blockingMove(sql);
  const a = new TierProgramCatalog(sql, new MemoryBus(), currencies, undefined, blocking.move);
  const b = new TierProgramCatalog(sql, new MemoryBus(), currencies, undefined, blocking.move);
  const p = await programOwingAMove(sql, a);
  const errors: unknown[] = [];

  // When both sweep at once
  const sweepA = a.finishPendingMoves(null, (err) => errors.push(err));
  await blocking.started;
  await b.finishPendingMoves(null, (err) => errors.push(err));
  // Then B skipped the program A is moving; B's PATCH waits for A's move
  t.same(blocking.runs, [1]);
  let patched = false;
  const patch = b.update(env, p.id, { name: 'Renamed' }).then(() => {
    patched = true;
  });
  await new Promise((r) => setTimeout(r, 100));
  t.equal(patched, false, 'the PATCH on the other node waits');
  blocking.release();
  await sweepA;
  await patch;
  t.same(blocking.runs, [1], 'the move ran once');
  t.same(errors, []);
  t.equal(await owed(sql, p.id), false);
});

t.test('a move stops before its next page once the stored program moved past its version', async (t) => {
  // Given a move over two pages of holders, and a program whose stored version moves on after the first
  let version = 4;
  const executed: string[] = [];
  const pages = [['c1'], ['c2'], []];
  const moves = new TierMoves({
    engine: {
      execute: async (call) => {
        executed.push((call.target as { id: string }).id);
        version = 5;
        return { ok: true, reply: { kind: 'applied', changed: true } } as never;
      },
    },
    readModel: {
      tierHoldersOf: async () => pages.shift() ?? [],
      tierLevelsHeldBesides: async () => [],
    },
    catalog: { finishPendingMoves: async () => {}, storedVersion: async () => version },
    now: () => Date.now(),
    drainProjector: async () => {},
    logger: pino({ level: 'silent' }),
  });
  const record: TierProgramRecord = {
    id: 'tp_1',
    key: 'vip',
    name: 'VIP',
    currency: 'coins',
    basis: 'lifetime_earned',
    rollingDays: null,
    levels,
    downgradeCheck: null,
    version: 4,
    createdAtMs: 0,
    updatedAtMs: 0,
    pendingMove: { retiredLevels: [], reevaluate: true, scheduleChecks: false },
    retiredLevels: null,
  };
  // When it runs, then it stops with MoveSuperseded after the first page
  await t.rejects(moves.move(env, record, record.pendingMove!), MoveSuperseded);
  t.same(executed, ['c1'], 'the second page is not moved');
});
