// TenancyService: signup, OIDC sessions, organizations (with their default project and the test and
// live environments), and API keys, over the SQL catalog. Returns wire-shaped records (snake_case,
// RFC 3339) because its only callers are the gateway handlers. Invariants: a token is returned once
// and stored only as its sha256; every multi-row change is one transaction; keys are managed only by
// an admin or owner acting through a management credential, by the role held now (not the cached
// one). Never trusts a body field for identity: a signup's email is unproven until the first
// sign-in with an ID token for it, which revokes the PATs issued before (see createSession).
import { IANAZone } from 'luxon';
import type { Config } from '../config.js';
import { ApiError } from '../errors/api-error.js';
import type { Page, PageRequest } from '../gateway/pagination.js';
import { toPage } from '../gateway/pagination.js';
import { newId } from '../ids.js';
import { limits } from '../limits.js';
import type { Bus } from '../persistence/ports.js';
import { createOncePerCall, recordCreate } from '../persistence/sql/create-calls.js';
import type { Sql, Tx } from '../persistence/sql/db.js';
import { CustomerTokens, type MintCustomerToken } from './customer-tokens.js';
import { type OidcOptions, OidcVerifier, oidcOptionsFromConfig } from './oidc.js';
import { defaultSecretKeyScopes, effectiveScopes, isScope, publishableKeyScopes, roleRank } from './roles.js';
import { hashToken, newToken, revocationChannel, tokenHint } from './tokens.js';
import { allScopes, type Principal, type Role, type Scope } from './types.js';

export interface TenancyOptions {
  signupEnabled: boolean;
  oidc?: OidcOptions;
  /** Revocations are published here; every node's Authenticator listens. */
  bus?: Bus;
  /** Real clock by default; session expiry and ID-token checks use it. */
  now?: () => number;
  customerTokens?: CustomerTokens;
}

export function tenancyOptionsFromConfig(config: Config, bus?: Bus): TenancyOptions {
  return { signupEnabled: config.SIGNUP_ENABLED, oidc: oidcOptionsFromConfig(config), bus };
}

// ---- wire records ----

export interface UserRecord {
  id: string;
  email: string;
  name: string | null;
  created_at: string;
}
export interface OrganizationRef {
  id: string;
  name: string;
  slug: string;
}
export interface OrganizationListing extends OrganizationRef {
  plan: { id: string; version: number };
  billing_mode: 'card' | 'invoice' | 'none';
  ai_drafting_disabled: boolean;
  version: number;
  created_at: string;
  updated_at: string;
}
export interface ProjectRecord {
  id: string;
  name: string;
}
export interface EnvironmentRecord {
  id: string;
  name: string;
  runtime_class: 'test' | 'live';
}
/** An environment as GET /organizations/{id}/environments lists it: the signup's shape and its project. */
export interface EnvironmentListing extends EnvironmentRecord {
  project_id: string;
}
export interface MembershipRecord {
  organization_id: string;
  user_id: string;
  email: string;
  role: Role;
  created_at: string;
}
export interface ApiKeyRecord {
  id: string;
  kind: 'secret' | 'publishable';
  name: string;
  token_hint: string;
  scopes: Scope[];
  allowed_events: string[];
  allowed_origins: string[];
  environment_id: string;
  created_at: string;
  revoked_at: string | null;
}
export interface CreatedApiKey extends ApiKeyRecord {
  token: string;
}
/**
 * What a create under a call id answers: a run again of it answers the key the first run created
 * with token null (shown once, by the first run; a secret is never made again or derived).
 */
export interface ApiKeyAnswer extends ApiKeyRecord {
  token: string | null;
}
export interface TenantCreated {
  organization: OrganizationRef;
  project: ProjectRecord;
  environments: EnvironmentRecord[];
}
export interface SignupResult extends TenantCreated {
  user: UserRecord;
  token: { id: string; token: string; scopes: Scope[] };
}
/** What a signup under a call id answers: a run again of it, the first run's account with token.token null. */
export interface SignupAnswer extends TenantCreated {
  user: UserRecord;
  token: { id: string; token: string | null; scopes: Scope[] };
}
export interface SessionResult {
  user: UserRecord;
  created: boolean;
  memberships: MembershipRecord[];
  token: { id: string; token: string; scopes: Scope[]; expires_at: string };
}

