// The Authenticator: Authorization header -> Principal for every credentialed route. Hot path: after a
// credential's first use its resolution is a synchronous Map hit keyed by the token's sha256 (no
// Promise, no I/O) until the entry's TTL; a miss costs one SQL query (concurrent misses share it).
// Revocations reach every node through the bus at once and through a one-second poll of
// credentials.revoked_at as a backstop. Never stores or logs a token, only its hash. A pending
// membership (an invitation waiting for its user's first sign-in) grants no environment.
import { ApiError } from '../errors/api-error.js';
import type { ErrorCode } from '../errors/codes.js';
import { limits } from '../limits.js';
import type { Bus } from '../persistence/ports.js';
import type { Sql } from '../persistence/sql/db.js';
import { CustomerTokens, looksLikeJwt } from './customer-tokens.js';
import { customerTokenScopes, effectiveScopes, isRole, isScope } from './roles.js';
import { hashToken, revocationChannel } from './tokens.js';
import type { CredentialKind, Environment, Principal, Scope } from './types.js';

export interface AuthRequest {
  /** Raw Authorization header. */
  authorization?: string;
  /** Raw X-Service-Environment header: an environment id (env_...). */
  environment?: string;
  /** Raw Origin header. */
  origin?: string;
}

export interface CredentialSpec {
  scopes: readonly Scope[];
  allow: readonly CredentialKind[];
  /** Management credentials must name an environment unless this is false. */
  environment?: boolean;
}

/**
 * Resolves and authorizes a credential. Returns the Principal synchronously when the credential is
 * cached (and throws ApiError synchronously on a cached refusal); otherwise a Promise.
 */
export type Authenticate = (req: AuthRequest, spec: CredentialSpec) => Principal | Promise<Principal>;

export interface AuthenticatorOptions {
  bus?: Bus;
  customerTokens?: CustomerTokens;
  now?: () => number;
  /** Backstop poll period; the propagation bound of a revocation whose bus message was lost. */
  pollEveryMs?: number;
  cacheTtlMs?: number;
  /** Called with errors of the background poll (the database may be briefly unreachable). */
  onError?: (err: unknown) => void;
}

/** Unknown or forged tokens are remembered this long, so a flood of one bad token costs one query per 2 s. */
const negativeTtlMs = 2000;
/** Bound on cached credentials; the oldest inserted entry goes first (random-token floods stay bounded). */
const cacheEntriesMax = 100_000;
/** Environments remembered per management credential. */
const envsPerCredentialMax = 256;
/** Re-read revocations this far behind the database clock: covers transactions that commit late. */
const pollOverlapMs = 5000;
const tokenCharsMax = 4096;
/** Tokens whose hash is remembered (see hashOf). */
const hashMemoMax = 10_000;
const envIdPattern = /^env_[A-Za-z0-9]{1,60}$/;

interface Live {
  credentialId: string;
  fetchedAtMs: number;
  /** Credential expiry (sessions, customer tokens); null: none. */
  expiresAtMs: number | null;
  revoked: boolean;
}
interface KeyEntry extends Live {
  t: 'key';
  principal: Principal;
}
interface CustomerEntry extends Live {
  t: 'customer';
  principal: Principal;
}
interface ManagementEntry extends Live {
  t: 'management';
  kind: 'pat' | 'session';
  userId: string;
  scopes: readonly string[];
  /** Principal for routes with environment: false: no organization, role or scopes. */
  bare: Principal;
  /** Environment id -> principal acting there, or null when unknown or not a member. */
  envs: Map<string, Principal | null>;
}
interface RefusedEntry {
  t: 'refused';
  code: 'invalid_credentials' | 'credentials_revoked';
  /** The answer's message when the code's own does not fit (an expired customer token). */
  message?: string;
  fetchedAtMs: number;
}
type Entry = KeyEntry | CustomerEntry | ManagementEntry | RefusedEntry;

type Row = Record<string, unknown>;

