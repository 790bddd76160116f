// DELETE /customers/{id} of a survivor (a customer others were merged into), over the real engine
// on the in-memory twins, with its steps stopped or interleaved on purpose: a DELETE refused for
// its If-Match erased nothing; one that stopped midway (a storage error, 429) is finished by its
// repeat, sent unchanged; a delete and a merge into the same customer never leave the merged
// customer behind (a customer whose delete began takes no new alias); and a key still bound to a
// deleted customer is free (an event for it creates a new customer, an alias addition takes it)
// instead of answering 404 for good.
import t, { type Test } from 'tap';
import type { Call } from '../../src/actors/partition.js';
import { customerRoutesOver, partitionOfKey } from '../helpers/customer-routes.js';

type Harness = Awaited<ReturnType<typeof customerRoutesOver>>;

/** What the merged customer still holds, asked the way its survivor's export asks. */
async function mergedHolds(h: Harness, mergedId: string, survivorId: string) {
  const r = await h.direct({ by: 'id', id: mergedId }, { kind: 'customer.merged_from', survivorId });
  if (r.kind !== 'merged_from') throw new Error(`unexpected ${r.kind}`);
  return { attributes: r.attributes, aliases: r.aliases.map((a) => a.alias) };
}

/** M (attributes, an alias, an event) merged into S; returns their ids. */
async function mergedPair(t: Test, h: Harness, name: string) {
  const m = await h.create(`${name}-m`, { email: `${name}@example.com` });
  t.equal((await h.addAlias(m, `${name}-m-device`)).status, 201);
  t.equal((await h.event(`${name}-m`, `${name}-m-1`, { ip: '1.2.3.4' })).ok, true);
  const s = await h.create(`${name}-s`);
  t.equal((await h.event(`${name}-s`, `${name}-s-1`)).ok, true);
  const merge = await h.addAlias(s, `${name}-m`);
  t.match(merge, { status: 201, body: { merged_from: m } });
  return { m, s };
}

/** The external id is free: an event for it creates a new customer, neither of `ids`. */
async function isFree(h: Harness, key: string, ids: string[]): Promise<boolean> {
  const r = await h.event(key, `${key}-free-${h.now()}`);
  return r.ok === true && r.reply.kind === 'event' && !ids.includes(r.reply.customerId);
}

t.test('a DELETE whose If-Match names another version erases nothing, the merged customers included', async (t) => {
  const h = await customerRoutesOver(t);
  const { m, s } = await mergedPair(t, h, 'stale');
  const r = await h.remove(s, { 'if-match': '"5"' });
  t.match(r, { status: 409, code: 'stale_write' });
  t.same(await mergedHolds(h, m, s), { attributes: { email: 'stale@example.com' }, aliases: ['stale-m-device'] }, 'the merged customer is untouched');
  t.equal((await h.get(s)).status, 200, 'the survivor too');
  t.equal((await h.remove(s, { 'if-match': '"1"' })).status, 204, 'its version deletes');
});

t.test('If-Match is checked in the same step that begins the delete: a PATCH landing while merged customers are erased does not leave a 409 behind them', async (t) => {
  let patched = false;
  let patch: () => Promise<unknown> = async () => {};
  const h = await customerRoutesOver(t, {
    // The first register write is the merged customer's erasure: the PATCH lands right then.
    eraseEventIds: async () => {
      if (patched) return;
      patched = true;
      await patch();
    },
  });
  const { m, s } = await mergedPair(t, h, 'race');
  patch = async () => t.match(await h.request('PATCH', '/v1/customers/:id', s, { attributes: { level: 2 } }), { status: 200, body: { version: 2 } });
  const r = await h.remove(s, { 'if-match': '"1"' });
  t.ok(patched, 'the PATCH landed mid-delete');
  // Either the delete refused and erased nothing, or it was accepted at version 1 and finished.
  if (r.status === 409) {
    t.same((await mergedHolds(h, m, s)).attributes, { email: 'race@example.com' }, 'a 409 erased nothing');
  }
  t.equal(r.status, 204, 'the delete began at version 1 and finishes');
  t.equal((await h.get(s)).status, 404, 'the survivor is erased');
  t.same(await mergedHolds(h, m, s), { attributes: {}, aliases: [] }, 'and the customer merged into it');
  t.ok(await isFree(h, 'race-m', [m, s]), "the merged customer's external id is free");
});

