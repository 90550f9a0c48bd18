import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { WorkflowFailedError } from '@temporalio/client';
import { dpoLossAndGradients } from '../../activities/dpo-loss';
import type { RoundInput } from '../../workflows/round/contract';
import { roundWorkflow } from '../../workflows';
import { ledger } from '../helpers/emulator';
import { startPythonWorker, type PythonWorker } from '../helpers/python-worker';
import { arithmeticRoundInput, progressOf, roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// Custom rounds: the user's loss function (examples/custom-loss/losses.py, test/python/loss_faults.py) on a real
// `python -m roundhouse worker`, trained through each dialect's custom-loss pass on the emulator.
const { env, runRound, withWorker } = roundTestEnvironment(
  { provisioningDelayMs: 50 },
  { ...process.env, TOGETHER_API_KEY: 'tg-custom-key', TINKER_API_KEY: 'tml-custom-key' },
);
const LOSSES = path.resolve(__dirname, '../../examples/custom-loss/losses.py');
const FAULTS = path.resolve(__dirname, '../python/loss_faults.py');

const report = (r: { reportPath: string }) => JSON.parse(fs.readFileSync(r.reportPath, 'utf8'));
const calls = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-loss-calls-'));
let callsFile = '';

// One Python worker for the file (it starts in seconds); the crash test starts its own.
const queue = uniqueTaskQueue('py-losses');
let python: PythonWorker | undefined;
beforeAll(async () => {
  callsFile = path.join(calls, 'calls.jsonl');
  python = await startPythonWorker({
    address: env.temporal.settings.address!,
    taskQueue: queue,
    sources: [LOSSES, FAULTS],
    env: { ROUNDHOUSE_TEST_CALLS: callsFile },
  });
});
afterAll(async () => {
  await python?.stop();
});

type Dialect = 'together' | 'tinker';

/** A custom round on the support-ticket preference pairs (64 train, 20 eval): 8 steps of 8 pairs. */
function customInput(dialect: Dialect, name: string, options: { taskQueue?: string; custom?: string } = {}): RoundInput {
  const campaignId = `custom-${uniqueTaskQueue(name)}`;
  const input = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId,
    tickets: true,
    yaml: `training: { epochs: 1, batchSize: 8, learningRate: 0.005, loraRank: 8, maxSeqLen: 64, segmentSteps: 4 }
sampling: { maxTokens: 3 }
round: { kind: custom, custom: { loss: { kind: python, name: ${name}, taskQueue: ${options.taskQueue ?? queue}, heartbeatTimeoutSeconds: 3, retry: { maxAttempts: 2, initialIntervalSeconds: 0.2 } }${options.custom ?? ''} } }`,
  });
  input.spec.provider = { ...input.spec.provider, kind: dialect, baseUrl: env.emulator.url };
  return input;
}

/** The logged loss calls of one kind for a round's steps (the functions log by step, mode and process). */
function logged(kind: string, since: number): { step: number | null; mode: string; pid: number }[] {
  if (!fs.existsSync(callsFile)) return [];
  return fs
    .readFileSync(callsFile, 'utf8')
    .split('\n')
    .slice(since)
    .filter(Boolean)
    .map((l) => JSON.parse(l))
    .filter((c) => c.kind === kind);
}
const logLines = () => (fs.existsSync(callsFile) ? fs.readFileSync(callsFile, 'utf8').split('\n').filter(Boolean).length : 0);

async function failed(input: RoundInput, taskQueue: string): Promise<{ r: Record<string, unknown>; resourcesBefore: number }> {
  const resourcesBefore = (await ledger(env.emulator)).resources.length;
  const err = await runRound(input, taskQueue).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(WorkflowFailedError);
  return { r: report({ reportPath: path.join(input.reportDir, 'round-1.json') }), resourcesBefore };
}

