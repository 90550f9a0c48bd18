import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { writeTicketTestSet } from '../../examples/support-tickets/generate';
import { parseCampaignSpec } from '../../config/io/spec';
import { ProviderRegistry } from '../../workers/providers';
import { createRoundhouseWorker } from '../../workers/worker';
import { validateCampaignLocally } from '../../workers/validate';
import { DataValidationError } from '../../config/rules/errors';
import { renderProgress } from '../../cli/progress';
import type { CampaignInput, CampaignResult } from '../../workflows/campaign/contract';
import { startTestEmulator, type RunningEmulator } from '../helpers/emulator';
import { testReportDir } from '../helpers/artifacts';
import { ticketCampaignSpec } from '../helpers/campaign';
import { bundleWorkflows, connectTestTemporal, uniqueTaskQueue, type TestTemporal } from '../helpers/temporal';
import { campaignWorkflow } from '../../workflows';

// `data.test`: a held-out set scored at the end of every round for the final assessment only. These tests run the
// same campaign with two different test sets and check that every decision (the data each round trained on, the
// accuracy that chose the best round, why the campaign stopped) is the same: nothing is chosen by the test set.

let temporal: TestTemporal;
let bundle: WorkflowBundleWithSourceMap;
let emulator: RunningEmulator;
let providers: ProviderRegistry;

