import * as tf from '@tensorflow/tfjs-core';
import { ATTENTION, BASE_DIMS, type FrozenMatrix } from './base-model';
import type { AdapterParameter } from './adapter';
import { attend, attentionTensors, type AttentionInputs } from './attention';

/** Everything one forward pass reads. */
export interface NetworkWeights {
  /** Frozen query projection of the features (FEATURE_WIDTH × QUERY_WIDTH). */
  queryWeights: tf.Tensor2D;
  /** Frozen first layer: its rows for the features (no gradient needed), then those for the attended values. */
  hiddenWeights: tf.Tensor2D;
  attendedWeights: FrozenMatrix;
  /** Frozen projection of the attended values into the output state (the residual path). */
  residualWeights: FrozenMatrix;
  hiddenBias: tf.Tensor1D;
  outputWeights: FrozenMatrix;
  /** Frozen unembedding of the active vocabulary, one column per token (d × |S|). */
  unembedding: FrozenMatrix;
  /** The output grid's frozen row and column vectors (d × rows, d × columns): the unseen tokens' unembedding. */
  grid: { rows: FrozenMatrix; columns: FrozenMatrix; shape: GridShape };
  /** Adapter tensors by name; the unembedding pair is absent when it does not train. */
  adapter: ReadonlyMap<AdapterParameter, tf.Tensor2D>;
  /** LoRA scale alpha / rank. */
  scale: number;
  /** Vocabulary ids outside the active vocabulary. */
  unseenCount: number;
}

/** The output grid's size: `fullRows` rows of `columns` ids, then a row with `partialColumns` (0: none). */
export interface GridShape {
  fullRows: number;
  partialColumns: number;
}

export interface OutputLogits {
  /** Logits of the active vocabulary, N × |S|. */
  seen: tf.Tensor2D;
  /** Their frozen part alone (what the same tokens scored unseen), N × |S|. */
  frozenSeen: tf.Tensor2D;
  /** The grid's row and column logits, N × rows and N × columns: unseen token (i, j) scores rows_i + columns_j. */
  rows: tf.Tensor2D;
  columns: tf.Tensor2D;
}

// TF.js's WASM matMul runs 10–40× slower with a transpose flag, and its matMul gradient uses those flags; the
// gradients below transpose explicitly instead.

/** a·b, differentiable in both. */
const matMul = tf.customGrad((a, b, save) => {
  const [x, y] = [a as tf.Tensor2D, b as tf.Tensor2D];
  (save as tf.GradSaveFunc)([x, y]);
  return {
    value: tf.matMul(x, y),
    gradFunc: (dy: tf.Tensor2D, [xs, ys]: tf.Tensor[]) => [tf.matMul(dy, tf.transpose(ys)), tf.matMul(tf.transpose(xs), dy)],
  };
}) as (a: tf.Tensor2D, b: tf.Tensor2D) => tf.Tensor2D;

/** x·W for a frozen W: the gradient flows to x only. */
function frozenMatMul(x: tf.Tensor2D, w: FrozenMatrix): tf.Tensor2D {
  const op = tf.customGrad<tf.Tensor2D>((input) => ({
    value: tf.matMul(input as tf.Tensor2D, w.value),
    gradFunc: (dy) => tf.matMul(dy, w.transposed),
  }));
  return op(x);
}

/**
 * log Σ_j exp(x_ij) per row, with the softmax as its gradient. Built on WASM's softmax kernel, which runs ~7× faster
 * than its exp: the row's largest probability is exp(0)/Σ, so Σ comes for free. Entries of −∞ weigh nothing.
 */
const logSumExp = tf.customGrad((input, save) => {
  const x = input as tf.Tensor2D;
  const probabilities = tf.softmax(x);
  const value = tf.sub(tf.max(x, 1), tf.log(tf.max(probabilities, 1))) as tf.Tensor1D;
  (save as tf.GradSaveFunc)([probabilities]);
  return { value, gradFunc: (dy: tf.Tensor1D, [p]: tf.Tensor[]) => tf.mul(p, tf.expandDims(dy, 1)) };
}) as (x: tf.Tensor2D) => tf.Tensor1D;

/** log(1 − e^x) for x < 0, exact near 0 (TF.js has no gradient for expm1: given here, −1/expm1(−x)). */
const logOneMinusExp = tf.customGrad((input, save) => {
  const x = input as tf.Tensor1D;
  (save as tf.GradSaveFunc)([x]);
  return {
    value: tf.log(tf.neg(tf.expm1(x))) as tf.Tensor1D,
    gradFunc: (dy: tf.Tensor1D, [saved]: tf.Tensor[]) => tf.div(tf.neg(dy), tf.expm1(tf.neg(saved))),
  };
}) as (x: tf.Tensor1D) => tf.Tensor1D;

