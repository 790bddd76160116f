// Process entry point: read configuration, start the service, stop it cleanly on SIGTERM/SIGINT
// (close the listen socket, drain, flush the journal, snapshot, release leases).
import v8 from 'node:v8';
import { loadConfig } from './config.js';
import { createLogger } from './observability/logger.js';
import { startService } from './service.js';

const config = loadConfig();
// Before the heap grows: bounds the old generation's growth after each full collection (README).
if (config.HEAP_GROWING_PERCENT > 0) v8.setFlagsFromString(`--heap-growing-percent=${config.HEAP_GROWING_PERCENT}`);
const logger = createLogger({ level: config.LOG_LEVEL });

try {
  const service = await startService(config, logger);
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'stopping');
    service.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, 'stop failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
} catch (err) {
  // The reason in the message itself (a second process on a DATA_DIR in use, a port taken): the
  // line a person starting the service reads.
  logger.fatal({ err }, `start failed: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
}
