import { Command } from 'commander';
import type * as Context from './context';
import type * as TemporalServer from '../workers/temporal-server';
import type * as Schedules from '../workers/schedules';
import type * as Worker from '../workers/worker';
import { lazy } from './lazy';

// What the command uses, loaded when it runs (cli/lazy.ts).
const context = lazy(() => require('./context') as typeof Context);
const temporalServer = lazy(() => require('../workers/temporal-server') as typeof TemporalServer);
const schedules = lazy(() => require('../workers/schedules') as typeof Schedules);
const workerModule = lazy(() => require('../workers/worker') as typeof Worker);

export function upCommand(): Command {
  return new Command('up')
    .description('Start the local stack: a persistent Temporal dev server (state in .roundhouse/) and a worker')
    .option('--port <port>', 'Temporal frontend port', (v) => Number(v), 7233)
    .addHelpText(
      'after',
      '\nExample:\n  roundhouse up            # then, in another terminal: TEMPORAL_ADDRESS=127.0.0.1:7233 roundhouse ...',
    )
    .action(async (opts: { port: number }) => {
      const { startTemporal } = temporalServer();
      const { ensureReaperSchedule } = schedules();
      const { settings, logger } = context().cliContext({ serveMetrics: true });
      const server = await startTemporal(settings, { persistent: true, port: opts.port });
      logger.info({ address: server.address, ui: server.uiUrl, db: server.dbFile, source: server.source }, 'Temporal server ready');
      let stack: Worker.AssembledWorker | undefined;
      try {
        stack = await workerModule().assembleWorker(settings, server.address);
        const { worker, client, providers } = stack;
        const emulatorUrl = await providers.localEmulatorUrl();
        logger.info({ url: emulatorUrl, state: `${settings.stateDir}/emulator` }, 'emulator ready');
        await ensureReaperSchedule(client, { taskQueue: settings.taskQueue, providers: [{ kind: 'local', model: '' }] });
        logger.info(
          { taskQueue: settings.taskQueue, ui: server.uiUrl },
          'worker started (reaper scheduled every minute); Ctrl-C stops the stack, state is kept',
        );
        await worker.run();
      } finally {
        await stack?.close();
        await server.stop();
      }
    });
}
