// Customer tokens: short-lived HS256 JWTs minted for a browser (POST /customer_sessions,
// POST /customers/{id}/client_token) and verified by the Authenticator. The signing secret lives in
// service_secrets, generated once by whichever node asks first (insert ... on conflict do nothing,
// then read back), so every node signs and verifies with the same key. Never log a token or the secret.
import { randomBytes } from 'node:crypto';
import { errors as joseErrors, jwtVerify, SignJWT } from 'jose';
import { ApiError } from '../errors/api-error.js';
import { limits } from '../limits.js';
import type { Sql } from '../persistence/sql/db.js';

const secretName = 'customer_token_hs256';
const issuer = 'loyalty-engine';
const audience = 'customer';

export interface MintCustomerToken {
  environmentId: string;
  customerId: string;
  externalId: string;
  /** The key that minted it: revoking that key also ends its customer tokens. */
  credentialId: string;
  ttlMs?: number;
}

export interface CustomerTokenClaims {
  environmentId: string;
  customerId: string;
  externalId: string;
  credentialId: string;
  expiresAtMs: number;
}

export type CustomerTokenCheck =
  | { ok: true; claims: CustomerTokenClaims }
  | { ok: false; code: 'invalid_credentials' | 'credentials_revoked'; expired?: boolean };

/** Cheap shape test: three base64url segments. Opaque tokens (osk_, opat_ ...) never match. */
export function looksLikeJwt(token: string): boolean {
  return /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/.test(token);
}

export class CustomerTokens {
  private key: Promise<Uint8Array> | null = null;

  constructor(
    private readonly sql: Sql,
    private readonly now: () => number = Date.now,
  ) {}

  private signingKey(): Promise<Uint8Array> {
    if (this.key === null) {
      const loading = this.loadKey();
      // A failed load (database down) must not poison every later call.
      loading.catch(() => {
        if (this.key === loading) this.key = null;
      });
      this.key = loading;
    }
    return this.key;
  }

  private async loadKey(): Promise<Uint8Array> {
    const fresh = randomBytes(32).toString('base64url');
    await this.sql`insert into service_secrets (name, value) values (${secretName}, ${fresh}) on conflict (name) do nothing`;
    const rows = await this.sql`select value from service_secrets where name = ${secretName}`;
    const value = rows[0]?.value;
    if (typeof value !== 'string') throw new Error('customer token secret missing after insert');
    return new Uint8Array(Buffer.from(value, 'base64url'));
  }

  async mint(req: MintCustomerToken): Promise<{ token: string; expiresAtMs: number }> {
    const ttlMs = req.ttlMs ?? limits.customerTokenLifetimeMsDefault;
    if (!Number.isSafeInteger(ttlMs) || ttlMs < 1000 || ttlMs > limits.customerTokenLifetimeMsMax) {
      throw new ApiError('validation_failed', {
        param: 'ttl',
        message: `A customer token lives 1 second to ${limits.customerTokenLifetimeMsMax / 1000} seconds.`,
      });
    }
    const key = await this.signingKey();
    const nowSeconds = Math.floor(this.now() / 1000);
    const expSeconds = nowSeconds + Math.ceil(ttlMs / 1000);
    const token = await new SignJWT({ env: req.environmentId, ext: req.externalId, cid: req.credentialId })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setIssuer(issuer)
      .setAudience(audience)
      .setSubject(req.customerId)
      .setIssuedAt(nowSeconds)
      .setExpirationTime(expSeconds)
      .sign(key);
    return { token, expiresAtMs: expSeconds * 1000 };
  }

  /** Signature, issuer, audience and expiry; expired tokens are credentials_revoked (expired), forged ones invalid. */
  async verify(token: string): Promise<CustomerTokenCheck> {
    const key = await this.signingKey();
    try {
      const { payload } = await jwtVerify(token, key, {
        algorithms: ['HS256'],
        issuer,
        audience,
        currentDate: new Date(this.now()),
      });
      const { sub, env, ext, cid, exp } = payload;
      if (
        typeof sub !== 'string' ||
        typeof env !== 'string' ||
        typeof ext !== 'string' ||
        typeof cid !== 'string' ||
        typeof exp !== 'number'
      ) {
        return { ok: false, code: 'invalid_credentials' };
      }
      return {
        ok: true,
        claims: { environmentId: env, customerId: sub, externalId: ext, credentialId: cid, expiresAtMs: exp * 1000 },
      };
    } catch (err) {
      if (err instanceof joseErrors.JWTExpired) return { ok: false, code: 'credentials_revoked', expired: true };
      if (err instanceof joseErrors.JOSEError) return { ok: false, code: 'invalid_credentials' };
      throw err;
    }
  }
}
