import type { AdamMoments } from './adam';
import { adapterShapes, type AdapterLayout, type AdapterParameter, type ParameterSet } from './adapter';
import { ATTENTION, BASE_DIMS, DECAY_RATES } from './base-model';
import { LearnerInputError } from './errors';

export const STATE_FORMAT = 'roundhouse-learner/1';

/** A learner's trainable state as JSON: Float32 arrays are base64 of their little-endian bytes. */
export interface LearnerState {
  format: typeof STATE_FORMAT;
  /** What the adapter was trained against; a state only loads into a learner with the same values. */
  model: { vocabSize: number; seed: number; loraRank: number; loraAlpha: number; trainUnembed: boolean; architecture: string };
  step: number;
  /** Optimizer steps these weights went through without a gradient (absent in states saved before it was counted: 0). */
  emptySteps?: number;
  /** Active vocabulary in row order. */
  vocabulary: number[];
  adapter: Partial<Record<AdapterParameter, string>>;
  optimizer?: { first: Partial<Record<AdapterParameter, string>>; second: Partial<Record<AdapterParameter, string>> };
}

interface StateOptions extends AdapterLayout {
  vocabSize: number;
  seed: number;
  alpha: number;
}

export interface DecodedState {
  step: number;
  emptySteps: number;
  vocabulary: number[];
  adapter: ParameterSet;
  moments?: AdamMoments;
}

/**
 * Changes whenever the base model's shape changes, so old adapters are refused rather than misread (states from
 * before attention pooling, `mlp-d64-h256-rms2-decays0.5,0.85,0.97`, or before the output grid, fail on this field
 * with both values named).
 */
const ARCHITECTURE =
  `mlp-d${BASE_DIMS.embedding}-h${BASE_DIMS.hidden}-rms${BASE_DIMS.outputRms}-decays${DECAY_RATES.join(',')}` +
  `-attn${ATTENTION.heads}x${ATTENTION.keyWidth}k${ATTENTION.valueWidth}v-w${ATTENTION.window}-q${ATTENTION.queryScale}-cap${ATTENTION.scoreCap}` +
  `-arms${ATTENTION.attendedRms}-keylora-residual-unembedgrid`;

export function encodeState(options: StateOptions, state: DecodedState): LearnerState {
  return {
    format: STATE_FORMAT,
    model: modelOf(options),
    step: state.step,
    emptySteps: state.emptySteps,
    vocabulary: state.vocabulary,
    adapter: encodeSet(state.adapter),
    ...(state.moments && { optimizer: { first: encodeSet(state.moments.first), second: encodeSet(state.moments.second) } }),
  };
}

export function decodeState(state: LearnerState, options: StateOptions): DecodedState {
  const fail = (message: string): never => {
    throw new LearnerInputError(`learner state: ${message}`);
  };
  if (state?.format !== STATE_FORMAT) fail(`unknown format ${String(state?.format)} (expected ${String(STATE_FORMAT)})`);
  const expected = modelOf(options);
  for (const key of Object.keys(expected) as Array<keyof typeof expected>) {
    if (state.model?.[key] !== expected[key])
      fail(`was made for ${key} = ${String(state.model?.[key])}, this learner has ${String(expected[key])}`);
  }
  if (!Number.isSafeInteger(state.step) || state.step < 0) fail(`step must be an integer ≥ 0, got ${String(state.step)}`);
  const emptySteps = state.emptySteps ?? 0;
  if (!Number.isSafeInteger(emptySteps) || emptySteps < 0) fail(`emptySteps must be an integer ≥ 0, got ${String(state.emptySteps)}`);
  const vocabulary = state.vocabulary;
  if (!Array.isArray(vocabulary) || !vocabulary.every((id) => Number.isInteger(id) && id >= 0 && id < options.vocabSize)) {
    fail('vocabulary must be an array of token ids of this model');
  }
  if (new Set(vocabulary).size !== vocabulary.length) fail('vocabulary lists a token twice');
  const shapes = adapterShapes(options, vocabulary.length);
  const decodeSet = (encoded: Partial<Record<AdapterParameter, string>> | undefined, what: string): ParameterSet =>
    new Map(
      shapes.map(([name, [rows, columns]]) => {
        const text = encoded?.[name];
        if (typeof text !== 'string') fail(`${what}.${name} is missing`);
        const values = decodeFloats(text!);
        if (values.length !== rows * columns) fail(`${what}.${name} has ${values.length} values, expected ${rows}×${columns}`);
        return [name, values];
      }),
    );
  return {
    step: state.step,
    emptySteps,
    vocabulary,
    adapter: decodeSet(state.adapter, 'adapter'),
    moments: state.optimizer && {
      first: decodeSet(state.optimizer.first, 'optimizer.first'),
      second: decodeSet(state.optimizer.second, 'optimizer.second'),
    },
  };
}

function modelOf(options: StateOptions): LearnerState['model'] {
  return {
    vocabSize: options.vocabSize,
    seed: options.seed,
    loraRank: options.rank,
    loraAlpha: options.alpha,
    trainUnembed: options.trainUnembed,
    architecture: ARCHITECTURE,
  };
}

function encodeSet(set: ParameterSet): Partial<Record<AdapterParameter, string>> {
  return Object.fromEntries(
    [...set].map(([name, values]) => [name, Buffer.from(values.buffer, values.byteOffset, values.byteLength).toString('base64')]),
  );
}

function decodeFloats(text: string): Float32Array {
  const bytes = Buffer.from(text, 'base64');
  const values = new Float32Array(Math.floor(bytes.length / 4));
  new Uint8Array(values.buffer).set(bytes.subarray(0, values.length * 4)); // copy: Buffer's offset may be unaligned
  return values;
}