const noStrings: readonly string[] = Object.freeze([]);
const noScopes: ReadonlySet<Scope> = new Set<Scope>();

function ms(v: unknown): number | null {
  if (v === null || v === undefined) return null;
  return (v instanceof Date ? v : new Date(String(v))).getTime();
}

function environmentOf(r: Row, prefix: string): Environment {
  return {
    id: r[`${prefix}id`] as string,
    name: r[`${prefix}name`] as string,
    runtimeClass: r[`${prefix}runtime_class`] as 'test' | 'live',
    projectId: r[`${prefix}project_id`] as string,
    organizationId: r[`${prefix}organization_id`] as string,
    timezone: r[`${prefix}timezone`] as string,
  };
}

function scopeSet(values: readonly string[]): ReadonlySet<Scope> {
  const out = new Set<Scope>();
  for (const s of values) if (isScope(s)) out.add(s);
  return out;
}

/**
 * An expired session or customer token answers credentials_revoked (it was a credential and is no
 * longer one; invalid_credentials is for tokens that never were), saying why: a client that reads
 * the message knows to get a new one, as after a revocation.
 */
export const credentialExpiredMessage = 'The credential has expired.';

const signInRequiredMessage = 'Only a signed-in user may do this: use the session token of POST /v1/auth/sessions, not a personal access token.';

function refuse(code: ErrorCode, message?: string): never {
  throw new ApiError(code, message === undefined ? {} : { message });
}

export class Authenticator {
  private readonly cache = new Map<string, Entry>();
  private readonly loading = new Map<string, Promise<Entry>>();
  /**
   * Credential ids seen revoked (bus or poll) within a cache TTL, with when. A load that read its
   * row just before the revocation committed is cached after the mark; remember() consults this.
   */
  private readonly revokedIds = new Map<string, number>();
  private readonly customerTokens: CustomerTokens;
  private readonly now: () => number;
  private readonly ttlMs: number;
  private timer: NodeJS.Timeout | null = null;
  private polling: Promise<void> | null = null;
  private since: Date | null = null;
  private stopped = true;
  private readonly hashes = new Map<string, string>();

  constructor(
    private readonly sql: Sql,
    private readonly opts: AuthenticatorOptions = {},
  ) {
    this.now = opts.now ?? Date.now;
    this.ttlMs = opts.cacheTtlMs ?? limits.credentialCacheTtlMs;
    this.customerTokens = opts.customerTokens ?? new CustomerTokens(sql, this.now);
  }

  /** Subscribes to revocations, reads the database clock once, then polls every pollEveryMs. */
  async start(): Promise<void> {
    if (!this.stopped) return;
    this.stopped = false;
    if (this.opts.bus) {
      await this.opts.bus.subscribe(revocationChannel, (message) => {
        if (!this.stopped) this.onRevocationMessage(message);
      });
    }
    await this.pollOnce();
    this.timer = setInterval(() => {
      if (this.polling === null) void this.pollOnce();
    }, this.opts.pollEveryMs ?? limits.revocationPropagationMs);
    this.timer.unref();
  }

  /** Stops polling and ignores further bus messages; the bus itself belongs to the caller. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    await this.polling;
  }

  readonly authenticate: Authenticate = (req, spec) => {
    const token = bearerToken(req.authorization);
    const hash = this.hashOf(token);
    const nowMs = this.now();
    const entry = this.cache.get(hash);
    if (entry !== undefined && nowMs - entry.fetchedAtMs < this.entryTtl(entry)) {
      return this.authorize(entry, req, spec, nowMs);
    }
    return this.load(hash, token, req.environment).then((e) => this.authorize(e, req, spec, this.now()));
  };

  /**
   * sha256 of a token, remembered for the tokens seen recently (a hot key is hashed once, not per
   * request). Bounded: the memo is dropped whole when it grows past its cap.
   */
  private hashOf(token: string): string {
    let hash = this.hashes.get(token);
    if (hash === undefined) {
      if (this.hashes.size >= hashMemoMax) this.hashes.clear();
      hash = hashToken(token);
      this.hashes.set(token, hash);
    }
    return hash;
  }

