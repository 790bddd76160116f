// The customers a stored Idempotency-Key answer is about (answerCustomerIds): what the handler
// named and every customer id the answer shows. Only ids are kept: during a rolling deploy an
// owner on the previous version answers a ledger entry without its customer, and an array holding
// undefined cannot be stored (postgres.js refuses it), so the answer would never be stored.
import t from 'tap';
import { answerCustomerIds } from '../../src/gateway/idempotency.js';

const a = 'cust_00001M8F6PCG7YEW9WC6WDQE5V13F';
const b = 'cust_00901M8F6PCG7DC3Z0BCQSFA9VFZ6';

t.test('a named id and the ids the text shows, sorted without repeats', async (t) => {
  t.same(answerCustomerIds(JSON.stringify({ id: b, merged_from: a }), [b]), [a, b]);
});

t.test('a ledger answer from an owner on the previous version (no customer named): nothing undefined is kept', async (t) => {
  // Given a named list holding undefined (the old owner's reply has no customerId)
  const named = [undefined] as unknown as string[];
  // When the answer's customers are listed
  const ids = answerCustomerIds(JSON.stringify({ id: 'le_1', amount: 5 }), named);
  // Then the list is empty, and can be stored
  t.same(ids, []);
  t.ok(ids.every((id) => typeof id === 'string'));
});

t.test('null, empty and non-id names are dropped; ids in the text are still found', async (t) => {
  t.same(answerCustomerIds(`{"customer_id":"${a}"}`, [null, '', 'not-an-id'] as unknown as string[]), [a]);
});