export interface SignupInput {
  email: string;
  name?: string | undefined;
  organization_name: string;
  timezone: string;
}
export interface CreateApiKeyInput {
  kind: 'secret' | 'publishable';
  name: string;
  scopes?: string[] | undefined;
  allowed_events?: string[] | undefined;
  allowed_origins?: string[] | undefined;
}

type Row = Record<string, unknown>;

const iso = (v: unknown): string => (v instanceof Date ? v : new Date(String(v))).toISOString();
const isoOrNull = (v: unknown): string | null => (v === null || v === undefined ? null : iso(v));

function userRecord(r: Row): UserRecord {
  return {
    id: r.id as string,
    email: r.email as string,
    name: (r.name as string | null) ?? null,
    created_at: iso(r.created_at),
  };
}

function apiKeyRecord(r: Row): ApiKeyRecord {
  return {
    id: r.id as string,
    kind: r.kind as 'secret' | 'publishable',
    name: (r.name as string | null) ?? '',
    token_hint: r.token_hint as string,
    scopes: (r.scopes as string[]).filter(isScope),
    allowed_events: r.allowed_events as string[],
    allowed_origins: r.allowed_origins as string[],
    environment_id: r.environment_id as string,
    created_at: iso(r.created_at),
    revoked_at: isoOrNull(r.revoked_at),
  };
}

function organizationListing(r: Row): OrganizationListing {
  return {
    id: r.id as string,
    name: r.name as string,
    slug: r.slug as string,
    plan: { id: r.plan_id as string, version: Number(r.plan_version) },
    billing_mode: r.billing_mode as OrganizationListing['billing_mode'],
    ai_drafting_disabled: r.ai_drafting_disabled as boolean,
    version: Number(r.version),
    created_at: iso(r.created_at),
    updated_at: iso(r.updated_at),
  };
}

// ---- checks ----

export function validateTimezone(timezone: string): void {
  if (!IANAZone.isValidZone(timezone)) {
    throw new ApiError('validation_failed', {
      param: 'timezone',
      message: 'timezone must be an IANA time zone name such as "Europe/Berlin" or "UTC".',
    });
  }
}

/** Mail addresses compare case-insensitively in practice; we store and match them lower-cased. */
export function normalizeEmail(email: string): string {
  return email.trim().toLowerCase();
}

/** "Acme, Inc." -> "acme-inc"; never empty, at most 48 characters so a suffix still fits. */
export function slugify(name: string): string {
  const base = name
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 48)
    .replace(/-+$/g, '');
  return base.length > 0 ? base : 'org';
}

function isManagement(p: Principal): boolean {
  return (p.kind === 'pat' || p.kind === 'session') && p.userId !== null;
}

function requireManagement(p: Principal): string {
  if (!isManagement(p)) {
    throw new ApiError('forbidden', { message: 'Only a personal access token or a session may do this.' });
  }
  return p.userId!;
}

/** The environment the management caller acts in; the Authenticator guarantees role is set with it. */
function requireEnvironment(p: Principal): { environmentId: string; organizationId: string; role: Role } {
  requireManagement(p);
  if (p.environment === null || p.role === null) throw new ApiError('environment_required');
  return { environmentId: p.environment.id, organizationId: p.environment.organizationId, role: p.role };
}

/**
 * The role the user holds now in the organization (an effective membership, read from the table,
 * never from the credential cache), or null. For routes whose effect outlasts the request (API
 * keys, confirmations, settings). Inside a transaction the membership row stays locked until it
 * ends, so a concurrent removal or demotion either waits for it or is seen by it (API keys).
 * Outside one (change-set confirmation and the autonomy setting read it just before their own
 * write) the lock ends with the statement: a removal in between is not seen, a window of
 * milliseconds instead of the credential cache's 60 s.
 */
