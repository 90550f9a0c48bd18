import * as tf from '@tensorflow/tfjs-core';
import { ATTENDED_WIDTH, ATTENTION, QUERY_WIDTH } from './base-model';

/**
 * Causal attention pooling. Per head h and position t, over the positions t − window < j ≤ t of the same sequence:
 *
 *   u_tj = (q_t·k_j + c_t·b_j)·2/cap,   score_tj = 2cap·σ(u_tj),   p_t = softmax_j(score_t),   out_t = Σ_j p_tj·v_j.
 *
 * 2cap·σ(2s/cap) = cap·tanh(s/cap) + cap: a soft cap on |s| (the shift drops out of the softmax), written with
 * a sigmoid because WASM's sigmoid kernel is many times faster than its tanh. The cap bounds how peaked a head can
 * get, so it cannot saturate onto a token or two early in training and stop learning.
 *
 * Keys k_j and values v_j are frozen per-token rows (`BaseModel.keyValueOf`). q_t is the position's query (a frozen
 * projection of its features plus a LoRA). c_t·b_j is a LoRA on the keys over the active vocabulary, like the
 * unembedding's: b_j is token j's column of `keyB` (rank × |S|, zero for unseen tokens) and c_t = scale·q_t·keyA,
 * so the adapter can learn which tokens are worth attending to as well as where each position looks.
 *
 * Training evaluates query rows in blocks: a block is a run of consecutive positions [start, end) of one sequence,
 * whose keys are its tokens [firstKey(start), end). A block is a few plain 2-D matMuls covering every head at once (block-diagonal
 * frozen keys and values), which WASM runs several times faster than batched ones, and never a transposing matMul.
 * Sampling, one new position per sequence, computes the same thing directly (`attendLatest`).
 */
export interface AttentionBlock {
  /** The sequence's tokens; at least `end` of them. */
  tokens: readonly number[];
  start: number;
  end: number;
}

/** Active-vocabulary rows, for the key LoRA's per-token columns. */
export interface ActiveRows {
  size: number;
  rowOf: (tokenId: number) => number | undefined;
}

/** One block's constant tensors. */
interface BlockInputs {
  rows: number;
  /** Keys: positions firstKey(start) .. end − 1. */
  keys: number;
  /** Block-diagonal frozen keys times 2/cap [heads·keyWidth, heads·keys], and their transpose (for gradients only). */
  keyMatrix: tf.Tensor2D;
  keyMatrixT?: tf.Tensor2D;
  /** Block-diagonal frozen values [heads·keys, heads·valueWidth], and their transpose (for gradients only). */
  valueMatrix: tf.Tensor2D;
  valueMatrixT?: tf.Tensor2D;
  /** Additive score mask [rows·heads, keys] (row i·heads + h: head h of position start + i): 0 inside its window, −1e9 elsewhere. */
  mask: tf.Tensor2D;
}

/** The constant (adapter-independent) tensors of one attention call over blocks whose rows are concatenated in order. */
export interface AttentionInputs {
  blocks: BlockInputs[];
  /** Per key slot (every block's keys in order): its token's active-vocabulary row, or |S| (a zero column) if unseen. */
  keySlots: tf.Tensor2D;
  vocabularyRows: number;
}

const MASKED = -1e9;

/** The first position any query of a run starting at `start` attends to. */
export function firstKey(start: number): number {
  return Math.max(0, start - ATTENTION.window + 1);
}

/** Score elements (all heads) of a block of positions [start, end): what a chunk of blocks is bounded by. */
export function blockScoreSize(start: number, end: number): number {
  return ATTENTION.heads * (end - start) * (end - firstKey(start));
}

export function attentionTensors(inputs: AttentionInputs): tf.Tensor[] {
  return [
    inputs.keySlots,
    ...inputs.blocks.flatMap((b) => [
      b.keyMatrix,
      b.valueMatrix,
      b.mask,
      ...(b.keyMatrixT && b.valueMatrixT ? [b.keyMatrixT, b.valueMatrixT] : []),
    ]),
  ];
}

