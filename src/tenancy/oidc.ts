// Verification of OpenID Connect ID tokens for POST /v1/auth/sessions: signature against the
// configured issuer's keys (a JWKS URL, fetched and cached by jose, or a local JWKS file read once),
// then issuer, audience and expiry. Only asymmetric algorithms: an ID token is never checked with a
// shared secret. Never trusts an unverified claim; never logs the token.
import { readFileSync } from 'node:fs';
import { createLocalJWKSet, createRemoteJWKSet, errors as joseErrors, type JSONWebKeySet, jwtVerify } from 'jose';
import type { Config } from '../config.js';
import { ApiError } from '../errors/api-error.js';

export interface OidcOptions {
  issuer: string;
  audience: string;
  jwksUrl?: string;
  jwksFile?: string;
}

export interface VerifiedIdentity {
  subject: string;
  email: string;
  name: string | null;
}

const algorithms = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA'];

/** OIDC options from configuration, or undefined when sign-in is not configured on this deployment. */
export function oidcOptionsFromConfig(config: Config): OidcOptions | undefined {
  if (!config.OIDC_ISSUER || !config.OIDC_AUDIENCE) return undefined;
  if (!config.OIDC_JWKS_URL && !config.OIDC_JWKS_FILE) return undefined;
  return {
    issuer: config.OIDC_ISSUER,
    audience: config.OIDC_AUDIENCE,
    jwksUrl: config.OIDC_JWKS_URL,
    jwksFile: config.OIDC_JWKS_FILE,
  };
}

type KeyResolver = ReturnType<typeof createLocalJWKSet> | ReturnType<typeof createRemoteJWKSet>;

export class OidcVerifier {
  private readonly keys: KeyResolver;

  constructor(private readonly opts: OidcOptions) {
    if (opts.jwksUrl) {
      this.keys = createRemoteJWKSet(new URL(opts.jwksUrl));
    } else if (opts.jwksFile) {
      // Read at start-up so a missing or malformed key file fails the boot, not a user's sign-in.
      const jwks = JSON.parse(readFileSync(opts.jwksFile, 'utf8')) as JSONWebKeySet;
      this.keys = createLocalJWKSet(jwks);
    } else {
      throw new Error('OIDC needs a JWKS URL or a JWKS file');
    }
  }

  /** invalid_credentials for anything wrong with the token; a JWKS fetch failure stays a 5xx. */
  async verify(idToken: string, nowMs: number): Promise<VerifiedIdentity> {
    let payload: Record<string, unknown>;
    try {
      ({ payload } = await jwtVerify(idToken, this.keys, {
        issuer: this.opts.issuer,
        audience: this.opts.audience,
        algorithms,
        currentDate: new Date(nowMs),
        requiredClaims: ['sub', 'exp'],
      }));
    } catch (err) {
      // The provider's key endpoint failing is our outage, not the caller's bad token.
      if (err instanceof joseErrors.JWKSTimeout || err instanceof joseErrors.JWKSInvalid) throw err;
      if (err instanceof joseErrors.JOSEError) {
        const message =
          err instanceof joseErrors.JWTExpired ? 'The ID token has expired.' : 'The ID token could not be verified.';
        throw new ApiError('invalid_credentials', { param: 'id_token', message });
      }
      throw err;
    }
    const { sub, email, name, email_verified: emailVerified } = payload;
    if (typeof sub !== 'string' || sub.length === 0) {
      throw new ApiError('invalid_credentials', { param: 'id_token', message: 'The ID token has no subject.' });
    }
    if (typeof email !== 'string' || email.length === 0 || email.length > 254 || !email.includes('@')) {
      throw new ApiError('invalid_credentials', { param: 'id_token', message: 'The ID token carries no email claim.' });
    }
    // An identity provider that says the address is unverified must not sign anyone into the account
    // that owns that address; providers that omit the claim are trusted, as they vouch for it.
    if (emailVerified === false) {
      throw new ApiError('invalid_credentials', {
        param: 'id_token',
        message: 'The identity provider has not verified this email address.',
      });
    }
    return { subject: sub, email, name: typeof name === 'string' && name.length > 0 ? name.slice(0, 120) : null };
  }
}
