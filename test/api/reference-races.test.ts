// References between catalogs under concurrency (spec 2.9: a referenced segment cannot be renamed or
// deleted; README: a campaign that a rule or a live challenge names cannot be deleted, and a body
// field naming a missing resource is 404 resource_not_found). The races send, all at once, a request
// adding a reference to a resource and a request removing (or renaming) that resource, for many
// resources: exactly one of the two succeeds, never both (a dangling reference). Embedded mode
// (one connection) serializes the transactions; embedded.test.ts checks that these paths answer. Publish and rollback, which make a rule's live
// definition name segments, are checked against a segment delete held open in another transaction.
import t, { type Test } from 'tap';
import { openSql } from '../../src/persistence/sql/db.js';
import { type Client, databaseUrl, idem, type Storage, signUp, startForTest, storageFor } from '../helpers/service.js';

const ruleDefinition = {
  schema: 'service.rule/v2',
  trigger: { kind: 'customer_event', event: 'race' },
  actions: [{ type: 'points.award', currency: 'coins', amount: 1 }],
};

type Reply = { status: number; body: any };

/** Fails the test on a pair where both succeeded, or on an answer other than the documented ones. */
function judge(
  t: Test,
  what: string,
  results: Array<[Reply, Reply]>,
  adds: (r: Reply) => boolean,
  refused: (r: Reply) => boolean,
  removes: (r: Reply) => boolean,
) {
  let both = 0;
  let odd = 0;
  for (const [add, remove] of results) {
    if (adds(add) && removes(remove)) both++;
    else if (!((adds(add) && inUse(remove)) || (refused(add) && removes(remove)))) {
      odd++;
      t.fail(`${what}: unexpected pair ${add.status} ${JSON.stringify(add.body?.error ?? '')} / ${remove.status} ${JSON.stringify(remove.body?.error ?? '')}`);
    }
  }
  t.equal(both, 0, `${what}: never both (${results.length} pairs)`);
  t.equal(odd, 0, `${what}: one of the two, answered as documented`);
}

const notFound = (param: string) => (r: Reply) => r.status === 404 && r.body?.error?.code === 'resource_not_found' && r.body.error.param === param;
const inUse = (r: Reply) => r.status === 409 && r.body?.error?.code === 'resource_in_use';
const created = (r: Reply) => r.status === 201;
const ok = (r: Reply) => r.status === 200;
const deleted = (r: Reply) => r.status === 204;

async function segmentsNamed(api: Client, round: string, pairs: number): Promise<Array<{ id: string; name: string }>> {
  return Promise.all(
    Array.from({ length: pairs }, async (_, i) => {
      const name = `${round}-${i}`;
      const s = await api.post('/v1/segments', { name, kind: 'static' }, idem());
      if (s.status !== 201) throw new Error(JSON.stringify(s.body));
      return { id: s.body.id as string, name };
    }),
  );
}

async function campaigns(api: Client, round: string, pairs: number): Promise<string[]> {
  return Promise.all(
    Array.from({ length: pairs }, async (_, i) => {
      const c = await api.post('/v1/campaigns', { name: `${round}-${i}` }, idem());
      if (c.status !== 201) throw new Error(JSON.stringify(c.body));
      return c.body.id as string;
    }),
  );
}

async function races(t: Test, anon: Client, pairs: number): Promise<void> {
  const api = (await signUp(anon)).server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);

  // Campaign audiences and segments.
  let segs = await segmentsNamed(api, 'cd', pairs);
  let results = await Promise.all(
    segs.map((s, i) => Promise.all([api.post('/v1/campaigns', { name: `c${i}`, audience_segment: s.name }, idem()), api.delete(`/v1/segments/${s.id}`)])),
  );
  judge(t, 'campaign create / segment delete', results, created, notFound('audience_segment'), deleted);

  segs = await segmentsNamed(api, 'cr', pairs);
  results = await Promise.all(
    segs.map((s, i) =>
      Promise.all([api.post('/v1/campaigns', { name: `c${i}`, audience_segment: s.name }, idem()), api.patch(`/v1/segments/${s.id}`, { name: `${s.name}-renamed` })]),
    ),
  );
  judge(t, 'campaign create / segment rename', results, created, notFound('audience_segment'), ok);

  segs = await segmentsNamed(api, 'pd', pairs);
  let ids = await campaigns(api, 'pd', pairs);
  results = await Promise.all(segs.map((s, i) => Promise.all([api.patch(`/v1/campaigns/${ids[i]}`, { audience_segment: s.name }), api.delete(`/v1/segments/${s.id}`)])));
  judge(t, 'campaign PATCH / segment delete', results, ok, notFound('audience_segment'), deleted);

  // Rules and challenges naming campaigns.
  ids = await campaigns(api, 'rd', pairs);
  results = await Promise.all(
    ids.map((id, i) => Promise.all([api.post('/v1/rules', { name: `r${i}`, campaign_id: id, definition: ruleDefinition }, idem()), api.delete(`/v1/campaigns/${id}`)])),
  );
  judge(t, 'rule create / campaign delete', results, created, notFound('campaign_id'), deleted);

  ids = await campaigns(api, 'rp', pairs);
  const rules = await Promise.all(ids.map(async (_, i) => (await api.post('/v1/rules', { name: `r${i}`, definition: ruleDefinition }, idem())).body.id as string));
  results = await Promise.all(ids.map((id, i) => Promise.all([api.patch(`/v1/rules/${rules[i]}`, { campaign_id: id }), api.delete(`/v1/campaigns/${id}`)])));
  judge(t, 'rule PATCH / campaign delete', results, ok, notFound('campaign_id'), deleted);

  ids = await campaigns(api, 'hd', pairs);
  results = await Promise.all(
    ids.map((id, i) =>
      Promise.all([
        api.post('/v1/challenges', { name: `h${i}`, qualifying: { event: 'race' }, target: 1, contribution_key: null, campaign_id: id }, idem()),
        api.delete(`/v1/campaigns/${id}`),
      ]),
    ),
  );
  judge(t, 'challenge create / campaign delete', results, created, notFound('campaign_id'), deleted);
}

