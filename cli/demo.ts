import path from 'node:path';
import { Command } from 'commander';
import type * as Worker from '../workers/worker';
import type { CampaignInput, CampaignResult } from '../workflows/campaign-contract';
import { modules } from './modules';

/**
 * `npm start`: the embedded default — a persistent dev server, the emulator and a worker in this process — runs
 * the example campaign to its end with live progress, then says where the report is.
 */
export function demoCommand(): Command {
  return new Command('demo')
    .description('Run the example campaign on the embedded default (dev server + emulator, no account): what `npm start` does')
    .option('--spec <file>', 'campaign spec to run (default: examples/support-tickets/campaign.yaml)')
    .addHelpText('after', '\nExample:\n  npm start        # same as: roundhouse demo')
    .action(async (opts: { spec?: string }) => {
      const { packageRoot, startTemporal } = modules.temporalServer();
      const { cliContext, reportRoot, warnAbout } = modules.context();
      const { settings, logger } = cliContext({ quietSdk: true });
      const spec = modules.spec().loadCampaignSpec(opts.spec ?? path.join(packageRoot(), 'examples', 'support-tickets', 'campaign.yaml'));
      warnAbout(modules.validate().validateCampaignLocally(spec).warnings);
      const server = await startTemporal(settings, { persistent: true });
      logger.info({ address: server.address, ui: server.uiUrl, source: server.source }, 'Temporal server ready');
      let stack: Worker.AssembledWorker | undefined;
      try {
        stack = await modules.worker().assembleWorker(settings, server.address);
        const { worker, client } = stack;
        const campaignId = `${spec.name}-${new Date()
          .toISOString()
          .replace(/[-:.TZ]/g, '')
          .slice(0, 14)}`;
        const input: CampaignInput = { campaignId, spec, reportRoot: reportRoot(settings) };
        process.stdout.write(
          `Running campaign ${campaignId}: ${spec.rounds.max} rounds at most on the embedded emulator (${spec.provider.model})\n`,
        );
        const result = (await worker.runUntil(async () => {
          const handle = await client.workflow.start(modules.workflows().campaignWorkflow, {
            taskQueue: settings.taskQueue,
            workflowId: campaignId,
            args: [input],
          });
          return modules.progress().watchCampaign(handle, process.stdout, 1000);
        })) as CampaignResult;
        const accuracy = result.rounds.map((r) => (r.accuracy === undefined ? '–' : `${(r.accuracy * 100).toFixed(0)}%`)).join(' → ');
        const dir = path.dirname(result.summaryPath);
        process.stdout.write(
          `\nDone: ${result.status}${result.stopReason ? ` (${result.stopReason})` : ''}. Held-out accuracy by round: ${accuracy}\n` +
            `Report: ${path.join(dir, 'report.html')}\nSummary for a PR: ${path.join(dir, 'summary.md')}\n` +
            (server.uiUrl
              ? `Temporal UI (while a server runs, e.g. \`roundhouse up\`): ${server.uiUrl}/namespaces/${settings.namespace}/workflows/${campaignId}\n`
              : ''),
        );
        modules.progress().failUnlessSucceeded(result);
      } finally {
        await stack?.close();
        await server.stop();
      }
    });
}
