import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { joinLocation, storeFor } from '../../config/io/artifacts';
import type { CampaignInput, CampaignResult } from '../../workflows/campaign/contract';
import { campaignWorkflow } from '../../workflows';
import { readArtifact, testReportDir } from '../helpers/artifacts';
import { ticketCampaignSpec } from '../helpers/campaign';
import { ledger } from '../helpers/emulator';
import { arithmeticRoundInput, roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// Evaluation during training (`evaluation.every`) and early stopping (`evaluation.earlyStop`), on a real dev server
// and the emulator: the curve in the round report and report.html (rendered in headless Chromium), and a round that
// overfits stopped early, finishing from its best checkpoint.

const { env, runRound, withWorker } = roundTestEnvironment({ provisioningDelayMs: 50 });
const CHROMIUM = '/usr/bin/chromium';

interface CurvePoint {
  step: number;
  loss: number;
  metric: number | null;
  checkpoint_id: string | null;
}

test('evaluations every 2 steps (sampled every 2nd) make the round report curve and a chart in report.html, rendered in Chromium', async () => {
  const taskQueue = uniqueTaskQueue('eval-curve');
  const { spec, dir } = ticketCampaignSpec({
    baseUrl: env.emulator.url,
    trainRows: 40,
    evalRows: 10,
    evaluation: '{ scorer: exact, every: 2, sampleEvery: 2 }',
    yaml: 'rounds: { max: 1 }',
  });
  const campaignId = `evalcurve-${taskQueue}`;
  const result: CampaignResult = await withWorker(taskQueue, () =>
    env.temporal.client.workflow.execute(campaignWorkflow, {
      taskQueue,
      workflowId: campaignId,
      args: [{ campaignId, spec, reportRoot: testReportDir(dir) } satisfies CampaignInput],
    }),
  );
  expect(result.rounds.map((r) => [r.status, r.stepsApplied])).toEqual([['completed', 8]]);
  const report = await readArtifact<{ evaluation_curve: CurvePoint[]; trained_loss: number; baseline_loss: number }>(
    result.rounds[0]!.reportPath,
  );
  // 40 rows / 10 × 2 epochs = 8 steps: evaluations at 2, 4 and 6 (8 is the round's own trained measure); the metric
  // at the 2nd (step 4) only.
  expect(report.evaluation_curve.map((p) => p.step)).toEqual([2, 4, 6]);
  expect(report.evaluation_curve.map((p) => p.metric === null)).toEqual([true, false, true]);
  for (const p of report.evaluation_curve) expect(p.loss).toBeGreaterThan(0);
  expect(report.evaluation_curve[0]!.loss).toBeLessThan(report.baseline_loss); // two steps in, the eval loss fell
  // Each evaluation's record sits beside the step records; the sampled one wrote its scored answers.
  const stepsDir = result.rounds[0]!.reportPath.replace(/\.json$/, '.steps');
  const records = (await storeFor(stepsDir).list(stepsDir)).filter((f) => /\/eval-\d+\.json$/.test(f));
  expect(records.map((f) => path.basename(f))).toEqual(['eval-0000002.json', 'eval-0000004.json', 'eval-0000006.json']);
  const sampled = await readArtifact<unknown[]>(result.rounds[0]!.reportPath.replace(/\.json$/, '.evaluations-s4.json'));
  expect(sampled).toHaveLength(10);

  const campaignDir = path.dirname(result.summaryPath);
  const htmlFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rh-evalcurve-')), 'report.html');
  fs.writeFileSync(htmlFile, (await storeFor(campaignDir).read(joinLocation(campaignDir, 'report.html')))!);
  const html = fs.readFileSync(htmlFile, 'utf8');
  const data = JSON.parse(/<script id="report-data" type="application\/json">(.*?)<\/script>/s.exec(html)![1]!);
  expect(data.evalCurves).toHaveLength(1);
  expect(data.evalCurves[0].loss.map((p: { x: number }) => p.x)).toEqual([0, 2, 4, 6, 8]);
  expect(data.evalCurves[0].metric.map((p: { x: number }) => p.x)).toEqual([4]);
  const dom = spawnSync(
    CHROMIUM,
    [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      `--user-data-dir=${fs.mkdtempSync(path.join(os.tmpdir(), 'rh-chrome-'))}`,
      '--enable-logging=stderr',
      '--v=0',
      '--virtual-time-budget=3000',
      '--dump-dom',
      `file://${htmlFile}`,
    ],
    { encoding: 'utf8', timeout: 60_000 },
  );
  expect(dom.status).toBe(0);
  expect(dom.stdout).toMatch(/<canvas id="evalCurve"/);
  expect(dom.stdout).toMatch(/<body[^>]*data-rendered="4"/); // metric, eval loss, step loss, and the eval curve
  expect(dom.stderr).not.toMatch(/Uncaught|CONSOLE\(\d+\)\] "?Error/);
}, 180_000);

test('a DPO round that overfits stops early and finishes from its best checkpoint; its report names it', async () => {
  const taskQueue = uniqueTaskQueue('early-stop');
  const input = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId: `earlystop-${taskQueue}`,
    tickets: true,
    evaluation: '{ scorer: exact, every: 4, earlyStop: { patience: 2 } }',
    yaml: `training: { epochs: 6, batchSize: 8, learningRate: 0.02, loraRank: 8, maxSeqLen: 128, segmentSteps: 50 }
sampling: { maxTokens: 3 }
round: { kind: dpo, dpo: { beta: 0.5 } }
advanced: { heartbeatTimeoutSeconds: 5 }`,
  });
  const result = await runRound(input, taskQueue);
  const report = await readArtifact<Record<string, any>>(result.reportPath);
  process.stderr.write(
    `[early-stop] ${JSON.stringify({ curve: report.evaluation_curve, early: report.early_stop, trained: report.trained_loss, steps: result.stepsApplied, total: result.totalSteps })}\n`,
  );
  expect(result.status).toBe('completed');
  expect(result.earlyStop).toBeDefined();
  const curve = report.evaluation_curve as CurvePoint[];
  const early = report.early_stop as { stopped_at_step: number; best_step: number; best_value: number; best_checkpoint_id: string };
  // It stopped before the planned end, two evaluations after the best, whose loss no later one beat.
  expect(result.stepsApplied).toBe(early.stopped_at_step);
  expect(result.stepsApplied).toBeLessThan(result.totalSteps);
  const best = curve.find((p) => p.step === early.best_step)!;
  expect(best.loss).toBe(Math.min(...curve.map((p) => p.loss)));
  expect(curve.filter((p) => p.step > early.best_step)).toHaveLength(2);
  // The round finished from the best weights: its trained loss is the best evaluation's, and the checkpoint it hands
  // on (and lists as its final one) is the best one.
  expect(report.trained_loss).toBeCloseTo(best.loss, 6);
  expect(report.training_checkpoint_id).toBe(early.best_checkpoint_id);
  expect(best.checkpoint_id).toBe(early.best_checkpoint_id);
  const final = (report.checkpoints as { checkpoint_id: string; step: number; final: boolean; kind: string }[]).find(
    (c) => c.final && c.kind === 'training',
  );
  expect(final).toMatchObject({ checkpoint_id: early.best_checkpoint_id, step: early.best_step });
  expect((await ledger(env.emulator)).active).toEqual([]);
}, 240_000);
