import * as tf from '@tensorflow/tfjs-core';
import { BASE_DIMS, type BaseModel } from './base-model';
import type { AdapterParameter } from './adapter';

/** Everything one forward pass reads. */
export interface NetworkWeights {
  base: BaseModel;
  /** Frozen unembedding rows of the active vocabulary (|S| × d). */
  unembedding: tf.Tensor2D;
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

/** x·W + scale·(x·A)·B: a frozen linear map with its low-rank adapter. */
function adapted(x: tf.Tensor2D, frozen: tf.Tensor2D, a: tf.Tensor2D, b: tf.Tensor2D, scale: number): tf.Tensor2D {
  return tf.add(tf.matMul(x, frozen), tf.mul(tf.matMul(tf.matMul(x, a), b), scale));
}

/** GELU in its sigmoid form, x·σ(1.702x). */
function gelu(x: tf.Tensor2D): tf.Tensor2D {
  return tf.mul(x, tf.sigmoid(tf.mul(x, 1.702)));
}

/**
 * Features (N × FEATURE_WIDTH) → logits. The remainder logit is log E_u[exp(u·z)] = ‖z‖²/(2d) for an unembedding
 * row u ~ N(0, I/d), so the shared logit is what an average unseen token would score and the distribution over
 * the whole vocabulary stays consistent as tokens move from unseen to seen.
 */
export function outputLogits(features: tf.Tensor2D, w: NetworkWeights): OutputLogits {
  const lora = (name: AdapterParameter) => w.adapter.get(name)!;
  const preActivation = tf.add(adapted(features, w.base.hiddenWeights, lora('hiddenA'), lora('hiddenB'), w.scale), w.base.hiddenBias);
  const z = adapted(gelu(preActivation), w.base.outputWeights, lora('outputA'), lora('outputB'), w.scale);
  const frozenLogits = tf.matMul(z, w.unembedding, false, true);
  const seen = w.adapter.has('unembedB')
    ? tf.add(frozenLogits, tf.mul(tf.matMul(tf.matMul(z, lora('unembedA')), lora('unembedB'), false, true), w.scale))
    : frozenLogits;
  const remainder = tf.div(tf.sum(tf.square(z), 1), 2 * BASE_DIMS.embedding);
  return { seen, remainder: remainder as tf.Tensor1D };
}

/** log Z per row, Z = Σ_{s∈S} exp(seen_s) + unseenCount·exp(remainder). */
export function logNormalizer(logits: OutputLogits, unseenCount: number): tf.Tensor1D {
  if (unseenCount === 0) return tf.logSumExp(logits.seen, 1);
  const remainderMass = tf.add(logits.remainder, Math.log(unseenCount)).expandDims(1);
  return tf.logSumExp(tf.concat([logits.seen, remainderMass], 1), 1);
}

/** log p of each row's target (targets given one-hot over the active vocabulary, N × |S|). */
export function targetLogprobs(features: tf.Tensor2D, targetsOneHot: tf.Tensor2D, w: NetworkWeights): tf.Tensor1D {
  const logits = outputLogits(features, w);
  return tf.sub(tf.sum(tf.mul(logits.seen, targetsOneHot), 1), logNormalizer(logits, w.unseenCount));
}

/** log p of every active-vocabulary token (N × |S|) and of each single unseen token (N). */
export function nextTokenLogprobs(features: tf.Tensor2D, w: NetworkWeights): { seen: tf.Tensor2D; unseen: tf.Tensor1D } {
  const logits = outputLogits(features, w);
  const logZ = logNormalizer(logits, w.unseenCount);
  return { seen: tf.sub(logits.seen, logZ.expandDims(1)), unseen: tf.sub(logits.remainder, logZ) };
}
