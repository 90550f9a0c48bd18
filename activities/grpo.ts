import { storeFor } from '../config/io/artifacts';
import { RoundhouseFailure } from '../config/rules/failures';
import { DEFAULT_GRPO_AGGREGATION, lossPerToken } from '../config/rules/loss-units';
import { ROUND_KIND } from '../config/rules/round-kinds';
import type { GrpoSpec } from '../config/io/spec';
import type { Datum, ForwardResult, OperationHandle, PolicyLoss } from '../providers/types';
import type { ActivityDeps } from './deps';
import { atBoundary } from './failures';
import { createPreparer, type PreparedData } from './prepare';
import { rewardFunction } from './rewards';
import type { GrpoSegmentInput, GrpoSegmentResult } from '../workflows/round/contract';
import { trainSegmentOf, type SegmentContext, type StepKind } from './segment';
import type { EpisodeSamples } from './episodes';
import { drawSamples, entropyOf, groupCentred, logprobGapOf, policyDatums, type DatumSource, type StepSamples } from './policy-batch';
import { checkedGradients } from './custom';
import { readJson } from './files';
import { lossOnPython, type LossRecord } from './python';
import { pythonLoss } from '../config/rules/python-calls';
import { lossFiles } from '../config/rules/round-files';
import { joinLocation } from '../config/io/artifacts';

/**
 * GRPO: per step, a group of completions per prompt from the generators, a reward for each, group-centred
 * advantages (constant-reward groups dropped), a policy-gradient forward-backward on the sampled tokens with the
 * sampler's logprobs, an optimizer step, and a weights sync so the next step samples the new policy. The sample →
 * score → datums path is activities/policy-batch.ts; GRPO's part is its advantages (group-centred) and its loss.
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
  /** `round.grpo.loss: { kind: python }`: the loss function's named metrics for the step. */
  metrics?: Record<string, number>;
}

