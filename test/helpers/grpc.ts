// Public gRPC test helpers shared by the API tests: an event message and call metadata with a
// bearer credential.
import { Metadata } from '@grpc/grpc-js';
import type { Event } from '../../src/grpc/gen/public/v1/events.js';

/** A second ago, as RFC 3339. */
export const now = () => new Date(Date.now() - 1000).toISOString();

/** A `level.completed` event of `customerId`, a second old, with `{"level":3}`. */
export const ev = (id: string, customerId: string, extra: Partial<Event> = {}): Event => ({
  id,
  name: 'level.completed',
  customerId,
  occurredAt: now(),
  propertiesJson: '{"level":3}',
  ...extra,
});

/** Call metadata with `authorization: Bearer <token>` and any other keys given. */
export function bearer(token: string, extra: Record<string, string> = {}): Metadata {
  const md = new Metadata();
  md.set('authorization', `Bearer ${token}`);
  for (const [k, v] of Object.entries(extra)) md.set(k, v);
  return md;
}
