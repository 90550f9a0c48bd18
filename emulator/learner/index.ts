/**
 * The emulator's learner: a frozen, seeded stand-in base model plus a trainable LoRA adapter over token ids.
 *
 * Per position t, features f_t = [e(x_t), e(x_t−1), bags of e(x_<t) decayed at 0.5 / 0.85 / 0.97, the uniform bag
 * of e(x_≤t)] (6·64 = 384). Causal attention pooling over x_≤t (attention.ts; 2 heads, keys and values 32 wide)
 * lets the adapter pick out the few tokens that matter in a long context, which the bags dilute: queries are a
 * frozen projection of f_t plus a LoRA, keys and values frozen per-token rows, plus a LoRA on the keys over the
 * active vocabulary; scores are soft-capped. The attended values (2·32, RMS-normalised per head) join f_t as the
 * input of a frozen MLP 448 → 256 (GELU) → 64 with LoRA on both maps, and also reach its output through a frozen
 * projection (a residual path) → RMS-normalised z → logits over the tokens seen so far (the active vocabulary)
 * through frozen unembedding rows plus a LoRA, and over every other id through its frozen row alone, summed in closed
 * form over the output grid (vocabulary.ts), so losses and logprobs are a proper distribution over the whole
 * vocabulary, and a token scores the same whether or not the learner has seen it (sampling and scoring agree). Frozen parameters are pure
 * functions of (seed, tokenId); only the adapter trains (AdamW).
 */
import * as tf from '@tensorflow/tfjs-core';
import { adamWStep, validateAdamSettings, type AdamMoments, type AdamSettings } from './adam';
import {
  adapterShapes,
  growVocabularyColumns,
  initialAdapter,
  zerosLike,
  type AdapterLayout,
  type AdapterParameter,
  type ParameterSet,
} from './adapter';
import { attentionInputs, blockScoreSize, PackedKeys, type ActiveRows, type AttentionBlock } from './attention';
import { ensureWasmBackend } from './backend';
import { ATTENDED_WIDTH, ATTENTION, BaseModel, FEATURE_WIDTH, QUERY_WIDTH } from './base-model';
import { LearnerInputError, NonFiniteLossError } from './errors';
import { CausalContext, sequenceFeatures } from './features';
import { ActiveVocabulary } from './vocabulary';
import { evaluateTokenLoss, type Segment, type TokenLoss } from './losses';
import {
  attentionQueries,
  logitsOfAttended,
  networkInputs,
  networkInputTensors,
  nextTokenLogprobs,
  targetLogprobs,
  type GridShape,
  type NetworkInputs,
  type NetworkWeights,
} from './network';
import { RandomStream, hashKey } from './prng';
import { chooseToken, validateSampleParams, type SampleParams, type TokenDistribution } from './sampling';
import { decodeState, encodeState, type LearnerState } from './state';

export type { AdamSettings } from './adam';
export { ensureWasmBackend } from './backend';
export { LearnerInputError, NonFiniteLossError } from './errors';
export {
  crossEntropyLoss,
  linearLogprobLoss,
  policyGradientLoss,
  type PolicyAggregation,
  type PolicyLossConfig,
  type Segment,
  type TokenLoss,
} from './losses';
export type { SampleParams } from './sampling';
export type { LearnerState } from './state';

export interface LearnerOptions {
  /** Ids accepted: integers in [0, vocabSize). */
  vocabSize: number;
  /** Seed of the frozen base model. */
  seed: number;
  /** 1..128. */
  loraRank: number;
  /** Default 2·loraRank, i.e. scale alpha/rank = 2 at every rank. */
  loraAlpha?: number;
  /** Seed of the adapter's random A matrices; default derived from `seed`. */
  loraSeed?: number;
  /** Whether the unembedding (output layer) gets a LoRA too; default true. */
  trainUnembed?: boolean;
}

/** target[i] is the token that follows input[i]. */
export interface TokenSequence {
  inputTokens: number[];
  targetTokens: number[];
}

export interface ForwardResult {
  loss: number;
  /** Per sequence, per position: log p(targetTokens[i] | inputTokens[≤i]). */
  logprobs: number[][];
}

export interface SampledSequence {
  tokens: number[];
  /** The model's log p of each sampled token (temperature 1, before top-k/top-p), as promptLogprobs reports it. */
  logprobs: number[];
  stopReason: 'length' | 'stop';
}

