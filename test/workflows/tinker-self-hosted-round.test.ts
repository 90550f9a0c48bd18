import fs from 'node:fs';
import path from 'node:path';
import type { RoundResult } from '../../workflows/round/contract';
import type { CampaignInput, CampaignResult } from '../../workflows/campaign/contract';
import { campaignWorkflow } from '../../workflows';
import { ticketCampaignSpec } from '../helpers/campaign';
import { ledger, setFaults } from '../helpers/emulator';
import { arithmeticRoundInput, roundTestEnvironment } from '../helpers/round';
import { testReportDir } from '../helpers/artifacts';
import { uniqueTaskQueue } from '../helpers/temporal';

// Rounds on a self-hosted Tinker-API server: the emulator's `skyrl` flavour (SkyRL 0.4.0's server: no session
// routes, server-made model ids, no session-addressed load, no loss:sum; FINDINGS.md). The key is not a `tml-` one:
// SkyRL checks none. What must hold is what holds on hosted Tinker: exactly the planned steps in the kept weights,
// none of them empty, and nothing left loaded.
// SkyRL's session timeout is 300 s: no session expires in these runs but the one the fault ends.
const { env, runRound, withWorker } = roundTestEnvironment(
  { tinkerFlavor: 'skyrl', tinkerSessionTtlMs: 300_000 },
  { ...process.env, TINKER_API_KEY: 'skyrl-self-hosted-key' },
);

const SFT = `training: { epochs: 2, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64, segmentSteps: 4, checkpointEvery: { steps: 2 } }
sampling: { maxTokens: 3 }`;

afterEach(async () => {
  await setFaults(env.emulator, {});
});

function selfHostedRound(name: string, taskQueue: string, yaml = SFT) {
  const input = arithmeticRoundInput({ baseUrl: env.emulator.url, campaignId: `self-hosted-${name}-${taskQueue}`, limit: 8, yaml });
  input.spec.provider = { ...input.spec.provider, kind: 'tinker', baseUrl: env.emulator.url };
  return input;
}

/** The report's kept model on the ledger, and whether anything is still loaded. */
async function keptModel(result: { reportPath: string }) {
  const report = JSON.parse(fs.readFileSync(result.reportPath, 'utf8'));
  const l = await ledger(env.emulator);
  return { report, l, kept: l.sessions.find((s) => s.id === report.session_id)! };
}

test('an SFT round on a self-hosted Tinker server: exact steps on a model of the server’s id, nothing left loaded', async () => {
  const taskQueue = uniqueTaskQueue('self-hosted-sft');
  const result: RoundResult = await runRound(selfHostedRound('sft', taskQueue), taskQueue);
  expect(result).toMatchObject({ status: 'completed', kind: 'sft', gpuMinutes: 0 });
  expect(result.stepsApplied).toBe(result.totalSteps);
  expect(Number.isFinite(result.baselineLoss) && Number.isFinite(result.trainedLoss)).toBe(true); // computed client-side
  const { report, l, kept } = await keptModel(result);
  expect(report.session_id).toMatch(/^model_[0-9a-f]{8}$/);
  expect(kept).toMatchObject({ step: result.totalSteps, lineageEmptyOptimizerSteps: 0 });
  expect(report.steps.map((s: { step: number }) => s.step)).toEqual(Array.from({ length: result.totalSteps }, (_v, i) => i + 1));
  expect(l.active).toEqual([]);
});

test('a two-round campaign continues from round 1’s checkpoint (created, then loaded as the model’s first request)', async () => {
  const taskQueue = uniqueTaskQueue('self-hosted-campaign');
  const { spec, dir } = ticketCampaignSpec({
    baseUrl: env.emulator.url,
    trainRows: 20,
    evalRows: 6,
    yaml: 'rounds: { max: 2, continueFrom: checkpoint, nextData: { policy: static } }',
  });
  spec.provider = { ...spec.provider, kind: 'tinker', baseUrl: env.emulator.url };
  const campaignId = `self-hosted-campaign-${taskQueue}`;
  const input: CampaignInput = { campaignId, spec, reportRoot: testReportDir(path.join(dir, 'campaigns')) };
  const result: CampaignResult = await withWorker(taskQueue, () =>
    env.temporal.client.workflow.execute(campaignWorkflow, { taskQueue, workflowId: campaignId, args: [input] }),
  );
  expect(result.rounds.map((r) => r.status)).toEqual(['completed', 'completed']);
  const [first, second] = result.rounds as [CampaignResult['rounds'][number], CampaignResult['rounds'][number]];
  const { report } = await keptModel(second);
  expect(report.started_from_checkpoint).toBe(first.trainingCheckpointId);
  // Round 2's weights before training are round 1's after: the same eval loss.
  expect(second.baselineLoss).toBeCloseTo(first.trainedLoss!, 3);
  const { l, kept } = await keptModel(second);
  // With its optimizer state, the checkpoint's step carries on: the kept model holds both rounds' steps.
  expect(kept.step).toBe(first.stepsApplied + second.stepsApplied);
  expect(kept.lineageEmptyOptimizerSteps).toBe(0);
  expect(kept.resumedFromCheckpoint).not.toBeNull();
  expect(l.active).toEqual([]);
});

test('a lost session (its models unloaded by the server mid-training) rolls back to the rolling checkpoint on a new session: exact steps, nothing left loaded', async () => {
  const taskQueue = uniqueTaskQueue('self-hosted-recovery');
  const input = selfHostedRound('recovery', taskQueue, `${SFT}\nadvanced: { maxRecoveries: 4 }`);
  await setFaults(env.emulator, { rules: [{ kind: 'session-expire', operation: 'optim-step', after: 5, max: 1 }] });
  const result: RoundResult = await runRound(input, taskQueue);
  expect(result).toMatchObject({ status: 'completed' });
  expect(result.stepsApplied).toBe(result.totalSteps);
  const { report, l, kept } = await keptModel(result);
  // "Model … not loaded": the server cannot say whether the session expired with it, so the round took a new one.
  expect(report.recoveries).toEqual([expect.objectContaining({ phase: 'training', code: 'SESSION_NOT_ACTIVE', new_trainer: true })]);
  expect(report.recoveries[0].rolled_back_to).toBeGreaterThan(0); // from the rolling checkpoint, not from scratch
  expect(report.deactivated_ids).toHaveLength(2);
  expect(kept).toMatchObject({ step: result.totalSteps, lineageEmptyOptimizerSteps: 0 });
  expect(report.steps.map((s: { step: number }) => s.step)).toEqual(Array.from({ length: result.totalSteps }, (_v, i) => i + 1));
  expect(l.active).toEqual([]);
});
