import { joinLocation, storeFor } from '../config/io/artifacts';
import { RoundhouseFailure } from '../config/rules/failures';
import { pythonStepFiles, samplesFile, stepName } from '../config/rules/round-files';
import { DEFAULT_GRPO_AGGREGATION, lossPerToken } from '../config/rules/loss-units';
import { batchRows } from '../config/rules/schedule';
import { drawSeed, stopToSend } from '../config/rules/sampling';
import type { GrpoSpec } from '../config/io/spec';
import type { TextTokenizer } from '../config/io/tokenizer';
import type { Datum, PolicyLoss, TrainingProvider } from '../providers/types';
import type { TokenizedRow } from './data';
import type { ActivityDeps } from './deps';
import { atBoundary } from './failures';
import { readJson, writeJsonAtomic } from './files';
import { createPreparer, type PreparedData } from './prepare';
import { groupAdvantages, rewardFunction } from './rewards';
import { scoreOnPython } from './python';
import { pythonReward } from '../config/rules/python-calls';
import type { ScoreItem } from '../workflows/python/contract';
import { completionText, tokensThroughStop } from './scoring';
import type { GrpoSegmentInput, GrpoSegmentResult } from '../workflows/round/contract';
import { trainSegmentOf, type SegmentContext, type StepKind } from './segment';
import { drawEpisodes, episodeDatums, type EpisodeSamples } from './episodes';

/**
 * GRPO: per step, a group of completions per prompt from the generators, a reward for each, group-centred
 * advantages (constant-reward groups dropped), a policy-gradient forward-backward on the sampled tokens with the
 * sampler's logprobs, an optimizer step, and a weights sync so the next step samples the new policy.
 */

export interface GrpoStepRecord {
  step: number;
  /** The policy loss as the provider reports it: a sum, or under grpo a mean by its aggregation (config/rules/loss-units.ts). */
  loss: number;
  tokens: number;
  lossPerToken: number;
  meanReward: number;
  /** Groups that taught something (not every reward equal) of all sampled. */
  groupsKept: number;
  groups: number;
  /** The policy version the generators served when this step's samples were drawn… */
  policyVersion?: number;
  /** …and how many optimizer steps that was behind the policy this step trained (at most `maxStepsOffPolicy`). */
  stepsOffPolicy?: number;
  /** Samples the reward called unscorable (`roundhouse.unscorable`): out of their group, not scored 0. */
  unscorable?: number;
  /** Multi-turn: model turns per episode (mean), turns the gateway sampled and turns it answered from its records. */
  turnsPerEpisode?: number;
  turnsSampled?: number;
  turnsReplayed?: number;
  /** Multi-turn: episodes whose chat template rewrote an earlier turn (trained turn by turn instead). */
  prefixBreaks?: number;
  /** The sampled tokens' mean negative logprob under the sampler (an estimate of the policy's entropy). */
  entropy?: number;
  /**
   * The trained tokens' mean sampler logprob minus the trainer's (before this step's update): an estimate of
   * KL(sampler ‖ trainer), which grows when sampling runs off-policy or the two disagree. When the trainer reports logprobs.
   */
  logprobGap?: number;
}

/** One step's samples as stored: enough to rebuild its datums exactly. */
interface StepSamples {
  step: number;
  policyVersion?: number;
  groups: {
    line: number;
    promptTokens: number[];
    /** `reward` null: the reward said the sample is unscorable; it leaves its group. */
    completions: { tokens: number[]; logprobs: number[]; text: string; reward: number | null; episode?: EpisodeSamples }[];
  }[];
  /** Multi-turn: the gateway's counts for the step. */
  turns?: { sampled: number; replayed: number };
}

export function policyLossOf(grpo: GrpoSpec): PolicyLoss {
  const l = grpo.loss;
  if (l.type === 'importance_sampling') return { type: 'importance_sampling' };
  if (l.type === 'ppo') return { type: 'ppo', clipLow: l.clipLow, clipHigh: l.clipHigh };
  // Always an aggregation: the unit of the loss figure must not rest on the provider's undocumented default.
  const aggregation = l.aggregation ?? DEFAULT_GRPO_AGGREGATION;
  return { type: 'grpo', clipLow: l.clipLow, clipHigh: l.clipHigh, beta: l.beta, aggregation, ratio: l.ratio };
}