/** The whole next-token distribution after a context: every active-vocabulary token, plus the unseen ids' total. */
export interface NextTokenDistribution {
  seen: Array<{ tokenId: number; logprob: number }>;
  unseenCount: number;
  /** Σ p over the unseen ids. */
  unseenMass: number;
  /** log p of one id, seen or not. */
  logprobOf(tokenId: number): number;
}

export const MAX_LORA_RANK = 128;

interface ResolvedOptions extends AdapterLayout {
  vocabSize: number;
  seed: number;
  alpha: number;
  loraSeed: number;
}

interface PreparedBatch {
  inputs: number[][];
  features: Float32Array;
  targetRows: Int32Array;
  segments: Segment[];
}

/** Consecutive positions of a batch, evaluated together: their attention blocks cover exactly these positions. */
interface Chunk extends Segment {
  blocks: AttentionBlock[];
}

/**
 * A frozen seeded base model plus a trainable LoRA adapter over token ids, trained with AdamW.
 * Not safe for concurrent use: calls are synchronous, so one caller at a time by construction.
 */
export class Learner {
  private pendingGradients: ParameterSet | undefined;
  private readonly samplingStream: RandomStream;
  private disposed = false;

  private constructor(
    private readonly options: ResolvedOptions,
    private readonly base: BaseModel,
    private readonly vocabulary: ActiveVocabulary,
    private readonly adapter: ParameterSet,
    private readonly moments: AdamMoments,
    private stepCount: number,
    private emptySteps: number,
  ) {
    this.samplingStream = new RandomStream(hashKey(options.seed, 'sampling'));
  }

  static async create(options: LearnerOptions): Promise<Learner> {
    await ensureWasmBackend();
    const resolved = resolveOptions(options);
    const base = new BaseModel(resolved.seed);
    const adapter = initialAdapter(resolved, resolved.loraSeed, 0);
    return new Learner(resolved, base, new ActiveVocabulary(base, resolved.vocabSize), adapter, freshMoments(adapter), 0, 0);
  }

  /**
   * Restores a learner; with `optimizer: false` the Adam moments start fresh and the step count at 0. The weights'
   * count of empty optimizer steps comes back either way: it belongs to the weights, not to the optimizer.
   */
  static async fromState(options: LearnerOptions, state: LearnerState, restore: { optimizer: boolean }): Promise<Learner> {
    await ensureWasmBackend();
    const resolved = resolveOptions(options);
    const decoded = decodeState(state, resolved);
    if (restore.optimizer && !decoded.moments) {
      throw new LearnerInputError('the state has no optimizer moments to restore (it was exported without them)');
    }
    const base = new BaseModel(resolved.seed);
    const vocabulary = new ActiveVocabulary(base, resolved.vocabSize);
    vocabulary.register(decoded.vocabulary);
    return restore.optimizer
      ? new Learner(resolved, base, vocabulary, decoded.adapter, decoded.moments!, decoded.step, decoded.emptySteps)
      : new Learner(resolved, base, vocabulary, decoded.adapter, freshMoments(decoded.adapter), 0, decoded.emptySteps);
  }

  /** Optimizer steps applied. */
  get step(): number {
    return this.stepCount;
  }

  /**
   * Optimizer steps these weights went through with no gradient accumulated since the step before (counted over
   * their whole lineage: a restored state brings its count). Such a step still moves the weights, by Adam's momentum.
   */
  get emptyOptimizerSteps(): number {
    return this.emptySteps;
  }

  /** Loss and target logprobs, without gradients. */
  forward(batch: TokenSequence[], loss: TokenLoss): ForwardResult {
    return this.evaluate(batch, loss, false);
  }

  /**
   * Loss and target logprobs; the loss's gradients are added to those pending for the next optimStep, all at once
   * when the call succeeds: one that throws (bad input, a non-finite loss or gradient) accumulates nothing.
   */
  forwardBackward(batch: TokenSequence[], loss: TokenLoss): ForwardResult {
    return this.evaluate(batch, loss, true);
  }

