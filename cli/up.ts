import { Command } from 'commander';
import type * as Worker from '../workers/worker';
import { modules } from './modules';

export function upCommand(): Command {
  return new Command('up')
    .description('Start the local stack: a persistent Temporal dev server (state in .roundhouse/) and a worker')
    .option('--port <port>', 'Temporal frontend port', (v) => Number(v), 7233)
    .addHelpText(
      'after',
      '\nExample:\n  roundhouse up            # then, in another terminal: TEMPORAL_ADDRESS=127.0.0.1:7233 roundhouse ...',
    )
    .action(async (opts: { port: number }) => {
      const { startTemporal } = modules.temporalServer();
      const { ensureReaperSchedule } = modules.schedules();
      const { settings, logger } = modules.context().cliContext({ serveMetrics: true });
      const server = await startTemporal(settings, { persistent: true, port: opts.port });
      logger.info({ address: server.address, ui: server.uiUrl, db: server.dbFile, source: server.source }, 'Temporal server ready');
      let stack: Worker.AssembledWorker | undefined;
      try {
        stack = await modules.worker().assembleWorker(settings, server.address);
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