export async function roleNow(q: Sql | Tx, organizationId: string, userId: string): Promise<Role | null> {
  const row = (
    await q`
    select role from memberships
    where organization_id = ${organizationId} and user_id = ${userId} and not pending
    for share`
  )[0];
  return row === undefined ? null : (row.role as Role);
}

const notKeyAdmin = () => new ApiError('forbidden', { message: 'Only an admin or owner manages API keys.' });

/** The early check, on the role cached with the credential; keyAdminScopesNow decides. */
function requireKeyAdmin(p: Principal): { environmentId: string; organizationId: string; role: Role } {
  const ctx = requireEnvironment(p);
  if (roleRank[ctx.role] < roleRank.admin) throw notKeyAdmin();
  return ctx;
}

/**
 * Inside the key change's transaction: the caller's role now (a removed or demoted admin is refused
 * at once, not after the credential cache's 60 s) and the scopes it may hand out under that role.
 */
async function keyAdminScopesNow(tx: Tx, p: Principal, organizationId: string): Promise<ReadonlySet<Scope>> {
  // The organization's row first, as role changes and removals lock it before the membership:
  // one lock order, so a key change racing them waits instead of deadlocking (the credential's
  // foreign key would take the organization's row after the membership's otherwise).
  await tx`select 1 from organizations where id = ${organizationId} for share`;
  const role = await roleNow(tx, organizationId, p.userId!);
  if (role === null) {
    throw new ApiError('resource_not_found', { message: 'No environment with this id in an organization you belong to.' });
  }
  if (roleRank[role] < roleRank.admin) throw notKeyAdmin();
  return effectiveScopes([...p.scopes], role);
}

/**
 * Nobody hands out more than they hold now: a role without customer_sessions:write cannot mint a
 * key that can (keyAdminScopesNow first: the caller is an admin or owner now). Secret keys never
 * reach here (requireKeyAdmin).
 */
async function grantableNow(tx: Tx, p: Principal, organizationId: string, scopes: readonly Scope[]): Promise<void> {
  const held = await keyAdminScopesNow(tx, p, organizationId);
  const missing = scopes.filter((s) => !held.has(s));
  if (missing.length > 0) {
    throw new ApiError('insufficient_scope', {
      param: 'scopes',
      message: `Your role cannot grant: ${missing.join(', ')}.`,
    });
  }
}

function validOrigin(origin: string): boolean {
  try {
    const u = new URL(origin);
    return (u.protocol === 'https:' || u.protocol === 'http:') && u.origin === origin;
  } catch {
    return false;
  }
}

const allowedEventsMax = 100;
const allowedOriginsMax = 20;

/** Canonical order (the allScopes table) and no duplicates, so equal grants compare equal. */
function canonicalScopes(scopes: Iterable<Scope>): Scope[] {
  const set = new Set(scopes);
  return allScopes.filter((s) => set.has(s));
}

export class TenancyService {
  private readonly oidc: OidcVerifier | null;
  private readonly now: () => number;
  readonly customerTokens: CustomerTokens;

  constructor(
    private readonly sql: Sql,
    private readonly opts: TenancyOptions,
  ) {
    this.oidc = opts.oidc ? new OidcVerifier(opts.oidc) : null;
    this.now = opts.now ?? Date.now;
    this.customerTokens = opts.customerTokens ?? new CustomerTokens(sql, this.now);
  }