  /** Marks a credential revoked in this node's cache (bus handler and poll; idempotent). */
  markRevoked(credentialId: string, tokenHash: string): void {
    const entry = this.cache.get(tokenHash);
    if (entry !== undefined && entry.t !== 'refused') entry.revoked = true;
    if (this.revokedIds.has(credentialId)) return;
    // First sighting only (the poll re-reads each revocation for a few seconds): customer tokens
    // die with the key that minted them, and finding them is a scan of the cache.
    this.revokedIds.set(credentialId, this.now());
    for (const e of this.cache.values()) {
      if (e.t === 'customer' && e.credentialId === credentialId) e.revoked = true;
    }
  }

  private entryTtl(entry: Entry): number {
    return entry.t === 'refused' ? negativeTtlMs : this.ttlMs;
  }

  private authorize(entry: Entry, req: AuthRequest, spec: CredentialSpec, nowMs: number): Principal | Promise<Principal> {
    if (entry.t === 'refused') refuse(entry.code, entry.message);
    if (entry.revoked) refuse('credentials_revoked');
    if (entry.expiresAtMs !== null && nowMs >= entry.expiresAtMs) refuse('credentials_revoked', credentialExpiredMessage);
    const kind: CredentialKind = entry.t === 'management' ? entry.kind : entry.principal.kind;
    if (!spec.allow.includes(kind)) {
      // A publishable key on a route a secret key may use is told to use one (spec part 5); on a
      // route no API key may use (operators' routes) it is refused like a secret key would be. A
      // personal access token on a route for signed-in users only is told to sign in.
      if (kind === 'publishable' && spec.allow.includes('secret')) refuse('event_requires_secret_key');
      refuse('forbidden', kind === 'pat' && spec.allow.includes('session') ? signInRequiredMessage : undefined);
    }
    if (entry.t !== 'management') {
      const p = entry.principal;
      if (p.kind === 'publishable' && p.allowedOrigins.length > 0) {
        if (req.origin === undefined || !p.allowedOrigins.includes(req.origin)) refuse('origin_not_allowed');
      }
      return withScopes(p, spec.scopes);
    }
    if (spec.environment === false) return withScopes(entry.bare, spec.scopes);
    const envId = req.environment;
    if (envId === undefined || envId === '') refuse('environment_required');
    const known = entry.envs.get(envId);
    if (known === null) refuse('resource_not_found', 'No environment with this id in an organization you belong to.');
    if (known !== undefined) return withScopes(known, spec.scopes);
    return this.loadEnvironment(entry, envId).then((p) => {
      if (p === null) refuse('resource_not_found', 'No environment with this id in an organization you belong to.');
      return withScopes(p, spec.scopes);
    });
  }

  private load(hash: string, token: string, envHeader: string | undefined): Promise<Entry> {
    const pending = this.loading.get(hash);
    if (pending !== undefined) return pending;
    const p = (looksLikeJwt(token) ? this.loadCustomer(token) : this.loadStored(hash, envHeader))
      .then((entry) => {
        this.remember(hash, entry);
        return entry;
      })
      .finally(() => this.loading.delete(hash));
    this.loading.set(hash, p);
    return p;
  }

  private remember(hash: string, entry: Entry): void {
    if (entry.t !== 'refused' && this.revokedIds.has(entry.credentialId)) entry.revoked = true;
    this.cache.delete(hash);
    if (this.cache.size >= cacheEntriesMax) {
      const oldest = this.cache.keys().next();
      if (!oldest.done) this.cache.delete(oldest.value);
    }
    this.cache.set(hash, entry);
  }