/** The constant tensors of `blocks`; `forGradients` adds the transposes only backpropagation reads. */
export function attentionInputs(
  blocks: readonly AttentionBlock[],
  keyValueOf: (tokenId: number) => { key: Float32Array; value: Float32Array },
  vocabulary: ActiveRows,
  forGradients: boolean,
): AttentionInputs {
  const { heads, keyWidth, valueWidth, scoreCap, window } = ATTENTION;
  const keyScale = 2 / scoreCap;
  const slots: number[] = [];
  const built = blocks.map((block): BlockInputs => {
    const first = firstKey(block.start);
    const keys = block.end - first;
    const rows = block.end - block.start;
    const keyMatrix = new Float32Array(heads * keyWidth * heads * keys);
    const keyMatrixT = forGradients ? new Float32Array(keyMatrix.length) : undefined;
    const valueMatrix = new Float32Array(heads * keys * heads * valueWidth);
    const valueMatrixT = forGradients ? new Float32Array(valueMatrix.length) : undefined;
    for (let j = 0; j < keys; j++) {
      const token = block.tokens[first + j];
      slots.push(vocabulary.rowOf(token) ?? vocabulary.size);
      const { key, value } = keyValueOf(token);
      for (let h = 0; h < heads; h++) {
        const column = h * keys + j;
        for (let k = 0; k < keyWidth; k++) {
          const x = key[h * keyWidth + k] * keyScale;
          keyMatrix[(h * keyWidth + k) * heads * keys + column] = x;
          if (keyMatrixT) keyMatrixT[column * heads * keyWidth + h * keyWidth + k] = x;
        }
        for (let k = 0; k < valueWidth; k++) {
          const x = value[h * valueWidth + k];
          valueMatrix[column * heads * valueWidth + h * valueWidth + k] = x;
          if (valueMatrixT) valueMatrixT[(h * valueWidth + k) * heads * keys + column] = x;
        }
      }
    }
    const mask = new Float32Array(rows * heads * keys).fill(MASKED);
    for (let i = 0; i < rows; i++) {
      const position = block.start + i;
      const [from, to] = [Math.max(0, position - window + 1) - first, position - first + 1];
      for (let h = 0; h < heads; h++) mask.fill(0, (i * heads + h) * keys + from, (i * heads + h) * keys + to);
    }
    return {
      rows,
      keys,
      keyMatrix: tf.tensor2d(keyMatrix, [heads * keyWidth, heads * keys]),
      keyMatrixT: keyMatrixT && tf.tensor2d(keyMatrixT, [heads * keys, heads * keyWidth]),
      valueMatrix: tf.tensor2d(valueMatrix, [heads * keys, heads * valueWidth]),
      valueMatrixT: valueMatrixT && tf.tensor2d(valueMatrixT, [heads * valueWidth, heads * keys]),
      mask: tf.tensor2d(mask, [rows * heads, keys]),
    };
  });
  return { blocks: built, keySlots: tf.tensor2d(slots, [slots.length, 1], 'int32'), vocabularyRows: vocabulary.size };
}

/** Splits `x` along `axis` into parts of `sizes` (one kernel), or returns it whole. */
function splitInto<T extends tf.Tensor>(x: T, sizes: number[], axis: number): T[] {
  return sizes.length === 1 ? [x] : (tf.split(x, sizes, axis) as T[]);
}

/**
 * Attended values (rows × heads·valueWidth, head after head) from the queries (rows × heads·keyWidth), the key-LoRA
 * queries c (rows·heads × rank; row i·heads + h is head h of position i) and the key LoRA's `keyB` (rank × |S|).
 */
