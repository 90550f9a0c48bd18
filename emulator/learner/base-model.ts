import * as tf from '@tensorflow/tfjs-core';
import { gaussianVector, hashKey } from './prng';

/** A frozen matrix with its transpose kept beside it, so gradients through it need no transposing matMul. */
export interface FrozenMatrix {
  value: tf.Tensor2D;
  transposed: tf.Tensor2D;
}

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
 * Causal attention pooling over the tokens at or before each position (see attention.ts): per head, a query from
 * the position's features (a frozen projection plus a LoRA), frozen per-token keys and values that are pure
 * functions of (seed, tokenId) plus a LoRA on the keys over the active vocabulary, and a softmax over positions.
 * The attended values feed both the MLP's input and, through a frozen projection, the output state z directly (a
 * residual path), so what attention picks out reaches the logits in one step.
 */
export const ATTENTION = {
  heads: 2,
  /** Width of each head's query and key. */
  keyWidth: 32,
  /** Width of each head's value. */
  valueWidth: 32,
  /** Standard deviation of the frozen query·key scores: small, so an untrained head attends almost uniformly. */
  queryScale: 0.5,
  /**
   * Positions a query attends to: itself and the 511 before it. Bounds the cost per position on long sequences;
   * the bags of the features still summarise everything earlier.
   */
  window: 512,
  /** Soft cap on |score|: a head's weights stay within a factor e^(2·cap) of each other. */
  scoreCap: 2,
  /**
   * Root-mean-square each head's attended value is normalised to: one scale however (un)peaked the head is, and
   * large enough next to the 384 features that the MLP's adapter picks it up quickly.
   */
  attendedRms: 2.5,
} as const;

/** Query (and key) width over all heads. */
export const QUERY_WIDTH = ATTENTION.heads * ATTENTION.keyWidth;
/** Attended-value width over all heads. */
export const ATTENDED_WIDTH = ATTENTION.heads * ATTENTION.valueWidth;
/** The MLP's input: the features, then the attended values. */
export const MLP_INPUT_WIDTH = FEATURE_WIDTH + ATTENDED_WIDTH;

/**
 * The frozen base: a seeded attention query projection and MLP from context features to an output state z, and
 * per-token embedding, attention key and value, and unembedding rows that are pure functions of (seed, tokenId),
 * so no vocabulary-sized table exists.
 * Scales: embeddings ~N(0, 1) per component; unembedding rows ~N(0, 1/d), so base logits u·z have standard
 * deviation outputRms. A token's unembedding row is the sum of its output-grid row's and column's (vocabulary.ts).
 */
export class BaseModel {
  readonly queryWeights: tf.Tensor2D; // FEATURE_WIDTH × QUERY_WIDTH
  readonly hiddenWeights: tf.Tensor2D; // FEATURE_WIDTH × hidden: the first layer's rows for the features
  readonly attendedWeights: FrozenMatrix; // ATTENDED_WIDTH × hidden: its rows for the attended values
  readonly residualWeights: FrozenMatrix; // ATTENDED_WIDTH × embedding: the attended values' residual path into z
  readonly hiddenBias: tf.Tensor1D; // hidden
  readonly outputWeights: FrozenMatrix; // hidden × embedding
  private readonly embeddings = new Map<number, Float32Array>();
  private readonly keyValues = new Map<number, { key: Float32Array; value: Float32Array }>();

  constructor(readonly seed: number) {
    const { hidden, embedding } = BASE_DIMS;
    const frozen = frozenDrawsOf(seed);
    this.queryWeights = tf.tensor2d(frozen.query, [FEATURE_WIDTH, QUERY_WIDTH]);
    this.hiddenWeights = tf.tensor2d(frozen.firstLayer.subarray(0, FEATURE_WIDTH * hidden), [FEATURE_WIDTH, hidden]);
    const attended = tf.tensor2d(frozen.firstLayer.subarray(FEATURE_WIDTH * hidden), [ATTENDED_WIDTH, hidden]);
    this.attendedWeights = { value: attended, transposed: tf.transpose(attended) };
    const residual = tf.tensor2d(frozen.residual, [ATTENDED_WIDTH, embedding]);
    this.residualWeights = { value: residual, transposed: tf.transpose(residual) };
    this.hiddenBias = tf.tensor1d(frozen.hiddenBias);
    const output = tf.tensor2d(frozen.output, [hidden, embedding]);
    this.outputWeights = { value: output, transposed: tf.transpose(output) };
  }

  /** The input embedding of a token (cached: every token the learner reads, sampled ones included). */
  embeddingOf(tokenId: number): Float32Array {
    let row = this.embeddings.get(tokenId);
    if (!row) {
      row = sharedTokenDraw(frozenDrawsOf(this.seed).embeddings, tokenId, () =>
        gaussianVector(hashKey(this.seed, 'embedding', tokenId), BASE_DIMS.embedding),
      );
      this.embeddings.set(tokenId, row);
    }
    return row;
  }