  /**
   * `callId`: the request's (an Idempotency-Key's); a run again of it answers the account it
   * created (not already_exists), with the PAT's token null.
   */
  async signup(input: SignupInput): Promise<SignupResult>;
  async signup(input: SignupInput, callId: string | undefined): Promise<SignupResult | SignupAnswer>;
  async signup(input: SignupInput, callId?: string): Promise<SignupResult | SignupAnswer> {
    if (!this.opts.signupEnabled) {
      throw new ApiError('forbidden', { message: 'Sign-up is turned off on this deployment.' });
    }
    validateTimezone(input.timezone);
    const email = normalizeEmail(input.email);
    const found = async (patId: string): Promise<SignupAnswer> => {
      const pats = await this.sql`select user_id, organization_id, scopes from credentials where id = ${patId} and kind = 'pat'`;
      if (pats.length === 0) throw new ApiError('resource_not_found', { message: `No personal access token ${patId}.` });
      const pat = pats[0]!;
      const users = await this.sql`select id, email, name, created_at from users where id = ${pat.user_id as string}`;
      if (users.length === 0) throw new ApiError('resource_not_found', { message: `No user ${pat.user_id as string}.` });
      const tenant = await this.tenantOf(pat.organization_id as string);
      return { user: userRecord(users[0]!), ...tenant, token: { id: patId, token: null, scopes: (pat.scopes as string[]).filter(isScope) } };
    };
    return createOncePerCall(this.sql, callId, found, () => this.signupOnce(email, input, callId));
  }

  private async signupOnce(email: string, input: SignupInput, callId: string | undefined): Promise<SignupResult> {
    const id = newId('pat');
    return this.sql.begin(async (tx) => {
      await recordCreate(tx, callId, id);
      // Unproven: anyone may type any address (the row is marked by origin and a null email_verified_at).
      const users = await tx`
        insert into users (id, email, name, origin) values (${newId('usr')}, ${email}, ${input.name ?? null}, 'signup')
        on conflict (email) do nothing
        returning id, email, name, created_at`;
      const userRow = users[0];
      if (userRow === undefined) {
        throw new ApiError('already_exists', {
          param: 'email',
          message:
            'An account with this email already exists. Sign in with POST /v1/auth/sessions (an ID token of the configured identity provider) for a session, or use a personal access token of that account.',
        });
      }
      const user = userRecord(userRow);
      const tenant = await this.createTenant(tx, user.id, input.organization_name, input.timezone);
      const token = newToken('opat');
      const scopes = [...allScopes];
      await tx`
        insert into credentials (id, kind, token_hash, token_hint, name, organization_id, user_id, scopes)
        values (${id}, 'pat', ${hashToken(token)}, ${tokenHint(token)}, 'signup', ${tenant.organization.id},
                ${user.id}, ${scopes})`;
      return { user, ...tenant, token: { id, token, scopes } };
    }) as Promise<SignupResult>;
  }

  /** Whether POST /auth/sessions works here (an identity provider is configured). */
  get signInConfigured(): boolean {
    return this.oidc !== null;
  }

