import path from 'node:path';
import { Command } from 'commander';
import { Client } from '@temporalio/client';
import { loadCampaignSpec } from '../config/spec';
import { packageRoot } from '../workers/temporal-server';
import { connectClient, connectWorker, startTemporal } from '../workers/temporal-server';
import { ProviderRegistry } from '../workers/providers';
import { createRoundhouseWorker } from '../workers/worker';
import { roundProgressQuery, type RoundInput, type RoundResult } from '../workflows/round-contract';
import { cliContext } from './context';

export function demoCommand(): Command {
  return new Command('demo')
    .description('Run the example round on the embedded default (dev server + emulator, no account): what `npm start` does')
    .option('--spec <file>', 'campaign spec to run', path.join(packageRoot(), 'examples', 'support-tickets', 'campaign.yaml'))
    .addHelpText('after', '\nExample:\n  npm start        # same as: roundhouse demo')
    .action(async (opts: { spec: string }) => {
      const { settings, logger } = cliContext();
      const spec = loadCampaignSpec(opts.spec);
      const server = await startTemporal(settings, { persistent: true });
      logger.info({ address: server.address, ui: server.uiUrl, source: server.source }, 'Temporal server ready');
      const providers = new ProviderRegistry({ stateDir: settings.stateDir });
      const workerConnection = await connectWorker(settings, server.address);
      const clientConnection = await connectClient(settings, server.address);
      try {
        const worker = await createRoundhouseWorker({
          connection: workerConnection,
          namespace: settings.namespace,
          taskQueue: settings.taskQueue,
          providers,
          tuning: settings.tuning,
        });
        const client = new Client({ connection: clientConnection, namespace: settings.namespace });
        const campaignId = `${spec.name}-${new Date().toISOString().replace(/[-:.TZ]/g, '').slice(0, 14)}`;
        const input: RoundInput = {
          campaignId,
          round: 1,
          spec: { name: spec.name, provider: spec.provider, training: spec.training, sampling: spec.sampling, evaluation: spec.evaluation, advanced: spec.advanced },
          data: { train: spec.data.train, eval: spec.data.eval },
          reportDir: path.join(settings.stateDir, 'campaigns', campaignId),
        };
        const workflowId = `${campaignId}-round-1`;
        const result = await worker.runUntil(async () => {
          const handle = await client.workflow.start('roundWorkflow', { taskQueue: settings.taskQueue, workflowId, args: [input] });
          let last = '';
          const timer = setInterval(() => {
            handle
              .query(roundProgressQuery)
              .then((p) => {
                const line = `${p.phase} step ${p.step}/${p.totalSteps}${p.latestLoss !== undefined ? ` loss ${p.latestLoss.toFixed(3)}` : ''}`;
                if (line !== last) process.stdout.write(`  round 1: ${line}\n`);
                last = line;
              })
              .catch(() => undefined);
          }, 500);
          try {
            return (await handle.result()) as RoundResult;
          } finally {
            clearInterval(timer);
          }
        });
        process.stdout.write(
          `\nround 1 ${result.status}: accuracy ${((result.accuracy ?? 0) * 100).toFixed(1)}%, eval loss ${result.baselineLoss?.toFixed(3)} → ${result.trainedLoss?.toFixed(3)} per token, ${result.stepsApplied} steps\nreport: ${result.reportPath}\n`,
        );
        if (server.uiUrl) process.stdout.write(`Temporal UI: ${server.uiUrl}/namespaces/${settings.namespace}/workflows/${workflowId}\n`);
      } finally {
        await clientConnection.close();
        await workerConnection.close();
        await providers.close();
        await server.stop();
      }
    });
}