  /** Applies the pending gradients (zero if none: an `empty` step, which momentum still moves) with AdamW and clears them. */
  optimStep(adam: AdamSettings): { step: number; gradNorm: number; empty: boolean } {
    this.assertLive();
    validateAdamSettings(adam);
    const empty = this.pendingGradients === undefined;
    const gradNorm = adamWStep(this.adapter, this.pendingGradients ?? zerosLike(this.adapter), this.moments, adam, this.stepCount + 1);
    this.pendingGradients = undefined;
    this.stepCount += 1;
    if (empty) this.emptySteps += 1;
    return { step: this.stepCount, gradNorm, empty };
  }

  /**
   * `numSamples` continuations of `prompt`. Sample i draws from its own stream, keyed by (params.seed or the
   * learner's per-call stream, i), so it does not depend on numSamples. Stop sequences and EOS ids are kept at
   * the end of `tokens`. Sampled tokens are not added to the active vocabulary (prompt tokens are).
   */
  sample(prompt: number[], params: SampleParams, numSamples: number): SampledSequence[] {
    this.assertLive();
    this.requireTokens(prompt, 'prompt');
    validateSampleParams(params, (value) => this.isTokenId(value));
    if (!Number.isInteger(numSamples) || numSamples < 1)
      throw new LearnerInputError(`numSamples must be an integer ≥ 1, got ${numSamples}`);
    this.registerTokens(prompt);

    const callKey = params.seed !== undefined ? hashKey(params.seed, 'sample') : hashKey(this.samplingStream.below(0x100000000), 'sample');
    const promptContext = new CausalContext();
    for (const token of prompt) promptContext.push(this.base.embeddingOf(token));
    const promptKeys = this.packKeys(prompt);
    const active = Array.from({ length: numSamples }, (_, i) => ({
      context: promptContext.clone(),
      keys: promptKeys.clone(),
      random: new RandomStream(hashKey(callKey, i)),
      result: { tokens: [], logprobs: [], stopReason: 'length' } as SampledSequence,
    }));
    const eos = new Set(params.eosTokenIds ?? []);
    const stops = params.stopTokenSequences ?? [];
    const results = active.map((a) => a.result);

    for (let position = 0; position < params.maxTokens && active.length > 0; position++) {
      const features = new Float32Array(active.length * FEATURE_WIDTH);
      active.forEach((a, i) => a.context.writeRow(features, i * FEATURE_WIDTH));
      const distributions = this.nextTokenDistributions(
        features,
        active.map((a) => a.keys),
      );
      for (let i = active.length - 1; i >= 0; i--) {
        const a = active[i];
        const dist = distributions[i];
        const { token, logprob } = chooseToken(dist, params, a.random);
        a.result.tokens.push(token);
        a.result.logprobs.push(logprob);
        a.context.push(this.base.embeddingOf(token));
        this.packKey(a.keys, token);
        if (eos.has(token) || stops.some((stop) => endsWith(a.result.tokens, stop))) {
          a.result.stopReason = 'stop';
          active.splice(i, 1);
        }
      }
    }
    return results;
  }

  /** [0] = 0 (nothing precedes the first token); [i] = log p(tokens[i] | tokens[<i]). */
  promptLogprobs(tokens: number[]): number[] {
    this.assertLive();
    this.requireTokens(tokens, 'tokens');
    if (tokens.length === 1) {
      this.registerTokens(tokens);
      return [0];
    }
    const { logprobs } = this.evaluate([{ inputTokens: tokens.slice(0, -1), targetTokens: tokens.slice(1) }], undefined, false);
    return [0, ...logprobs[0]];
  }

  /** The full next-token distribution after `context` (its tokens join the active vocabulary first). */
  nextTokenDistribution(context: number[]): NextTokenDistribution {
    this.assertLive();
    this.requireTokens(context, 'context');
    this.registerTokens(context);
    const all = sequenceFeatures([context], (id) => this.base.embeddingOf(id));
    const [dist] = this.nextTokenDistributions(all.subarray((context.length - 1) * FEATURE_WIDTH), [this.packKeys(context)]);
    const vocabulary = this.vocabulary;
    const seen = Array.from(dist.seen, (logprob, row) => ({ tokenId: dist.tokenIds[row], logprob }));
    const unseenLogprob = (tokenId: number) => {
      const { row, column } = vocabulary.cellOf(tokenId);
      return dist.rows[row] + dist.columns[column];
    };
    let unseenMass = 0;
    for (let row = 0; row < vocabulary.rows; row++) {
      for (let column = 0; column < vocabulary.columnsIn(row); column++) {
        if (!vocabulary.seenColumns(row).includes(column)) unseenMass += Math.exp(dist.rows[row] + dist.columns[column]);
      }
    }
    return {
      seen,
      unseenCount: vocabulary.unseenCount,
      unseenMass,
      logprobOf: (tokenId) => (vocabulary.has(tokenId) ? dist.seen[vocabulary.row(tokenId)] : unseenLogprob(tokenId)),
    };
  }

