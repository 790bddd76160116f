// Bare uWebSockets.js server: the ceiling the engine is compared with in the same bench run.
// POST reads the whole body and answers 202 with a small JSON body of the engine's size class;
// GET answers 200. It does no parsing, auth or I/O, and must never grow any: it is the baseline.
// Usage: node native-bench/bare-server.mjs <port>; prints "listening <port>" when ready.
import uWS from 'uWebSockets.js';

const port = Number(process.argv[2] ?? process.env.PORT ?? 8090);
// Same size class as the engine's single-event answer ({id, status, duplicate, ...}).
const acceptedBody = '{"id":"evt_01HZX3K9Q8J7V6T5R4N3M2P1A0","status":"accepted","duplicate":false}';
const okBody = '{"status":"ok"}';

const app = uWS.App();

app.post('/*', (res) => {
  let aborted = false;
  res.onAborted(() => {
    aborted = true;
  });
  // Copy every chunk: uWS reuses the ArrayBuffer after the callback returns.
  const chunks = [];
  let bytes = 0;
  res.onData((chunk, isLast) => {
    chunks.push(Buffer.from(chunk.slice(0)));
    bytes += chunk.byteLength;
    if (!isLast || aborted) return;
    // Touch the whole body like a real handler would before answering.
    const body = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, bytes);
    res.cork(() => {
      res
        .writeStatus('202 Accepted')
        .writeHeader('Content-Type', 'application/json')
        .writeHeader('Request-Id', body.length > 0 ? 'req_bare' : 'req_empty')
        .end(acceptedBody);
    });
  });
});

app.get('/*', (res) => {
  res.cork(() => {
    res.writeStatus('200 OK').writeHeader('Content-Type', 'application/json').end(okBody);
  });
});

app.listen('127.0.0.1', port, (token) => {
  if (!token) {
    console.error(`bare-server: cannot listen on ${port}`);
    process.exit(1);
  }
  console.log(`listening ${port}`);
});

for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(0));