export function policyLossOf(grpo: GrpoSpec): PolicyLoss {
  const l = grpo.loss;
  if (l.type === 'importance_sampling') return { type: 'importance_sampling' };
  if (l.type === 'ppo') return { type: 'ppo', clipLow: l.clipLow, clipHigh: l.clipHigh };
  // Always an aggregation: the unit of the loss figure must not rest on the provider's undocumented default.
  const aggregation = l.aggregation ?? DEFAULT_GRPO_AGGREGATION;
  return { type: 'grpo', clipLow: l.clipLow, clipHigh: l.clipHigh, beta: l.beta, aggregation, ratio: l.ratio };
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
  const advantages = groupCentred(grpo.normalizeAdvantages);
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
  const python = pythonPolicyLoss(input, p, { provider, key, signal });
  const pythonSteps = new Map<number, ReturnType<NonNullable<typeof python>['step']>>();
  const datumsOf = async (step: number) => {
    const samples = await samplesFor(step);
    return { samples, ...(await policyDatums(samples, advantages)) };
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
      const { datums, samples, sources } = await datumsOf(step);
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
      if (python) {
        let pending = pythonSteps.get(step);
        if (!pending) pythonSteps.set(step, (pending = python.step(step, samples, datums, sources)));
        const { gradients } = await pending;
        const plain = datums.map(({ modelInput, targetTokens, weights }) => ({ modelInput, targetTokens, weights }));
        // The record reads the function's figures, not this handle's (a custom forward-backward reports no loss).
        return (await provider.submitCustomForwardBackward(
          input.sessionId,
          key(`s${step}`, 'custom-forward-backward'),
          plain,
          gradients,
        )) as unknown as OperationHandle<ForwardResult>;
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
      const own = python && (await pythonSteps.get(step));
      pythonSteps.delete(step);
      if (python && !own) throw new RoundhouseFailure('LossFailed', `step ${step + 1}: no loss call was made for it`);
      const loss = own ? own.loss : fb.loss;
      const all = samples.groups.flatMap((g) => g.completions.map((c) => c.reward));
      const rewards = all.filter((r): r is number => r !== null);
      const tokens = datums.reduce((a, d) => a + d.weights.filter((w) => w !== 0).length, 0);
      return {
        step: step + 1,
        loss,
        tokens,
        lossPerToken: lossPerToken(input.spec.provider.kind, ROUND_KIND.grpo.stepLoss(input.spec.round), loss, tokens),
        meanReward: rewards.reduce((a, r) => a + r, 0) / Math.max(1, rewards.length),
        groupsKept,
        groups: samples.groups.length,
        policyVersion: samples.policyVersion,
        stepsOffPolicy: samples.policyVersion === undefined ? undefined : step + input.stepOffset - samples.policyVersion,
        ...(rewards.length < all.length ? { unscorable: all.length - rewards.length } : {}),
        ...episodeFigures(samples),
        entropy: entropyOf(samples),
        logprobGap: logprobGapOf(datums, own ? own.logprobs : fb.logprobs),
        ...(own && Object.keys(own.metrics).length ? { metrics: own.metrics } : {}),
      };
    },
    async end() {
      // Draws started ahead finish (their files are the next segment's input) before the activity returns.
      await Promise.allSettled(sampling.values());
    },
  };
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

/**
 * `round.grpo.loss: { kind: python }`: the user's policy loss instead of a built-in one. A step's datums (the sampled
 * completions, their advantages and sampler logprobs) get a keyed forward for the trainer's logprobs, one call of the
 * function (recorded under the step's identity, as a custom round's is), and its gradients go by custom
 * forward-backward.
 */
function pythonPolicyLoss(input: GrpoSegmentInput, p: PreparedData, { provider, key, signal }: SegmentContext) {
  const call = input.spec.round?.grpo?.loss.kind === 'python' ? pythonLoss(input.spec) : undefined;
  if (!call) return undefined;
  const lossDir = input.lossDir;
  if (!lossDir) throw new RoundhouseFailure('InvalidInput', 'round.grpo.loss: a python loss needs the round to name its losses directory');
  const rowsByLine = new Map(p.train.map((r) => [r.line, r]));
  const lineage = input.lineage ?? 0;
  return {
    async step(step: number, samples: StepSamples, datums: Datum[], sources: DatumSource[]) {
      const plain = datums.map(({ modelInput, targetTokens, weights }) => ({ modelInput, targetTokens, weights }));
      const forward = await provider.awaitOperation(
        await provider.submitForwardBackward(input.sessionId, key(`s${step}`, 'forward'), plain, {
          forwardOnly: true,
          returnLogprobs: true,
        }),
        { signal },
      );
      const logprobs = datums.map((d, i) => forward.logprobs?.[i] ?? d.weights.map(() => 0));
      const rows = samples.groups.map((g) => {
        const row = rowsByLine.get(g.line);
        return row?.fields ?? { prompt: row?.prompt, answer: row?.answer };
      });
      const result = await lossOnPython({
        call,
        workflowId: `python:${key(`s${step}`, 'loss')}`,
        batchLocation: lossFiles.stepBatch(lossDir, step, lineage, joinLocation),
        recordLocation: lossFiles.stepRecord(lossDir, step, lineage, joinLocation),
        batch: {
          step,
          mode: 'train',
          rows,
          datums: datums.map((d, i) => ({
            row: sources[i]!.group,
            completion: `c${sources[i]!.completion}`,
            logprobs: logprobs[i]!,
            weights: d.weights,
            ...(d.advantages ? { advantages: d.advantages } : {}),
            ...(d.logprobs ? { sampler_logprobs: d.logprobs } : {}),
            ...(d.referenceLogprobs ? { reference_logprobs: d.referenceLogprobs } : {}),
          })),
          context: { step: step + 1, ...(lineage ? { lineage } : {}) },
        },
        signal,
      });
      const gradients = checkedGradients(await readJson<LossRecord>(result.record), datums, call.name, `at step ${step + 1}`);
      return { loss: result.loss, metrics: result.metrics, logprobs, gradients };
    },
  };
}
