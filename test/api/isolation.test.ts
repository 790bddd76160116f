// Tenant-isolation matrix over real HTTP: every route that takes an id x every credential kind of
// another tenant (and of the same tenant's other environment) x the first tenant's ids. A caller
// that may use the route gets 404 resource_not_found; one that may not gets the same refusal as for
// an id that exists nowhere (no existence oracle). Lists and external-id lookups never show foreign
// data, and nothing the other tenant tried changed the first tenant's resources.
import { allScopes } from '../../src/tenancy/types.js';
import t, { type Test } from 'tap';
import { type Client, idem, signUp, startForTest, type Tenant } from '../helpers/service.js';

type Kind = 'secret' | 'publishable' | 'pat' | 'session' | 'customer';

interface Cred {
  name: string;
  kind: Kind;
  /** Scopes the credential holds in the environment it acts in. */
  scopes: ReadonlySet<string>;
  client: Client;
}

interface Ids {
  customer: string;
  /** A customer created through an event (never through POST /v1/customers). */
  eventCustomer: string;
  externalId: string;
  event: string;
  key: string;
  tierProgram: string;
  rule: string;
  challenge: string;
  counter: string;
  organization: string;
  /** A member (the owner) of the organization. */
  member: string;
  reward: string;
  /** An issued reward issuance of `customer`. */
  issuance: string;
  changeSet: string;
  matchProfile: string;
  matchResult: string;
  matchId: string;
  /** A held match result player. */
  matchPlayer: string;
  /** A static segment (the customer is a member) and a campaign. */
  segment: string;
  campaign: string;
}

interface RouteCase {
  name: string;
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE';
  /** The OpenAPI path this row covers. */
  openapi: string;
  allow: readonly Kind[];
  /** The scope the route needs (every one of a list), or null for a role check. */
  scope: string | readonly string[] | null;
  path: (ids: Ids) => string;
  body?: (ids: Ids, n: number) => unknown;
  idempotent?: boolean;
  /** Names an organization, not an environment: only checked across tenants (a tenant's own credentials are members). */
  organizationScoped?: boolean;
}

const customerTokenScopes = ['customers:read', 'ledger:read', 'programs:read', 'notifications:read', 'notifications:write'];
const management = ['secret', 'pat', 'session'] as const;
const withCustomer = ['secret', 'pat', 'session', 'customer'] as const;

