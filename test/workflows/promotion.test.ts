import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { writeTicketData, writeTicketTestSet } from '../../examples/support-tickets/generate';
import { parseCampaignSpec } from '../../config/io/spec';
import { MlflowClient } from '../../providers/mlflow/client';
import { ProviderRegistry } from '../../workers/providers';
import { createRoundhouseWorker } from '../../workers/worker';
import { championPath, createPromotionActivities, linesRoot, readChampion } from '../../activities/promotion';
import { registerChampion as registerInActivity } from '../../activities/tracking';
import { MockActivityEnvironment } from '@temporalio/testing';
import { renderProgress } from '../../cli/progress';
import {
  campaignProgressQuery,
  stopCampaignUpdate,
  type CampaignInput,
  type CampaignProgress,
  type CampaignResult,
} from '../../workflows/campaign/contract';
import {
  approvePromotionUpdate,
  rejectPromotionUpdate,
  type ChampionRecord,
  type PromotionRecordInput,
} from '../../workflows/campaign/promotion-contract';
import { startTestEmulator, type RunningEmulator } from '../helpers/emulator';
import { readArtifact, testReportDir } from '../helpers/artifacts';
import { startMlflowServer, type RunningMlflow } from '../helpers/mlflow-server';
import { bundleWorkflows, connectTestTemporal, uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';
import { bundleToFile, crashTestWorkerEnv, startWorkerProcess, type WorkerProcess } from '../helpers/worker-process';
import { campaignWorkflow } from '../../workflows';

// Champion and challenger on a real dev server, a real MLflow server (its Model Registry) and the emulator: each
// campaign's best round is put to its model line; the line's champion is a record in the artifact store and a
// registered model version with the alias `champion`.

let temporal: TestTemporal;
let bundle: WorkflowBundleWithSourceMap;
let emulator: RunningEmulator;
let mlflow: RunningMlflow;
let providers: ProviderRegistry;
let dataDir: string;

beforeAll(async () => {
  [temporal, bundle, emulator, mlflow] = await Promise.all([
    connectTestTemporal(),
    bundleWorkflows(),
    startTestEmulator({ provisioningDelayMs: 50 }),
    startMlflowServer(),
  ]);
  providers = new ProviderRegistry({ stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-promo-')) });
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-promo-data-'));
  writeTicketData(dataDir, 60, 15);
  writeTicketTestSet(dataDir, 'test-a.jsonl', 20, 23);
  writeTicketTestSet(dataDir, 'test-b.jsonl', 16, 29);
}, 180_000);

afterAll(async () => {
  await providers?.close();
  await emulator?.close();
  await mlflow?.close();
  await temporal?.close();
});

/** A one-round ticket campaign put to `line`: `strong` trains 2 epochs at a useful rate, weak barely trains. */
function campaignInput(o: {
  line: string;
  strong: boolean;
  test?: string;
  promotion?: string;
  label: string;
  root: string;
  sampling?: string;
}): CampaignInput {
  const text = `
name: promo-${o.label}
provider: { kind: local, baseUrl: "${emulator.url}", model: roundhouse/tiny-chat }
data: { train: train.jsonl, eval: eval.jsonl, test: ${o.test ?? 'test-a.jsonl'} }
training: { epochs: ${o.strong ? 2 : 1}, batchSize: 10, learningRate: ${o.strong ? 0.005 : 0.00001}, loraRank: 8, maxSeqLen: 256, segmentSteps: 6 }
sampling: ${o.sampling ?? '{ maxTokens: 4, temperature: 0 }'}
evaluation: { scorer: exact }
advanced: { heartbeatTimeoutSeconds: 5 }
rounds: { max: 1 }
tracking: { mlflow: { uri: "${mlflow.uri}", experiment: promotion-tests } }
promotion: { line: ${o.line}, ${o.promotion ?? 'minGain: 0.05'} }
`;
  const file = path.join(dataDir, `campaign-${o.label}.yaml`);
  fs.writeFileSync(file, text);
  const campaignId = `promo-${o.label}-${Date.now()}`;
  return { campaignId, spec: parseCampaignSpec(text, file), reportRoot: o.root };
}

function newWorker(taskQueue: string) {
  return createRoundhouseWorker({
    connection: temporal.nativeConnection,
    namespace: temporal.settings.namespace,
    taskQueue,
    workflowBundle: bundle,
    providers,
  });
}

async function runCampaign(input: CampaignInput, taskQueue: string): Promise<CampaignResult> {
  const worker = await newWorker(taskQueue);
  return worker.runUntil(temporal.client.workflow.execute(campaignWorkflow, { taskQueue, workflowId: input.campaignId!, args: [input] }));
}

const registry = () => new MlflowClient(mlflow.uri);

/** The line's champion (its newest record); a line without one fails the test, naming it. */
async function championOf(root: string, line: string): Promise<ChampionRecord> {
  const current = await readChampion(root, line);
  if (!current) throw new Error(`${line}: no champion`);
  return current.record;
}

/** Why an update was refused (its validator's message is the failure's cause). */
async function refusal(update: Promise<unknown>): Promise<string> {
  try {
    await update;
  } catch (err) {
    return `${(err as Error).message}: ${((err as Error).cause as Error | undefined)?.message ?? ''}`;
  }
  throw new Error('the update was accepted');
}

test('the first result becomes the champion; a better challenger replaces it (one version, one alias move); a worse one does not', async () => {
  const line = `tickets-${Date.now()}`;
  const root = testReportDir(path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rh-promo-r-')), 'campaigns'));
  const taskQueue = uniqueTaskQueue('promotion');

  const weak = await runCampaign(campaignInput({ line, strong: false, label: 'weak', root }), taskQueue);
  expect(weak.status).toBe('completed');
  expect(weak.promotion).toMatchObject({ line, status: 'promoted', reason: 'no champion yet: the first result becomes it' });
  const first = await championOf(root, line);
  expect(first.checkpointId).toBe(weak.best!.checkpointId);
  expect(first.figures).toMatchObject({
    on: 'test',
    rows: 20,
    accuracy: weak.rounds[0]!.test!.accuracy,
    sha256: weak.rounds[0]!.test!.sha256,
  });
  expect(first.registry).toEqual({ name: line, version: '1' });
  expect(await registry().aliasVersion(line, 'champion')).toBe('1');

  const strong = await runCampaign(campaignInput({ line, strong: true, label: 'strong', root }), taskQueue);
  process.stderr.write(`[promotion] test accuracy: weak ${weak.rounds[0]!.test!.accuracy}, strong ${strong.rounds[0]!.test!.accuracy}\n`);
  expect(strong.rounds[0]!.test!.accuracy).toBeGreaterThanOrEqual(weak.rounds[0]!.test!.accuracy + 0.05);
  expect(strong.promotion).toMatchObject({
    status: 'promoted',
    champion: { checkpointId: strong.best!.checkpointId, registry: { name: line, version: '2' } },
  });
  expect(strong.promotion!.decision!.champion).toMatchObject({ checkpointId: first.checkpointId });
  const second = await championOf(root, line);
  expect(second.history.map((h) => h.checkpointId)).toEqual([weak.best!.checkpointId, strong.best!.checkpointId]);
  expect(second.history[1]!.replaced).toBe(weak.best!.checkpointId);
  expect(await registry().aliasVersion(line, 'champion')).toBe('2');

  // The weak recipe again: below the champion by more than minGain, so the champion stays; the decision is recorded.
  const again = await runCampaign(campaignInput({ line, strong: false, label: 'weak-again', root }), taskQueue);
  expect(again.promotion).toMatchObject({ status: 'kept' });
  expect(again.promotion!.reason).toMatch(/short of 5\.0%/);
  expect((await championOf(root, line)).checkpointId).toBe(strong.best!.checkpointId);
  const versions = await registry().modelVersions(line);
  expect(versions.map((v) => v.version).sort()).toEqual(['1', '2']);
  expect(await registry().aliasVersion(line, 'champion')).toBe('2');
  // MLflow shows the held-out figure under its own key, apart from eval's.
  const runs = (await (
    await fetch(`${mlflow.uri}/api/2.0/mlflow/runs/search`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        experiment_ids: [await registry().experimentId('promotion-tests')],
        filter: `tags.\`roundhouse.campaign_id\` = '${strong.campaignId}' and tags.\`roundhouse.round\` = '1'`,
      }),
    })
  ).json()) as { runs: { data: { metrics?: { key: string; value: number }[] } }[] };
  const metrics = runs.runs.flatMap((r) => r.data.metrics ?? []);
  expect(metrics.find((m) => m.key === 'test/metric')?.value).toBe(strong.rounds[0]!.test!.accuracy);
  expect(metrics.find((m) => m.key === 'eval/metric')?.value).toBe(strong.rounds[0]!.accuracy);
  const decisions = fs.readdirSync(path.join(linesRoot(root), line, 'decisions'));
  expect(decisions).toHaveLength(3);
  const summary = fs.readFileSync(path.join(root, again.campaignId, 'summary.md'), 'utf8');
  expect(summary).toContain(`- promotion (line ${line}): kept:`);
}, 300_000);

test('a champion scored on other rows is re-scored on the challenger’s before they are compared', async () => {
  const line = `rescore-${Date.now()}`;
  const root = testReportDir(path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rh-promo-r-')), 'campaigns'));
  const taskQueue = uniqueTaskQueue('promotion-rescore');
  const first = await runCampaign(campaignInput({ line, strong: true, label: 'on-a', root }), taskQueue);
  expect(first.promotion?.status).toBe('promoted');
  const second = await runCampaign(campaignInput({ line, strong: false, label: 'on-b', root, test: 'test-b.jsonl' }), taskQueue);
  const decision = second.promotion!.decision!;
  // The champion's figures were for test-a; it was measured on test-b by an evaluation-only round first.
  expect(decision.champion).toMatchObject({ checkpointId: first.best!.checkpointId, rescored: true });
  expect(decision.champion!.figures.sha256).toBe(second.rounds[0]!.test!.sha256);
  expect(decision.champion!.figures.rows).toBe(16);
  const rescore = await readArtifact<{ steps_applied: number; started_from_checkpoint: string; test: { rows: number } }>(
    decision.champion!.figures.reportPath,
  );
  expect(rescore).toMatchObject({ steps_applied: 0, started_from_checkpoint: first.best!.checkpointId, test: { rows: 16 } });
  expect(second.promotion!.status).toBe('kept');
}, 300_000);

test('two campaigns on one line finishing together: the second to record is judged again against the first, the better one is champion, the alias on it', async () => {
  const line = `together-${Date.now()}`;
  const root = testReportDir(path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rh-promo-r-')), 'campaigns'));
  const taskQueue = uniqueTaskQueue('promotion-together');
  // Both are judged against the empty line, then wait for approval: approved at once, they record together.
  const manual = 'approval: manual, approvalTimeout: 1h, minGain: 0.05';
  const inputs = [
    campaignInput({ line, strong: true, label: 'together-strong', root, promotion: manual }),
    campaignInput({ line, strong: false, label: 'together-weak', root, promotion: manual }),
  ];
  const worker = await newWorker(taskQueue);
  const [strong, weak] = await worker.runUntil(async () => {
    const handles = await Promise.all(
      inputs.map((input) => temporal.client.workflow.start(campaignWorkflow, { taskQueue, workflowId: input.campaignId!, args: [input] })),
    );
    for (const handle of handles)
      for (let i = 0; i < 1200 && (await handle.query(campaignProgressQuery)).promotion?.status !== 'pending-approval'; i++)
        await new Promise((r) => setTimeout(r, 250));
    for (const handle of handles) expect((await handle.query(campaignProgressQuery)).promotion?.decision?.champion).toBeUndefined();
    await Promise.all(handles.map((h) => h.executeUpdate(approvePromotionUpdate, { args: [{ by: 'ana' }] })));
    return Promise.all(handles.map((h) => h.result()));
  });
  process.stderr.write(
    `[promotion] together: strong ${strong!.promotion!.status} (${strong!.promotion!.reason}); weak ${weak!.promotion!.status} (${weak!.promotion!.reason})\n`,
  );
  expect(strong!.rounds[0]!.test!.accuracy).toBeGreaterThanOrEqual(weak!.rounds[0]!.test!.accuracy + 0.05);
  // Whichever recorded second was compared with the first's champion, on the same rows, and said so.
  const [firstRecorded, second] = weak!.promotion!.decision!.champion ? [strong!, weak!] : [weak!, strong!];
  expect(firstRecorded.promotion).toMatchObject({ status: 'promoted' });
  expect(firstRecorded.promotion!.decision!.champion).toBeUndefined();
  expect(second.promotion!.decision!.champion).toMatchObject({ checkpointId: firstRecorded.best!.checkpointId });
  expect(second.promotion!.reason).toMatch(/judged again: the line's champion changed since the judgement/);
  // The better one is the champion; the line's history has both decisions.
  const current = (await readChampion(root, line))!;
  expect(current.record.checkpointId).toBe(strong!.best!.checkpointId);
  expect(current.record.history.map((h) => h.checkpointId)).toEqual(
    firstRecorded === strong ? [strong!.best!.checkpointId] : [weak!.best!.checkpointId, strong!.best!.checkpointId],
  );
  const decisions = fs.readdirSync(path.join(linesRoot(root), line, 'decisions')).sort();
  expect(decisions).toEqual([`${strong!.campaignId}.json`, `${weak!.campaignId}.json`].sort());
  // The registry's alias is on the champion recorded last.
  expect(current.record.registry).toBeDefined();
  expect(await registry().aliasVersion(line, 'champion')).toBe(current.record.registry!.version);
}, 400_000);

test('a champion measured with other sampling is re-scored with the challenger’s: like is compared with like', async () => {
  const line = `sampling-${Date.now()}`;
  const root = testReportDir(path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rh-promo-r-')), 'campaigns'));
  const taskQueue = uniqueTaskQueue('promotion-sampling');
  const first = await runCampaign(campaignInput({ line, strong: true, label: 'tokens-4', root }), taskQueue);
  expect((await championOf(root, line)).figures.measure).toMatchObject({
    baseModel: 'roundhouse/tiny-chat',
    scorer: { scorer: 'exact' },
    sampling: { maxTokens: 4, temperature: 0 },
  });
  const sampling = '{ maxTokens: 6, temperature: 0 }';
  const second = await runCampaign(campaignInput({ line, strong: false, label: 'tokens-6', root, sampling }), taskQueue);
  const decision = second.promotion!.decision!;
  // Same rows, other sampling: the champion was measured again with maxTokens 6 before they were compared.
  expect(decision.champion).toMatchObject({ checkpointId: first.best!.checkpointId, rescored: true });
  expect(decision.champion!.figures.measure!.sampling).toMatchObject({ maxTokens: 6 });
  const rescore = await readArtifact<{ steps_applied: number; started_from_checkpoint: string }>(decision.champion!.figures.reportPath);
  expect(rescore).toMatchObject({ steps_applied: 0, started_from_checkpoint: first.best!.checkpointId });
}, 300_000);

test('a champion of another base model cannot be re-scored: it is retired with its reason and the challenger judged alone', async () => {
  const line = `rebased-${Date.now()}`;
  const root = testReportDir(path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rh-promo-r-')), 'campaigns'));
  const taskQueue = uniqueTaskQueue('promotion-rebased');
  // The line's champion is a Qwen3-8B adapter, recorded by the promotion activity itself.
  const figures = {
    on: 'test' as const,
    accuracy: 0.99,
    rows: 20,
    sha256: 'b'.repeat(64),
    reportPath: path.join(root, 'qwen-campaign', 'round-1.json'),
    measure: { baseModel: 'Qwen/Qwen3-8B', scorer: { scorer: 'exact' }, sampling: { maxTokens: 4, temperature: 0 } },
  };
  const { recordPromotion } = createPromotionActivities();
  const qwenChampion: PromotionRecordInput = {
    reportRoot: root,
    atMs: Date.now(),
    decision: {
      decisionId: 'qwen-campaign',
      line,
      on: 'test',
      minGain: 0,
      challenger: { checkpointId: 'qwen-ckpt', campaignId: 'qwen-campaign', round: 1, reportPath: figures.reportPath, figures },
      verdict: 'promote',
      reason: 'no champion yet: the first result becomes it',
    },
  };
  await new MockActivityEnvironment().run(recordPromotion, qwenChampion);
  expect((await championOf(root, line)).checkpointId).toBe('qwen-ckpt');
  const result = await runCampaign(campaignInput({ line, strong: false, label: 'rebased', root }), taskQueue);
  expect(result.promotion).toMatchObject({ status: 'promoted' });
  expect(result.promotion!.decision!.champion).toMatchObject({ checkpointId: 'qwen-ckpt' });
  expect(result.promotion!.decision!.champion!.rescored).toBeUndefined();
  expect(result.promotion!.reason).toMatch(/is a Qwen\/Qwen3-8B adapter and cannot be scored as roundhouse\/tiny-chat: it is retired/);
  expect(fs.existsSync(path.join(root, result.campaignId, 'champion'))).toBe(false); // no re-scoring round was run
  const current = await championOf(root, line);
  expect(current.checkpointId).toBe(result.best!.checkpointId);
  expect(current.history.at(-1)).toMatchObject({ replaced: 'qwen-ckpt', retired: expect.stringMatching(/it is retired/) });
}, 300_000);

test('manual approval waits across a worker restart and promotes when approved; another times out and is rejected', async () => {
  const line = `manual-${Date.now()}`;
  const root = testReportDir(path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rh-promo-r-')), 'campaigns'));
  const taskQueue = uniqueTaskQueue('promotion-manual');
  const input = campaignInput({ line, strong: true, label: 'manual', root, promotion: 'approval: manual, approvalTimeout: 1h' });
  const handle = await temporal.client.workflow.start(campaignWorkflow, { taskQueue, workflowId: input.campaignId!, args: [input] });
  const pending = async () => (await handle.query(campaignProgressQuery)).promotion?.status === 'pending-approval';
  const first = await newWorker(taskQueue);
  const waiting: CampaignProgress = await first.runUntil(async () => {
    for (let i = 0; i < 600 && !(await pending()); i++) await new Promise((r) => setTimeout(r, 250));
    return handle.query(campaignProgressQuery);
  });
  // The worker is gone (a deploy); the campaign waits in the server, and its summary says so.
  expect(waiting.promotion).toMatchObject({ status: 'pending-approval' });
  const written = await readArtifact<CampaignProgress>(waiting.summaryPath);
  expect(written.promotion).toMatchObject({ status: 'pending-approval', pendingSinceMs: waiting.promotion!.pendingSinceMs });
  expect(waiting.promotion!.timeoutAtMs! - waiting.promotion!.pendingSinceMs!).toBe(3_600_000);
  expect(renderProgress(waiting)).toMatch(/promotion \(line .*\): waiting for approval since \d{4}-.*roundhouse approve /s);
  expect(await readChampion(root, line)).toBeUndefined(); // nothing promoted yet

  const second = await newWorker(taskQueue);
  const result: CampaignResult = await second.runUntil(async () => {
    expect(await pending()).toBe(true); // still waiting, on the new worker
    // Validators: who is required; a reject needs a reason.
    expect(await refusal(handle.executeUpdate(approvePromotionUpdate, { args: [{ by: ' ' }] }))).toMatch(/by: who decides is required/);
    expect(await refusal(handle.executeUpdate(rejectPromotionUpdate, { args: [{ by: 'ana' }] }))).toMatch(/a rejection needs a reason/);
    await handle.executeUpdate(approvePromotionUpdate, { args: [{ by: 'ana', reason: 'looks good' }] });
    return handle.result();
  });
  expect(result.promotion).toMatchObject({ status: 'promoted', approval: { approved: true, by: 'ana', reason: 'looks good' } });
  const champion = await championOf(root, line);
  expect(champion.history[0]!.approvedBy).toBe('ana');
  // Nothing waits any more: a late approval is refused before it reaches the history.
  expect(await refusal(handle.executeUpdate(approvePromotionUpdate, { args: [{ by: 'bo' }] }))).toMatch(
    /no promotion is waiting for approval|workflow execution already completed/i,
  );

  // A challenger that beats the champion but is never approved: rejected at approvalTimeout, the champion stays.
  const late = campaignInput({
    line,
    strong: true,
    label: 'manual-timeout',
    root,
    promotion: 'approval: manual, approvalTimeout: 3s, minGain: 0',
  });
  // Same recipe, same rows: it ties the champion, so give it something to beat — a fresh line with no champion.
  late.spec.promotion!.line = `${line}-t`;
  const timedOut = await runCampaign(late, taskQueue);
  expect(timedOut.promotion).toMatchObject({
    status: 'rejected',
    approval: { approved: false, by: 'approvalTimeout', reason: 'no approval within 3s' },
  });
  expect(await readChampion(root, `${line}-t`)).toBeUndefined();
}, 300_000);

test('a worker SIGKILLed during the promotion leaves one champion record, one registry version and the alias on it', async () => {
  const line = `killed-${Date.now()}`;
  const root = testReportDir(path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rh-promo-r-')), 'campaigns'));
  const taskQueue = uniqueTaskQueue('promotion-kill');
  const env = crashTestWorkerEnv(taskQueue, await bundleToFile());
  const input = campaignInput({ line, strong: true, label: 'killed', root });
  let worker: WorkerProcess = startWorkerProcess(env);
  try {
    await worker.ready;
    const handle = await temporal.client.workflow.start(campaignWorkflow, { taskQueue, workflowId: input.campaignId!, args: [input] });
    // The champion record is written, the registry and the campaign's end are still to come: kill now.
    const deadline = Date.now() + 180_000;
    while (!fs.existsSync(championPath(root, line, 1)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    expect(fs.existsSync(championPath(root, line, 1))).toBe(true);
    await worker.kill();
    expect((await handle.describe()).status.name).toBe('RUNNING');
    const atKill = await registry()
      .modelVersions(line)
      .catch(() => []);
    process.stderr.write(`[promotion] SIGKILL after the champion record, with ${atKill.length} registry version(s) made\n`);
    worker = startWorkerProcess(env);
    await worker.ready;
    const result: CampaignResult = await handle.result();
    expect(result.promotion).toMatchObject({
      status: 'promoted',
      champion: { checkpointId: result.best!.checkpointId, registry: { name: line, version: '1' } },
    });
    const record = await championOf(root, line);
    expect(record.history).toHaveLength(1);
    expect(record.registry).toEqual({ name: line, version: '1' });
    expect((await registry().modelVersions(line)).map((v) => v.version)).toEqual(['1']);
    expect(await registry().aliasVersion(line, 'champion')).toBe('1');
  } finally {
    await worker.kill();
  }
}, 300_000);

test('registering the same decision again (a retry after a crash past the create) finds its version: no second one, the alias unmoved', async () => {
  const line = `again-${Date.now()}`;
  const track = { name: 'promo-again', tracking: { mlflow: { uri: mlflow.uri, experiment: 'promotion-tests' } } };
  const record = {
    line,
    decisionId: `campaign-${line}`,
    checkpointId: 'ckpt-1',
    campaignId: `campaign-${line}`,
    round: 1,
    figures: { on: 'test', accuracy: 0.5, sha256: 'a'.repeat(64) },
  };
  // In an activity's context, as the worker runs it (Temporal's own activity test environment).
  const registerChampion = (t: typeof track, r: typeof record) =>
    new MockActivityEnvironment().run(registerInActivity, t, r) as Promise<{ name: string; version: string } | undefined>;
  const first = await registerChampion(track, record);
  const again = await registerChampion(track, record);
  expect(again).toEqual(first);
  expect((await registry().modelVersions(line)).map((v) => v.version)).toEqual([first!.version]);
  expect(await registry().aliasVersion(line, 'champion')).toBe(first!.version);
  const next = await registerChampion(track, { ...record, decisionId: `next-${line}`, checkpointId: 'ckpt-2' });
  expect(next!.version).not.toBe(first!.version);
  expect(await registry().aliasVersion(line, 'champion')).toBe(next!.version);
});

test('a stop while a promotion waits for approval ends the wait: the challenger is rejected, the campaign stopped', async () => {
  const line = `stopped-${Date.now()}`;
  const root = testReportDir(path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rh-promo-r-')), 'campaigns'));
  const taskQueue = uniqueTaskQueue('promotion-stop');
  const input = campaignInput({ line, strong: true, label: 'stop', root, promotion: 'approval: manual, approvalTimeout: 1h' });
  const worker = await newWorker(taskQueue);
  const result: CampaignResult = await worker.runUntil(async () => {
    const handle = await temporal.client.workflow.start(campaignWorkflow, { taskQueue, workflowId: input.campaignId!, args: [input] });
    for (let i = 0; i < 600 && (await handle.query(campaignProgressQuery)).promotion?.status !== 'pending-approval'; i++)
      await new Promise((r) => setTimeout(r, 250));
    await handle.executeUpdate(stopCampaignUpdate, { args: [{ mode: 'after-round' }] });
    return handle.result();
  });
  expect(result.promotion).toMatchObject({ status: 'rejected', approval: { approved: false, by: 'stop' } });
  expect(result.status).toBe('stopped');
  expect(await readChampion(root, line)).toBeUndefined();
}, 180_000);