export function attend(query: tf.Tensor2D, keyQuery: tf.Tensor2D, keyB: tf.Tensor2D, inputs: AttentionInputs): tf.Tensor2D {
  const { heads, scoreCap: cap } = ATTENTION;
  const [rank, columns] = keyB.shape;
  const { blocks } = inputs;
  const rowSizes = blocks.map((b) => b.rows);
  const headRowSizes = blocks.map((b) => b.rows * heads);
  const keySizes = blocks.map((b) => b.keys);
  const join = (parts: tf.Tensor2D[], axis: number): tf.Tensor2D => (parts.length === 1 ? parts[0] : tf.concat(parts, axis));
  const op = tf.customGrad((queryInput, keyQueryInput, keyBInput, save) => {
    // Every key slot's key-LoRA column as [slots, rank]; row |S| of the table is the zero column of unseen tokens.
    const table = tf.concat([tf.transpose(keyBInput as tf.Tensor2D), tf.zeros([1, rank])], 0);
    const slotColumns = tf.gather(table, tf.reshape(inputs.keySlots, [-1])) as tf.Tensor2D;
    const scaledKeyQuery = tf.mul(keyQueryInput as tf.Tensor2D, 2 / cap) as tf.Tensor2D;
    const queries = splitInto(queryInput as tf.Tensor2D, rowSizes, 0);
    const keyQueries = splitInto(scaledKeyQuery, headRowSizes, 0);
    const columnsT = splitInto(tf.transpose(slotColumns), keySizes, 1);
    const saved: tf.Tensor[] = [scaledKeyQuery, slotColumns];
    const attended = blocks.map((block, k): tf.Tensor2D => {
      // [rows, heads·keys] → [rows·heads, keys]: the rows of the key-LoRA scores and of the mask.
      const frozen = tf.reshape(tf.matMul(queries[k], block.keyMatrix), [block.rows * heads, block.keys]);
      const squashed = tf.sigmoid(tf.add(frozen, tf.matMul(keyQueries[k], columnsT[k]))) as tf.Tensor2D;
      const p = tf.softmax(tf.add(tf.mul(squashed, 2 * cap), block.mask)) as tf.Tensor2D;
      saved.push(p, squashed);
      return tf.matMul(tf.reshape(p, [block.rows, heads * block.keys]) as tf.Tensor2D, block.valueMatrix);
    });
    (save as tf.GradSaveFunc)(saved);
    return {
      value: join(attended, 0),
      gradFunc: (dy: tf.Tensor2D, kept: tf.Tensor[]) => {
        const [keptKeyQuery, keptColumns] = kept as tf.Tensor2D[];
        const upstream = splitInto(dy, rowSizes, 0);
        const keyQueriesT = splitInto(tf.transpose(keptKeyQuery), headRowSizes, 1);
        const blockColumns = splitInto(keptColumns, keySizes, 0);
        const dQuery: tf.Tensor2D[] = [];
        const dKeyQuery: tf.Tensor2D[] = [];
        const dColumnsT: tf.Tensor2D[] = [];
        blocks.forEach((block, k) => {
          if (!block.keyMatrixT || !block.valueMatrixT) throw new Error('attention inputs built without gradients');
          const [p, squashed] = [kept[2 + 2 * k], kept[3 + 2 * k]] as tf.Tensor2D[];
          const dP = tf.reshape(tf.matMul(upstream[k], block.valueMatrixT), [block.rows * heads, block.keys]);
          const dScores = tf.mul(p, tf.sub(dP, tf.sum(tf.mul(dP, p), 1, true)));
          // d(2cap·σ(u))/du = 2cap·σ(1 − σ)
          const dU = tf.mul(dScores, tf.mul(squashed, tf.sub(2 * cap, tf.mul(squashed, 2 * cap)))) as tf.Tensor2D;
          dQuery.push(tf.matMul(tf.reshape(dU, [block.rows, heads * block.keys]) as tf.Tensor2D, block.keyMatrixT));
          dKeyQuery.push(tf.matMul(dU, blockColumns[k]));
          dColumnsT.push(tf.matMul(keyQueriesT[k], dU));
        });
        // Each slot's gradient is added onto its token's column (ScatterNd sums repeated indices).
        const summed = tf.scatterND(inputs.keySlots, tf.transpose(join(dColumnsT, 1)), [columns + 1, rank]) as tf.Tensor2D;
        return [join(dQuery, 0), tf.mul(join(dKeyQuery, 0), 2 / cap), tf.transpose(tf.slice(summed, [0, 0], [columns, rank]))];
      },
    };
  }) as (q: tf.Tensor2D, c: tf.Tensor2D, b: tf.Tensor2D) => tf.Tensor2D;
  return op(query, keyQuery, keyB);
}

