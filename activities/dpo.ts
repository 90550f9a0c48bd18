import { meteredProvider, type TokenUsage } from './usage';
import { Context } from '@temporalio/activity';
import { accumulatedRows } from '../config/rules/schedule';
import type { Datum, TrainingProvider } from '../providers/types';
import type {
  DpoEvaluation,
  DpoReferenceInput,
  DpoSegmentInput,
  DpoSegmentResult,
  PhaseInput,
  RoundSpec,
} from '../workflows/round/contract';
import { toDatum, type TokenizedPair } from './data';
import type { ActivityDeps } from './deps';
import { dpoLossAndGradients } from './dpo-loss';
import { atBoundary } from './failures';
import { writeJsonAtomic } from './files';
import { computeReferenceOnce, requireReference as requireRef, type ReferenceFile as RefFile } from './reference-file';
import { lineageParts, roundKey } from '../config/rules/keys';
import { lossPerToken } from '../config/rules/loss-units';
import { ROUND_KIND } from '../config/rules/round-kinds';
import { createPreparer, type PreparedPairs } from './prepare';
import { trainSegmentOf, type SegmentContext, type StepKind } from './segment';
import { customGradientStep, passKey } from './custom-steps';

/**
 * DPO rounds through a custom loss: reference logprobs of every pair computed once, before the first step, and kept
 * in a file (the workflow holds its path, not the numbers); each step a forward for the policy's logprobs, the DPO
 * loss and its per-token gradients computed here, a custom forward-backward carrying them, and an optimizer step.
 */

type Which = 'train' | 'eval';

/** Summed reference logprob of [chosen, rejected] per pair, in file order. */
type ReferenceFile = RefFile<[number, number]>;

export interface DpoStepRecord {
  step: number;
  /** Mean DPO loss over the step's pairs; it is also the step's `lossPerToken` (`tokens` is 1). */
  loss: number;
  tokens: 1;
  lossPerToken: number;
  /** Mean of (policy − reference) chosen minus (policy − reference) rejected, in nats. */
  margin: number;
  /** Share of the step's pairs the policy prefers the chosen answer of, relative to the reference. */
  accuracy: number;
}

/** A pair as the two datums the trainer sees: [chosen, rejected]. */
export function pairDatums(pair: Pick<TokenizedPair, 'promptTokens' | 'chosenTokens' | 'rejectedTokens'>): [Datum, Datum] {
  return [
    toDatum({ promptTokens: pair.promptTokens, completionTokens: pair.chosenTokens }),
    toDatum({ promptTokens: pair.promptTokens, completionTokens: pair.rejectedTokens }),
  ];
}

/** Margins within float32 noise of 0 (the policy is still its reference) prefer neither answer. */
const PREFERENCE_EPSILON = 1e-3;

const summed = (logprobs: number[], d: Datum) => logprobs.reduce((a, lp, i) => a + lp * (d.weights[i] ?? 0), 0);

/**
 * Summed logprobs of each pair's chosen and rejected answers under a session's current weights. `beat` runs after each
 * batch: a bare heartbeat in a phase activity; none inside a training segment, whose own heartbeats carry its cursor (a
 * bare one would replace those details, and a retried attempt would forget its saved checkpoints and steps in flight).
 */
const pairLogprobs = async (
  provider: TrainingProvider,
  sessionId: string,
  pairs: TokenizedPair[],
  batchPairs: number,
  keyOf: (batch: number) => string,
  beat: () => void = () => Context.current().heartbeat(),
) => {
  const signal = Context.current().cancellationSignal;
  const handles = [];
  for (let b = 0; b * batchPairs < pairs.length; b++) {
    const datums = pairs.slice(b * batchPairs, (b + 1) * batchPairs).flatMap(pairDatums);
    handles.push({
      datums,
      handle: await provider.submitForwardBackward(sessionId, keyOf(b), datums, { forwardOnly: true, returnLogprobs: true }),
    });
  }
  const out: { sums: [number, number]; logprobs: [number[], number[]]; datums: [Datum, Datum] }[] = [];
  for (const { datums, handle } of handles) {
    const result = await provider.awaitOperation(handle, { signal });
    for (let i = 0; i < datums.length; i += 2) {
      const lc = result.logprobs?.[i] ?? [];
      const lr = result.logprobs?.[i + 1] ?? [];
      out.push({ sums: [summed(lc, datums[i]!), summed(lr, datums[i + 1]!)], logprobs: [lc, lr], datums: [datums[i]!, datums[i + 1]!] });
    }
    beat();
  }
  return out;
};

const requireReference = (file: string, data: { trainSha256: string; evalSha256: string }): Promise<ReferenceFile> =>
  requireRef<[number, number]>(file, data, 'the round cannot compute its DPO loss');

const evaluate = (spec: RoundSpec, pairs: TokenizedPair[], reference: [number, number][], policy: { sums: [number, number] }[]) => {
  const beta = spec.round?.dpo?.beta ?? 0.1;
  return pairs.map((pair, i) => {
    const [rc, rr] = reference[i]!;
    const [pc, pr] = policy[i]!.sums;
    const margin = pc - rc - (pr - rr);
    const z = beta * margin;
    return {
      line: pair.line,
      prompt: pair.prompt,
      chosen: pair.chosen,
      rejected: pair.rejected,
      margin,
      loss: z >= 0 ? Math.log1p(Math.exp(-z)) : -z + Math.log1p(Math.exp(z)),
      match: margin > PREFERENCE_EPSILON,
    };
  });
};

