import { Command } from 'commander';
import { connectClient, connectWorker, startTemporal, temporalClient } from '../workers/temporal-server';
import { ProviderRegistry } from '../workers/providers';
import { ensureReaperSchedule } from '../workers/schedules';
import { createRoundhouseWorker } from '../workers/worker';
import { dataConverterFor } from '../workers/encryption';
import { cliContext } from './context';

export function upCommand(): Command {
  return new Command('up')
    .description('Start the local stack: a persistent Temporal dev server (state in .roundhouse/) and a worker')
    .option('--port <port>', 'Temporal frontend port', (v) => Number(v), 7233)
    .addHelpText(
      'after',
      '\nExample:\n  roundhouse up            # then, in another terminal: TEMPORAL_ADDRESS=127.0.0.1:7233 roundhouse ...',
    )
    .action(async (opts: { port: number }) => {
      const { settings, logger } = cliContext({ serveMetrics: true });
      const server = await startTemporal(settings, { persistent: true, port: opts.port });
      logger.info({ address: server.address, ui: server.uiUrl, db: server.dbFile, source: server.source }, 'Temporal server ready');
      const providers = new ProviderRegistry({ stateDir: settings.stateDir });
      const emulatorUrl = await providers.localEmulatorUrl();
      logger.info({ url: emulatorUrl, state: `${settings.stateDir}/emulator` }, 'emulator ready');
      const connection = await connectWorker(settings, server.address);
      const clientConnection = await connectClient(settings, server.address);
      try {
        const worker = await createRoundhouseWorker({
          connection,
          namespace: settings.namespace,
          taskQueue: settings.taskQueue,
          providers,
          tuning: settings.tuning,
          dataConverter: dataConverterFor(settings),
        });
        const client = temporalClient(settings, clientConnection);
        await ensureReaperSchedule(client, { taskQueue: settings.taskQueue, providers: [{ kind: 'local', model: '' }] });
        logger.info(
          { taskQueue: settings.taskQueue, ui: server.uiUrl },
          'worker started (reaper scheduled every minute); Ctrl-C stops the stack, state is kept',
        );
        await worker.run();
      } finally {
        await clientConnection.close();
        await connection.close();
        await providers.close();
        await server.stop();
      }
    });
}