  /** Adapter weights, active vocabulary, step and empty-step count; Adam moments too when asked. Pending gradients are not saved. */
  exportState(options: { withOptimizer: boolean }): LearnerState {
    this.assertLive();
    return encodeState(this.options, {
      step: this.stepCount,
      emptySteps: this.emptySteps,
      vocabulary: [...this.vocabulary.tokenIds],
      adapter: this.adapter,
      moments: options.withOptimizer ? this.moments : undefined,
    });
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.vocabulary.dispose();
    this.base.dispose();
  }

  /**
   * Logprobs of every position (forward pass in chunks, no tape), the loss and its per-token gradient, then —
   * with gradients — backpropagation chunk by chunk with that gradient. Chunks bound the N × |S| tensors, whose
   * WASM memory would otherwise grow with the batch and never be returned.
   */
  private evaluate(batch: TokenSequence[], loss: TokenLoss | undefined, withGradients: boolean): ForwardResult {
    this.assertLive();
    const prepared = this.prepareBatch(batch);
    const chunks = batchChunks(prepared.inputs, this.vocabulary.size);
    const names = this.adapterNames();
    const logprobs = new Float32Array(prepared.targetRows.length);
    // Each chunk's adapter-independent tensors, kept from the forward pass for the backward one while they fit.
    const kept: Array<NetworkInputs | undefined> = [];
    let keptElements = 0;
    try {
      for (const chunk of chunks) {
        tf.tidy(() => {
          const inputs = this.chunkInputs(prepared, chunk, withGradients);
          const logp = targetLogprobs(inputs, this.chunkTargets(prepared, chunk), this.weights(names, this.adapterTensors(names)));
          logprobs.set(logp.dataSync(), chunk.start);
          const tensors = networkInputTensors(inputs);
          const elements = tensors.reduce((n, t) => n + t.size, 0);
          if (withGradients && keptElements + elements <= KEPT_ELEMENTS) {
            tensors.forEach((t) => tf.keep(t));
            kept.push(inputs);
            keptElements += elements;
          } else kept.push(undefined);
        });
      }
      const { value, gradient } = loss
        ? evaluateTokenLoss(loss, logprobs, prepared.segments, withGradients)
        : { value: 0, gradient: undefined };
      if (gradient) {
        const batchGradients = zerosLike(this.adapter);
        chunks.forEach((chunk, k) => {
          // Results leave the tidy through this variable: returning typed arrays from tf.tidy makes it walk every element.
          let grads: Float32Array[] = [];
          tf.tidy(() => {
            const upstream = tf.tensor1d(gradient.subarray(chunk.start, chunk.start + chunk.length));
            // Made outside the differentiated function, which disposes the tensors it creates.
            const inputs = kept[k] ?? this.chunkInputs(prepared, chunk, true);
            const targets = this.chunkTargets(prepared, chunk);
            const differentiate = tf.grads((...values: tf.Tensor[]) =>
              targetLogprobs(inputs, targets, this.weights(names, values as tf.Tensor2D[])),
            );
            grads = differentiate(this.adapterTensors(names), upstream).map((g) => g.dataSync() as Float32Array);
          });
          addInto(batchGradients, names, grads);
        });
        this.accumulate(batchGradients);
      }
      return {
        loss: value,
        logprobs: prepared.segments.map(({ start, length }) => Array.from(logprobs.subarray(start, start + length))),
      };
    } finally {
      for (const inputs of kept) if (inputs) tf.dispose(networkInputTensors(inputs));
    }
  }

  /** A chunk's adapter-independent tensors. */
  private chunkInputs(prepared: PreparedBatch, chunk: Chunk, forGradients: boolean): NetworkInputs {
    const end = chunk.start + chunk.length;
    const features = tf.tensor2d(prepared.features.subarray(chunk.start * FEATURE_WIDTH, end * FEATURE_WIDTH), [
      chunk.length,
      FEATURE_WIDTH,
    ]);
    const attention = attentionInputs(chunk.blocks, (id) => this.base.keyValueOf(id), this.vocabularyRows(), forGradients);
    return networkInputs(features, attention, this.frozenWeights());
  }

