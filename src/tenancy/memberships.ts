// MembershipService: who belongs to an organization and with which role (spec 2.1, part 7
// last_owner; decisions.md: admins manage members, only owners hand out or take away owner).
// Only management credentials (PAT, session) reach it, acting as their user in no environment; the
// caller's role is read from the memberships table on every call, never from the cached principal.
// Invariants: a non-member (or an unknown organization) sees resource_not_found, never forbidden,
// so organization ids are no existence oracle; every change runs in one transaction that first
// locks the organization row, so two concurrent changes can never leave it without an owner.
// Role changes reach the changed user's other requests once the Authenticator's per-credential
// cache entry expires (at most limits.credentialCacheTtlMs, 60 s); these routes are always current,
// and so are the routes with a lasting effect elsewhere (roleNow). An invitation of a user whose
// email address no identity provider has vouched for yet (a signup, or nobody) is pending: it
// grants nothing until that user signs in (TenancyService.createSession makes it effective).
import { ApiError } from '../errors/api-error.js';
import type { Page, PageRequest } from '../gateway/pagination.js';
import { toPage } from '../gateway/pagination.js';
import { newId } from '../ids.js';
import { createOncePerCall, recordCreate } from '../persistence/sql/create-calls.js';
import type { Sql, Tx } from '../persistence/sql/db.js';
import { roleRank } from './roles.js';
import { type MembershipRecord, normalizeEmail } from './service.js';
import type { Principal, Role } from './types.js';

type Row = Record<string, unknown>;

const iso = (v: unknown): string => (v instanceof Date ? v : new Date(String(v))).toISOString();

function membershipRecord(r: Row): MembershipRecord {
  return {
    organization_id: r.organization_id as string,
    user_id: r.user_id as string,
    email: r.email as string,
    role: r.role as Role,
    created_at: iso(r.created_at),
  };
}

function callerOf(p: Principal): string {
  if ((p.kind !== 'pat' && p.kind !== 'session') || p.userId === null) {
    throw new ApiError('forbidden', { message: 'Only a personal access token or a session may do this.' });
  }
  return p.userId;
}

const noOrganization = () => new ApiError('resource_not_found', { param: 'id', message: 'No such organization.' });
const noMember = () => new ApiError('resource_not_found', { param: 'user_id', message: 'No such member.' });
const lastOwner = () => new ApiError('last_owner');

export interface MembershipOptions {
  /** An identity provider is configured (POST /auth/sessions works): only then can an invitation wait for one. */
  signInConfigured: boolean;
}

function requireManager(role: Role): void {
  if (roleRank[role] < roleRank.admin) {
    throw new ApiError('forbidden', { message: 'Only an admin or owner manages members.' });
  }
}

function requireOwnerFor(role: Role, what: string): void {
  if (role !== 'owner') throw new ApiError('forbidden', { param: 'role', message: `Only an owner may ${what}.` });
}

export class MembershipService {
  constructor(
    private readonly sql: Sql,
    private readonly opts: MembershipOptions,
  ) {}

  /** Any member may list; ordered by user id (the cursor is the last user id). */
  async list(principal: Principal, organizationId: string, page: PageRequest): Promise<Page<MembershipRecord>> {
    const userId = callerOf(principal);
    await this.callerRole(this.sql, organizationId, userId);
    const after = page.after?.[0] ?? null;
    const rows = await this.sql`
      select m.organization_id, m.user_id, u.email, m.role, m.created_at
      from memberships m join users u on u.id = m.user_id
      where m.organization_id = ${organizationId}
      ${after === null ? this.sql`` : this.sql`and m.user_id > ${after}`}
      order by m.user_id
      limit ${page.limit + 1}`;
    return toPage(rows, page, (r) => [r.user_id as string], membershipRecord);
  }

