// Read-model contract, run against PostgreSQL and embedded PGlite: projections land as camelCase
// rows with ms timestamps; apply is idempotent (same batch, or the same facts re-delivered later);
// customer versions only move forward; order inside a batch is kept; erase removes personal data
// for good; keyset pagination has exact boundaries; the projected offset only moves forward; a
// page of mixed kinds goes in a few statements.
import postgres from 'postgres';
import t from 'tap';
import { PgReadModel, type Projection } from '../../src/persistence/sql/read-model.js';
import { openSql } from '../../src/persistence/sql/db.js';
import { sqlForTest, sqlKinds, testDatabaseUrl } from '../helpers/sql.js';

const T0 = Date.UTC(2030, 5, 1, 12, 0, 0, 123);

const upsert = (id: string, version: number, over: Partial<Extract<Projection, { kind: 'customer.upsert' }>> = {}): Projection => ({
  kind: 'customer.upsert',
  environmentId: 'env_a',
  id,
  externalId: `ext-${id}`,
  attributes: { v: version },
  version,
  createdAtMs: T0,
  updatedAtMs: T0 + version,
  ...over,
});
const erase = (id: string, version: number, environmentId = 'env_a'): Projection => ({
  kind: 'customer.erase',
  environmentId,
  id,
  deletedAtMs: T0 + 1000 * version,
  version,
});
const alias = (a: string, customerId: string, createdAtMs = T0): Projection => ({
  kind: 'alias.upsert',
  environmentId: 'env_a',
  alias: a,
  customerId,
  aliasKind: 'anonymous',
  createdAtMs,
});
const event = (id: string, customerId: string, receivedAtMs: number, properties: Record<string, unknown> = { n: 1 }): Projection => ({
  kind: 'event.insert',
  environmentId: 'env_a',
  id,
  clientEventId: `client-${id}`,
  customerId,
  name: 'level_up',
  occurredAtMs: receivedAtMs - 5,
  receivedAtMs,
  properties,
  status: 'evaluated',
  trust: 'merchant_asserted',
  sourceType: 'secret_key',
  sourceId: 'key_1',
});