  private chunkTargets(prepared: PreparedBatch, chunk: Chunk): Int32Array {
    return prepared.targetRows.subarray(chunk.start, chunk.start + chunk.length);
  }

  /** Adds a whole batch's gradients to those pending; a non-finite one is refused before anything is added. */
  private accumulate(gradients: ParameterSet): void {
    for (const values of gradients.values()) {
      if (!values.every(Number.isFinite)) throw new NonFiniteLossError("the loss's gradient with respect to the adapter is not finite");
    }
    if (!this.pendingGradients) {
      this.pendingGradients = gradients;
      return;
    }
    for (const [name, add] of gradients) {
      const sum = this.pendingGradients.get(name)!;
      for (let i = 0; i < add.length; i++) sum[i] += add[i];
    }
  }

  /** Validates a batch, adds its tokens to the active vocabulary and computes features and target rows. */
  private prepareBatch(batch: TokenSequence[]): PreparedBatch {
    if (!Array.isArray(batch) || batch.length === 0) throw new LearnerInputError('batch must contain at least one sequence');
    batch.forEach((sequence, s) => {
      this.requireTokens(sequence?.inputTokens, `batch[${s}].inputTokens`);
      this.requireTokens(sequence.targetTokens, `batch[${s}].targetTokens`);
      if (sequence.inputTokens.length !== sequence.targetTokens.length) {
        throw new LearnerInputError(
          `batch[${s}] has ${sequence.inputTokens.length} input tokens but ${sequence.targetTokens.length} target tokens; they must pair up`,
        );
      }
    });
    for (const sequence of batch) this.registerTokens([...sequence.inputTokens, ...sequence.targetTokens]);
    const segments: Segment[] = [];
    let start = 0;
    for (const sequence of batch) {
      segments.push({ start, length: sequence.inputTokens.length });
      start += sequence.inputTokens.length;
    }
    const targetRows = Int32Array.from(
      batch.flatMap((s) => s.targetTokens),
      (id) => this.vocabulary.row(id),
    );
    const inputs = batch.map((s) => s.inputTokens);
    const features = sequenceFeatures(inputs, (id) => this.base.embeddingOf(id));
    return { inputs, features, targetRows, segments };
  }

  /** The next-token distribution after each sequence, given the feature row of its last position and its packed keys. */
  private nextTokenDistributions(features: Float32Array, sequences: PackedKeys[]): TokenDistribution[] {
    const rows = sequences.length;
    let [seen, gridRows, gridColumns]: Float32Array[] = [];
    tf.tidy(() => {
      const names = this.adapterNames();
      const weights = this.weights(names, this.adapterTensors(names));
      const inputs = networkInputs(tf.tensor2d(features.subarray(0, rows * FEATURE_WIDTH), [rows, FEATURE_WIDTH]), undefined, weights);
      const { query, keyQuery } = attentionQueries(inputs, weights);
      const [queries, keyQueries] = [query.dataSync() as Float32Array, keyQuery.dataSync() as Float32Array];
      const attended = new Float32Array(rows * ATTENDED_WIDTH);
      const keyQueryWidth = ATTENTION.heads * this.options.rank;
      sequences.forEach((keys, i) =>
        keys.attendLatest(queries, i * QUERY_WIDTH, keyQueries, i * keyQueryWidth, attended, i * ATTENDED_WIDTH),
      );
      const out = nextTokenLogprobs(logitsOfAttended(inputs, tf.tensor2d(attended, [rows, ATTENDED_WIDTH]), weights), weights);
      [seen, gridRows, gridColumns] = [out.seen, out.rows, out.columns].map((t) => t.dataSync() as Float32Array);
    });
    const vocabulary = this.vocabulary;
    const [size, gridHeight, gridWidth] = [vocabulary.size, vocabulary.rows, vocabulary.columns];
    return Array.from({ length: rows }, (_, i) => ({
      seen: seen.subarray(i * size, (i + 1) * size),
      tokenIds: vocabulary.tokenIds,
      rows: gridRows.subarray(i * gridHeight, (i + 1) * gridHeight),
      columns: gridColumns.subarray(i * gridWidth, (i + 1) * gridWidth),
      grid: vocabulary,
    }));
  }

