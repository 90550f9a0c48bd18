import { liveSegmentStep, renderProgress, withLiveStep } from '../../cli/progress';
import { campaignWorkflow } from '../../workflows';
import { campaignProgressQuery, type CampaignInput, type CampaignResult } from '../../workflows/campaign/contract';
import { testReportDir } from '../helpers/artifacts';
import { ticketCampaignSpec } from '../helpers/campaign';
import { roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// `status` and `watch` show the step a running segment has confirmed (its heartbeat), not the step it started from:
// the workflow hears of a segment's steps only when it ends, and a segment may last many minutes.

const { env, withWorker } = roundTestEnvironment({ provisioningDelayMs: 50, operationLatencyMs: 250 });

test('while one long segment trains, the live step climbs though the workflow still says the step it started from', async () => {
  const taskQueue = uniqueTaskQueue('live-step');
  const { spec, dir } = ticketCampaignSpec({ baseUrl: env.emulator.url, trainRows: 60, evalRows: 5, yaml: 'rounds: { max: 1 }' });
  spec.training = { ...spec.training, segmentSteps: 1000, segmentSeconds: 600 }; // the whole round in one segment
  const campaignId = `live-${taskQueue}`;
  const seen: { queried: number; live: number; line: string }[] = [];
  const result: CampaignResult = await withWorker(taskQueue, async () => {
    const handle = await env.temporal.client.workflow.start(campaignWorkflow, {
      taskQueue,
      workflowId: campaignId,
      args: [{ campaignId, spec, reportRoot: testReportDir(dir) } satisfies CampaignInput],
    });
    for (let i = 0; i < 600; i++) {
      const progress = await handle.query(campaignProgressQuery).catch(() => undefined);
      const current = progress?.currentRound;
      if (progress?.status !== 'running' || (current && !['validating', 'provisioning', 'baseline', 'training'].includes(current.phase)))
        break;
      if (current?.phase === 'training') {
        const live = await liveSegmentStep(handle, `${campaignId}-round-1`);
        const shown = await withLiveStep(handle, progress);
        seen.push({ queried: current.step, live: live ?? -1, line: renderProgress(shown) });
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    return (await handle.result()) as CampaignResult;
  });
  expect(result.rounds.map((r) => [r.status, r.stepsApplied])).toEqual([['completed', 12]]);
  // One segment: until it ends, the workflow's step is 0 while the heartbeat's climbs, and `status` shows the latter.
  const ahead = seen.filter((s) => s.queried === 0 && s.live > 0);
  expect(new Set(ahead.map((s) => s.live)).size).toBeGreaterThanOrEqual(2);
  const last = ahead[ahead.length - 1]!;
  expect(last.line).toMatch(new RegExp(`\\] ${last.live}/12 `));
}, 120_000);
