import * as tf from '@tensorflow/tfjs-core';
import { ATTENTION, ATTENDED_WIDTH, QUERY_WIDTH } from './base-model';

/**
 * Causal attention pooling, per head: scores q_t·k_j over the positions j ≤ t of the same sequence, a softmax
 * over them, and the attended value Σ_j p_tj·v_j. Keys and values are frozen per-token rows (see
 * `BaseModel.keyValueOf`); only the queries carry a gradient.
 *
 * Query rows come in blocks: a block is a run of consecutive positions [start, end) of one sequence, whose keys are
 * its tokens [0, end). Blocks are padded to a common query length Tq and key length Tk, so each head is two batched
 * matMuls over [blocks, Tq, Tk], with no transposing matMul (slow on WASM) in either direction.
 */
export interface AttentionBlock {
  /** The sequence's tokens; at least `end` of them. */
  tokens: readonly number[];
  start: number;
  end: number;
}

/** The constant (adapter-independent) tensors of one attention call: keys, values, mask and the row layout. */
export interface AttentionInputs {
  rows: number;
  blocks: number;
  queryLength: number;
  /** Per padded query slot (block·Tq + i), the row it reads (padding reads row 0). */
  toPadded: tf.Tensor1D;
  /** Per row, its padded query slot. */
  fromPadded: tf.Tensor1D;
  /** Per head: keys [blocks, Tk, keyWidth], their transpose [blocks, keyWidth, Tk], values [blocks, Tk, valueWidth] and theirs. */
  keys: tf.Tensor3D[];
  keysT: tf.Tensor3D[];
  values: tf.Tensor3D[];
  valuesT: tf.Tensor3D[];
  /** Additive score mask [blocks, Tq, Tk]: 0 where a slot may attend, −1e9 elsewhere (later positions, padding). */
  mask: tf.Tensor3D;
}

const MASKED = -1e9;
const SCORE_CAP = Number(process.env.ATT_CAP ?? 2);

/** The number of score elements per head ([blocks, Tq, Tk]) the blocks pad to. */
export function paddedScoreSize(blocks: number, queryLength: number, keyLength: number): number {
  return blocks * queryLength * keyLength;
}

/** Builds the attention inputs of `blocks`, whose rows are concatenated in block order. */
export function attentionInputs(
  blocks: readonly AttentionBlock[],
  keyValueOf: (tokenId: number) => { key: Float32Array; value: Float32Array },
): AttentionInputs {
  const { heads, keyWidth, valueWidth } = ATTENTION;
  const count = blocks.length;
  const tq = Math.max(...blocks.map((b) => b.end - b.start));
  const tk = Math.max(...blocks.map((b) => b.end));
  const rows = blocks.reduce((n, b) => n + b.end - b.start, 0);
  const toPadded = new Int32Array(count * tq);
  const fromPadded = new Int32Array(rows);
  const keys = new Float32Array(count * tk * QUERY_WIDTH); // [block, position, head, keyWidth]
  const values = new Float32Array(count * tk * ATTENDED_WIDTH);
  const mask = new Float32Array(count * tq * tk).fill(MASKED);
  let row = 0;
  blocks.forEach((block, b) => {
    for (let j = 0; j < block.end; j++) {
      const { key, value } = keyValueOf(block.tokens[j]);
      keys.set(key, (b * tk + j) * QUERY_WIDTH);
      values.set(value, (b * tk + j) * ATTENDED_WIDTH);
    }
    for (let i = 0; i < block.end - block.start; i++, row++) {
      toPadded[b * tq + i] = row;
      fromPadded[row] = b * tq + i;
      mask.fill(0, (b * tq + i) * tk, (b * tq + i) * tk + block.start + i + 1);
    }
  });
  const perHead = (all: Float32Array, width: number): tf.Tensor3D[] => {
    const stacked = tf.tensor4d(all, [count, tk, heads, width]);
    return Array.from({ length: heads }, (_, h) => tf.reshape(tf.slice(stacked, [0, 0, h, 0], [count, tk, 1, width]), [count, tk, width]));
  };
  const headKeys = perHead(keys, keyWidth);
  const headValues = perHead(values, valueWidth);
  return {
    rows,
    blocks: count,
    queryLength: tq,
    toPadded: tf.tensor1d(toPadded, 'int32'),
    fromPadded: tf.tensor1d(fromPadded, 'int32'),
    keys: headKeys,
    keysT: headKeys.map((k) => tf.transpose(k, [0, 2, 1])),
    values: headValues,
    valuesT: headValues.map((v) => tf.transpose(v, [0, 2, 1])),
    mask: tf.tensor3d(mask, [count, tq, tk]),
  };
}

/** Attended values (rows × ATTENDED_WIDTH, head after head) of queries (rows × QUERY_WIDTH, head after head). */
export function attend(query: tf.Tensor2D, inputs: AttentionInputs): tf.Tensor2D {
  const { heads, keyWidth, valueWidth } = ATTENTION;
  const { blocks, queryLength: tq } = inputs;
  const op = tf.customGrad((queryInput, save) => {
    const padded = tf.gather(queryInput as tf.Tensor2D, inputs.toPadded);
    const probabilities: tf.Tensor3D[] = [];
    const attended: tf.Tensor2D[] = [];
    for (let h = 0; h < heads; h++) {
      const q = tf.reshape(tf.slice(padded, [0, h * keyWidth], [-1, keyWidth]), [blocks, tq, keyWidth]) as tf.Tensor3D;
      const capped = tf.tanh(tf.mul(tf.matMul(q, inputs.keysT[h]), 1 / SCORE_CAP)) as tf.Tensor3D;
      const p = tf.softmax(tf.add(tf.mul(capped, SCORE_CAP), inputs.mask)) as tf.Tensor3D;
      probabilities.push(p, capped);
      attended.push(tf.reshape(tf.matMul(p, inputs.values[h]), [blocks * tq, valueWidth]));
    }
    (save as tf.GradSaveFunc)(probabilities);
    return {
      value: tf.gather(tf.concat(attended, 1), inputs.fromPadded) as tf.Tensor2D,
      gradFunc: (dy: tf.Tensor2D, saved: tf.Tensor[]) => {
        // Padding slots read row 0's gradient; their query gradients are dropped by the gather back.
        const dPadded = tf.gather(dy, inputs.toPadded);
        const dQuery: tf.Tensor2D[] = [];
        for (let h = 0; h < heads; h++) {
          const [p, capped] = [saved[2 * h] as tf.Tensor3D, saved[2 * h + 1] as tf.Tensor3D];
          const dOut = tf.reshape(tf.slice(dPadded, [0, h * valueWidth], [-1, valueWidth]), [blocks, tq, valueWidth]) as tf.Tensor3D;
          const dP = tf.matMul(dOut, inputs.valuesT[h]);
          const dCapped = tf.mul(p, tf.sub(dP, tf.sum(tf.mul(dP, p), -1, true)));
          const dScores = tf.mul(dCapped, tf.sub(1, tf.square(capped))) as tf.Tensor3D;
          dQuery.push(tf.reshape(tf.matMul(dScores, inputs.keys[h]), [blocks * tq, keyWidth]));
        }
        return tf.gather(tf.concat(dQuery, 1), inputs.fromPadded);
      },
    };
  }) as (q: tf.Tensor2D) => tf.Tensor2D;
  return op(query);
}
