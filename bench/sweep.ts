import fs from 'node:fs';
import path from 'node:path';
import { parseCampaignSpec } from '../config/io/spec';
import { ownerTagFor } from '../config/rules/owner-tag';
import type { Ledger } from '../emulator/engine/ledger';
import { writeTicketData } from '../examples/support-tickets/generate';
import { ledger } from '../test/helpers/emulator';
import type { CampaignInput, CampaignResult } from '../workflows/campaign/contract';
import type { SweepRecord } from '../workflows/sweep/contract';
import { campaignWorkflow } from '../workflows';
import { note, startBenchEmulator, trainingPhase, withWorker, type BenchContext, type Report } from './harness';

const GPU_TARGET = 0.3;
const WALL_TARGET = 1.3;
const LEARNING_RATES = [0.001, 0.002, 0.005, 0.01, 0.02];
/** Successive halving at η 2 over 5 arms: 5 → 3 → 2 → 1, so 3 rungs and the winner's last stretch. */
const RUNGS = 3;
const BATCH_SIZE = 4;
const EVAL_ROWS = 8;

/** One side of the comparison: its campaigns, how long they took together, and what the emulator's ledger billed them. */
interface Side {
  label: string;
  wallMs: number;
  resources: number;
  gpuSeconds: number;
  usd: number;
  optimizerSteps: number;
}

/**
 * What packing a sweep saves: a 5-arm learning-rate sweep (`sweep.over: training.learningRate`, successive halving by
 * eval loss every `rungSteps`, η 2) on the Together dialect, whose arms share one trainer as LoRA sessions, against the
 * 5 one-round campaigns a user would otherwise start at once, each provisioning its own trainer and training every
 * step; and against 5 such campaigns each stopped at the step the halving stopped its arm (which needs the sweep's
 * outcome beforehand: it isolates packing from halving). The emulator runs in clock-cycle mode (an operation completes
 * on the first tick after it was submitted, as hosted trainers batch work) with a trainer startup delay. GPU-seconds,
 * dollars, resources and optimizer steps are each side's own on the emulator's ledger; wall time is from the first
 * start to the last result. The emulator runs a trainer's sessions side by side without slowing each other.
 */
export async function sweepBenchmark(ctx: BenchContext, report: Report): Promise<void> {
  const cycleMs = ctx.quick ? 300 : 1000;
  // A Together trainer takes minutes to start; 5 s (5 steps here) keeps the run short. Billing starts at READY.
  const provisioningDelayMs = ctx.quick ? 1000 : 5000;
  const rungSteps = ctx.quick ? 1 : 4;
  const totalSteps = (RUNGS + 1) * rungSteps;
  const stamp = `${Date.now()}`;
  const taskQueue = `bench-sweep-${stamp}`;
  const dir = fs.mkdtempSync(path.join(ctx.scratch, 'sweep-'));
  writeTicketData(dir, BATCH_SIZE * rungSteps, EVAL_ROWS); // an epoch is a rung: the epochs set the steps
  const emulator = await startBenchEmulator({ clockCycleMs: cycleMs, provisioningDelayMs });
  const campaigns = benchCampaigns(dir, emulator.url);
  try {
    const sides = await withWorker(ctx, taskQueue, async () => {
      const sweepId = `${stamp}-packed`;
      const swept = await runSide(ctx, taskQueue, [campaigns.sweep(sweepId, rungSteps)]);
      const sweep = swept.results[0]!.rounds[0]?.sweep;
      if (!sweep?.winner) throw new Error(`the sweep ended ${swept.results[0]!.status} without a winner`);
      if (sweep.trainers?.length !== 1) throw new Error(`the sweep packed its arms on ${sweep.trainers?.length ?? 0} trainers, not 1`);
      note(`sweep packed: ${(swept.wallMs / 1000).toFixed(1)} s; ${describeSweep(sweep)}`);
      const full = await runSide(
        ctx,
        taskQueue,
        LEARNING_RATES.map((lr, i) => campaigns.single(`${stamp}-separate-lr${i + 1}`, RUNGS + 1, lr)),
        () => totalSteps,
      );
      const stepMs = await msPerStep(ctx, full.ids, totalSteps);
      note(
        `sweep separate: 5 campaigns of ${totalSteps} steps at once, ${(full.wallMs / 1000).toFixed(1)} s; ${stepMs.toFixed(0)} ms a step`,
      );
      // The same arms, each stopped where the halving stopped it: its rungs' worth of epochs.
      const armSteps = LEARNING_RATES.map((_, i) => sweep.arms.find((a) => a.arm === i + 1)!.step);
      const cut = await runSide(
        ctx,
        taskQueue,
        LEARNING_RATES.map((lr, i) => campaigns.single(`${stamp}-stopped-lr${i + 1}`, armSteps[i]! / rungSteps, lr)),
        (i) => armSteps[i]!,
      );
      note(`sweep separate, stopped at rungs: steps ${armSteps.join(', ')}, ${(cut.wallMs / 1000).toFixed(1)} s`);
      const fullSteps = armSteps.map(() => totalSteps);
      const l = await ledger(emulator);
      const measured = {
        packed: sideOf(l, 'packed', [sweepId], swept.wallMs, armSteps),
        separate: sideOf(l, 'separate', full.ids, full.wallMs, fullSteps),
        stopped: sideOf(l, 'separate_stopped_at_rungs', cut.ids, cut.wallMs, armSteps),
      };
      // This emulator is the benchmark's alone: every resource on it is one side's (none made and left without a session).
      const counted = Object.values(measured).reduce((n, side) => n + side.resources, 0);
      if (counted !== l.resources.length) throw new Error(`the ledger has ${l.resources.length} resources, the sides ${counted}`);
      return { ...measured, stepMs };
    });
    note(
      `sweep: the packed sweep trained ${sides.packed.optimizerSteps} optimizer steps (halving stopped the losing arms at rungs), the separate campaigns ${sides.separate.optimizerSteps} (every arm fully)`,
    );
    reportSides(ctx, report, sides, `lr5.clock${cycleMs}ms`);
  } finally {
    await emulator.close();
  }
}