/** seen[i, column[i]] per row, given flat indices i·|S| + column[i]; the gradient scatters back (no one-hot). */
function pickColumns(seen: tf.Tensor2D, flatIndices: tf.Tensor1D): tf.Tensor1D {
  const op = tf.customGrad<tf.Tensor1D>((input, save) => {
    // Saved, not just captured: gradients() disposes every forward tensor it was not asked to keep.
    (save as tf.GradSaveFunc)([flatIndices]);
    return {
      value: tf.gather(tf.reshape(input as tf.Tensor2D, [-1]), flatIndices),
      gradFunc: (dy, [indices]) => tf.reshape(tf.scatterND(tf.expandDims(indices, 1), dy, [seen.size]), seen.shape),
    };
  });
  return op(seen);
}

/** x·W + scale·(x·A)·B: a frozen linear map with its low-rank adapter. */
function adapted(frozenPart: tf.Tensor2D, x: tf.Tensor2D, a: tf.Tensor2D, b: tf.Tensor2D, scale: number): tf.Tensor2D {
  return tf.add(frozenPart, tf.mul(matMul(matMul(x, a), b), scale));
}

/**
 * Rows rescaled to a fixed root-mean-square. Without it the hidden adapters can grow ‖z‖, and with it every logit,
 * within a few Adam steps; with it, training stays stable up to learning rates of ~0.02.
 */
function rmsNormalize(x: tf.Tensor2D, rms: number): tf.Tensor2D {
  return tf.mul(x, tf.mul(tf.rsqrt(tf.add(tf.mean(tf.square(x), 1, true), 1e-6)), rms));
}

/** GELU in its sigmoid form, x·σ(1.702x). */
function gelu(x: tf.Tensor2D): tf.Tensor2D {
  return tf.mul(x, tf.sigmoid(tf.mul(x, 1.702)));
}

/** Each head's slice of x (N × heads·width) rescaled to root-mean-square `rms`. */
function headRmsNormalize(x: tf.Tensor2D, width: number, rms: number): tf.Tensor2D {
  const rows = x.shape[0];
  return tf.reshape(rmsNormalize(tf.reshape(x, [rows * ATTENTION.heads, width]), rms), [rows, ATTENTION.heads * width]);
}

/** What a forward pass reads besides the weights: the adapter-independent tensors of its rows, computed once. */
export interface NetworkInputs {
  features: tf.Tensor2D;
  /** features·queryWeights. */
  frozenQuery: tf.Tensor2D;
  /** features·hiddenWeights + hiddenBias: the part of the first layer that attention does not touch. */
  frozenHidden: tf.Tensor2D;
  /** Absent when the caller computes the attended values itself (`PackedKeys.attendLatest`). */
  attention?: AttentionInputs;
}

export function networkInputs(
  features: tf.Tensor2D,
  attention: AttentionInputs | undefined,
  w: Pick<NetworkWeights, 'queryWeights' | 'hiddenWeights' | 'hiddenBias'>,
): NetworkInputs {
  return {
    features,
    frozenQuery: tf.matMul(features, w.queryWeights),
    frozenHidden: tf.add<tf.Tensor2D>(tf.matMul(features, w.hiddenWeights), w.hiddenBias),
    attention,
  };
}

/** Every tensor of `inputs` (to keep or dispose them together). */
export function networkInputTensors(inputs: NetworkInputs): tf.Tensor[] {
  return [inputs.features, inputs.frozenQuery, inputs.frozenHidden, ...(inputs.attention ? attentionTensors(inputs.attention) : [])];
}

/** The attention queries of every row: q (N × heads·keyWidth) and the key-LoRA queries c = scale·q_h·keyA (N·heads × rank). */
export function attentionQueries(inputs: NetworkInputs, w: NetworkWeights): { query: tf.Tensor2D; keyQuery: tf.Tensor2D } {
  const lora = (name: AdapterParameter) => w.adapter.get(name)!;
  const query = adapted(inputs.frozenQuery, inputs.features, lora('queryA'), lora('queryB'), w.scale);
  const perHead = tf.reshape(query, [query.shape[0] * ATTENTION.heads, ATTENTION.keyWidth]) as tf.Tensor2D;
  return { query, keyQuery: tf.mul(matMul(perHead, lora('keyA')), w.scale) };
}

/**
 * The network's inputs → logits, attention included: the active vocabulary's (frozen rows plus the LoRA), and the
 * output grid's rows and columns, whose sums are the unseen ids' logits. A token's adapter columns start at zero,
 * so it scores the same before and after it joins the active vocabulary.
 */
export function outputLogits(inputs: NetworkInputs, w: NetworkWeights): OutputLogits {
  const { query, keyQuery } = attentionQueries(inputs, w);
  return logitsOfAttended(inputs, attend(query, keyQuery, w.adapter.get('keyB')!, inputs.attention!), w);
}

