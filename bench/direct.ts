import { batchRows, learningRateAt } from '../config/rules/schedule';
import { tokenizerFor } from '../config/io/tokenizer';
import { loadRoundData, toDatum, type TokenizedRow } from '../activities/data';
import { BasetenProvider } from '../providers/baseten/client';
import { TinkerProvider } from '../providers/tinker/client';
import { TogetherProvider } from '../providers/together/client';
import type { AdamParams, Datum, TrainingProvider } from '../providers/types';
import { LOCAL_EMULATOR_KEY } from '../workers/providers';
import type { RoundInput } from '../workflows/round/contract';

/**
 * The training of a round written as a plain script, the way the providers' guides write it: the comparison
 * points of the overhead benchmark. Same HTTP client (and client options) as the worker's `kind: local`
 * provider, same rows per step, same learning-rate schedule, seed and LoRA settings as the round.
 */
export type DirectLoopKind = 'naive' | 'pipelined';

export interface DirectLoopResult {
  steps: number;
  /** From the first submission to the last optimizer step confirmed. */
  trainingMs: number;
}

/** The key benchmarks give Baseten-dialect rounds (worker environment) and their direct loops, on the emulator. */
export const BENCH_BASETEN_KEY = 'bt-bench-key';

/** The key benchmarks give Tinker-dialect rounds and their direct loops, on the emulator. */
export const BENCH_TINKER_KEY = 'tml-bench-key';

/** The provider the worker's registry builds for the round's provider spec (`local`, `baseten` or `tinker`, with a base URL). */
export function directProvider(provider: { kind: string; baseUrl?: string }): TrainingProvider {
  if (provider.kind === 'baseten') return new BasetenProvider({ baseUrl: provider.baseUrl!, apiKey: BENCH_BASETEN_KEY });
  if (provider.kind === 'tinker') return new TinkerProvider({ baseUrl: provider.baseUrl!, apiKey: BENCH_TINKER_KEY });
  return new TogetherProvider({ baseUrl: provider.baseUrl!, apiKey: LOCAL_EMULATOR_KEY });
}

export async function runDirectLoop(kind: DirectLoopKind, input: RoundInput, label: string): Promise<DirectLoopResult> {
  const spec = input.spec;
  const t = spec.training;
  const provider = directProvider(spec.provider);
  const model = (await provider.supportedModels()).find((m) => m.name === spec.provider.model)!;
  const tokenizer = tokenizerFor(spec.provider.model, model.tokenizer, spec.provider.tokenizer);
  const train: TokenizedRow[] = loadRoundData(input.data.train, input.data.eval, tokenizer, {
    maxSeqLen: t.maxSeqLen,
    modelMaxSeqLen: model.maxSeqLen,
  }).train.rows;
  const totalSteps = Math.ceil(train.length / t.batchSize) * t.epochs;

  const resource = await provider.provision({
    model: spec.provider.model,
    ownerTag: `bench-direct-${label}`,
    generatorReplicas: spec.provider.generatorReplicas,
    inactiveTimeoutSeconds: 600,
  });
  try {
    await provider.waitReady(resource.id, { timeoutMs: 120_000 });
    const session = await provider.openSession({
      resourceId: resource.id,
      loraRank: t.loraRank,
      loraAlpha: t.loraAlpha,
      seed: t.seed,
      displayName: `bench-direct-${label}`,
    });
    const stepData = (step: number): Datum[] => batchRows(step, train.length, t.batchSize, t.seed).rows.map((r) => toDatum(train[r]!));
    const adam = (step: number): AdamParams => ({
      learningRate: learningRateAt(step, totalSteps, t.learningRate, t.lrSchedule),
      beta1: t.adam.beta1,
      beta2: t.adam.beta2,
      eps: t.adam.eps,
      weightDecay: t.adam.weightDecay,
      gradClipNorm: t.adam.gradClipNorm,
    });
    const key = (step: number, op: string) => `bench-${label}/s${step}/${op}`;
    const started = Date.now();
    if (kind === 'naive') {
      // The guides' loop: await forward_backward, then await optim_step, then the next batch.
      for (let step = 0; step < totalSteps; step++) {
        await provider.awaitOperation(await provider.submitForwardBackward(session.id, key(step, 'fb'), stepData(step)));
        await provider.awaitOperation(await provider.submitOptimStep(session.id, key(step, 'opt'), adam(step)));
      }
    } else {
      // forward_backward and optim_step submitted back to back, `pipelineDepth` steps in flight (as the round).
      const inFlight: Promise<unknown>[] = [];
      for (let step = 0; step < totalSteps; step++) {
        const fb = await provider.submitForwardBackward(session.id, key(step, 'fb'), stepData(step));
        const opt = await provider.submitOptimStep(session.id, key(step, 'opt'), adam(step));
        inFlight.push(
          (async () => {
            await provider.awaitOperation(fb);
            await provider.awaitOperation(opt);
          })(),
        );
        if (inFlight.length >= t.pipelineDepth) await inFlight.shift();
      }
      await Promise.all(inFlight);
    }
    const trainingMs = Date.now() - started;
    await provider.closeSession(session.id).catch(() => undefined);
    return { steps: totalSteps, trainingMs };
  } finally {
    await provider.deactivate(resource.id).catch(() => undefined);
    await provider.close();
  }
}