test.each(['together', 'tinker'] as const)(
  'SimPO written in Python trains on %s: the held-out loss falls and preference accuracy rises; one recorded call per step, nothing in history',
  async (dialect) => {
    const taskQueue = uniqueTaskQueue(`custom-simpo-${dialect}`);
    const input = customInput(dialect, 'simpo');
    const handle = () => env.temporal.client.workflow.getHandle(`round-${input.campaignId}`);
    // The round's progress (what `watch` shows) is asked while its worker still runs.
    const [result, live] = await withWorker(taskQueue, async () => {
      const done = await env.temporal.client.workflow.execute(roundWorkflow, {
        taskQueue,
        workflowId: `round-${input.campaignId}`,
        args: [input],
      });
      return [done, await progressOf(handle())] as const;
    });
    expect(result).toMatchObject({ status: 'completed', kind: 'custom', stepsApplied: 8, totalSteps: 8 });
    const r = report(result);
    const before = r.loss_metrics.baseline;
    const after = r.loss_metrics.trained;
    console.log(
      `SimPO on ${dialect}: eval loss ${result.baselineLoss!.toFixed(4)} → ${result.trainedLoss!.toFixed(4)}, preference accuracy ${before.preference_accuracy} → ${after.preference_accuracy}`,
    );
    expect(result.trainedLoss!).toBeLessThan(result.baselineLoss!);
    expect(after.preference_accuracy).toBeGreaterThan(before.preference_accuracy);
    expect(r.steps).toHaveLength(8);
    expect(r.steps[0].metrics).toEqual({ mean_logprob_margin: expect.any(Number), preference_accuracy: expect.any(Number) });
    expect(r).toMatchObject({ kind: 'custom', cleanup_status: 'deactivated' });
    // `watch` shows the loss function's metrics (the round's progress carries the last segment's).
    expect(live?.latestMetrics).toEqual(r.steps[7].metrics);

    // Each step's result is recorded in the store under its identity, gradients included; the history holds none.
    const losses = path.join(input.reportDir, 'round-1.losses');
    const records = fs.readdirSync(losses).filter((f) => /^s\d+\.json$/.test(f));
    expect(records).toHaveLength(8);
    const step1 = JSON.parse(fs.readFileSync(path.join(losses, 's0000000.json'), 'utf8'));
    expect(step1).toMatchObject({ function: 'simpo', mode: 'train', loss: r.steps[0].loss });
    const gradient = step1.gradients[0].find((g: number) => g !== 0);
    const history = JSON.stringify(await handle().fetchHistory());
    expect(history).not.toContain(String(gradient));

    const l = await ledger(env.emulator);
    expect(l.sessions.find((s) => s.id === r.session_id)).toMatchObject({ optimizerSteps: 8, emptyOptimizerSteps: 0 });
    expect(l.active).toEqual([]);
  },
);

test('a DPO written in Python reproduces the built-in DPO: the same per-token gradients within 1e-6, the same ledger, the same trained loss', async () => {
  const builtIn = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId: `custom-${uniqueTaskQueue('dpo-builtin')}`,
    tickets: true,
    yaml: `training: { epochs: 1, batchSize: 8, learningRate: 0.005, loraRank: 8, maxSeqLen: 64, segmentSteps: 4 }
sampling: { maxTokens: 3 }
round: { kind: dpo, dpo: { beta: 0.5 } }`,
  });
  builtIn.spec.provider = { ...builtIn.spec.provider, kind: 'together', baseUrl: env.emulator.url };
  const python = customInput('together', 'dpo', { custom: ', reference: start' });
  const [a, b] = [await runRound(builtIn, uniqueTaskQueue('dpo-builtin')), await runRound(python, uniqueTaskQueue('dpo-python'))];
  expect(a).toMatchObject({ status: 'completed', stepsApplied: 8 });
  expect(b).toMatchObject({ status: 'completed', stepsApplied: 8 });

  // Every step's batch as the Python DPO saw it, through the built-in DPO's own function: the same gradients.
  const losses = path.join(python.reportDir, 'round-1.losses');
  let worst = 0;
  for (let step = 0; step < 8; step++) {
    const name = `s${String(step).padStart(7, '0')}.json`;
    const batch = JSON.parse(fs.readFileSync(path.join(losses, 'batches', name), 'utf8'));
    const record = JSON.parse(fs.readFileSync(path.join(losses, name), 'utf8'));
    const pairs = batch.rows.length;
    for (let i = 0; i < batch.datums.length; i += 2) {
      const [c, rj] = [batch.datums[i], batch.datums[i + 1]];
      expect([c.completion, rj.completion]).toEqual(['chosen', 'rejected']);
      const sum = (d: { reference_logprobs: number[]; weights: number[] }) =>
        d.reference_logprobs.reduce((x, lp, k) => x + lp * d.weights[k]!, 0);
      const dpo = dpoLossAndGradients(
        {
          chosen: { logprobs: c.logprobs, weights: c.weights, referenceLogprob: sum(c) },
          rejected: { logprobs: rj.logprobs, weights: rj.weights, referenceLogprob: sum(rj) },
        },
        0.5,
      );
      dpo.chosen.forEach((g, k) => (worst = Math.max(worst, Math.abs(g / pairs - record.gradients[i][k]))));
      dpo.rejected.forEach((g, k) => (worst = Math.max(worst, Math.abs(g / pairs - record.gradients[i + 1][k]))));
    }
  }
  console.log(
    `Python DPO vs built-in: largest per-token gradient difference ${worst.toExponential(2)}; trained loss ${a.trainedLoss} vs ${b.trainedLoss}`,
  );
  expect(worst).toBeLessThan(1e-6);
  // The same work on the trainer: the same operations and tokens, the same steps, the same weights' loss.
  const l = await ledger(env.emulator);
  const session = (id: string) => {
    const s = l.sessions.find((x) => x.id === id)!;
    return {
      step: s.step,
      optimizerSteps: s.optimizerSteps,
      emptyOptimizerSteps: s.emptyOptimizerSteps,
      tokens: s.tokens,
      operations: s.operationsSubmitted - s.duplicatesAbsorbed,
    };
  };
  expect(session(report(b).session_id)).toEqual(session(report(a).session_id));
  expect(Math.abs(b.trainedLoss! - a.trainedLoss!)).toBeLessThan(1e-6);
  expect(Math.abs(report(b).loss_metrics.trained.margin - a.trainedMargin!)).toBeLessThan(1e-6);
});

