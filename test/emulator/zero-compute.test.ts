import { ledger, startTestEmulator, togetherProvider, type RunningEmulator } from '../helpers/emulator';
import { readArtifact } from '../helpers/artifacts';
import { roundTestEnvironment, ticketRoundInput, arithmeticRoundInput } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// The zero-compute emulator (`compute: none`, `roundhouse emulator --zero-compute`): rounds run end to end on it with
// the ledger counting every step, its figures are deterministic and fall as training goes on, and an operation
// costs no learner compute, so a benchmark of many rounds measures the orchestration, not the emulator.

const { env, runRound } = roundTestEnvironment({ provisioningDelayMs: 50, compute: 'none' });

interface StepRecord {
  step: number;
  loss: number;
  tokens: number;
}

test('an SFT round completes on it: every step in the ledger, the loss falling, the same figures twice', async () => {
  const losses: number[][] = [];
  for (const attempt of [1, 2]) {
    const taskQueue = uniqueTaskQueue(`zero-${attempt}`);
    const before = (await ledger(env.emulator)).totals.optimizerSteps;
    const input = ticketRoundInput({ baseUrl: env.emulator.url, campaignId: `zero-${taskQueue}`, trainRows: 48, evalRows: 8 });
    const result = await runRound(input, taskQueue);
    expect(result).toMatchObject({ status: 'completed', stepsApplied: 12, totalSteps: 12 });
    expect((await ledger(env.emulator)).totals.optimizerSteps - before).toBe(12);
    expect(result.trainedLoss!).toBeLessThan(result.baselineLoss!);
    const report = await readArtifact<{ steps: StepRecord[] }>(result.reportPath);
    losses.push(report.steps.map((s) => s.loss / s.tokens));
  }
  expect(losses[0]).toHaveLength(12);
  expect(losses[1]).toEqual(losses[0]); // deterministic
  expect(losses[0]![11]!).toBeLessThan(losses[0]![0]!);
  expect((await ledger(env.emulator)).active).toEqual([]);
}, 120_000);

test('a GRPO round runs on it too (sampling, rewards, weights sync), with the planned steps', async () => {
  const taskQueue = uniqueTaskQueue('zero-grpo');
  const input = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId: `zero-grpo-${taskQueue}`,
    limit: 32,
    yaml: `training: { epochs: 1, batchSize: 8, learningRate: 0.002, loraRank: 8, maxSeqLen: 64 }
sampling: { maxTokens: 3, temperature: 1 }
round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: numeric } } }`,
  });
  const result = await runRound(input, taskQueue);
  expect(result).toMatchObject({ status: 'completed', kind: 'grpo', stepsApplied: result.totalSteps });
  expect(result.totalSteps).toBeGreaterThan(0);
}, 120_000);

test('a forward-backward costs it a small fraction of the learner’s CPU time', async () => {
  const cpuFor = async (emulator: RunningEmulator) => {
    const provider = togetherProvider(emulator);
    const resource = await provider.provision({ model: 'roundhouse/tiny-chat', ownerTag: 'cpu' });
    await provider.waitReady(resource.id, { pollIntervalMs: 10 });
    const session = await provider.openSession({ resourceId: resource.id, loraRank: 8 });
    const tokens = Array.from({ length: 49 }, (_v, i) => (i * 7) % 200);
    const datum = { modelInput: tokens.slice(0, -1), targetTokens: tokens.slice(1), weights: tokens.slice(1).map(() => 1) };
    const started = process.cpuUsage();
    for (let i = 0; i < 10; i++) {
      await provider.awaitOperation(
        await provider.submitForwardBackward(
          session.id,
          `cpu-${i}`,
          Array.from({ length: 8 }, () => datum),
        ),
      );
    }
    const used = process.cpuUsage(started);
    await provider.deactivate(resource.id);
    await provider.close();
    return (used.user + used.system) / 1000;
  };
  const learner = await startTestEmulator();
  try {
    const [zeroMs, learnerMs] = [await cpuFor(env.emulator), await cpuFor(learner)];
    process.stderr.write(
      `[zero-compute] 10 forward-backwards of 8×48 tokens: ${zeroMs.toFixed(0)} ms CPU vs ${learnerMs.toFixed(0)} ms with the learner\n`,
    );
    expect(zeroMs).toBeLessThan(learnerMs / 3);
  } finally {
    await learner.close();
  }
}, 120_000);
