// The registry reachable from this workplace serves only this platform's binary packages, so
// `npm install` cannot record the other platforms' optional packages (biome, buf, msgpackr-extract)
// in package-lock.json, and `npm ci` then refuses the lock as out of sync. This adds an entry for
// each missing optional platform package, with the os/cpu its name declares, so npm ci skips them
// on this platform exactly as it would with a complete lock. Run after `npm install` changes the lock.
import { readFileSync, writeFileSync } from 'node:fs';

const lock = JSON.parse(readFileSync('package-lock.json', 'utf8'));
const pkgs = lock.packages;
let added = 0;
for (const [path, meta] of Object.entries(pkgs)) {
  for (const [name, version] of Object.entries(meta.optionalDependencies ?? {})) {
    const key = `node_modules/${name}`;
    if (pkgs[key]) continue;
    const lower = name.toLowerCase();
    const os = ['android', 'darwin', 'win32', 'linux', 'freebsd', 'openbsd', 'sunos', 'aix'].find((o) => lower.includes(o));
    const cpu = ['arm64', 'armv7', 'x64', 'ia32', 'arm', 'ppc64', 's390x', 'riscv64'].find((c) => lower.includes(`-${c}`));
    if (!os || !cpu) continue;
    const entry = { version, cpu: [cpu === 'armv7' ? 'arm' : cpu], os: [os], optional: true };
    if (meta.dev) entry.dev = true;
    if (lower.includes('musl')) entry.libc = ['musl'];
    pkgs[key] = entry;
    added++;
    void path;
  }
}
writeFileSync('package-lock.json', `${JSON.stringify(lock, null, 2)}\n`);
console.log(`lock-optional-stubs: ${added} entries added`);