for (const kind of sqlKinds) {
  t.test(`read model on ${kind}`, async (t) => {
    const { sql } = await sqlForTest(t, kind);
    const rm = new PgReadModel(sql);
    // Each subtest uses its own partition so offsets do not interfere.
    let partition = 0;
    const next = () => ++partition;

    t.test('rows come back as camelCase with ms timestamps; JSON and odd text survive', async (t) => {
      const p = next();
      const attributes = {
        tier: 'gold',
        nested: { list: [1, 'two', null] },
        quote: 'a"b\\c',
        nul: 'x\u0000y',
        slash: '\\u0000',
        slashD: '\\ud800',
        pair: '\u{1F3C6}',
      };
      // Journaled before the gateway refused them: a NUL and an unpaired surrogate, in a value and a key.
      const properties = { amount: 5, raw: 'p\u0000q', lone: 'a\ud800b', ['k\udc00']: 1 };
      await rm.apply(p, '1-0', [upsert('c1', 1, { attributes }), event('e1', 'c1', T0 + 10, properties), alias('anon-1', 'c1')]);
      t.same(await rm.getCustomer('env_a', 'c1'), {
        environmentId: 'env_a',
        id: 'c1',
        externalId: 'ext-c1',
        attributes: { ...attributes, nul: 'x\uFFFDy' },
        version: 1,
        createdAtMs: T0,
        updatedAtMs: T0 + 1,
        deletedAtMs: null,
      });
      t.same(await rm.getEvent('env_a', 'e1'), {
        environmentId: 'env_a',
        id: 'e1',
        clientEventId: 'client-e1',
        customerId: 'c1',
        name: 'level_up',
        occurredAtMs: T0 + 5,
        receivedAtMs: T0 + 10,
        properties: { amount: 5, raw: 'p\uFFFDq', lone: 'a\uFFFDb', ['k\uFFFD']: 1 },
        status: 'evaluated',
        trust: 'merchant_asserted',
        sourceType: 'secret_key',
        sourceId: 'key_1',
        customerExternalId: 'ext-c1',
      });
      t.same(await rm.listAliases('env_a', 'c1'), [{ environmentId: 'env_a', alias: 'anon-1', customerId: 'c1', kind: 'anonymous', createdAtMs: T0 }]);
      t.equal(await rm.getCustomer('env_b', 'c1'), null, 'environments are separate');
      t.equal(await rm.getEvent('env_a', 'nope'), null);
      t.equal(await rm.projectedOffset(p), '1-0');
    });

    t.test("a sync event's answer is kept with its row; an event answered 202 has none", async (t) => {
      const p = next();
      const effects = [{ type: 'rule.fired', ruleId: 'rule_1', version: 2 }, { type: 'points.awarded', ruleId: 'rule_1', currency: 'coins', amount: 5, entryId: 'le_1' }];
      await rm.apply(p, '1-0', [{ ...event('ans-1', 'c1', T0 + 10), effects } as Projection, event('ans-2', 'c1', T0 + 11)]);
      t.same(await rm.eventAnswer('env_a', 'ans-1'), { effects });
      t.same(await rm.eventAnswer('env_a', 'ans-2'), { effects: null }, 'answered 202');
      t.equal(await rm.eventAnswer('env_a', 'ans-3'), null, 'not projected');
      t.equal(await rm.eventAnswer('env_b', 'ans-1'), null, 'another environment');
    });

    t.test('a merged customer is left out of lists that ask so, and kept for the others', async (t) => {
      const p = next();
      await rm.apply(p, '1-0', [upsert('mg-a', 1), upsert('mg-b', 1)]);
      await rm.apply(p, '2-0', [{ kind: 'customer.merge', environmentId: 'env_a', id: 'mg-a', into: 'mg-b' }]);
      const ids = async (withoutMerged: boolean) =>
        (await rm.listCustomers('env_a', { limit: 200, after: null, withoutMerged })).map((c) => c.id).filter((id) => id.startsWith('mg-'));
      t.same(await ids(true), ['mg-b']);
      t.same(await ids(false), ['mg-a', 'mg-b'], 'a merge still finds the merged customer by its external id');
      t.same((await rm.listCustomers('env_a', { limit: 5, after: null, externalId: 'ext-mg-a' })).map((c) => c.id), ['mg-a']);
    });

    t.test('re-applying the same batch, or re-delivering its facts later, changes nothing', async (t) => {
      const p = next();
      const batch = [upsert('r1', 1), upsert('r1', 2), event('re1', 'r1', T0 + 1), event('re2', 'r1', T0 + 2), alias('r-alias', 'r1')];
      await rm.apply(p, '5-0', batch);
      const snapshot = async () => ({
        customer: await rm.getCustomer('env_a', 'r1'),
        events: await rm.listCustomerEvents('env_a', 'r1', { limit: 10 }),
        aliases: await rm.listAliases('env_a', 'r1'),
      });
      const before = await snapshot();
      t.equal(before.customer?.version, 2, 'the highest version in the batch wins');
      t.equal(before.events.length, 2);

      await rm.apply(p, '5-0', batch);
      t.same(await snapshot(), before, 'same offset: skipped');
      await rm.apply(p, '4-0', [upsert('r1', 9), event('re3', 'r1', T0 + 3)]);
      t.same(await snapshot(), before, 'older offset: skipped whole');
      t.equal(await rm.projectedOffset(p), '5-0', 'offset did not move back');

      // The projector delivers at least once: the same facts may come again under a newer offset.
      await rm.apply(p, '6-0', [...batch, upsert('r1', 1, { attributes: { stale: true } }), event('re1', 'r1', T0 + 99, { changed: true })]);
      t.same(await snapshot(), before, 'versions and event ids make re-delivery a no-op');
      t.equal(await rm.projectedOffset(p), '6-0');
      t.equal(await rm.countCustomerEvents('env_a', 'r1'), 2);
    });

    t.test('customer versions only move forward', async (t) => {
      const p = next();
      await rm.apply(p, '1-0', [upsert('v1', 3, { externalId: 'three' })]);
      await rm.apply(p, '2-0', [upsert('v1', 2, { externalId: 'two' })]);
      t.equal((await rm.getCustomer('env_a', 'v1'))?.externalId, 'three');
      await rm.apply(p, '3-0', [upsert('v1', 4, { externalId: null, attributes: { a: 1 } })]);
      const c = await rm.getCustomer('env_a', 'v1');
      t.same([c?.version, c?.externalId, c?.attributes, c?.createdAtMs], [4, null, { a: 1 }, T0], 'created_at is kept');
    });

    t.test('order inside a batch is kept across kinds', async (t) => {
      const p = next();
      // The alias moves to o2 (a merge) and then o1 is erased: the alias must survive with o2.
      await rm.apply(p, '1-0', [
        upsert('o1', 1),
        alias('shared', 'o1'),
        event('oe1', 'o1', T0 + 1, { secret: 'x' }),
        upsert('o2', 1),
        alias('shared', 'o2', T0 + 7),
        erase('o1', 2),
        event('oe2', 'o1', T0 + 2, { late: 'y' }),
      ]);
      t.same((await rm.listAliases('env_a', 'o2')).map((a) => [a.alias, a.createdAtMs]), [['shared', T0 + 7]]);
      t.same(await rm.listAliases('env_a', 'o1'), []);
      t.same((await rm.listCustomerEvents('env_a', 'o1', { limit: 10 })).map((e) => [e.id, e.properties]), [
        ['oe2', null],
        ['oe1', null],
      ]);

      // The opposite order: erased first, then the alias moves away and comes back to nothing.
      await rm.apply(p, '2-0', [alias('shared', 'o1')]);
      t.same(await rm.listAliases('env_a', 'o1'), [], 'no alias is attached to an erased customer');
      t.same((await rm.listAliases('env_a', 'o2')).map((a) => a.alias), ['shared'], 'and the moving alias stays where it was');
    });

    t.test('erase: personal data gone for good, row and events kept', async (t) => {
      const p = next();
      await rm.apply(p, '1-0', [
        upsert('d1', 1, { attributes: { email: 'a@b.c' } }),
        alias('d1-anon', 'd1'),
        event('de1', 'd1', T0 + 1, { email: 'a@b.c' }),
        upsert('d2', 1),
        event('de2', 'd2', T0 + 1, { keep: true }),
      ]);
      await rm.apply(p, '2-0', [erase('d1', 2)]);
      const c = await rm.getCustomer('env_a', 'd1');
      t.same(c, {
        environmentId: 'env_a',
        id: 'd1',
        externalId: null,
        attributes: {},
        version: 2,
        createdAtMs: T0,
        updatedAtMs: T0 + 2000,
        deletedAtMs: T0 + 2000,
      });
      t.same(await rm.listAliases('env_a', 'd1'), []);
      t.same((await rm.getEvent('env_a', 'de1'))?.properties, null);
      t.same((await rm.getEvent('env_a', 'de2'))?.properties, { keep: true }, 'other customers untouched');
      t.same(await rm.listCustomers('env_a', { limit: 10, after: null, externalId: 'ext-d1' }), [], 'not found by its old external id');

      // Late or re-delivered facts cannot bring anything back.
      await rm.apply(p, '3-0', [upsert('d1', 5, { attributes: { email: 'again' } }), alias('d1-anon', 'd1'), event('de3', 'd1', T0 + 3, { email: 'x' })]);
      const after = await rm.getCustomer('env_a', 'd1');
      t.same([after?.externalId, after?.attributes, after?.deletedAtMs], [null, {}, T0 + 2000]);
      t.same(await rm.listAliases('env_a', 'd1'), []);
      t.same((await rm.getEvent('env_a', 'de3'))?.properties, null);
      await rm.apply(p, '4-0', [erase('d1', 3)]);
      t.equal((await rm.getCustomer('env_a', 'd1'))?.deletedAtMs, T0 + 2000, 'a second erase keeps the first deletion time');

      // A kept sync answer survives the erase, but not a skipped rule's detail (it may quote the
      // customer's values), whether the event was projected before or in the erase's batch.
      const answer = [
        { type: 'rule.fired', ruleId: 'rule_1', version: 1 },
        { type: 'rule.skipped', ruleId: 'rule_2', reason: 'limit_reached', detail: "fired 1 of 1 for scope 'customer|s:a@b.c'" },
      ];
      const withAnswer = (id: string, customerId: string, at: number): Projection => ({ ...event(id, customerId, at, { email: 'a@b.c' }), effects: answer } as Projection);
      // A sync answer that had no effects stays an empty answer (a repeat answers 200 with []).
      const noEffects = { ...event('de7', 'd3', T0 + 7, { email: 'a@b.c' }), effects: [] } as Projection;
      await rm.apply(p, '4-1', [upsert('d3', 1), withAnswer('de4', 'd3', T0 + 4), noEffects, upsert('d4', 1), withAnswer('de6', 'd4', T0 + 6)]);
      await rm.apply(p, '4-2', [withAnswer('de5', 'd3', T0 + 5), erase('d3', 2)]);
      const kept = [answer[0], { type: 'rule.skipped', ruleId: 'rule_2', reason: 'limit_reached' }];
      t.same(await rm.eventAnswer('env_a', 'de4'), { effects: kept }, 'projected before the erase');
      t.same(await rm.eventAnswer('env_a', 'de5'), { effects: kept }, 'projected in the erase batch');
      t.same(await rm.eventAnswer('env_a', 'de6'), { effects: answer }, "another customer's answer untouched");
      t.same(await rm.eventAnswer('env_a', 'de7'), { effects: [] }, 'an empty answer stays empty');

      // An erase for a customer the read model never saw leaves a tombstone.
      await rm.apply(p, '5-0', [erase('ghost', 4)]);
      await rm.apply(p, '6-0', [upsert('ghost', 1)]);
      const ghost = await rm.getCustomer('env_a', 'ghost');
      t.same([ghost?.externalId, ghost?.deletedAtMs], [null, T0 + 4000]);
    });

    t.test('listCustomers: keyset by id, limit + 1, exact boundaries, external id filter', async (t) => {
      const p = next();
      // A separate environment so other subtests' customers do not show up; byte order of ids.
      const ids = ['b', 'B', 'a', 'a0', 'ä', '_', 'cust_10', 'cust_9', 'cust_1'];
      await rm.apply(p, '1-0', ids.map((id) => upsert(id, 1, { environmentId: 'env_page', externalId: id === 'a0' ? 'dup' : `x-${id}` })));
      await rm.apply(p, '2-0', [upsert('zz', 1, { environmentId: 'env_page', externalId: 'dup' })]);
      const sorted = [...ids, 'zz'].sort((x, y) => (Buffer.from(x) < Buffer.from(y) ? -1 : 1));

      const all = await rm.listCustomers('env_page', { limit: 100, after: null });
      t.same(all.map((c) => c.id), sorted, 'ascending in byte order');

      // Walk pages of 3 the way the gateway does: take limit rows, the extra one means "more".
      const seen: string[] = [];
      let after: string | null = null;
      let pages = 0;
      for (;;) {
        const rows = await rm.listCustomers('env_page', { limit: 3, after });
        pages++;
        const page = rows.slice(0, 3);
        seen.push(...page.map((r) => r.id));
        if (rows.length <= 3) break;
        t.equal(rows.length, 4, 'limit + 1 rows while there is more');
        after = page[page.length - 1]!.id;
      }
      t.same(seen, sorted, 'every customer once, in order');
      t.equal(pages, 4);

      const exact = await rm.listCustomers('env_page', { limit: sorted.length, after: null });
      t.equal(exact.length, sorted.length, 'a full last page has no extra row');
      t.same(await rm.listCustomers('env_page', { limit: 5, after: sorted[sorted.length - 1]! }), [], 'after the last id: empty');
      t.same((await rm.listCustomers('env_page', { limit: 5, after: 'a' })).map((c) => c.id)[0], 'a0', 'after is exclusive');

      t.same((await rm.listCustomers('env_page', { limit: 10, after: null, externalId: 'dup' })).map((c) => c.id), ['a0', 'zz']);
      t.same((await rm.listCustomers('env_page', { limit: 1, after: null, externalId: 'dup' })).map((c) => c.id), ['a0', 'zz'], 'limit + 1 with the filter too');
      t.same((await rm.listCustomers('env_page', { limit: 10, after: 'a0', externalId: 'dup' })).map((c) => c.id), ['zz']);
      t.same(await rm.listCustomers('env_page', { limit: 10, after: null, externalId: 'none' }), []);
    });

    t.test('listCustomerEvents: newest first, ties broken by id, before-cursors, count', async (t) => {
      const p = next();
      const batch: Projection[] = [upsert('ev', 1)];
      // Three events share one timestamp so page boundaries fall inside a tie.
      const times: Array<[string, number]> = [
        ['e01', T0 + 1],
        ['e02', T0 + 2],
        ['e03', T0 + 2],
        ['e04', T0 + 2],
        ['e05', T0 + 3],
        ['e06', T0 + 4],
      ];
      for (const [id, at] of times) batch.push(event(id, 'ev', at));
      batch.push(event('other', 'someone-else', T0 + 3));
      await rm.apply(p, '1-0', batch);

      const newest = await rm.listCustomerEvents('env_a', 'ev', { limit: 100 });
      t.same(newest.map((e) => e.id), ['e06', 'e05', 'e04', 'e03', 'e02', 'e01']);
      t.equal(await rm.countCustomerEvents('env_a', 'ev'), 6);
      t.equal(await rm.countCustomerEvents('env_a', 'nobody'), 0);

      const seen: string[] = [];
      let cursor: { beforeReceivedAtMs: number; beforeId: string } | null = null;
      for (;;) {
        const rows = await rm.listCustomerEvents('env_a', 'ev', { limit: 2, ...(cursor ?? {}) });
        const page = rows.slice(0, 2);
        seen.push(...page.map((e) => e.id));
        if (rows.length <= 2) break;
        const last = page[page.length - 1]!;
        cursor = { beforeReceivedAtMs: last.receivedAtMs, beforeId: last.id };
      }
      t.same(seen, ['e06', 'e05', 'e04', 'e03', 'e02', 'e01'], 'keyset pages lose and repeat nothing inside a tie');

      t.same(
        (await rm.listCustomerEvents('env_a', 'ev', { limit: 10, beforeReceivedAtMs: T0 + 3 })).map((e) => e.id),
        ['e04', 'e03', 'e02', 'e01'],
        'time-only cursor: strictly older',
      );
      t.same((await rm.listCustomerEvents('env_a', 'ev', { limit: 1 })).map((e) => e.id), ['e06', 'e05'], 'limit + 1');
    });

    t.test('projected offset: per partition, only forward, in offset order', async (t) => {
      const p = next();
      t.equal(await rm.projectedOffset(p), '0');
      await rm.apply(p, '9-0', []);
      t.equal(await rm.projectedOffset(p), '9-0', 'an empty batch still moves the offset');
      await rm.apply(p, '10-0', [upsert('po', 1)]);
      t.equal(await rm.projectedOffset(p), '10-0', "'10-0' is after '9-0' though it sorts before it as a string");
      await rm.apply(p, '9-5', [upsert('po', 2)]);
      t.equal(await rm.projectedOffset(p), '10-0');
      t.equal((await rm.getCustomer('env_a', 'po'))?.version, 1, 'the older batch was not applied');
      t.equal(await rm.projectedOffset(p + 1000), '0', 'other partitions untouched');
    });

    t.test('a failing batch applies nothing and leaves the offset', async (t) => {
      const p = next();
      await rm.apply(p, '1-0', [upsert('f1', 1)]);
      const bad = { ...upsert('f2', 1), version: 2 ** 40 } as Projection; // out of int range
      await t.rejects(rm.apply(p, '2-0', [upsert('f1', 2), event('fe1', 'f1', T0), bad]));
      t.equal((await rm.getCustomer('env_a', 'f1'))?.version, 1);
      t.equal(await rm.getEvent('env_a', 'fe1'), null);
      t.equal(await rm.projectedOffset(p), '1-0');
    });

    t.test('events keep the counters that counted them; customer tiers fold per program, in both apply paths', async (t) => {
      const p = next();
      const counted = { ...(event('ce1', 'tc1', T0) as Extract<Projection, { kind: 'event.insert' }>), counted: ['ctr_a', 'ctr_b'] };
      const tier = (customerId: string, level: string | null, nextCheckMs: number | null, sinceMs: number | null = T0): Projection => ({
        kind: 'tier.set',
        environmentId: 'env_a',
        customerId,
        programId: 'tp_1',
        level,
        sinceMs: level === null ? null : sinceMs,
        nextCheckMs,
      });
      await rm.apply(p, '1-0', [counted, event('ce2', 'tc1', T0 + 1), tier('tc1', 'silver', T0 + 10), tier('tc1', null, T0 + 20), tier('tc2', 'silver', null)]);
      const rows = await sql`select id, counted from events where environment_id = 'env_a' and id in ('ce1', 'ce2') order by id`;
      t.same(
        rows.map((r) => [r.id, r.counted]),
        [
          ['ce1', ['ctr_a', 'ctr_b']],
          ['ce2', null],
        ],
      );
      t.same(await rm.tierHolders('env_a', 'tp_1'), { silver: 2 });
      const [check] = await sql`select (extract(epoch from next_check_at) * 1000)::float8 as n from customer_tiers where customer_id = 'tc1'`;
      t.equal(check?.n, T0 + 20, 'the later check date of the same batch wins');
      await rm.applyMany([{ partition: p, offset: '2-0', projections: [tier('tc2', 'gold', null, T0 + 5), tier('tc3', null, T0)] }]);
      t.same(await rm.tierHolders('env_a', 'tp_1'), { silver: 1, gold: 1 }, 'a check date alone never creates a holder');
      t.same(await rm.tierHoldersOf('env_a', 'tp_1', { levels: ['gold', 'silver'] }, '', 10), ['tc1', 'tc2']);
      t.same(await rm.tierHoldersOf('env_a', 'tp_1', { levels: ['gold', 'silver'] }, 'tc1', 10), ['tc2']);
      t.same(await rm.tierHoldersOf('env_a', 'tp_1', { levels: ['gold'] }, '', 10), ['tc2']);
      t.same(await rm.tierHoldersOf('env_a', 'tp_1', { checkAfterMs: T0 + 20 }, '', 10), ['tc2'], 'tc1 has a check at or before it, tc2 none');
      t.same(await rm.tierHoldersOf('env_a', 'tp_1', { checkAfterMs: T0 + 19 }, '', 10), ['tc1', 'tc2'], 'a later check date counts as none');
      t.same(await rm.tierLevelsHeldBesides('env_a', 'tp_1', ['silver']), ['gold']);
      t.same(await rm.tierLevelsHeldBesides('env_a', 'tp_1', ['silver', 'gold']), []);
      await rm.applyMany([{ partition: p, offset: '3-0', projections: [tier('tc1', null, T0 + 30)] }]);
      const [moved] = await sql`select level, (extract(epoch from next_check_at) * 1000)::float8 as n from customer_tiers where customer_id = 'tc1'`;
      t.same([moved?.level, moved?.n], ['silver', T0 + 30], 'a batch of check dates alone moves the held level\'s check');
    });

    t.test('deleted and merged customers hold no tier level: their rows go, counts and holder pages leave them out', async (t) => {
      const p = next();
      const tier = (customerId: string, level: string): Projection => ({
        kind: 'tier.set',
        environmentId: 'env_a',
        customerId,
        programId: 'tp_dm',
        level,
        sinceMs: T0,
        nextCheckMs: null,
      });
      await rm.apply(p, '1-0', [upsert('dm1', 1), upsert('dm2', 1), upsert('dm3', 1), tier('dm1', 'star'), tier('dm2', 'star'), tier('dm3', 'base')]);
      t.same(await rm.tierHolders('env_a', 'tp_dm'), { star: 2, base: 1 });
      // Given dm1 is deleted in the batch that last placed it, and dm2 is merged into dm3,
      await rm.apply(p, '2-0', [tier('dm1', 'star'), erase('dm1', 2)]);
      await rm.apply(p, '3-0', [{ kind: 'customer.merge', environmentId: 'env_a', id: 'dm2', into: 'dm3' }]);
      // then neither holds a level any more.
      t.same(await rm.tierHolders('env_a', 'tp_dm'), { base: 1 });
      t.same(await rm.tierHoldersOf('env_a', 'tp_dm', {}, '', 10), ['dm3']);
      t.same(await rm.tierLevelsHeldBesides('env_a', 'tp_dm', ['base']), []);
      const rows = await sql`select customer_id from customer_tiers where environment_id = 'env_a' and program_id = 'tp_dm' order by customer_id`;
      t.same(
        rows.map((r) => r.customer_id),
        ['dm3'],
        'their rows are dropped',
      );
      // A row projected before deletes and merges dropped rows (kept by an older version) is not counted either.
      await sql`insert into customer_tiers (environment_id, customer_id, program_id, level, since) values ('env_a', 'dm1', 'tp_dm', 'star', now())`;
      t.same(await rm.tierHolders('env_a', 'tp_dm'), { base: 1 });
      t.same(await rm.tierHoldersOf('env_a', 'tp_dm', { levels: ['star'] }, '', 10), []);
    });

    t.test('segment members: added and removed in one batch, the last change per member wins', async (t) => {
      const p = next();
      const member = (customerId: string, segmentId: string, isMember: boolean, atMs = T0): Projection => ({
        kind: 'segment_member.set',
        environmentId: 'env_seg',
        segmentId,
        customerId,
        member: isMember,
        atMs,
      });
      const members = async (segmentId: string) => (await rm.listSegmentMembers('env_seg', segmentId, { limit: 10, after: null })).map((m) => m.customerId);
      await rm.applyMany([{ partition: p, offset: '1-0', projections: [member('sm1', 'seg_a', true), member('sm2', 'seg_a', true), member('sm3', 'seg_b', true)] }]);
      t.same(await members('seg_a'), ['sm1', 'sm2']);
      await rm.applyMany([
        {
          partition: p,
          offset: '2-0',
          projections: [member('sm1', 'seg_a', false), member('sm4', 'seg_a', true), member('sm3', 'seg_b', false), member('sm3', 'seg_b', true, T0 + 1)],
        },
      ]);
      t.same(await members('seg_a'), ['sm2', 'sm4']);
      t.same(await members('seg_b'), ['sm3'], 'removed then added again in one batch: a member');
      t.same(await rm.segmentMember('env_seg', 'seg_b', 'sm3'), { customerId: 'sm3', addedAtMs: T0 + 1 }, 'since the add again, not the first add');
      t.same(await rm.segmentMember('env_seg', 'seg_a', 'sm2'), { customerId: 'sm2', addedAtMs: T0 }, 'one membership, its added_at to the ms');
      t.equal(await rm.segmentMember('env_seg', 'seg_a', 'sm1'), null, 'not a member');
      await rm.applyMany([{ partition: p, offset: '3-0', projections: [member('sm2', 'seg_a', false), member('sm4', 'seg_a', false)] }]);
      t.same(await members('seg_a'), [], 'a batch of removals alone');
    });

    t.test('pipelined statements: a failure in a later statement applies nothing of the cycle', async (t) => {
      // Statements of 1,000 rows are sent without waiting for each other; the first ones succeed
      // before the failing one runs, and the transaction still takes none of them.
      const p = next();
      const q = next();
      const many: Projection[] = [];
      for (let i = 0; i < 1500; i++) many.push(upsert(`pf-${i}`, 1, { environmentId: 'env_pipe' }));
      const bad = { ...upsert('pf-bad', 1, { environmentId: 'env_pipe' }), version: 2 ** 40 } as Projection;
      const events = [event('pfe-1', 'pf-1', T0), event('pfe-2', 'pf-2', T0)];
      await t.rejects(
        rm.applyMany([
          { partition: p, offset: '1-0', projections: [...many, ...events] },
          { partition: q, offset: '1-0', projections: [bad] },
        ]),
      );
      const [n] = await sql`select count(*)::int as n from customers where environment_id = 'env_pipe'`;
      t.equal(n?.n, 0, 'no customer of the cycle');
      t.equal(await rm.getEvent('env_a', 'pfe-1'), null, 'no event of the cycle');
      t.equal(await rm.projectedOffset(p), '0');
      t.equal(await rm.projectedOffset(q), '0');
      await rm.applyMany([{ partition: p, offset: '1-0', projections: [...many, ...events] }]);
      const [m] = await sql`select count(*)::int as n from customers where environment_id = 'env_pipe'`;
      t.equal(m?.n, 1500, 'the same cycle without the bad row applies whole');
      t.equal(await rm.projectedOffset(p), '1-0');
    });

    t.test('issuances read as of a time: one issued past expires_at is expired, a version on; filters and pages agree', async (t) => {
      const p = next();
      const env = 'env_rwi';
      const row = (id: string, status: string, version: number, expiresAtMs: number | null, customerId = 'c1'): Projection => ({
        kind: 'issuance.upsert',
        environmentId: env,
        id,
        rewardId: 'rw_1',
        customerId,
        status,
        sourceType: 'api',
        sourceId: null,
        costEntryId: null,
        expiresAtMs,
        redeemedAtMs: null,
        cancelledAtMs: null,
        reason: null,
        version,
        createdAtMs: T0,
      });
      await rm.apply(p, '1-0', [
        row('rwi_1', 'issued', 1, T0 + 1000),
        row('rwi_2', 'issued', 1, null),
        row('rwi_3', 'expired', 2, T0),
        row('rwi_4', 'issued', 1, T0 + 1000, 'c2'),
        row('rwi_5', 'redeemed', 2, T0 + 1000),
        row('rwi_6', 'pending', 1, null),
      ]);
      const list = async (atMs: number, status: string | null, q: { limit?: number; after?: string; customerId?: string } = {}) =>
        (await rm.listIssuances(env, { limit: q.limit ?? 50, after: q.after ?? null, status, customerId: q.customerId ?? null, atMs })).map((r) => [
          r.id,
          r.status,
          r.version,
        ]);
      t.same(await list(T0 + 999, 'issued'), [['rwi_1', 'issued', 1], ['rwi_2', 'issued', 1], ['rwi_4', 'issued', 1]], 'before expires_at: issued');
      const at = T0 + 1000;
      t.same(
        await list(at, null),
        [['rwi_1', 'expired', 2], ['rwi_2', 'issued', 1], ['rwi_3', 'expired', 2], ['rwi_4', 'expired', 2], ['rwi_5', 'redeemed', 2]],
        'at expires_at: expired, one version on; others as recorded',
      );
      t.same(await list(at, 'issued'), [['rwi_2', 'issued', 1]]);
      t.same(await list(at, 'expired'), [['rwi_1', 'expired', 2], ['rwi_3', 'expired', 2], ['rwi_4', 'expired', 2]], 'recorded and lapsed, in id order');
      t.same(await list(at, 'expired', { limit: 2 }), [['rwi_1', 'expired', 2], ['rwi_3', 'expired', 2]], 'the limit holds over both');
      t.same(await list(at, 'expired', { limit: 2, after: 'rwi_1' }), [['rwi_3', 'expired', 2], ['rwi_4', 'expired', 2]], 'after is exclusive');
      t.same(await list(at, 'expired', { after: 'rwi_4' }), []);
      t.same(await list(at, 'expired', { customerId: 'c2' }), [['rwi_4', 'expired', 2]]);
      t.same(await list(at, 'redeemed'), [['rwi_5', 'redeemed', 2]]);
      t.match(await rm.getIssuance(env, 'rwi_1', at - 1), { status: 'issued', version: 1, expiresAtMs: T0 + 1000 });
      const shown = await rm.getIssuance(env, 'rwi_1', at);
      t.match(shown, { status: 'expired', version: 2, expiresAtMs: T0 + 1000 });
      t.equal(await rm.getIssuance(env, 'rwi_6', at), null, 'a pending request is no issuance');
      // When the sweep's record lands, the row reads the same.
      await rm.apply(p, '2-0', [row('rwi_1', 'expired', 2, T0 + 1000)]);
      t.same(await rm.getIssuance(env, 'rwi_1', at + 60_000), shown);
    });

    t.test('thousands of projections in one batch', async (t) => {
      const p = next();
      const batch: Projection[] = [];
      for (let i = 0; i < 6000; i++) batch.push(upsert(`bulk-${i}`, 1, { environmentId: 'env_bulk' }));
      for (let i = 0; i < 6000; i++) batch.push({ ...(event(`bulk-e-${i}`, `bulk-${i % 3}`, T0 + i) as Extract<Projection, { kind: 'event.insert' }>), environmentId: 'env_bulk' });
      await rm.apply(p, '1-0', batch);
      const [n] = await sql`select count(*)::int as n from customers where environment_id = 'env_bulk'`;
      t.equal(n?.n, 6000);
      t.equal(await rm.countCustomerEvents('env_bulk', 'bulk-0'), 2000);
    });
  });
}

