import { Command, Option } from 'commander';
import type { Client, WorkflowHandle } from '@temporalio/client';
import type { CampaignSpec } from '../config/io/spec';
import { DataValidationError } from '../config/rules/errors';
import type * as Contract from '../workflows/campaign/contract';
import type { CampaignInput, CampaignProgress } from '../workflows/campaign/contract';
import { artifactRoot } from '../config/io/artifacts';
import { checkpointRefsMemo } from '../config/rules/retention';
import { modules } from './modules';
import { CliFailure } from './failure';

/** What `run --wait`, `watch` and `status` exit with for an ended campaign (progress.ts's failUnlessSucceeded). */
const EXIT_CODES_WHEN_ENDED =
  'exit 0 if it completed (rounds.max or its target reached) or was stopped (stop, a budget), 1 if it failed, was cancelled, terminated or timed out (the reason is printed)';

function campaignIdFor(name: string): string {
  return `${name}-${new Date()
    .toISOString()
    .replace(/[-:.TZ]/g, '')
    .slice(0, 14)}`;
}

async function withCampaign<T>(id: string, body: (handle: WorkflowHandle) => Promise<T>): Promise<T> {
  const { cliContext, cliClient, unknownId } = modules.context();
  const { settings } = cliContext();
  const { client, close } = await cliClient(settings);
  try {
    const handle = client.workflow.getHandle(id);
    await handle.describe().catch((err: unknown) => unknownId(err, id));
    return await body(handle);
  } finally {
    await close();
  }
}

export function runCommand(): Command {
  return new Command('run')
    .description('Validate a campaign spec and its data, then start the campaign on the running stack')
    .argument('<spec>', 'campaign spec (YAML or JSON)')
    .option('--id <id>', 'campaign id (default: <name>-<timestamp>); starting an id that is running attaches to it')
    .option('--wait', `watch progress until the campaign ends; ${EXIT_CODES_WHEN_ENDED}`)
    .addHelpText(
      'after',
      '\nExamples:\n  roundhouse run examples/support-tickets/campaign.yaml --wait\n  roundhouse run campaign.yaml --id tickets-nightly',
    )
    .action(async (specFile: string, opts: { id?: string; wait?: boolean }) => {
      const { cliContext, cliClient, reportRoot, warnAbout } = modules.context();
      const { validateCampaignLocally, withLocalData } = modules.validate();
      const { settings } = cliContext();
      const given = modules.spec().loadCampaignSpec(specFile);
      // Validated before anything starts (from local copies when the data is in S3), then staged in the artifact store.
      const local = await withLocalData(given);
      const checked = validateCampaignLocally(local);
      warnAbout(checked.warnings);
      const campaignId = opts.id ?? campaignIdFor(given.name);
      const { client, address, close } = await cliClient(settings);
      try {
        await checkedOnWorker(client, settings.taskQueue, given, campaignId);
        const staged = await modules.campaignData().stageCampaignData(given, local, artifactRoot(process.env, settings.stateDir));
        const input: CampaignInput = { campaignId, spec: staged, reportRoot: reportRoot(settings) };
        const handle = await client.workflow.start(modules.workflows().campaignWorkflow, {
          taskQueue: settings.taskQueue,
          workflowId: campaignId,
          args: [input],
          workflowIdConflictPolicy: 'USE_EXISTING',
          // A warm start's checkpoint is in the memo: checkpoint retention never deletes it while the campaign runs.
          ...(staged.rounds.startFrom ? { memo: checkpointRefsMemo([staged.rounds.startFrom.checkpointId]) } : {}),
        });
        process.stdout.write(
          `campaign ${campaignId} started (${checked.trainRows} training rows, ${checked.evalRows} held out) on ${address}\n` +
            `  status: roundhouse status ${campaignId}\n  watch:  roundhouse watch ${campaignId}\n`,
        );
        if (opts.wait) modules.progress().failUnlessSucceeded(await modules.progress().watchCampaign(handle, process.stdout));
      } finally {
        await close();
      }
    });
}

/**
 * The checks only a worker can make (every stage's Python functions and task queues, the worker's variables), before
 * anything starts: a wrong spec is refused (exit 2), a missing worker or variable fails (exit 1); no worker answering
 * is a warning, since the campaign checks the same before its first round.
 */
export async function checkedOnWorker(client: Client, taskQueue: string, spec: CampaignSpec, id: string): Promise<void> {
  const outcome = await modules.validate().checkOnWorker(client, { taskQueue, spec, id });
  if ('refused' in outcome) {
    const { type, message } = outcome.refused;
    throw type === 'InvalidInput' ? new DataValidationError([message]) : new CliFailure(`${message} (${type})`);
  }
  if ('warning' in outcome) modules.context().warnAbout([outcome.warning]);
}

export function statusCommand(): Command {
  return new Command('status')
    .description("Show a campaign's progress: rounds done, the current round's phase and step, metric per round, GPU-minutes, cost")
    .argument('<id>', 'campaign id')
    .option('--json', 'print the progress as JSON')
    .addHelpText(
      'after',
      `\nOnce the campaign has ended: ${EXIT_CODES_WHEN_ENDED}.\n\nExample:\n  roundhouse status support-tickets-20261129120000 --json`,
    )
    .action(async (id: string, opts: { json?: boolean }) => {
      await withCampaign(id, async (handle) => {
        const p = await campaignProgress(handle);
        process.stdout.write(opts.json ? modules.progress().progressJson(p) : modules.progress().renderProgress(p));
        modules.progress().failUnlessSucceeded(p);
      });
    });
}