  /**
   * A sign-in with a verified ID token. The first one for an address proves it: a row made by
   * signup or an invitation is linked to the identity, its pending invitations take effect, and
   * the PATs issued to whoever signed up with the address are revoked (they were never proof of
   * owning it; the session mints what the owner needs).
   */
  async createSession(idToken: string): Promise<SessionResult> {
    if (this.oidc === null) {
      throw new ApiError('capability_unavailable', { message: 'Sign-in with an identity provider is not configured.' });
    }
    const identity = await this.oidc.verify(idToken, this.now());
    const email = normalizeEmail(identity.email);
    let revoked: Row[] = [];
    const result = await this.sql.begin(async (tx) => {
      let created = false;
      let userRow = (await tx`select * from users where oidc_subject = ${identity.subject}`)[0];
      if (userRow === undefined) {
        const byEmail = (await tx`select * from users where email = ${email} for update`)[0];
        if (byEmail !== undefined) {
          // Same address, different subject: the provider reassigned the address; linking would
          // hand the account to a different person.
          if (byEmail.oidc_subject !== null && byEmail.oidc_subject !== identity.subject) {
            throw new ApiError('invalid_credentials', {
              param: 'id_token',
              message: 'This email address is linked to a different identity.',
            });
          }
          if (byEmail.email_verified_at === null) {
            revoked = await tx`
              update credentials set revoked_at = now()
              where user_id = ${byEmail.id as string} and kind in ('pat', 'session') and revoked_at is null
              returning id, token_hash`;
          }
          userRow = (
            await tx`
            update users set oidc_subject = ${identity.subject}, name = coalesce(name, ${identity.name}),
                             email_verified_at = coalesce(email_verified_at, now())
            where id = ${byEmail.id as string} returning *`
          )[0];
          // An invited address had no account until now: this sign-in creates it, for the person.
          created = byEmail.origin === 'invitation';
        } else {
          userRow = (
            await tx`
            insert into users (id, email, name, oidc_subject, origin, email_verified_at)
            values (${newId('usr')}, ${email}, ${identity.name}, ${identity.subject}, 'sign_in', now())
            on conflict do nothing returning *`
          )[0];
          created = userRow !== undefined;
          // Lost a race with a concurrent first sign-in of the same person: use their row.
          userRow ??= (await tx`select * from users where oidc_subject = ${identity.subject}`)[0];
        }
      }
      if (userRow === undefined) {
        throw new ApiError('invalid_credentials', { param: 'id_token', message: 'The identity could not be linked.' });
      }
      const user = userRecord(userRow);
      // Every sign-in, not only the first: an invitation that raced the first one still takes effect.
      await tx`update memberships set pending = false where user_id = ${user.id} and pending`;
      const memberships = await tx`
        select m.organization_id, m.user_id, u.email, m.role, m.created_at
        from memberships m join users u on u.id = m.user_id
        where m.user_id = ${user.id}
        order by m.created_at, m.organization_id`;
      const token = newToken('oses');
      const id = newId('ses');
      const scopes = [...allScopes];
      const expiresAt = new Date(this.now() + limits.sessionLifetimeMs);
      await tx`
        insert into credentials (id, kind, token_hash, token_hint, name, user_id, scopes, expires_at)
        values (${id}, 'session', ${hashToken(token)}, ${tokenHint(token)}, 'session', ${user.id}, ${scopes}, ${expiresAt})`;
      return {
        user,
        created,
        memberships: memberships.map((m) => ({
          organization_id: m.organization_id as string,
          user_id: m.user_id as string,
          email: m.email as string,
          role: m.role as Role,
          created_at: iso(m.created_at),
        })),
        token: { id, token, scopes, expires_at: expiresAt.toISOString() },
      };
    }) as SessionResult;
    for (const r of revoked) await this.publishRevocation(r);
    return result;
  }

  /**
   * `callId`: the request's (an Idempotency-Key's); a run again of it answers the organization it
   * created, to a caller still a member of it (another may read nothing of it).
   */
  async createOrganization(principal: Principal, input: { name: string; timezone: string }, callId?: string): Promise<TenantCreated> {
    const userId = requireManagement(principal);
    validateTimezone(input.timezone);
    const again = {
      allowed: async (orgId: string) => {
        if ((await roleNow(this.sql, orgId, userId)) === null) {
          throw new ApiError('forbidden', { message: `An earlier run of this request created organization ${orgId}, which you are not a member of any more.` });
        }
      },
      found: (orgId: string) => this.tenantOf(orgId),
    };
    return createOncePerCall(
      this.sql,
      callId,
      again,
      () =>
        this.sql.begin(async (tx) => {
          const orgId = newId('org');
          await recordCreate(tx, callId, orgId);
          return this.createTenant(tx, userId, input.name, input.timezone, orgId);
        }) as Promise<TenantCreated>,
    );
  }

