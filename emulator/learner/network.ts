import * as tf from '@tensorflow/tfjs-core';
import { ATTENTION, BASE_DIMS } from './base-model';
import type { AdapterParameter } from './adapter';
import { attend, attentionTensors, type AttentionInputs } from './attention';

/** A frozen matrix with its transpose kept beside it, so gradients through it need no transposing matMul. */
export interface FrozenMatrix {
  value: tf.Tensor2D;
  transposed: tf.Tensor2D;
}

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
  /** Adapter tensors by name; the unembedding pair is absent when it does not train. */
  adapter: ReadonlyMap<AdapterParameter, tf.Tensor2D>;
  /** LoRA scale alpha / rank. */
  scale: number;
  /** Vocabulary ids outside the active vocabulary; each has the remainder logit. */
  unseenCount: number;
}

export interface OutputLogits {
  /** Logits of the active vocabulary, N × |S|. */
  seen: tf.Tensor2D;
  /** The logit each unseen token shares, N. */
  remainder: tf.Tensor1D;
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
 * log Z per row, Z = Σ_j exp(seen_j) + exp(extra), with the softmax as its gradient. Built on WASM's softmax
 * kernel, which runs ~7× faster than its exp: the row's largest probability is exp(0)/Σ, so Σ comes for free.
 */
const logPartition = tf.customGrad((seenInput, extraInput, save) => {
  const [seen, extra] = [seenInput as tf.Tensor2D, extraInput as tf.Tensor1D];
  const probabilities = tf.softmax(seen);
  const seenLogZ = tf.sub(tf.max(seen, 1), tf.log(tf.max(probabilities, 1)));
  const shift = tf.maximum(seenLogZ, extra);
  const value = tf.add(shift, tf.log(tf.add(tf.exp(tf.sub(seenLogZ, shift)), tf.exp(tf.sub(extra, shift))))) as tf.Tensor1D;
  (save as tf.GradSaveFunc)([probabilities, seenLogZ, extra, value]);
  return {
    value,
    gradFunc: (dy: tf.Tensor1D, [p, sLogZ, e, logZ]: tf.Tensor[]) => [
      tf.mul(p, tf.expandDims(tf.mul(dy, tf.exp(tf.sub(sLogZ, logZ))), 1)),
      tf.mul(dy, tf.exp(tf.sub(e, logZ))),
    ],
  };
}) as (seen: tf.Tensor2D, extra: tf.Tensor1D) => tf.Tensor1D;

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
 * The network's inputs → logits, attention included. The remainder logit is log E_u[exp(u·z)] = ‖z‖²/(2d) for an
 * unembedding row u ~ N(0, I/d): what an average unseen token would score, so the distribution over the whole
 * vocabulary stays consistent as tokens move from unseen to seen. (With z RMS-normalised it is the constant
 * outputRms²/2.)
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
  const remainder = tf.div<tf.Tensor1D>(tf.sum(tf.square(z), 1), 2 * BASE_DIMS.embedding);
  return { seen, remainder };
}

/** log Z per row, Z = Σ_{s∈S} exp(seen_s) + unseenCount·exp(remainder). */
export function logNormalizer(logits: OutputLogits, unseenCount: number): tf.Tensor1D {
  const remainderMass =
    unseenCount > 0 ? tf.add<tf.Tensor1D>(logits.remainder, Math.log(unseenCount)) : tf.fill([logits.remainder.shape[0]], -Infinity);
  return logPartition(logits.seen, remainderMass as tf.Tensor1D);
}

/** log p of each row's target, given as its active-vocabulary row. */
export function targetLogprobs(inputs: NetworkInputs, targetRows: Int32Array, w: NetworkWeights): tf.Tensor1D {
  const logits = outputLogits(inputs, w);
  const columns = logits.seen.shape[1];
  const flatIndices = tf.tensor1d(
    Int32Array.from(targetRows, (row, i) => i * columns + row),
    'int32',
  );
  return tf.sub(pickColumns(logits.seen, flatIndices), logNormalizer(logits, w.unseenCount));
}

/** log p of every active-vocabulary token (N × |S|) and of each single unseen token (N). */
export function nextTokenLogprobs(logits: OutputLogits, unseenCount: number): { seen: tf.Tensor2D; unseen: tf.Tensor1D } {
  const logZ = logNormalizer(logits, unseenCount);
  return { seen: tf.sub(logits.seen, tf.expandDims(logZ, 1)), unseen: tf.sub(logits.remainder, logZ) };
}
