// The content fingerprint shared by POST /v1/events and match players' events: ids are bound to it
// forever (environment register, customers' records), so its formula must never change; the
// caller's customer identifier is part of the content, property key order is not.
import t from 'tap';
import { eventFingerprint } from '../../src/domain/event-fingerprint.js';
import { canonicalJson, hash53 } from '../../src/util/canonical-json.js';

t.test('the fingerprint ids were bound to before it was shared', async (t) => {
  const properties = { kills: 3, match_id: 'm1', nested: { b: 1, a: [1, 'x'] } };
  t.equal(eventFingerprint('match.completed', 'player-7', 1_700_000_000_000, properties), hash53(canonicalJson(['match.completed', 'player-7', 1_700_000_000_000, properties])));
});

t.test('same content in any key order; another customer, name, instant or property is other content', async (t) => {
  const fp = eventFingerprint('match.completed', 'a', 1000, { kills: 3, won: true });
  t.equal(eventFingerprint('match.completed', 'a', 1000, { won: true, kills: 3 }), fp);
  t.not(eventFingerprint('match.completed', 'b', 1000, { kills: 3, won: true }), fp);
  t.not(eventFingerprint('match.lost', 'a', 1000, { kills: 3, won: true }), fp);
  t.not(eventFingerprint('match.completed', 'a', 1001, { kills: 3, won: true }), fp);
  t.not(eventFingerprint('match.completed', 'a', 1000, { kills: 3, won: false }), fp);
});
