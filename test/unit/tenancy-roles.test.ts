// Pure tenancy pieces: the role -> scope table (each role contains the one below), default key
// scopes, effective scopes capped by role, slugs, email normalization and Bearer header parsing.
import t from 'tap';
import { rolesDescription } from '../../src/gateway/openapi.js';
import { bearerToken } from '../../src/tenancy/authenticator.js';
import { looksLikeJwt } from '../../src/tenancy/customer-tokens.js';
import {
  customerTokenScopes,
  defaultSecretKeyScopes,
  effectiveScopes,
  publishableKeyScopes,
  roleScopes,
} from '../../src/tenancy/roles.js';
import { normalizeEmail, slugify } from '../../src/tenancy/service.js';
import { hashToken, newToken, tokenHint } from '../../src/tenancy/tokens.js';
import { allScopes } from '../../src/tenancy/types.js';

t.test('roles nest: viewer < editor < admin <= owner', async (t) => {
  const order = ['viewer', 'editor', 'admin', 'owner'] as const;
  for (let i = 1; i < order.length; i++) {
    const lower = roleScopes[order[i - 1]!];
    const upper = roleScopes[order[i]!];
    for (const s of lower) t.ok(upper.has(s), `${order[i]} has ${s}`);
  }
  t.ok(roleScopes.editor.size > roleScopes.viewer.size, 'editors hold more than viewers');
  t.ok(roleScopes.admin.size > roleScopes.editor.size, 'admins hold more than editors');
  t.same([...roleScopes.owner].sort(), [...roleScopes.admin].sort(), "owners hold the admin's scopes (their extras are role checks)");
  t.equal(roleScopes.owner.size, allScopes.length);
});

// decisions.md: "viewer reads; editor also writes programs, customers, ledger; admin also keys,
// webhooks, members, confirmations; owner also billing and the organization itself".
t.test('the role table of decisions.md, scope by scope', async (t) => {
  const reads = allScopes.filter((s) => s.endsWith(':read'));
  const table: Record<'viewer' | 'editor' | 'admin', string[]> = {
    viewer: reads,
    editor: [...reads, 'programs:write', 'customers:write', 'ledger:write', 'events:write', 'config:write'],
    admin: [...reads, 'programs:write', 'customers:write', 'ledger:write', 'events:write', 'config:write', 'webhooks:write', 'notifications:write', 'customer_sessions:write'],
  };
  for (const [role, scopes] of Object.entries(table)) {
    t.same([...roleScopes[role as keyof typeof table]].sort(), [...scopes].sort(), role);
  }
  t.ok(roleScopes.admin.has('customer_sessions:write'), 'admins mint customer tokens and grant the scope to keys');
  t.notOk(roleScopes.editor.has('customer_sessions:write'), 'editors do not');
  t.ok(roleScopes.editor.has('config:write'), 'editors write program configuration: change sets, the test clock');
  t.notOk(roleScopes.editor.has('webhooks:write'), 'webhooks are admin');
});

t.test('the OpenAPI document states the same table', async (t) => {
  const text = rolesDescription();
  t.comment(text);
  t.match(text, 'viewer: events:read, customers:read, ledger:read, programs:read, notifications:read, webhooks:read, audit:read, config:read.');
  t.match(text, 'editor: also programs:write, customers:write, ledger:write, events:write, config:write.');
  t.match(text, 'admin: also webhooks:write, notifications:write, customer_sessions:write; and manages API keys, members and change-set confirmations');
  t.match(text, "owner: the admin's scopes; and grants or removes owner");
});

t.test('default scopes of keys and customer tokens', async (t) => {
  t.same(defaultSecretKeyScopes, allScopes.filter((s) => s !== 'customer_sessions:write'));
  t.same(publishableKeyScopes, ['events:write']);
  for (const s of customerTokenScopes) t.notOk(s.endsWith(':write') && s !== 'notifications:write', `customer scope ${s}`);
  t.notOk(customerTokenScopes.has('customer_sessions:write'));
});

t.test('effective scopes: issued scopes capped by the role', async (t) => {
  t.same([...effectiveScopes(allScopes, 'viewer')].sort(), [...roleScopes.viewer].sort());
  t.same([...effectiveScopes(['events:write', 'customers:read', 'bogus'], 'viewer')], ['customers:read']);
  t.same([...effectiveScopes(['events:write'], 'owner')], ['events:write']);
});

t.test('slugs and emails', async (t) => {
  const cases: Array<[string, string]> = [
    ['Acme Inc', 'acme-inc'],
    ['  Acme,   Inc.  ', 'acme-inc'],
    ['Café Über', 'cafe-uber'],
    ['!!!', 'org'],
    ['日本', 'org'],
    ['a'.repeat(60), 'a'.repeat(48)],
    [`${'a'.repeat(47)} b`, 'a'.repeat(47)],
  ];
  for (const [name, slug] of cases) t.equal(slugify(name), slug, name);
  t.equal(normalizeEmail('  Mixed.Case@Example.COM '), 'mixed.case@example.com');
});

t.test('tokens', async (t) => {
  const a = newToken('osk');
  t.match(a, /^osk_[0-9A-Z]{52}$/);
  t.not(newToken('osk'), a, 'random');
  t.equal(tokenHint(a), a.slice(-4));
  t.match(hashToken(a), /^[0-9a-f]{64}$/);
  t.equal(hashToken(a), hashToken(a));
  t.ok(looksLikeJwt('eyJh.eyJz.sig-_'));
  t.notOk(looksLikeJwt(a));
  t.notOk(looksLikeJwt('a.b'));
});

t.test('Authorization header parsing', async (t) => {
  t.equal(bearerToken('Bearer abc'), 'abc');
  t.equal(bearerToken('bearer abc'), 'abc');
  t.equal(bearerToken('BEARER  abc '), 'abc');
  for (const bad of [undefined, '', 'Bearer', 'Bearer ', 'Basic abc', 'Token abc', 'abc']) {
    t.throws(() => bearerToken(bad), { code: 'authentication_required' }, String(bad));
  }
  t.throws(() => bearerToken(`Bearer ${'x'.repeat(4097)}`), { code: 'invalid_credentials' });
});