/** Datums of a step: each kept completion, trained on its own tokens with the sampler's logprobs and its advantage. */
export function grpoDatums(samples: StepSamples, normalize: boolean): { datums: Datum[]; groupsKept: number } {
  // Unscorable samples leave their group: the advantages are over the scored ones only.
  const scored = samples.groups.map((g) => g.completions.filter((c) => c.reward !== null));
  const advantages = groupAdvantages(
    scored.map((completions) => completions.map((c) => c.reward!)),
    { normalize },
  );
  const datums: Datum[] = [];
  const build = (promptTokens: number[], c: StepSamples['groups'][number]['completions'][number], advantage: number) => {
    if (c.episode) return void datums.push(...episodeDatums(c.episode, advantage));
    if (c.tokens.length === 0) return;
    const full = [...promptTokens, ...c.tokens];
    const trained = (i: number) => i + 1 >= promptTokens.length;
    datums.push({
      modelInput: full.slice(0, -1),
      targetTokens: full.slice(1),
      weights: full.slice(1).map((_t, i) => (trained(i) ? 1 : 0)),
      logprobs: full.slice(1).map((_t, i) => (trained(i) ? (c.logprobs[i + 1 - promptTokens.length] ?? 0) : 0)),
      advantages: full.slice(1).map((_t, i) => (trained(i) ? advantage : 0)),
    });
  };
  samples.groups.forEach((g, i) => {
    const a = advantages[i];
    if (a) scored[i]!.forEach((c, j) => build(g.promptTokens, c, a[j]!));
  });
  const groupsKept = advantages.filter((a) => a !== undefined).length;
  // Every group tied: the step still takes its optimizer step (a zero gradient), so the step count stays exact.
  if (datums.length === 0) samples.groups.forEach((g) => g.completions.forEach((c) => build(g.promptTokens, c, 0)));
  return { datums, groupsKept };
}

export function createGrpoActivities(deps: ActivityDeps) {
  const { prepared } = createPreparer(deps);

  return {
    /**
     * Trains GRPO steps from the cursor until the segment's step or time bound (activities/segment.ts). Sampling of
     * the next `maxStepsOffPolicy` steps overlaps this step's training (bounded off-policy); 0 keeps it on-policy.
     */
    async trainGrpoSegment(input: GrpoSegmentInput): Promise<GrpoSegmentResult> {
      const grpo = input.spec.round?.grpo;
      return atBoundary(async () => {
        if (!grpo) throw new RoundhouseFailure('InvalidInput', 'round.grpo: is required when round.kind is grpo');
        const { result, records } = await trainSegmentOf<GrpoStepRecord>(deps, input, async (ctx) =>
          grpoStep(input, grpo, await prepared(input.spec, input.data), ctx),
        );
        return {
          ...result,
          firstReward: records[0]?.meanReward,
          latestReward: records[records.length - 1]?.meanReward,
          meanReward: records.length ? records.reduce((a, r) => a + r.meanReward, 0) / records.length : undefined,
        };
      });
    },
  };
}

/**
 * A GRPO step for the segment driver. Durability: each step's samples are written to a file (atomically) before its
 * forward-backward, so a retried step trains on exactly the samples it first drew, and the keyed submits it repeats
 * are the same requests (deduplicated by the provider).
 */