test.each(['together', 'tinker'] as const)(
  "a GRPO round on %s trains with CISPO written in Python: the function gets each completion's advantages and sampler logprobs, one call per step",
  async (dialect) => {
    const input = arithmeticRoundInput({
      baseUrl: env.emulator.url,
      campaignId: `custom-${uniqueTaskQueue(`cispo-${dialect}`)}`,
      limit: 5,
      yaml: `training: { epochs: 1, batchSize: 4, learningRate: 0.002, loraRank: 8, maxSeqLen: 64, segmentSteps: 4 }
sampling: { maxTokens: 3, temperature: 1, seed: 0 }
round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: numeric }, loss: { kind: python, name: cispo, taskQueue: ${queue} } } }`,
    });
    input.spec.provider = { ...input.spec.provider, kind: dialect, baseUrl: env.emulator.url };
    const result = await runRound(input, uniqueTaskQueue(`custom-cispo-${dialect}`));
    expect(result).toMatchObject({ status: 'completed', kind: 'grpo', stepsApplied: result.totalSteps });
    const r = report(result);
    expect(r.steps).toHaveLength(result.totalSteps);
    expect(r.steps[0].metrics).toEqual({ clipped_share: expect.any(Number) });
    const losses = path.join(input.reportDir, 'round-1.losses');
    const batch = JSON.parse(fs.readFileSync(path.join(losses, 'batches', 's0000000.json'), 'utf8'));
    const datum = batch.datums[0];
    expect(datum).toMatchObject({ completion: 'c0', advantages: expect.any(Array), sampler_logprobs: expect.any(Array) });
    expect(datum.advantages).toHaveLength(datum.logprobs.length);
    expect(fs.readdirSync(losses).filter((f) => /^s\d+\.json$/.test(f))).toHaveLength(result.totalSteps);
    const l = await ledger(env.emulator);
    expect(l.sessions.find((s) => s.id === r.session_id)).toMatchObject({ optimizerSteps: result.totalSteps });
    expect(l.active).toEqual([]);
  },
);