/** The logits given the raw attended values (N × heads·valueWidth) of the same rows. */
export function logitsOfAttended(inputs: NetworkInputs, attendedValues: tf.Tensor2D, w: NetworkWeights): OutputLogits {
  const lora = (name: AdapterParameter) => w.adapter.get(name)!;
  const attended = headRmsNormalize(attendedValues, ATTENTION.valueWidth, ATTENTION.attendedRms);
  const firstLayer = tf.add<tf.Tensor2D>(inputs.frozenHidden, frozenMatMul(attended, w.attendedWeights));
  const hidden = gelu(adapted(firstLayer, tf.concat([inputs.features, attended], 1), lora('hiddenA'), lora('hiddenB'), w.scale));
  const mlpState = adapted(frozenMatMul(hidden, w.outputWeights), hidden, lora('outputA'), lora('outputB'), w.scale);
  const z = rmsNormalize(tf.add(mlpState, frozenMatMul(attended, w.residualWeights)), BASE_DIMS.outputRms);
  const frozenLogits = frozenMatMul(z, w.unembedding);
  const seen = w.adapter.has('unembedB') ? adapted(frozenLogits, z, lora('unembedA'), lora('unembedB'), w.scale) : frozenLogits;
  return { seen, frozenSeen: frozenLogits, rows: frozenMatMul(z, w.grid.rows), columns: frozenMatMul(z, w.grid.columns) };
}

/** log Σ over every id of the grid of exp(rows_i + columns_j), per row: the frozen logits' total, in closed form. */
function logGridTotal(rows: tf.Tensor2D, columns: tf.Tensor2D, shape: GridShape): tf.Tensor1D {
  const full = tf.add<tf.Tensor1D>(logSumExp(tf.slice(rows, [0, 0], [-1, shape.fullRows])), logSumExp(columns));
  if (shape.partialColumns === 0) return full;
  const lastRow = tf.reshape(tf.slice(rows, [0, shape.fullRows], [-1, 1]), [-1]);
  const partial = tf.add<tf.Tensor1D>(lastRow, logSumExp(tf.slice(columns, [0, 0], [-1, shape.partialColumns])));
  return logSumExp(tf.concat([tf.expandDims<tf.Tensor2D>(full, 1), tf.expandDims<tf.Tensor2D>(partial, 1)], 1));
}

/**
 * log Z per row, Z = Σ_{s∈S} exp(seen_s) + Σ_{t∉S} exp(frozen_t): the softmax over the whole vocabulary. The unseen
 * sum is the grid's total less the seen tokens' frozen part, so a token joining S moves its term, changing nothing.
 */
export function logNormalizer(logits: OutputLogits, w: Pick<NetworkWeights, 'grid' | 'unseenCount'>): tf.Tensor1D {
  if (w.unseenCount === 0) return logSumExp(logits.seen);
  const logTotal = logGridTotal(logits.rows, logits.columns, w.grid.shape);
  // log(total − seen) = log total + log(1 − e^x), x = log seen − log total < 0 (clamped against rounding).
  const x = tf.minimum<tf.Tensor1D>(tf.sub(logSumExp(logits.frozenSeen), logTotal), -1e-12);
  const logUnseen = tf.add<tf.Tensor1D>(logTotal, logOneMinusExp(x));
  return logSumExp(tf.concat([logits.seen, tf.expandDims<tf.Tensor2D>(logUnseen, 1)], 1));
}

/** log p of each row's target, given as its active-vocabulary row. */
export function targetLogprobs(inputs: NetworkInputs, targetRows: Int32Array, w: NetworkWeights): tf.Tensor1D {
  const logits = outputLogits(inputs, w);
  const columns = logits.seen.shape[1];
  const flatIndices = tf.tensor1d(
    Int32Array.from(targetRows, (row, i) => i * columns + row),
    'int32',
  );
  return tf.sub(pickColumns(logits.seen, flatIndices), logNormalizer(logits, w));
}

/**
 * log p of every active-vocabulary token (N × |S|), and the grid's terms for the unseen ones: unseen token (i, j)
 * has log p = rows_i + columns_j, with log Z already taken off the rows (N × rows, N × columns).
 */
export function nextTokenLogprobs(
  logits: OutputLogits,
  w: Pick<NetworkWeights, 'grid' | 'unseenCount'>,
): { seen: tf.Tensor2D; rows: tf.Tensor2D; columns: tf.Tensor2D } {
  const logZ = tf.expandDims(logNormalizer(logits, w), 1);
  return { seen: tf.sub(logits.seen, logZ), rows: tf.sub(logits.rows, logZ), columns: logits.columns };
}
