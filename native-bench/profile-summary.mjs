// Sums a V8 .cpuprofile (from `npm run bench -- --cpu-prof dir`) into self time per function and
// per file, the largest first. Usage: node native-bench/profile-summary.mjs file.cpuprofile [top]
// Pure reading and printing; the profile is never modified.
import { readFileSync } from 'node:fs';
import path from 'node:path';

const [file, topArg] = process.argv.slice(2);
if (!file) {
  console.error('usage: node native-bench/profile-summary.mjs <file.cpuprofile> [top=40]');
  process.exit(2);
}
const top = Number(topArg ?? 40);
const prof = JSON.parse(readFileSync(file, 'utf8'));
const byId = new Map(prof.nodes.map((n) => [n.id, n]));
const selfUs = new Map();
const dt = prof.timeDeltas;
for (let i = 0; i < prof.samples.length; i++) {
  const id = prof.samples[i];
  selfUs.set(id, (selfUs.get(id) ?? 0) + (dt[i] ?? 0));
}
let total = 0;
const fn = new Map();
const files = new Map();
for (const [id, us] of selfUs) {
  const n = byId.get(id);
  const cf = n.callFrame;
  const where = cf.url ? path.basename(cf.url.replace(/^file:\/\//, '')) : '(native)';
  const key = `${cf.functionName || '(anonymous)'} ${where}:${cf.lineNumber + 1}`;
  fn.set(key, (fn.get(key) ?? 0) + us);
  files.set(where, (files.get(where) ?? 0) + us);
  total += us;
}
const idle = [...fn].filter(([k]) => k.startsWith('(idle)')).reduce((a, [, v]) => a + v, 0);
const busy = total - idle;
const pct = (us) => `${((100 * us) / busy).toFixed(1).padStart(5)}%`;
console.log(`sampled ${(total / 1e6).toFixed(1)} s, busy ${(busy / 1e6).toFixed(1)} s (idle excluded from percentages)`);
console.log('\n-- self time by function --');
for (const [k, us] of [...fn].filter(([k]) => !k.startsWith('(idle)')).sort((a, b) => b[1] - a[1]).slice(0, top)) {
  console.log(`${pct(us)}  ${k}`);
}
console.log('\n-- self time by file --');
for (const [k, us] of [...files].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${pct(us)}  ${k}`);

// Inclusive time: each sample counts once for every distinct function on its stack.
const parent = new Map();
for (const n of prof.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const incl = new Map();
for (const [id, us] of selfUs) {
  const seen = new Set();
  for (let cur = id; cur !== undefined; cur = parent.get(cur)) {
    const cf = byId.get(cur).callFrame;
    const where = cf.url ? path.basename(cf.url.replace(/^file:\/\//, '')) : '(native)';
    const key = `${cf.functionName || '(anonymous)'} ${where}:${cf.lineNumber + 1}`;
    if (seen.has(key)) continue;
    seen.add(key);
    incl.set(key, (incl.get(key) ?? 0) + us);
  }
}
console.log('\n-- inclusive time by function --');
for (const [k, us] of [...incl].filter(([k]) => !k.startsWith('(idle)') && !k.startsWith('(root)')).sort((a, b) => b[1] - a[1]).slice(0, top)) {
  console.log(`${pct(us)}  ${k}`);
}
