import fs from 'node:fs';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { parseCampaignSpec } from '../../../config/io/spec';
import { writeArithmeticData } from '../../../examples/arithmetic/generate';
import { campaignWorkflow, roundWorkflow } from '../../../workflows';
import type { CampaignInput, CampaignResult } from '../../../workflows/campaign/contract';
import type { RoundResult } from '../../../workflows/round/contract';
import { arithmeticRoundInput, progressOf } from '../../../test/helpers/round';
import { TRAINING_ACTIVITY } from '../../../test/helpers/running-activities';
import { killAtPoints, type WorkerProcess } from '../../../test/helpers/worker-process';
import type { Target } from './target';

// The conformance cases: Roundhouse's own workflows, on real worker processes, against one Tinker-API server. Every
// round is tiny and every batch the same shape (12 arithmetic rows in batches of 4, prompts of one length bucket):
// SkyRL's JAX backend compiles once per new shape, 5–28 s each on CPU.

export interface CaseContext {
  target: Target;
  client: Client;
  taskQueue: string;
  /** The worker serving the task queue; a case that kills it leaves its replacement here. */
  worker: WorkerProcess;
  /** The environment workers start with (the replacement after a kill too). */
  workerEnv: Record<string, string>;
  /** Scratch space: data, reports. */
  dir: string;
  log(line: string): void;
}

export interface ConformanceCase {
  name: string;
  /** Resolves to the figures of its PASS line; throws with the reason of its FAIL line. */
  run(ctx: CaseContext): Promise<string>;
}

const TRAINING = 'epochs: 1, batchSize: 4, learningRate: 0.01, loraRank: 8, maxSeqLen: 64, segmentSteps: 4';
const LENGTH_REWARD = path.join(__dirname, 'length-reward.js');

/** 16 sums, 4 held out: 12 training rows (3 steps of 4), the same prompt shape throughout. */
function arithmeticData(ctx: CaseContext): string {
  const dir = path.join(ctx.dir, 'data');
  if (!fs.existsSync(path.join(dir, 'train.jsonl'))) writeArithmeticData(dir, { limit: 4, evalShare: 0.25 });
  return dir;
}

function roundInput(ctx: CaseContext, name: string, yaml: string, pairs = false) {
  const input = arithmeticRoundInput({
    baseUrl: ctx.target.provider.baseUrl,
    campaignId: `conformance-${name}-${ctx.taskQueue}`,
    dir: arithmeticData(ctx),
    pairs,
    yaml,
  });
  input.spec.provider = { ...input.spec.provider, ...ctx.target.provider };
  return input;
}

/** The fields of a round's report.json the cases read. */
interface RoundReport {
  steps: { step: number }[];
  started_from_checkpoint: string | null;
}

/** A round's report, by the path the round returned. */
function report(result: { reportPath: string }): RoundReport {
  return JSON.parse(fs.readFileSync(result.reportPath, 'utf8'));
}

function expect(condition: unknown, reason: string): asserts condition {
  if (!condition) throw new Error(reason);
}

/** A completed round that applied every planned step; otherwise the round's own reason. */
function expectCompleted(result: RoundResult | CampaignResult['rounds'][number], label = 'round'): void {
  expect(
    result.status === 'completed',
    `${label} ${result.status}${result.errorType ? `: ${result.errorType}` : ''}${result.errorMessage ? `: ${result.errorMessage}` : ''}`,
  );
  expect(
    result.stepsApplied === result.totalSteps && result.totalSteps > 0,
    `${label}: ${result.stepsApplied} of ${result.totalSteps} steps`,
  );
}

const f2 = (n: number | undefined) => (n === undefined ? '–' : n.toFixed(2));
const f3 = (n: number | undefined) => (n === undefined ? '–' : n.toFixed(3));

async function runRound(ctx: CaseContext, input: ReturnType<typeof roundInput>): Promise<RoundResult> {
  return ctx.client.workflow.execute(roundWorkflow, { taskQueue: ctx.taskQueue, workflowId: `round-${input.campaignId}`, args: [input] });
}

