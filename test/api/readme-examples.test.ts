// The README is the user guide: every ```sh block in it runs, in order, as one shell session
// against a fresh embedded service (what `npm start` serves), with curl and jq as the README uses
// them. No example may answer an error, and a few answers the README's comments promise are
// checked. A README edit that breaks an example fails here.
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import t from 'tap';
import { startService } from '../../src/service.js';
import { embeddedConfig } from '../helpers/service.js';

/** The README's shell blocks, in order, without the quick start's npm commands (this test is their run). */
export function readmeShellBlocks(readme: string): string[] {
  const blocks = [...readme.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!);
  return blocks.filter((b) => !/^npm ci/m.test(b));
}

function run(script: string, cwd: string): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', script], { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, out }));
  });
}

t.test('every README example runs as written against npm start', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'readme-examples-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const service = await startService(embeddedConfig(join(dir, 'data')), pino({ level: 'silent' }));
  t.teardown(() => service.stop());
  const blocks = readmeShellBlocks(await readFile(new URL('../../README.md', import.meta.url), 'utf8'));
  t.ok(blocks.length >= 7, `${blocks.length} example blocks`);
  const script = [
    'set -u -o pipefail',
    // uuidgen is not installed everywhere (this project's image lacks it): the examples must run
    // without it, so here it fails as a missing command does.
    'uuidgen() { echo "uuidgen: command not found" >&2; return 127; }',
    ...blocks.map((b, i) => `echo "=== block ${i} ==="\n${b.replaceAll('localhost:8080', `localhost:${service.httpPort}`)}`),
  ].join('\n');
  const { code, out } = await run(script, dir);
  t.equal(code, 0, 'the script ran to its end');
  const errors = out.split('\n').filter((l) => l.includes('"error":{'));
  t.same(errors, [], 'no example answered an error');
  t.notMatch(out, /null\/|\/null\b/, 'no path was built from an id that jq did not find');
  t.match(out, /"counters":\{"gem_buys_7d":3\}/, 'the counter example counts the three purchases');
  t.match(out, /"status":"redeemed"/, 'the reward is redeemed');
  t.match(out, /"decision":"admit"/, 'the held player is admitted by the review');
});