export function createDpoActivities(deps: ActivityDeps) {
  const { preparedPairs } = createPreparer(deps);

  return {
    /**
     * Reference logprobs of every train and eval pair under the round's starting weights, written once. Called
     * before the first step; a retry finds the file. If the file is gone after training began, the reference is
     * lost (the starting weights are no longer the session's): that fails the round rather than compare to the wrong one.
     */
    async computeDpoReference(input: DpoReferenceInput): Promise<{ path: string; pairs: number; usage?: TokenUsage }> {
      const meter = meteredProvider(await deps.providerFor(input.spec.provider), input.spend);
      const provider = meter.provider;
      return atBoundary(async () => {
        const p = await preparedPairs(input.spec, input.data);
        const batch = Math.max(1, input.spec.training.batchSize);
        const of = async (which: Which) =>
          (
            await pairLogprobs(provider, input.sessionId, p[which], batch, (b) =>
              roundKey(input.campaignId, input.round, ...lineageParts(input.lineage), 'reference', which, `b${b}`),
            )
          ).map((r) => r.sums);
        await computeReferenceOnce(input, provider, p, of);
        return { path: input.outputPath, pairs: p.train.length + p.eval.length, usage: meter.usage() };
      });
    },

    /** Preference accuracy, mean margin and DPO loss of the eval pairs under the current weights (forward only). */
    async evaluateDpo(input: PhaseInput & { referencePath: string; outputPath?: string }): Promise<DpoEvaluation> {
      const meter = meteredProvider(await deps.providerFor(input.spec.provider), input.spend);
      const provider = meter.provider;
      return atBoundary(async () => {
        const p = await preparedPairs(input.spec, input.data);
        const reference = await requireReference(input.referencePath, p);
        const policy = await pairLogprobs(provider, input.sessionId, p.eval, Math.max(1, input.spec.training.batchSize), (b) =>
          roundKey(input.campaignId, input.round, ...lineageParts(input.lineage), input.label, `b${b}`),
        );
        const rows = evaluate(input.spec, p.eval, reference.eval, policy);
        if (input.outputPath) await writeJsonAtomic(input.outputPath, rows);
        const n = Math.max(1, rows.length);
        return {
          loss: rows.reduce((a, r) => a + r.loss, 0) / n,
          accuracy: rows.filter((r) => r.match).length / n,
          meanMargin: rows.reduce((a, r) => a + r.margin, 0) / n,
          pairs: rows.length,
          usage: meter.usage(),
        };
      });
    },

    /** DPO steps from the cursor until the segment's step or time bound (activities/segment.ts). */
    async trainDpoSegment(input: DpoSegmentInput): Promise<DpoSegmentResult> {
      return atBoundary(async () => {
        const { result, records } = await trainSegmentOf<DpoStepRecord, Record<string, never>>(deps, input, async (ctx) => {
          const p = await preparedPairs(input.spec, input.data);
          return dpoStep(input, p, await requireReference(input.referencePath, p), ctx);
        });
        const last = records[records.length - 1];
        return { ...result, latestMargin: last?.margin, latestAccuracy: last?.accuracy }; // loss per pair: tokens is 1
      });
    },
  };
}

/**
 * A DPO step for the segment driver: a keyed forward for the policy's logprobs at the step's weights, the DPO loss and
 * its per-token gradients computed here, and a custom forward-backward carrying them. Every attempt computes the
 * same gradients from the same (deduplicated) forward, so the keyed custom forward-backward is the same request.
 */
function dpoStep(
  input: DpoSegmentInput,
  p: PreparedPairs,
  reference: ReferenceFile,
  ctx: SegmentContext,
): StepKind<DpoStepRecord, Record<string, never>> {
  const { provider, key } = ctx;
  const t = input.spec.training;
  const beta = input.spec.round?.dpo?.beta ?? 0.1;
  const passes = t.accumulate ?? 1;
  const compute = async (step: number) => {
    const chunks = accumulatedRows(step, p.train.length, t.batchSize, passes, t.seed);
    const total = chunks.reduce((a, rows) => a + rows.length, 0);
    let loss = 0;
    let margin = 0;
    let preferred = 0;
    const out: { datums: Datum[]; gradients: number[][] }[] = [];
    for (const [pass, rows] of chunks.entries()) {
      const pairs = rows.map((r) => p.train[r]!);
      const policy = await pairLogprobs(
        provider,
        input.sessionId,
        pairs,
        pairs.length,
        () => passKey(key, step, pass, 'forward'),
        () => undefined, // the segment heartbeats its cursor itself
      );
      const datums: Datum[] = [];
      const gradients: number[][] = [];
      policy.forEach((pol, i) => {
        const [rc, rr] = reference.train[rows[i]!]!;
        const dpo = dpoLossAndGradients(
          {
            chosen: { logprobs: pol.logprobs[0], weights: pol.datums[0].weights, referenceLogprob: rc },
            rejected: { logprobs: pol.logprobs[1], weights: pol.datums[1].weights, referenceLogprob: rr },
          },
          beta,
        );
        datums.push(...pol.datums);
        // The step's loss is the mean over its pairs (of every pass): so is its gradient.
        gradients.push(
          dpo.chosen.map((g) => g / total),
          dpo.rejected.map((g) => g / total),
        );
        loss += dpo.loss / total;
        margin += dpo.margin / total;
        if (dpo.margin > PREFERENCE_EPSILON) preferred += 1;
      });
      out.push({ datums, gradients });
    }
    const record: DpoStepRecord = {
      step: step + 1,
      loss,
      tokens: 1,
      lossPerToken: lossPerToken(input.spec.provider.kind, ROUND_KIND.dpo.stepLoss(input.spec.round), loss, 1),
      margin,
      accuracy: preferred / Math.max(1, total),
    };
    return { passes: out, record };
  };
  return customGradientStep(ctx, input.sessionId, compute);
}
