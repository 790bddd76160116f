// Role -> scope table for management credentials (PATs, sessions) and the default scope sets of
// API keys and customer tokens (decisions.md "Tenancy and credentials": viewer reads; editor also
// writes programs, customers, ledger; admin also keys, webhooks, members, confirmations; owner also
// billing and the organization itself). Pure data: no I/O.
// Invariant: each role's set contains the set of the role below it; customer_sessions:write is
// never a default of anything a secret key can obtain by itself.
import { allScopes, type Role, type Scope } from './types.js';

const readScopes = allScopes.filter((s) => s.endsWith(':read'));

// Editors write programs (their configuration too: change sets and a test environment's clock are
// config:write), customers (events:write: an event writes its customer's data) and the ledger.
const editorScopes: Scope[] = [...readScopes, 'programs:write', 'customers:write', 'ledger:write', 'events:write', 'config:write'];

// Admins also manage keys, webhooks, members and confirmations. Keys: creating and revoking API keys
// is a role check in the service (no scope names it), and customer_sessions:write is the key a
// browser integration needs (minting customer tokens, short-lived keys). Notifications (connectors
// and message types reach customers through providers, as webhooks reach endpoints) sit with webhooks.
// Members and confirmations are role checks too (memberships, change-set confirm).
const adminScopes: Scope[] = [...editorScopes, 'webhooks:write', 'notifications:write', 'customer_sessions:write'];

// Owners hold the admin's scopes: what only an owner does (grant or remove owner, billing, the
// organization itself) is a role check, not a scope.
export const roleScopes: Readonly<Record<Role, ReadonlySet<Scope>>> = {
  viewer: new Set(readScopes),
  editor: new Set(editorScopes),
  admin: new Set(adminScopes),
  owner: new Set(adminScopes),
};

/** A secret key created without `scopes`: everything except minting customer sessions (spec part 5). */
export const defaultSecretKeyScopes: readonly Scope[] = allScopes.filter((s) => s !== 'customer_sessions:write');

/** Publishable keys only ever send client events. */
export const publishableKeyScopes: readonly Scope[] = ['events:write'];

/** What a browser holding a customer token may do; routes still decide whether they allow 'customer'. */
export const customerTokenScopes: ReadonlySet<Scope> = new Set<Scope>([
  'customers:read',
  'ledger:read',
  'programs:read',
  'notifications:read',
  'notifications:write',
]);

export const roleRank: Readonly<Record<Role, number>> = { viewer: 0, editor: 1, admin: 2, owner: 3 };

export function isRole(value: string): value is Role {
  return Object.hasOwn(roleRank, value);
}

export function isScope(value: string): value is Scope {
  return (allScopes as readonly string[]).includes(value);
}

/** Effective scopes of a management credential: what it was issued with, capped by the role. */
export function effectiveScopes(credentialScopes: readonly string[], role: Role): ReadonlySet<Scope> {
  const allowed = roleScopes[role];
  const out = new Set<Scope>();
  for (const s of credentialScopes) if (isScope(s) && allowed.has(s)) out.add(s);
  return out;
}