  private registerTokens(tokens: number[]): void {
    if (this.vocabulary.register(tokens) === 0) return;
    const rows = this.vocabulary.size;
    for (const set of [this.adapter, this.moments.first, this.moments.second, this.pendingGradients]) {
      if (set) growVocabularyColumns(set, this.options, rows);
    }
  }

  /** The keys of `tokens` packed for sampling, with the adapter's current key-LoRA columns. */
  private packKeys(tokens: number[]): PackedKeys {
    const packed = new PackedKeys(this.options.rank, Math.max(64, tokens.length * 2));
    for (const token of tokens) this.packKey(packed, token);
    return packed;
  }

  private packKey(packed: PackedKeys, token: number): void {
    const { key, value } = this.base.keyValueOf(token);
    let column: Float32Array | undefined;
    if (this.vocabulary.has(token)) {
      const [keyB, row, size, rank] = [this.adapter.get('keyB')!, this.vocabulary.row(token), this.vocabulary.size, this.options.rank];
      column = Float32Array.from({ length: rank }, (_, r) => keyB[r * size + row]);
    }
    packed.push(key, value, column);
  }

  private vocabularyRows(): ActiveRows {
    const vocabulary = this.vocabulary;
    return { size: vocabulary.size, rowOf: (id) => (vocabulary.has(id) ? vocabulary.row(id) : undefined) };
  }

  private adapterNames(): AdapterParameter[] {
    return adapterShapes(this.options, this.vocabulary.size).map(([name]) => name);
  }

  private adapterTensors(names: AdapterParameter[]): tf.Tensor2D[] {
    const shapes = new Map(adapterShapes(this.options, this.vocabulary.size));
    return names.map((name) => tf.tensor2d(this.adapter.get(name)!, shapes.get(name)!));
  }

  private frozenWeights(): Pick<NetworkWeights, 'queryWeights' | 'hiddenWeights' | 'hiddenBias'> {
    return { queryWeights: this.base.queryWeights, hiddenWeights: this.base.hiddenWeights, hiddenBias: this.base.hiddenBias };
  }

  private weights(names: AdapterParameter[], values: tf.Tensor2D[]): NetworkWeights {
    return {
      queryWeights: this.base.queryWeights,
      hiddenWeights: this.base.hiddenWeights,
      attendedWeights: this.base.attendedWeights,
      residualWeights: this.base.residualWeights,
      hiddenBias: this.base.hiddenBias,
      outputWeights: this.base.outputWeights,
      unembedding: this.vocabulary.unembedding(),
      grid: { ...this.vocabulary.gridUnembedding(), shape: this.gridShape() },
      adapter: new Map(names.map((name, k) => [name, values[k]])),
      scale: this.options.alpha / this.options.rank,
      unseenCount: this.vocabulary.unseenCount,
    };
  }

  private gridShape(): GridShape {
    const { columns, vocabSize } = { columns: this.vocabulary.columns, vocabSize: this.options.vocabSize };
    return { fullRows: Math.floor(vocabSize / columns), partialColumns: vocabSize % columns };
  }

  private isTokenId(value: unknown): boolean {
    return Number.isInteger(value) && (value as number) >= 0 && (value as number) < this.options.vocabSize;
  }

  private requireTokens(tokens: unknown, what: string): asserts tokens is number[] {
    if (!Array.isArray(tokens) || tokens.length === 0) throw new LearnerInputError(`${what} must be a non-empty array of token ids`);
    const bad = tokens.findIndex((t) => !this.isTokenId(t));
    if (bad >= 0) {
      throw new LearnerInputError(
        `${what}[${bad}] = ${String(tokens[bad])} is not a token id of this model (integers 0..${this.options.vocabSize - 1})`,
      );
    }
  }

  private assertLive(): void {
    if (this.disposed) throw new Error('this learner was disposed');
  }
}

/**
 * Elements of one N × |S| tensor, and of one head's padded attention scores, per chunk (4 MiB of float32): peak
 * WASM memory stays near 100 MB.
 */
const CHUNK_ELEMENTS = 1 << 20;

/** Adapter-independent chunk tensors kept between a forwardBackward's two passes (64 MiB of float32 at most). */
const KEPT_ELEMENTS = 1 << 24;

/**
 * Consecutive position ranges covering the batch, each small enough that its logits and its attention scores
 * (every head of every block) fit CHUNK_ELEMENTS; a chunk holds whole sequences where it can, and splits a long one
 * into runs of positions.
 */
