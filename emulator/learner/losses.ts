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
  let failure: unknown;
  tf.tidy(() => {
    const apply = (input: tf.Tensor): tf.Scalar => {
      try {
        return requireScalar(loss(input as tf.Tensor1D, segments));
      } catch (err) {
        // Rethrown below: TF.js leaks its gradient tape's tensors when the function it differentiates throws.
        failure = err;
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
