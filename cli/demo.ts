import path from 'node:path';
import { Command } from 'commander';
import type * as Worker from '../workers/worker';
import type { CampaignInput, CampaignResult } from '../workflows/campaign/contract';
import { modules } from './modules';

const HEADLINE_NAMES = {
  accuracy: 'held-out accuracy',
  meanReward: 'mean reward',
  preferenceAccuracy: 'preference accuracy',
  evalLoss: 'eval loss',
};

/**
 * `npm start`: the embedded default — a persistent dev server, the emulator and a worker in this process — runs
 * the example campaign to its end with live progress, then says where the report is.
 */
export function demoCommand(): Command {
  return new Command('demo')
    .description('Run the example campaign on the embedded default (dev server + emulator, no account): what `npm start` does')
    .option('--spec <file>', 'campaign spec to run (default: examples/support-tickets/campaign.yaml)')
    .option(
      '--python <files...>',
      'Python files whose rewards, scorers and data policies the spec calls: served by Python workers this command starts',
    )
    .addHelpText(
      'after',
      '\nExamples:\n  npm start        # same as: roundhouse demo\n' +
        '  roundhouse demo --spec examples/reasoning-gym/campaign.yaml --python examples/reasoning-gym/rewards.py',
    )
    .action(async (opts: { spec?: string; python?: string[] }) => {
      const { packageRoot, startTemporal } = modules.temporalServer();
      const { cliContext, reportRoot, warnAbout } = modules.context();
      const { settings, logger } = cliContext({ quietSdk: true });
      const spec = modules.spec().loadCampaignSpec(opts.spec ?? path.join(packageRoot(), 'examples', 'support-tickets', 'campaign.yaml'));
      warnAbout(modules.validate().validateCampaignLocally(spec).warnings);
      const { pythonTaskQueues, startPythonWorkers } = modules.pythonWorkers();
      const taskQueues = pythonTaskQueues(spec);
      if (taskQueues.length && !opts.python?.length)
        logger.warn(
          { taskQueues },
          'the spec calls Python functions: pass --python <file.py>, or start `python -m roundhouse worker <file.py> --task-queue <queue>`',
        );
      const server = await startTemporal(settings, { persistent: true });
      logger.info({ address: server.address, ui: server.uiUrl, source: server.source }, 'Temporal server ready');
      let stack: Worker.AssembledWorker | undefined;
      let python: Awaited<ReturnType<typeof startPythonWorkers>> | undefined;
      try {
        if (opts.python?.length && taskQueues.length) {
          python = await startPythonWorkers({ files: opts.python, taskQueues, address: server.address });
          logger.info({ taskQueues, pids: python.pids }, 'Python workers ready');
        }
        stack = await modules.worker().assembleWorker(settings, server.address);
        const { worker, client } = stack;
        const campaignId = `${spec.name}-${new Date()
          .toISOString()
          .replace(/[-:.TZ]/g, '')
          .slice(0, 14)}`;
        const input: CampaignInput = { campaignId, spec, reportRoot: reportRoot(settings) };
        const plan = spec.stages
          ? `${spec.stages.length} stages (${spec.stages.map((s) => `${s.name}: ${s.round.kind}`).join(' → ')}), ${spec.stages.reduce((a, s) => a + s.rounds.max, 0)} rounds at most`
          : `${spec.rounds.max} rounds at most`;
        process.stdout.write(`Running campaign ${campaignId}: ${plan} on the embedded emulator (${spec.provider.model})\n`);
        const result = (await worker.runUntil(async () => {
          const handle = await client.workflow.start(modules.workflows().campaignWorkflow, {
            taskQueue: settings.taskQueue,
            workflowId: campaignId,
            args: [input],
          });
          return modules.progress().watchCampaign(handle, process.stdout, 1000);
        })) as CampaignResult;
        const pct = (v: number | undefined) => (v === undefined ? '–' : `${(v * 100).toFixed(0)}%`);
        const accuracy = result.rounds.map((r) => pct(r.accuracy)).join(' → ');
        // A staged campaign's stages measure different things: each stage's metric, named.
        const outcome = result.stages
          ? `By stage: ${result.stages
              .map(
                (s) =>
                  `${s.name} (${s.kind}) ${HEADLINE_NAMES[s.headline.metric]} ${s.headline.metric === 'meanReward' ? (s.headline.value?.toFixed(3) ?? '–') : pct(s.headline.value)}`,
              )
              .join(' → ')}`
          : `Held-out accuracy by round: ${accuracy}`;
        const dir = path.dirname(result.summaryPath);
        process.stdout.write(
          `\nDone: ${result.status}${result.stopReason ? ` (${result.stopReason})` : ''}. ${outcome}\n` +
            `Report: ${path.join(dir, 'report.html')}\nSummary for a PR: ${path.join(dir, 'summary.md')}\n` +
            (server.uiUrl
              ? `Temporal UI (while a server runs, e.g. \`roundhouse up\`): ${server.uiUrl}/namespaces/${settings.namespace}/workflows/${campaignId}\n`
              : ''),
        );
        modules.progress().failUnlessSucceeded(result);
      } finally {
        await stack?.close();
        await python?.stop();
        await server.stop();
      }
    });
}