const sft: ConformanceCase = {
  name: 'sft',
  async run(ctx) {
    const result = await runRound(ctx, roundInput(ctx, 'sft', `training: { ${TRAINING} }\nsampling: { maxTokens: 3 }`));
    expectCompleted(result);
    expect(result.trainingCheckpointId, 'no training checkpoint');
    expect(Number.isFinite(result.baselineLoss) && Number.isFinite(result.trainedLoss), 'no eval loss');
    return `steps ${result.stepsApplied}/${result.totalSteps}, eval loss ${f3(result.baselineLoss)} → ${f3(result.trainedLoss)}, accuracy ${f2(result.accuracy)}, train tokens ${result.tokens?.train ?? '–'}`;
  },
};

const grpo: ConformanceCase = {
  name: 'grpo',
  async run(ctx) {
    // The random model never answers a sum: a reward of the completion's length varies within every group.
    const yaml = `training: { ${TRAINING.replace('learningRate: 0.01', 'learningRate: 0.002')} }
sampling: { maxTokens: 3, temperature: 1 }
round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: module, path: "${LENGTH_REWARD}" }, loss: { type: importance_sampling } } }`;
    const result = await runRound(ctx, roundInput(ctx, 'grpo', yaml));
    expectCompleted(result);
    return `steps ${result.stepsApplied}/${result.totalSteps}, mean reward ${f2(result.firstReward)} → ${f2(result.latestReward)}, accuracy ${f2(result.accuracy)}, sample tokens ${result.tokens?.sample ?? '–'}`;
  },
};

const dpo: ConformanceCase = {
  name: 'dpo',
  async run(ctx) {
    const yaml = `training: { ${TRAINING} }\nsampling: { maxTokens: 3 }\nround: { kind: dpo, dpo: { beta: 0.5 } }`;
    const result = await runRound(ctx, roundInput(ctx, 'dpo', yaml, true));
    expectCompleted(result);
    expect(Number.isFinite(result.baselineMargin) && Number.isFinite(result.trainedMargin), 'no preference margin');
    return `steps ${result.stepsApplied}/${result.totalSteps}, preference accuracy ${f2(result.baselineAccuracy)} → ${f2(result.accuracy)}, margin ${f3(result.baselineMargin)} → ${f3(result.trainedMargin)}`;
  },
};

const campaign: ConformanceCase = {
  name: 'campaign',
  async run(ctx) {
    const data = arithmeticData(ctx);
    const p = ctx.target.provider;
    const yaml = `name: conformance-campaign
provider: { kind: tinker, baseUrl: "${p.baseUrl}", model: "${p.model}", tokenizer: "${p.tokenizer}" }
data: { train: ${path.join(data, 'train.jsonl')}, eval: ${path.join(data, 'eval.jsonl')} }
training: { ${TRAINING} }
sampling: { maxTokens: 3 }
evaluation: { scorer: numeric }
rounds: { max: 2, continueFrom: checkpoint, nextData: { policy: static } }
`;
    const file = path.join(ctx.dir, 'campaign.yaml');
    fs.writeFileSync(file, yaml);
    const campaignId = `conformance-campaign-${ctx.taskQueue}`;
    const input: CampaignInput = { campaignId, spec: parseCampaignSpec(yaml, file), reportRoot: path.join(ctx.dir, 'campaigns') };
    const result: CampaignResult = await ctx.client.workflow.execute(campaignWorkflow, {
      taskQueue: ctx.taskQueue,
      workflowId: campaignId,
      args: [input],
    });
    result.rounds.forEach((r) => expectCompleted(r, `round ${r.round}`)); // a failed round says why
    expect(
      result.rounds.length === 2,
      `${result.rounds.length} rounds, not 2 (campaign ${result.status}${result.stopReason ? `: ${result.stopReason}` : ''})`,
    );
    const [first, second] = result.rounds as [CampaignResult['rounds'][number], CampaignResult['rounds'][number]];
    const startedFrom = report(second).started_from_checkpoint;
    expect(
      first.trainingCheckpointId && startedFrom === first.trainingCheckpointId,
      `round 2 started from ${startedFrom}, not round 1's checkpoint ${first.trainingCheckpointId}`,
    );
    // Continuing, round 2's weights before training are round 1's after: the same eval loss, not the base model's.
    const [base, trained, resumed] = [first.baselineLoss!, first.trainedLoss!, second.baselineLoss!];
    expect(
      Math.abs(resumed - trained) < Math.abs(resumed - base) && Math.abs(resumed - trained) <= 0.01 * Math.abs(trained),
      `round 2's baseline loss ${f3(resumed)} is not round 1's trained ${f3(trained)} (base ${f3(base)})`,
    );
    return `rounds 2/2, steps ${first.stepsApplied}+${second.stepsApplied}, eval loss ${f3(base)} → ${f3(trained)} | ${f3(resumed)} → ${f3(second.trainedLoss)}`;
  },
};

