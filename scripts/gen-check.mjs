// CI check: the committed generated code (src/grpc/gen) is exactly what `npm run gen` produces
// from proto/ today. Regenerates into a temporary directory with the local buf and ts-proto
// (nothing downloaded), compares byte for byte, and exits 1 listing every differing file.
// Never writes into the work tree.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(fileURLToPath(new URL('..', import.meta.url)));
const genRel = join('src', 'grpc', 'gen');
const committedDir = join(root, genRel);
const buf = join(root, 'node_modules', '.bin', process.platform === 'win32' ? 'buf.cmd' : 'buf');

/** Relative paths of every file under dir (empty when dir does not exist). */
function listFiles(dir) {
  const out = [];
  const walk = (d) => {
    for (const name of readdirSync(d)) {
      const full = join(d, name);
      if (statSync(full).isDirectory()) walk(full);
      else out.push(relative(dir, full));
    }
  };
  try {
    walk(dir);
  } catch (err) {
    if (err.code !== 'ENOENT') throw err;
  }
  return out.sort();
}

const tmp = mkdtempSync(join(tmpdir(), 'gen-check-'));
try {
  // Same template and input as `npm run gen`; -o prefixes the template's output paths.
  execFileSync(buf, ['generate', 'proto', '-o', tmp], { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] });
  const freshDir = join(tmp, genRel);
  const fresh = listFiles(freshDir);
  const committed = listFiles(committedDir);
  const problems = [];
  for (const f of fresh) {
    if (!committed.includes(f)) problems.push(`missing (not committed): ${join(genRel, f)}`);
    else if (!readFileSync(join(freshDir, f)).equals(readFileSync(join(committedDir, f)))) {
      problems.push(`differs: ${join(genRel, f)}`);
    }
  }
  for (const f of committed) {
    if (!fresh.includes(f)) problems.push(`stale (no longer generated): ${join(genRel, f)}`);
  }
  if (problems.length > 0) {
    console.error(`gen:check: ${genRel} is not current with proto/ (${problems.length} file(s)):`);
    for (const p of problems) console.error(`  ${p}`);
    console.error('Run `npm run gen` and commit the result.');
    process.exit(1);
  }
  console.log(`gen:check: ${genRel} is current (${fresh.length} files).`);
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
