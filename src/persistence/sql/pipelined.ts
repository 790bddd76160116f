// Pipelined statements inside one transaction: the projector's cycles and the snapshot saves write
// several statements of up to 1,000 rows each (a larger document costs PostgreSQL nearly twice per
// row: docs/bench/2026-11-26-statement-size.md). Waiting for each answer before sending the next
// made every statement a round trip plus a turn of a busy event loop, enough to let snapshot saves
// fall behind under sustained load (dirty actors, which cannot be passivated, piled up).
import type postgres from 'postgres';
import type { Tx } from './db.js';

type Tagged = (strings: TemplateStringsArray, ...values: unknown[]) => postgres.PendingQuery<postgres.Row[]>;

/**
 * Rows per statement, for every bulk statement of the read model and the snapshot store: PostgreSQL
 * parses a document of a megabyte or more at nearly twice the cost per row of a few hundred
 * kilobytes (idle database, events: ~14 us per row at 1,000-2,000 rows of ~330 bytes, ~26 us at
 * 3,000-4,000: the large allocations fault in fresh pages every statement;
 * docs/bench/2026-11-26-statement-size.md).
 */
export const rowsPerStatementMax = 1000;

/** Consecutive parts of at most `size` items. */
export function chunks<T>(xs: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < xs.length; i += size) out.push(xs.slice(i, i + size));
  return out;
}

/** Resolves after the event loop had a turn (I/O and timers included). */
const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * A view of `tx` whose tagged statements are sent at once, without waiting for their answers:
 * postgres.js pipelines them on the transaction's connection and PostgreSQL runs them in order,
 * so the order between statements is kept. Awaiting one resolves after a turn of the event loop,
 * so the caller builds its next statement's document after requests had their turn, not in one
 * synchronous stretch. flush() awaits every answer and rejects with the first failure, which then
 * aborts the transaction (later statements fail with it, and are answered by flush() too). Only
 * the tagged-template call pipelines; any other member is the transaction's own.
 */
export function pipelined(tx: Tx): { tx: Tx; flush(): Promise<void> } {
  const sent: Array<Promise<unknown>> = [];
  const send = (strings: TemplateStringsArray, ...values: unknown[]): Promise<void> => {
    const q = (tx as unknown as Tagged)(strings, ...values).execute();
    q.catch(() => {}); // answered by flush(); never an unhandled rejection
    sent.push(q);
    return nextTurn();
  };
  const view = new Proxy(send, { get: (_, prop) => Reflect.get(tx, prop) }) as unknown as Tx;
  return { tx: view, flush: async () => void (await Promise.all(sent)) };
}
