import { log, patched, proxyActivities } from '@temporalio/workflow';
import type { ReaperActivities, ReaperInput, ReaperResult } from '../activities/reaper';

/** Started by a Schedule: deactivates trainers whose owning workflow is gone (terminated, timed out, unknown). */
export async function reaperWorkflow(input: ReaperInput): Promise<ReaperResult> {
  const { reapOrphans, noticeSkippedRuns } = proxyActivities<ReaperActivities>({
    startToCloseTimeout: '5 minutes',
    heartbeatTimeout: '1 minute',
    retry: { maximumAttempts: 3 },
  });
  const result = await reapOrphans(input);
  log.info('reaper pass done', { checked: result.checked, reaped: result.reaped.length });
  if (patched('schedule-skips')) {
    // Each pass also tells of runs its deployment's schedules skipped (a run still going blocks the next).
    try {
      await noticeSkippedRuns({});
    } catch (err) {
      log.warn('skipped runs could not be checked', { error: String(err) });
    }
  }
  return result;
}
