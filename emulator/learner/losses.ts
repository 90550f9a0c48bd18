import * as tf from '@tensorflow/tfjs-core';
import { LearnerInputError, NonFiniteLossError } from './errors';

/** Where one sequence's positions sit in the concatenated per-token tensors. */
export interface Segment {
  start: number;
  length: number;
}

/**
 * A loss over the differentiable log-probabilities of the target tokens (all sequences' positions
 * concatenated): cross-entropy with weights, Σ g_i·logp_i for caller-supplied gradients, later PPO/GRPO.
 */
export type TokenLoss = (logprobs: tf.Tensor1D, segments: Segment[]) => tf.Scalar;

/** loss = −Σ w_i·logp_i: a sum over weighted tokens, not a mean (the providers report it that way). */
export function crossEntropyLoss(weights: number[][]): TokenLoss {
  requireFinite(weights, 'weights');
  return (logprobs, segments) => tf.neg(tf.sum<tf.Scalar>(tf.mul(perTokenTensor(weights, segments, 'weights'), logprobs)));
}

/** loss = Σ g_i·logp_i, so ∂loss/∂logp_i = g_i: backpropagates gradients the caller computed (custom forward-backward). */
export function linearLogprobLoss(gradients: number[][]): TokenLoss {
  requireFinite(gradients, 'gradients');
  return (logprobs, segments) => tf.sum<tf.Scalar>(tf.mul(perTokenTensor(gradients, segments, 'gradients'), logprobs));
}

/**
 * The loss's value and, when asked, its gradient with respect to each token's logprob, on plain numbers: the
 * loss never runs inside the network's gradient tape, so the network can be differentiated in chunks.
 */
export function evaluateTokenLoss(
  loss: TokenLoss,
  logprobs: Float32Array,
  segments: Segment[],
  withGradient: boolean,
): { value: number; gradient: Float32Array | undefined } {
  let value = 0;
  let gradient: Float32Array | undefined;
  let failure: Error | undefined;
  tf.tidy(() => {
    const apply = (input: tf.Tensor): tf.Scalar => {
      try {
        return requireScalar(loss(input as tf.Tensor1D, segments));
      } catch (err) {
        // Rethrown below: TF.js leaks its gradient tape's tensors when the function it differentiates throws.
        failure = err instanceof Error ? err : new Error(String(err));
        return tf.sum(input);
      }
    };
    const input = tf.tensor1d(logprobs);
    if (withGradient) {
      const result = tf.valueAndGrad(apply)(input);
      value = result.value.dataSync()[0];
      gradient = result.grad.dataSync() as Float32Array;
    } else {
      value = apply(input).dataSync()[0];
    }
  });
  if (failure !== undefined) throw failure;
  if (!Number.isFinite(value)) throw new NonFiniteLossError(`loss is not finite (${value})`);
  if (gradient?.some((g) => !Number.isFinite(g))) throw new NonFiniteLossError(`the loss's gradient is not finite (loss ${value})`);
  return { value: value === 0 ? 0 : value, gradient }; // −Σ w·0 is −0; report +0
}

function requireScalar(value: tf.Tensor): tf.Scalar {
  if (value.rank !== 0) throw new LearnerInputError(`a TokenLoss must return a scalar, got shape [${value.shape.join(', ')}]`);
  return value as tf.Scalar;
}

function requireFinite(values: number[][], what: string): void {
  if (!Array.isArray(values) || values.some((row) => !Array.isArray(row))) {
    throw new LearnerInputError(`${what} must be one array of numbers per sequence`);
  }
  values.forEach((row, s) =>
    row.forEach((value, i) => {
      if (typeof value !== 'number' || !Number.isFinite(value)) {
        throw new LearnerInputError(`${what}[${s}][${i}] must be a finite number, got ${String(value)}`);
      }
    }),
  );
}

function perTokenTensor(values: number[][], segments: Segment[], what: string): tf.Tensor1D {
  if (values.length !== segments.length) {
    throw new LearnerInputError(`${what} has ${values.length} rows for a batch of ${segments.length} sequences`);
  }
  segments.forEach((segment, s) => {
    if (values[s].length !== segment.length) {
      throw new LearnerInputError(`${what}[${s}] has ${values[s].length} values for a sequence of ${segment.length} tokens`);
    }
  });
  return tf.tensor1d(values.flat());
}

/** How a policy-gradient loss reduces its weighted per-token terms to a scalar. */
export type PolicyAggregation = 'sum' | 'token_mean' | 'sequence_mean' | 'fixed_horizon';