/** Destructive rows (DELETE) come last so a leak cannot hide behind an earlier deletion. */
const routes: RouteCase[] = [
  { name: 'GET customer', method: 'GET', openapi: '/v1/customers/{id}', allow: withCustomer, scope: 'customers:read', path: (i) => `/v1/customers/${i.customer}` },
  { name: 'GET event-made customer', method: 'GET', openapi: '/v1/customers/{id}', allow: withCustomer, scope: 'customers:read', path: (i) => `/v1/customers/${i.eventCustomer}` },
  { name: 'GET state', method: 'GET', openapi: '/v1/customers/{id}/state', allow: withCustomer, scope: ['customers:read', 'ledger:read'], path: (i) => `/v1/customers/${i.customer}/state` },
  { name: 'GET balances', method: 'GET', openapi: '/v1/customers/{id}/balances', allow: withCustomer, scope: 'ledger:read', path: (i) => `/v1/customers/${i.customer}/balances` },
  { name: 'GET ledger_entries', method: 'GET', openapi: '/v1/customers/{id}/ledger_entries', allow: management, scope: 'ledger:read', path: (i) => `/v1/customers/${i.customer}/ledger_entries` },
  { name: 'GET export', method: 'GET', openapi: '/v1/customers/{id}/export', allow: management, scope: ['customers:read', 'ledger:read'], path: (i) => `/v1/customers/${i.eventCustomer}/export` },
  {
    name: 'PATCH customer',
    method: 'PATCH',
    openapi: '/v1/customers/{id}',
    allow: management,
    scope: 'customers:write',
    path: (i) => `/v1/customers/${i.customer}`,
    body: () => ({ attributes: { tier: 'hijacked' } }),
  },
  {
    name: 'POST aliases',
    method: 'POST',
    openapi: '/v1/customers/{id}/aliases',
    allow: management,
    scope: 'customers:write',
    path: (i) => `/v1/customers/${i.customer}/aliases`,
    body: (_i, n) => ({ alias: `stolen-${n}` }),
    idempotent: true,
  },
  {
    name: 'POST aliases (merge A external id)',
    method: 'POST',
    openapi: '/v1/customers/{id}/aliases',
    allow: management,
    scope: 'customers:write',
    path: (i) => `/v1/customers/${i.customer}/aliases`,
    body: (i) => ({ alias: i.externalId }),
    idempotent: true,
  },
  { name: 'POST client_token', method: 'POST', openapi: '/v1/customers/{id}/client_token', allow: management, scope: 'customer_sessions:write', path: (i) => `/v1/customers/${i.customer}/client_token`, body: () => ({}) },
  {
    name: 'POST customer_sessions (id)',
    method: 'POST',
    openapi: '/v1/customer_sessions',
    allow: ['secret'],
    scope: 'customer_sessions:write',
    path: () => '/v1/customer_sessions',
    body: (i) => ({ grant_type: 'secret_key', customer_id: i.customer }),
    idempotent: true,
  },
  {
    name: 'POST customer_sessions (external id)',
    method: 'POST',
    openapi: '/v1/customer_sessions',
    allow: ['secret'],
    scope: 'customer_sessions:write',
    path: () => '/v1/customer_sessions',
    body: (i) => ({ grant_type: 'secret_key', customer_id: i.externalId }),
    idempotent: true,
  },
  { name: 'GET event', method: 'GET', openapi: '/v1/events/{id}', allow: management, scope: 'events:read', path: (i) => `/v1/events/${i.event}` },
  { name: 'POST api_keys revoke', method: 'POST', openapi: '/v1/api_keys/{id}/revoke', allow: ['pat', 'session'], scope: null, path: (i) => `/v1/api_keys/${i.key}/revoke`, body: () => ({}) },
  { name: 'GET tier program', method: 'GET', openapi: '/v1/tier_programs/{id}', allow: management, scope: 'programs:read', path: (i) => `/v1/tier_programs/${i.tierProgram}` },
  { name: 'PATCH tier program', method: 'PATCH', openapi: '/v1/tier_programs/{id}', allow: management, scope: 'programs:write', path: (i) => `/v1/tier_programs/${i.tierProgram}`, body: () => ({ name: 'hijacked' }) },
  { name: 'GET rule', method: 'GET', openapi: '/v1/rules/{id}', allow: management, scope: 'programs:read', path: (i) => `/v1/rules/${i.rule}` },
  { name: 'GET rule versions', method: 'GET', openapi: '/v1/rules/{id}/versions', allow: management, scope: 'programs:read', path: (i) => `/v1/rules/${i.rule}/versions` },
  { name: 'PATCH rule', method: 'PATCH', openapi: '/v1/rules/{id}', allow: management, scope: 'programs:write', path: (i) => `/v1/rules/${i.rule}`, body: () => ({ name: 'hijacked' }) },
  {
    name: 'POST rule simulate',
    method: 'POST',
    openapi: '/v1/rules/{id}/simulate',
    allow: management,
    scope: 'programs:write',
    path: (i) => `/v1/rules/${i.rule}/simulate`,
    body: () => ({ event: { name: 'app.opened', properties: {} } }),
  },
  { name: 'POST rule publish', method: 'POST', openapi: '/v1/rules/{id}/publish', allow: management, scope: 'programs:write', path: (i) => `/v1/rules/${i.rule}/publish`, body: () => ({}) },
  { name: 'POST rule pause', method: 'POST', openapi: '/v1/rules/{id}/pause', allow: management, scope: 'programs:write', path: (i) => `/v1/rules/${i.rule}/pause`, body: () => ({}) },
  { name: 'POST rule resume', method: 'POST', openapi: '/v1/rules/{id}/resume', allow: management, scope: 'programs:write', path: (i) => `/v1/rules/${i.rule}/resume`, body: () => ({}) },
  { name: 'POST rule rollback', method: 'POST', openapi: '/v1/rules/{id}/rollback', allow: management, scope: 'programs:write', path: (i) => `/v1/rules/${i.rule}/rollback`, body: () => ({ number: 1 }) },
  { name: 'POST rule archive', method: 'POST', openapi: '/v1/rules/{id}/archive', allow: management, scope: 'programs:write', path: (i) => `/v1/rules/${i.rule}/archive`, body: () => ({}) },
  { name: 'GET challenge', method: 'GET', openapi: '/v1/challenges/{id}', allow: management, scope: 'programs:read', path: (i) => `/v1/challenges/${i.challenge}` },
  { name: 'PATCH challenge', method: 'PATCH', openapi: '/v1/challenges/{id}', allow: management, scope: 'programs:write', path: (i) => `/v1/challenges/${i.challenge}`, body: () => ({ name: 'hijacked' }) },
  { name: 'GET challenge enrollments', method: 'GET', openapi: '/v1/challenges/{id}/enrollments', allow: management, scope: 'programs:read', path: (i) => `/v1/challenges/${i.challenge}/enrollments` },
  {
    name: 'POST challenge enrollments',
    method: 'POST',
    openapi: '/v1/challenges/{id}/enrollments',
    allow: management,
    scope: 'programs:write',
    path: (i) => `/v1/challenges/${i.challenge}/enrollments`,
    body: (i) => ({ customer_id: i.customer }),
  },
  { name: 'GET challenge progress', method: 'GET', openapi: '/v1/challenges/{id}/progress', allow: management, scope: 'programs:read', path: (i) => `/v1/challenges/${i.challenge}/progress?customer_id=${i.customer}` },
  {
    name: 'POST challenge progress revoke',
    method: 'POST',
    openapi: '/v1/challenges/{id}/progress/revoke',
    allow: management,
    scope: 'programs:write',
    path: (i) => `/v1/challenges/${i.challenge}/progress/revoke`,
    body: (i) => ({ customer_id: i.customer, contribution: 'm1', reason: 'intrusion' }),
  },
  {
    name: 'POST challenge reevaluate',
    method: 'POST',
    openapi: '/v1/challenges/{id}/reevaluate',
    allow: management,
    scope: 'programs:write',
    path: (i) => `/v1/challenges/${i.challenge}/reevaluate`,
    body: (i) => ({ customer_id: i.customer, reason: 'intrusion' }),
  },
  { name: 'GET counter definition', method: 'GET', openapi: '/v1/counter_definitions/{id}', allow: management, scope: 'programs:read', path: (i) => `/v1/counter_definitions/${i.counter}` },
  {
    name: 'POST counter backfill',
    method: 'POST',
    openapi: '/v1/counter_definitions/{id}/backfill',
    allow: management,
    scope: 'programs:write',
    path: (i) => `/v1/counter_definitions/${i.counter}/backfill`,
    body: () => ({}),
  },
  { name: 'GET segment', method: 'GET', openapi: '/v1/segments/{id}', allow: management, scope: 'programs:read', path: (i) => `/v1/segments/${i.segment}` },
  { name: 'PATCH segment', method: 'PATCH', openapi: '/v1/segments/{id}', allow: management, scope: 'programs:write', path: (i) => `/v1/segments/${i.segment}`, body: () => ({ name: 'hijacked' }) },
  { name: 'GET segment members', method: 'GET', openapi: '/v1/segments/{id}/members', allow: management, scope: 'customers:read', path: (i) => `/v1/segments/${i.segment}/members` },
  {
    name: 'POST segment members',
    method: 'POST',
    openapi: '/v1/segments/{id}/members',
    allow: management,
    scope: 'customers:write',
    path: (i) => `/v1/segments/${i.segment}/members`,
    body: (i) => ({ customer_id: i.eventCustomer }),
    idempotent: true,
  },
  { name: 'GET campaign', method: 'GET', openapi: '/v1/campaigns/{id}', allow: management, scope: 'programs:read', path: (i) => `/v1/campaigns/${i.campaign}` },
  { name: 'PATCH campaign', method: 'PATCH', openapi: '/v1/campaigns/{id}', allow: management, scope: 'programs:write', path: (i) => `/v1/campaigns/${i.campaign}`, body: () => ({ name: 'hijacked' }) },
  { name: 'POST campaign activate', method: 'POST', openapi: '/v1/campaigns/{id}/activate', allow: management, scope: 'programs:write', path: (i) => `/v1/campaigns/${i.campaign}/activate`, body: () => ({}) },
  { name: 'POST campaign pause', method: 'POST', openapi: '/v1/campaigns/{id}/pause', allow: management, scope: 'programs:write', path: (i) => `/v1/campaigns/${i.campaign}/pause`, body: () => ({}) },
  { name: 'POST campaign end', method: 'POST', openapi: '/v1/campaigns/{id}/end', allow: management, scope: 'programs:write', path: (i) => `/v1/campaigns/${i.campaign}/end`, body: () => ({}) },
  { name: 'GET memberships', method: 'GET', openapi: '/v1/organizations/{id}/memberships', allow: ['pat', 'session'], scope: null, path: (i) => `/v1/organizations/${i.organization}/memberships`, organizationScoped: true },
  { name: 'GET environments', method: 'GET', openapi: '/v1/organizations/{id}/environments', allow: ['pat', 'session'], scope: null, path: (i) => `/v1/organizations/${i.organization}/environments`, organizationScoped: true },
  {
    name: 'POST memberships',
    method: 'POST',
    openapi: '/v1/organizations/{id}/memberships',
    allow: ['pat', 'session'],
    scope: null,
    path: (i) => `/v1/organizations/${i.organization}/memberships`,
    body: (_i, n) => ({ email: `intruder-${n}@b.example`, role: 'owner' }),
    idempotent: true,
    organizationScoped: true,
  },
  {
    name: 'PATCH membership',
    method: 'PATCH',
    openapi: '/v1/organizations/{id}/memberships/{user_id}',
    allow: ['pat', 'session'],
    scope: null,
    path: (i) => `/v1/organizations/${i.organization}/memberships/${i.member}`,
    body: () => ({ role: 'viewer' }),
    organizationScoped: true,
  },
  { name: 'GET reward', method: 'GET', openapi: '/v1/rewards/{id}', allow: management, scope: 'programs:read', path: (i) => `/v1/rewards/${i.reward}` },
  { name: 'PATCH reward', method: 'PATCH', openapi: '/v1/rewards/{id}', allow: management, scope: 'programs:write', path: (i) => `/v1/rewards/${i.reward}`, body: () => ({ availability: 0 }) },
  {
    name: 'POST reward_issuances (A reward, A customer)',
    method: 'POST',
    openapi: '/v1/reward_issuances',
    allow: management,
    scope: 'ledger:write',
    path: () => '/v1/reward_issuances',
    body: (i) => ({ reward_id: i.reward, customer_id: i.customer }),
    idempotent: true,
  },
  {
    name: 'POST reward_issuances (A external id)',
    method: 'POST',
    openapi: '/v1/reward_issuances',
    allow: management,
    scope: 'ledger:write',
    path: () => '/v1/reward_issuances',
    body: (i) => ({ reward_id: i.reward, customer_id: i.externalId }),
    idempotent: true,
  },
  { name: 'GET reward issuance', method: 'GET', openapi: '/v1/reward_issuances/{id}', allow: management, scope: 'ledger:read', path: (i) => `/v1/reward_issuances/${i.issuance}` },
  { name: 'POST issuance redeem', method: 'POST', openapi: '/v1/reward_issuances/{id}/redeem', allow: management, scope: 'ledger:write', path: (i) => `/v1/reward_issuances/${i.issuance}/redeem`, body: () => ({}) },
  { name: 'POST issuance cancel', method: 'POST', openapi: '/v1/reward_issuances/{id}/cancel', allow: management, scope: 'ledger:write', path: (i) => `/v1/reward_issuances/${i.issuance}/cancel`, body: () => ({}) },
  { name: 'DELETE reward', method: 'DELETE', openapi: '/v1/rewards/{id}', allow: management, scope: 'programs:write', path: (i) => `/v1/rewards/${i.reward}` },
  {
    name: 'DELETE challenge enrollment',
    method: 'DELETE',
    openapi: '/v1/challenges/{id}/enrollments/{customer_id}',
    allow: management,
    scope: 'programs:write',
    path: (i) => `/v1/challenges/${i.challenge}/enrollments/${i.customer}`,
  },
  { name: 'DELETE challenge', method: 'DELETE', openapi: '/v1/challenges/{id}', allow: management, scope: 'programs:write', path: (i) => `/v1/challenges/${i.challenge}` },
  { name: 'DELETE counter definition', method: 'DELETE', openapi: '/v1/counter_definitions/{id}', allow: management, scope: 'programs:write', path: (i) => `/v1/counter_definitions/${i.counter}` },
  { name: 'GET change set', method: 'GET', openapi: '/v1/change_sets/{id}', allow: management, scope: 'config:read', path: (i) => `/v1/change_sets/${i.changeSet}` },
  {
    name: 'POST change_set_applications',
    method: 'POST',
    openapi: '/v1/change_set_applications',
    allow: management,
    scope: 'config:write',
    path: () => '/v1/change_set_applications',
    body: (i) => ({ change_set_id: i.changeSet }),
    idempotent: true,
  },
  {
    name: 'POST change set confirm',
    method: 'POST',
    openapi: '/v1/change_sets/{id}/confirm',
    allow: ['session'],
    scope: 'config:write',
    path: (i) => `/v1/change_sets/${i.changeSet}/confirm`,
    body: () => ({}),
    idempotent: true,
  },
  { name: 'GET match profile', method: 'GET', openapi: '/v1/match_profiles/{id}', allow: management, scope: 'programs:read', path: (i) => `/v1/match_profiles/${i.matchProfile}` },
  { name: 'GET match result', method: 'GET', openapi: '/v1/match_results/{id}', allow: management, scope: 'events:read', path: (i) => `/v1/match_results/${i.matchResult}` },
  { name: 'GET match result by match_id', method: 'GET', openapi: '/v1/match_results/{id}', allow: management, scope: 'events:read', path: (i) => `/v1/match_results/${i.matchId}` },
  {
    name: 'POST match_results (customer id)',
    method: 'POST',
    openapi: '/v1/match_results',
    allow: ['secret'],
    scope: 'events:write',
    path: () => '/v1/match_results',
    body: (i, n) => ({
      profile: 'iso',
      match_id: `iso-${process.pid}-${n}`,
      started_at: new Date(Date.now() - 20 * 60_000).toISOString(),
      ended_at: new Date(Date.now() - 10 * 60_000).toISOString(),
      players: [{ customer: { id: i.customer }, metrics: { score: 1 } }],
    }),
  },
  {
    name: 'POST match player review',
    method: 'POST',
    openapi: '/v1/match_result_players/{id}/reviews',
    allow: management,
    scope: 'programs:write',
    path: (i) => `/v1/match_result_players/${i.matchPlayer}/reviews`,
    body: () => ({ decision: 'reject', reason: 'hijacked' }),
    idempotent: true,
  },
  { name: 'DELETE customer', method: 'DELETE', openapi: '/v1/customers/{id}', allow: management, scope: 'customers:write', path: (i) => `/v1/customers/${i.customer}` },
  {
    name: 'DELETE segment member',
    method: 'DELETE',
    openapi: '/v1/segments/{id}/members/{customer_id}',
    allow: management,
    scope: 'customers:write',
    path: (i) => `/v1/segments/${i.segment}/members/${i.customer}`,
  },
  { name: 'DELETE segment', method: 'DELETE', openapi: '/v1/segments/{id}', allow: management, scope: 'programs:write', path: (i) => `/v1/segments/${i.segment}` },
  { name: 'DELETE campaign', method: 'DELETE', openapi: '/v1/campaigns/{id}', allow: management, scope: 'programs:write', path: (i) => `/v1/campaigns/${i.campaign}` },
  { name: 'DELETE membership', method: 'DELETE', openapi: '/v1/organizations/{id}/memberships/{user_id}', allow: ['pat', 'session'], scope: null, path: (i) => `/v1/organizations/${i.organization}/memberships/${i.member}`, organizationScoped: true },
];