/** The benchmark's campaigns over the same data: the 5-arm sweep, and one-round campaigns of one learning rate. */
function benchCampaigns(
  dir: string,
  baseUrl: string,
): {
  sweep(id: string, rungSteps: number): CampaignInput;
  single(id: string, epochs: number, learningRate: number): CampaignInput;
} {
  const training = (epochs: number, learningRate: number) =>
    `training: { epochs: ${epochs}, batchSize: ${BATCH_SIZE}, learningRate: ${learningRate}, loraRank: 8, maxSeqLen: 256 }`;
  const campaign = (id: string, lines: string): CampaignInput => {
    const file = path.join(dir, `${id}.yaml`);
    const text = `
name: bench-sweep
provider: { kind: local, baseUrl: "${baseUrl}", model: roundhouse/tiny-chat }
data: { train: train.jsonl, eval: eval.jsonl }
sampling: { maxTokens: 4, temperature: 0 }
evaluation: { scorer: exact }
rounds: { max: 1 }
${lines}
`;
    fs.writeFileSync(file, text);
    return { campaignId: id, spec: parseCampaignSpec(text, file), reportRoot: path.join(dir, 'campaigns') };
  };
  return {
    sweep: (id, rungSteps) =>
      campaign(
        id,
        `${training(RUNGS + 1, LEARNING_RATES[0]!)}
sweep:
  over: { training.learningRate: [${LEARNING_RATES.join(', ')}] }
  select: { metric: eval_loss, rungs: ${rungSteps}, eta: 2 }`,
      ),
    single: (id, epochs, learningRate) => campaign(id, training(epochs, learningRate)),
  };
}

/** Starts the campaigns at once and waits for all; each must complete with `steps(i)` steps applied, when given. */
async function runSide(
  ctx: BenchContext,
  taskQueue: string,
  campaigns: CampaignInput[],
  steps?: (i: number) => number,
): Promise<{ ids: string[]; wallMs: number; results: CampaignResult[] }> {
  const started = Date.now();
  const results = await Promise.all(
    campaigns.map((c) => ctx.client.workflow.execute(campaignWorkflow, { taskQueue, workflowId: c.campaignId!, args: [c] })),
  );
  const wallMs = Date.now() - started;
  results.forEach((r, i) => {
    const round = r.rounds[0];
    if (r.status !== 'completed' || round?.status !== 'completed')
      throw new Error(`campaign ${campaigns[i]!.campaignId} ended ${r.status} (round: ${round?.status} ${round?.errorMessage ?? ''})`);
    if (steps && round.stepsApplied !== steps(i))
      throw new Error(`campaign ${campaigns[i]!.campaignId} applied ${round.stepsApplied} steps, not ${steps(i)}`);
  });
  return { ids: campaigns.map((c) => c.campaignId!), wallMs, results };
}

/**
 * A side's own figures on the ledger: the resources its campaigns' sessions are on (a Together resource carries no
 * name; a session carries its round's owner tag, `roundhouse:<campaign id>-round-1[-arm-N]`), the sessions on them,
 * and nothing left active. The optimizer steps must be the arms' (`expected`): the same work on both sides, except
 * where the halving stopped.
 */
