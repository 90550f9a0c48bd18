import { describeWait } from '../config/capacity';
import type { WorkflowHandle } from '@temporalio/client';
import { decodeArrayFromPayloads } from '@temporalio/common/lib/internal-non-workflow';
import { campaignProgressQuery, type CampaignProgress } from '../workflows/campaign-contract';

const pct = (v: number | undefined) => (v === undefined ? '   –  ' : `${(v * 100).toFixed(1).padStart(5)}%`);
const num = (v: number | undefined, digits = 3) => (v === undefined ? '–' : v.toFixed(digits));

function bar(done: number, total: number, width = 24): string {
  const filled = total > 0 ? Math.round((done / total) * width) : 0;
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}]`;
}

const BARS = '▁▂▃▄▅▆▇█';

/** The latest evaluations during training: a sparkline of the eval loss, then the points (`loss@step`, the metric). */
export function evaluationLine(points: { step: number; loss: number; metric?: number }[]): string {
  const losses = points.map((p) => p.loss);
  const [lo, hi] = [Math.min(...losses), Math.max(...losses)];
  const spark = losses.map((l) => BARS[hi > lo ? Math.round(((l - lo) / (hi - lo)) * (BARS.length - 1)) : 0]).join('');
  const shown = points
    .slice(-4)
    .map((p) => `${num(p.loss)}@${p.step}${p.metric !== undefined ? ` (${(p.metric * 100).toFixed(0)}%)` : ''}`)
    .join('  ');
  return `eval loss ${spark}  ${shown}`;
}

/** The tokens the campaign's rounds processed, where they were counted (a per-token biller: Tinker). */
function tokensLine(p: CampaignProgress): string[] {
  const counted = [...p.rounds.map((r) => r.tokens), p.currentRound?.tokens].filter((t) => t !== undefined);
  if (!counted.length) return [];
  const sum = (k: 'prefill' | 'sample' | 'train') => counted.reduce((a, t) => a + t[k], 0).toLocaleString('en-US');
  return [`  tokens ${sum('train')} train, ${sum('prefill')} prefill, ${sum('sample')} sample`];
}

/** A campaign's progress as a small text table. */
export function renderProgress(p: CampaignProgress): string {
  const lines = [
    `campaign ${p.campaignId}: ${p.status}${p.stopReason ? ` (${p.stopReason})` : ''}`,
    `  GPU-minutes ${num(p.gpuMinutes, 2)}${p.costUsd !== undefined ? `, est. cost $${p.costUsd.toFixed(2)}` : ''}, wall ${num(p.wallMinutes, 1)} min, limits: ${p.limits.maxRounds} rounds${p.limits.targetAccuracy !== undefined ? `, target accuracy ${p.limits.targetAccuracy}` : ''}${p.limits.maxGpuMinutes !== undefined ? `, ${p.limits.maxGpuMinutes} GPU-min` : ''}`,
    ...tokensLine(p),
    '  round  status     accuracy  eval loss (base → trained)  steps      GPU-min',
    ...p.rounds.map(
      (r) =>
        `  ${String(r.round).padStart(5)}  ${r.status.padEnd(9)}  ${pct(r.accuracy)}   ${num(r.baselineLoss).padStart(8)} → ${num(r.trainedLoss).padEnd(8)}        ${`${r.stepsApplied}/${r.totalSteps}`.padEnd(9)}  ${num(r.gpuMinutes, 2)}${r.recoveries ? `  (${r.recoveries} ${r.recoveries === 1 ? 'recovery' : 'recoveries'})` : ''}`,
    ),
  ];
  const c = p.currentRound;
  if (c && !['completed', 'failed', 'cancelled', 'stopped'].includes(c.phase)) {
    // GRPO rounds add the latest step's mean reward, DPO rounds its preference margin.
    const policy = `${c.latestReward !== undefined ? `  reward ${num(c.latestReward)}` : ''}${c.latestMargin !== undefined ? `  margin ${num(c.latestMargin)}` : ''}`;
    lines.push(
      `  ${String(c.round).padStart(5)}  ${c.phase.padEnd(9)}  ${bar(c.step, c.totalSteps)} ${c.step}/${c.totalSteps}  loss ${num(c.latestLoss)}${policy}  GPU-min ${num(c.gpuMinutes, 2)}`,
    );
    if (c.evaluations?.length) lines.push(`         ${evaluationLine(c.evaluations)}`);
    if (c.waiting) lines.push(`         ${describeWait(c.waiting, Date.now())}`);
    if (c.recoveries) lines.push(`         recovered ${c.recoveries}× from provider failures; latest: ${c.lastRecovery ?? '?'}`);
  }
  lines.push(`  summary: ${p.summaryPath}`);
  return `${lines.join('\n')}\n`;
}

const SEGMENT_ACTIVITIES = new Set(['trainSegment', 'trainGrpoSegment', 'trainDpoSegment']);

/**
 * The step a round's running training segment has confirmed, from the segment's heartbeat: the workflow hears it
 * only when the segment ends, so between segment ends its progress shows the step the segment started from.
 */
export async function liveSegmentStep(handle: WorkflowHandle, roundWorkflowId: string): Promise<number | undefined> {
  const round = await handle.client
    .getHandle(roundWorkflowId)
    .describe()
    .catch(() => undefined);
  for (const activity of round?.raw.pendingActivities ?? []) {
    if (!SEGMENT_ACTIVITIES.has(activity.activityType?.name ?? '')) continue;
    const details = await decodeArrayFromPayloads(handle.client.options.loadedDataConverter, activity.heartbeatDetails?.payloads).catch(
      () => [],
    );
    const step = (details[0] as { step?: unknown } | undefined)?.step;
    if (typeof step === 'number') return step;
  }
  return undefined;
}

/** The campaign's progress with the current round's step made live (liveSegmentStep) while it trains. */
export async function withLiveStep(handle: WorkflowHandle, progress: CampaignProgress): Promise<CampaignProgress> {
  const current = progress.currentRound;
  if (!current || current.phase !== 'training') return progress;
  const live = await liveSegmentStep(handle, `${progress.campaignId}-round-${current.round}`);
  return live !== undefined && live > current.step ? { ...progress, currentRound: { ...current, step: live } } : progress;
}

/** Follows a campaign until it ends: redraws in a terminal, prints changed lines otherwise. Returns the final progress. */
export async function watchCampaign(handle: WorkflowHandle, out: NodeJS.WriteStream, intervalMs = 500): Promise<CampaignProgress> {
  let previous = '';
  let drawnLines = 0;
  for (;;) {
    const description = await handle.describe();
    let progress: CampaignProgress | undefined;
    if (description.status.name === 'RUNNING') {
      progress = await handle.query(campaignProgressQuery).catch(() => undefined);
      if (progress) progress = await withLiveStep(handle, progress);
    } else {
      progress = (await handle.result().catch(() => undefined)) as CampaignProgress | undefined;
      if (!progress) throw new Error(`campaign ${handle.workflowId} ended ${description.status.name.toLowerCase()}`);
    }
    if (progress) {
      const text = renderProgress(progress);
      if (text !== previous) {
        if (out.isTTY) {
          if (drawnLines) out.write(`\x1b[${drawnLines}A\x1b[0J`);
          out.write(text);
          drawnLines = text.split('\n').length - 1;
        } else {
          const oldLines = new Set(previous.split('\n'));
          for (const line of text.split('\n')) if (line && !oldLines.has(line)) out.write(`${line}\n`);
        }
        previous = text;
      }
      if (description.status.name !== 'RUNNING' && description.status.name !== 'CONTINUED_AS_NEW') return progress;
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