  /** One query: the credential, its key environment, and (management) the named environment + role. */
  private async loadStored(hash: string, envHeader: string | undefined): Promise<Entry> {
    const envId = envHeader !== undefined && envIdPattern.test(envHeader) ? envHeader : null;
    const rows = await this.sql`
      select c.id, c.kind, c.user_id, c.scopes, c.allowed_events, c.allowed_origins, c.expires_at, c.revoked_at,
             ke.id as k_id, ke.name as k_name, ke.runtime_class as k_runtime_class, ke.project_id as k_project_id,
             ke.organization_id as k_organization_id, ke.timezone as k_timezone,
             he.id as h_id, he.name as h_name, he.runtime_class as h_runtime_class, he.project_id as h_project_id,
             he.organization_id as h_organization_id, he.timezone as h_timezone, m.role as h_role
      from credentials c
      left join environments ke on ke.id = c.environment_id
      left join environments he on he.id = ${envId} and c.kind in ('pat', 'session')
      left join memberships m on m.organization_id = he.organization_id and m.user_id = c.user_id and not m.pending
      where c.token_hash = ${hash}`;
    const fetchedAtMs = this.now();
    const r = rows[0];
    if (r === undefined) return { t: 'refused', code: 'invalid_credentials', fetchedAtMs };
    const live: Live = {
      credentialId: r.id as string,
      fetchedAtMs,
      expiresAtMs: ms(r.expires_at),
      revoked: r.revoked_at !== null,
    };
    const kind = r.kind as 'secret' | 'publishable' | 'pat' | 'session';
    if (kind === 'pat' || kind === 'session') {
      const userId = r.user_id as string;
      const entry: ManagementEntry = {
        ...live,
        t: 'management',
        kind,
        userId,
        scopes: r.scopes as string[],
        bare: {
          kind,
          credentialId: live.credentialId,
          organizationId: '',
          environment: null,
          userId,
          role: null,
          scopes: noScopes,
          allowedEvents: noStrings,
          allowedOrigins: noStrings,
          customerId: null,
        },
        envs: new Map(),
      };
      if (envId !== null) {
        entry.envs.set(envId, r.h_id !== null && r.h_role !== null ? managementPrincipal(entry, r, 'h_') : null);
      }
      return entry;
    }
    const environment = environmentOf(r, 'k_');
    return {
      ...live,
      t: 'key',
      principal: {
        kind,
        credentialId: live.credentialId,
        organizationId: environment.organizationId,
        environment,
        userId: null,
        role: null,
        scopes: scopeSet(r.scopes as string[]),
        allowedEvents: Object.freeze([...(r.allowed_events as string[])]),
        allowedOrigins: Object.freeze([...(r.allowed_origins as string[])]),
        customerId: null,
      },
    };
  }

  private async loadEnvironment(entry: ManagementEntry, envId: string): Promise<Principal | null> {
    let principal: Principal | null = null;
    if (envIdPattern.test(envId)) {
      const rows = await this.sql`
        select e.id as h_id, e.name as h_name, e.runtime_class as h_runtime_class, e.project_id as h_project_id,
               e.organization_id as h_organization_id, e.timezone as h_timezone, m.role as h_role
        from environments e
        join memberships m on m.organization_id = e.organization_id and m.user_id = ${entry.userId} and not m.pending
        where e.id = ${envId}`;
      const r = rows[0];
      if (r !== undefined) principal = managementPrincipal(entry, r, 'h_');
    }
    if (entry.envs.size >= envsPerCredentialMax) entry.envs.clear();
    entry.envs.set(envId, principal);
    return principal;
  }

