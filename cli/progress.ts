import { describeAssignment } from '../config/rules/sweep';
import { describeWait } from '../config/rules/capacity';
import { SEGMENT_ACTIVITIES } from '../config/rules/round-kinds';
import { stageFacts } from '../config/rules/stages';
import { WorkflowFailedError, type WorkflowExecutionDescription, type WorkflowHandle } from '@temporalio/client';
import { decodeArrayFromPayloads } from '@temporalio/common/lib/internal-non-workflow';
import { redactText } from '../config/io/logging';
import { campaignProgressQuery, type CampaignProgress } from '../workflows/campaign/contract';
import { CliFailure } from './failure';

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

/**
 * A staged campaign's stages, two lines each: kind, rounds, the metric that matters for the kind, the gate's verdict
 * and why the stage ended; then the checkpoint it started from and the one it passed on.
 */
function stageLines(p: CampaignProgress): string[] {
  return (p.stages ?? []).flatMap((s) => {
    const f = stageFacts(s);
    const ended = [f.gate && `gate ${f.gate}`, s.endedBy].filter(Boolean).join('; ');
    return [
      `  stage ${f.label} (${s.kind}): ${f.rounds}, ${f.headline}${ended ? `; ${ended}` : ''}`,
      `          from ${f.startedFrom ?? 'the base model'}${f.carried ? ` (${f.carried})` : ''}${f.passedOn ? `, passed on ${f.passedOn}` : ''}`,
    ];
  });
}

/** A staged campaign's round lines name the round's stage and kind (`2 grpo`); others have no such column. */
function stageColumn(p: CampaignProgress, r: { stage?: number; kind?: string } | undefined): string {
  if (!p.stages) return '';
  return `${(r?.stage !== undefined ? `${r.stage} ${r.kind ?? ''}` : '').padEnd(7)}  `;
}

