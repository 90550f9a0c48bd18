import * as tf from '@tensorflow/tfjs-core';
import { BASE_DIMS, type BaseModel } from './base-model';
import type { FrozenMatrix } from './base-model';

/**
 * Where each vocabulary id sits in the output grid: a scrambled id (a fixed permutation of the vocabulary) fills
 * row-major cells of a grid `columns` wide, whose last row may be partial. Token (i, j)'s frozen unembedding row is
 * P_i + Q_j, so the frozen logits of all the ids add up in closed form (Σ_i e^{P_i·z} · Σ_j e^{Q_j·z}, less the
 * partial row's missing cells) while every id keeps its own row.
 */
export interface OutputGrid {
  readonly columns: number;
  readonly rows: number;
  /** Columns that hold ids in `row` (all of them, except in a partial last row). */
  columnsIn(row: number): number;
  /** Columns of `row` whose ids are in the active vocabulary. */
  seenColumns(row: number): readonly number[];
  tokenAt(row: number, column: number): number;
  readonly unseenCount: number;
}

/**
 * The tokens the learner has seen, in the order it first saw them: row i of the output layer is token ids[i]
 * (its adapter columns start at zero, so it scores exactly as it did unseen). The rest are known through the grid.
 */
export class ActiveVocabulary implements OutputGrid {
  readonly columns: number;
  readonly rows: number;
  private readonly ids: number[] = [];
  private readonly rowOf = new Map<number, number>();
  private readonly seenByRow = new Map<number, number[]>();
  private readonly scramble: { forward: (id: number) => number; inverse: (slot: number) => number };
  private unembeddingRows = new Float32Array(0);
  private cachedTensors: FrozenMatrix | undefined;
  private cachedGrid: { rows: FrozenMatrix; columns: FrozenMatrix } | undefined;

  constructor(
    private readonly base: BaseModel,
    readonly vocabSize: number,
  ) {
    this.columns = Math.ceil(Math.sqrt(vocabSize));
    this.rows = Math.ceil(vocabSize / this.columns);
    this.scramble = scrambler(vocabSize);
  }

  get size(): number {
    return this.ids.length;
  }

  /** How many vocabulary ids are outside the active vocabulary. */
  get unseenCount(): number {
    return this.vocabSize - this.ids.length;
  }

  get tokenIds(): readonly number[] {
    return this.ids;
  }

  has(tokenId: number): boolean {
    return this.rowOf.has(tokenId);
  }

  row(tokenId: number): number {
    const row = this.rowOf.get(tokenId);
    if (row === undefined) throw new Error(`token ${tokenId} is not in the active vocabulary`);
    return row;
  }

  /** A token's cell in the output grid. */
  cellOf(tokenId: number): { row: number; column: number } {
    const slot = this.scramble.forward(tokenId);
    return { row: Math.floor(slot / this.columns), column: slot % this.columns };
  }

  tokenAt(row: number, column: number): number {
    return this.scramble.inverse(row * this.columns + column);
  }

  columnsIn(row: number): number {
    return Math.min(this.columns, this.vocabSize - row * this.columns);
  }

  seenColumns(row: number): readonly number[] {
    return this.seenByRow.get(row) ?? NONE;
  }

  /** Adds the ids not seen before, in order of first appearance; returns how many rows were added. */
  register(tokens: Iterable<number>): number {
    const added: number[] = [];
    for (const id of tokens) {
      if (this.rowOf.has(id)) continue;
      this.rowOf.set(id, this.ids.length);
      this.ids.push(id);
      const { row, column } = this.cellOf(id);
      const seen = this.seenByRow.get(row);
      if (seen) seen.push(column);
      else this.seenByRow.set(row, [column]);
      added.push(id);
    }
    if (added.length === 0) return 0;
    const d = BASE_DIMS.embedding;
    const grown = new Float32Array(this.ids.length * d);
    grown.set(this.unembeddingRows);
    added.forEach((id, i) => grown.set(this.unembeddingOf(id), (this.ids.length - added.length + i) * d));
    this.unembeddingRows = grown;
    this.dropCachedTensors();
    return added.length;
  }

  /** The frozen unembedding, d × |S| (one column per token), kept on the backend until the vocabulary grows. */
  unembedding(): FrozenMatrix {
    this.cachedTensors ??= frozenColumns(this.unembeddingRows, this.ids.length);
    return this.cachedTensors;
  }

  /** The grid's frozen row and column vectors, d × rows and d × columns, kept for the learner's life. */
  gridUnembedding(): { rows: FrozenMatrix; columns: FrozenMatrix } {
    if (!this.cachedGrid) {
      const d = BASE_DIMS.embedding;
      const stack = (count: number, of: (k: number) => Float32Array) => {
        const out = new Float32Array(count * d);
        for (let k = 0; k < count; k++) out.set(of(k), k * d);
        return frozenColumns(out, count);
      };
      this.cachedGrid = {
        rows: stack(this.rows, (i) => this.base.outputRowOf(i)),
        columns: stack(this.columns, (j) => this.base.outputColumnOf(j)),
      };
    }
    return this.cachedGrid;
  }

  dispose(): void {
    this.dropCachedTensors();
    if (this.cachedGrid) tf.dispose([this.cachedGrid.rows.value, this.cachedGrid.rows.transposed]);
    if (this.cachedGrid) tf.dispose([this.cachedGrid.columns.value, this.cachedGrid.columns.transposed]);
    this.cachedGrid = undefined;
  }

  /** Token (i, j)'s frozen unembedding row, P_i + Q_j. */
  private unembeddingOf(tokenId: number): Float32Array {
    const { row, column } = this.cellOf(tokenId);
    const [p, q] = [this.base.outputRowOf(row), this.base.outputColumnOf(column)];
    return p.map((v, k) => v + q[k]);
  }

  private dropCachedTensors(): void {
    if (this.cachedTensors) tf.dispose([this.cachedTensors.value, this.cachedTensors.transposed]);
    this.cachedTensors = undefined;
  }
}

const NONE: readonly number[] = [];

/**
 * A fixed permutation of the vocabulary, id → a·id mod V with a coprime to V, and its inverse, so ids close together
 * (or in any arithmetic run) seldom share a grid row or column.
 */
function scrambler(vocabSize: number): { forward: (id: number) => number; inverse: (slot: number) => number } {
  let a = Math.max(1, Math.round(vocabSize * 0.6180339887));
  while (gcd(a, vocabSize) !== 1) a += 1;
  const inverseA = modularInverse(a, vocabSize);
  return { forward: (id) => (a * id) % vocabSize, inverse: (slot) => (inverseA * slot) % vocabSize };
}

function gcd(x: number, y: number): number {
  return y === 0 ? x : gcd(y, x % y);
}

/** a⁻¹ mod m by the extended Euclidean algorithm (gcd(a, m) = 1; products stay below 2⁵³ for m < 2²⁶). */
function modularInverse(a: number, m: number): number {
  let [oldR, r, oldS, s] = [a, m, 1, 0];
  while (r !== 0) {
    const q = Math.floor(oldR / r);
    [oldR, r] = [r, oldR - q * r];
    [oldS, s] = [s, oldS - q * s];
  }
  return ((oldS % m) + m) % m;
}

/** `count` rows of width d as a frozen d × count matrix (one column per row) with its transpose, kept on the backend. */
function frozenColumns(rows: Float32Array, count: number): FrozenMatrix {
  const transposed = tf.keep(tf.tensor2d(rows, [count, BASE_DIMS.embedding]));
  return { value: tf.keep(tf.transpose(transposed)), transposed };
}
