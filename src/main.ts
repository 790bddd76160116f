// Process entry point: read configuration, start the service, stop it cleanly on SIGTERM/SIGINT
// (close the listen socket, drain, flush the journal, snapshot, release leases).
import { loadConfig } from './config.js';
import { createLogger } from './observability/logger.js';
import { startService } from './service.js';

const config = loadConfig();
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
  logger.fatal({ err }, 'start failed');
  process.exit(1);
}