function grpoStep(
  input: GrpoSegmentInput,
  grpo: GrpoSpec,
  p: PreparedData,
  { provider, key, signal }: SegmentContext,
): StepKind<GrpoStepRecord> {
  const reward = !grpo.reward || grpo.reward.kind === 'python' ? undefined : rewardFunction(grpo.reward);
  const sampling = new Map<number, Promise<StepSamples>>();
  // The steps an earlier attempt drew samples for, listed once per attempt: a step not listed is drawn without a
  // read first (one store request per step on S3, not two).
  let earlier: Promise<Set<string>> | undefined;
  const drawnBefore = () =>
    (earlier ??= storeFor(input.samplesDir)
      .list(input.samplesDir)
      .then((files) => new Set(files.map((f) => f.slice(f.lastIndexOf('/') + 1)))));
  const samplesFor = (step: number, weightsReady?: Promise<unknown>): Promise<StepSamples> => {
    let pending = sampling.get(step);
    if (!pending) {
      pending = drawSamples(provider, input, p, step, key, reward, signal, drawnBefore, weightsReady);
      pending.catch(() => undefined); // awaited where it is used
      sampling.set(step, pending);
    }
    return pending;
  };
  const sync = async (step: number) =>
    (await provider.awaitOperation(await provider.submitWeightsSync(input.sessionId, key(`w${step}`, 'weights-sync')), { signal }))
      .weightsVersion;
  /**
   * Episodes take a while to start (a Python call, the environment, its first request), so they start while the
   * weights of step `version` sync, each completion waiting for the sync: every step that may sample these weights
   * (`version` itself, and up to `maxStepsOffPolicy` after it) begins its episodes now.
   */
  const drawEpisodesAhead = (version: number, synced: Promise<unknown>) => {
    if (!grpo.environment) return;
    for (let s = version; s <= version + grpo.maxStepsOffPolicy && s < input.totalSteps; s++) void samplesFor(s, synced);
  };
  const datumsOf = async (step: number) => {
    const samples = await samplesFor(step);
    return { samples, ...grpoDatums(samples, grpo.normalizeAdvantages) };
  };

  return {
    depth: 1, // the next step samples this step's weights
    async begin(applied) {
      // The generators serve the weights of the last applied step (a sync lost with a crashed attempt is redone; a
      // done one is the same keyed operation).
      const synced = sync(applied);
      drawEpisodesAhead(applied, synced);
      await synced;
    },
    async submitForwardBackward(step) {
      const { datums } = await datumsOf(step);
      if (datums.length === 0) throw new RoundhouseFailure('EmptySamples', `step ${step}: the generators returned only empty completions`);
      if (input.referenceSessionId) {
        const forward = datums.map(({ modelInput, targetTokens, weights }) => ({ modelInput, targetTokens, weights }));
        const ref = await provider.awaitOperation(
          await provider.submitForwardBackward(input.referenceSessionId, key(`s${step}`, 'reference-logprobs'), forward, {
            forwardOnly: true,
            returnLogprobs: true,
          }),
          { signal },
        );
        datums.forEach((d, i) => (d.referenceLogprobs = ref.logprobs?.[i] ?? d.weights.map(() => 0)));
      }
      return provider.submitForwardBackward(input.sessionId, key(`s${step}`, 'forward-backward'), datums, { loss: policyLossOf(grpo) });
    },
    submitted(step) {
      // Bounded off-policy: the next steps' groups are drawn now, from the weights this step is improving on.
      for (let ahead = 1; ahead <= grpo.maxStepsOffPolicy && step + ahead < input.totalSteps; ahead++) void samplesFor(step + ahead);
    },
    async confirmed(step, continues) {
      const synced = sync(step + 1);
      if (continues) drawEpisodesAhead(step + 1, synced);
      await synced;
    },
    async record(step, fb) {
      const { samples, datums, groupsKept } = await datumsOf(step);
      sampling.delete(step);
      const all = samples.groups.flatMap((g) => g.completions.map((c) => c.reward));
      const rewards = all.filter((r): r is number => r !== null);
      const tokens = datums.reduce((a, d) => a + d.weights.filter((w) => w !== 0).length, 0);
      return {
        step: step + 1,
        loss: fb.loss,
        tokens,
        lossPerToken: lossPerToken(input.spec.provider.kind, policyLossOf(grpo), fb.loss, tokens),
        meanReward: rewards.reduce((a, r) => a + r, 0) / Math.max(1, rewards.length),
        groupsKept,
        groups: samples.groups.length,
        policyVersion: samples.policyVersion,
        stepsOffPolicy: samples.policyVersion === undefined ? undefined : step + input.stepOffset - samples.policyVersion,
        ...(rewards.length < all.length ? { unscorable: all.length - rewards.length } : {}),
        ...episodeFigures(samples),
        entropy: entropyOf(samples),
        logprobGap: logprobGapOf(datums, fb.logprobs),
      };
    },
    async end() {
      // Draws started ahead finish (their files are the next segment's input) before the activity returns.
      await Promise.allSettled(sampling.values());
    },
  };
}

/** A step's samples: from its file when an earlier attempt drew them, else drawn now, scored, and written. */
async function drawSamples(
  provider: TrainingProvider,
  input: GrpoSegmentInput,
  data: { train: TokenizedRow[]; tokenizer: TextTokenizer; model: { stopStrings?: boolean } },
  step: number,
  key: (...parts: (string | number)[]) => string,
  reward: ReturnType<typeof rewardFunction> | undefined,
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

/** A multi-turn step's figures: turns per episode, what the gateway sampled and replayed, template breaks. */
function episodeFigures(samples: StepSamples): Partial<GrpoStepRecord> {
  const episodes = samples.groups.flatMap((g) => g.completions.map((c) => c.episode)).filter((e): e is EpisodeSamples => Boolean(e));
  if (episodes.length === 0) return {};
  return {
    turnsPerEpisode: episodes.reduce((a, e) => a + e.turns.length, 0) / episodes.length,
    turnsSampled: samples.turns?.sampled,
    turnsReplayed: samples.turns?.replayed,
    prefixBreaks: episodes.filter((e) => e.prefixBreaks > 0).length,
  };
}

/** The trained tokens' mean (sampler logprob − trainer logprob), from the forward-backward's logprobs. */
function logprobGapOf(datums: Datum[], trainer: number[][] | undefined): number | undefined {
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
function entropyOf(samples: StepSamples): number | undefined {
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
