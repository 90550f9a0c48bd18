import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { renderCampaignMarkdown } from '../../activities/report';
import type { RoundResult } from '../../workflows/round/contract';
import { ledger } from '../helpers/emulator';
import { arithmeticRoundInput, roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

const { env, runRound } = roundTestEnvironment({ provisioningDelayMs: 20 });

const report = (r: RoundResult) => JSON.parse(fs.readFileSync(r.reportPath, 'utf8'));
const lines = (file: string) => fs.readFileSync(file, 'utf8').trim().split('\n').length;

interface EvaluationEntry {
  line: number;
  completion: string;
  match: boolean;
  samples?: { completion: string; match: boolean }[];
  correct?: number;
}

test('a GRPO round that samples at temperature 1 evaluates greedily, its whole eval set in one sample request', async () => {
  const taskQueue = uniqueTaskQueue('eval-greedy');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-evalsampling-'));
  const input = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId: `eval-greedy-${taskQueue}`,
    dir,
    yaml: `training: { epochs: 1, batchSize: 40, learningRate: 0.002, loraRank: 8, maxSeqLen: 64 }
sampling: { maxTokens: 3, temperature: 1 }
round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: numeric }, loss: { type: importance_sampling } } }`,
  });
  const evalRows = lines(path.join(dir, 'eval.jsonl'));
  expect(evalRows).toBeGreaterThan(16); // more than the 16 prompts a request carried before

  const result = await runRound(input, taskQueue);

  expect(result).toMatchObject({ status: 'completed', kind: 'grpo', stepsApplied: 2 });
  const r = report(result);
  expect(r.evaluations).toHaveLength(evalRows);
  const session = (await ledger(env.emulator)).sessions.find((s) => s.id === r.session_id)!;
  // Two training draws at temperature 1, then one greedy request for every eval prompt.
  expect(session.sampling).toMatchObject({ operations: 3, greedy: 1, sequences: 2 * 40 * 4 + evalRows });
  expect(r.pass_at_k).toBeNull();
});

test('with evaluation.sampling.n 4 the round reports pass@1 and pass@4, as hand arithmetic over its evaluations file gives them', async () => {
  const taskQueue = uniqueTaskQueue('eval-passk');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-evalsampling-'));
  const input = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId: `eval-passk-${taskQueue}`,
    dir,
    yaml: `training: { epochs: 6, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64 }
sampling: { maxTokens: 3 }`,
    evaluation: '{ scorer: numeric, sampling: { n: 4, temperature: 1 } }',
  });

  const result = await runRound(input, taskQueue);

  expect(result).toMatchObject({ status: 'completed', kind: 'sft' });
  const r = report(result);
  const evaluations: EvaluationEntry[] = JSON.parse(fs.readFileSync(result.evaluationsPath!, 'utf8'));
  expect(evaluations).toHaveLength(lines(path.join(dir, 'eval.jsonl')));
  for (const e of evaluations) {
    expect(e.samples).toHaveLength(4);
    expect(e.samples![0]).toEqual({ completion: e.completion, match: e.match });
    expect(e.correct).toBe(e.samples!.filter((s) => s.match).length);
  }
  const right = evaluations.reduce((a, e) => a + e.correct!, 0);
  const passAt4 = evaluations.reduce((a, e) => a + (e.correct! > 0 ? 1 : 0), 0) / evaluations.length;
  console.log(`pass@1 ${(right / (4 * evaluations.length)).toFixed(3)}, pass@4 ${passAt4.toFixed(3)} over ${evaluations.length} rows`);
  // Some rows are neither always right nor always wrong, or pass@4 could not differ from pass@1.
  expect(evaluations.some((e) => e.correct! > 0 && e.correct! < 4)).toBe(true);
  expect(r.accuracy).toBeCloseTo(right / (4 * evaluations.length), 12);
  expect(result.accuracy).toBeCloseTo(right / (4 * evaluations.length), 12);
  // With k = n, 1 − C(n−c, n)/C(n, n) is 1 for any right answer: pass@4 is the share of rows with one.
  expect(r.pass_at_k).toEqual({ k: 4, value: expect.closeTo(passAt4, 12) });
  expect(result.passAtK).toEqual(r.pass_at_k);
  // summary.md shows it beside the accuracy.
  const summary = renderCampaignMarkdown({
    campaignId: 'c',
    status: 'completed',
    rounds: [r],
    flips: [],
    gpuMinutes: 0,
    temporalUiUrl: '',
    namespace: '',
  });
  expect(summary).toContain(`| ${(r.accuracy * 100).toFixed(1)}% (pass@4 ${(passAt4 * 100).toFixed(1)}%) |`);
  const session = (await ledger(env.emulator)).sessions.find((s) => s.id === r.session_id)!;
  expect(session.sampling).toMatchObject({ operations: 1, greedy: 0, sequences: 4 * evaluations.length });
});