  /**
   * A token's attention key (QUERY_WIDTH: head after head, already scaled by 1/√keyWidth) and value
   * (ATTENDED_WIDTH, ~N(0, 1) per component), cached like embeddings.
   */
  keyValueOf(tokenId: number): { key: Float32Array; value: Float32Array } {
    let row = this.keyValues.get(tokenId);
    if (!row) {
      row = sharedTokenDraw(frozenDrawsOf(this.seed).keyValues, tokenId, () => ({
        key: gaussianVector(hashKey(this.seed, 'attention-key', tokenId), QUERY_WIDTH, 1 / Math.sqrt(ATTENTION.keyWidth)),
        value: gaussianVector(hashKey(this.seed, 'attention-value', tokenId), ATTENDED_WIDTH),
      }));
      this.keyValues.set(tokenId, row);
    }
    return row;
  }

  /** Row i's part P_i of the unembedding rows of output-grid row i (vocabulary.ts): ~N(0, 1/2d) per component. */
  outputRowOf(row: number): Float32Array {
    return cachedDraw(frozenDrawsOf(this.seed).outputRows, row, () =>
      gaussianVector(hashKey(this.seed, 'unembedding-row', row), BASE_DIMS.embedding, 1 / Math.sqrt(2 * BASE_DIMS.embedding)),
    );
  }

  /** Column j's part Q_j: token (i, j) unembeds with P_i + Q_j, ~N(0, 1/d) per component. */
  outputColumnOf(column: number): Float32Array {
    return cachedDraw(frozenDrawsOf(this.seed).outputColumns, column, () =>
      gaussianVector(hashKey(this.seed, 'unembedding-column', column), BASE_DIMS.embedding, 1 / Math.sqrt(2 * BASE_DIMS.embedding)),
    );
  }

  dispose(): void {
    tf.dispose([
      this.queryWeights,
      this.hiddenWeights,
      this.attendedWeights.value,
      this.attendedWeights.transposed,
      this.residualWeights.value,
      this.residualWeights.transposed,
      this.hiddenBias,
      this.outputWeights.value,
      this.outputWeights.transposed,
    ]);
    this.embeddings.clear();
    this.keyValues.clear();
  }
}

/**
 * A seed's frozen draws, made once per process and shared by every BaseModel of that seed: an emulator makes a
 * model for each session, weights sync and restored checkpoint, and drawing these again each time was a fifth of
 * its CPU time in a GRPO round. Their size is fixed (the grid's rows and columns: ~800 vectors for 152K ids).
 * Nothing writes into them: tensors copy them, callers copy the rows and columns.
 */
interface FrozenDraws {
  query: Float32Array;
  firstLayer: Float32Array;
  residual: Float32Array;
  hiddenBias: Float32Array;
  output: Float32Array;
  outputRows: Map<number, Float32Array>;
  outputColumns: Map<number, Float32Array>;
  /** Per-token draws, shared up to SHARED_TOKENS tokens (a model caches the rest for its own life, as before). */
  embeddings: Map<number, Float32Array>;
  keyValues: Map<number, { key: Float32Array; value: Float32Array }>;
}

/** Tokens whose draws a seed shares across models: ~12 MiB of them at most. */
const SHARED_TOKENS = 16_384;

const frozenDraws = new Map<number, FrozenDraws>();

function frozenDrawsOf(seed: number): FrozenDraws {
  let draws = frozenDraws.get(seed);
  if (!draws) {
    const { hidden, embedding } = BASE_DIMS;
    // Features have unit-scale components, so query components ~N(0, queryScale²); keys ~N(0, 1/keyWidth) make the
    // scores q·k ~N(0, queryScale²), the usual 1/√keyWidth folded into the keys.
    draws = {
      query: gaussianVector(hashKey(seed, 'query-weights'), FEATURE_WIDTH * QUERY_WIDTH, ATTENTION.queryScale / Math.sqrt(FEATURE_WIDTH)),
      firstLayer: gaussianVector(hashKey(seed, 'hidden-weights'), MLP_INPUT_WIDTH * hidden, 1 / Math.sqrt(MLP_INPUT_WIDTH)),
      residual: gaussianVector(hashKey(seed, 'residual-weights'), ATTENDED_WIDTH * embedding, 1 / Math.sqrt(ATTENDED_WIDTH)),
      hiddenBias: gaussianVector(hashKey(seed, 'hidden-bias'), hidden, 0.5),
      output: gaussianVector(hashKey(seed, 'output-weights'), hidden * embedding, Math.sqrt(2 / hidden)),
      outputRows: new Map(),
      outputColumns: new Map(),
      embeddings: new Map(),
      keyValues: new Map(),
    };
    frozenDraws.set(seed, draws);
  }
  return draws;
}

function cachedDraw(cache: Map<number, Float32Array>, index: number, draw: () => Float32Array): Float32Array {
  let vector = cache.get(index);
  if (!vector) {
    vector = draw();
    cache.set(index, vector);
  }
  return vector;
}

function sharedTokenDraw<T>(shared: Map<number, T>, tokenId: number, draw: () => T): T {
  let value = shared.get(tokenId);
  if (value === undefined) {
    value = draw();
    if (shared.size < SHARED_TOKENS) shared.set(tokenId, value);
  }
  return value;
}