function batchChunks(sequences: number[][], vocabularyRows: number): Chunk[] {
  const maxRows = Math.max(1, Math.floor(CHUNK_ELEMENTS / vocabularyRows));
  const chunks: Chunk[] = [];
  let chunk: Chunk = { start: 0, length: 0, blocks: [] };
  let [scores, position] = [0, 0];
  for (const tokens of sequences) {
    let start = 0;
    while (start < tokens.length) {
      const fits = (end: number) => chunk.length + end - start <= maxRows && scores + blockScoreSize(start, end) <= CHUNK_ELEMENTS;
      // The largest end that fits (both sizes grow with it).
      let [low, high] = [start, tokens.length];
      while (low < high) {
        const middle = Math.ceil((low + high) / 2);
        if (fits(middle)) low = middle;
        else high = middle - 1;
      }
      if (low === start && chunk.length > 0) {
        chunks.push(chunk);
        chunk = { start: position, length: 0, blocks: [] };
        scores = 0;
        continue;
      }
      const end = Math.max(low, start + 1);
      chunk.blocks.push({ tokens, start, end });
      chunk.length += end - start;
      scores += blockScoreSize(start, end);
      position += end - start;
      start = end;
    }
  }
  if (chunk.length > 0) chunks.push(chunk);
  return chunks;
}

/** sums[name] += values[k] for each adapter parameter, in `names` order. */
function addInto(sums: ParameterSet, names: AdapterParameter[], values: Float32Array[]): void {
  names.forEach((name, k) => {
    const sum = sums.get(name)!;
    const add = values[k];
    for (let i = 0; i < add.length; i++) sum[i] += add[i];
  });
}

function endsWith(tokens: number[], suffix: number[]): boolean {
  if (suffix.length > tokens.length) return false;
  const offset = tokens.length - suffix.length;
  return suffix.every((t, i) => tokens[offset + i] === t);
}

function freshMoments(adapter: ParameterSet): AdamMoments {
  return { first: zerosLike(adapter), second: zerosLike(adapter) };
}

function resolveOptions(options: LearnerOptions): ResolvedOptions {
  const fail = (message: string): never => {
    throw new LearnerInputError(`learner options: ${message}`);
  };
  if (!Number.isSafeInteger(options.vocabSize) || options.vocabSize < 1)
    fail(`vocabSize must be a positive integer, got ${options.vocabSize}`);
  if (!Number.isSafeInteger(options.seed)) fail(`seed must be an integer, got ${options.seed}`);
  if (!Number.isInteger(options.loraRank) || options.loraRank < 1 || options.loraRank > MAX_LORA_RANK) {
    fail(`loraRank must be an integer from 1 to ${MAX_LORA_RANK}, got ${options.loraRank}`);
  }
  const alpha = options.loraAlpha ?? 2 * options.loraRank;
  if (!Number.isFinite(alpha) || alpha <= 0) fail(`loraAlpha must be a positive number, got ${alpha}`);
  if (options.loraSeed !== undefined && !Number.isSafeInteger(options.loraSeed))
    fail(`loraSeed must be an integer, got ${options.loraSeed}`);
  return {
    vocabSize: options.vocabSize,
    seed: options.seed,
    rank: options.loraRank,
    alpha,
    loraSeed: options.loraSeed ?? hashKey(options.seed, 'lora'),
    trainUnembed: options.trainUnembed ?? true,
  };
}

/** What the engine trains and samples with: the learner, or the zero-compute model (zero-compute.ts). */
export type TrainerModel = Pick<
  Learner,
  'step' | 'emptyOptimizerSteps' | 'forward' | 'forwardBackward' | 'optimStep' | 'sample' | 'promptLogprobs' | 'exportState' | 'dispose'
>;

/** How the engine makes its models: fresh, or restored from a state. */
export interface TrainerModels {
  create(options: LearnerOptions): Promise<TrainerModel>;
  fromState(options: LearnerOptions, state: LearnerState, restore: { optimizer: boolean }): Promise<TrainerModel>;
}

/** The real learner: a seeded base model with a LoRA adapter, trained with AdamW. */
export const LEARNER_MODELS: TrainerModels = {
  create: (options) => Learner.create(options),
  fromState: (options, state, restore) => Learner.fromState(options, state, restore),
};
