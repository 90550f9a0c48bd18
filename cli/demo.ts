import { Command } from 'commander';
import { Client } from '@temporalio/client';
import { connectClient, connectWorker, startTemporal } from '../workers/temporal-server';
import { createRoundhouseWorker } from '../workers/worker';
import { cliContext } from './context';

export function demoCommand(): Command {
  return new Command('demo')
    .description('Run the example campaign on the embedded default (dev server + emulator, no account): what `npm start` does')
    .addHelpText('after', '\nExample:\n  npm start        # same as: roundhouse demo')
    .action(async () => {
      const { settings, logger } = cliContext();
      const server = await startTemporal(settings, { persistent: true });
      logger.info({ address: server.address, ui: server.uiUrl, source: server.source }, 'Temporal server ready');
      const workerConnection = await connectWorker(settings, server.address);
      const clientConnection = await connectClient(settings, server.address);
      try {
        const worker = await createRoundhouseWorker({
          connection: workerConnection,
          namespace: settings.namespace,
          taskQueue: settings.taskQueue,
          stateDir: settings.stateDir,
          tuning: settings.tuning,
        });
        const client = new Client({ connection: clientConnection, namespace: settings.namespace });
        const workflowId = `preflight-${Date.now()}`;
        const result = await worker.runUntil(
          client.workflow.execute('preflightWorkflow', { taskQueue: settings.taskQueue, workflowId, args: ['hello from roundhouse'] }),
        );
        logger.info({ result }, 'preflight workflow completed');
        if (server.uiUrl) logger.info(`see it in the Temporal UI: ${server.uiUrl}/namespaces/${settings.namespace}/workflows/${workflowId}`);
      } finally {
        await clientConnection.close();
        await workerConnection.close();
        await server.stop();
      }
    });
}