  /** The organization createTenant made, with its default project and environments, as they are now. */
  private async tenantOf(orgId: string): Promise<TenantCreated> {
    const orgs = await this.sql`select id, name, slug from organizations where id = ${orgId}`;
    if (orgs.length === 0) throw new ApiError('resource_not_found', { message: `No organization ${orgId}.` });
    // The default project is the organization's first: createTenant made it with the organization.
    const projects = await this.sql`select id, name from projects where organization_id = ${orgId} order by id limit 1`;
    if (projects.length === 0) throw new ApiError('resource_not_found', { message: `No project of organization ${orgId}.` });
    const project = projects[0]!;
    // By id: the test environment was minted before the live one.
    const envs = await this.sql`select id, name, runtime_class from environments where project_id = ${project.id as string} order by id`;
    const o = orgs[0]!;
    return {
      organization: { id: o.id as string, name: o.name as string, slug: o.slug as string },
      project: { id: project.id as string, name: project.name as string },
      environments: envs.map((e) => ({ id: e.id as string, name: e.name as string, runtime_class: e.runtime_class as EnvironmentRecord['runtime_class'] })),
    };
  }

  async listOrganizations(principal: Principal, page: PageRequest): Promise<Page<OrganizationListing>> {
    const userId = requireManagement(principal);
    const after = page.after?.[0] ?? null;
    const rows = await this.sql`
      select o.* from organizations o
      join memberships m on m.organization_id = o.id and m.user_id = ${userId} and not m.pending
      ${after === null ? this.sql`` : this.sql`where o.id < ${after}`}
      order by o.id desc
      limit ${page.limit + 1}`;
    return toPage(rows, page, (r) => [r.id as string], organizationListing);
  }

  /**
   * The organization's environments, by id (the test environment of a project before its live one),
   * for any member: the ids X-Service-Environment takes. A non-member (or an unknown organization)
   * gets resource_not_found, as on the membership routes, and so does a pending invitee.
   */
  async listEnvironments(principal: Principal, organizationId: string, page: PageRequest): Promise<Page<EnvironmentListing>> {
    const userId = requireManagement(principal);
    const member = await this.sql`
      select 1 from memberships where organization_id = ${organizationId} and user_id = ${userId} and not pending`;
    if (member.length === 0) throw new ApiError('resource_not_found', { param: 'id', message: 'No such organization.' });
    const after = page.after?.[0] ?? null;
    const rows = await this.sql`
      select id, name, runtime_class, project_id from environments
      where organization_id = ${organizationId}
      ${after === null ? this.sql`` : this.sql`and id > ${after}`}
      order by id
      limit ${page.limit + 1}`;
    return toPage(rows, page, (r) => [r.id as string], (r) => ({
      id: r.id as string,
      name: r.name as string,
      runtime_class: r.runtime_class as EnvironmentRecord['runtime_class'],
      project_id: r.project_id as string,
    }));
  }

  /**
   * `callId`: the request's (an Idempotency-Key's); a run again of it answers the key it created,
   * as it is now, with token null: the token was shown once (to the first run's answer, which may
   * never have reached the client: then the key can only be revoked and another made).
   */
  async createApiKey(principal: Principal, input: CreateApiKeyInput): Promise<CreatedApiKey>;
  async createApiKey(principal: Principal, input: CreateApiKeyInput, callId: string | undefined): Promise<CreatedApiKey | ApiKeyAnswer>;
  async createApiKey(principal: Principal, input: CreateApiKeyInput, callId?: string): Promise<CreatedApiKey | ApiKeyAnswer> {
    const ctx = requireKeyAdmin(principal);
    const grant = this.keyGrant(input);
    const again = {
      // As the create checks, now: a removed or demoted admin, or one whose role lost a scope of the key, is refused.
      allowed: async () => {
        await this.sql.begin((tx) => grantableNow(tx, principal, ctx.organizationId, grant.scopes));
      },
      found: async (id: string): Promise<ApiKeyAnswer> => {
        const rows = await this.sql`
          select * from credentials where id = ${id} and environment_id = ${ctx.environmentId} and kind in ('secret', 'publishable')`;
        if (rows.length === 0) throw new ApiError('resource_not_found', { message: `No API key ${id}.` });
        return { ...apiKeyRecord(rows[0]!), token: null };
      },
    };
    return createOncePerCall(this.sql, callId, again, () => this.createApiKeyOnce(principal, ctx, input, grant, callId));
  }