  private async loadCustomer(token: string): Promise<Entry> {
    const check = await this.customerTokens.verify(token);
    if (!check.ok) {
      return { t: 'refused', code: check.code, message: check.expired ? credentialExpiredMessage : undefined, fetchedAtMs: this.now() };
    }
    const c = check.claims;
    const rows = await this.sql`
      select e.id as e_id, e.name as e_name, e.runtime_class as e_runtime_class, e.project_id as e_project_id,
             e.organization_id as e_organization_id, e.timezone as e_timezone,
             c.id as c_id, c.environment_id as c_environment_id, c.revoked_at as c_revoked_at
      from environments e
      left join credentials c on c.id = ${c.credentialId}
      where e.id = ${c.environmentId}`;
    const fetchedAtMs = this.now();
    const r = rows[0];
    // A token naming a deleted environment, an unknown key, or a key of another environment is forged
    // or stale; either way it is not a credential.
    if (r === undefined || r.c_id === null || (r.c_environment_id !== null && r.c_environment_id !== r.e_id)) {
      return { t: 'refused', code: 'invalid_credentials', fetchedAtMs };
    }
    const environment = environmentOf(r, 'e_');
    return {
      t: 'customer',
      credentialId: c.credentialId,
      fetchedAtMs,
      expiresAtMs: c.expiresAtMs,
      revoked: r.c_revoked_at !== null,
      principal: {
        kind: 'customer',
        credentialId: c.credentialId,
        organizationId: environment.organizationId,
        environment,
        userId: null,
        role: null,
        scopes: customerTokenScopes,
        allowedEvents: noStrings,
        allowedOrigins: noStrings,
        customerId: c.customerId,
      },
    };
  }

  private onRevocationMessage(message: string): void {
    try {
      const m = JSON.parse(message) as { id?: unknown; token_hash?: unknown };
      if (typeof m.id === 'string' && typeof m.token_hash === 'string') this.markRevoked(m.id, m.token_hash);
    } catch {
      // A malformed message is ignored; the poll still catches the revocation.
    }
  }

  private pollOnce(): Promise<void> {
    const run = (async () => {
      try {
        const rows = await this.sql`
          select n.db_now, c.id, c.token_hash
          from (select now() as db_now) n
          left join credentials c on c.revoked_at > coalesce(${this.since}::timestamptz, n.db_now - ${`${pollOverlapMs} milliseconds`}::interval)`;
        for (const r of rows) {
          if (r.id !== null) this.markRevoked(r.id as string, r.token_hash as string);
        }
        const forgetBeforeMs = this.now() - this.ttlMs - pollOverlapMs;
        for (const [id, atMs] of this.revokedIds) if (atMs < forgetBeforeMs) this.revokedIds.delete(id);
        const dbNow = rows[0]?.db_now;
        if (dbNow instanceof Date) this.since = new Date(dbNow.getTime() - pollOverlapMs);
      } catch (err) {
        this.opts.onError?.(err);
      }
    })();
    this.polling = run;
    return run.finally(() => {
      if (this.polling === run) this.polling = null;
    });
  }
}

function managementPrincipal(entry: ManagementEntry, r: Row, prefix: string): Principal | null {
  const role = r[`${prefix}role`];
  if (typeof role !== 'string' || !isRole(role)) return null;
  const environment = environmentOf(r, prefix);
  return {
    kind: entry.kind,
    credentialId: entry.credentialId,
    organizationId: environment.organizationId,
    environment,
    userId: entry.userId,
    role,
    scopes: effectiveScopes(entry.scopes, role),
    allowedEvents: noStrings,
    allowedOrigins: noStrings,
    customerId: null,
  };
}

function withScopes(p: Principal, required: readonly Scope[]): Principal {
  for (const s of required) {
    if (!p.scopes.has(s)) throw new ApiError('insufficient_scope', { message: `This route needs the scope ${s}.` });
  }
  return p;
}

/** "Bearer <token>" (scheme case-insensitive); anything else is authentication_required. */
export function bearerToken(header: string | undefined): string {
  if (header === undefined) refuse('authentication_required');
  const space = header.indexOf(' ');
  if (space < 0 || header.slice(0, space).toLowerCase() !== 'bearer') refuse('authentication_required');
  const token = header.slice(space + 1).trim();
  if (token.length === 0) refuse('authentication_required');
  // Longer than any token we issue: not worth hashing or caching.
  if (token.length > tokenCharsMax) refuse('invalid_credentials');
  return token;
}
