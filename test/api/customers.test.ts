// Black-box API tests of the customer routes: create (idempotent), get, patch (If-Match), delete
// (erasure), list, state, balances, export, aliases with merge, client tokens, customer sessions.
import t from 'tap';
import { idem, signUp, startForTest } from '../helpers/service.js';

const now = () => new Date(Date.now() - 1000).toISOString();

t.test('customers', async (t) => {
  const { anon, service } = await startForTest(t);
  const tenant = await signUp(anon);
  const api = tenant.server;

  await t.test('create is idempotent and needs an Idempotency-Key', async (t) => {
    const body = { external_id: 'u-1', attributes: { country: 'FR' } };
    const none = await api.post('/v1/customers', body);
    t.equal(none.status, 400);
    t.equal(none.body.error.code, 'idempotency_key_required');
    const key = idem();
    const r = await api.post('/v1/customers', body, key);
    t.equal(r.status, 201);
    t.match(r.body, { id: /^cust_/, external_id: 'u-1', attributes: { country: 'FR' }, version: 1, deleted_at: null });
    const replay = await api.post('/v1/customers', body, key);
    t.equal(replay.status, 201);
    t.same(replay.body, r.body, 'replayed from the stored result');
    const reused = await api.post('/v1/customers', { ...body, attributes: {} }, key);
    t.equal(reused.status, 422);
    t.equal(reused.body.error.code, 'idempotency_key_reused');
    const dup = await api.post('/v1/customers', body, idem());
    t.equal(dup.status, 409);
    t.equal(dup.body.error.code, 'already_exists');
  });

  await t.test('get, patch with If-Match, stale_write', async (t) => {
    const c = (await api.post('/v1/customers', { external_id: 'u-2' }, idem())).body;
    const got = await api.get(`/v1/customers/${c.id}`);
    t.equal(got.status, 200);
    t.equal(got.headers.get('etag'), '"1"');
    const p = await api.patch(`/v1/customers/${c.id}`, { attributes: { level: 5, vip: true } }, { 'if-match': '"1"' });
    t.equal(p.status, 200);
    t.match(p.body, { version: 2, attributes: { level: 5, vip: true } });
    const stale = await api.patch(`/v1/customers/${c.id}`, { attributes: { level: 6 } }, { 'if-match': '"1"' });
    t.equal(stale.status, 409);
    t.equal(stale.body.error.code, 'stale_write');
    t.same(stale.body.error.details, { current_version: 2 }, 'the version to read again, as on every other resource');
    const staleBody = await api.patch(`/v1/customers/${c.id}`, { attributes: { level: 6 }, expected_version: 1 });
    t.same(staleBody.body.error.details, { current_version: 2 });
    const rm = await api.patch(`/v1/customers/${c.id}`, { attributes: { vip: null }, expected_version: 2 });
    t.same(rm.body.attributes, { level: 5 });
    const bad = await api.patch(`/v1/customers/${c.id}`, { attributes: 'nope' });
    t.equal(bad.body.error.code, 'validation_failed');
    t.equal(bad.body.error.param, 'attributes');
  });

  await t.test('unknown and malformed ids are 404 resource_not_found', async (t) => {
    for (const id of ['cust_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ', 'nope', 'cust_1']) {
      const r = await api.get(`/v1/customers/${id}`);
      t.equal(r.status, 404, id);
      t.equal(r.body.error.code, 'resource_not_found', id);
    }
  });

  await t.test('list pages through customers; external_id filters; invalid cursor', async (t) => {
    for (let i = 0; i < 5; i++) await api.post('/v1/customers', { external_id: `l-${i}` }, idem());
    const seen = new Set<string>();
    let cursor: string | null = null;
    let pages = 0;
    do {
      const r: { status: number; body: any } = await api.get(`/v1/customers?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      t.equal(r.status, 200);
      for (const c of r.body.data) seen.add(c.external_id);
      cursor = r.body.next_cursor;
      t.equal(r.body.has_more, cursor !== null);
      pages++;
    } while (cursor && pages < 20);
    for (let i = 0; i < 5; i++) t.ok(seen.has(`l-${i}`), `l-${i} listed`);
    const one = await api.get('/v1/customers?external_id=l-3');
    t.equal(one.body.data.length, 1);
    t.equal((await api.get('/v1/customers?external_id=missing')).body.data.length, 0);
    t.equal((await api.get('/v1/customers?cursor=!!!')).body.error.code, 'invalid_cursor');
    t.equal((await api.get('/v1/customers?limit=500')).body.error.code, 'validation_failed');
  });

  await t.test('state view, balances and export', async (t) => {
    await api.post('/v1/events', { id: 's-1', name: 'match.won', customer_id: 'u-state', occurred_at: now(), properties: { kills: 3 } });
    const id = (await api.get('/v1/customers?external_id=u-state')).body.data[0].id;
    const st = await api.get(`/v1/customers/${id}/state`);
    t.equal(st.status, 200);
    t.match(st.body, { customer: { id, external_id: 'u-state' }, balances: [], tiers: [], segments: [], counters: {}, challenges: [], issuances: [], aliases: [] });
    t.same((await api.get(`/v1/customers/${id}/balances`)).body, { data: [] });
    const ex = await api.get(`/v1/customers/${id}/export`);
    t.match(ex.body, { customer: { id }, aliases: [], events: [{ name: 'match.won', properties: { kills: 3 } }], ledger_entries: [] });
    t.ok(ex.body.exported_at);
  });

  await t.test('an alias naming another customer merges it; later events for either id reach the survivor', async (t) => {
    const a1At = now();
    const a1 = await api.post('/v1/events', { id: 'a-1', name: 'app.opened', customer_id: 'anon-77', occurred_at: a1At });
    const anonId = (await api.get('/v1/customers?external_id=anon-77')).body.data[0].id;
    const main = (await api.post('/v1/customers', { external_id: 'user-77' }, idem())).body;
    const r = await api.post(`/v1/customers/${main.id}/aliases`, { alias: 'anon-77' }, idem());
    t.equal(r.status, 201);
    t.match(r.body, { alias: { alias: 'anon-77', kind: 'anonymous', customer_id: main.id }, merged_from: anonId });
    const later = await api.post('/v1/events', { id: 'a-2', name: 'app.opened', customer_id: 'anon-77', occurred_at: now() });
    t.equal(later.status, 202);
    // The merged customer's event ids stay deduplicated on the survivor: a retry is not a new event.
    const retried = await api.post('/v1/events', { id: 'a-1', name: 'app.opened', customer_id: 'anon-77', occurred_at: a1At });
    t.equal(retried.status, 202);
    t.equal(retried.body.duplicate, true, 'a retry of an event sent before the merge is a duplicate');
    t.equal(retried.body.id, a1.body.id, 'answered with the first id');
    const conflicting = await api.post('/v1/events', { id: 'a-1', name: 'app.closed', customer_id: 'user-77', occurred_at: a1At });
    t.equal(conflicting.body.error?.code, 'event_id_conflict', 'other content under the merged id is a conflict on the survivor');
    const viaAlias = await api.get('/v1/customers?external_id=anon-77');
    t.equal(viaAlias.body.data[0].id, main.id, 'the alias resolves to the survivor');
    const viaOldId = await api.get(`/v1/customers/${anonId}`);
    t.equal(viaOldId.body.id, main.id, 'the merged id answers with the survivor');
    const st = await api.get(`/v1/customers/${main.id}/state`);
    t.match(st.body.aliases, [{ alias: 'anon-77', kind: 'anonymous', customer_id: main.id }]);
    // An alias already held by another customer is a conflict.
    const other = (await api.post('/v1/customers', { external_id: 'user-78' }, idem())).body;
    const conflict = await api.post(`/v1/customers/${other.id}/aliases`, { alias: 'anon-77' }, idem());
    t.equal(conflict.status, 409);
    t.equal(conflict.body.error.code, 'alias_conflict');
  });

  await t.test('two merges racing in opposite directions leave one survivor, never a cycle', async (t) => {
    for (let i = 0; i < 10; i++) {
      const a = (await api.post('/v1/customers', { external_id: `race-a-${i}` }, idem())).body;
      const b = (await api.post('/v1/customers', { external_id: `race-b-${i}` }, idem())).body;
      const [ab, ba] = await Promise.all([
        api.post(`/v1/customers/${a.id}/aliases`, { alias: `race-b-${i}` }, idem()),
        api.post(`/v1/customers/${b.id}/aliases`, { alias: `race-a-${i}` }, idem()),
      ]);
      // The first merges the other customer in; the second then finds its customer merged into
      // the first, whose own external id it names: answered as held (200), nothing recorded.
      t.same([ab.status, ba.status].sort(), [200, 201], `round ${i}: both answered`);
      const viaA = await api.get(`/v1/customers/${a.id}`);
      const viaB = await api.get(`/v1/customers/${b.id}`);
      t.equal(viaA.status, 200, `round ${i}: A reachable`);
      t.equal(viaB.status, 200, `round ${i}: B reachable`);
      t.equal(viaA.body.id, viaB.body.id, `round ${i}: one survivor`);
      const later = await api.post('/v1/events', { id: `race-e-${i}`, name: 'app.opened', customer_id: `race-a-${i}`, occurred_at: now() });
      t.equal(later.status, 202);
    }
  });

  await t.test("a merge moves the merged customer's balances, pending credits and earnings to the survivor, once", async (t) => {
    t.equal((await api.post('/v1/currencies', { key: 'gold', name: 'Gold' }, idem())).status, 201);
    const levels = [
      { key: 'bronze', title: 'Bronze', threshold: 0 },
      { key: 'silver', title: 'Silver', threshold: 100 },
    ];
    const program = (await api.post('/v1/tier_programs', { key: 'rank', name: 'Rank', currency: 'gold', basis: 'lifetime_earned', levels }, idem())).body;
    const anonC = (await api.post('/v1/customers', { external_id: 'bal-anon' }, idem())).body;
    const main = (await api.post('/v1/customers', { external_id: 'bal-main' }, idem())).body;
    const testers = (await api.post('/v1/segments', { name: 'testers', kind: 'static' }, idem())).body;
    t.equal((await api.post(`/v1/segments/${testers.id}/members`, { customer_id: 'bal-anon' }, idem())).status, 201);
    const expiresAt = new Date(Date.now() + 9 * 86_400_000).toISOString();
    const confirmAfter = new Date(Date.now() + 3 * 86_400_000).toISOString();
    const adjust = (customer: string, amount: number, more: Record<string, unknown> = {}) =>
      api.post('/v1/ledger_entries', { customer_id: customer, currency: 'gold', amount, reason: 'test', ...more }, idem());
    t.equal((await adjust(anonC.id, 70, { expires_at: expiresAt })).status, 201);
    t.equal((await adjust(anonC.id, 20, { confirm_after: confirmAfter })).status, 201);
    t.equal((await adjust(main.id, 50)).status, 201);
    t.equal((await api.post('/v1/counter_definitions', { name: 'opens', event: 'app.opened', window: { kind: 'lifetime' } }, idem())).status, 201);
    for (const [who, n] of [['bal-anon', 2], ['bal-main', 1]] as const) {
      for (let i = 0; i < n; i++) {
        t.equal((await api.post('/v1/events', { id: `bal-open-${who}-${i}`, name: 'app.opened', customer_id: who, occurred_at: now() })).status, 202);
      }
    }
    const quest = (await api.post('/v1/challenges', { name: 'Open 5 times', qualifying: { event: 'app.opened' }, target: 5, status: 'active' }, idem())).body;
    t.equal(quest.status, 'active');
    for (let i = 0; i < 2; i++) {
      t.equal((await api.post('/v1/events', { id: `bal-quest-${i}`, name: 'app.opened', customer_id: 'bal-anon', occurred_at: now() })).status, 202);
    }
    const reward = (await api.post('/v1/rewards', { name: 'Hat', cost: 100, currency: 'gold', availability: 5 }, idem())).body;
    const issued = await api.post('/v1/reward_issuances', { reward_id: reward.id, customer_id: 'bal-anon' }, idem());
    t.equal(issued.status, 201);
    const level = async (id: string) => (await api.get(`/v1/customers/${id}/state`)).body.tiers.find((x: { program_id: string }) => x.program_id === program.id)?.level;
    t.equal(await level(main.id), 'bronze');

    const r = await api.post(`/v1/customers/${main.id}/aliases`, { alias: 'bal-anon' }, idem());
    t.equal(r.status, 201);
    t.equal(r.body.merged_from, anonC.id);
    const balances = async () => (await api.get(`/v1/customers/${main.id}/balances`)).body.data;
    t.same(await balances(), [{ currency: 'gold', available: 120, pending: 20, lifetime_earned: 120 }], 'both ledgers on the survivor');
    t.equal(await level(main.id), 'silver', "the survivor is re-placed on the joined lifetime earned (70 + 50)");
    t.same((await api.get(`/v1/customers/${main.id}/state`)).body.segments, ['testers'], "the merged customer's static segments join the survivor's");
    t.equal((await api.get(`/v1/customers/${main.id}/state`)).body.counters.opens, 5, "the merged customer's counts add to the survivor's (4 + 1)");
    t.match(
      (await api.get(`/v1/customers/${main.id}/state`)).body.challenges,
      [{ challenge_id: quest.id, count: 2, status: 'active' }],
      "the merged customer's challenge progress is the survivor's (it had none)",
    );
    const listed = (await api.get(`/v1/challenges/${quest.id}/progress?customer_id=${main.id}`)).body.data;
    t.match(listed, [{ customer_id: main.id, count: 2, status: 'active' }], "the survivor's progress row is projected");
    const members = (await api.get(`/v1/segments/${testers.id}/members`)).body.data.map((m: { customer_id: string }) => m.customer_id);
    t.same(members, [main.id], 'the segment lists the survivor, not the merged customer');
    t.match((await api.get(`/v1/customers/${main.id}/state`)).body.issuances, [{ id: issued.body.id, status: 'issued' }], "the merged customer's issuance is the survivor's");
    t.same(
      (await api.get(`/v1/reward_issuances?customer_id=${main.id}`)).body.data.map((i: { id: string }) => i.id),
      [issued.body.id],
      'listed under the survivor',
    );
    const redeemed = await api.post(`/v1/reward_issuances/${issued.body.id}/redeem`, {}, idem());
    t.equal(redeemed.status, 200, `redeemed by the survivor: ${JSON.stringify(redeemed.body)}`);
    t.equal(redeemed.body.customer_id, main.id, "the answer names the survivor, as GET does");
    t.same((await api.get(`/v1/reward_issuances/${issued.body.id}`)).body, redeemed.body, 'one version, one body');
    t.same(await balances(), [{ currency: 'gold', available: 20, pending: 20, lifetime_earned: 120 }], 'its cost spent from the joined balance');
    const entries = (await api.get(`/v1/customers/${main.id}/ledger_entries`)).body.data as Array<Record<string, unknown>>;
    const moved = entries.filter((e) => e.source_type === 'customer_merge');
    t.match(
      moved.map((e) => [e.type, e.status, e.amount, e.expires_at]).sort(),
      [
        ['adjustment', 'pending', 20, null],
        ['transfer', 'posted', 70, expiresAt],
      ],
      'a transfer credit keeps the lot expiry; the pending credit is pending here with its confirm_after',
    );
    // Repeating the alias addition (a new key, or a new alias of the merged customer) moves nothing twice.
    const repeat = await api.post(`/v1/customers/${main.id}/aliases`, { alias: 'bal-anon' }, idem());
    t.match([repeat.status, repeat.body], [200, { alias: { alias: 'bal-anon' }, merged_from: null }], 'an alias already held: 200, as it is');
    t.same(await balances(), [{ currency: 'gold', available: 20, pending: 20, lifetime_earned: 120 }], 'nothing moved twice');
    t.equal((await api.get(`/v1/customers/${main.id}/state`)).body.issuances.length, 1, 'the issuance is not taken twice');
    // Ledger commands for the merged id reach the survivor's joined balance.
    const spend = await adjust('bal-anon', -15);
    t.equal(spend.status, 201, `spending the joined balance by the merged id: ${JSON.stringify(spend.body)}`);
    t.match(spend.body.balance, { available: 5 });
  });

  await t.test('repeating a merge whose alias addition never ran (a crash after the claim) finishes it', async (t) => {
    const sentAt = now();
    const first = await api.post('/v1/events', { id: 'cr-1', name: 'app.opened', customer_id: 'cr-anon', occurred_at: sentAt, properties: { ip: '5.6.7.8' } });
    t.equal(first.status, 202);
    const anonId = (await api.get('/v1/customers?external_id=cr-anon')).body.data[0].id;
    const main = (await api.post('/v1/customers', { external_id: 'cr-main' }, idem())).body;
    t.equal((await api.post('/v1/ledger_entries', { customer_id: anonId, currency: 'gold', amount: 30, reason: 'test' }, idem())).status, 201);
    // The first attempt: its claim merged cr-anon into cr-main, then the node died before the
    // survivor recorded the alias (the claim is sent the way the alias route sends it).
    const claim = await service.engine.execute({
      env: tenant.testEnv,
      target: { by: 'key', key: 'cr-anon' },
      command: { kind: 'key.claim', customerId: main.id },
      nowMs: Date.now(),
    });
    t.match(claim, { ok: true, reply: { kind: 'claimed', mergedFrom: anonId } });
    const r = await api.post(`/v1/customers/${main.id}/aliases`, { alias: 'cr-anon' }, idem());
    t.equal(r.status, 201);
    t.match(r.body, { alias: { alias: 'cr-anon', customer_id: main.id }, merged_from: anonId }, 'the repeat names the merged customer');
    const retried = await api.post('/v1/events', { id: 'cr-1', name: 'app.opened', customer_id: 'cr-anon', occurred_at: sentAt, properties: { ip: '5.6.7.8' } });
    t.equal(retried.body.duplicate, true, "the merged customer's event ids reached the survivor");
    t.same((await api.get(`/v1/customers/${main.id}/balances`)).body.data, [{ currency: 'gold', available: 30, pending: 0, lifetime_earned: 30 }], 'and its ledger');
    t.equal((await api.delete(`/v1/customers/${main.id}`)).status, 204);
    const ev = await api.get(`/v1/events/${first.body.id}`);
    // Read right after the 204: the delete answers once the erasure is projected.
    t.equal(ev.body.properties, null, 'deleting the survivor erases the merged customer: the merge was recorded on it');
  });

  await t.test("a survivor's export holds the events of the customers merged into it, through earlier merges", async (t) => {
    const sent = async (id: string, customer: string) =>
      (await api.post('/v1/events', { id, name: 'app.opened', customer_id: customer, occurred_at: now(), properties: { device: id } })).body.id as string;
    const ofX = await sent('chain-x-1', 'chain-x');
    const y = (await api.post('/v1/customers', { external_id: 'chain-y', attributes: { nick: 'Y' } }, idem())).body;
    t.equal((await api.post(`/v1/customers/${y.id}/aliases`, { alias: 'chain-x' }, idem())).status, 201, 'x merged into y');
    t.equal((await api.post(`/v1/customers/${y.id}/aliases`, { alias: 'chain-y-device' }, idem())).status, 201);
    t.equal((await api.post('/v1/currencies', { key: 'chainc', name: 'Chain coins' }, idem())).status, 201);
    const gift = await api.post('/v1/ledger_entries', { customer_id: y.id, currency: 'chainc', amount: 70, reason: 'gift to y' }, idem());
    t.equal(gift.status, 201, JSON.stringify(gift.body));
    const ofY = await sent('chain-y-1', 'chain-y');
    const z = (await api.post('/v1/customers', { external_id: 'chain-z' }, idem())).body;
    t.equal((await api.post(`/v1/customers/${z.id}/aliases`, { alias: 'chain-y' }, idem())).status, 201, 'y merged into z');
    const ofZ = await sent('chain-z-1', 'chain-z');
    const exported = (await api.get(`/v1/customers/${z.id}/export`)).body;
    t.same(
      (exported.events as Array<{ id: string; properties: unknown }>).map((e) => e.id).sort(),
      [ofX, ofY, ofZ].sort(),
      'its own, the merged customer y, and x merged into y before',
    );
    t.match(exported.events.find((e: { id: string }) => e.id === ofX), { properties: { device: 'chain-x-1' } });
    // What the merged customers still hold about the person is exported too.
    const aliases = (exported.aliases as Array<{ alias: string }>).map((a) => a.alias).sort();
    t.same(aliases, ['chain-x', 'chain-y', 'chain-y-device'], "y's own alias (it routes to z) beside z's and y's");
    t.match(exported.merged_customers, [{ id: y.id, attributes: { nick: 'Y' } }, { attributes: {} }], 'y, then x merged into y');
    t.equal(exported.merged_customers.length, 2);
    const entries = exported.ledger_entries as Array<{ id: string; reason: string | null }>;
    t.ok(entries.some((e) => e.id === gift.body.id && e.reason === 'gift to y'), "y's own ledger history, not only the transfer to z");
    t.equal(exported.ledger_entries_since, null, 'nothing left out');
    // Lists leave merged customers out: their ids and external ids answer as the survivor.
    const listed = (await api.get('/v1/customers?limit=200')).body.data.map((c: { id: string }) => c.id);
    const x = (await api.get('/v1/customers?external_id=chain-x')).body.data[0];
    t.equal(x.id, z.id, 'chain-x answers as z');
    t.ok(listed.includes(z.id), 'the survivor is listed');
    t.notOk(listed.includes(y.id), 'y, merged into z, is not');
  });

  await t.test('deleting a survivor erases the customers merged into it, and frees their external ids', async (t) => {
    const pA = (await api.post('/v1/customers', { external_id: 'mrg-a', attributes: { email: 'a@example.com' } }, idem())).body;
    // An alias of the customer that is merged away: it stays bound to that customer.
    t.equal((await api.post(`/v1/customers/${pA.id}/aliases`, { alias: 'mrg-a-device' }, idem())).status, 201);
    const evA = await api.post('/v1/events', { id: 'mrg-a-1', name: 'app.opened', customer_id: 'mrg-a', occurred_at: now(), properties: { ip: '1.2.3.4' } });
    const pB = (await api.post('/v1/customers', { external_id: 'mrg-b' }, idem())).body;
    t.equal((await api.post(`/v1/customers/${pB.id}/aliases`, { alias: 'mrg-a' }, idem())).status, 201);
    t.equal((await api.post(`/v1/customers/${pB.id}/aliases`, { alias: 'mrg-device-9' }, idem())).status, 201);
    t.equal((await api.delete(`/v1/customers/${pB.id}`)).status, 204);
    const pC = (await api.post('/v1/customers', { external_id: 'mrg-c' }, idem())).body;
    const taken = await api.post(`/v1/customers/${pC.id}/aliases`, { alias: 'mrg-device-9' }, idem());
    t.equal(taken.status, 201, `an alias of the deleted customer is free again (${JSON.stringify(taken.body)})`);
    const takenToo = await api.post(`/v1/customers/${pC.id}/aliases`, { alias: 'mrg-a-device' }, idem());
    t.equal(takenToo.status, 201, `an alias of the customer merged into it is free again too (${JSON.stringify(takenToo.body)})`);
    const byDevice = await api.post('/v1/events', { id: 'mrg-dev-1', name: 'app.opened', customer_id: 'mrg-a-device', occurred_at: now() });
    t.equal(byDevice.status, 202, `and routes to its new owner (${JSON.stringify(byDevice.body)})`);
    t.equal((await api.get('/v1/customers?external_id=mrg-a')).body.data.length, 0, 'the merged external id lists nobody');
    const listed = (await api.get('/v1/customers?limit=200')).body.data.map((c: { id: string; external_id: string | null }) => c.external_id);
    t.notOk(listed.includes('mrg-a'), 'the merged customer no longer shows its external id');
    const ev = await api.get(`/v1/events/${evA.body.id}`);
    t.equal(ev.body.properties, null, "the merged customer's event properties are erased");
    t.equal(ev.body.customer_id, null);
    const again = await api.post('/v1/events', { id: 'mrg-a-2', name: 'app.opened', customer_id: 'mrg-a', occurred_at: now() });
    t.equal(again.status, 202, `the external id is free: a new customer ${JSON.stringify(again.body)}`);
    const fresh = (await api.get('/v1/customers?external_id=mrg-a')).body.data[0];
    t.ok(fresh && fresh.id !== pA.id && fresh.id !== pB.id, 'a new customer, neither of the erased ones');
  });

  await t.test('delete erases personal data; the id answers 404; the external id is free again', async (t) => {
    const c = (await api.post('/v1/customers', { external_id: 'gone@example.com', attributes: { email: 'gone@example.com' } }, idem())).body;
    await api.post('/v1/events', { id: 'd-1', name: 'app.opened', customer_id: 'gone@example.com', occurred_at: now(), properties: { ip: '1.2.3.4' } });
    const stale = await api.delete(`/v1/customers/${c.id}`, { 'if-match': '"7"' });
    t.same({ status: stale.status, code: stale.body.error.code }, { status: 409, code: 'stale_write' }, 'If-Match naming another version');
    t.same(stale.body.error.details, { current_version: 1 });
    t.equal((await api.get(`/v1/customers/${c.id}`)).status, 200, 'nothing erased');
    const d = await api.delete(`/v1/customers/${c.id}`, { 'if-match': '"1"' });
    t.equal(d.status, 204, 'If-Match naming its version');
    t.equal((await api.get(`/v1/customers/${c.id}`)).status, 404);
    t.equal((await api.get('/v1/customers?external_id=gone@example.com')).body.data.length, 0);
    const again = await api.post('/v1/customers', { external_id: 'gone@example.com' }, idem());
    t.equal(again.status, 201);
    t.not(again.body.id, c.id);
  });

  await t.test("a resend of an erased customer's event answers as the first did and creates nobody", async (t) => {
    t.equal((await api.post('/v1/currencies', { key: 'erc', name: 'Erased coins' }, idem())).status, 201);
    const rule = await api.post(
      '/v1/rules',
      { name: 'on er.scored', definition: { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: 'er.scored' }, actions: [{ type: 'points.award', currency: 'erc', amount: 5 }] } },
      idem(),
    );
    t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);
    const skipped = await api.post(
      '/v1/rules',
      {
        name: 'on er.scored from 0.0.0.0',
        definition: {
          schema: 'service.rule/v2',
          trigger: { kind: 'customer_event', event: 'er.scored' },
          conditions: { all: [{ path: 'event.properties.ip', op: 'eq', value: '0.0.0.0' }] },
          actions: [{ type: 'points.award', currency: 'erc', amount: 1 }],
        },
      },
      idem(),
    );
    t.equal((await api.post(`/v1/rules/${skipped.body.id}/publish`, {})).status, 200);
    const ev = { id: 'er-1', name: 'app.opened', customer_id: 'er-x', occurred_at: now(), properties: { ip: '9.9.9.9' } };
    const first = await api.post('/v1/events', ev);
    t.equal(first.status, 202);
    const synced = { ...ev, id: 'er-2', name: 'er.scored', mode: 'sync' };
    const firstSync = await api.post('/v1/events', synced);
    t.equal(firstSync.status, 200);
    const effects = firstSync.body.effects as Array<{ type: string; rule_id: string; detail?: string }>;
    t.match(effects.filter((e) => e.rule_id === rule.body.id), [{ type: 'rule.fired' }, { type: 'points.awarded', amount: 5, ledger_entry_id: /^le_/ }]);
    t.match(effects.filter((e) => e.rule_id === skipped.body.id), [{ type: 'rule.skipped', reason: 'conditions_not_met', detail: /event\.properties\.ip/ }]);
    // Repeated after the erasure: the same answer, but a skipped rule's detail (it may quote a value
    // of the erased customer) is not given again.
    const firstAnswer = {
      ...firstSync.body,
      effects: effects.map((e) => (e.type === 'rule.skipped' ? { ...e, detail: 'Not kept: the customer was erased.' } : e)),
      duplicate: true,
    };
    const c = (await api.get('/v1/customers?external_id=er-x')).body.data[0];
    t.equal((await api.delete(`/v1/customers/${c.id}`)).status, 204);
    const again = await api.post('/v1/events', ev);
    t.equal(again.status, 202);
    t.same(again.body, { id: first.body.id, client_event_id: 'er-1', status: 'accepted', duplicate: true }, 'the original id');
    const againSync = await api.post('/v1/events', synced);
    t.equal(againSync.status, 200, 'a sync repeat: evaluated, with the effects its row keeps');
    t.same(againSync.body, firstAnswer, 'as the first answer');
    const asyncRepeat = await api.post('/v1/events', { ...synced, mode: undefined });
    t.same({ status: asyncRepeat.status, body: asyncRepeat.body }, { status: 200, body: firstAnswer }, 'whatever the mode of the repeat');
    const inBatch = await api.post('/v1/events', { events: [ev, { ...synced, mode: undefined }] });
    t.same(inBatch.body.data[1], firstAnswer, 'a batch item too');
    const other = await api.post('/v1/events', { ...ev, properties: { ip: '1.1.1.1' } });
    t.equal(other.status, 409);
    t.equal(other.body.error.code, 'event_id_conflict', 'other content stays a conflict');
    const batch = await api.post('/v1/events', { events: [ev, { ...ev, properties: { ip: '1.1.1.1' } }] });
    t.equal(batch.status, 207);
    t.same(batch.body.data[0], { id: first.body.id, client_event_id: 'er-1', status: 'accepted', duplicate: true }, 'a batch item too');
    t.match(batch.body.data[1], { client_event_id: 'er-1', error: { code: 'event_id_conflict', param: 'events[1].id' } });
    t.equal((await api.get('/v1/customers?external_id=er-x')).body.data.length, 0, 'no customer was created again');
    const fresh = await api.post('/v1/events', { ...ev, id: 'er-3' });
    t.equal(fresh.status, 202, 'a new event for the external id');
    const created = (await api.get('/v1/customers?external_id=er-x')).body.data;
    t.equal(created.length, 1, 'creates a new customer');
    t.not(created[0].id, c.id);
  });

  await t.test('a stored Idempotency-Key answer holding erased data is not replayed after the delete', async (t) => {
    const body = { external_id: 'idem-gone', attributes: { email: 'idem-gone@example.com' } };
    const key = idem();
    const c = (await api.post('/v1/customers', body, key)).body;
    const merged = (await api.post('/v1/customers', { external_id: 'idem-merged', attributes: { email: 'm@example.com' } }, idem())).body;
    const aliasKey = idem();
    t.equal((await api.post(`/v1/customers/${c.id}/aliases`, { alias: 'idem-merged' }, aliasKey)).status, 201);
    const replay = await api.post('/v1/customers', body, key);
    t.equal(replay.body.id, c.id, 'replayed before the delete');
    t.equal((await api.delete(`/v1/customers/${c.id}`)).status, 204);
    const after = await api.post('/v1/customers', body, key);
    t.equal(after.status, 201, 'the request runs again');
    t.not(after.body.id, c.id, 'as a new customer: the erased answer is gone');
    const aliasAgain = await api.post(`/v1/customers/${c.id}/aliases`, { alias: 'idem-merged' }, aliasKey);
    t.equal(aliasAgain.status, 404, `the alias answer is gone too (${JSON.stringify(aliasAgain.body)})`);
    t.not(merged.id, c.id);
  });

  await t.test("answers stored for a person's key and ledger entries' answers are forgotten with the customer too", async (t) => {
    const admin = tenant.admin;
    const body = { external_id: 'erase-me', attributes: { email: 'secret@pii.example', name: 'Jane Doe' } };
    const key = idem();
    const c = await admin.post('/v1/customers', body, key);
    t.equal(c.status, 201, 'created with a personal access token');
    t.equal((await api.post('/v1/currencies', { key: 'erasec', name: 'Erase coins' }, idem())).status, 201);
    // A ledger entry's answer does not show its customer, only what the request said.
    const entry = { customer_id: 'erase-me', currency: 'erasec', amount: 50, reason: 'goodwill for Jane Doe, jane@pii.example' };
    const entryKey = idem();
    const e = await api.post('/v1/ledger_entries', entry, entryKey);
    t.equal(e.status, 201);
    const patEntryKey = idem();
    t.equal((await admin.post('/v1/ledger_entries', { ...entry, amount: 5 }, patEntryKey)).status, 201);
    t.equal((await admin.post('/v1/customers', body, key)).headers.get('idempotent-replayed'), 'true', 'replayed before the delete');
    t.equal((await api.post('/v1/ledger_entries', entry, entryKey)).headers.get('idempotent-replayed'), 'true');

    t.equal((await api.delete(`/v1/customers/${c.body.id}`)).status, 204);
    for (const [who, client, payload, k] of [
      ['secret key', api, entry, entryKey],
      ['personal access token', admin, { ...entry, amount: 5 }, patEntryKey],
    ] as const) {
      const again = await client.post('/v1/ledger_entries', payload, k);
      t.equal(again.headers.get('idempotent-replayed'), null, `the ledger entry (${who}) runs again`);
      t.match([again.status, again.body.error], [404, { code: 'resource_not_found', param: 'customer_id' }], 'and finds no customer');
      t.notMatch(JSON.stringify(again.body), /Jane Doe/);
    }
    const recreated = await admin.post('/v1/customers', body, key);
    t.equal(recreated.headers.get('idempotent-replayed'), null, "the person's create runs again");
    t.equal(recreated.status, 201);
    t.not(recreated.body.id, c.body.id, 'as a new customer: the erased answer is gone');
  });

  await t.test('client tokens and customer sessions need customer_sessions:write', async (t) => {
    const c = (await api.post('/v1/customers', { external_id: 'tok-1' }, idem())).body;
    const denied = await api.post(`/v1/customers/${c.id}/client_token`, {});
    t.equal(denied.status, 403);
    t.equal(denied.body.error.code, 'insufficient_scope');
    const k = await tenant.admin.post('/v1/api_keys', { kind: 'secret', name: 'sessions', scopes: ['customer_sessions:write', 'customers:read'] }, idem());
    t.equal(k.status, 201);
    const minter = anon.with({ authorization: `Bearer ${k.body.token}` });
    const tok = await minter.post(`/v1/customers/${c.id}/client_token`, {});
    t.equal(tok.status, 200);
    t.match(tok.body, { customer_id: c.id, external_id: 'tok-1', customer_token: /\./ });
    const asCustomer = anon.with({ authorization: `Bearer ${tok.body.customer_token}` });
    t.equal((await asCustomer.get(`/v1/customers/${c.id}/state`)).status, 200);
    const other = (await api.post('/v1/customers', { external_id: 'tok-2' }, idem())).body;
    t.equal((await asCustomer.get(`/v1/customers/${other.id}/state`)).body.error.code, 'forbidden');
    const key = idem();
    const s1 = await minter.post('/v1/customer_sessions', { grant_type: 'secret_key', customer_id: 'tok-1' }, key);
    t.equal(s1.status, 201);
    t.match(s1.body, { customer_token: /\./ });
    const s2 = await minter.post('/v1/customer_sessions', { grant_type: 'secret_key', customer_id: 'tok-1' }, key);
    t.equal(s2.status, 201);
    t.equal(s2.body.customer_token, null, 'a replayed mint returns customer_token: null');
    const noScope = await api.post('/v1/customer_sessions', { grant_type: 'secret_key', customer_id: 'tok-1' }, idem());
    t.equal(noScope.body.error.code, 'insufficient_scope');
    for (const unknown of ['never-seen', 'cust_00001M8EJ28KN1XFPGWKKM6QE368T']) {
      const none = await minter.post('/v1/customer_sessions', { grant_type: 'secret_key', customer_id: unknown }, idem());
      t.match([none.status, none.body.error], [404, { code: 'resource_not_found', param: 'customer_id' }], `an unknown customer (${unknown}) is named by its field`);
    }

    // Lifetime: 15 minutes by default; ttl_seconds names another, 60 s to a day.
    const expOf = (token: string) => JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()).exp as number;
    const lifetime = (token: string) => expOf(token) - JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()).iat;
    t.equal(lifetime(tok.body.customer_token), 900, 'client token: 15 minutes by default');
    t.equal(lifetime(s1.body.customer_token), 900, 'session: 15 minutes by default');
    t.equal(Date.parse(s1.body.expires_at) / 1000, expOf(s1.body.customer_token), 'expires_at is the token exp');
    const short = await minter.post(`/v1/customers/${c.id}/client_token`, { ttl_seconds: 60 });
    t.equal(short.status, 200);
    t.equal(lifetime(short.body.customer_token), 60);
    const long = await minter.post('/v1/customer_sessions', { grant_type: 'secret_key', customer_id: 'tok-1', ttl_seconds: 86_400 }, idem());
    t.equal(long.status, 201);
    t.equal(lifetime(long.body.customer_token), 86_400);
    const noBody = await minter.post(`/v1/customers/${c.id}/client_token`);
    t.equal(noBody.status, 200, 'client_token takes no body');
    for (const [path, body, param] of [
      [`/v1/customers/${c.id}/client_token`, { ttl_seconds: 59 }, 'ttl_seconds'],
      [`/v1/customers/${c.id}/client_token`, { ttl_seconds: 86_401 }, 'ttl_seconds'],
      [`/v1/customers/${c.id}/client_token`, { ttl_seconds: 90.5 }, 'ttl_seconds'],
      ['/v1/customer_sessions', { grant_type: 'secret_key', customer_id: 'tok-1', ttl_seconds: 0 }, 'ttl_seconds'],
      ['/v1/customer_sessions', { grant_type: 'secret_key', customer_id: 'tok-1', ttl_seconds: '600' }, 'ttl_seconds'],
    ] as const) {
      const r = await minter.post(path, body, idem());
      t.equal(r.status, 400, `${path} ${JSON.stringify(body)}`);
      t.match(r.body.error, { code: 'validation_failed', param });
    }
  });

  await t.test('/state and /export show the ledger: they need customers:read and ledger:read (as /balances needs ledger:read)', async (t) => {
    const c = (await api.post('/v1/customers', { external_id: 'scopes-1' }, idem())).body;
    const keyWith = async (scopes: string[]) => {
      const k = await tenant.admin.post('/v1/api_keys', { kind: 'secret', name: `only ${scopes.join(' ')}`, scopes }, idem());
      t.equal(k.status, 201);
      return anon.with({ authorization: `Bearer ${k.body.token}` });
    };
    const customersOnly = await keyWith(['customers:read']);
    const ledgerOnly = await keyWith(['ledger:read']);
    const both = await keyWith(['customers:read', 'ledger:read']);
    const needs = (scope: string) => ({ status: 403, body: { error: { code: 'insufficient_scope', message: `This route needs the scope ${scope}.` } } });
    for (const path of [`/v1/customers/${c.id}/state`, `/v1/customers/${c.id}/export`]) {
      t.match(await customersOnly.get(path), needs('ledger:read'), `${path} with customers:read only`);
      t.match(await ledgerOnly.get(path), needs('customers:read'), `${path} with ledger:read only`);
      t.equal((await both.get(path)).status, 200, `${path} with both`);
    }
    t.match(await customersOnly.get(`/v1/customers/${c.id}/balances`), needs('ledger:read'), '/balances, the same rule');
    t.equal((await customersOnly.get(`/v1/customers/${c.id}`)).status, 200, 'the customer itself needs customers:read only');
  });

  await t.test('attribute definitions type customer attributes', async (t) => {
    const d = await api.post('/v1/attribute_definitions', { key: 'favourite_mode', type: 'string', pii: false }, idem());
    t.equal(d.status, 201);
    t.match(d.body, { id: /^atd_/, key: 'favourite_mode', type: 'string', pii: false, description: null });
    const lvl = await api.post('/v1/attribute_definitions', { key: 'level', type: 'integer' }, idem());
    t.equal(lvl.status, 201);
    const dup = await api.post('/v1/attribute_definitions', { key: 'level', type: 'number' }, idem());
    t.equal(dup.body.error.code, 'already_exists');
    const badType = await api.post('/v1/attribute_definitions', { key: 'x', type: 'date' }, idem());
    t.equal(badType.body.error.code, 'validation_failed');
    t.equal(badType.body.error.param, 'type');
    const list = await api.get('/v1/attribute_definitions?limit=1');
    t.equal(list.body.data.length, 1);
    t.equal(list.body.has_more, true);
    const wrong = await api.post('/v1/customers', { external_id: 'typed-1', attributes: { level: 'high' } }, idem());
    t.equal(wrong.status, 400);
    t.equal(wrong.body.error.param, 'attributes.level');
    const right = await api.post('/v1/customers', { external_id: 'typed-1', attributes: { level: 7, other: 'free' } }, idem());
    t.equal(right.status, 201);
    const patch = await api.patch(`/v1/customers/${right.body.id}`, { attributes: { level: 1.5 } });
    t.equal(patch.body.error.code, 'validation_failed');
    t.same(patch.body.error.details, [{ param: 'attributes.level', message: 'attributes.level must be of type integer.' }], 'details, as for any validation_failed');
    t.equal((await api.post('/v1/attribute_definitions', { key: 'joined', type: 'timestamp' }, idem())).status, 201);
    for (const joined of ['2026-02-30T00:00:00Z', '2026-11-27T24:00:00Z']) {
      const day = await api.post('/v1/customers', { external_id: 'typed-2', attributes: { joined } }, idem());
      t.same({ status: day.status, param: day.body.error?.param }, { status: 400, param: 'attributes.joined' }, `${joined} does not exist`);
    }
    const joined = await api.post('/v1/customers', { external_id: 'typed-2', attributes: { joined: '2024-02-29T23:59:59+01:00' } }, idem());
    t.equal(joined.status, 201, 'a real instant, with an offset as occurred_at takes');
  });

  await t.test('management tokens need X-Service-Environment', async (t) => {
    const bare = anon.with({ authorization: `Bearer ${tenant.pat}` });
    const r = await bare.get('/v1/customers');
    t.equal(r.status, 403);
    t.equal(r.body.error.code, 'environment_required');
    t.equal((await tenant.admin.get('/v1/customers')).status, 200);
  });
});

t.test('an export over 1,000 events or ledger entries leaves out whole instants and says from when it holds everything', async (t) => {
  const { anon } = await startForTest(t);
  const api = (await signUp(anon)).server;
  t.equal((await api.post('/v1/currencies', { key: 'bulk', name: 'Bulk' }, idem())).status, 201);
  const rule = await api.post(
    '/v1/rules',
    {
      name: 'per bulk event',
      definition: { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: 'bulk.done' }, actions: [{ type: 'points.award', currency: 'bulk', amount: 1 }] },
    },
    idem(),
  );
  t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);
  // 10 batches of 100 and one of 50: the newest 1,000 end in the middle of the first batch, whose
  // events (and their ledger entries) share one instant.
  const sizes = [100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 50];
  let n = 0;
  const sent: Array<Record<string, unknown>> = [];
  for (const size of sizes) {
    const events = Array.from({ length: size }, () => ({ id: `bulk-${n++}`, name: 'bulk.done', customer_id: 'bulky', occurred_at: new Date().toISOString() }));
    sent.push(...events);
    const r = await api.post('/v1/events', { events, mode: 'sync' });
    t.equal(r.status, 207);
    await new Promise((resolve) => setTimeout(resolve, 5)); // one instant per batch
  }
  const id = (await api.get('/v1/customers?external_id=bulky')).body.data[0].id;
  const ex = (await api.get(`/v1/customers/${id}/export`)).body;
  t.equal(ex.events.length, 950, 'the first batch is left out whole');
  const received = (ex.events as Array<{ received_at: string }>).map((e) => Date.parse(e.received_at));
  t.equal(Date.parse(ex.events_since), Math.min(...received), 'events_since is the oldest instant held');
  // A repeat of a first-batch event answers its stored id: it was received before events_since.
  const again = await api.post('/v1/events', sent[0]);
  t.equal(again.body.duplicate, true);
  t.notOk(ex.events.some((e: { id: string }) => e.id === again.body.id), 'left out');
  const firstBatch = await api.get(`/v1/events/${again.body.id}`);
  t.ok(Date.parse(firstBatch.body.received_at) < Date.parse(ex.events_since), 'a left-out event was received before events_since');
  t.equal(ex.ledger_entries.length, 950, 'the ledger entries of the first batch are left out whole');
  const created = (ex.ledger_entries as Array<{ created_at: string }>).map((e) => Date.parse(e.created_at));
  t.equal(Date.parse(ex.ledger_entries_since), Math.min(...created));
  t.equal((await api.get(`/v1/customers/${id}/balances`)).body.data[0].available, 1050, 'the balance counts all of them');
});

t.test("the export's exported_at reads the environment's clock (the test clock), as every other time in it", async (t) => {
  const { anon } = await startForTest(t);
  const api = (await signUp(anon)).server;
  t.equal((await api.post('/v1/test_clock/advance', { seconds: 10 * 86_400 })).status, 200);
  const customer = (await api.post('/v1/customers', { external_id: 'later' }, idem())).body;
  const before = Date.parse((await api.get('/v1/test_clock')).body.now);
  const ex = await api.get(`/v1/customers/${customer.id}/export`);
  const after = Date.parse((await api.get('/v1/test_clock')).body.now);
  t.equal(ex.status, 200);
  const exportedAt = Date.parse(ex.body.exported_at);
  t.ok(before <= exportedAt && exportedAt <= after, `exported_at ${ex.body.exported_at} is on the test clock (${new Date(before).toISOString()}..${new Date(after).toISOString()})`);
  t.ok(exportedAt >= Date.parse(ex.body.customer.created_at), 'never older than its own contents');
});
