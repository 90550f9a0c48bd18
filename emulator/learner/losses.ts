import * as tf from '@tensorflow/tfjs-core';
import { LearnerInputError } from './errors';

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
  return (logprobs, segments) => tf.neg(tf.sum(tf.mul(perTokenTensor(weights, segments, 'weights'), logprobs)));
}

/** loss = Σ g_i·logp_i, so ∂loss/∂logp_i = g_i: backpropagates gradients the caller computed (custom forward-backward). */
export function linearLogprobLoss(gradients: number[][]): TokenLoss {
  requireFinite(gradients, 'gradients');
  return (logprobs, segments) => tf.sum(tf.mul(perTokenTensor(gradients, segments, 'gradients'), logprobs));
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