t.test('a DELETE that stopped after erasing the merged customers (storage error) is finished by a plain repeat', async (t) => {
  let writes = 0;
  const h = await customerRoutesOver(t, {
    eraseEventIds: async () => {
      // The merged customer's events are written, then the register fails for the survivor's.
      if (++writes === 2) throw new Error('register unavailable');
    },
  });
  const { m, s } = await mergedPair(t, h, 'stop');
  await t.rejects(h.remove(s), /register unavailable/, 'the first attempt fails midway');
  t.same(await mergedHolds(h, m, s), { attributes: {}, aliases: [] }, 'the merged customer was erased');
  t.equal((await h.get(s)).status, 200, 'the survivor was not');
  t.equal((await h.request('GET', '/v1/customers/:id/export', s)).status, 200, 'its export still answers');
  t.equal((await h.remove(s)).status, 204, 'the repeat finishes the delete');
  t.equal((await h.get(s)).status, 404);
  t.ok(await isFree(h, 'stop-s', [m, s]), "the survivor's external id is free");
  t.ok(await isFree(h, 'stop-m-device', [m, s]), "the merged customer's own alias is free");
  t.ok(h.forgotten.includes(m) && h.forgotten.includes(s), 'stored answers mentioning either are forgotten');
});

t.test('a DELETE answered 429 (the customer kept recording events) is finished by its repeat, sent unchanged, even after a PATCH', async (t) => {
  let busy = true;
  let sent = 0;
  let h: Harness | null = null;
  let s = '';
  h = await customerRoutesOver(t, {
    // Every register write is followed by one more event of the survivor, and a PATCH.
    eraseEventIds: async () => {
      if (!busy || h === null) return;
      await h.event('busy-s', `busy-s-more-${++sent}`);
      if (sent === 1) await h.request('PATCH', '/v1/customers/:id', s, { attributes: { level: 2 } });
    },
  });
  const pair = await mergedPair(t, h, 'busy');
  s = pair.s;
  const first = await h.remove(s, { 'if-match': '"1"' });
  t.match(first, { status: 429, code: 'rate_limited' });
  t.match(await h.get(s), { status: 200, body: { version: 2 } }, 'the survivor lives on, patched');
  busy = false;
  t.equal((await h.remove(s, { 'if-match': '"1"' })).status, 204, 'the repeat (the same If-Match) finishes the delete begun at version 1');
  t.same(await mergedHolds(h, pair.m, s), { attributes: {}, aliases: [] });
  t.equal((await h.get(s)).status, 404);
});

t.test('a DELETE and an alias addition merging into the same customer run one after the other: the merged customer is never left behind', async (t) => {
  let claimed: () => void = () => {};
  const claimSeen = new Promise<void>((resolve) => {
    claimed = resolve;
  });
  let deleteStarted: () => void = () => {};
  const started = new Promise<void>((resolve) => {
    deleteStarted = resolve;
  });
  let held = false;
  const h = await customerRoutesOver(t, {
    step: async (call: Call) => {
      if (call.command.kind === 'key.claim') claimed();
      if (call.command.kind === 'customer.view') deleteStarted();
      // The delete's last step waits (a while) for the alias addition's claim, as a slow delete would.
      if (call.command.kind === 'customer.delete' && !held) {
        held = true;
        await Promise.race([claimSeen, new Promise((r) => setTimeout(r, 300))]);
      }
    },
  });
  const m = await h.create('dm-m', { email: 'dm@example.com' });
  t.equal((await h.event('dm-m', 'dm-m-1', { secret: 'pii' })).ok, true);
  const s = await h.create('dm-s');
  const deleting = h.remove(s);
  await started;
  const adding = h.addAlias(s, 'dm-m');
  const [deleted, added] = await Promise.all([deleting, adding]);
  t.equal(deleted.status, 204);
  if (added.status === 201) {
    t.same(await mergedHolds(h, m, s), { attributes: {}, aliases: [] }, 'merged first: erased with the survivor');
  } else {
    t.match(added, { status: 404, code: 'resource_not_found' }, 'or the alias addition came after the delete and found the customer gone');
    const again = await h.event('dm-m', 'dm-m-2');
    t.match(again, { ok: true, reply: { customerId: m } }, 'and the customer it named was never merged: its events still reach it');
  }
  const later = await h.event('dm-m', 'dm-m-3');
  t.equal(later.ok, true, `an event for the merged external id is never refused for good (${JSON.stringify(later)})`);
});