/** The live query, or the result of a finished campaign. */
export async function campaignProgress(handle: WorkflowHandle): Promise<CampaignProgress> {
  const d = await handle.describe();
  if (d.status.name === 'RUNNING')
    return modules.progress().withLiveStep(handle, await handle.query(modules.contract().campaignProgressQuery));
  return modules.progress().closedCampaignResult(handle, d);
}

export function watchCommand(): Command {
  return new Command('watch')
    .description('Follow a campaign live: per-round phase, step/total, loss, GPU-minutes (plain lines when not a terminal)')
    .argument('<id>', 'campaign id')
    .addHelpText(
      'after',
      `\nWhen the campaign ends: ${EXIT_CODES_WHEN_ENDED}.\n\nExample:\n  roundhouse watch support-tickets-20261129120000`,
    )
    .action(async (id: string) => {
      await withCampaign(id, async (handle) => {
        modules.progress().failUnlessSucceeded(await modules.progress().watchCampaign(handle, process.stdout));
      });
    });
}

/** `pause` and `resume`: one update each, printing the campaign's status after it. */
function controlCommand(name: 'pause' | 'resume', description: string, update: () => typeof Contract.pauseCampaignUpdate): Command {
  return new Command(name)
    .description(description)
    .argument('<id>', 'campaign id')
    .addHelpText('after', `\nExample:\n  roundhouse ${name} tickets-nightly`)
    .action(async (id: string) => {
      await withCampaign(id, async (handle) => {
        const p = await handle.executeUpdate(update());
        process.stdout.write(`campaign ${id}: ${p.status}\n`);
      });
    });
}

export function pauseCommand(): Command {
  return controlCommand(
    'pause',
    'Pause: the running round interrupts its segment, checkpoints and releases the GPU',
    () => modules.contract().pauseCampaignUpdate,
  );
}

export function resumeCommand(): Command {
  return controlCommand(
    'resume',
    'Resume: re-provision and continue from the pause checkpoint at the same step',
    () => modules.contract().resumeCampaignUpdate,
  );
}

export function stopCommand(): Command {
  return new Command('stop')
    .description('Stop after the current round (default), or now (the running round is cancelled and cleans up)')
    .argument('<id>', 'campaign id')
    .addOption(new Option('--now', 'cancel the running round instead of letting it finish'))
    .addHelpText('after', '\nExamples:\n  roundhouse stop tickets-nightly\n  roundhouse stop tickets-nightly --now')
    .action(async (id: string, opts: { now?: boolean }) => {
      await withCampaign(id, async (handle) => {
        await handle.executeUpdate(modules.contract().stopCampaignUpdate, { args: [{ mode: opts.now ? 'now' : 'after-round' }] });
        process.stdout.write(`campaign ${id}: stopping ${opts.now ? 'now' : 'after the current round'}\n`);
      });
    });
}

/** `approve` and `reject`: the campaign's pending promotion decided by a person (workflow updates with validators). */
function decisionCommand(name: 'approve' | 'reject'): Command {
  const rejecting = name === 'reject';
  const command = new Command(name)
    .description(
      rejecting
        ? "Reject the campaign's challenger waiting for approval: the line's champion stays (--reason is required)"
        : "Approve the campaign's challenger waiting for approval: it becomes the line's champion",
    )
    .argument('<id>', 'campaign id')
    .option('--by <who>', 'who decides (recorded with the decision; default: $USER)')
    .addHelpText(
      'after',
      `\nExample:\n  roundhouse ${name} tickets-nightly-20261206${rejecting ? ' --reason "regresses on refunds"' : ''}`,
    );
  if (rejecting) command.requiredOption('--reason <why>', 'why (recorded with the decision)');
  else command.option('--reason <why>', 'why (recorded with the decision)');
  return command.action(async (id: string, opts: { by?: string; reason?: string }) => {
    await withCampaign(id, async (handle) => {
      const by = opts.by ?? process.env.USER ?? process.env.USERNAME ?? 'unknown';
      const update = rejecting ? modules.promotionContract().rejectPromotionUpdate : modules.promotionContract().approvePromotionUpdate;
      const state = await handle
        .executeUpdate(update, { args: [{ by, ...(opts.reason ? { reason: opts.reason } : {}) }] })
        .catch((err: unknown) => {
          // A validator's refusal is the failure's cause: say it, not "Workflow Update failed".
          throw new CliFailure(`${name}: ${((err as Error).cause as Error | undefined)?.message ?? (err as Error).message}`);
        });
      process.stdout.write(`campaign ${id}: the challenger for line ${state.line} is ${rejecting ? 'rejected' : 'approved'} by ${by}\n`);
    });
  });
}

export const approveCommand = (): Command => decisionCommand('approve');
export const rejectCommand = (): Command => decisionCommand('reject');
