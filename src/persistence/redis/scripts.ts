// The Lua scripts of the Redis adapters, loaded once from lua/*.lua and registered on a client
// with ioredis defineCommand (EVALSHA, falling back to EVAL once per connection).
// Invariant: a script's number of keys is the `-<n>` suffix of its file name (`-n`: variable, the
// caller passes the key count first). The .lua files are
// read from src/ also when running from dist/ (tsc does not copy them); never inline Lua here.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';

const luaDir = (() => {
  const here = dirname(fileURLToPath(import.meta.url));
  return join(here.replace(/([/\\])dist\1src\1/, '$1src$1'), 'lua');
})();

/** Command name on the client -> script file. Names carry a prefix so they cannot clash. */
const files = {
  loyaltyJournalAppend: 'append-2.lua',
  loyaltyJournalAppendMany: 'append-many-n.lua',
  loyaltyLeaseAcquire: 'acquire-2.lua',
  loyaltyLeaseRenewMany: 'renew-many-n.lua',
  loyaltyPexpireIfEqual: 'pexpire-if-equal-1.lua',
  loyaltyDeleteIfEqual: 'delete-if-equal-1.lua',
  loyaltyNodeHeartbeat: 'heartbeat-2.lua',
  loyaltyNodeAlive: 'alive-2.lua',
  loyaltyNodeLeave: 'leave-2.lua',
  loyaltyEventIdsClaim: 'event-ids-claim-2.lua',
  loyaltyEventIdsErase: 'event-ids-erase-1.lua',
} as const;

const sources = Object.entries(files).map(([name, file]) => {
  const match = /-(\d+|n)\.lua$/.exec(file);
  if (!match) throw new Error(`lua script ${file}: name must end in -<numberOfKeys>.lua or -n.lua`);
  const numberOfKeys = match[1] === 'n' ? undefined : Number(match[1]);
  return { name, numberOfKeys, lua: readFileSync(join(luaDir, file), 'utf8') };
});

/** The typed script commands; argument order is KEYS then ARGV, as in each file's header. */
export interface ScriptCommands {
  loyaltyJournalAppend(stream: string, lease: string, epoch: number, payload: Buffer): Promise<string>;
  /** numKeys, then stream/lease pairs, then epoch/payload pairs. */
  loyaltyJournalAppendMany(numKeys: number, ...keysThenArgs: Array<string | number | Buffer>): Promise<string[]>;
  loyaltyLeaseAcquire(lease: string, epochKey: string, nodeId: string, ttlMs: number): Promise<number | null>;
  /** numKeys, then the lease keys, then the ttl, then the expected holders in key order. */
  loyaltyLeaseRenewMany(numKeys: number, ...keysThenArgs: Array<string | number>): Promise<number[]>;
  /** Resets the key's ttl (a lease or a lock) only while it holds `value`; 1 when extended. */
  loyaltyPexpireIfEqual(key: string, value: string, ttlMs: number): Promise<number>;
  /** Deletes the key (a lease or a lock) only while it holds `value`; 1 when deleted. */
  loyaltyDeleteIfEqual(key: string, value: string): Promise<number>;
  loyaltyNodeHeartbeat(nodes: string, infos: string, nodeId: string, ttlMs: number, info: string): Promise<number>;
  loyaltyNodeAlive(nodes: string, infos: string): Promise<string[]>;
  loyaltyNodeLeave(nodes: string, infos: string, nodeId: string): Promise<number>;
  /**
   * The environment's bucket and erased bucket key prefixes and the packed items; answers item
   * number/fingerprint pairs, and minus item number/erased event id pairs.
   */
  loyaltyEventIdsClaimBuffer(prefix: string, erasedPrefix: string, items: Buffer): Promise<Array<number | Buffer>>;
  /** The environment's erased bucket key prefix, the packed items, then their event ids. */
  loyaltyEventIdsErase(erasedPrefix: string, items: Buffer, ...eventIds: string[]): Promise<number>;
}

export type ScriptedRedis = Redis & ScriptCommands;

/** Registers every script on the client (idempotent: a client shared by adapters gets them once). */
export function withScripts(redis: Redis): ScriptedRedis {
  for (const s of sources) {
    if (s.name in redis) continue;
    redis.defineCommand(s.name, s.numberOfKeys === undefined ? { lua: s.lua } : { numberOfKeys: s.numberOfKeys, lua: s.lua });
  }
  return redis as ScriptedRedis;
}