// A connection's cached plan keeps the choices made when it was built: a generic plan of the event
// insert prepared while `customers` was empty checked erased customers with one sequential scan of
// the whole table per statement, forever after (no ANALYZE runs without autovacuum). The
// projector's statements are planned for each execution, so a grown table is read by its index.
t.test('event rows written after customers grew do not scan the whole customers table (PostgreSQL)', async (t) => {
  const { sql: setup, schema } = await sqlForTest(t, 'postgres');
  const sql = openSql({ url: testDatabaseUrl, schema, max: 1 });
  t.teardown(() => sql.end());
  const rm = new PgReadModel(sql);
  // Prepared and executed more than five times while customers is empty (PostgreSQL then may
  // switch a prepared statement to its generic plan).
  for (let i = 0; i < 8; i++) await rm.applyMany([{ partition: 1, offset: `1-${i + 1}`, projections: [event(`pe${i}`, 'nobody', T0 + i)] }]);
  await setup.unsafe(
    `insert into customers (environment_id, id, external_id, version, created_at, updated_at)
     select 'env_a', 'cust_' || g, 'x' || g, 1, now(), now() from generate_series(1, 200000) g`,
  );
  const seqScans = async () => {
    await sql`select pg_stat_force_next_flush()`;
    const [row] = await sql`select seq_scan::int as n from pg_stat_user_tables where schemaname = ${schema} and relname = 'customers'`;
    return row!.n as number;
  };
  const before = await seqScans();
  for (let i = 0; i < 3; i++) await rm.applyMany([{ partition: 1, offset: `2-${i + 1}`, projections: [event(`pf${i}`, `cust_${i + 7}`, T0 + 100 + i)] }]);
  t.equal((await seqScans()) - before, 0, 'no sequential scan of customers');
  t.equal((await sql`select count(*)::int as n from events where id like 'pf%'`)[0]!.n, 3, 'the rows are written');
});

