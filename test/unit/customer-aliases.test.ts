// POST /customers/{id}/aliases and the state view's aliases over the real engine on the in-memory
// twins: an alias that already reaches the customer (its own external id, or an alias of a
// customer merged into it) is answered as held, 200 with merged_from null, and not recorded again,
// wherever the partitions put the keys; the state view lists the aliases reaching the customer
// through merges, as the export does; a customer holds a bounded number of aliases.
import t from 'tap';
import { limits } from '../../src/limits.js';
import { customerRoutesOver, partitionOfKey } from '../helpers/customer-routes.js';

t.test("an alias equal to the customer's own external id is answered as held, and not recorded", async (t) => {
  const h = await customerRoutesOver(t);
  const s = await h.create('own-s');
  const r = await h.addAlias(s, 'own-s');
  t.match(r, { status: 200, body: { alias: { alias: 'own-s', kind: 'anonymous', customer_id: s }, merged_from: null } });
  t.same((await h.request('GET', '/v1/customers/:id/state', s)).body.aliases, [], 'the state view lists no alias');
  t.match(await h.event('own-s', 'own-1'), { ok: true, reply: { customerId: s } }, 'the external id still routes to it');
});

for (const samePartition of [true, false]) {
  const where = samePartition ? "on the merged customer's partition" : 'on another partition';
  t.test(`an alias reaching the customer through a merge (${where}) is answered as held: 200, merged_from null, no second copy`, async (t) => {
    const h = await customerRoutesOver(t);
    const m = await h.create('thr-m');
    const device = h.keyIn('thr-dev', partitionOfKey('thr-m'), samePartition);
    t.equal((await h.addAlias(m, device)).status, 201);
    const s = await h.create('thr-s');
    t.match(await h.addAlias(s, 'thr-m'), { status: 201, body: { merged_from: m } });
    for (const round of [1, 2]) {
      const r = await h.addAlias(s, device);
      t.match(r, { status: 200, body: { alias: { alias: device, kind: 'anonymous', customer_id: s }, merged_from: null } }, `round ${round}`);
    }
    const state = await h.request('GET', '/v1/customers/:id/state', s);
    t.same(
      (state.body.aliases as Array<{ alias: string; customer_id: string }>).map((a) => [a.alias, a.customer_id]),
      [
        ['thr-m', s],
        [device, s],
      ],
      "the state view lists the merged customer's alias once, as the survivor's",
    );
    t.match(await h.event(device, 'thr-1'), { ok: true, reply: { customerId: s } }, 'it routes to the survivor');
    const other = await h.create('thr-o');
    t.match(await h.addAlias(other, device), { status: 409, code: 'alias_conflict' }, 'another customer cannot take it');
  });
}

t.test('the state view lists aliases reaching the customer through chained merges, as the export does', async (t) => {
  const h = await customerRoutesOver(t);
  const y = await h.create('ch-y');
  t.equal((await h.addAlias(y, 'ch-y-anon')).status, 201);
  const x = await h.create('ch-x');
  t.equal((await h.addAlias(x, 'ch-y')).status, 201, 'x took y');
  const z = await h.create('ch-z');
  t.equal((await h.addAlias(z, 'ch-x')).status, 201, 'z took x');
  const listed = async (path: string) =>
    ((await h.request('GET', path, z)).body.aliases as Array<{ alias: string }>).map((a) => a.alias).sort();
  t.same(await listed('/v1/customers/:id/state'), ['ch-x', 'ch-y', 'ch-y-anon']);
  t.same(await listed('/v1/customers/:id/state'), await listed('/v1/customers/:id/export'), 'the same aliases as the export');
});

t.test(`a customer holds at most ${limits.aliasesPerCustomerMax} aliases, those reaching it through merges included`, async (t) => {
  const h = await customerRoutesOver(t);
  const half = limits.aliasesPerCustomerMax / 2;
  const m = await h.create('cap-m');
  for (let i = 0; i < half; i++) t.equal((await h.addAlias(m, `cap-m-${i}`)).status, 201);
  const s = await h.create('cap-s');
  for (let i = 0; i < half - 1; i++) t.equal((await h.addAlias(s, `cap-s-${i}`)).status, 201);
  t.match(await h.addAlias(s, 'cap-m'), { status: 201, body: { merged_from: m } }, 'the merge is the last alias that fits');
  const refused = await h.addAlias(s, 'cap-s-more');
  t.match(refused, { status: 400, code: 'validation_failed', param: 'alias' });
  t.match(await h.addAlias(s, 'cap-s-0'), { status: 200 }, 'an alias it holds is still answered');
  t.match(await h.addAlias(s, 'cap-m-0'), { status: 200 }, 'and one reaching it through the merge');
  const other = await h.create('cap-o');
  t.match(await h.addAlias(other, 'cap-s-more'), { status: 201 }, 'the refused alias was not bound');
});
