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
import { ledger, startTestEmulator, type RunningEmulator } from '../helpers/emulator';
import { readArtifact, testReportDir } from '../helpers/artifacts';
import { joinLocation } from '../../config/io/artifacts';
import { ticketCampaignSpec } from '../helpers/campaign';
import { loadCampaignSpec } from '../../config/io/spec';
import { bundleWorkflows, connectTestTemporal, uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';
import { campaignWorkflow } from '../../workflows';

let temporal: TestTemporal;
let bundle: WorkflowBundleWithSourceMap;
let emulator: RunningEmulator;
let providers: ProviderRegistry;

beforeAll(async () => {
  temporal = await connectTestTemporal();
  bundle = await bundleWorkflows();
  emulator = await startTestEmulator({ provisioningDelayMs: 100 });
  providers = new ProviderRegistry({ stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-cproviders-')) });
});

afterAll(async () => {
  await providers?.close();
  await emulator?.close();
  await temporal?.close();
});

async function withWorker<T>(taskQueue: string, body: () => Promise<T>): Promise<T> {
  const worker = await createRoundhouseWorker({
    connection: temporal.nativeConnection,
    namespace: temporal.settings.namespace,
    taskQueue,
    workflowBundle: bundle,
    providers,
  });
  return worker.runUntil(body());
}

test('a 3-round campaign trains each round from the last checkpoint on its mistakes, improves, and writes every report and a summary', async () => {
  const taskQueue = uniqueTaskQueue('campaign');
  // The example itself (300 generated tickets, 60 held out), pointed at this test's emulator.
  const spec = loadCampaignSpec(path.resolve(__dirname, '../../examples/support-tickets/campaign.yaml'));
  spec.provider.baseUrl = emulator.url;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-example-'));
  const campaignId = `camp-${taskQueue}`;
  const input: CampaignInput = { campaignId, spec, reportRoot: testReportDir(path.join(dir, 'campaigns')) };
  const result: CampaignResult = await withWorker(taskQueue, async () => {
    const handle = await temporal.client.workflow.start(campaignWorkflow, { taskQueue, workflowId: campaignId, args: [input] });
    // Starting the same campaign id again attaches to the running one.
    const again = await temporal.client.workflow.start(campaignWorkflow, {
      taskQueue,
      workflowId: campaignId,
      args: [input],
      workflowIdConflictPolicy: 'USE_EXISTING',
    });
    expect(again.firstExecutionRunId).toBe(handle.firstExecutionRunId);
    return handle.result();
  });

  expect(result.status).toBe('completed');
  expect(result.rounds.map((r) => r.status)).toEqual(['completed', 'completed', 'completed']);
  expect(result.stopReason).toMatch(/rounds\.max \(3\) reached|target reached/);
  const [r1, r2, r3] = result.rounds;
  process.stderr.write(`[campaign] accuracy by round: ${result.rounds.map((r) => r.accuracy?.toFixed(3)).join(' → ')}\n`);
  expect(r2!.accuracy!).toBeGreaterThan(r1!.accuracy!); // round over round
  expect(r3!.accuracy!).toBeGreaterThan(r2!.accuracy!);
  expect(r3!.trainedLoss!).toBeLessThan(r1!.trainedLoss!);
  // Round 2 and 3 trained on a mistake-driven subset written as a new file, recorded with its sha256.
  expect(r2!.train.path).toBe(joinLocation(input.reportRoot, campaignId, 'round-2.train.jsonl'));
  expect(r2!.train.sha256).toMatch(/^[0-9a-f]{64}$/);
  expect(r2!.train.rows).toBeLessThan(300);
  expect(spec.rounds.nextData.policy).toBe('mistakes');
  // Each round continued from the previous round's training checkpoint.
  for (const r of [r2!, r3!]) {
    const report = await readArtifact(r.reportPath);
    expect(report.started_from_checkpoint).toBe(result.rounds[r.round - 2]!.trainingCheckpointId);
  }
  const summary = await readArtifact(result.summaryPath);
  expect(summary.rounds).toHaveLength(3);
  expect(summary.status).toBe('completed');
  expect((await ledger(emulator)).active).toEqual([]);
  // Continue-as-new between rounds: the campaign has one run per round plus the final one.
  const runs = [];
  for await (const w of temporal.client.workflow.list({ query: `WorkflowId = '${campaignId}'` })) runs.push(w);
  expect(runs.length).toBe(4);
});

test('pause mid-training releases the GPU; resume continues at the same step, none lost or doubled', async () => {
  const taskQueue = uniqueTaskQueue('campaign-pause');
  const { spec, dir } = ticketCampaignSpec({
    baseUrl: emulator.url,
    trainRows: 120,
    evalRows: 5,
    yaml: 'rounds: { max: 1, nextData: { policy: static } }',
  });
  const campaignId = `pause-${taskQueue}`;
  await withWorker(taskQueue, async () => {
    const handle = await temporal.client.workflow.start(campaignWorkflow, {
      taskQueue,
      workflowId: campaignId,
      args: [{ campaignId, spec, reportRoot: testReportDir(path.join(dir, 'campaigns')) } satisfies CampaignInput],
    });
    for (let i = 0; i < 300; i++) {
      const p = await handle.query(campaignProgressQuery);
      if (p.currentRound?.phase === 'training' && p.currentRound.step >= 4) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    await handle.executeUpdate(pauseCampaignUpdate);
    let paused;
    for (let i = 0; i < 300; i++) {
      paused = await handle.query(campaignProgressQuery);
      if (paused.currentRound?.phase === 'paused') break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(paused!.currentRound?.phase).toBe('paused');
    const stepAtPause = paused!.currentRound!.step;
    const l1 = await ledger(emulator);
    expect(l1.active).toEqual([]); // the GPU is released while paused
    const billed = l1.totals.gpuSeconds;
    await new Promise((r) => setTimeout(r, 300));
    expect((await ledger(emulator)).totals.gpuSeconds).toBe(billed); // and billing stopped

    await handle.executeUpdate(resumeCampaignUpdate);
    const result: CampaignResult = await handle.result();
    const round = result.rounds[0]!;
    expect(round).toMatchObject({ status: 'completed', stepsApplied: 24, totalSteps: 24 });
    const report = await readArtifact(round.reportPath);
    expect(report.steps.map((s: { step: number }) => s.step)).toEqual(Array.from({ length: 24 }, (_v, i) => i + 1));
    expect(report.deactivated_ids).toHaveLength(2); // the paused trainer and the resumed one
    const l2 = await ledger(emulator);
    const sessions = l2.sessions.filter((s) => report.deactivated_ids.includes(s.resourceId));
    expect(sessions.reduce((a, s) => a + s.optimizerSteps, 0)).toBe(24);
    expect(sessions.map((s) => s.optimizerSteps)).toEqual(expect.arrayContaining([stepAtPause]));
    expect(l2.active).toEqual([]);
  });
});

test('stop now cancels the running round, which releases its GPU; the campaign ends stopped', async () => {
  const taskQueue = uniqueTaskQueue('campaign-stop');
  const { spec, dir } = ticketCampaignSpec({ baseUrl: emulator.url, trainRows: 120, evalRows: 5, yaml: 'rounds: { max: 3 }' });
  const campaignId = `stop-${taskQueue}`;
  await withWorker(taskQueue, async () => {
    const handle = await temporal.client.workflow.start(campaignWorkflow, {
      taskQueue,
      workflowId: campaignId,
      args: [{ campaignId, spec, reportRoot: testReportDir(path.join(dir, 'c')) } satisfies CampaignInput],
    });
    for (let i = 0; i < 300; i++) {
      const p = await handle.query(campaignProgressQuery);
      if (p.currentRound?.phase === 'training') break;
      await new Promise((r) => setTimeout(r, 50));
    }
    await handle.executeUpdate(stopCampaignUpdate, { args: [{ mode: 'now' }] });
    const result: CampaignResult = await handle.result();
    expect(result.status).toBe('stopped');
    expect(result.rounds).toHaveLength(1);
    expect(result.rounds[0]!.status).toBe('cancelled');
    expect((await ledger(emulator)).active).toEqual([]);
  });
});

test('a GPU-minute limit lowered mid-round stops training at the next segment; the campaign ends stopped on its budget', async () => {
  const taskQueue = uniqueTaskQueue('campaign-budget');
  const { spec, dir } = ticketCampaignSpec({
    baseUrl: emulator.url,
    trainRows: 200,
    evalRows: 5,
    yaml: 'rounds: { max: 3 }\nbudget: { maxGpuMinutes: 1000 }',
  });
  const campaignId = `budget-${taskQueue}`;
  await withWorker(taskQueue, async () => {
    const handle = await temporal.client.workflow.start(campaignWorkflow, {
      taskQueue,
      workflowId: campaignId,
      args: [{ campaignId, spec, reportRoot: testReportDir(dir) } satisfies CampaignInput],
    });
    for (let i = 0; i < 300; i++) {
      const p = await handle.query(campaignProgressQuery);
      if (p.currentRound?.phase === 'training' && p.currentRound.step >= 4) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const updated = await handle.executeUpdate(setCampaignLimitsUpdate, { args: [{ maxGpuMinutes: 0.0001 }] });
    expect(updated.limits.maxGpuMinutes).toBe(0.0001);
    const result: CampaignResult = await handle.result();
    expect(result.status).toBe('stopped');
    expect(result.stopReason).toMatch(/GPU-minute budget reached in round 1/);
    expect(result.rounds).toHaveLength(1);
    const round = result.rounds[0]!;
    expect(round.status).toBe('stopped');
    expect(round.stepsApplied).toBeLessThan(round.totalSteps);
    expect(round.trainingCheckpointId).toBeDefined(); // progress kept for a later campaign
    expect((await ledger(emulator)).active).toEqual([]);
  });
});