/** Ids that exist nowhere: the control every refusal is compared with. */
const nowhere: Ids = {
  customer: 'cust_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ',
  eventCustomer: 'cust_000ZZZZZZZZZZZZZZZZZZZZZZZZZY',
  externalId: 'nobody-anywhere',
  event: 'evt_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ',
  key: 'key_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ',
  tierProgram: 'tp_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ',
  rule: 'rule_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ',
  challenge: 'chl_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ',
  counter: 'ctr_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ',
  organization: 'org_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ',
  member: 'usr_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ',
  reward: 'rw_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ',
  issuance: 'rwi_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ',
  changeSet: 'cs_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ',
  matchProfile: 'mpf_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ',
  matchResult: 'mr_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ',
  matchId: 'no-such-match-anywhere',
  matchPlayer: 'mrp_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ',
  segment: 'seg_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ',
  campaign: 'cmp_000ZZZZZZZZZZZZZZZZZZZZZZZZZZ',
};

const now = () => new Date(Date.now() - 1000).toISOString();

const isoProfile = (key: string) => ({
  type: 'match_profile.create',
  key,
  metrics: [{ key: 'score', minimum: 0, maximum: 100 }],
  outliers: { action: 'hold', hold_metrics: [{ key: 'score', above: 50 }] },
});

async function applyCommands(server: Client, commands: unknown[]): Promise<void> {
  const cs = await server.post('/v1/change_sets', { commands }, idem());
  if (cs.status !== 201) throw new Error(`change set: ${cs.status} ${JSON.stringify(cs.body)}`);
  const ap = await server.post('/v1/change_set_applications', { change_set_id: cs.body.id }, idem());
  if (ap.status !== 201) throw new Error(`apply: ${ap.status} ${JSON.stringify(ap.body)}`);
}