/** `promotion`: what is pending and since when, or how it was decided. */
export function promotionLines(p: Pick<CampaignProgress, 'campaignId' | 'promotion'>): string[] {
  const m = p.promotion;
  if (!m) return [];
  const at = (ms?: number) => (ms === undefined ? '?' : new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z'));
  const head = `  promotion (line ${m.line}): `;
  switch (m.status) {
    case 'pending-approval':
      return [
        `${head}waiting for approval since ${at(m.pendingSinceMs)} (rejected at ${at(m.timeoutAtMs)} without one): ${m.reason ?? ''}`,
        `    roundhouse approve ${p.campaignId}   or   roundhouse reject ${p.campaignId} --reason "…"`,
      ];
    case 'promoted':
      return [
        `${head}promoted: ${m.reason ?? ''}${m.approval ? ` (approved by ${m.approval.by})` : ''}`,
        `    champion ${m.champion?.checkpointId ?? '?'}${m.champion?.registry ? `, registry ${m.champion.registry.name} version ${m.champion.registry.version} (@champion)` : ''}${m.registryError ? `; the registry was not updated: ${m.registryError}` : ''}`,
      ];
    default:
      return [`${head}${m.status}${m.reason ? `: ${m.reason}` : ''}`];
  }
}

/** The code sandbox the latest round's Python worker runs (a refusal says why), when a round called one. */
function sandboxLines(p: CampaignProgress): string[] {
  const sandbox = [...p.rounds].reverse().find((r) => r.sandbox !== undefined)?.sandbox;
  return sandbox === undefined ? [] : [`  Python code sandbox: ${sandbox}`];
}

/** A sweep (the first round, with `sweep`): its arms side by side, their figure at each rung, the winner. */
function sweepLines(p: CampaignProgress): string[] {
  const sweep = p.rounds[0]?.sweep ?? (p.currentRound?.round === 1 ? p.currentRound.sweep : undefined);
  if (!sweep) return [];
  const rungs = Math.max(0, ...sweep.arms.map((a) => a.rungs.length));
  const head = `  sweep: ${sweep.arms.length} arms, ${sweep.metric} every ${sweep.rungSteps} steps, keep 1/${sweep.eta}${sweep.winner ? `; winner arm ${sweep.winner.arm}` : ''}`;
  const rows = sweep.arms.map((a) => {
    const figures = Array.from({ length: rungs }, (_, i) => (a.rungs[i] ? a.rungs[i]!.value.toFixed(4) : '-').padEnd(9)).join('');
    const final = a.final !== undefined ? a.final.toFixed(4) : '-';
    const mark = sweep.winner?.arm === a.arm ? ' *' : '';
    return `    arm ${String(a.arm).padEnd(3)} ${a.status.padEnd(10)} step ${String(a.step).padEnd(5)} ${figures}${final.padEnd(9)}${describeAssignment(a.assign)}${mark}`;
  });
  const labels = Array.from({ length: rungs }, (_, i) => `rung ${i + 1}`.padEnd(9)).join('');
  return [head, `    arm     status     step       ${labels}final    fields`, ...rows];
}

/** `budget.maxUsd`: the dollars spent (settled rounds and the running one's so far) against the budget. */
function budgetLine(p: CampaignProgress): string[] {
  if (p.limits.maxUsd === undefined) return [];
  const spent = p.costUsd ?? 0;
  const share = Math.round((100 * spent) / p.limits.maxUsd);
  return [
    `  spend $${spent.toFixed(4)} of $${p.limits.maxUsd.toFixed(2)} budget (${share} %), $${Math.max(0, p.limits.maxUsd - spent).toFixed(4)} left`,
  ];
}

/** A campaign's progress as a small text table. */
export function renderProgress(p: CampaignProgress): string {
  // `data.test`: its figures in their own column, and beside the best round (chosen by eval).
  const tested = p.rounds.some((r) => r.test);
  const lines = [
    `campaign ${p.campaignId}: ${p.status}${p.stopReason ? ` (${p.stopReason})` : ''}`,
    `  GPU-minutes ${num(p.gpuMinutes, 2)}${p.costUsd !== undefined ? `, est. cost $${p.costUsd.toFixed(2)}` : ''}, wall ${num(p.wallMinutes, 1)} min, limits: ${p.limits.maxRounds} rounds${p.limits.targetAccuracy !== undefined ? `, target accuracy ${p.limits.targetAccuracy}` : ''}${p.limits.maxGpuMinutes !== undefined ? `, ${p.limits.maxGpuMinutes} GPU-min` : ''}`,
    ...tokensLine(p),
    ...budgetLine(p),
    ...sweepLines(p),
    ...stageLines(p),
    `  round  ${p.stages ? 'stage    ' : ''}status     accuracy  ${tested ? 'test      ' : ''}eval loss (base → trained)  steps      GPU-min`,
    ...p.rounds.map(
      (r) =>
        `  ${String(r.round).padStart(5)}  ${stageColumn(p, r)}${r.status.padEnd(9)}  ${pct(r.accuracy)}   ${tested ? `${pct(r.test?.accuracy)}   ` : ''}${num(r.baselineLoss).padStart(8)} → ${num(r.trainedLoss).padEnd(8)}        ${`${r.stepsApplied}/${r.totalSteps}`.padEnd(9)}  ${num(r.gpuMinutes, 2)}${r.recoveries ? `  (${r.recoveries} ${r.recoveries === 1 ? 'recovery' : 'recoveries'})` : ''}`,
    ),
    // Why a round failed, from its error: what `round-<n>.json` says as error_message.
    ...p.rounds
      .filter((r) => r.errorMessage)
      .map((r) => `  round ${r.round} ${r.status}${r.errorType ? ` (${r.errorType})` : ''}: ${redactText(r.errorMessage!)}`),
    ...(p.best && tested
      ? [
          `  best (by eval): round ${p.best.round}, accuracy ${pct(p.best.accuracy).trim()}; held-out test ${p.best.test ? `${pct(p.best.test.accuracy).trim()} over ${p.best.test.rows} rows` : 'not scored'}`,
        ]
      : []),
    ...promotionLines(p),
    ...sandboxLines(p),
  ];
  const c = p.currentRound;
  if (c && !['completed', 'failed', 'cancelled', 'stopped'].includes(c.phase)) {
    // GRPO rounds add the latest step's mean reward, DPO rounds its preference margin, custom rounds (the first
    // three of) the loss function's metrics.
    const metrics = Object.entries(c.latestMetrics ?? {})
      .slice(0, 3)
      .map(([name, value]) => `  ${name} ${num(value)}`)
      .join('');
    const policy = `${c.latestReward !== undefined ? `  reward ${num(c.latestReward)}` : ''}${c.latestMargin !== undefined ? `  margin ${num(c.latestMargin)}` : ''}${metrics}`;
    lines.push(
      `  ${String(c.round).padStart(5)}  ${stageColumn(p, p.stages?.at(-1))}${c.phase.padEnd(9)}  ${bar(c.step, c.totalSteps)} ${c.step}/${c.totalSteps}  loss ${num(c.latestLoss)}${policy}  GPU-min ${num(c.gpuMinutes, 2)}`,
    );
    if (c.evaluations?.length) lines.push(`         ${evaluationLine(c.evaluations)}`);
    if (c.waiting) lines.push(`         ${describeWait(c.waiting, Date.now())}`);
    if (c.recoveries) lines.push(`         recovered ${c.recoveries}× from provider failures; latest: ${c.lastRecovery ?? '?'}`);
  }
  lines.push(`  summary: ${p.summaryPath}`);
  return `${lines.join('\n')}\n`;
}

/** A campaign's progress as JSON (`status --json`), secrets masked as in the text. */
export function progressJson(p: CampaignProgress): string {
  return redactText(`${JSON.stringify(p, null, 2)}\n`);
}

const SEGMENT_ACTIVITY_NAMES = new Set(SEGMENT_ACTIVITIES);

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
    if (!SEGMENT_ACTIVITY_NAMES.has(activity.activityType?.name ?? '')) continue;
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

/**
 * A finished campaign's outcome as the exit code: nothing when it completed or was stopped (by `stop`, a budget),
 * else a CliFailure (exit code 1) naming why in one line: the round that failed and its error's message.
 */
export function failUnlessSucceeded(p: CampaignProgress): void {
  if (p.status !== 'failed') return;
  const round = [...p.rounds].reverse().find((r) => r.status === 'failed' || r.status === 'cancelled');
  throw new CliFailure(
    `campaign ${p.campaignId} failed: ${p.stopReason ?? 'its last round did not complete'}${round?.errorMessage ? `: ${round.errorMessage}` : ''}`,
  );
}

/**
 * The result of a campaign that is no longer running; one that ended without one (cancelled, terminated, timed out,
 * or failed as a workflow) is a CliFailure (exit code 1) saying how it ended and why, where Temporal knows.
 */
export async function closedCampaignResult(handle: WorkflowHandle, description: WorkflowExecutionDescription): Promise<CampaignProgress> {
  try {
    return (await handle.result()) as CampaignProgress;
  } catch (err) {
    if (!(err instanceof WorkflowFailedError)) throw err;
    throw new CliFailure(`campaign ${handle.workflowId} ${await howItEnded(handle, description, err)}`);
  }
}

async function howItEnded(handle: WorkflowHandle, description: WorkflowExecutionDescription, err: WorkflowFailedError): Promise<string> {
  switch (description.status.name) {
    case 'TERMINATED':
      return `terminated: ${err.cause?.message ?? 'no reason given'}`;
    case 'CANCELLED':
      return `cancelled${await cancelRequest(handle)}`;
    case 'TIMED_OUT': {
      // The server gives a run the execution timeout as its run timeout when it was started without one.
      const config = description.raw.executionConfig;
      const execution = Number(config?.workflowExecutionTimeout?.seconds ?? 0);
      const run = Number(config?.workflowRunTimeout?.seconds ?? 0);
      const limits = [execution > 0 ? `execution timeout ${execution}s` : '', run > 0 && run !== execution ? `run timeout ${run}s` : ''];
      return `timed out: it ran past its workflow ${limits.filter(Boolean).join(' or ') || 'timeout'}, set when it was started`;
    }
    default:
      return `${description.status.name.toLowerCase()}: ${err.cause?.message ?? err.message}`;
  }
}

/** Who asked for a campaign's cancellation, and why where they said: from the request in its history. */
async function cancelRequest(handle: WorkflowHandle): Promise<string> {
  const history = await handle.fetchHistory().catch(() => undefined);
  const request = history?.events?.find(
    (e) => e.workflowExecutionCancelRequestedEventAttributes,
  )?.workflowExecutionCancelRequestedEventAttributes;
  if (!request) return '';
  return `: requested by ${request.identity || 'an unnamed client'}${request.cause ? ` (${request.cause})` : ''}`;
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
      progress = await closedCampaignResult(handle, description);
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