// The projector's catch-up applies one partition's journal page at a time. New customers' pages
// alternate customer and event projections; written in that order they went one statement per
// projection (~10x the cost per row of the live path, so the projector fell behind under load and
// stayed behind). They go grouped by kind, as applyMany writes them.
t.test('a page of alternating kinds is written in a few statements, not one per projection (PostgreSQL)', async (t) => {
  const { schema } = await sqlForTest(t, 'postgres');
  const statements: string[] = [];
  const sql = postgres(testDatabaseUrl, {
    max: 1,
    onnotice: () => {},
    connection: { search_path: schema },
    debug: (_connection, query) => statements.push(query),
  });
  t.teardown(() => sql.end());
  const rm = new PgReadModel(sql);
  const page: Projection[] = [];
  for (let i = 0; i < 300; i++) page.push(upsert(`alt${i}`, 1), event(`alt-e${i}`, `alt${i}`, T0 + i));
  await rm.apply(7, '1-0', page);
  t.ok(statements.length <= 20, `${statements.length} statements for 600 projections`);
  t.equal(await rm.countCustomerEvents('env_a', 'alt299'), 1, 'the rows are written');
  t.equal((await rm.getCustomer('env_a', 'alt0'))?.version, 1);
});

// The expiry sweep asks for posted entries with a remainder and `expires_at <= now`. An award in a
// currency without expiry_days never matches, so it has no entry in the sweep's index (each one
// cost every undated award an index insert); the sweep's condition still uses the index.
t.test('the expiry index holds dated entries only, and the due-work condition uses it (PostgreSQL)', async (t) => {
  const { sql } = await sqlForTest(t, 'postgres');
  const [index] = await sql`select indexdef from pg_indexes where indexname = 'ledger_entries_expiry_due' and schemaname = current_schema()`;
  t.match(index?.indexdef, /WHERE .*expires_at IS NOT NULL/, 'undated entries are left out');
  await sql.unsafe(
    `insert into ledger_entries (environment_id, id, customer_id, currency, type, status, amount, remaining, expires_at, reason, source_type, created_at)
     select 'env_a', 'le_' || g, 'cust_' || (g % 500), 'coins', 'award', 'posted', 10, 10,
            case when g % 100 = 0 then now() - interval '1 day' end, 'r', 'rule_execution', now()
     from generate_series(1, 5000) g`,
  );
  await sql`analyze ledger_entries`;
  const plan = await sql.begin(async (tx) => {
    await tx`set local enable_seqscan = off`;
    return tx`explain select distinct customer_id from ledger_entries
      where environment_id = 'env_a' and ((status = 'pending' and confirm_after <= now())
        or (status = 'posted' and remaining > 0 and expires_at <= now()))`;
  });
  t.match(plan.map((r) => Object.values(r)[0]).join('\n'), /ledger_entries_expiry_due/, 'the sweep reads the expiry index');
});

