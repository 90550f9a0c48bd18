import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { RoundResult } from '../../workflows/round/contract';
import { ledger } from '../helpers/emulator';
import { arithmeticRoundInput, roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// Baseten rounds reach the same emulator through its Loops dialect, with a key in the worker's environment only.
const { env, runRound } = roundTestEnvironment({ provisioningDelayMs: 50 }, { ...process.env, BASETEN_API_KEY: 'bt-test-key' });

const report = (r: RoundResult) => JSON.parse(fs.readFileSync(r.reportPath, 'utf8'));
const mean = (xs: number[]) => xs.reduce((a, x) => a + x, 0) / Math.max(1, xs.length);

async function sftCheckpoint(dir: string, taskQueue: string): Promise<RoundResult> {
  const sft = await runRound(
    arithmeticRoundInput({
      baseUrl: env.emulator.url,
      campaignId: `sft-${taskQueue}`,
      dir,
      yaml: `training: { epochs: 8, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64, segmentSteps: 40 }
sampling: { maxTokens: 3, temperature: 0 }`,
    }),
    taskQueue,
  );
  expect(sft.status).toBe('completed');
  return sft;
}

function grpoInput(dir: string, campaignId: string, training: string, grpo: string, startFrom?: RoundResult) {
  const input = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId,
    dir,
    yaml: `training: { batchSize: 8, loraRank: 8, maxSeqLen: 64, ${training} }
sampling: { maxTokens: 3, temperature: 1, seed: 0 }
round: { kind: grpo, grpo: { groupSize: 8, reward: { kind: numeric }, ${grpo} } }`,
  });
  if (startFrom) input.startFrom = { checkpointId: startFrom.trainingCheckpointId!, loadOptimizer: false };
  return input;
}

interface GrpoStep {
  step: number;
  meanReward: number;
  groupsKept: number;
  policyVersion: number;
  stepsOffPolicy: number;
}

test('a GRPO round on arithmetic, warm-started by a short SFT round, raises the mean reward over its epochs and the held-out accuracy', async () => {
  const taskQueue = uniqueTaskQueue('grpo');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-grpo-'));
  const sft = await sftCheckpoint(dir, taskQueue);
  const input = grpoInput(
    dir,
    `grpo-${taskQueue}`,
    'epochs: 3, learningRate: 0.002, segmentSteps: 10',
    'loss: { type: importance_sampling }',
    sft,
  );
  const result = await runRound(input, taskQueue);
  expect(result).toMatchObject({ status: 'completed', kind: 'grpo', stepsApplied: 30, totalSteps: 30 });
  const r = report(result);
  const steps: GrpoStep[] = r.steps;
  expect(steps.map((s) => s.step)).toEqual(Array.from({ length: 30 }, (_v, i) => i + 1));
  // Each epoch covers all 80 prompts once: compare whole epochs (sampling.seed seeds the draws, so this is reproducible).
  const epoch = (e: number) => mean(steps.slice(e * 10, (e + 1) * 10).map((s) => s.meanReward));
  console.log(
    `GRPO mean reward by epoch: ${[0, 1, 2].map((e) => epoch(e).toFixed(3)).join(' → ')}; eval accuracy ${sft.accuracy} (sft) → ${result.accuracy} (grpo)`,
  );
  // The warm start earns reward from the first epoch (a group that scores all zeros teaches nothing), the last epoch
  // earns a fifth more, and it shows on the held-out sums: the GRPO round answers more of them than its SFT start.
  expect(epoch(0)).toBeGreaterThan(0.05);
  expect(epoch(2)).toBeGreaterThan(epoch(0) * 1.2);
  expect(sft.accuracy!).toBeGreaterThan(0);
  expect(result.accuracy!).toBeGreaterThan(sft.accuracy!);
  expect(r).toMatchObject({
    kind: 'grpo',
    first_reward: steps[0]!.meanReward,
    latest_reward: steps[29]!.meanReward,
    cleanup_status: 'deactivated',
  });
  // On-policy (maxStepsOffPolicy 0): every step sampled the weights of the step before it, published by a sync.
  expect(steps.every((s) => s.stepsOffPolicy === 0)).toBe(true);
  expect(new Set(steps.map((s) => s.policyVersion)).size).toBe(30);
  const l = await ledger(env.emulator);
  expect(l.sessions.find((s) => s.id === r.session_id)).toMatchObject({ optimizerSteps: 30 });
  expect(l.active).toEqual([]);
});

test('bounded off-policy: with maxStepsOffPolicy 1 the next step is sampled while this one trains, never more than one step behind', async () => {
  const taskQueue = uniqueTaskQueue('grpo-overlap');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-grpo-'));
  const result = await runRound(
    grpoInput(dir, `overlap-${taskQueue}`, 'epochs: 1, learningRate: 0.002, segmentSteps: 4', 'maxStepsOffPolicy: 1'),
    taskQueue,
  );
  expect(result).toMatchObject({ status: 'completed', stepsApplied: 10 });
  const steps: GrpoStep[] = report(result).steps;
  expect(steps.map((s) => s.stepsOffPolicy)).toEqual([0, ...Array(9).fill(1)]);
  const l = await ledger(env.emulator);
  expect(l.sessions.find((s) => s.id === report(result).session_id)).toMatchObject({ optimizerSteps: 10 });
  expect(l.active).toEqual([]);
});

test('a KL penalty trains against a frozen reference session on the same trainer', async () => {
  const taskQueue = uniqueTaskQueue('grpo-kl');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-grpo-'));
  const result = await runRound(
    grpoInput(
      dir,
      `kl-${taskQueue}`,
      'epochs: 1, learningRate: 0.002, segmentSteps: 5',
      'reference: start, loss: { type: grpo, beta: 0.05 }',
    ),
    taskQueue,
  );
  expect(result).toMatchObject({ status: 'completed', stepsApplied: 10 });
  const r = report(result);
  const l = await ledger(env.emulator);
  const sessions = l.sessions.filter((s) => s.resourceId === r.resource_id);
  expect(sessions).toHaveLength(2);
  expect(sessions.map((s) => s.optimizerSteps).sort()).toEqual([0, 10]); // the reference never steps
  expect(l.active).toEqual([]);
});

test('a GRPO round on the Baseten Loops dialect (PPO loss): exact steps, on-policy samples, nothing left active', async () => {
  const taskQueue = uniqueTaskQueue('grpo-baseten');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-grpo-'));
  const input = grpoInput(dir, `baseten-${taskQueue}`, 'epochs: 1, learningRate: 0.002, segmentSteps: 5', 'loss: { type: ppo }');
  input.spec.provider = { ...input.spec.provider, kind: 'baseten', baseUrl: env.emulator.url };
  const result = await runRound(input, taskQueue);
  expect(result).toMatchObject({ status: 'completed', kind: 'grpo', stepsApplied: 10 });
  const r = report(result);
  const steps: GrpoStep[] = r.steps;
  expect(steps.map((s) => s.step)).toEqual(Array.from({ length: 10 }, (_v, i) => i + 1));
  expect(steps.every((s) => s.stepsOffPolicy === 0)).toBe(true);
  expect(r.provider).toBe('baseten');
  const l = await ledger(env.emulator);
  expect(l.resources.find((x) => x.id === r.resource_id)).toBeDefined();
  expect(l.active).toEqual([]);
});
