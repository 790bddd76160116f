// Who is calling: the resolved credential (Principal) and the environment it acts in.
// Produced by tenancy/auth from the Authorization header, cached, never I/O on the hot path.

export const allScopes = [
  'events:write',
  'events:read',
  'customers:read',
  'customers:write',
  'ledger:read',
  'ledger:write',
  'programs:read',
  'programs:write',
  'notifications:read',
  'notifications:write',
  'webhooks:read',
  'webhooks:write',
  'audit:read',
  'config:read',
  'config:write',
  'customer_sessions:write',
] as const;
export type Scope = (typeof allScopes)[number];

export type CredentialKind = 'secret' | 'publishable' | 'pat' | 'session' | 'customer';
export type Role = 'owner' | 'admin' | 'editor' | 'viewer';

export interface Environment {
  id: string;
  name: string;
  runtimeClass: 'test' | 'live';
  projectId: string;
  organizationId: string;
  timezone: string;
}

export interface Principal {
  kind: CredentialKind;
  /** key_/pat_ id of the credential (customer tokens: the minting key's id). */
  credentialId: string;
  /** '' for a PAT or session on a route with environment: false (it acts as its user, in no organization). */
  organizationId: string;
  /** Set for secret, publishable and customer credentials, and for management tokens that sent X-Service-Environment. */
  environment: Environment | null;
  userId: string | null;
  role: Role | null;
  /** Management credentials: their issued scopes capped by the role in the environment's organization; empty without one. */
  scopes: ReadonlySet<Scope>;
  /** Publishable keys: event names they may send (empty: none). */
  allowedEvents: readonly string[];
  /** Publishable keys: allowed Origin values (empty: any). */
  allowedOrigins: readonly string[];
  /** Customer tokens: the customer they act for. */
  customerId: string | null;
}