/**
 * A policy-gradient loss over sampled completions. Per token, r_i = exp(logp_i − samplingLogprob_i) (or, with
 * `ratio: 'sequence'`, exp of the mean of that difference over the sequence's weighted tokens, for every token of it):
 * - `importance_sampling`: ℓ_i = −r_i·A_i
 * - `ppo`: ℓ_i = −min(r_i·A_i, clip(r_i, clipLow, clipHigh)·A_i)
 * - `cispo`: ℓ_i = −sg(clip(r_i, clipLow, clipHigh))·A_i·logp_i (the clipped ratio is a constant weight)
 * plus, when beta > 0, beta·(exp(ref_i − logp_i) − (ref_i − logp_i) − 1) (the k3 KL estimator). Tokens with weight 0
 * do not count; the terms w_i·ℓ_i are reduced by `aggregation`:
 * - `sum`: Σ w_i·ℓ_i
 * - `token_mean`: Σ w_i·ℓ_i / (number of tokens with w_i ≠ 0)
 * - `sequence_mean`: the mean, over sequences with at least one weighted token, of each one's token_mean
 * - `fixed_horizon`: Σ w_i·ℓ_i / (number of sequences × the longest sequence's length)
 */
export interface PolicyLossConfig {
  objective: 'importance_sampling' | 'ppo' | 'cispo';
  samplingLogprobs: number[][];
  advantages: number[][];
  weights: number[][];
  clipLow: number;
  clipHigh: number;
  beta: number;
  referenceLogprobs?: number[][];
  aggregation: PolicyAggregation;
  ratio: 'token' | 'sequence';
}

export function policyGradientLoss(config: PolicyLossConfig): TokenLoss {
  requireFinite(config.samplingLogprobs, 'sampling logprobs');
  requireFinite(config.advantages, 'advantages');
  requireFinite(config.weights, 'weights');
  if (config.referenceLogprobs) requireFinite(config.referenceLogprobs, 'reference logprobs');
  if (!(config.clipLow <= config.clipHigh))
    throw new LearnerInputError(`clip thresholds must satisfy low ≤ high, got ${config.clipLow} > ${config.clipHigh}`);
  if (config.beta > 0 && !config.referenceLogprobs) throw new LearnerInputError('beta > 0 needs reference logprobs');
  return (logprobs, segments) => {
    const sampling = perTokenTensor(config.samplingLogprobs, segments, 'sampling logprobs');
    const advantages = perTokenTensor(config.advantages, segments, 'advantages');
    const weights = perTokenTensor(config.weights, segments, 'weights');
    const counted: number[][] = config.weights.map((row) => row.map((w) => (w !== 0 ? 1 : 0)));
    const delta = tf.sub(logprobs, sampling);
    let ratio: tf.Tensor1D;
    if (config.ratio === 'sequence') {
      const parts = segments.map(({ start, length }, s) => {
        const n = counted[s].reduce((a, b) => a + b, 0);
        const d = tf.slice(delta, [start], [length]);
        const mean = tf.div(tf.sum(tf.mul(d, tf.tensor1d(counted[s]))), Math.max(1, n));
        return tf.mul(tf.exp(mean), tf.ones([length]));
      });
      ratio = (parts.length === 1 ? parts[0] : tf.concat(parts)) as tf.Tensor1D;
    } else {
      ratio = tf.exp(delta) as tf.Tensor1D;
    }
    let perToken: tf.Tensor;
    if (config.objective === 'importance_sampling') {
      perToken = tf.neg(tf.mul(ratio, advantages));
    } else if (config.objective === 'ppo') {
      perToken = tf.neg(tf.minimum(tf.mul(ratio, advantages), tf.mul(tf.clipByValue(ratio, config.clipLow, config.clipHigh), advantages)));
    } else {
      const clipped = tf.tensor1d(tf.clipByValue(ratio, config.clipLow, config.clipHigh).dataSync() as Float32Array);
      perToken = tf.neg(tf.mul(tf.mul(clipped, advantages), logprobs));
    }
    if (config.beta > 0) {
      const gap = tf.sub(perTokenTensor(config.referenceLogprobs!, segments, 'reference logprobs'), logprobs);
      perToken = tf.add(perToken, tf.mul(tf.sub(tf.sub(tf.exp(gap), gap), 1), config.beta));
    }
    const weighted = tf.mul(weights, perToken);
    const total = tf.sum<tf.Scalar>(weighted);
    const tokens = counted.flat().reduce((a, b) => a + b, 0);
    switch (config.aggregation) {
      case 'sum':
        return total;
      case 'token_mean':
        return tf.div(total, Math.max(1, tokens));
      case 'fixed_horizon':
        return tf.div(total, segments.length * Math.max(...segments.map((s) => s.length)));
      case 'sequence_mean': {
        const means: tf.Scalar[] = [];
        segments.forEach(({ start, length }, s) => {
          const n = counted[s].reduce((a, b) => a + b, 0);
          if (n > 0) means.push(tf.div(tf.sum(tf.slice(weighted, [start], [length])), n));
        });
        return means.length === 0 ? tf.mul(total, 0) : tf.div(means.length === 1 ? means[0] : tf.addN(means), means.length);
      }
    }
  };
}
