import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { lossPerToken } from '../../config/rules/loss-units';
import { ownerOf } from '../../emulator/engine';
import { lossBody } from '../../providers/together/mapping';
import { LOCAL_EMULATOR_KEY } from '../../workers/providers';
import { roundWorkflow } from '../../workflows';
import { roundProgressQuery, type RoundInput, type RoundProgress, type RoundResult } from '../../workflows/round/contract';
import { raw } from '../helpers/emulator';
import { arithmeticRoundInput, roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

/**
 * Issue #44 item 3: a round's loss per trained token (the report's step records, the round's `latestLoss`, and from
 * them MLflow's `train/loss_per_token`) is hand arithmetic on each step's forward-backward result as the emulator
 * answered it over Together's wire: a sum (cross-entropy, importance sampling, PPO) divided by the result's trained
 * tokens, a GRPO mean (its aggregation, token_mean unless the spec sets one) taken as it is.
 */

const { env, withWorker } = roundTestEnvironment({ provisioningDelayMs: 50 });

interface Step {
  step: number;
  loss: number;
  tokens: number;
  lossPerToken: number;
}

interface FbResult {
  loss: number;
  metrics: Record<string, number>;
}

/** Runs a round and reads what it reports of its steps, with each step's forward-backward result from the emulator. */
async function runRound(input: RoundInput, taskQueue: string) {
  const { result, progress } = await withWorker(taskQueue, async () => {
    const handle = await env.temporal.client.workflow.start(roundWorkflow, {
      taskQueue,
      workflowId: `round-${input.campaignId}`,
      args: [input],
    });
    const result: RoundResult = await handle.result();
    const progress: RoundProgress = await handle.query(roundProgressQuery);
    return { result, progress };
  });
  expect(result.status).toBe('completed');
  const report = JSON.parse(fs.readFileSync(result.reportPath, 'utf8'));
  const steps: Step[] = report.steps;
  const session: string = report.session_id;
  const results: FbResult[] = [];
  for (const s of steps) {
    const key = `${input.campaignId}/r${input.round}/s${s.step - 1}/forward-backward`;
    const op = env.emulator.engine.operationByKey(session, ownerOf(LOCAL_EMULATOR_KEY), key);
    const answer = await raw(env.emulator, 'GET', `/v1/rl/training-sessions/${session}/operations/forward-backward/${op.id}`, {
      apiKey: LOCAL_EMULATOR_KEY,
    });
    expect(answer.json.status).toBe('TRAINING_OPERATION_STATUS_COMPLETED');
    results.push(answer.json.output);
  }
  expect(steps.length).toBe(result.totalSteps);
  return { steps, results, latestLoss: progress.latestLoss };
}

function arithmetic(options: { taskQueue: string; yaml: string; dir?: string }): RoundInput {
  return arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId: `lpt-${options.taskQueue}`,
    dir: options.dir,
    limit: 3, // 9 sums: 7 to train, 2 held out
    yaml: options.yaml,
  });
}

/**
 * A GRPO round whose reward is the completion's length, cut at a stop string so lengths differ: with every completion
 * equally long, group-centred advantages sum to 0 over the tokens and the loss (on-policy, ratio 1) would be 0.
 */
function grpoInput(taskQueue: string, loss: string, grpo = ''): RoundInput {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-lpt-'));
  fs.writeFileSync(path.join(dir, 'length-reward.js'), 'exports.reward = (completion) => completion.length;\n');
  return arithmetic({
    taskQueue,
    dir,
    yaml: `training: { epochs: 1, batchSize: 4, learningRate: 0.01, loraRank: 8, maxSeqLen: 64 }
sampling: { maxTokens: 8, temperature: 1, stop: ["e"] }
round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: module, path: length-reward.js }, loss: ${loss}${grpo} } }`,
  });
}

/** Every step: the result carries `metric`, the record's tokens are the result's, and its per-token loss is `expected`. */
function expectPerToken(run: Awaited<ReturnType<typeof runRound>>, metric: 'loss:sum' | 'loss:mean', expected: (r: FbResult) => number) {
  expect(run.latestLoss).toBeCloseTo(expected(run.results[run.results.length - 1]!), 10);
  run.steps.forEach((s, i) => {
    const r = run.results[i]!;
    expect(s.loss).toBe(r.loss);
    expect(s.tokens).toBe(r.metrics['num_tokens:sum']);
    expect(s.lossPerToken).toBeCloseTo(expected(r), 10);
    expect(Object.keys(r.metrics).sort()).toEqual([metric, 'num_tokens:sum'].sort());
    expect(r.metrics[metric]).toBe(r.loss);
  });
  expect(run.latestLoss).toBe(run.steps[run.steps.length - 1]!.lossPerToken);
  const r = run.results[run.results.length - 1]!;
  console.log(`last step: loss ${r.loss} (${metric}) over ${r.metrics['num_tokens:sum']} tokens → loss per token ${run.latestLoss}`);
}

