// Bearer secrets: generation, the sha256 hash we store and look up, and the hint shown in lists.
// Invariant: only hashToken(token) ever reaches storage or logs; the token is returned once.
// Never compare tokens directly: lookups go through the hash, which is constant-shape.
import { createHash } from 'node:crypto';
import { newSecret } from '../ids.js';

/** Bus channel on which a revoked credential is announced as JSON {id, token_hash}. */
export const revocationChannel = 'credentials.revoked';

export type TokenPrefix = 'osk' | 'opk' | 'opat' | 'oses';

/** 32 random bytes (about 52 base32 characters) after the prefix. */
export function newToken(prefix: TokenPrefix): string {
  return newSecret(prefix, 32);
}

export function hashToken(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

/** Last 4 characters: enough to tell keys apart in a list, too few to matter if leaked. */
export function tokenHint(token: string): string {
  return token.slice(-4);
}
