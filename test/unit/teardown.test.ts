// Teardown: the undo list of a start. Newest first, once, every step even after one fails (then
// the run rejects, naming the failed steps).
import t from 'tap';
import { Teardown } from '../../src/util/teardown.js';

t.test('undoes the parts newest first, once, however often it is asked', async (t) => {
  const done: string[] = [];
  const teardown = new Teardown(() => t.fail('no step fails'));
  teardown.add('storage', () => done.push('storage'));
  teardown.add('server', async () => {
    await new Promise((r) => setTimeout(r, 5));
    done.push('server');
  });
  teardown.add('timer', () => done.push('timer'));
  await Promise.all([teardown.run(), teardown.run()]);
  await teardown.run();
  t.same(done, ['timer', 'server', 'storage']);
});

t.test('a step that fails is reported and the older steps still run', async (t) => {
  const done: string[] = [];
  const failures: string[] = [];
  const teardown = new Teardown((err, step) => failures.push(`${step}: ${(err as Error).message}`));
  teardown.add('storage', () => done.push('storage'));
  teardown.add('placement', async () => {
    throw new Error('lease release timed out');
  });
  teardown.add('sync', () => {
    throw new Error('thrown at once');
  });
  teardown.add('gateway', () => done.push('gateway'));
  await t.rejects(teardown.run(), { message: 'stopping failed: sync, placement' });
  t.same(done, ['gateway', 'storage']);
  t.same(failures, ['sync: thrown at once', 'placement: lease release timed out']);
  await t.rejects(teardown.run(), { message: 'stopping failed: sync, placement' }, 'a later call answers the same');
});

t.test('a part that starts after the teardown ran is refused, not silently left running', async (t) => {
  const teardown = new Teardown(() => {});
  await teardown.run();
  t.throws(() => teardown.add('late', () => {}), /teardown already ran; "late"/);
});
