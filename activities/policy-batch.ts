import { pythonStepFiles, samplesFile, stepName } from '../config/rules/round-files';
import { joinLocation } from '../config/io/artifacts';
import { RoundhouseFailure } from '../config/rules/failures';
import { batchRows } from '../config/rules/schedule';
import { drawSeed, stopToSend } from '../config/rules/sampling';
import { pythonReward } from '../config/rules/python-calls';
import type { TextTokenizer } from '../config/io/tokenizer';
import type { Datum, TrainingProvider } from '../providers/types';
import type { ScoreItem } from '../workflows/python/contract';
import type { GrpoSegmentInput } from '../workflows/round/contract';
import type { TokenizedRow } from './data';
import { drawEpisodes, episodeDatums, type EpisodeSamples } from './episodes';
import { readJson, writeJsonAtomic } from './files';
import { scoreOnPython } from './python';
import { groupAdvantages, type RewardFunction } from './rewards';
import { completionText, tokensThroughStop } from './scoring';

/**
 * A policy-gradient step's batch, shared by the kinds that train on their own samples: sample a group of completions
 * per prompt (or play episodes), score them, then turn them into datums with an `advantages` step. GRPO's advantages
 * are group-centred rewards (`groupCentred`); another kind plugs in its own (on-policy distillation: the teacher's
 * logprob minus the sampler's, per token; a user's own loss).
 */

/** A sampled completion (or episode) and its reward; `reward` null: the reward said it is unscorable. */
export interface StepCompletion {
  tokens: number[];
  logprobs: number[];
  text: string;
  reward: number | null;
  episode?: EpisodeSamples;
}

/** One step's samples as stored: enough to rebuild its datums exactly. */
export interface StepSamples {
  step: number;
  policyVersion?: number;
  groups: {
    line: number;
    promptTokens: number[];
    /** `reward` null: the reward said the sample is unscorable; it leaves its group. */
    completions: StepCompletion[];
  }[];
  /** Multi-turn: the gateway's counts for the step. */
  turns?: { sampled: number; replayed: number };
}

/** A scored completion, as an advantages step sees it (unscorable ones have left their group). */
export interface ScoredCompletion {
  tokens: number[];
  logprobs: number[];
  text: string;
  reward: number;
}

/** A prompt's group of scored completions. */
export interface ScoredGroup {
  line: number;
  promptTokens: number[];
  completions: ScoredCompletion[];
}

/** A completion's advantage: one for all its sampled tokens, or one per sampled token (single-turn samples only). */
export type CompletionAdvantage = number | readonly number[];

/**
 * The pluggable step: each group's completions' advantages, in order, or undefined where the group teaches nothing
 * (it is dropped).
 */
export type Advantages = (
  groups: ScoredGroup[],
) => (readonly CompletionAdvantage[] | undefined)[] | Promise<(readonly CompletionAdvantage[] | undefined)[]>;

/** GRPO's advantages: each reward minus its group's mean (over its standard deviation when `normalize`). */
export function groupCentred(normalize: boolean): Advantages {
  return (groups) =>
    groupAdvantages(
      groups.map((g) => g.completions.map((c) => c.reward)),
      { normalize },
    );
}