// Issued rewards past expires_at read as expired before the sweep records it. Both the list of
// `status=expired` and the sweep of one environment look them up by (environment, expires_at):
// ordered by id through the list index instead, they walked every issued row of the environment.
t.test('lapsed issuances are found through the lapsing index, not by walking every issued row (PostgreSQL)', async (t) => {
  const { schema } = await sqlForTest(t, 'postgres');
  const statements: Array<{ query: string; params: unknown[] }> = [];
  const sql = postgres(testDatabaseUrl, {
    max: 1,
    onnotice: () => {},
    connection: { search_path: schema },
    debug: (_connection, query, params) => statements.push({ query, params: params as unknown[] }),
  });
  t.teardown(() => sql.end());
  // Given 20,000 issued rewards, a handful of them past expires_at, and some recorded as expired
  await sql.unsafe(
    `insert into reward_issuances (environment_id, id, reward_id, customer_id, status, source_type, expires_at, version, created_at)
     select 'env_a', 'iss_' || lpad(g::text, 6, '0'), 'rw_1', 'cust_' || (g % 500),
            case when g % 50 = 0 then 'expired' else 'issued' end, 'api',
            case when g % 4000 = 7 then now() - interval '1 minute' else now() + (g % 300) * interval '1 day' end, 1, now()
     from generate_series(1, 20000) g`,
  );
  await sql`analyze reward_issuances`;
  const rm = new PgReadModel(sql);
  // When the expired list is read
  statements.length = 0;
  const page = await rm.listIssuances('env_a', { limit: 51, after: null, status: 'expired', customerId: null, atMs: Date.now() });
  t.equal(page.filter((r) => r.status === 'expired').length, 51);
  const [listed] = statements;
  // Then its plan takes the lapsed rows from the lapsing index
  const plan = await sql.unsafe(`explain ${listed!.query}`, listed!.params as postgres.ParameterOrJSON<never>[]);
  const text = plan.map((r) => Object.values(r)[0]).join('\n');
  t.match(text, /reward_issuances_lapsing/, 'the lapsed branch reads the lapsing index');
  t.notMatch(text, /Filter: .*expires_at/, 'no issued row is read only to be filtered out by its expiry');
});
