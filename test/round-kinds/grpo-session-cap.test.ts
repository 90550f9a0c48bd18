import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { WorkflowFailedError } from '@temporalio/client';
import type { RoundResult } from '../../workflows/round/contract';
import { ledger, setFaults, startTestEmulator } from '../helpers/emulator';
import { arithmeticRoundInput, roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// The most sessions a round opens on one resource: GRPO with a KL penalty holds two at once (the policy and its frozen
// reference), and a rollback on the same trainer opens both again. Against a cap of 2 (what the emulator gives
// openai/gpt-oss-20b, here on the small model) and a session stop that takes 300 ms, the round must stop both old
// sessions before it opens the new ones, and wait out the 429s while they are still stopping.
const STOP_DELAY_MS = 300;
const { env, runRound } = roundTestEnvironment({ provisioningDelayMs: 50, sessionCap: 2, stopDelayMs: STOP_DELAY_MS });

const report = (r: { reportPath: string }) => JSON.parse(fs.readFileSync(r.reportPath, 'utf8'));

function klRoundInput(baseUrl: string, campaignId: string) {
  return arithmeticRoundInput({
    baseUrl,
    campaignId,
    dir: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-grpo-cap-')),
    yaml: `training: { epochs: 1, batchSize: 8, learningRate: 0.002, loraRank: 8, maxSeqLen: 64, segmentSteps: 5, checkpointEvery: { steps: 3, keep: 2 } }
sampling: { maxTokens: 3, temperature: 1 }
round: { kind: grpo, grpo: { groupSize: 8, reward: { kind: numeric }, reference: start, loss: { type: grpo, beta: 0.05 } } }`,
  });
}

afterEach(async () => {
  await setFaults(env.emulator, {});
});

test('a GRPO round with a reference session, rolled back on the same trainer, never holds more sessions than the cap and leaves none open', async () => {
  const taskQueue = uniqueTaskQueue('grpo-cap');
  await setFaults(env.emulator, {
    seed: 3,
    rules: [{ kind: 'fail-operation', operation: 'optim-step', errorCode: 'INTERNAL_ERROR', after: 4, max: 1 }],
  });
  const result: RoundResult = await runRound(klRoundInput(env.emulator.url, `cap-${taskQueue}`), taskQueue);
  expect(result).toMatchObject({ status: 'completed', stepsApplied: 10, totalSteps: 10 });
  const r = report(result);
  expect(r.recoveries).toHaveLength(1);
  expect(r.recoveries[0]).toMatchObject({ error_type: 'OperationFailed', new_trainer: false });

  // Two sessions per lineage on the one trainer; every one of them stopped, the trainer released.
  const l = await ledger(env.emulator);
  const sessions = l.sessions.filter((s) => s.resourceId === r.resource_id);
  expect(sessions).toHaveLength(4);
  expect(sessions.filter((s) => s.optimizerSteps === 0)).toHaveLength(2); // the references never step
  await new Promise((resolve) => setTimeout(resolve, STOP_DELAY_MS + 50));
  expect((await ledger(env.emulator)).sessions.filter((s) => s.resourceId === r.resource_id).map((s) => s.status)).toEqual(
    Array(4).fill('STOPPED'),
  );
  expect(l.active).not.toContain(r.resource_id);
}, 180_000);

test('a reference session on a model whose resources take one session is refused before provisioning, naming round.grpo.reference', async () => {
  const taskQueue = uniqueTaskQueue('grpo-cap-1');
  const single = await startTestEmulator({ provisioningDelayMs: 50, sessionCap: 1 });
  try {
    const input = klRoundInput(single.url, `cap1-${taskQueue}`);
    const err = await runRound(input, taskQueue).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(WorkflowFailedError);
    expect((err as WorkflowFailedError).cause).toMatchObject({ type: 'InvalidInput' });
    const r = report({ reportPath: path.join(input.reportDir, 'round-1.json') });
    expect(r).toMatchObject({ status: 'failed', error_type: 'InvalidInput', resource_id: null });
    expect(r.error_message).toContain('round.grpo.reference');
    expect(r.error_message).toContain('roundhouse/tiny-chat accepts 1 concurrent session per resource');
    expect((await ledger(single)).resources).toEqual([]);
  } finally {
    await single.close();
  }
}, 120_000);
