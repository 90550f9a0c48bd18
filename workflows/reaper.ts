import { log, proxyActivities } from '@temporalio/workflow';
import type { ReaperActivities, ReaperInput, ReaperResult } from '../activities/reaper';

/** Started by a Schedule: deactivates trainers whose owning workflow is gone (terminated, timed out, unknown). */
export async function reaperWorkflow(input: ReaperInput): Promise<ReaperResult> {
  const { reapOrphans } = proxyActivities<ReaperActivities>({
    startToCloseTimeout: '5 minutes',
    heartbeatTimeout: '1 minute',
    retry: { maximumAttempts: 3 },
  });
  const result = await reapOrphans(input);
  log.info('reaper pass done', { checked: result.checked, reaped: result.reaped.length });
  return result;
}
