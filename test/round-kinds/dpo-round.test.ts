import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { WorkflowFailedError } from '@temporalio/client';
import { ledger } from '../helpers/emulator';
import { arithmeticRoundInput, roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

const { env, runRound } = roundTestEnvironment({ provisioningDelayMs: 50 });

const report = (r: { reportPath: string }) => JSON.parse(fs.readFileSync(r.reportPath, 'utf8'));

const dpoYaml = `training: { epochs: 2, batchSize: 8, learningRate: 0.005, loraRank: 8, maxSeqLen: 64, segmentSteps: 8 }
sampling: { maxTokens: 3 }
round: { kind: dpo, dpo: { beta: 0.5 } }`;

test('a DPO round on support-ticket preferences widens the chosen-over-rejected margin and raises held-out preference accuracy', async () => {
  const taskQueue = uniqueTaskQueue('dpo');
  const input = arithmeticRoundInput({ baseUrl: env.emulator.url, campaignId: `dpo-${taskQueue}`, tickets: true, yaml: dpoYaml });
  const result = await runRound(input, taskQueue);
  expect(result).toMatchObject({ status: 'completed', kind: 'dpo', stepsApplied: 16, totalSteps: 16 });
  // The policy starts as its own reference: margin 0, loss log 2, no pair preferred.
  expect(result.baselineMargin).toBeCloseTo(0, 2);
  expect(result.baselineLoss).toBeCloseTo(Math.log(2), 4);
  expect(result.baselineAccuracy).toBe(0);
  console.log(
    `DPO eval: margin ${result.baselineMargin!.toFixed(3)} → ${result.trainedMargin!.toFixed(3)} nats, preference accuracy ${result.baselineAccuracy} → ${result.accuracy}, loss ${result.baselineLoss!.toFixed(3)} → ${result.trainedLoss!.toFixed(3)}`,
  );
  expect(result.trainedMargin!).toBeGreaterThan(1);
  expect(result.accuracy!).toBeGreaterThan(0.7);
  expect(result.trainedLoss!).toBeLessThan(result.baselineLoss!);

  const r = report(result);
  expect(r).toMatchObject({
    kind: 'dpo',
    cleanup_status: 'deactivated',
    baseline_margin: result.baselineMargin,
    trained_margin: result.trainedMargin,
  });
  expect(r.steps.map((s: { step: number }) => s.step)).toEqual(Array.from({ length: 16 }, (_v, i) => i + 1));
  const margins = r.steps.map((s: { margin: number }) => s.margin);
  expect(margins[0]).toBeCloseTo(0, 2);
  const meanOf = (xs: number[]) => xs.reduce((a, x) => a + x, 0) / xs.length;
  expect(meanOf(margins.slice(-4))).toBeGreaterThan(meanOf(margins.slice(0, 4)) + 0.5);
  expect(r.evaluations[0]).toEqual({
    line: 1,
    prompt: expect.any(String),
    chosen: expect.any(String),
    rejected: expect.any(String),
    margin: expect.any(Number),
    loss: expect.any(Number),
    match: expect.any(Boolean),
  });
  // The reference logprobs are in a file beside the report, by reference: the history holds its path only.
  const reference = JSON.parse(fs.readFileSync(path.join(input.reportDir, 'round-1.reference-logprobs.json'), 'utf8'));
  expect(reference.train).toHaveLength(64);
  const history = await env.temporal.client.workflow.getHandle(`round-${input.campaignId}`).fetchHistory();
  expect(JSON.stringify(history)).not.toContain(String(reference.train[0][0]));

  const l = await ledger(env.emulator);
  expect(l.sessions.find((s) => s.id === r.session_id)).toMatchObject({ optimizerSteps: 16 });
  expect(l.active).toEqual([]);
});

describe('bad input is refused before any trainer is provisioned', () => {
  async function refused(input: ReturnType<typeof arithmeticRoundInput>, taskQueue: string): Promise<string> {
    const before = (await ledger(env.emulator)).resources.length;
    const err = await runRound(input, taskQueue).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(WorkflowFailedError);
    expect((await ledger(env.emulator)).resources.length).toBe(before);
    const r = report({ reportPath: path.join(input.reportDir, 'round-1.json') });
    expect(r).toMatchObject({ status: 'failed', error_type: 'InvalidInput', resource_id: null });
    return r.error_message as string;
  }

  test('DPO rows missing rejected: named by file, line and field', async () => {
    const taskQueue = uniqueTaskQueue('dpo-bad');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-dpo-bad-'));
    const input = arithmeticRoundInput({ baseUrl: env.emulator.url, campaignId: `dpo-bad-${taskQueue}`, pairs: true, dir, yaml: dpoYaml });
    const train = path.join(dir, 'pairs.train.jsonl');
    const lines = fs.readFileSync(train, 'utf8').split('\n');
    lines[2] = JSON.stringify({ prompt: 'What is 1 + 1?', chosen: '2' });
    fs.writeFileSync(train, lines.join('\n'));
    expect(await refused(input, taskQueue)).toMatch(new RegExp(`pairs\\.train\\.jsonl:3 rejected: is required`));
  });

  test('a GRPO reward module that does not load', async () => {
    const taskQueue = uniqueTaskQueue('grpo-bad');
    const input = arithmeticRoundInput({
      baseUrl: env.emulator.url,
      campaignId: `grpo-bad-${taskQueue}`,
      yaml: `training: { epochs: 1, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64 }
sampling: { maxTokens: 3, temperature: 1 }
round: { kind: grpo, grpo: { reward: { kind: module, path: rewards/missing.js } } }`,
    });
    expect(await refused(input, taskQueue)).toMatch(/missing\.js/);
  });
});