/**
 * The keys, values and key-LoRA columns of the tokens of one sequence read so far, packed for `attendLatest`.
 * Sampling appends one token per step; the key-LoRA columns are the adapter's at packing time.
 */
export class PackedKeys {
  private keys: Float32Array;
  private values: Float32Array;
  private columns: Float32Array;
  private count = 0;

  constructor(
    private readonly rank: number,
    capacity = 64,
  ) {
    this.keys = new Float32Array(capacity * QUERY_WIDTH);
    this.values = new Float32Array(capacity * ATTENDED_WIDTH);
    this.columns = new Float32Array(capacity * rank);
  }

  get length(): number {
    return this.count;
  }

  /** Appends a token: its frozen key and value, and its key-LoRA column (undefined: zero, an unseen token). */
  push(key: Float32Array, value: Float32Array, column: Float32Array | undefined): void {
    if (this.count * QUERY_WIDTH === this.keys.length) {
      const grow = (a: Float32Array) => {
        const grown = new Float32Array(a.length * 2);
        grown.set(a);
        return grown;
      };
      [this.keys, this.values, this.columns] = [grow(this.keys), grow(this.values), grow(this.columns)];
    }
    this.keys.set(key, this.count * QUERY_WIDTH);
    this.values.set(value, this.count * ATTENDED_WIDTH);
    if (column) this.columns.set(column, this.count * this.rank);
    this.count += 1;
  }

  clone(): PackedKeys {
    const copy = new PackedKeys(this.rank, 1);
    [copy.keys, copy.values, copy.columns, copy.count] = [this.keys.slice(), this.values.slice(), this.columns.slice(), this.count];
    return copy;
  }

  /**
   * `attend` for the one position after the packed tokens, computed directly (no gradient): sampling adds a
   * position per step, and block matrices for every step would cost far more than the attention itself.
   * `query` holds heads·keyWidth values from `queryOffset`, `keyQuery` heads·rank from `keyQueryOffset`; the
   * attended values (heads·valueWidth) go to out[outOffset ..].
   */
  attendLatest(
    query: Float32Array,
    queryOffset: number,
    keyQuery: Float32Array,
    keyQueryOffset: number,
    out: Float32Array,
    outOffset: number,
  ): void {
    const { heads, keyWidth, valueWidth, scoreCap: cap } = ATTENTION;
    const { keys, values, columns, rank, count } = this;
    const first = Math.max(0, count - ATTENTION.window);
    const scores = new Float64Array(count);
    const attended = new Float64Array(valueWidth);
    for (let h = 0; h < heads; h++) {
      const q = queryOffset + h * keyWidth;
      const c = keyQueryOffset + h * rank;
      let top = -Infinity;
      for (let j = first; j < count; j++) {
        let s = 0;
        const k = j * QUERY_WIDTH + h * keyWidth;
        for (let i = 0; i < keyWidth; i++) s += query[q + i] * keys[k + i];
        const b = j * rank;
        for (let r = 0; r < rank; r++) s += keyQuery[c + r] * columns[b + r];
        const score = (2 * cap) / (1 + Math.exp((-2 / cap) * s));
        scores[j] = score;
        if (score > top) top = score;
      }
      let total = 0;
      attended.fill(0);
      for (let j = first; j < count; j++) {
        const weight = Math.exp(scores[j] - top);
        total += weight;
        const v = j * ATTENDED_WIDTH + h * valueWidth;
        for (let i = 0; i < valueWidth; i++) attended[i] += weight * values[v + i];
      }
      for (let i = 0; i < valueWidth; i++) out[outOffset + h * valueWidth + i] = attended[i] / total;
    }
  }
}