  /** What a key create grants, validated: its scopes, and a publishable key's events and origins. */
  private keyGrant(input: CreateApiKeyInput): { scopes: Scope[]; events: string[]; origins: string[] } {
    const events = input.allowed_events ?? [];
    const origins = input.allowed_origins ?? [];
    let scopes: Scope[];
    if (input.kind === 'secret') {
      if (events.length > 0) {
        throw new ApiError('validation_failed', { param: 'allowed_events', message: 'Only publishable keys take allowed_events.' });
      }
      if (origins.length > 0) {
        throw new ApiError('validation_failed', { param: 'allowed_origins', message: 'Only publishable keys take allowed_origins.' });
      }
      scopes = canonicalScopes(input.scopes === undefined ? defaultSecretKeyScopes : this.parseScopes(input.scopes));
      if (scopes.length === 0) {
        throw new ApiError('validation_failed', { param: 'scopes', message: 'A secret key needs at least one scope.' });
      }
    } else {
      if (input.scopes !== undefined) {
        const asked = canonicalScopes(this.parseScopes(input.scopes));
        if (asked.length !== 1 || asked[0] !== 'events:write') {
          throw new ApiError('validation_failed', { param: 'scopes', message: 'A publishable key has exactly the scope events:write.' });
        }
      }
      scopes = [...publishableKeyScopes];
      if (events.length === 0 || events.length > allowedEventsMax) {
        throw new ApiError('validation_failed', {
          param: 'allowed_events',
          message: `A publishable key lists 1 to ${allowedEventsMax} event names it may send.`,
        });
      }
      events.forEach((e, i) => {
        if (e.length === 0 || e.length > limits.eventNameCharsMax) {
          throw new ApiError('validation_failed', { param: `allowed_events[${i}]`, message: 'Event names are 1 to 128 characters.' });
        }
      });
      if (origins.length > allowedOriginsMax) {
        throw new ApiError('validation_failed', { param: 'allowed_origins', message: `At most ${allowedOriginsMax} origins.` });
      }
      origins.forEach((o, i) => {
        if (!validOrigin(o)) {
          throw new ApiError('validation_failed', {
            param: `allowed_origins[${i}]`,
            message: 'An origin is scheme://host[:port], e.g. "https://shop.example.com".',
          });
        }
      });
    }
    return { scopes, events, origins };
  }

  private async createApiKeyOnce(
    principal: Principal,
    ctx: { environmentId: string; organizationId: string },
    input: CreateApiKeyInput,
    { scopes, events, origins }: { scopes: Scope[]; events: string[]; origins: string[] },
    callId: string | undefined,
  ): Promise<CreatedApiKey> {
    const id = newId('key');
    return this.sql.begin(async (tx) => {
      await recordCreate(tx, callId, id);
      await grantableNow(tx, principal, ctx.organizationId, scopes);
      const token = newToken(input.kind === 'secret' ? 'osk' : 'opk');
      const rows = await tx`
        insert into credentials (id, kind, token_hash, token_hint, name, organization_id, environment_id, scopes,
                                 allowed_events, allowed_origins)
        values (${id}, ${input.kind}, ${hashToken(token)}, ${tokenHint(token)}, ${input.name}, ${ctx.organizationId},
                ${ctx.environmentId}, ${scopes}, ${[...new Set(events)]}, ${[...new Set(origins)]})
        returning *`;
      return { ...apiKeyRecord(rows[0]!), token };
    }) as Promise<CreatedApiKey>;
  }

  async listApiKeys(principal: Principal, page: PageRequest): Promise<Page<ApiKeyRecord>> {
    // Any member may read the key list (viewers read); it never carries a token.
    const ctx = requireEnvironment(principal);
    const after = page.after?.[0] ?? null;
    const rows = await this.sql`
      select * from credentials
      where environment_id = ${ctx.environmentId} and kind in ('secret', 'publishable')
      ${after === null ? this.sql`` : this.sql`and id < ${after}`}
      order by id desc
      limit ${page.limit + 1}`;
    return toPage(rows, page, (r) => [r.id as string], apiKeyRecord);
  }