t.test('tenant isolation', async (t) => {
  const { anon } = await startForTest(t);
  const a = await signUp(anon);
  const b = await signUp(anon);

  async function key(tenant: Tenant, env: string, body: Record<string, unknown>): Promise<{ id: string; token: string }> {
    const admin = anon.with({ authorization: `Bearer ${tenant.pat}`, 'x-service-environment': env });
    const r = await admin.post('/v1/api_keys', body, idem());
    if (r.status !== 201) throw new Error(`key: ${r.status} ${JSON.stringify(r.body)}`);
    return { id: r.body.id, token: r.body.token };
  }
  const bearer = (token: string, extra: Record<string, string> = {}) => anon.with({ authorization: `Bearer ${token}`, ...extra });
  const secretScopes = new Set(allScopes.filter((s) => s !== 'customer_sessions:write'));

  /** The credentials of one tenant acting in one environment. */
  async function credentials(tenant: Tenant, env: string, label: string): Promise<{ creds: Cred[]; server: Client }> {
    const secret = await key(tenant, env, { kind: 'secret', name: `${label} server` });
    const minterScopes = ['customer_sessions:write', 'customers:read'];
    const minter = await key(tenant, env, { kind: 'secret', name: `${label} minter`, scopes: minterScopes });
    const publishable = await key(tenant, env, { kind: 'publishable', name: `${label} web`, allowed_events: ['app.opened'] });
    const server = bearer(secret.token);
    await applyCommands(server, [isoProfile('iso')]);
    const own = await server.post('/v1/customers', { external_id: `${label}-own-customer` }, idem());
    if (own.status !== 201) throw new Error(`customer: ${own.status} ${JSON.stringify(own.body)}`);
    const minted = await bearer(minter.token).post(`/v1/customers/${own.body.id}/client_token`, {});
    if (minted.status !== 200) throw new Error(`client_token: ${minted.status} ${JSON.stringify(minted.body)}`);
    return {
      server,
      creds: [
        { name: `${label} secret key`, kind: 'secret', scopes: secretScopes, client: server },
        { name: `${label} secret key (minter)`, kind: 'secret', scopes: new Set(minterScopes), client: bearer(minter.token) },
        { name: `${label} publishable key`, kind: 'publishable', scopes: new Set(['events:write']), client: bearer(publishable.token) },
        { name: `${label} PAT`, kind: 'pat', scopes: new Set(allScopes), client: bearer(tenant.pat, { 'x-service-environment': env }) },
        { name: `${label} customer token`, kind: 'customer', scopes: new Set(customerTokenScopes), client: bearer(minted.body.customer_token) },
      ],
    };
  }

  /** Tenant A's resources in one environment: customers (direct and via an event), an alias, an event, a key. */
  async function resources(tenant: Tenant, env: string, label: string): Promise<Ids> {
    const { id: keyId, token } = await key(tenant, env, { kind: 'secret', name: `${label} resources` });
    const server = bearer(token);
    const externalId = `${label}-customer-1`;
    const c = await server.post('/v1/customers', { external_id: externalId, attributes: { tier: 'gold', email: `${label}@a.example` } }, idem());
    t.equal(c.status, 201, `${label}: customer created`);
    const al = await server.post(`/v1/customers/${c.body.id}/aliases`, { alias: `${label}-alias-1` }, idem());
    t.equal(al.status, 201, `${label}: alias added`);
    const ev = await server.post('/v1/events', { id: `${label}-e-1`, name: 'app.opened', customer_id: `${label}-event-customer`, occurred_at: now() });
    t.equal(ev.status, 202, `${label}: event accepted`);
    const ec = await server.get(`/v1/customers?external_id=${label}-event-customer`);
    t.equal(ec.body.data.length, 1, `${label}: event created its customer`);
    const cur = await server.post('/v1/currencies', { key: 'coins', name: 'Coins' }, idem());
    t.equal(cur.status, 201, `${label}: currency created`);
    const tp = await server.post(
      '/v1/tier_programs',
      { key: 'status', name: 'Status', currency: 'coins', basis: 'lifetime_earned', levels: [{ key: 'bronze', title: 'Bronze', threshold: 0 }, { key: 'silver', title: 'Silver', threshold: 100 }] },
      idem(),
    );
    t.equal(tp.status, 201, `${label}: tier program created`);
    const rule = await server.post(
      '/v1/rules',
      { name: 'welcome', definition: { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: 'app.opened' }, actions: [{ type: 'points.award', currency: 'coins', amount: 10 }] } },
      idem(),
    );
    t.equal(rule.status, 201, `${label}: rule created`);
    t.equal((await server.post(`/v1/rules/${rule.body.id}/publish`, {})).status, 200, `${label}: rule published`);
    const challenge = await server.post(
      '/v1/challenges',
      { name: 'matches', qualifying: { event: 'match.completed' }, target: 3, contribution_key: 'event.properties.match_id', status: 'draft' },
      idem(),
    );
    t.equal(challenge.status, 201, `${label}: challenge created`);
    const enrolled = await server.post(`/v1/challenges/${challenge.body.id}/enrollments`, { customer_id: c.body.id });
    t.equal(enrolled.status, 201, `${label}: customer enrolled`);
    const ctr = await server.post('/v1/counter_definitions', { name: 'opens', event: 'app.opened', window: { kind: 'lifetime' } }, idem());
    t.equal(ctr.status, 201, `${label}: counter definition created`);
    const members = await bearer(tenant.pat).get(`/v1/organizations/${tenant.orgId}/memberships`);
    t.equal(members.status, 200, `${label}: members listed`);
    const reward = await server.post('/v1/rewards', { name: 'Mug', cost: 0, currency: 'coins', availability: 5 }, idem());
    t.equal(reward.status, 201, `${label}: reward created`);
    const issuance = await server.post('/v1/reward_issuances', { reward_id: reward.body.id, customer_id: c.body.id }, idem());
    t.equal(issuance.status, 201, `${label}: reward issued`);
    const profileKey = `${label}-profile`;
    await applyCommands(server, [isoProfile(profileKey)]);
    const profile = await server.get(`/v1/match_profiles/${profileKey}`);
    t.equal(profile.status, 200, `${label}: match profile created`);
    const cs = await server.post('/v1/change_sets', { commands: [isoProfile(`${label}-pending`)] }, idem());
    t.equal(cs.status, 201, `${label}: change set stored`);
    const matchId = `${label}-match-1`;
    const mr = await server.post('/v1/match_results', {
      profile: profileKey,
      match_id: matchId,
      started_at: new Date(Date.now() - 20 * 60_000).toISOString(),
      ended_at: new Date(Date.now() - 10 * 60_000).toISOString(),
      players: [{ customer: { id: c.body.id }, metrics: { score: 99 } }],
    });
    t.equal(mr.status, 201, `${label}: match reported`);
    t.equal(mr.body.players[0].status, 'held', `${label}: player held`);
    const seg = await server.post('/v1/segments', { name: 'vip', kind: 'static' }, idem());
    t.equal(seg.status, 201, `${label}: segment created`);
    t.equal((await server.post(`/v1/segments/${seg.body.id}/members`, { customer_id: c.body.id }, idem())).status, 201, `${label}: member added`);
    const cmp = await server.post('/v1/campaigns', { name: 'Spring', audience_segment: 'vip', budgets: [{ currency: 'coins', amount: 500 }] }, idem());
    t.equal(cmp.status, 201, `${label}: campaign created`);
    return {
      customer: c.body.id,
      eventCustomer: ec.body.data[0].id,
      externalId,
      event: ev.body.id,
      key: keyId,
      tierProgram: tp.body.id,
      rule: rule.body.id,
      challenge: challenge.body.id,
      counter: ctr.body.id,
      organization: tenant.orgId,
      member: members.body.data[0].user_id,
      reward: reward.body.id,
      issuance: issuance.body.id,
      changeSet: cs.body.id,
      matchProfile: profile.body.id,
      matchResult: mr.body.id,
      matchId,
      matchPlayer: mr.body.players[0].id,
      segment: seg.body.id,
      campaign: cmp.body.id,
    };
  }

  const aTest = await resources(a, a.testEnv, 'a-test');
  const aLive = await resources(a, a.liveEnv, 'a-live');
  const bTest = await credentials(b, b.testEnv, 'B test');
  const bLive = await credentials(b, b.liveEnv, 'B live');
  const aLiveCreds = await credentials(a, a.liveEnv, 'A live');
  const aTestCreds = await credentials(a, a.testEnv, 'A test');
  // B's credentials naming A's environment: keys are bound (the header is ignored); a PAT is refused.
  const bSecretToken = (bTest.creds[0]!.client.headers.authorization ?? '').slice('Bearer '.length);
  const crossHeader: Cred[] = [
    { name: 'B secret key + A env header', kind: 'secret', scopes: secretScopes, client: bearer(bSecretToken, { 'x-service-environment': a.testEnv }) },
  ];

  // Every route of the service that takes an id (path or body) must be a row of the matrix.
  await t.test('the matrix covers every id-taking route in /v1/openapi.json', async (t) => {
    const doc = (await anon.get('/v1/openapi.json')).body as { paths: Record<string, Record<string, unknown>> };
    const covered = new Set(routes.map((r) => `${r.method} ${r.openapi}`));
    for (const [path, ops] of Object.entries(doc.paths)) {
      if (!path.includes('{')) continue;
      for (const method of Object.keys(ops)) {
        t.ok(covered.has(`${method.toUpperCase()} ${path}`), `${method.toUpperCase()} ${path} is in the matrix`);
      }
    }
  });

  const summary: string[] = [];
  let n = 0;

  /**
   * One assertion per cell. Callable (kind allowed, scope held): 404 resource_not_found. Not callable:
   * the same answer as for ids that exist nowhere, and a refusal. Never the victim's data.
   */
  async function matrix(t: Test, label: string, creds: Cred[], ids: Ids, secrets: string[], sameTenant = false) {
    const rows: string[] = [];
    for (const r of routes) {
      if (sameTenant && r.organizationScoped) continue;
      const cells: string[] = [];
      for (const c of creds) {
        const send = async (target: Ids) => {
          const headers = r.idempotent ? idem() : {};
          const body = r.body?.(target, ++n);
          const res = await c.client.request(r.method, r.path(target), body, headers);
          return res;
        };
        const res = await send(ids);
        const control = await send(nowhere);
        const text = JSON.stringify(res.body ?? '');
        const leaked = secrets.filter((s) => text.includes(s));
        const callable = r.allow.includes(c.kind) && (r.scope === null || [r.scope].flat().every((s) => c.scopes.has(s)));
        const got = { status: res.status, code: res.body?.error?.code ?? null, leaked };
        const want = callable
          ? { status: 404, code: 'resource_not_found', leaked: [] }
          : { status: control.status, code: control.body?.error?.code ?? null, leaked: [] };
        const ok = callable ? t.same(got, want, `${label}: ${r.name} as ${c.name} -> 404 resource_not_found`)
          : t.same(got, want, `${label}: ${r.name} as ${c.name} (not callable) -> same refusal as an unknown id (${want.status} ${want.code})`);
        if (!callable) t.ok(res.status === 401 || res.status === 403, `${label}: ${r.name} as ${c.name} is refused, not answered`);
        cells.push(`${ok ? '' : '!'}${res.status}${callable ? '' : '*'}`);
      }
      rows.push(`${r.name.padEnd(36)} ${cells.map((s) => s.padStart(5)).join(' ')}`);
    }
    summary.push(`${label}\n${''.padEnd(36)} ${creds.map((c) => c.name.replace(/^[AB] (test|live) /, '').slice(0, 5).padStart(5)).join(' ')}\n${rows.join('\n')}`);
  }

  const aSecrets = (ids: Ids) => [ids.customer, ids.eventCustomer, ids.externalId, ids.event, 'gold', '@a.example'];

  await t.test("B's test credentials x A's test ids", (t) => matrix(t, "B test -> A test", [...bTest.creds, ...crossHeader], aTest, aSecrets(aTest)));
  await t.test("B's test credentials x A's live ids", (t) => matrix(t, "B test -> A live", bTest.creds, aLive, aSecrets(aLive)));
  await t.test("B's live credentials x A's test ids", (t) => matrix(t, "B live -> A test", bLive.creds, aTest, aSecrets(aTest)));
  await t.test("A's live credentials x A's test ids", (t) => matrix(t, "A live -> A test", aLiveCreds.creds, aTest, aSecrets(aTest), true));
  await t.test("A's test credentials x A's live ids", (t) => matrix(t, "A test -> A live", aTestCreds.creds, aLive, aSecrets(aLive), true));

  await t.test("a PAT naming another tenant's environment is 404 resource_not_found", async (t) => {
    const bPatInA = bearer(b.pat, { 'x-service-environment': a.testEnv });
    for (const [method, path] of [
      ['GET', `/v1/customers/${aTest.customer}`],
      ['GET', '/v1/customers'],
      ['GET', `/v1/events/${aTest.event}`],
      ['GET', '/v1/api_keys'],
      ['POST', `/v1/api_keys/${aTest.key}/revoke`],
    ] as const) {
      const r = await bPatInA.request(method, path, method === 'POST' ? {} : undefined);
      t.same({ status: r.status, code: r.body?.error?.code }, { status: 404, code: 'resource_not_found' }, `${method} ${path}`);
    }
    const create = await bPatInA.post('/v1/api_keys', { kind: 'secret', name: 'intruder' }, idem());
    t.same({ status: create.status, code: create.body?.error?.code }, { status: 404, code: 'resource_not_found' }, 'POST /v1/api_keys');
  });

  await t.test("B's own segments, campaigns and rules cannot reach A's customers, campaigns or segments", async (t) => {
    const server = bTest.server;
    const seg = await server.post('/v1/segments', { name: 'b-vip', kind: 'static' }, idem());
    t.equal(seg.status, 201);
    for (const ref of [aTest.customer, aTest.eventCustomer, aTest.externalId]) {
      const r = await server.post(`/v1/segments/${seg.body.id}/members`, { customer_id: ref }, idem());
      t.same({ status: r.status, code: r.body?.error?.code }, { status: 404, code: 'resource_not_found' }, `B's segment + A's customer ${ref}`);
      const d = await server.delete(`/v1/segments/${seg.body.id}/members/${ref}`);
      t.same({ status: d.status, code: d.body?.error?.code }, { status: 404, code: 'resource_not_found' }, `remove A's customer ${ref} from B's segment`);
    }
    t.same((await server.get(`/v1/segments/${seg.body.id}/members`)).body.data, [], "A's customers are not B's members");
    const rule = await server.post(
      '/v1/rules',
      { name: 'r', campaign_id: aTest.campaign, definition: { schema: 'service.rule/v2', trigger: { kind: 'customer_event', event: 'app.opened' }, actions: [{ type: 'tier.evaluate' }] } },
      idem(),
    );
    t.match(rule.body.error, { code: 'resource_not_found', param: 'campaign_id' }, "a rule cannot join A's campaign");
    const cmp = await server.post('/v1/campaigns', { name: 'x', audience_segment: 'vip' }, idem());
    t.match(cmp.body.error, { code: 'resource_not_found', param: 'audience_segment' }, "A's segment names are not B's");
    const a = await aTestCreds.server.get(`/v1/segments/${aTest.segment}/members`);
    t.same(a.body.data.map((m: { customer_id: string }) => m.customer_id), [aTest.customer], "A's segment still has exactly A's member");
    const ac = await aTestCreds.server.get(`/v1/campaigns/${aTest.campaign}`);
    t.match(ac.body, { name: 'Spring', status: 'draft', version: 1 }, "A's campaign unchanged");
  });

  await t.test("a replayed refusal for A's id is the stored 404, unchanged", async (t) => {
    const minter = bTest.creds[1]!.client;
    const key = idem();
    const body = { grant_type: 'secret_key', customer_id: aTest.customer };
    const first = await minter.post('/v1/customer_sessions', body, key);
    const again = await minter.post('/v1/customer_sessions', body, key);
    t.equal(first.status, 404);
    t.equal(again.status, 404);
    t.equal(again.headers.get('idempotent-replayed'), 'true', 'answered from the stored result');
    t.same(again.body, first.body, 'the replay is the stored error body, with no customer_token added');
  });

  await t.test("lookups by A's external ids and aliases return an empty page to B", async (t) => {
    const readers = bTest.creds.filter((c) => c.kind === 'secret' || c.kind === 'pat');
    for (const c of [...readers, ...aLiveCreds.creds.filter((c) => c.kind === 'secret' || c.kind === 'pat')]) {
      for (const ext of [aTest.externalId, 'a-test-event-customer', 'a-test-alias-1']) {
        const r = await c.client.get(`/v1/customers?external_id=${encodeURIComponent(ext)}`);
        t.same(r.body, { data: [], next_cursor: null, has_more: false }, `${c.name}: ?external_id=${ext} is an empty page`);
      }
    }
  });

  await t.test("B's lists never contain A's ids", async (t) => {
    const aIds = [aTest.customer, aTest.eventCustomer, aTest.key, aLive.customer, aLive.eventCustomer, aLive.key, a.orgId];
    const pages: Array<[string, Client, string]> = [
      ['customers (secret key)', bTest.server, '/v1/customers?limit=200'],
      ['customers (PAT)', bTest.creds[3]!.client, '/v1/customers?limit=200'],
      ['api_keys (PAT)', bTest.creds[3]!.client, '/v1/api_keys?limit=200'],
      ['organizations (PAT)', bearer(b.pat), '/v1/organizations?limit=200'],
    ];
    for (const [name, client, path] of pages) {
      const r = await client.get(path);
      t.equal(r.status, 200, `${name}: 200`);
      const text = JSON.stringify(r.body);
      t.same(aIds.filter((id) => text.includes(id)), [], `${name}: no id of A`);
      t.ok(r.body.data.length > 0, `${name}: lists B's own`);
    }
  });

  await t.test("B's reward and issuance lists never show A's", async (t) => {
    for (const [name, client] of [['secret key', bTest.server], ['PAT', bTest.creds[3]!.client]] as const) {
      for (const path of ['/v1/rewards?limit=200', '/v1/reward_issuances?limit=200', `/v1/reward_issuances?customer_id=${aTest.externalId}`]) {
        const r = await client.get(path);
        t.same(r.body, { data: [], next_cursor: null, has_more: false }, `${name}: ${path} is an empty page`);
      }
    }
  });

  await t.test("the same external id in two tenants is two customers; B's event never reaches A's customer", async (t) => {
    const r = await bTest.server.post('/v1/events', { id: 'a-test-e-1', name: 'app.opened', customer_id: aTest.externalId, occurred_at: now() });
    t.equal(r.status, 202, "B may send an event for an external id that A also uses");
    t.not(r.body.id, aTest.event, 'B gets its own service event id');
    t.not(r.body.duplicate, true, "A's event id is not B's duplicate");
    const mine = await bTest.server.get(`/v1/customers?external_id=${aTest.externalId}`);
    t.equal(mine.body.data.length, 1);
    t.not(mine.body.data[0].id, aTest.customer, 'a different customer');
  });

  await t.test("nothing B tried changed A's resources", async (t) => {
    const aServer = aTestCreds.server;
    const c = await aServer.get(`/v1/customers/${aTest.customer}`);
    t.equal(c.status, 200, "A's customer still exists");
    t.match(c.body, { id: aTest.customer, external_id: aTest.externalId, version: 1, attributes: { tier: 'gold' }, deleted_at: null });
    const st = await aServer.get(`/v1/customers/${aTest.customer}/state`);
    t.same(st.body.aliases.map((x: { alias: string }) => x.alias), ['a-test-alias-1'], 'aliases unchanged');
    const ex = await aServer.get(`/v1/customers/${aTest.eventCustomer}/export`);
    t.equal(ex.body.events.length, 1, "A's export holds only A's event");
    const keys = await anon.with({ authorization: `Bearer ${a.pat}`, 'x-service-environment': a.testEnv }).get('/v1/api_keys?limit=200');
    const k = keys.body.data.find((x: { id: string }) => x.id === aTest.key);
    t.equal(k?.revoked_at, null, "A's key is not revoked");
    const rw = await aServer.get(`/v1/rewards/${aTest.reward}`);
    t.match(rw.body, { status: 'active', availability: 5, issued: 1, version: 1 }, "A's reward unchanged (no archive, edit or issuance by B)");
    const iss = await aServer.get(`/v1/reward_issuances/${aTest.issuance}`);
    t.match(iss.body, { status: 'issued', version: 1 }, "A's issuance neither redeemed nor cancelled");
    const chl = await aServer.get(`/v1/challenges/${aTest.challenge}`);
    t.match(chl.body, { name: 'matches', status: 'draft', version: 1 }, "A's challenge unchanged");
    const enrolled = await aServer.get(`/v1/challenges/${aTest.challenge}/enrollments`);
    t.same(enrolled.body.data.map((e: { customer_id: string }) => e.customer_id), [aTest.customer], "A's enrollment kept");
    const ctr = await aServer.get(`/v1/counter_definitions/${aTest.counter}`);
    t.match(ctr.body, { id: aTest.counter, status: 'backfilling', version: 1 }, "A's counter is neither deleted nor backfilled");
    const live = await aLiveCreds.server.get(`/v1/customers/${aLive.customer}`);
    t.match(live.body, { id: aLive.customer, version: 1, deleted_at: null }, "A's live customer unchanged");
    const cs = await aServer.get(`/v1/change_sets/${aTest.changeSet}`);
    t.equal(cs.body.status, 'pending', "A's change set was not applied");
    const mr = await aServer.get(`/v1/match_results/${aTest.matchResult}`);
    t.match(mr.body, { status: 'held', players: [{ id: aTest.matchPlayer, status: 'held', review: null }] }, "A's held player was not reviewed");
  });

  t.comment(`isolation matrix (status per cell; * = kind or scope may not call the route, compared with an unknown id; ! = failed)\n${summary.join('\n\n')}`);
});
