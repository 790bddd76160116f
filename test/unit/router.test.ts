import t from 'tap';
import { Router } from '../../src/gateway/router.js';

function build(): Router<string> {
  const r = new Router<string>();
  r.add('GET', '/v1/customers', 'list');
  r.add('POST', '/v1/customers', 'create');
  r.add('GET', '/v1/customers/search', 'search');
  r.add('GET', '/v1/customers/:id', 'get');
  r.add('PATCH', '/v1/customers/:id', 'patch');
  r.add('GET', '/v1/customers/:customer_id/aliases', 'aliases');
  r.add('DELETE', '/v1/customers/:customer_id/aliases/:alias', 'unalias');
  r.add('GET', '/v1/customers/search/saved', 'saved');
  r.add('GET', '/healthz', 'health');
  return r;
}

t.test('static and param routes by method', async (t) => {
  const r = build();
  t.same(r.find('GET', '/v1/customers'), { value: 'list', pattern: '/v1/customers', params: {} });
  t.equal(r.find('POST', '/v1/customers')?.value, 'create');
  t.same(r.find('GET', '/v1/customers/cust_1'), {
    value: 'get',
    pattern: '/v1/customers/:id',
    params: { id: 'cust_1' },
  });
  t.equal(r.find('PATCH', '/v1/customers/cust_1')?.value, 'patch');
  t.equal(r.find('GET', '/healthz')?.value, 'health');
});

t.test('static segment wins over a param, and the walk backtracks', async (t) => {
  const r = build();
  t.equal(r.find('GET', '/v1/customers/search')?.value, 'search');
  t.equal(r.find('GET', '/v1/customers/search/saved')?.value, 'saved');
  // 'search' matches statically first, then fails at 'aliases' and falls back to the param.
  t.same(r.find('GET', '/v1/customers/search/aliases')?.params, { customer_id: 'search' });
  // Same position, different param names on different routes.
  t.same(r.find('DELETE', '/v1/customers/c9/aliases/a%20b')?.params, { customer_id: 'c9', alias: 'a b' });
});

t.test('misses: unknown path, wrong method, trailing slash, empty segment, bad escape', async (t) => {
  const r = build();
  t.equal(r.find('GET', '/v1/nope'), null);
  t.equal(r.find('DELETE', '/v1/customers'), null);
  t.equal(r.find('PUT', '/v1/customers/c1'), null);
  t.equal(r.find('GET', '/v1/customers/'), null);
  t.equal(r.find('GET', '/v1/customers//aliases'), null);
  t.equal(r.find('GET', '/v1/customers/%E0%A4%A'), null);
  t.equal(r.find('GET', 'v1/customers'), null);
  t.equal(r.find('GET', ''), null);
});

t.test('conflicting registrations throw', async (t) => {
  const r = build();
  t.throws(() => r.add('GET', '/v1/customers/:other', 'x'), /route conflict/);
  t.throws(() => r.add('GET', '/v1/a/:x/:x', 'x'), /duplicate param/);
  t.throws(() => r.add('GET', 'v1/a', 'x'), /must start with/);
  t.equal(r.routes().length, 9);
});
