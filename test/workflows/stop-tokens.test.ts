import fs from 'node:fs';
import path from 'node:path';
import { completionText } from '../../activities/scoring';
import { tokenizerFor } from '../../config/io/tokenizer';
import type { RoundResult } from '../../workflows/round/contract';
import { ledger } from '../helpers/emulator';
import { NUMBER_GAME, numberGameInput, turnRecords, trainedBatches, trainedRuns } from '../helpers/episodes';
import { startPythonWorker, type PythonWorker } from '../helpers/python-worker';
import { arithmeticRoundInput, roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// Tinker takes no stop strings: its sampler runs on past them and the client cuts in code. The tokens the trainer
// receives must end at the stop exactly where the text the reward (single-turn) or the environment (multi-turn) saw
// was cut: checked on what the emulator's trainer received in each forward_backward, not on the samples file.
const { env, runRound } = roundTestEnvironment({ trainedBatches: 200 }, { ...process.env, TINKER_API_KEY: 'tml-stop-key' });
const tokenizer = tokenizerFor('roundhouse/tiny-chat', undefined);
// A letter in many of the tiny model's tokens ("ent", "le", " e"…): the untrained model writes it within 8 tokens most times.
const STOP = ['e'];

const workers: PythonWorker[] = [];
afterEach(async () => {
  for (const w of workers.splice(0)) await w.stop();
});

const text = (tokens: number[]) => tokenizer.decode(tokens, { skipSpecialTokens: true });
const holdsStop = (tokens: number[]) => STOP.some((s) => text(tokens).includes(s));

/** A trained completion ends with the token that completes its first stop, or holds no stop at all. */
function expectCutAtStop(run: number[]): boolean {
  if (!holdsStop(run)) return false;
  expect(holdsStop(run.slice(0, -1))).toBe(false);
  return true;
}

test('single-turn GRPO on Tinker: each trained completion ends at its stop, where the reward text was cut', async () => {
  const taskQueue = uniqueTaskQueue('stop-single');
  const input = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId: `stop-single-${taskQueue}`,
    limit: 3,
    yaml: `training: { epochs: 1, batchSize: 4, learningRate: 0.002, loraRank: 8, maxSeqLen: 64, segmentSteps: 4 }
sampling: { maxTokens: 8, temperature: 1, stop: ${JSON.stringify(STOP)} }
round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: numeric }, loss: { type: importance_sampling } } }`,
  });
  input.spec.provider = { ...input.spec.provider, kind: 'tinker', baseUrl: env.emulator.url };
  const result: RoundResult = await runRound(input, taskQueue);
  expect(result).toMatchObject({ status: 'completed', kind: 'grpo', stepsApplied: result.totalSteps });

  const batches = await trainedBatches(env.emulator, result, input.campaignId);
  expect(batches).toHaveLength(result.totalSteps!);
  const samplesDir = result.reportPath.replace(/\.json$/, '.samples');
  let cut = 0;
  let runs = 0;
  for (const { step, datums } of batches) {
    // The texts the reward scored this step.
    const file = path.join(samplesDir, `s${String(step).padStart(7, '0')}.json`);
    const scored = (JSON.parse(fs.readFileSync(file, 'utf8')) as { groups: { completions: { text: string }[] }[] }).groups.flatMap((g) =>
      g.completions.map((c) => c.text),
    );
    for (const datum of datums)
      for (const run of trainedRuns(datum)) {
        runs++;
        if (expectCutAtStop(run.tokens)) cut++;
        expect(scored).toContain(completionText(tokenizer, run.tokens, STOP));
      }
  }
  process.stderr.write(`[stop single] ${runs} trained completions, ${cut} of them cut at the stop\n`);
  expect(cut).toBeGreaterThan(runs / 4);
  expect((await ledger(env.emulator)).active).toEqual([]);
});

test('multi-turn GRPO on Tinker: each trained turn ends at its stop, where the text the environment got was cut', async () => {
  const taskQueue = uniqueTaskQueue('stop-multi');
  const input = numberGameInput({ baseUrl: env.emulator.url, kind: 'tinker', campaignId: `stop-multi-${taskQueue}`, limit: 3 });
  Object.assign(input.spec.sampling, { maxTokens: 8, stop: STOP });
  workers.push(
    await startPythonWorker({ address: env.temporal.settings.address!, taskQueue: `${input.campaignId}-py`, sources: [NUMBER_GAME] }),
  );
  const result: RoundResult = await runRound(input, taskQueue);
  expect(result).toMatchObject({ status: 'completed', kind: 'grpo', stepsApplied: result.totalSteps });

  const records = turnRecords(result);
  const batches = await trainedBatches(env.emulator, result, input.campaignId);
  expect(batches).toHaveLength(result.totalSteps!);
  let cut = 0;
  let runs = 0;
  for (const { step, datums } of batches) {
    const ofStep = [...records.entries()].filter(([k]) => k.startsWith(`s${String(step).padStart(7, '0')}/`)).map(([, r]) => r);
    for (const datum of datums)
      for (const run of trainedRuns(datum)) {
        runs++;
        // The gateway's record of this turn: its prompt right before the run, and what it drew starting with the run.
        const record = ofStep.find(
          (r) =>
            r.promptTokens.length === run.start &&
            r.promptTokens.every((t, i) => datum.tokens[i] === t) &&
            run.tokens.every((t, i) => r.choices[0]!.tokens[i] === t),
        );
        expect(record).toBeDefined();
        const drawn = record!.choices[0]!;
        if (expectCutAtStop(run.tokens)) cut++;
        else expect(run.tokens).toEqual(drawn.tokens); // no stop in what was drawn: all of it
        // The text the environment was answered with is the trained tokens' text, cut where they were.
        expect(completionText(tokenizer, run.tokens, STOP)).toBe(drawn.text);
        // The drawn logprobs, to float noise: a group's episodes can draw the same turn from the same prompt, and the
        // record found may be a sibling's, whose logprobs came from another batch (a CI run saw a 1e-6 difference).
        const drawnLogprobs = drawn.logprobs.slice(0, run.tokens.length);
        expect(run.logprobs).toHaveLength(drawnLogprobs.length);
        run.logprobs.forEach((lp, i) => expect(lp).toBeCloseTo(drawnLogprobs[i]!, 5));
      }
  }
  process.stderr.write(`[stop multi] ${runs} trained turns, ${cut} of them cut at the stop\n`);
  expect(cut).toBeGreaterThan(runs / 4);
});
