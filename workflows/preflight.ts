import { proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { Activities } from '../activities';

const { describeWorker } = proxyActivities<Activities>({
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
