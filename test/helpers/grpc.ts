// Public gRPC test helpers shared by the API tests: an event message, call metadata with a bearer
// credential, and clients of a started service.
import { credentials, Metadata } from '@grpc/grpc-js';
import { CustomersClient } from '../../src/grpc/gen/public/v1/customers.js';
import { type Event, EventsClient } from '../../src/grpc/gen/public/v1/events.js';
import { MatchesClient } from '../../src/grpc/gen/public/v1/matches.js';

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

/** Clients of the three public services on a started service's public gRPC port, closed at teardown. */
export function publicClients(t: { teardown(fn: () => unknown): void }, publicGrpcPort: number) {
  const target = `127.0.0.1:${publicGrpcPort}`;
  const events = new EventsClient(target, credentials.createInsecure());
  const customers = new CustomersClient(target, credentials.createInsecure());
  const matches = new MatchesClient(target, credentials.createInsecure());
  t.teardown(() => {
    events.close();
    customers.close();
    matches.close();
  });
  return { events, customers, matches };
}
