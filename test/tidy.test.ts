// Style rules that a reviewer would otherwise have to remember (STYLE.md): what each folder may
// import, and no clock or randomness in pure domain code.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import t from 'tap';

const root = join(import.meta.dirname, '..');

function files(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) {
      if (name !== 'gen') out.push(...files(p));
    } else if (name.endsWith('.ts')) out.push(p);
  }
  return out;
}

function imports(src: string): string[] {
  return [...src.matchAll(/^\s*import\s[^'"]*['"]([^'"]+)['"]/gm)].map((m) => m[1]!);
}

const srcFiles = files(join(root, 'src'));

t.test('domain/ is pure: imports only domain, util, error codes, limits and pure libraries; no clock, no randomness, no I/O', async (t) => {
  const allowedPackages = new Set(['zod', 'luxon']);
  for (const f of srcFiles.filter((f) => f.includes('/src/domain/'))) {
    const src = readFileSync(f, 'utf8');
    const rel = relative(root, f);
    for (const spec of imports(src)) {
      if (spec.startsWith('.')) {
        const target = join(f, '..', spec);
        const r = relative(join(root, 'src'), target);
        const ok = r.startsWith('domain/') || r.startsWith('util/') || r === 'errors/codes.js' || r === 'limits.js';
        t.ok(ok, `${rel} imports ${spec}`);
      } else {
        t.ok(allowedPackages.has(spec), `${rel} imports package ${spec}`);
      }
    }
    const code = src.replace(/\/\/.*$/gm, '').replace(/\/\*[\s\S]*?\*\//g, '');
    t.notMatch(code, /Date\.now\(|new Date\(\)|Math\.random\(|performance\.now\(/, `${rel}: no clock or randomness`);
    t.notMatch(code, /\bawait\b|\bfetch\(|node:fs|node:net/, `${rel}: no I/O`);
  }
});

t.test('only persistence/ talks to Redis and PostgreSQL; only gateway/ and bench import uWebSockets.js', async (t) => {
  for (const f of srcFiles) {
    const rel = relative(root, f);
    for (const spec of imports(readFileSync(f, 'utf8'))) {
      if (spec === 'ioredis' || spec === 'postgres') t.ok(rel.startsWith('src/persistence/'), `${rel} imports ${spec}`);
      if (spec === 'uWebSockets.js') t.ok(rel.startsWith('src/gateway/'), `${rel} imports ${spec}`);
    }
  }
});

t.test('handlers never write an error status number', async (t) => {
  for (const f of srcFiles.filter((f) => f.includes('/gateway/handlers/'))) {
    const src = readFileSync(f, 'utf8');
    t.notMatch(src, /status:\s*(4\d\d|5\d\d)/, `${relative(root, f)} throws ApiError instead`);
  }
});

t.test('every source file opens with a comment saying what it owns', async (t) => {
  for (const f of srcFiles) {
    const first = readFileSync(f, 'utf8').split('\n')[0] ?? '';
    t.ok(first.startsWith('//') || first.startsWith('/*'), relative(root, f));
  }
});
