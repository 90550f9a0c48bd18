import * as tf from '@tensorflow/tfjs-core';
import { BASE_DIMS, type BaseModel } from './base-model';
import type { FrozenMatrix } from './network';
import type { RandomStream } from './prng';

/**
 * The tokens the learner has seen, in the order it first saw them: row i of the output layer is token ids[i].
 * Every other id of the vocabulary shares one remainder logit.
 */
export class ActiveVocabulary {
  private readonly ids: number[] = [];
  private readonly rowOf = new Map<number, number>();
  private unembeddingRows = new Float32Array(0);
  private cachedTensors: FrozenMatrix | undefined;

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
    this.dropCachedTensors();
    return added.length;
  }

  /** The frozen unembedding, d × |S| (one column per token), kept on the backend until the vocabulary grows. */
  unembedding(): FrozenMatrix {
    if (!this.cachedTensors) {
      // tf.keep: the cache outlives the tf.tidy scope that first asks for it.
      const rows = tf.keep(tf.tensor2d(this.unembeddingRows, [this.ids.length, BASE_DIMS.embedding]));
      this.cachedTensors = { value: tf.keep(tf.transpose(rows)), transposed: rows };
    }
    return this.cachedTensors;
  }

  /** A uniformly drawn id outside the active vocabulary. */
  randomUnseen(random: RandomStream): number {
    const unseen = this.unseenCount;
    if (unseen === 0) throw new Error('every vocabulary id is in the active vocabulary');
    if (unseen * 64 >= this.vocabSize) {
      // Rejection: at least 1 in 64 draws lands outside the active vocabulary.
      for (;;) {
        const id = random.below(this.vocabSize);
        if (!this.rowOf.has(id)) return id;
      }
    }
    let skip = random.below(unseen);
    for (let id = 0; id < this.vocabSize; id++) {
      if (this.rowOf.has(id)) continue;
      if (skip-- === 0) return id;
    }
    throw new Error('unreachable: unseen ids were counted');
  }

  /** The smallest id not in the active vocabulary (greedy decoding's pick when the remainder class wins). */
  smallestUnseen(): number {
    for (let id = 0; id < this.vocabSize; id++) if (!this.rowOf.has(id)) return id;
    throw new Error('every vocabulary id is in the active vocabulary');
  }

  dispose(): void {
    this.dropCachedTensors();
  }

  private dropCachedTensors(): void {
    if (this.cachedTensors) tf.dispose([this.cachedTensors.value, this.cachedTensors.transposed]);
    this.cachedTensors = undefined;
  }
}