/** Datums of a step: each kept completion, trained on its own tokens with the sampler's logprobs and its advantage. */
export async function policyDatums(
  samples: StepSamples,
  advantagesOf: Advantages,
): Promise<{ datums: Datum[]; groupsKept: number; sources: DatumSource[] }> {
  // Unscorable samples leave their group: the advantages are over the scored ones only.
  const scored = samples.groups.map((g) => g.completions.filter((c): c is StepCompletion & { reward: number } => c.reward !== null));
  const advantages = await advantagesOf(
    samples.groups.map((g, i) => ({ line: g.line, promptTokens: g.promptTokens, completions: scored[i]! })),
  );
  const datums: Datum[] = [];
  const sources: DatumSource[] = [];
  const build = (promptTokens: number[], c: StepCompletion, advantage: CompletionAdvantage, source: DatumSource) => {
    if (c.episode) {
      if (typeof advantage !== 'number')
        throw new RoundhouseFailure('InvalidInput', 'per-token advantages are for single-turn samples: an episode takes one advantage');
      const turns = episodeDatums(c.episode, advantage);
      datums.push(...turns);
      return void sources.push(...turns.map(() => source));
    }
    if (c.tokens.length === 0) return;
    sources.push(source);
    const full = [...promptTokens, ...c.tokens];
    const trained = (i: number) => i + 1 >= promptTokens.length;
    const at = (k: number) => (typeof advantage === 'number' ? advantage : (advantage[k] ?? 0));
    datums.push({
      modelInput: full.slice(0, -1),
      targetTokens: full.slice(1),
      weights: full.slice(1).map((_t, i) => (trained(i) ? 1 : 0)),
      logprobs: full.slice(1).map((_t, i) => (trained(i) ? (c.logprobs[i + 1 - promptTokens.length] ?? 0) : 0)),
      advantages: full.slice(1).map((_t, i) => (trained(i) ? at(i + 1 - promptTokens.length) : 0)),
    });
  };
  samples.groups.forEach((g, i) => {
    const a = advantages[i];
    if (a) scored[i]!.forEach((c, j) => build(g.promptTokens, c, a[j]!, { group: i, completion: j }));
  });
  const groupsKept = advantages.filter((a) => a !== undefined).length;
  // Every group tied: the step still takes its optimizer step (a zero gradient), so the step count stays exact.
  if (datums.length === 0)
    samples.groups.forEach((g, i) => g.completions.forEach((c, j) => build(g.promptTokens, c, 0, { group: i, completion: j })));
  return { datums, groupsKept, sources };
}

/** Where a datum came from: its group (prompt) in the step and its completion in the group (a turn's, for an episode). */
export interface DatumSource {
  group: number;
  completion: number;
}

/** A step's samples: from its file when an earlier attempt drew them, else drawn now, scored, and written. */
export async function drawSamples(
  provider: TrainingProvider,
  input: GrpoSegmentInput,
  data: { train: TokenizedRow[]; tokenizer: TextTokenizer; model: { stopStrings?: boolean } },
  step: number,
  key: (...parts: (string | number)[]) => string,
  reward: RewardFunction | undefined,
  signal: AbortSignal,
  drawnBefore: () => Promise<Set<string>>,
  /** Episodes: what their completions wait for (the weights they must sample being synced). */
  weightsReady?: Promise<unknown>,
): Promise<StepSamples> {
  const file = samplesFile(input.samplesDir, step, joinLocation);
  const drawn = (await drawnBefore()).has(file.slice(file.lastIndexOf('/') + 1)) ? await readJson<StepSamples>(file) : undefined;
  if (drawn) return drawn;
  const t = input.spec.training;
  const s = input.spec.sampling;
  const grpo = input.spec.round!.grpo!;
  const { rows } = batchRows(step, data.train.length, t.batchSize, t.seed);
  const prompts = rows.map((r) => data.train[r]!);
  if (grpo.environment) {
    const drawn = await drawEpisodes({
      input,
      provider,
      step,
      prompts,
      tokenizer: data.tokenizer,
      model: data.model,
      key,
      signal,
      weightsReady,
    });
    const samples: StepSamples = {
      step,
      policyVersion: drawn.policyVersion,
      groups: prompts.map((row, i) => ({ line: row.line, promptTokens: row.promptTokens, completions: drawn.groups[i]!.completions })),
      turns: drawn.counts,
    };
    await writeJsonAtomic(file, samples);
    return samples;
  }
  const handle = await provider.submitSample(
    input.sessionId,
    key(`s${step}`, 'sample'),
    prompts.map((r) => r.promptTokens),
    {
      maxTokens: s.maxTokens,
      temperature: s.temperature,
      topP: s.topP,
      topK: s.topK,
      stop: stopToSend(input.spec.provider.kind, data.model, s.stop),
      seed: drawSeed(input.spec, (base) => base * 1_000_003 + step),
    },
    { numSamples: grpo.groupSize },
  );
  const results = await provider.awaitOperation(handle, { signal });
  const samples: StepSamples = { step, policyVersion: results[0]?.policyVersion, groups: [] };
  for (const [i, row] of prompts.entries()) {
    const completions = (results[i]?.sequences ?? []).map((seq) => {
      // Trained on exactly the tokens whose text the reward scores: through the stop, on every dialect.
      const tokens = tokensThroughStop(data.tokenizer, seq.tokens, s.stop);
      return {
        tokens,
        logprobs: (seq.logprobs ?? seq.tokens.map(() => 0)).slice(0, tokens.length),
        text: completionText(data.tokenizer, tokens, s.stop),
        reward: null as number | null,
      };
    });
    if (reward) for (const c of completions) c.reward = await reward(c.text, row.answer, row.prompt);
    samples.groups.push({ line: row.line, promptTokens: row.promptTokens, completions });
  }
  if (!reward) await rewardOnPython(input, samples, prompts, key(`s${step}`, 'rewards'), signal);
  await writeJsonAtomic(file, samples);
  return samples;
}

