import { Command } from 'commander';
import { ConfigError } from '../config/errors';
import { connectWorker } from '../workers/temporal-server';
import { createRoundhouseWorker } from '../workers/worker';
import { cliContext } from './context';

export function workerCommand(): Command {
  return new Command('worker')
    .description('Run a Roundhouse worker against an existing Temporal server (TEMPORAL_ADDRESS)')
    .addHelpText('after', '\nExample:\n  TEMPORAL_ADDRESS=127.0.0.1:7233 roundhouse worker')
    .action(async () => {
      const { settings, logger } = cliContext();
      if (!settings.address) throw new ConfigError('TEMPORAL_ADDRESS', 'is required for `roundhouse worker` (use `roundhouse up` for a local server)');
      const connection = await connectWorker(settings);
      try {
        const worker = await createRoundhouseWorker({ connection, namespace: settings.namespace, taskQueue: settings.taskQueue, stateDir: settings.stateDir, tuning: settings.tuning });
        logger.info({ address: settings.address, namespace: settings.namespace, taskQueue: settings.taskQueue }, 'worker started');
        await worker.run(); // returns after SIGINT/SIGTERM and a graceful drain
      } finally {
        await connection.close();
      }
    });
}