  /** Revoking twice answers the first revocation unchanged. Foreign or unknown ids: resource_not_found. */
  async revokeApiKey(principal: Principal, id: string): Promise<ApiKeyRecord> {
    const ctx = requireKeyAdmin(principal);
    const row = (await this.sql.begin(async (tx) => {
      await keyAdminScopesNow(tx, principal, ctx.organizationId);
      const rows = await tx`
        update credentials set revoked_at = coalesce(revoked_at, now())
        where id = ${id} and environment_id = ${ctx.environmentId} and kind in ('secret', 'publishable')
        returning *`;
      return rows[0];
    })) as Row | undefined;
    if (row === undefined) throw new ApiError('resource_not_found', { param: 'id', message: 'No such API key.' });
    await this.publishRevocation(row);
    return apiKeyRecord(row);
  }

  /** Best effort by design: every Authenticator also polls for revocations each second. */
  private async publishRevocation(row: Row): Promise<void> {
    if (!this.opts.bus) return;
    const message = JSON.stringify({ id: row.id, token_hash: row.token_hash });
    await this.opts.bus.publish(revocationChannel, message).catch(() => undefined);
  }

  mintCustomerToken(req: MintCustomerToken): Promise<{ token: string; expiresAtMs: number }> {
    return this.customerTokens.mint(req);
  }

  private parseScopes(scopes: string[]): Scope[] {
    scopes.forEach((s, i) => {
      if (!isScope(s)) throw new ApiError('validation_failed', { param: `scopes[${i}]`, message: `Unknown scope "${s}".` });
    });
    return scopes as Scope[];
  }

  /** Organization + default project + test and live environments + owner membership, inside tx. */
  private async createTenant(tx: Tx, userId: string, name: string, timezone: string, orgId: string = newId('org')): Promise<TenantCreated> {
    const slug = await this.insertOrganization(tx, orgId, name, timezone);
    const projectId = newId('proj');
    const projectName = 'Default project';
    await tx`insert into projects (id, organization_id, name) values (${projectId}, ${orgId}, ${projectName})`;
    const environments: EnvironmentRecord[] = [
      { id: newId('env'), name: 'test', runtime_class: 'test' },
      { id: newId('env'), name: 'live', runtime_class: 'live' },
    ];
    for (const env of environments) {
      await tx`
        insert into environments (id, project_id, organization_id, name, runtime_class, timezone, autonomy)
        values (${env.id}, ${projectId}, ${orgId}, ${env.name}, ${env.runtime_class}, ${timezone},
                ${env.runtime_class === 'live' ? 'limits' : 'auto'})`;
    }
    await tx`insert into memberships (organization_id, user_id, role) values (${orgId}, ${userId}, 'owner')`;
    return { organization: { id: orgId, name, slug }, project: { id: projectId, name: projectName }, environments };
  }

  /** Inserts the organization under the first free slug among base, base-2, base-3, ... */
  private async insertOrganization(tx: Tx, id: string, name: string, timezone: string): Promise<string> {
    const base = slugify(name);
    for (let attempt = 0; attempt < 5; attempt++) {
      let slug = base;
      if (attempt > 0 || (await tx`select 1 from organizations where slug = ${base}`).length > 0) {
        // base is [a-z0-9-] only, so it is safe inside the regular expression.
        const taken = await tx`select slug from organizations where slug ~ ${`^${base}-[0-9]+$`}`;
        let n = 1;
        for (const r of taken) {
          const k = Number((r.slug as string).slice(base.length + 1));
          if (Number.isSafeInteger(k) && k < 1e9) n = Math.max(n, k);
        }
        slug = `${base}-${n + 1 + attempt}`;
      }
      const rows = await tx`
        insert into organizations (id, name, slug, timezone) values (${id}, ${name}, ${slug}, ${timezone})
        on conflict (slug) do nothing returning id`;
      if (rows.length > 0) return slug;
    }
    throw new ApiError('internal_error', { message: 'Could not allocate an organization slug.' });
  }
}
