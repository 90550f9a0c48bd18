import * as tf from '@tensorflow/tfjs-core';
import { BASE_DIMS, type BaseModel } from './base-model';

/**
 * The tokens the learner has seen, in the order it first saw them: row i of the output layer is token ids[i].
 * Every other id of the vocabulary shares one remainder logit.
 */
export class ActiveVocabulary {
  private readonly ids: number[] = [];
  private readonly rowOf = new Map<number, number>();
  private unembeddingRows = new Float32Array(0);
  private cachedTensor: tf.Tensor2D | undefined;

  constructor(
    private readonly base: BaseModel,
    readonly vocabSize: number,
  ) {}

  get size(): number {
    return this.ids.length;
  }

  /** How many vocabulary ids share the remainder logit. */
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

  /** Adds the ids not seen before, in order of first appearance; returns how many rows were added. */
  register(tokens: Iterable<number>): number {
    const added: number[] = [];
    for (const id of tokens) {
      if (this.rowOf.has(id)) continue;
      this.rowOf.set(id, this.ids.length);
      this.ids.push(id);
      added.push(id);
    }
    if (added.length === 0) return 0;
    const d = BASE_DIMS.embedding;
    const grown = new Float32Array(this.ids.length * d);
    grown.set(this.unembeddingRows);
    added.forEach((id, i) => grown.set(this.base.unembeddingOf(id), (this.ids.length - added.length + i) * d));
    this.unembeddingRows = grown;
    this.cachedTensor?.dispose();
    this.cachedTensor = undefined;
    return added.length;
  }

  /** The frozen unembedding rows of the active vocabulary (|S| × d), kept on the backend until the vocabulary grows. */
  unembeddingTensor(): tf.Tensor2D {
    // keep: the cache must outlive the tf.tidy scope that first asks for it
    this.cachedTensor ??= tf.keep(tf.tensor2d(this.unembeddingRows, [this.ids.length, BASE_DIMS.embedding]));
    return this.cachedTensor;
  }

  /** The smallest id not in the active vocabulary (greedy decoding's pick when the remainder class wins). */
  smallestUnseen(): number {
    for (let id = 0; id < this.vocabSize; id++) if (!this.rowOf.has(id)) return id;
    throw new Error('every vocabulary id is in the active vocabulary');
  }

  dispose(): void {
    this.cachedTensor?.dispose();
    this.cachedTensor = undefined;
  }
}
