import { Command } from 'commander';
import type * as Context from './context';
import type * as TemporalServer from '../workers/temporal-server';
import type * as Providers from '../workers/providers';
import type * as Schedules from '../workers/schedules';
import type * as Worker from '../workers/worker';
import type * as Encryption from '../workers/encryption';
import { lazy } from './lazy';

// What the command uses, loaded when it runs (cli/lazy.ts).
const context = lazy(() => require('./context') as typeof Context);
const temporalServer = lazy(() => require('../workers/temporal-server') as typeof TemporalServer);
const providersModule = lazy(() => require('../workers/providers') as typeof Providers);
const schedules = lazy(() => require('../workers/schedules') as typeof Schedules);
const workerModule = lazy(() => require('../workers/worker') as typeof Worker);
const encryption = lazy(() => require('../workers/encryption') as typeof Encryption);

export function upCommand(): Command {
  return new Command('up')
    .description('Start the local stack: a persistent Temporal dev server (state in .roundhouse/) and a worker')
    .option('--port <port>', 'Temporal frontend port', (v) => Number(v), 7233)
    .addHelpText(
      'after',
      '\nExample:\n  roundhouse up            # then, in another terminal: TEMPORAL_ADDRESS=127.0.0.1:7233 roundhouse ...',
    )
    .action(async (opts: { port: number }) => {
      const { connectClient, connectWorker, startTemporal, temporalClient } = temporalServer();
      const { ProviderRegistry } = providersModule();
      const { ensureReaperSchedule } = schedules();
      const { createRoundhouseWorker } = workerModule();
      const { dataConverterFor } = encryption();
      const { settings, logger } = context().cliContext({ serveMetrics: true });
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
