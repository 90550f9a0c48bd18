import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { RoundResult } from '../../workflows/round/contract';
import { ledger, raw, setFaults } from '../helpers/emulator';
import { arithmeticRoundInput, roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// Baseten Loops documents that a spot run "is stopped if its GPUs are reclaimed and cannot be resumed": a preempted
// spot run has ended, and the round goes on on a new run from its last checkpoint (#44).
const API_KEY = 'bt-spot-key';
const { env, runRound } = roundTestEnvironment({ provisioningDelayMs: 50 }, { ...process.env, BASETEN_API_KEY: API_KEY });

afterEach(async () => {
  await setFaults(env.emulator, {});
});

test('a Baseten round whose spot run is preempted mid-round completes with exact optimizer steps on a new spot run, both created as the spec asks', async () => {
  const taskQueue = uniqueTaskQueue('baseten-spot');
  const input = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId: `baseten-spot-${taskQueue}`,
    dir: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-spot-')),
    limit: 8,
    yaml: `training: { epochs: 2, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64, seed: 5, segmentSteps: 4, checkpointEvery: { steps: 2 } }
sampling: { maxTokens: 3 }`,
  });
  input.spec.provider = {
    ...input.spec.provider,
    kind: 'baseten',
    baseUrl: env.emulator.url,
    baseten: { availabilityModel: 'spot', replicas: 1, scaleDownDelaySeconds: 600 },
  };
  await setFaults(env.emulator, { rules: [{ kind: 'preempt', operation: 'optim-step', after: 3, max: 1 }] });

  const result: RoundResult = await runRound(input, taskQueue);
  const planned = result.totalSteps;
  expect(result).toMatchObject({ status: 'completed', stepsApplied: planned });

  const report = JSON.parse(fs.readFileSync(result.reportPath, 'utf8'));
  expect(report.steps.map((s: { step: number }) => s.step)).toEqual(Array.from({ length: planned }, (_v, i) => i + 1));
  expect(report.recoveries).toEqual([expect.objectContaining({ new_trainer: true })]);

  // Two runs: the preempted one (ended, never resumed) and its successor, each created with the round's settings.
  expect(report.deactivated_ids).toHaveLength(2);
  const runs = await Promise.all(
    report.deactivated_ids.map(
      async (id: string) => (await raw(env.emulator, 'GET', `/v1/loops/runs/${id}`, { apiKey: API_KEY, scheme: 'Api-Key' })).json.run,
    ),
  );
  for (const run of runs) {
    expect(run).toMatchObject({
      availability_model: 'spot',
      replicas: 1,
      scale_down_delay_seconds: 600,
      seed: 5,
      max_seq_len: 64,
      lora_rank: 8,
      status: { name: 'INACTIVE' },
    });
  }
  expect(runs.map((r) => r.deployment_status).sort()).toEqual(['PREEMPTED', 'STOPPED']);

  const l = await ledger(env.emulator);
  expect(l.active).toEqual([]);
  const kept = l.sessions.find((s) => s.id === report.session_id)!;
  expect(kept.step).toBe(planned);
  expect(kept.lineageEmptyOptimizerSteps).toBe(0);
});
