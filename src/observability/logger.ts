// The pino logger factory. The level comes from configuration (config.LOG_LEVEL, passed in by
// the composition root: nothing here reads process.env). The gateway logs errors and lifecycle,
// never a line per successful request: that is the hot path, and metrics cover it.
import { type Logger, pino } from 'pino';
import type { Config } from '../config.js';

export type { Logger } from 'pino';

export interface LoggerOptions {
  level?: Config['LOG_LEVEL'];
  /** Component name, added to every line as `name`. */
  name?: string;
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  return pino({
    level: opts.level ?? 'info',
    ...(opts.name === undefined ? {} : { name: opts.name }),
    base: { pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    // Never print credentials that a caller put in a logged request.
    redact: { paths: ['headers.authorization', 'req.headers.authorization'], censor: '[redacted]' },
  });
}