describe('a loss that fails fails the round by name, and nothing reaches the trainer or stays active', () => {
  test('one that raises: retried, then LossFailed naming the function, the step and the error', async () => {
    const since = logLines();
    const input = customInput('together', 'raising_at_step_two');
    const { r } = await failed(input, uniqueTaskQueue('custom-raise'));
    expect(r).toMatchObject({ status: 'failed', error_type: 'LossFailed', cleanup_status: 'deactivated' });
    // Step 1 trained and was recorded; step 2's call failed before anything reached the trainer.
    expect((r.steps as { step: number }[]).map((s) => s.step)).toEqual([1]);
    expect(r.error_message).toMatch(/loss 'raising_at_step_two' failed at step 2: ValueError: the margin table is missing/);
    expect(logged('raised', since)).toHaveLength(2); // retry.maxAttempts: 2
    const l = await ledger(env.emulator);
    expect(l.sessions.find((s) => s.id === r.session_id)).toMatchObject({ optimizerSteps: 1 });
    expect(l.active).toEqual([]);
  });

  test.each([
    ['nan_at_step_two', /nan/i],
    ['short_gradients', /datum 0 .*has 40 entries where its logprobs have 41/],
  ])('%s: refused before the custom forward-backward, not retried', async (name, message) => {
    const since = logLines();
    const input = customInput('together', name);
    const { r } = await failed(input, uniqueTaskQueue(`custom-${name}`));
    expect(r).toMatchObject({ status: 'failed', error_type: 'LossFailed', cleanup_status: 'deactivated' });
    expect(r.error_message).toMatch(new RegExp(`loss '${name}'`));
    expect(r.error_message).toMatch(message);
    if (name === 'nan_at_step_two') expect(logged('nan', since)).toHaveLength(1);
    const l = await ledger(env.emulator);
    expect(l.sessions.find((s) => s.id === r.session_id)!.optimizerSteps).toBe(name === 'nan_at_step_two' ? 1 : 0);
    expect(l.active).toEqual([]);
  });

  test('a loss that cannot take a batch is refused before anything is provisioned', async () => {
    const input = customInput('together', 'two_arguments');
    const { r, resourcesBefore } = await failed(input, uniqueTaskQueue('custom-signature'));
    expect(r).toMatchObject({ status: 'failed', error_type: 'InvalidInput', resource_id: null });
    expect(r.error_message).toMatch(/round\.custom\.loss\.name: two_arguments.*cannot take \(batch\)/);
    expect((await ledger(env.emulator)).resources.length).toBe(resourcesBefore);
  });
});

test('training.accumulate: 2 passes of 4 pairs per optimizer step, one loss call over both, exact steps', async () => {
  const since = logLines();
  const input = customInput('together', 'logged_cross_entropy');
  input.spec.training = { ...input.spec.training, batchSize: 4, accumulate: 2 };
  const result = await runRound(input, uniqueTaskQueue('custom-accumulate'));
  expect(result).toMatchObject({ status: 'completed', stepsApplied: 8, totalSteps: 8 });
  const train = logged('done', since).filter((c) => c.mode === 'train');
  expect(train.map((c) => c.step)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  const batch = JSON.parse(fs.readFileSync(path.join(input.reportDir, 'round-1.losses', 'batches', 's0000000.json'), 'utf8'));
  expect(batch.rows).toHaveLength(8);
  const l = await ledger(env.emulator);
  const s = l.sessions.find((x) => x.id === report(result).session_id)!;
  expect(s).toMatchObject({ optimizerSteps: 8, emptyOptimizerSteps: 0 });
  expect(l.active).toEqual([]);
});

test('the Python worker SIGKILLed inside a step: the step completes once, its gradients computed once in the kept lineage', async () => {
  const crashQueue = uniqueTaskQueue('py-losses-crash');
  const crashCalls = path.join(calls, 'crash.jsonl');
  const workerEnv = { ROUNDHOUSE_TEST_CALLS: crashCalls, ROUNDHOUSE_TEST_SLOW_STEP: '3', ROUNDHOUSE_TEST_SLOW_SECONDS: '4' };
  let worker = await startPythonWorker({
    address: env.temporal.settings.address!,
    taskQueue: crashQueue,
    sources: [FAULTS],
    env: workerEnv,
  });
  const input = customInput('together', 'logged_cross_entropy', { taskQueue: crashQueue });
  const read = () =>
    fs.existsSync(crashCalls)
      ? fs
          .readFileSync(crashCalls, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as { kind: string; step: number | null; mode: string; pid: number })
      : [];
  const running = runRound(input, uniqueTaskQueue('custom-crash'));
  const deadline = Date.now() + 60_000;
  while (!read().some((c) => c.kind === 'start' && c.step === 3) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  const killedPid = worker.pid;
  await worker.kill();
  worker = await startPythonWorker({ address: env.temporal.settings.address!, taskQueue: crashQueue, sources: [FAULTS], env: workerEnv });
  try {
    const result = await running;
    expect(result).toMatchObject({ status: 'completed', stepsApplied: 8 });
    const train = read().filter((c) => c.mode === 'train');
    const done = train.filter((c) => c.kind === 'done').map((c) => c.step);
    // Computed once per step: the killed call never finished; its retry on the new worker did.
    expect(done.sort()).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    const step3 = train.filter((c) => c.kind === 'start' && c.step === 3);
    expect(step3.map((c) => c.pid)).toEqual([killedPid, worker.pid]);
    const l = await ledger(env.emulator);
    expect(l.sessions.find((s) => s.id === report(result).session_id)).toMatchObject({ optimizerSteps: 8, emptyOptimizerSteps: 0 });
    expect(l.active).toEqual([]);
  } finally {
    await worker.stop();
  }
});