t.test('a merge whose survivor was deleted between its claim and its alias step (an overlap of a lost lock) erases what the claim merged', async (t) => {
  let s = '';
  let done = false;
  let h: Harness | null = null;
  h = await customerRoutesOver(t, {
    step: async (call: Call) => {
      if (call.command.kind !== 'alias.add' || done || h === null) return;
      done = true;
      // The survivor's delete runs in full right here, as a delete that did not wait for the lock would.
          await h.direct({ by: 'id', id: s }, { kind: 'customer.delete', eventsErased: 0 });
    },
  });
  const m = await h.create('ov-m', { email: 'ov@example.com' });
  s = await h.create('ov-s');
  t.match(await h.addAlias(s, 'ov-m'), { status: 404, code: 'resource_not_found' });
  t.same(await mergedHolds(h, m, s), { attributes: {}, aliases: [] }, 'the customer the claim merged is erased with the deleted survivor');
  t.ok(await isFree(h, 'ov-m', [m, s]), 'and its external id is free');
});

t.test('a key left bound to a deleted customer is free: an event for it creates a new customer, an alias addition takes it', async (t) => {
  const h = await customerRoutesOver(t);
  const s = await h.create('lb-s');
  const p = partitionOfKey('lb-s');
  // Bindings a delete did not get to release (it stopped after erasing the customer): an alias on
  // another partition, and one on the customer's own.
  const elsewhere = h.keyIn('lb-x', p, false);
  const here = h.keyIn('lb-y', p, true);
  const taken = h.keyIn('lb-z', p, false);
  for (const key of [elsewhere, here, taken]) await h.direct({ by: 'key', key }, { kind: 'key.claim', customerId: s });
  await h.direct({ by: 'id', id: s }, { kind: 'customer.delete', eventsErased: 0 });
  t.ok(await isFree(h, elsewhere, [s]), 'an alias bound on another partition');
  t.ok(await isFree(h, here, [s]), "an alias bound on the customer's own partition");
  const c = await h.create('lb-c');
  t.match(await h.addAlias(c, taken), { status: 201, body: { alias: { alias: taken, customer_id: c }, merged_from: null } }, 'another customer takes it');
  t.match(await h.event(taken, 'lb-z-1'), { ok: true, reply: { customerId: c } }, 'and it routes there');
});

t.test("an alias left bound to an erased merged customer is free, not sent on to its deleted survivor", async (t) => {
  const h = await customerRoutesOver(t);
  const m = await h.create('em-m');
  t.equal((await h.addAlias(m, 'em-m-device')).status, 201);
  const s = await h.create('em-s');
  t.equal((await h.addAlias(s, 'em-m')).status, 201);
  // The delete erased both, then stopped before releasing the merged customer's alias.
  await h.direct({ by: 'id', id: m }, { kind: 'customer.erase_merged', survivorId: s, eventsErased: 0 });
  await h.direct({ by: 'id', id: s }, { kind: 'customer.delete', eventsErased: 0 });
  t.ok(await isFree(h, 'em-m-device', [m, s]));
});

t.test('a customer whose delete began and stopped takes no new alias until the delete is repeated', async (t) => {
  const h = await customerRoutesOver(t);
  const s = await h.create('dl-s');
  t.equal((await h.addAlias(s, 'dl-anon')).status, 201);
  await h.direct({ by: 'id', id: s }, { kind: 'customer.delete_begin' });
  t.match(await h.addAlias(s, 'dl-new'), { status: 409, code: 'invalid_state' });
  t.match(await h.addAlias(s, 'dl-anon'), { status: 200 }, 'an alias it holds is answered as before');
  t.equal((await h.remove(s)).status, 204, 'the repeated delete finishes');
});

t.test('a DELETE whose issuance release fails has already forgotten the stored answers naming the erased customers', async (t) => {
  // Given a survivor with a merged customer, and a release of the ended issuances' units that fails
  const h = await customerRoutesOver(t, {
    releaseIssuances: async () => {
      throw new Error('stock unavailable');
    },
  });
  const { m, s } = await mergedPair(t, h, 'release');
  // When the survivor is deleted
  await t.rejects(h.remove(s), /stock unavailable/, 'the release fails after the erasure');
  // Then both are erased and no stored answer naming either stays replayable (the stock reconciler gives the units back)
  t.equal((await h.get(s)).status, 404, 'the survivor is erased');
  t.ok(h.forgotten.includes(m) && h.forgotten.includes(s), 'stored answers mentioning either are forgotten');
});