const workerKill: ConformanceCase = {
  name: 'worker-kill',
  async run(ctx) {
    // 12 steps in segments of 4, a rolling checkpoint every 2: once the first segment has ended (step 4), the kill
    // lands inside a later one, and the round has a checkpoint to reopen from.
    const training = TRAINING.replace('epochs: 1', 'epochs: 4');
    const yaml = `training: { ${training}, checkpointEvery: { steps: 2, keep: 3 } }
sampling: { maxTokens: 3 }
advanced: { heartbeatTimeoutSeconds: 5, maxRecoveries: 5 }`;
    const input = roundInput(ctx, 'kill', yaml);
    const handle = await ctx.client.workflow.start(roundWorkflow, {
      taskQueue: ctx.taskQueue,
      workflowId: `round-${input.campaignId}`,
      args: [input],
    });
    const killed = await killAtPoints({
      points: [
        {
          name: 'inside training after step 4',
          when: (p) => p.phase === 'training' && p.step >= 4,
          inside: { activity: TRAINING_ACTIVITY },
        },
      ],
      progress: () => progressOf(handle),
      workflow: handle,
      worker: ctx.worker,
      env: ctx.workerEnv,
      describe: (p) => `phase ${p.phase}, step ${p.step}`,
      beyond: (p) => ['checkpointing', 'sampling', 'evaluating', 'cleanup', 'completed', 'failed', 'cancelled'].includes(p.phase),
      perPointMs: 600_000,
      log: ctx.log,
    });
    ctx.worker = killed.worker;
    const result = await handle.result();
    const hit = killed.outcomes.filter((o) => o.hit);
    expect(hit.length === 1 && killed.missed.length === 0, `no kill inside training: ${killed.missed.join('; ') || 'no outcome'}`);
    expectCompleted(result);
    const steps = report(result).steps.map((s) => s.step);
    expect(steps.join() === Array.from({ length: result.totalSteps }, (_v, i) => i + 1).join(), `step records ${steps.join(',')}`);
    const rollback = result.recoveries?.find((r) => r.phase === 'training');
    expect(rollback, `no recovery in training (recoveries: ${JSON.stringify(result.recoveries ?? [])})`);
    expect(
      rollback.checkpointId && rollback.rolledBackTo > 0,
      `the recovery reopened from ${rollback.checkpointId ?? 'no checkpoint'} at step ${rollback.rolledBackTo}`,
    );
    return `SIGKILL in training (${hit[0]!.detail}), reopened from the step-${rollback.rolledBackTo} checkpoint, steps ${result.stepsApplied}/${result.totalSteps}, ${result.recoveries!.length} recover${result.recoveries!.length === 1 ? 'y' : 'ies'}`;
  },
};

export const CASES: ConformanceCase[] = [sft, grpo, dpo, campaign, workerKill];