beforeAll(async () => {
  temporal = await connectTestTemporal();
  bundle = await bundleWorkflows();
  emulator = await startTestEmulator({ provisioningDelayMs: 50 });
  providers = new ProviderRegistry({ stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-testset-')) });
});

afterAll(async () => {
  await providers?.close();
  await emulator?.close();
  await temporal?.close();
});

async function runCampaign(specDir: string, testFile: string, label: string): Promise<CampaignResult> {
  const taskQueue = uniqueTaskQueue(`testset-${label}`);
  const yamlFile = path.join(specDir, 'campaign.yaml');
  const text = fs
    .readFileSync(yamlFile, 'utf8')
    .replace('data: { train: train.jsonl, eval: eval.jsonl }', `data: { train: train.jsonl, eval: eval.jsonl, test: ${testFile} }`);
  const spec = parseCampaignSpec(text, yamlFile);
  const campaignId = `testset-${label}-${taskQueue}`;
  const input: CampaignInput = { campaignId, spec, reportRoot: testReportDir(path.join(specDir, `campaigns-${label}`)) };
  const worker = await createRoundhouseWorker({
    connection: temporal.nativeConnection,
    namespace: temporal.settings.namespace,
    taskQueue,
    workflowBundle: bundle,
    providers,
  });
  return worker.runUntil(temporal.client.workflow.execute(campaignWorkflow, { taskQueue, workflowId: campaignId, args: [input] }));
}

test('a campaign scores every round on data.test and shows it apart from eval; another test set changes no decision', async () => {
  const { dir } = ticketCampaignSpec({
    baseUrl: emulator.url,
    trainRows: 60,
    evalRows: 15,
    yaml: 'rounds: { max: 2, nextData: { policy: mistakes, replayShare: 0.3 } }',
  });
  const a = writeTicketTestSet(dir, 'test-a.jsonl', 12, 23);
  const b = writeTicketTestSet(dir, 'test-b.jsonl', 20, 29);
  const [withA, withB] = await Promise.all([runCampaign(dir, a, 'a'), runCampaign(dir, b, 'b')]);

  for (const [result, rows] of [
    [withA, 12],
    [withB, 20],
  ] as const) {
    expect(result.status).toBe('completed');
    expect(result.rounds).toHaveLength(2);
    for (const r of result.rounds) {
      expect(r.test?.rows).toBe(rows);
      expect(r.test!.accuracy).toBeGreaterThanOrEqual(0);
      expect(r.test!.sha256).toMatch(/^[0-9a-f]{64}$/);
      const report = JSON.parse(fs.readFileSync(r.reportPath, 'utf8'));
      expect(report.test.accuracy).toBe(r.test!.accuracy);
      expect(report.test.rows).toBe(rows);
      expect(report.accuracy).toBe(r.accuracy); // eval's figure stays eval's
      const scored = JSON.parse(fs.readFileSync(report.test.evaluations_path, 'utf8')) as unknown[];
      expect(scored).toHaveLength(rows);
    }
    expect(result.best?.test).toEqual(result.rounds.find((r) => r.round === result.best!.round)!.test);
    const summary = fs.readFileSync(path.join(path.dirname(result.summaryPath), 'summary.md'), 'utf8');
    expect(summary).toContain('| test (held out) |');
    expect(summary).toMatch(/best checkpoint: round \d, .*; held-out test: /);
    expect(renderProgress(result)).toMatch(/best \(by eval\): round \d, accuracy [\d.]+%; held-out test [\d.]+% over \d+ rows/);
  }
  expect(withA.rounds[0]!.test!.sha256).not.toBe(withB.rounds[0]!.test!.sha256);

  // Every choice is the same with either test set: what each round trained on, eval's figures, the best, the stop.
  const decisions = (r: CampaignResult) => ({
    train: r.rounds.map((x) => ({ sha256: x.train.sha256, rows: x.train.rows })),
    accuracy: r.rounds.map((x) => x.accuracy),
    evalLoss: r.rounds.map((x) => x.trainedLoss),
    steps: r.rounds.map((x) => x.stepsApplied),
    best: r.best && { round: r.best.round, accuracy: r.best.accuracy },
    stopReason: r.stopReason,
  });
  expect(decisions(withB)).toEqual(decisions(withA));
}, 240_000);

test('data.test is checked before anything starts: rows shared with train or eval are refused by file and line; DPO refuses it', () => {
  const { dir } = ticketCampaignSpec({ baseUrl: emulator.url, trainRows: 30, evalRows: 10 });
  const train = fs.readFileSync(path.join(dir, 'train.jsonl'), 'utf8').trim().split('\n');
  const evalRows = fs.readFileSync(path.join(dir, 'eval.jsonl'), 'utf8').trim().split('\n');
  const fresh = writeTicketTestSet(dir, 'fresh.jsonl', 4, 31);
  fs.writeFileSync(
    path.join(dir, 'leaky.jsonl'),
    [fs.readFileSync(path.join(dir, fresh), 'utf8').trim(), train[3], evalRows[1]].join('\n') + '\n',
  );
  const yamlFile = path.join(dir, 'campaign.yaml');
  const specWith = (test: string, rounds = 'rounds: { max: 3 }') =>
    parseCampaignSpec(
      fs
        .readFileSync(yamlFile, 'utf8')
        .replace('data: { train: train.jsonl, eval: eval.jsonl }', `data: { train: train.jsonl, eval: eval.jsonl, test: ${test} }`)
        .replace('rounds: { max: 3 }', rounds),
      yamlFile,
    );
  expect(validateCampaignLocally(specWith(fresh)).trainRows).toBe(30);
  let problems: string[] = [];
  try {
    validateCampaignLocally(specWith('leaky.jsonl'));
  } catch (err) {
    expect(err).toBeInstanceOf(DataValidationError);
    problems = (err as DataValidationError).problems;
  }
  const leaky = path.join(dir, 'leaky.jsonl');
  expect(problems).toEqual([
    `${leaky}:5 prompt: also in the training data (${path.join(dir, 'train.jsonl')}:4); test rows must be held out`,
    `${leaky}:6 prompt: also in the eval data (${path.join(dir, 'eval.jsonl')}:2); test rows must be held out`,
  ]);
  expect(() => validateCampaignLocally(specWith(fresh, 'rounds: { max: 1, nextData: { policy: static } }\nround: { kind: dpo }'))).toThrow(
    /data\.test: .*a dpo round has none yet/,
  );
});