/** The last step's figure and the same divided by its tokens must differ, or the test could not tell them apart. */
function expectDiscriminating(run: Awaited<ReturnType<typeof runRound>>) {
  const r = run.results[run.results.length - 1]!;
  expect(Math.abs(r.loss)).toBeGreaterThan(1e-3);
  expect(r.metrics['num_tokens:sum']).toBeGreaterThan(1);
}

const sumPerToken = (r: FbResult) => r.loss / r.metrics['num_tokens:sum']!;
const asReported = (r: FbResult) => r.loss;

test('Roundhouse always sends GRPO an aggregation: token_mean when the spec sets none', () => {
  const datum = { modelInput: [1, 2], targetTokens: [2, 3], weights: [0, 1], logprobs: [0, -1], advantages: [0, 1] };
  expect(lossBody({ type: 'grpo' }, [datum]).loss).toEqual({
    type: 'LOSS_TYPE_GRPO',
    grpo_params: { agg_type: 'GRPO_LOSS_AGGREGATION_TYPE_TOKEN_MEAN' },
  });
  expect(lossBody({ type: 'grpo', aggregation: 'fixed_horizon' }, [datum]).loss).toMatchObject({
    grpo_params: { agg_type: 'GRPO_LOSS_AGGREGATION_TYPE_FIXED_HORIZON' },
  });
});

test('by dialect: Tinker (loss:sum) and Baseten Loops (skip_token_normalization) hand back sums for every loss; DPO’s figure is per pair', () => {
  for (const dialect of ['tinker', 'baseten'] as const) {
    for (const type of ['cross_entropy', 'importance_sampling', 'ppo'] as const) expect(lossPerToken(dialect, { type }, 12, 4)).toBe(3);
  }
  expect(lossPerToken('together', { type: 'grpo', aggregation: 'fixed_horizon' }, 0.5, 4)).toBe(0.5);
  expect(lossPerToken('local', { type: 'dpo' }, 0.7, 1)).toBe(0.7);
});

test('SFT (cross-entropy, a sum): loss per token is the result’s loss over its trained tokens', async () => {
  const taskQueue = uniqueTaskQueue('lpt-sft');
  const run = await runRound(
    arithmetic({
      taskQueue,
      yaml: `training: { epochs: 1, batchSize: 4, learningRate: 0.01, loraRank: 8, maxSeqLen: 64 }
sampling: { maxTokens: 3, temperature: 0 }`,
    }),
    taskQueue,
  );
  expectPerToken(run, 'loss:sum', sumPerToken);
});

test('GRPO under its default aggregation (token_mean, a mean): loss per token is the result’s loss, not divided again', async () => {
  const taskQueue = uniqueTaskQueue('lpt-grpo');
  const run = await runRound(grpoInput(taskQueue, '{ type: grpo }'), taskQueue);
  expectDiscriminating(run);
  expectPerToken(run, 'loss:mean', asReported);
});

// sequence_mean: on-policy (ratio 1) each sequence's mean is −A and a group's advantages sum to 0, so the loss is 0;
// one step off-policy, the last step's ratios move off 1.
test.each([
  ['token_mean', ''],
  ['sequence_mean', ', maxStepsOffPolicy: 1'],
  ['fixed_horizon', ''],
])('GRPO with aggregation %s (a mean): loss per token is the result’s loss as reported', async (aggregation, grpo) => {
  const taskQueue = uniqueTaskQueue(`lpt-${aggregation.replace('_', '-')}`);
  const run = await runRound(grpoInput(taskQueue, `{ type: grpo, aggregation: ${aggregation} }`, grpo), taskQueue);
  expectDiscriminating(run);
  expectPerToken(run, 'loss:mean', asReported);
});

test.each(['importance_sampling', 'ppo'])('%s (a sum): loss per token is the result’s loss over its trained tokens', async (type) => {
  const taskQueue = uniqueTaskQueue(`lpt-${type.replace('_', '-')}`);
  const run = await runRound(grpoInput(taskQueue, `{ type: ${type} }`), taskQueue);
  expectDiscriminating(run);
  expectPerToken(run, 'loss:sum', sumPerToken);
});
