import * as tf from '@tensorflow/tfjs-core';
import type { FrozenMatrix } from './network';
import { gaussianVector, hashKey } from './prng';

/** Sizes of the frozen stand-in model. Small, so a step of 8×128 tokens stays well under 100 ms on two cores. */
export const BASE_DIMS = {
  /** Width of token embeddings, unembedding rows and the output state z. */
  embedding: 64,
  /** Width of the MLP's hidden layer. */
  hidden: 256,
  /**
   * Root-mean-square of the output state z (‖z‖ = 2√d = 16): base logits u·z have standard deviation 2 and a
   * frozen unembedding can still reach logit gaps of ~16, enough for confident predictions over 150K ids.
   */
  outputRms: 2,
} as const;

/** Decay rates of the exponentially weighted bags of earlier tokens (short, medium and long memory). */
export const DECAY_RATES: readonly number[] = [0.5, 0.85, 0.97];

/** Features per position: current token, previous token, one bag per decay rate, and the uniform bag. */
export const FEATURE_WIDTH = BASE_DIMS.embedding * (3 + DECAY_RATES.length);

/**
 * The frozen base: a seeded MLP from context features to an output state z, and per-token embedding and
 * unembedding rows that are pure functions of (seed, tokenId), so no vocabulary-sized table exists.
 * Scales: embeddings ~N(0, 1) per component; unembedding rows ~N(0, 1/d), which makes the log-mean-exp of an
 * unseen token's logit exactly ‖z‖²/(2d) (see `remainderLogit` in network.ts).
 */
export class BaseModel {
  readonly hiddenWeights: tf.Tensor2D; // FEATURE_WIDTH × hidden
  readonly hiddenBias: tf.Tensor1D; // hidden
  readonly outputWeights: FrozenMatrix; // hidden × embedding
  private readonly embeddings = new Map<number, Float32Array>();

  constructor(readonly seed: number) {
    const { hidden, embedding } = BASE_DIMS;
    this.hiddenWeights = tf.tensor2d(gaussianVector(hashKey(seed, 'hidden-weights'), FEATURE_WIDTH * hidden, 1 / Math.sqrt(FEATURE_WIDTH)), [FEATURE_WIDTH, hidden]);
    this.hiddenBias = tf.tensor1d(gaussianVector(hashKey(seed, 'hidden-bias'), hidden, 0.5));
    const output = tf.tensor2d(gaussianVector(hashKey(seed, 'output-weights'), hidden * embedding, Math.sqrt(2 / hidden)), [hidden, embedding]);
    this.outputWeights = { value: output, transposed: tf.transpose(output) };
  }

  /** The input embedding of a token (cached: every token the learner reads, sampled ones included). */
  embeddingOf(tokenId: number): Float32Array {
    let row = this.embeddings.get(tokenId);
    if (!row) {
      row = gaussianVector(hashKey(this.seed, 'embedding', tokenId), BASE_DIMS.embedding);
      this.embeddings.set(tokenId, row);
    }
    return row;
  }

  /** The output (unembedding) row of a token; only tokens in the active vocabulary ever need one. */
  unembeddingOf(tokenId: number): Float32Array {
    return gaussianVector(hashKey(this.seed, 'unembedding', tokenId), BASE_DIMS.embedding, 1 / Math.sqrt(BASE_DIMS.embedding));
  }

  dispose(): void {
    tf.dispose([this.hiddenWeights, this.hiddenBias, this.outputWeights.value, this.outputWeights.transposed]);
    this.embeddings.clear();
  }
}
