import { Command } from 'commander';
import { connectWorker, startTemporal } from '../workers/temporal-server';
import { createRoundhouseWorker } from '../workers/worker';
import { cliContext } from './context';

export function upCommand(): Command {
  return new Command('up')
    .description('Start the local stack: a persistent Temporal dev server (state in .roundhouse/) and a worker')
    .option('--port <port>', 'Temporal frontend port', (v) => Number(v), 7233)
    .addHelpText('after', '\nExample:\n  roundhouse up            # then, in another terminal: TEMPORAL_ADDRESS=127.0.0.1:7233 roundhouse ...')
    .action(async (opts: { port: number }) => {
      const { settings, logger } = cliContext();
      const server = await startTemporal(settings, { persistent: true, port: opts.port });
      logger.info({ address: server.address, ui: server.uiUrl, db: server.dbFile, source: server.source }, 'Temporal server ready');
      const connection = await connectWorker(settings, server.address);
      try {
        const worker = await createRoundhouseWorker({ connection, namespace: settings.namespace, taskQueue: settings.taskQueue, stateDir: settings.stateDir, tuning: settings.tuning });
        logger.info({ taskQueue: settings.taskQueue }, 'worker started; Ctrl-C stops the stack (state is kept)');
        await worker.run();
      } finally {
        await connection.close();
        await server.stop();
      }
    });
}
