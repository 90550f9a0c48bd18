import { proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { Activities } from '../activities';
import type { CampaignSpec } from '../config/io/spec';
import { campaignPythonChecks, workerVariablesOf } from '../config/rules/preflight';
import type { CampaignNotifier } from './campaign/notify';
import { failureReasonOf, failureTypeOf, isCancellation } from './failures';
import { checkPythonFunctions } from './python/python';

const { describeWorker, checkWorkerEnvironment } = proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  retry: { maximumAttempts: 3 },
});

export interface PreflightResult {
  workflowId: string;
  workerPid: number;
  workerNode: string;
  greeting: string;
}

/** A one-activity round trip: proves a server, a worker and its activities are wired together. */
export async function preflightWorkflow(greeting: string): Promise<PreflightResult> {
  const worker = await describeWorker(greeting);
  return { workflowId: workflowInfo().workflowId, workerPid: worker.pid, workerNode: worker.node, greeting: worker.echo };
}

/**
 * What a campaign checks on its workers before its first round provisions, for every stage at once (a stage would
 * otherwise be checked only when it starts, after the earlier ones trained): the variables the spec names are set on
 * the worker (WorkerEnvironmentMissing), and each Python function of each stage is registered and fit, an environment
 * loads with its args, and a worker polls each task queue (InvalidInput, PythonWorkerUnavailable). Each error names the
 * stage and the field. Nothing is provisioned by these checks.
 */
export async function checkCampaignBeforeSpend(spec: CampaignSpec): Promise<void> {
  const variables = workerVariablesOf(spec);
  if (variables.length) await checkWorkerEnvironment(variables);
  const python = campaignPythonChecks(spec);
  if (python.length) await checkPythonFunctions(python);
}

/** The checks at a campaign's start: a refusal is told (`campaign.failed`, where the spec asks) and fails the campaign. */
export async function checkCampaignOrTell(spec: CampaignSpec, notifier: CampaignNotifier): Promise<void> {
  try {
    await checkCampaignBeforeSpend(spec);
  } catch (err) {
    if (isCancellation(err)) throw err;
    const reason = failureReasonOf(err);
    await notifier.notify('campaign.failed', `Roundhouse campaign ${notifier.campaignId} failed before its first round: ${reason}`, {
      status: 'failed',
      stopReason: reason,
      errorType: failureTypeOf(err),
      rounds: 0,
    });
    throw err;
  }
}

/** The same checks on their own, for `roundhouse run` to refuse a spec before it starts the campaign. */
export async function campaignChecksWorkflow(spec: CampaignSpec): Promise<void> {
  await checkCampaignBeforeSpend(spec);
}
