import { ATTENTION, BASE_DIMS, FEATURE_WIDTH, MLP_INPUT_WIDTH, QUERY_WIDTH } from './base-model';
import { gaussianVector, hashKey } from './prng';

/**
 * The trainable LoRA adapter, in the `x · A · B` layout: A (in × rank) is seeded random, B (rank × out) starts
 * at zero, so a fresh adapter is a no-op. query*: the attention queries; key*: the keys (keyA, shared by the heads,
 * maps a head's query to rank dims, and token j's key gains keyB's column j); hidden* and output*: the MLP's two
 * maps; unembed*: the output layer. `keyB` and `unembedB` have one column per active-vocabulary token
 * (rank × |S|); columns of tokens seen later start at zero.
 */
export type AdapterParameter =
  'queryA' | 'queryB' | 'keyA' | 'keyB' | 'hiddenA' | 'hiddenB' | 'outputA' | 'outputB' | 'unembedA' | 'unembedB';

export interface AdapterLayout {
  rank: number;
  trainUnembed: boolean;
}

/** Parameters, gradients or Adam moments: one flat row-major Float32Array per adapter parameter. */
export type ParameterSet = Map<AdapterParameter, Float32Array>;

/** Each parameter's [rows, columns], in a fixed order (the order of gradients and of exported state). */
export function adapterShapes(layout: AdapterLayout, vocabularyRows: number): Array<[AdapterParameter, [number, number]]> {
  const { rank } = layout;
  const { hidden, embedding } = BASE_DIMS;
  const shapes: Array<[AdapterParameter, [number, number]]> = [
    ['queryA', [FEATURE_WIDTH, rank]],
    ['queryB', [rank, QUERY_WIDTH]],
    ['keyA', [ATTENTION.keyWidth, rank]],
    ['keyB', [rank, vocabularyRows]],
    ['hiddenA', [MLP_INPUT_WIDTH, rank]],
    ['hiddenB', [rank, hidden]],
    ['outputA', [hidden, rank]],
    ['outputB', [rank, embedding]],
  ];
  if (layout.trainUnembed) shapes.push(['unembedA', [embedding, rank]], ['unembedB', [rank, vocabularyRows]]);
  return shapes;
}

/** A fresh adapter: A matrices ~N(0, 1/in) from the LoRA seed, B matrices zero. */
export function initialAdapter(layout: AdapterLayout, loraSeed: number, vocabularyRows: number): ParameterSet {
  const set: ParameterSet = new Map();
  for (const [name, [rows, columns]] of adapterShapes(layout, vocabularyRows)) {
    const random = name.endsWith('A');
    set.set(name, random ? gaussianVector(hashKey(loraSeed, name), rows * columns, 1 / Math.sqrt(rows)) : new Float32Array(rows * columns));
  }
  return set;
}

export function zerosLike(set: ParameterSet): ParameterSet {
  return new Map([...set].map(([name, values]) => [name, new Float32Array(values.length)]));
}

/** Parameters with one column per active-vocabulary token (rank × |S|). */
const PER_TOKEN: readonly AdapterParameter[] = ['keyB', 'unembedB'];

/** Widens the per-token parameters with zero columns after the active vocabulary grew to `vocabularyRows`. */
export function growVocabularyColumns(set: ParameterSet, layout: AdapterLayout, vocabularyRows: number): void {
  for (const name of PER_TOKEN) {
    const current = set.get(name);
    if (!current) continue;
    const before = current.length / layout.rank;
    const grown = new Float32Array(layout.rank * vocabularyRows);
    for (let r = 0; r < layout.rank; r++) grown.set(current.subarray(r * before, (r + 1) * before), r * vocabularyRows);
    set.set(name, grown);
  }
}