  /**
   * Adds the user with this email (created without a credential when unknown). The membership is
   * pending while no identity provider has vouched for the address (see the file header); without
   * an identity provider such an invitation could never take effect and is refused.
   */
  async add(principal: Principal, organizationId: string, input: { email: string; role: Role }, callId?: string): Promise<MembershipRecord> {
    const userId = callerOf(principal);
    const email = normalizeEmail(input.email);
    // A run again (`callId`: the request's, an Idempotency-Key's) answers the membership the first
    // run made, as it is now (not already_exists), to a caller who may still add it.
    const allowedNow = async (tx: Tx) => {
      const role = await this.lockAndRole(tx, organizationId, userId);
      requireManager(role);
      if (input.role === 'owner') requireOwnerFor(role, 'grant owner');
    };
    const again = {
      allowed: async () => {
        await this.sql.begin(allowedNow);
      },
      found: (memberId: string) => this.sql.begin((tx) => this.member(tx, organizationId, memberId)) as Promise<MembershipRecord>,
      gone: (memberId: string) => `An earlier run of this request added ${memberId} to the organization, who is not a member any more.`,
    };
    const create = () =>
      this.sql.begin(async (tx) => {
        await allowedNow(tx);
        // Locked (shared) so a first sign-in of this address, which locks the row to verify it, is
        // either seen here or sees this invitation.
        let user = (await tx`select id, email_verified_at from users where email = ${email} for share`)[0];
        if ((user === undefined || user.email_verified_at === null) && !this.opts.signInConfigured) {
          throw new ApiError('capability_unavailable', {
            param: 'email',
            message:
              'An invitation takes effect when the invitee signs in with the identity provider, and none is configured here: only users who have signed in before can be added.',
          });
        }
        if (user === undefined) {
          await tx`insert into users (id, email, origin) values (${newId('usr')}, ${email}, 'invitation') on conflict (email) do nothing`;
          user = (await tx`select id, email_verified_at from users where email = ${email} for share`)[0];
        }
        if (user === undefined) throw new ApiError('internal_error', { message: 'Could not find or create the user.' });
        await recordCreate(tx, callId, user.id as string);
        const pending = user.email_verified_at === null;
        const inserted = await tx`
          insert into memberships (organization_id, user_id, role, pending)
          values (${organizationId}, ${user.id as string}, ${input.role}, ${pending})
          on conflict do nothing returning organization_id`;
        if (inserted.length === 0) {
          throw new ApiError('already_exists', { param: 'email', message: 'This user is already a member.' });
        }
        return this.member(tx, organizationId, user.id as string);
      }) as Promise<MembershipRecord>;
    return createOncePerCall(this.sql, callId, again, create);
  }

  async changeRole(principal: Principal, organizationId: string, targetUserId: string, newRole: Role): Promise<MembershipRecord> {
    const userId = callerOf(principal);
    return this.sql.begin(async (tx) => {
      const role = await this.lockAndRole(tx, organizationId, userId);
      requireManager(role);
      const target = await this.member(tx, organizationId, targetUserId);
      if (target.role === newRole) return target;
      if (newRole === 'owner') requireOwnerFor(role, 'grant owner');
      if (target.role === 'owner') {
        requireOwnerFor(role, 'remove owner');
        if (!(await this.isPending(tx, organizationId, targetUserId)) && (await this.ownerCount(tx, organizationId)) <= 1) {
          throw lastOwner();
        }
      }
      await tx`update memberships set role = ${newRole} where organization_id = ${organizationId} and user_id = ${targetUserId}`;
      return this.member(tx, organizationId, targetUserId);
    }) as Promise<MembershipRecord>;
  }

  /** Admin or owner, or any member removing themselves; only an owner removes another owner. */
  async remove(principal: Principal, organizationId: string, targetUserId: string): Promise<void> {
    const userId = callerOf(principal);
    await this.sql.begin(async (tx) => {
      const role = await this.lockAndRole(tx, organizationId, userId);
      const self = targetUserId === userId;
      if (!self) requireManager(role);
      const target = await this.member(tx, organizationId, targetUserId);
      if (target.role === 'owner') {
        if (!self) requireOwnerFor(role, 'remove owner');
        if (!(await this.isPending(tx, organizationId, targetUserId)) && (await this.ownerCount(tx, organizationId)) <= 1) {
          throw lastOwner();
        }
      }
      await tx`delete from memberships where organization_id = ${organizationId} and user_id = ${targetUserId}`;
    });
  }

  /**
   * The caller's role in the organization; a non-member (or unknown organization) gets
   * resource_not_found, and so does an invitee whose membership is still pending.
   */
  private async callerRole(q: Sql | Tx, organizationId: string, userId: string): Promise<Role> {
    const row = (
      await q`select role from memberships where organization_id = ${organizationId} and user_id = ${userId} and not pending`
    )[0];
    if (row === undefined) throw noOrganization();
    return row.role as Role;
  }

  /** Serializes membership changes of one organization, then reads the caller's role. */
  private async lockAndRole(tx: Tx, organizationId: string, userId: string): Promise<Role> {
    const org = await tx`select id from organizations where id = ${organizationId} for update`;
    if (org.length === 0) throw noOrganization();
    return this.callerRole(tx, organizationId, userId);
  }

  /** Effective owners: a pending invitation to owner keeps nobody's organization. */
  private async ownerCount(tx: Tx, organizationId: string): Promise<number> {
    const rows = await tx`
      select count(*)::int as n from memberships where organization_id = ${organizationId} and role = 'owner' and not pending`;
    return Number(rows[0]?.n ?? 0);
  }

  private async isPending(tx: Tx, organizationId: string, userId: string): Promise<boolean> {
    const rows = await tx`select pending from memberships where organization_id = ${organizationId} and user_id = ${userId}`;
    return rows[0]?.pending === true;
  }

  private async member(tx: Tx, organizationId: string, userId: string): Promise<MembershipRecord> {
    const row = (
      await tx`
      select m.organization_id, m.user_id, u.email, m.role, m.created_at
      from memberships m join users u on u.id = m.user_id
      where m.organization_id = ${organizationId} and m.user_id = ${userId}`
    )[0];
    if (row === undefined) throw noMember();
    return membershipRecord(row);
  }
}
