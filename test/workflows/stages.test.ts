import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { ProviderRegistry } from '../../workers/providers';
import { createRoundhouseWorker } from '../../workers/worker';
import {
  campaignProgressQuery,
  pauseCampaignUpdate,
  resumeCampaignUpdate,
  setCampaignLimitsUpdate,
  stopCampaignUpdate,
  type CampaignInput,
  type CampaignResult,
} from '../../workflows/campaign/contract';
import { ledger, setFaults, startTestEmulator, type RunningEmulator } from '../helpers/emulator';
import { readArtifact, testReportDir } from '../helpers/artifacts';
import { loadCampaignSpec, type CampaignSpec } from '../../config/io/spec';
import { arithmeticStagesSpec } from '../helpers/campaign';
import { bundleWorkflows, connectTestTemporal, uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';
import { campaignWorkflow } from '../../workflows';
import { renderProgress } from '../../cli/progress';
import { storeFor } from '../../config/io/artifacts';

// Staged campaigns (`stages:`): SFT, then GRPO or DPO, each stage starting from the last one's final training
// checkpoint, on a real dev server against the emulator; the example pipelines themselves are run.

let temporal: TestTemporal;
let bundle: WorkflowBundleWithSourceMap;
let emulator: RunningEmulator;
let providers: ProviderRegistry;

beforeAll(async () => {
  temporal = await connectTestTemporal();
  bundle = await bundleWorkflows();
  emulator = await startTestEmulator({ provisioningDelayMs: 50 });
  providers = new ProviderRegistry({ stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-stages-')) });
});

afterAll(async () => {
  await providers?.close();
  await emulator?.close();
  await temporal?.close();
});

async function runCampaign(name: string, spec: CampaignSpec, during?: (handle: any) => Promise<void>): Promise<CampaignResult> {
  const taskQueue = uniqueTaskQueue(name);
  const campaignId = `${name}-${taskQueue}`;
  const input: CampaignInput = { campaignId, spec, reportRoot: testReportDir(fs.mkdtempSync(path.join(os.tmpdir(), 'rh-stages-c-'))) };
  const worker = await createRoundhouseWorker({
    connection: temporal.nativeConnection,
    namespace: temporal.settings.namespace,
    taskQueue,
    workflowBundle: bundle,
    providers,
  });
  return worker.runUntil(async () => {
    const handle = await temporal.client.workflow.start(campaignWorkflow, { taskQueue, workflowId: campaignId, args: [input] });
    await during?.(handle);
    return handle.result();
  });
}

const example = (file: string) => {
  const spec = loadCampaignSpec(path.resolve(__dirname, '../../examples', file));
  spec.provider.baseUrl = emulator.url;
  return spec;
};

/** The emulator's session a round trained in (its owner tag names the round's workflow). */
async function sessionOf(workflowId: string) {
  const sessions = (await ledger(emulator)).sessions.filter((s) => s.displayName === `roundhouse:${workflowId}`);
  expect(sessions).toHaveLength(1);
  return sessions[0]!;
}

test('the arithmetic pipeline: SFT passes its gate, the GRPO stage starts from its final checkpoint and raises the mean reward', async () => {
  const result = await runCampaign('stages-arith', example('arithmetic/pipeline.yaml'));
  expect(result.status).toBe('completed');
  expect(result.stopReason).toBe('all 2 stages done: stage 2 (rl) rounds.max (1) reached');
  const [sft, grpo] = result.rounds;
  expect(sft).toMatchObject({ stage: 1, kind: 'sft', status: 'completed' });
  expect(grpo).toMatchObject({ stage: 2, kind: 'grpo', status: 'completed', stepsApplied: 30, totalSteps: 30 });
  expect(result.stages).toMatchObject([
    {
      stage: 1,
      name: 'warmup',
      kind: 'sft',
      firstRound: 1,
      rounds: 1,
      passedOn: sft!.trainingCheckpointId,
      endedBy: 'rounds.max (1) reached',
    },
    { stage: 2, name: 'rl', kind: 'grpo', firstRound: 2, rounds: 1, startedFrom: sft!.trainingCheckpointId, loadOptimizer: false },
  ]);
  expect(result.stages![0]!.gate).toMatchObject({ metric: 'evalLoss', bound: '≤ 2', passed: true, value: sft!.trainedLoss });
  expect(result.stages![1]!.headline).toEqual({ metric: 'meanReward', value: grpo!.meanReward });

  // The GRPO round's trainer loaded the SFT stage's final checkpoint (the emulator's ledger), weights only: its
  // optimizer step counter starts at 0, not at SFT's 80.
  const session = await sessionOf(grpo!.workflowId);
  expect(session.resumedFromCheckpoint).toBe(sft!.trainingCheckpointId);
  expect(session).toMatchObject({ step: 30, optimizerSteps: 30 });
  const report = await readArtifact(grpo!.reportPath);
  expect(report.started_from_checkpoint).toBe(sft!.trainingCheckpointId);

  // Rewards above 0 from the start (the warm start works), and higher at the end than at the start.
  const rewards: number[] = report.steps.map((s: { meanReward: number }) => s.meanReward);
  const mean = (xs: number[]) => xs.reduce((a, x) => a + x, 0) / xs.length;
  const [first, last] = [mean(rewards.slice(0, 10)), mean(rewards.slice(-10))];
  process.stderr.write(
    `[stages] arithmetic: SFT accuracy ${sft!.accuracy}; GRPO reward first 10 steps ${first.toFixed(3)} → last 10 ${last.toFixed(3)}, accuracy ${grpo!.accuracy}\n`,
  );
  expect(first).toBeGreaterThan(0);
  expect(last).toBeGreaterThan(first);
  expect((await ledger(emulator)).active).toEqual([]);

  const summary = await readArtifact(result.summaryPath);
  expect(summary.stages.map((s: { name: string }) => s.name)).toEqual(['warmup', 'rl']);
});

test('the support-ticket pipeline: SFT, then DPO from its checkpoint, raising held-out preference accuracy', async () => {
  const result = await runCampaign('stages-tickets', example('support-tickets/pipeline.yaml'));
  expect(result.status).toBe('completed');
  const [sft, dpo] = result.rounds;
  expect(sft).toMatchObject({ stage: 1, kind: 'sft', status: 'completed' });
  expect(dpo).toMatchObject({ stage: 2, kind: 'dpo', status: 'completed' });
  expect((await sessionOf(dpo!.workflowId)).resumedFromCheckpoint).toBe(sft!.trainingCheckpointId);
  const report = await readArtifact(dpo!.reportPath);
  process.stderr.write(
    `[stages] tickets: SFT accuracy ${sft!.accuracy}; DPO preference accuracy ${report.baseline_preference_accuracy} → ${dpo!.accuracy}\n`,
  );
  expect(dpo!.accuracy!).toBeGreaterThan(report.baseline_preference_accuracy);
  expect(result.stages![1]!.headline).toEqual({ metric: 'preferenceAccuracy', value: dpo!.accuracy });
  expect((await ledger(emulator)).active).toEqual([]);
});

/** A two-stage arithmetic spec over fresh data (1 SFT epoch: accuracy stays low). */
const arithmeticStages = (stages: string): CampaignSpec => arithmeticStagesSpec({ baseUrl: emulator.url, stages }).spec;

const GRPO_STAGE = `  - round: { kind: grpo, grpo: { reward: { kind: numeric }, loss: { type: importance_sampling } } }
    sampling: { maxTokens: 3, temperature: 1 }`;

test('a gate the first stage misses ends the campaign failed with its reason: no GRPO round, its checkpoint kept, nothing active', async () => {
  const spec = arithmeticStages(`  - name: warmup\n    gate: { metric: accuracy, atLeast: 0.99 }\n${GRPO_STAGE}`);
  const result = await runCampaign('stages-gate', spec);
  expect(result.status).toBe('failed');
  expect(result.rounds).toHaveLength(1);
  expect(result.stopReason).toMatch(/^stage 1 \(warmup\) did not pass its gate: accuracy 0\.\d{3}, needed ≥ 0\.99$/);
  expect(result.stages).toHaveLength(1);
  expect(result.stages![0]).toMatchObject({ gate: { passed: false }, passedOn: result.rounds[0]!.trainingCheckpointId });
  // `status` and summary.md name the stage, the gate it missed and the checkpoint it passed on.
  const missed = /stage 1 warmup \(sft\): round 1, accuracy \d+\.\d%; gate missed \(accuracy 0\.\d{3}, needed ≥ 0\.99\)/;
  expect(renderProgress(result)).toMatch(missed);
  expect(renderProgress(result)).toContain(`from the base model, passed on ${result.rounds[0]!.trainingCheckpointId}`);
  const summaryMd = result.summaryPath.replace(/campaign\.json$/, 'summary.md');
  const md = (await storeFor(summaryMd).read(summaryMd))!.toString('utf8');
  expect(md).toMatch(/\| 1 warmup \| sft \| round 1 \| accuracy [\d.]+% \| missed \(accuracy 0\.\d{3}, needed ≥ 0\.99\) \|/);
  expect(md).toContain(`| the base model | \`${result.rounds[0]!.trainingCheckpointId}\` |`);
  const l = await ledger(emulator);
  expect(l.checkpoints.map((c) => c.id)).toContain(result.rounds[0]!.trainingCheckpointId);
  expect(l.active).toEqual([]);
});

test('pause, resume and limits reach across stages: a round limit lowered in stage 1 ends the campaign before stage 2', async () => {
  const spec = arithmeticStages(`  - name: a\n    rounds: { max: 2, nextData: { policy: all } }\n${GRPO_STAGE}`);
  expect(spec.stages!.map((s) => s.rounds.max)).toEqual([2, 1]);
  const result = await runCampaign('stages-limits', spec, async (handle) => {
    for (let i = 0; i < 400; i++) {
      const p = await handle.query(campaignProgressQuery);
      if (p.currentRound?.phase === 'training') break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect((await handle.query(campaignProgressQuery)).limits.maxRounds).toBe(3); // the stages' rounds together
    expect((await handle.executeUpdate(pauseCampaignUpdate)).status).toBe('paused');
    expect((await handle.executeUpdate(resumeCampaignUpdate)).status).toBe('running');
    await handle.executeUpdate(setCampaignLimitsUpdate, { args: [{ maxRounds: 1 }] });
  });
  expect(result.status).toBe('completed');
  expect(result.stopReason).toBe('rounds.max (1) reached');
  expect(result.rounds.map((r) => [r.stage, r.status, r.stepsApplied])).toEqual([[1, 'completed', 10]]);
  expect((await ledger(emulator)).active).toEqual([]);
});

test("a pause that lands at the hand-off holds stage 2 unstarted, a pause in stage 2 holds its training; resumed, the campaign completes every planned step from stage 1's checkpoint", async () => {
  const spec = arithmeticStages(`  - name: a\n${GRPO_STAGE}`);
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  /** Polls `check` every `ms` until it returns true; past a minute, fails with what it saw last. */
  const until = async (what: string, ms: number, check: () => Promise<unknown>) => {
    let seen: unknown;
    for (const deadline = Date.now() + 60_000; Date.now() < deadline; await sleep(ms)) if ((seen = await check()) === true) return;
    throw new Error(`${what}: not within a minute; last seen ${JSON.stringify(seen)}`);
  };
  const exists = async (workflowId: string) =>
    temporal.client.workflow
      .getHandle(workflowId)
      .describe()
      .then(
        () => true,
        () => false,
      );
  let stage2StepWhilePaused: number | undefined;
  const result = await runCampaign('stages-pause', spec, async (handle) => {
    const [round1, round2] = [`${handle.workflowId}-round-1`, `${handle.workflowId}-round-2`];
    // The hand-off: stage 1's round has closed; stage 2's has not started. Between them the campaign chooses the next
    // data, writes its summary and continues as new: the pause is sent the moment stage 1's round closes.
    await until('stage 1 round closed', 10, async () => {
      const status = await temporal.client.workflow
        .getHandle(round1)
        .describe()
        .then((d) => d.status.name)
        .catch(() => 'NOT_STARTED');
      expect(status).toMatch(/NOT_STARTED|RUNNING|COMPLETED/);
      return status === 'COMPLETED' || status;
    });
    const paused = await handle.executeUpdate(pauseCampaignUpdate);
    expect({ status: paused.status, rounds: paused.rounds.length, stage2Started: await exists(round2) }).toEqual({
      status: 'paused',
      rounds: 1,
      stage2Started: false,
    });
    await sleep(2_000);
    expect(await exists(round2)).toBe(false); // held at the boundary, not merely late
    expect((await handle.query(campaignProgressQuery)).status).toBe('paused');
    expect((await handle.executeUpdate(resumeCampaignUpdate)).status).toBe('running');

    // In stage 2: paused while it trains, its steps hold still; resumed, it goes on. Every request waits 150 ms
    // meanwhile, so its steps take long enough for the pause to land among them, not after the last.
    await setFaults(emulator, { latencyMs: 150 });
    await until('stage 2 training', 50, async () => {
      const p = await handle.query(campaignProgressQuery);
      expect(p.rounds.length).toBe(1);
      return (p.currentRound?.round === 2 && p.currentRound.phase === 'training' && p.currentRound.step > 0) || p.currentRound;
    });
    expect((await handle.executeUpdate(pauseCampaignUpdate)).status).toBe('paused');
    await until('stage 2 paused', 50, async () => {
      const p = await handle.query(campaignProgressQuery);
      return p.currentRound?.phase === 'paused' || p.currentRound;
    });
    stage2StepWhilePaused = (await handle.query(campaignProgressQuery)).currentRound!.step;
    await sleep(2_000);
    const still = (await handle.query(campaignProgressQuery)).currentRound!;
    expect({ phase: still.phase, step: still.step }).toEqual({ phase: 'paused', step: stage2StepWhilePaused });
    await setFaults(emulator, {});
    expect((await handle.executeUpdate(resumeCampaignUpdate)).status).toBe('running');
  }).finally(() => setFaults(emulator, {})); // no test after this one waits on the latency
  expect(result.status).toBe('completed');
  const [first, second] = result.rounds;
  expect(first).toMatchObject({ stage: 1, kind: 'sft', status: 'completed', stepsApplied: first!.totalSteps });
  expect(second).toMatchObject({ stage: 2, kind: 'grpo', status: 'completed', stepsApplied: second!.totalSteps });
  expect(stage2StepWhilePaused).toBeGreaterThan(0);
  expect(stage2StepWhilePaused).toBeLessThan(second!.totalSteps);
  expect(result.stages![1]).toMatchObject({ stage: 2, startedFrom: first!.trainingCheckpointId });
  // The trainer applied exactly the planned steps, starting from stage 1's final checkpoint (the emulator's ledger).
  const sessions = (await ledger(emulator)).sessions.filter((s) => s.displayName === `roundhouse:${second!.workflowId}`);
  expect(sessions.length).toBeGreaterThan(0);
  expect(sessions[0]!.resumedFromCheckpoint).toBe(first!.trainingCheckpointId);
  expect(sessions.at(-1)!.step).toBe(second!.totalSteps);
  expect((await ledger(emulator)).active).toEqual([]);
});

test('stop after the round, asked in stage 1, ends the campaign stopped before stage 2 starts', async () => {
  const spec = arithmeticStages(`  - name: a\n${GRPO_STAGE}`);
  const result = await runCampaign('stages-stop', spec, async (handle) => {
    for (let i = 0; i < 400; i++) {
      const p = await handle.query(campaignProgressQuery);
      if (p.currentRound?.phase === 'training') break;
      await new Promise((r) => setTimeout(r, 50));
    }
    await handle.executeUpdate(stopCampaignUpdate, { args: [{ mode: 'after-round' }] });
  });
  expect(result.status).toBe('stopped');
  expect(result.stopReason).toBe('stopped by request after the round');
  expect(result.rounds.map((r) => [r.stage, r.status])).toEqual([[1, 'completed']]);
  expect(result.stages).toHaveLength(1);
  expect((await ledger(emulator)).active).toEqual([]);
});

test('promotion in SFT→GRPO puts the last stage’s best round forward, compared on that stage’s test set', async () => {
  const line = `stages-line-${Date.now()}`;
  const { spec, dir } = arithmeticStagesSpec({
    baseUrl: emulator.url,
    stages: `  - name: warmup
${GRPO_STAGE}
    name: rl
    data: { train: train.jsonl, eval: eval.jsonl, test: test.jsonl }`,
  });
  // Held-out sums (operands of 10 and 11) that neither stage trains or evaluates on; stage 1 has no test set at all.
  const rows = [10, 11].flatMap((a) =>
    [0, 1, 2, 3, 4].map((b) => JSON.stringify({ prompt: `What is ${a} + ${b}?`, answer: String(a + b) })),
  );
  fs.writeFileSync(path.join(dir, 'test.jsonl'), `${rows.join('\n')}\n`);
  spec.promotion = { line, metric: 'accuracy', minGain: 0, approval: 'auto', approvalTimeout: 3_600_000 };
  const result = await runCampaign('stages-promotion', spec);
  expect(result.status).toBe('completed');
  const [sft, grpo] = result.rounds;
  expect(sft).toMatchObject({ stage: 1, kind: 'sft', status: 'completed' });
  expect(sft!.test).toBeUndefined();
  expect(grpo).toMatchObject({ stage: 2, kind: 'grpo', status: 'completed', test: { rows: 10 } });
  expect(result.promotion).toMatchObject({ line, status: 'promoted', champion: { checkpointId: grpo!.trainingCheckpointId } });
  expect(result.promotion!.decision!.challenger).toMatchObject({
    round: 2,
    checkpointId: grpo!.trainingCheckpointId,
    // Measured as evaluation samples (greedy, one answer per prompt), not at the GRPO stage's training temperature of 1.
    figures: { on: 'test', rows: 10, sha256: grpo!.test!.sha256, measure: { sampling: { maxTokens: 3, temperature: 0, n: 1 } } },
  });
  expect((await ledger(emulator)).active).toEqual([]);
});
