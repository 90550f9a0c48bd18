import { ensureWasmBackend } from './backend';
import { LearnerInputError } from './errors';
import { evaluateTokenLoss, type Segment, type TokenLoss } from './losses';
import type { SampleParams } from './sampling';
import { STATE_FORMAT, type LearnerState } from './state';
import type { AdamSettings } from './adam';
import type { ForwardResult, LearnerOptions, SampledSequence, TokenSequence } from './index';

/**
 * The zero-compute model (`compute: none`): no network, no gradients. Every call answers at once with well-formed,
 * deterministic figures — a token's logprob is a function of the token, its position and how many optimizer steps
 * the weights took, so the loss falls as training goes on — while steps, weights versions, checkpoints and the
 * ledger behave as with the real learner. For measuring orchestration (the scale benchmark), where the learner's
 * compute would measure the emulator instead.
 */
export const ZERO_COMPUTE_ARCHITECTURE = 'zero-compute/1';

export class ZeroComputeLearner {
  private pending = false;

  private constructor(
    private readonly options: LearnerOptions,
    /** Optimizer steps the weights went through (what the figures depend on). */
    private weightsStep: number,
    /** Optimizer steps counted by this optimizer (0 after a weights-only restore). */
    private stepCount: number,
    private emptySteps: number,
  ) {}

  static async create(options: LearnerOptions): Promise<ZeroComputeLearner> {
    await ensureWasmBackend(); // the loss functions are tensor functions (a few tiny tensors per call)
    return new ZeroComputeLearner(options, 0, 0, 0);
  }

  static async fromState(options: LearnerOptions, state: LearnerState, restore: { optimizer: boolean }): Promise<ZeroComputeLearner> {
    await ensureWasmBackend();
    if (state.model.architecture !== ZERO_COMPUTE_ARCHITECTURE)
      throw new LearnerInputError(`the state was saved by ${state.model.architecture}, not the zero-compute model`);
    if (restore.optimizer && !state.optimizer) throw new LearnerInputError('the state has no optimizer moments to restore');
    const weightsStep = Number(state.adapter.queryA ?? state.step);
    return new ZeroComputeLearner(options, weightsStep, restore.optimizer ? state.step : 0, state.emptySteps ?? 0);
  }

  get step(): number {
    return this.stepCount;
  }

  get emptyOptimizerSteps(): number {
    return this.emptySteps;
  }

  forward(batch: TokenSequence[], loss: TokenLoss): ForwardResult {
    return this.evaluate(batch, loss);
  }

  forwardBackward(batch: TokenSequence[], loss: TokenLoss): ForwardResult {
    const result = this.evaluate(batch, loss);
    this.pending = true;
    return result;
  }

  /** Counts the step (Adam's settings change nothing here). */
  optimStep(adam: AdamSettings): { step: number; gradNorm: number; empty: boolean } {
    void adam;
    const empty = !this.pending;
    this.pending = false;
    this.stepCount += 1;
    this.weightsStep += 1;
    if (empty) this.emptySteps += 1;
    return { step: this.stepCount, gradNorm: empty ? 0 : 1, empty };
  }

  /** `maxTokens` tokens per sample, drawn from (seed, prompt, sample, position): deterministic, never a stop. */
  sample(prompt: number[], params: SampleParams, numSamples: number): SampledSequence[] {
    const promptKey = prompt.reduce((h, t) => mix(h, t), params.seed ?? this.weightsStep);
    return Array.from({ length: numSamples }, (_v, i) => {
      const tokens = Array.from({ length: params.maxTokens }, (_t, p) => mix(mix(promptKey, i), p) % this.options.vocabSize);
      return { tokens, logprobs: tokens.map((t, p) => this.logprob(t, prompt.length + p)), stopReason: 'length' as const };
    });
  }

  promptLogprobs(tokens: number[]): number[] {
    return tokens.map((t, i) => (i === 0 ? 0 : this.logprob(t, i - 1)));
  }

  exportState(options: { withOptimizer: boolean }): LearnerState {
    return {
      format: STATE_FORMAT,
      model: {
        vocabSize: this.options.vocabSize,
        seed: this.options.seed,
        loraRank: this.options.loraRank,
        loraAlpha: this.options.loraAlpha ?? 2 * this.options.loraRank,
        trainUnembed: this.options.trainUnembed ?? true,
        architecture: ZERO_COMPUTE_ARCHITECTURE,
      },
      step: this.stepCount,
      emptySteps: this.emptySteps,
      vocabulary: [],
      // The weights' own step count, where the real learner keeps its adapter.
      adapter: { queryA: String(this.weightsStep) },
      ...(options.withOptimizer ? { optimizer: { first: {}, second: {} } } : {}),
    };
  }

  dispose(): void {}

  /** log p of a token at a position: between −0.5 and −4.5 nats, falling towards −0.5 as the weights train. */
  private logprob(token: number, position: number): number {
    const spread = 0.75 + 0.5 * ((mix(token, position) % 1000) / 1000);
    return -(0.5 + 4 / (1 + this.weightsStep / 10)) * spread;
  }

  private evaluate(batch: TokenSequence[], loss: TokenLoss): ForwardResult {
    if (!Array.isArray(batch) || batch.length === 0) throw new LearnerInputError('batch must contain at least one sequence');
    const segments: Segment[] = [];
    const logprobs: number[][] = [];
    let start = 0;
    batch.forEach((s, i) => {
      if (s.inputTokens.length !== s.targetTokens.length)
        throw new LearnerInputError(`batch[${i}]: inputTokens and targetTokens differ in length`);
      logprobs.push(s.targetTokens.map((t, p) => this.logprob(t, p)));
      segments.push({ start, length: s.targetTokens.length });
      start += s.targetTokens.length;
    });
    const { value } = evaluateTokenLoss(loss, Float32Array.from(logprobs.flat()), segments, false);
    return { loss: value, logprobs };
  }
}

/** A small integer hash (FNV-style mixing), non-negative. */
function mix(h: number, v: number): number {
  return (Math.imul(h ^ v, 0x01000193) ^ (v >>> 7)) >>> 0;
}

/** The zero-compute model as the engine makes its models. */
export const ZERO_COMPUTE_MODELS = {
  create: (options: LearnerOptions) => ZeroComputeLearner.create(options),
  fromState: (options: LearnerOptions, state: LearnerState, restore: { optimizer: boolean }) =>
    ZeroComputeLearner.fromState(options, state, restore),
};