t.test('references and removals, one service on PostgreSQL', async (t) => {
  const storage = storageFor(t);
  const { anon } = await startForTest(t, { storage });
  await t.test('a reference added while its resource is removed: one of the two requests fails', (t) => races(t, anon, 24));
  await t.test('publish and rollback meet a segment delete in flight: they wait for it and refuse the segment gone', (t) => publishAndRollback(t, anon, storage));
});

async function publishAndRollback(t: Test, anon: Client, storage: Storage): Promise<void> {
  const tenant = await signUp(anon);
  const api = tenant.server;
  t.equal((await api.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem())).status, 201);
  // Rules compile in a worker: a first publish starts it, so the waits measured below are the locks'.
  const warm = await api.post('/v1/rules', { name: 'warm-up', definition: ruleDefinition }, idem());
  t.equal((await api.post(`/v1/rules/${warm.body.id}/publish`, {})).status, 200);
  // A second connection to the service's schema plays the segment delete that has checked for users.
  const sql = openSql({ url: databaseUrl, schema: storage.schema, max: 2 });
  t.teardown(() => sql.end());
  const inVip = (name: string) => ({ ...ruleDefinition, conditions: { path: 'customer.segments', op: 'contains', value: name } });

  /**
   * Runs `request` while another transaction holds the segment locked and deletes it; commits once
   * the request waits on that transaction (seen in pg_stat_activity), or after 10 s.
   */
  async function whileDeleting(segment: string, request: () => Promise<Reply>): Promise<{ reply: Reply; waited: boolean }> {
    let reply: Reply | undefined;
    let pending: Promise<Reply> | undefined;
    let waited = false;
    await sql.begin(async (tx) => {
      const [me] = await tx`select pg_backend_pid() as pid`;
      const pid = Number(me!.pid);
      await tx`select 1 from segments where environment_id = ${tenant.testEnv} and name = ${segment} for update`;
      await tx`delete from segments where environment_id = ${tenant.testEnv} and name = ${segment}`;
      pending = request().then((r) => (reply = r));
      const blocked = async () => (await sql`select count(*)::int as n from pg_stat_activity where ${pid}::int = any(pg_blocking_pids(pid))`)[0]!.n > 0;
      let isBlocked = false;
      for (const until = Date.now() + 10_000; !isBlocked && reply === undefined && Date.now() < until; ) {
        isBlocked = await blocked();
        if (!isBlocked) await new Promise((r) => setTimeout(r, 10));
      }
      waited = isBlocked && reply === undefined;
    });
    return { reply: await pending!, waited };
  }

  // Given a draft naming segment s1 (drafts may name anything; publish checks)
  t.equal((await api.post('/v1/segments', { name: 's1', kind: 'static' }, idem())).status, 201);
  const rule = await api.post('/v1/rules', { name: 'vip only', definition: inVip('s1') }, idem());
  t.equal(rule.status, 201);
  // When s1 is deleted while the publish runs, then the publish waits and refuses it.
  const published = await whileDeleting('s1', () => api.post(`/v1/rules/${rule.body.id}/publish`, {}));
  t.ok(published.waited, 'the publish waited for the delete');
  t.equal(published.reply.status, 422, JSON.stringify(published.reply.body));
  t.match(published.reply.body.error, { code: 'rule_invalid', details: [{ param: 'definition.conditions.value', message: /No segment 's1'/ }] });

  // Given version 1 names s2 and version 2 does not
  t.equal((await api.post('/v1/segments', { name: 's2', kind: 'static' }, idem())).status, 201);
  t.equal((await api.patch(`/v1/rules/${rule.body.id}`, { definition: inVip('s2') })).status, 200);
  t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);
  t.equal((await api.patch(`/v1/rules/${rule.body.id}`, { definition: ruleDefinition })).status, 200);
  t.equal((await api.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200);
  // When s2 is deleted while a rollback to version 1 runs, then the rollback waits and refuses it.
  const rolled = await whileDeleting('s2', () => api.post(`/v1/rules/${rule.body.id}/rollback`, { number: 1 }));
  t.ok(rolled.waited, 'the rollback waited for the delete');
  t.equal(rolled.reply.status, 422, JSON.stringify(rolled.reply.body));
  t.match(rolled.reply.body.error, { code: 'rule_invalid' });
  t.match((await api.get(`/v1/rules/${rule.body.id}`)).body, { active_version: { number: 2 } }, 'version 2 stays active');
}
