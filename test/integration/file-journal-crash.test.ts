// Crash safety of the embedded journal: a child process appends as fast as it can and prints every
// acked offset; we SIGKILL it mid-stream, reopen the directory and require every acked entry to be
// there exactly once, in ack order, under its offset. Three crashes on the same directory, so
// recovery also has to cope with the tails earlier crashes left. No timing is asserted.
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { FileJournal } from '../../src/persistence/file/file-journal.js';
import { compareOffsets, type JournalEntry, offsetZero } from '../../src/persistence/ports.js';

const fixture = fileURLToPath(new URL('../fixtures/file-journal-writer.ts', import.meta.url));
// The same TypeScript loader tap runs this file with.
const tsLoader = import.meta.resolve('@tapjs/typescript/import');

interface Acked {
  partition: number;
  offset: string;
  payload: string;
}

function runAndKill(dir: string, run: number, appendForMs: number): Promise<Acked[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', tsLoader, fixture, dir, String(run)], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, TS_NODE_TRANSPILE_ONLY: '1' },
    });
    let out = '';
    let err = '';
    let timer: NodeJS.Timeout | undefined;
    child.stdout.setEncoding('utf8');
    child.stderr.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => {
      out += chunk;
      if (!timer && out.startsWith('ready\n')) timer = setTimeout(() => child.kill('SIGKILL'), appendForMs);
    });
    child.stderr.on('data', (chunk: string) => {
      err += chunk;
    });
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (timer) clearTimeout(timer);
      if (signal !== 'SIGKILL') {
        reject(new Error(`writer exited by itself (code ${code}): ${err}`));
        return;
      }
      // Only complete lines: a line cut by the kill was not fully printed.
      const lines = out.split('\n').slice(1, -1);
      resolve(
        lines.map((l) => {
          const [partition, offset, payload] = l.split(' ');
          return { partition: Number(partition), offset: offset!, payload: payload! };
        }),
      );
    });
  });
}

async function readAll(journal: FileJournal, partition: number): Promise<JournalEntry[]> {
  const out: JournalEntry[] = [];
  let after = offsetZero;
  for (;;) {
    const page = await journal.read(partition, after, 5000);
    if (page.length === 0) return out;
    out.push(...page);
    after = page[page.length - 1]!.offset;
  }
}

t.test('every acked append survives kill -9, three times on one directory', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'journal-crash-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const acked: Acked[] = [];

  for (let run = 1; run <= 3; run++) {
    const got = await runAndKill(dir, run, 300);
    t.ok(got.length > 0, `run ${run}: the writer acked ${got.length} appends before the kill`);
    acked.push(...got);

    const journal = await FileJournal.open(dir, { currentEpoch: () => 1 });
    const problems: string[] = [];
    for (let p = 0; p < 8; p++) {
      const entries = await readAll(journal, p);
      const at = new Map<string, number>();
      entries.forEach((e, i) => {
        if (at.has(e.offset)) problems.push(`p${p}: offset ${e.offset} twice`);
        at.set(e.offset, i);
        if (i > 0 && compareOffsets(entries[i - 1]!.offset, e.offset) >= 0) problems.push(`p${p}: ${e.offset} out of order`);
      });
      const mine = acked.filter((a) => a.partition === p);
      let previous = -1;
      for (const a of mine) {
        const i = at.get(a.offset);
        if (i === undefined) {
          problems.push(`p${p}: acked ${a.offset} (${a.payload}) is missing`);
          continue;
        }
        const payload = new TextDecoder().decode(entries[i]!.payload);
        if (payload !== a.payload) problems.push(`p${p}: ${a.offset} holds ${payload}, acked ${a.payload}`);
        if (i <= previous) problems.push(`p${p}: ${a.offset} is not in ack order`);
        previous = i;
      }
      const payloads = new Set(entries.map((e) => new TextDecoder().decode(e.payload)));
      if (payloads.size !== entries.length) problems.push(`p${p}: a payload was written twice`);
    }
    await journal.close();
    t.same(problems.slice(0, 10), [], `run ${run}: all ${acked.length} acked entries present once, in order`);
  }
});
