// Embedded PostgreSQL: PGlite (WASM Postgres, persisted under a directory or in memory) served on
// 127.0.0.1 with pglite-socket, so the same `postgres` driver code runs in both storage modes.
// Invariants: ONE client connection at a time (PGlite is a single backend session; callers use
// max: 1); every new connection starts like a fresh session with its startup parameters applied.
// It must never be exposed beyond loopback, and it does not fsync: the journal carries durability.
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';

export interface EmbeddedPostgres {
  /** postgres:// URL of the local server; pass it to openSql with max: 1. */
  url: string;
  close(): Promise<void>;
}

/** Protocol 3.0 startup message code (the int32 after the length). */
const protocolV3 = 196608;
/** Startup keys that are not settings: PGlite has one user and one database. */
const notSettings = new Set(['user', 'database', 'replication', 'options']);

/** Parses a StartupMessage (length, version, then key\0value\0 pairs, then \0), or null. */
export function parseStartupMessage(message: Uint8Array): Map<string, string> | null {
  if (message.length < 8) return null;
  const view = new DataView(message.buffer, message.byteOffset, message.byteLength);
  if (view.getInt32(0) !== message.length || view.getInt32(4) !== protocolV3) return null;
  const params = new Map<string, string>();
  const text = new TextDecoder();
  let at = 8;
  const next = (): string | null => {
    const end = message.indexOf(0, at);
    if (end < 0 || end === at) return null;
    const s = text.decode(message.subarray(at, end));
    at = end + 1;
    return s;
  };
  for (;;) {
    const key = next();
    if (key === null) break;
    const value = next() ?? '';
    params.set(key, value);
  }
  return params;
}

function simpleQuery(sql: string): Uint8Array {
  const body = new TextEncoder().encode(sql);
  const msg = new Uint8Array(1 + 4 + body.length + 1);
  msg[0] = 0x51; // 'Q'
  new DataView(msg.buffer).setInt32(1, 4 + body.length + 1);
  msg.set(body, 5);
  return msg;
}

/** The first ErrorResponse message text in a backend reply, or null. */
function errorIn(reply: Uint8Array): string | null {
  const view = new DataView(reply.buffer, reply.byteOffset, reply.byteLength);
  let at = 0;
  while (at + 5 <= reply.length) {
    const type = reply[at];
    const len = view.getInt32(at + 1);
    if (type === 0x45 /* 'E' */) {
      const fields = new TextDecoder().decode(reply.subarray(at + 5, at + 1 + len));
      const m = fields.split('\0').find((f) => f.startsWith('M'));
      return m ? m.slice(1) : 'unknown error';
    }
    at += 1 + len;
  }
  return null;
}

const literal = (s: string) => `'${s.replace(/'/g, "''")}'`;

/**
 * PGlite answers the startup message but ignores its parameters (search_path stays 'public'),
 * and its one session outlives client connections (prepared statements and settings would leak
 * into the next connection, where postgres.js re-prepares the same statement names and fails).
 * So after each startup we reset the session and apply the parameters ourselves, inside the
 * exclusive section the socket server already holds, before the client sends anything else.
 */
function withStartupParams(db: PGlite): PGlite {
  const execStream = db.execProtocolRawStream.bind(db);
  const run = async (q: string) => {
    // Through the stream API with our own sink: PGlite keeps the last stream's output callback,
    // so execProtocolRaw here would leak these replies to the client's socket.
    const chunks: Uint8Array[] = [];
    await execStream(simpleQuery(q), { onRawData: (d) => chunks.push(d.slice()) });
    const err = errorIn(Buffer.concat(chunks));
    if (err) throw new Error(`embedded postgres: ${q}: ${err}`);
  };
  const patched: PGlite['execProtocolRawStream'] = async (message, options) => {
    const params = parseStartupMessage(message);
    await execStream(message, options);
    if (!params) return;
    // DISCARD ALL refuses to run in a transaction block, so each statement is its own query.
    await run('discard all');
    for (const [key, value] of params) {
      if (notSettings.has(key)) continue;
      await run(`select pg_catalog.set_config(${literal(key)}, ${literal(value)}, false)`);
    }
  };
  return new Proxy(db, {
    get(target, prop) {
      if (prop === 'execProtocolRawStream') return patched;
      const v = Reflect.get(target, prop, target);
      // PGlite keeps state in #private fields, which only work with the real object as `this`.
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}

/** Starts PGlite (persisted under dir, or in memory when dir is null) on a free loopback port. */
export async function startEmbeddedPostgres(dir: string | null): Promise<EmbeddedPostgres> {
  const db = dir === null ? await PGlite.create() : await PGlite.create({ dataDir: dir });
  // maxConnections 1: pglite-socket 0.2.17 interleaves the extended-protocol messages of
  // concurrent connections when no transaction is open, so a second connection is refused.
  const server = new PGLiteSocketServer({ db: withStartupParams(db), host: '127.0.0.1', port: 0, maxConnections: 1 });
  try {
    await server.start();
  } catch (err) {
    await db.close();
    throw err;
  }
  const url = `postgres://postgres@${server.getServerConn()}/postgres`;
  let closed = false;
  return {
    url,
    async close() {
      if (closed) return;
      closed = true;
      await server.stop();
      await db.close();
    },
  };
}
