import { WorkflowFailedError } from '@temporalio/client';
import { LOCAL_EMULATOR_KEY } from '../../workers/providers';
import type { RoundInput } from '../../workflows/round/contract';
import { joinLocation } from '../../config/io/artifacts';
import { readArtifact } from '../helpers/artifacts';
import { ledger, raw } from '../helpers/emulator';
import { arithmeticRoundInput, roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

/**
 * The trainer a round provisions is the one it needs (issue #44, item 4): a round that never samples gets a
 * trainer-only resource (no idle generator), a round that samples is refused a trainer-only one, and a step's batch
 * over the model's maximum is refused, each before anything is provisioned. Real rounds on the strict emulator.
 */

// Baseten rounds reach the same emulator through its Loops dialect, with a key in the worker's environment only.
const BASETEN_KEY = 'bt-test-key';
const { env, runRound } = roundTestEnvironment({ provisioningDelayMs: 50 }, { ...process.env, BASETEN_API_KEY: BASETEN_KEY });

const report = (r: { reportPath: string }) => readArtifact(r.reportPath);

/** The resource as the emulator's Together API describes it (the local dialect's account). */
const generatorReplicasOf = async (resourceId: string): Promise<number> => {
  const res = await raw(env.emulator, 'GET', `/v1/rl/model-resources/${resourceId}`, { apiKey: LOCAL_EMULATOR_KEY });
  expect(res.status).toBe(200);
  return res.json.compute_config.num_generator_replicas as number;
};

/** Runs a round expected to be refused before provisioning; returns the refusal's message. */
async function refusedBeforeProvisioning(input: RoundInput, taskQueue: string): Promise<string> {
  const before = (await ledger(env.emulator)).resources.length;
  const err = await runRound(input, taskQueue).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(WorkflowFailedError);
  expect((err as WorkflowFailedError).cause).toMatchObject({ type: 'InvalidInput' });
  expect((await ledger(env.emulator)).resources.length).toBe(before);
  const r = await readArtifact(joinLocation(input.reportDir, 'round-1.json'));
  expect(r).toMatchObject({ status: 'failed', error_type: 'InvalidInput', cleanup_status: 'nothing-to-release' });
  return r.error_message as string;
}

const grpoYaml = (training: string, grpo: string) => `training: { epochs: 1, loraRank: 8, maxSeqLen: 64, learningRate: 0.002, ${training} }
sampling: { maxTokens: 3, temperature: 1 }
round: { kind: grpo, grpo: { reward: { kind: numeric }, ${grpo} } }`;

/** An SFT round that measures eval loss only (`evaluation.sampleAnswers: false`), or one that samples its answers. */
const sftInput = (taskQueue: string, sampleAnswers: boolean) =>
  arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId: taskQueue,
    evaluation: `{ scorer: numeric, sampleAnswers: ${sampleAnswers} }`,
    yaml: `training: { epochs: 1, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64 }
sampling: { maxTokens: 3, temperature: 0 }`,
  });

test('an SFT round without sampled answers provisions a trainer-only resource (0 generator replicas) and completes on eval loss', async () => {
  const taskQueue = uniqueTaskQueue('sft-trainer-only');
  const input = sftInput(taskQueue, false);
  expect(input.spec.provider.generatorReplicas).toBeUndefined(); // chosen from the round, not written in the spec
  const result = await runRound(input, taskQueue);
  expect(result).toMatchObject({ status: 'completed', stepsApplied: result.totalSteps, samplerCheckpointId: expect.any(String) });
  expect(result.trainedLoss!).toBeLessThan(result.baselineLoss!);
  expect(result.accuracy).toBeUndefined(); // nothing sampled, nothing scored
  const r = await report(result);
  expect(r).toMatchObject({ cleanup_status: 'deactivated', evaluations: [] });
  expect(await generatorReplicasOf(r.resource_id)).toBe(0);
});

test('on Baseten, an SFT round without sampled answers creates its run without a paired sampler (/v1/loops/trainers) and completes', async () => {
  const taskQueue = uniqueTaskQueue('baseten-trainer-only');
  const input = sftInput(taskQueue, false);
  input.spec.provider = { ...input.spec.provider, kind: 'baseten', baseUrl: env.emulator.url };
  const result = await runRound(input, taskQueue);
  expect(result).toMatchObject({ status: 'completed', stepsApplied: result.totalSteps, samplerCheckpointId: expect.any(String) });
  const runId = (await report(result)).resource_id as string;
  const run = await raw(env.emulator, 'GET', `/v1/loops/runs/${runId}`, { apiKey: BASETEN_KEY, scheme: 'Api-Key' });
  expect(run.status).toBe(200);
  expect(run.json.run.sampler).toBeNull();
});

test('a DPO round provisions a trainer-only resource and completes', async () => {
  const taskQueue = uniqueTaskQueue('dpo-trainer-only');
  const input = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId: `dpo-trainer-only-${taskQueue}`,
    tickets: true,
    yaml: `training: { epochs: 1, batchSize: 8, learningRate: 0.005, loraRank: 8, maxSeqLen: 64, segmentSteps: 8 }
sampling: { maxTokens: 3 }
round: { kind: dpo }`,
  });
  const result = await runRound(input, taskQueue);
  expect(result).toMatchObject({ status: 'completed', kind: 'dpo', accuracy: expect.any(Number) });
  expect(await generatorReplicasOf((await report(result)).resource_id)).toBe(0);
});

test('an SFT round that samples its answers keeps a generator (1 replica by default)', async () => {
  const taskQueue = uniqueTaskQueue('sft-generator');
  const result = await runRound(sftInput(taskQueue, true), taskQueue);
  expect(result).toMatchObject({ status: 'completed', accuracy: expect.any(Number) });
  expect(await generatorReplicasOf((await report(result)).resource_id)).toBe(1);
});

test('a GRPO round with provider.generatorReplicas 0 is refused before provisioning, with the reason', async () => {
  const taskQueue = uniqueTaskQueue('grpo-no-generator');
  const input = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId: `grpo-no-generator-${taskQueue}`,
    yaml: grpoYaml('batchSize: 8', 'groupSize: 4'),
  });
  // The spec's own checks refuse it too (test/unit/trainer-shape.test.ts); a round started with it refuses it itself.
  input.spec.provider.generatorReplicas = 0;
  expect(await refusedBeforeProvisioning(input, taskQueue)).toMatch(
    /provider\.generatorReplicas: 0 provisions a trainer-only resource, with no generator to sample on, but a grpo round samples the groups it trains on/,
  );
});

test("a GRPO step of batchSize × groupSize sequences over the model's max batch size is refused before provisioning, naming both", async () => {
  const taskQueue = uniqueTaskQueue('grpo-batch');
  const input = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId: `grpo-batch-${taskQueue}`,
    yaml: grpoYaml('batchSize: 8', 'groupSize: 64'),
  });
  expect(await refusedBeforeProvisioning(input, taskQueue)).toContain(
    "training.batchSize × round.grpo.groupSize: 8 × 64 = 512 sequences per forward-backward step, over roundhouse/tiny-chat's maximum batch size of 256",
  );
});