/**
 * A step's rewards from the user's function on a Python worker: the samples go by store reference, each reward is
 * recorded under `<rewardsDir>/s<step>/p<prompt>-c<sample>.json` (so a retried or re-run step reads it back instead
 * of calling the judge again), and a function that keeps failing fails the step (RewardFailed): never a 0.
 */
async function rewardOnPython(
  input: GrpoSegmentInput,
  samples: StepSamples,
  prompts: TokenizedRow[],
  callKey: string,
  signal: AbortSignal,
): Promise<void> {
  const call = pythonReward(input.spec);
  if (!call || !input.rewardsDir)
    throw new RoundhouseFailure('InvalidInput', 'round.grpo.reward: a python reward needs the round to name its rewards directory');
  const items: ScoreItem[] = samples.groups.flatMap((g, i) =>
    g.completions.map((c, j) => ({
      key: `${stepName(samples.step)}/p${i}-c${j}`,
      completion: c.text,
      answer: prompts[i]!.answer,
      prompt: prompts[i]!.prompt,
      row: prompts[i]!.fields ?? { prompt: prompts[i]!.prompt, answer: prompts[i]!.answer },
      context: { step: samples.step + 1, prompt: i, sample: j, line: g.line },
    })),
  );
  const scored = await scoreOnPython({
    role: 'reward',
    call,
    workflowId: `python:${callKey}`,
    itemsLocation: pythonStepFiles.batch(input.rewardsDir, samples.step, input.lineage, joinLocation),
    recordsDir: input.rewardsDir,
    items,
    signal,
  });
  let n = 0;
  for (const g of samples.groups) for (const c of g.completions) c.reward = scored.values[n++] ?? null;
}

/** The trained tokens' mean (sampler logprob − trainer logprob), from the forward-backward's logprobs. */
export function logprobGapOf(datums: Datum[], trainer: number[][] | undefined): number | undefined {
  if (!trainer || trainer.length !== datums.length) return undefined;
  let sum = 0;
  let n = 0;
  datums.forEach((d, i) =>
    d.weights.forEach((w, k) => {
      const t = trainer[i]![k];
      if (w === 0 || t === undefined) return;
      sum += d.logprobs![k]! - t;
      n++;
    }),
  );
  return n ? sum / n : undefined;
}

/** The mean negative sampler logprob of the step's sampled tokens: an estimate of the sampling policy's entropy. */
export function entropyOf(samples: StepSamples): number | undefined {
  let sum = 0;
  let n = 0;
  for (const g of samples.groups)
    for (const c of g.completions)
      for (const l of c.logprobs) {
        sum -= l;
        n++;
      }
  return n ? sum / n : undefined;
}