function sideOf(l: Ledger, label: string, campaignIds: string[], wallMs: number, expected: number[]): Side {
  const ours = (tag: string | null) => campaignIds.some((id) => tag === ownerTagFor(id) || tag?.startsWith(`${ownerTagFor(id)}-`));
  const ids = new Set(l.sessions.filter((s) => ours(s.displayName)).map((s) => s.resourceId));
  const resources = l.resources.filter((r) => ids.has(r.id));
  const sessions = l.sessions.filter((s) => ids.has(s.resourceId));
  const strangers = sessions.filter((s) => !ours(s.displayName));
  if (strangers.length) throw new Error(`${label}: sessions of others on its resources: ${strangers.map((s) => s.displayName).join(', ')}`);
  const optimizerSteps = sessions.reduce((n, s) => n + s.optimizerSteps, 0);
  const left = resources.filter((r) => l.active.includes(r.id));
  if (left.length) throw new Error(`${label}: ${left.length} resource(s) left active: ${left.map((r) => r.id).join(', ')}`);
  const want = expected.reduce((a, n) => a + n, 0);
  if (optimizerSteps !== want) throw new Error(`${label}: the ledger has ${optimizerSteps} optimizer steps, not ${want}`);
  return {
    label,
    wallMs,
    resources: resources.length,
    gpuSeconds: resources.reduce((a, r) => a + r.gpuSeconds, 0),
    usd: resources.reduce((a, r) => a + r.usd, 0) + sessions.reduce((a, s) => a + s.usd, 0),
    optimizerSteps,
  };
}

/** A step of the separate rounds, in their training phase (from their histories): what a step takes at this clock. */
async function msPerStep(ctx: BenchContext, campaignIds: string[], steps: number): Promise<number> {
  const phases = await Promise.all(
    campaignIds.map(async (id) => trainingPhase(await ctx.client.workflow.getHandle(`${id}-round-1`).fetchHistory())),
  );
  return phases.reduce((a, p) => a + p.ms, 0) / (phases.length * steps);
}

function reportSides(
  ctx: BenchContext,
  report: Report,
  sides: { packed: Side; separate: Side; stopped: Side; stepMs: number },
  label: string,
): void {
  const { packed, separate, stopped } = sides;
  const prefix = `sweep.${label}`;
  report({ name: `${prefix}.separate.ms_per_step`, value: sides.stepMs, target: "info; the training phase, from the rounds' histories" });
  for (const side of [packed, separate, stopped]) {
    report({ name: `${prefix}.${side.label}.wall_s`, value: side.wallMs / 1000, target: 'info' });
    report({ name: `${prefix}.${side.label}.gpu_minutes`, value: side.gpuSeconds / 60, target: 'info' });
    report({ name: `${prefix}.${side.label}.usd`, value: side.usd, target: 'info; the ledger, at the model price' });
    report({ name: `${prefix}.${side.label}.resources`, value: side.resources, target: 'info' });
    report({ name: `${prefix}.${side.label}.optimizer_steps`, value: side.optimizerSteps, target: 'info' });
  }
  const goal = (ratio: number, target: number, why = '') => ({
    target: `≤ ${target}${ctx.quick ? ' at full size' : ''}${why}`,
    met: ctx.quick ? undefined : ratio <= target,
  });
  const gpu = packed.gpuSeconds / separate.gpuSeconds;
  const wall = packed.wallMs / separate.wallMs;
  report({
    name: `${prefix}.gpu_over_separate`,
    value: gpu,
    ...goal(gpu, GPU_TARGET, '; packing and halving together: the separate campaigns train every step'),
  });
  report({ name: `${prefix}.wall_over_separate`, value: wall, ...goal(wall, WALL_TARGET) });
  report({ name: `${prefix}.usd_over_separate`, value: packed.usd / separate.usd, target: 'info; GPU time at one price' });
  report({
    name: `${prefix}.gpu_over_separate_stopped_at_rungs`,
    value: packed.gpuSeconds / stopped.gpuSeconds,
    target: 'info; packing alone: the same steps per arm, the stops known beforehand',
  });
  report({ name: `${prefix}.wall_over_separate_stopped_at_rungs`, value: packed.wallMs / stopped.wallMs, target: 'info' });
}

function describeSweep(sweep: SweepRecord): string {
  const decisions = sweep.decisions.map((d) => `rung ${d.rung} (step ${d.step}) kept ${d.kept.join(',')}`).join('; ');
  return `${decisions}; winner arm ${sweep.winner!.arm}; arm steps ${sweep.arms.map((a) => a.step).join(', ')}`;
}
