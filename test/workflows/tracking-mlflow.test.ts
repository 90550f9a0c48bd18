import { MlflowClient } from '../../providers/mlflow/client';
import { trackCampaign } from '../../activities/tracking';
import { campaignWorkflow } from '../../workflows';
import type { CampaignInput, CampaignResult } from '../../workflows/campaign/contract';
import { campaignProgressQuery } from '../../workflows/campaign/contract';
import { readArtifact, testReportDir } from '../helpers/artifacts';
import { ticketCampaignSpec } from '../helpers/campaign';
import { ledger, startTestEmulator, type RunningEmulator } from '../helpers/emulator';
import {
  paramOf as param,
  runsOf as mlflowRuns,
  startMlflowServer,
  tagOf as tag,
  type RunningMlflow,
  type SearchedRun,
} from '../helpers/mlflow-server';
import { connectTestTemporal, uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';
import { bundleToFile, crashTestWorkerEnv, startWorkerProcess, type WorkerProcess } from '../helpers/worker-process';

// MLflow tracking against a real `mlflow server` (PyPI, SQLite backend, artifact proxy): a two-round campaign on
// real worker processes, one SIGKILLed in the middle of a training segment, read back through MLflow's REST API.

let temporal: TestTemporal;
let mlflow: RunningMlflow;
let emulator: RunningEmulator;
let bundleFile: string;

beforeAll(async () => {
  temporal = await connectTestTemporal();
  bundleFile = await bundleToFile();
  [mlflow, emulator] = await Promise.all([startMlflowServer(), startTestEmulator({ provisioningDelayMs: 100, operationLatencyMs: 120 })]);
}, 600_000);

afterAll(async () => {
  await emulator?.close();
  await mlflow?.close();
  await temporal?.close();
});

const runsOf = (experimentName: string) => mlflowRuns(mlflow.uri, experimentName);

async function artifactsOf(runId: string): Promise<string[]> {
  const res = await fetch(`${mlflow.uri}/api/2.0/mlflow/artifacts/list?run_id=${runId}`);
  return (((await res.json()) as { files?: { path: string }[] }).files ?? []).map((f) => f.path);
}

/** A campaign run to its end on a worker process of its own. */
async function runOn(
  worker: WorkerProcess,
  taskQueue: string,
  campaignId: string,
  spec: CampaignInput['spec'],
  dir: string,
): Promise<CampaignResult> {
  await worker.ready;
  return temporal.client.workflow.execute(campaignWorkflow, {
    taskQueue,
    workflowId: campaignId,
    args: [{ campaignId, spec, reportRoot: testReportDir(dir) } satisfies CampaignInput],
  });
}

test('a two-round campaign with a SIGKILL mid-segment: one nested run per round, every step logged exactly once, params, tags and artifacts', async () => {
  const taskQueue = uniqueTaskQueue('mlflow');
  const experiment = `roundhouse-${taskQueue}`;
  const { spec, dir } = ticketCampaignSpec({
    baseUrl: emulator.url,
    trainRows: 40,
    evalRows: 5,
    evaluation: '{ scorer: exact, every: 2 }',
    yaml: `rounds: { max: 2, nextData: { policy: all } }
tracking: { mlflow: { uri: "${mlflow.uri}", experiment: "${experiment}" } }`,
  });
  const campaignId = `mlflow-${taskQueue}`;
  const env = crashTestWorkerEnv(taskQueue, bundleFile);
  let worker: WorkerProcess = startWorkerProcess(env);
  let killedAt: number | undefined;
  try {
    await worker.ready;
    const handle = await temporal.client.workflow.start(campaignWorkflow, {
      taskQueue,
      workflowId: campaignId,
      args: [{ campaignId, spec, reportRoot: testReportDir(dir) } satisfies CampaignInput],
    });
    // Round 1: 40 rows / 10 × 2 epochs = 8 steps in segments of 4. Kill inside the first segment, after 2 steps
    // were applied at the trainer and before the segment flushed and logged them.
    const deadline = Date.now() + 120_000;
    while (killedAt === undefined && Date.now() < deadline) {
      const applied = (await ledger(emulator)).totals.optimizerSteps;
      if (applied >= 2 && applied < 4) killedAt = applied;
      else if (applied >= 4) break;
      else await new Promise((r) => setTimeout(r, 20));
    }
    expect(killedAt).toBeDefined();
    await worker.kill();
    worker = startWorkerProcess(env);
    await worker.ready;
    const result: CampaignResult = await handle.result();
    expect(result.rounds.map((r) => [r.status, r.totalSteps])).toEqual([
      ['completed', 8],
      ['completed', 8],
    ]);
    expect((await handle.query(campaignProgressQuery)).status).toBe('completed');

    const runs = await runsOf(experiment);
    const parent = runs.filter((r) => tag(r, 'mlflow.parentRunId') === undefined);
    expect(parent).toHaveLength(1);
    expect(tag(parent[0]!, 'roundhouse.workflow_id')).toBe(campaignId);
    expect(tag(parent[0]!, 'roundhouse.temporal_ui')).toMatch(new RegExp(`/workflows/${campaignId}$`));
    expect(parent[0]!.info.status).toBe('FINISHED');
    expect(await artifactsOf(parent[0]!.info.run_id)).toEqual(expect.arrayContaining(['campaign.json', 'report.html', 'summary.md']));
    const nested = runs
      .filter((r) => tag(r, 'mlflow.parentRunId') === parent[0]!.info.run_id)
      .sort((a, b) => a.info.run_name.localeCompare(b.info.run_name));
    expect(nested.map((r) => [r.info.run_name, tag(r, 'roundhouse.workflow_id'), r.info.status])).toEqual([
      ['round-1', `${campaignId}-round-1`, 'FINISHED'],
      ['round-2', `${campaignId}-round-2`, 'FINISHED'],
    ]);
    const client = new MlflowClient(mlflow.uri);
    for (const [i, run] of nested.entries()) {
      expect(param(run, 'training.learningRate')).toBe(String(spec.training.learningRate));
      expect(param(run, 'provider.model')).toBe('roundhouse/tiny-chat');
      // Each step exactly once (no gap, no duplicate), with the loss the round's report holds for it.
      const history = (await client.metricHistory(run.info.run_id, 'train/loss_per_token')).sort((a, b) => a.step - b.step);
      expect(history.map((m) => m.step)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
      const report = await readArtifact<{ steps: { step: number; loss: number; tokens: number }[] }>(result.rounds[i]!.reportPath);
      expect(history.map((m) => m.value)).toEqual(report.steps.map((s) => s.loss / s.tokens));
      expect((await client.metricHistory(run.info.run_id, 'train/learning_rate')).map((m) => m.step).sort((a, b) => a - b)).toEqual([
        1, 2, 3, 4, 5, 6, 7, 8,
      ]);
      // Baseline, the evaluations during training (every 2 steps), trained: each exactly once, as the report has them.
      const evalLoss = (await client.metricHistory(run.info.run_id, 'eval/loss')).sort((a, b) => a.step - b.step);
      expect(evalLoss.map((m) => m.step)).toEqual([0, 2, 4, 6, 8]);
      const curve = (await readArtifact<{ evaluation_curve: { step: number; loss: number }[] }>(result.rounds[i]!.reportPath))
        .evaluation_curve;
      expect(curve.map((p) => p.step)).toEqual([2, 4, 6]);
      expect(evalLoss.slice(1, 4).map((m) => m.value)).toEqual(curve.map((p) => p.loss));
      expect(await artifactsOf(run.info.run_id)).toEqual([`round-${i + 1}.json`]);
    }
    process.stderr.write(`[mlflow] killed the worker at trainer step ${killedAt}; ${runs.length} runs, each round's 8 steps logged once\n`);
    expect((await ledger(emulator)).active).toEqual([]);
  } finally {
    await worker.stop();
  }
}, 300_000);

test('a staged campaign: a run per stage nested under the campaign run, each round nested under its stage, the stage verdict on its run; a summary logged again makes nothing new', async () => {
  const taskQueue = uniqueTaskQueue('mlflow-stages');
  const experiment = `roundhouse-${taskQueue}`;
  const tracking = { mlflow: { uri: mlflow.uri, experiment } };
  // Two small SFT stages (20 rows / 10 × 2 epochs = 4 steps each), the first gated on its eval loss.
  const { spec, dir } = ticketCampaignSpec({
    baseUrl: emulator.url,
    trainRows: 20,
    evalRows: 5,
    yaml: `tracking: { mlflow: { uri: "${mlflow.uri}", experiment: "${experiment}" } }
stages:
  - name: first
    rounds: { max: 1 }
    gate: { metric: evalLoss, atMost: 1000 }
  - name: second
    rounds: { max: 1 }`,
  });
  const campaignId = `mlflow-stages-${taskQueue}`;
  const worker = startWorkerProcess(crashTestWorkerEnv(taskQueue, bundleFile));
  try {
    const result = await runOn(worker, taskQueue, campaignId, spec, dir);
    expect(result.status).toBe('completed');
    const [r1, r2] = result.rounds;
    expect([r1, r2].map((r) => [r!.stage, r!.status])).toEqual([
      [1, 'completed'],
      [2, 'completed'],
    ]);

    const runs = await runsOf(experiment);
    expect(runs).toHaveLength(5); // the campaign, two stages, two rounds: none made twice across three summaries
    const byName = (name: string) => runs.find((r) => r.info.run_name === name)!;
    const campaign = byName(campaignId);
    const [stage1, stage2] = [byName('stage-1-first'), byName('stage-2-second')];
    expect(tag(campaign, 'mlflow.parentRunId')).toBeUndefined();
    expect(campaign.info.status).toBe('FINISHED');
    expect([stage1, stage2].map((s) => tag(s, 'mlflow.parentRunId'))).toEqual([campaign.info.run_id, campaign.info.run_id]);
    expect(tag(byName('round-1'), 'mlflow.parentRunId')).toBe(stage1.info.run_id);
    expect(tag(byName('round-2'), 'mlflow.parentRunId')).toBe(stage2.info.run_id);
    expect(param(byName('round-2'), 'stage.name')).toBe('second');
    expect(param(campaign, 'stage.name')).toBeUndefined();

    // Each stage's run: its name and kind, its verdict, the checkpoint it started from and the one it passed on.
    expect([stage1, stage2].map((s) => [tag(s, 'roundhouse.stage_name'), tag(s, 'roundhouse.kind'), s.info.status])).toEqual([
      ['first', 'sft', 'FINISHED'],
      ['second', 'sft', 'FINISHED'],
    ]);
    expect(tag(stage1, 'roundhouse.gate')).toBe(`passed (evalLoss ${r1!.trainedLoss!.toFixed(3)}, needed ≤ 1000)`);
    expect(tag(stage1, 'roundhouse.gate_passed')).toBe('true');
    expect(tag(stage2, 'roundhouse.gate')).toBeUndefined();
    expect(tag(stage1, 'roundhouse.started_from')).toBe('base model');
    expect(tag(stage1, 'roundhouse.passed_on')).toBe(r1!.trainingCheckpointId);
    expect(tag(stage2, 'roundhouse.started_from')).toBe(r1!.trainingCheckpointId);
    expect(tag(stage2, 'roundhouse.loaded')).toBe('weights');
    expect(tag(stage2, 'roundhouse.passed_on')).toBe(r2!.trainingCheckpointId);
    const client = new MlflowClient(mlflow.uri);
    const headline = async (run: SearchedRun) =>
      (await client.metricHistory(run.info.run_id, 'stage/accuracy')).map((m) => [m.step, m.value]);
    expect(await headline(stage1)).toEqual([[1, r1!.accuracy]]);
    expect(await headline(stage2)).toEqual([[2, r2!.accuracy]]);

    // The final summary logged again (an activity retried): the same runs, the same points.
    await trackCampaign({ name: spec.name, tracking }, campaignId, result, []);
    expect(await runsOf(experiment)).toHaveLength(5);
    expect(await headline(stage2)).toEqual([[2, r2!.accuracy]]);
    expect((await ledger(emulator)).active).toEqual([]);
  } finally {
    await worker.stop();
  }
}, 300_000);

test('a sweep: the campaign run, the sweep as round 1 under it, one nested run per arm with its own fields; the spend against the budget on the campaign run', async () => {
  const taskQueue = uniqueTaskQueue('mlflow-sweep');
  const experiment = `roundhouse-${taskQueue}`;
  // 20 rows / 10 × 2 epochs = 4 steps; 3 arms halved at step 2 (3 → 2).
  const { spec, dir } = ticketCampaignSpec({
    baseUrl: emulator.url,
    trainRows: 20,
    evalRows: 5,
    yaml: `tracking: { mlflow: { uri: "${mlflow.uri}", experiment: "${experiment}" } }
rounds: { max: 1 }
budget: { maxUsd: 5 }
sweep:
  over: { training.learningRate: [0.001, 0.005, 0.02] }
  select: { metric: eval_loss, rungs: 2 }`,
  });
  const campaignId = `mlflow-sweep-${taskQueue}`;
  const worker = startWorkerProcess(crashTestWorkerEnv(taskQueue, bundleFile));
  try {
    const result = await runOn(worker, taskQueue, campaignId, spec, dir);
    expect(result.status).toBe('completed');
    const sweep = result.rounds[0]!.sweep!;
    const runs = await mlflowRuns(mlflow.uri, experiment);
    const byName = (name: string) => runs.find((r) => r.info.run_name === name)!;
    const campaign = byName(campaignId);
    const round = byName('round-1');
    expect(tag(round, 'mlflow.parentRunId')).toBe(campaign.info.run_id);
    const arms = [1, 2, 3].map((k) => byName(`arm-${k}`));
    expect(arms.map((a) => tag(a, 'mlflow.parentRunId'))).toEqual([round.info.run_id, round.info.run_id, round.info.run_id]);
    expect(arms.map((a) => Number(param(a, 'training.learningRate')))).toEqual([0.001, 0.005, 0.02]);
    expect(runs).toHaveLength(5); // the campaign, the sweep, three arms: none made twice
    const spent = await new MlflowClient(mlflow.uri).metricHistory(campaign.info.run_id, 'campaign/spent_usd');
    expect(spent.map((m) => [m.step, m.value])).toEqual([[1, result.rounds[0]!.costUsd]]);
    expect(tag(arms[sweep.winner!.arm - 1]!, 'roundhouse.sweep_outcome')).toBe('winner');
  } finally {
    await worker.stop();
  }
}, 300_000);
