// appendMany for journals whose append already batches a tick's calls (file journal: one writev
// and one fdatasync per tick; memory journal): issue them together and report per item.
import { FencedError, type Offset } from './ports.js';

export function appendEach(
  append: (partition: number, epoch: number, payload: Uint8Array) => Promise<Offset>,
  items: ReadonlyArray<{ partition: number; epoch: number; payload: Uint8Array }>,
): Promise<Array<Offset | FencedError>> {
  return Promise.all(
    items.map((it) =>
      append(it.partition, it.epoch, it.payload).catch((err: unknown) => {
        if (err instanceof FencedError) return err;
        throw err;
      }),
    ),
  );
}
