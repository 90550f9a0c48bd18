import { BASE_DIMS, DECAY_RATES, FEATURE_WIDTH } from './base-model';

/**
 * The causal summary of a token sequence read so far; `writeRow` describes its latest position, which sees only
 * tokens at or before it. Bags are normalised by √(Σ weight²), so a bag of unrelated random embeddings keeps
 * the scale of a single embedding however long the context grows.
 */
export class CausalContext {
  private current: Float32Array | undefined;
  private previous: Float32Array | undefined;
  private readonly decaySums = DECAY_RATES.map(() => new Float64Array(BASE_DIMS.embedding));
  private readonly decayWeights = new Float64Array(DECAY_RATES.length); // Σ weight² per bag
  private readonly uniformSum = new Float64Array(BASE_DIMS.embedding);
  private count = 0;

  /** Reads the next token's embedding. */
  push(embedding: Float32Array): void {
    const latest = this.current;
    if (latest) {
      // The token that was latest now joins the decayed bags of earlier tokens.
      DECAY_RATES.forEach((rate, k) => {
        const sum = this.decaySums[k];
        for (let i = 0; i < sum.length; i++) sum[i] = rate * sum[i] + latest[i];
        this.decayWeights[k] = rate * rate * this.decayWeights[k] + 1;
      });
    }
    for (let i = 0; i < this.uniformSum.length; i++) this.uniformSum[i] += embedding[i];
    this.count += 1;
    this.previous = this.current;
    this.current = embedding;
  }

  /** Writes the features of the latest position into out[offset .. offset + FEATURE_WIDTH). */
  writeRow(out: Float32Array, offset: number): void {
    const d = BASE_DIMS.embedding;
    if (!this.current) throw new Error('CausalContext.writeRow before any token was read');
    out.set(this.current, offset);
    if (this.previous) out.set(this.previous, offset + d);
    else out.fill(0, offset + d, offset + 2 * d);
    DECAY_RATES.forEach((_, k) => {
      const start = offset + (2 + k) * d;
      const norm = this.decayWeights[k] > 0 ? 1 / Math.sqrt(this.decayWeights[k]) : 0;
      const sum = this.decaySums[k];
      for (let i = 0; i < d; i++) out[start + i] = sum[i] * norm;
    });
    const start = offset + (2 + DECAY_RATES.length) * d;
    const norm = 1 / Math.sqrt(this.count);
    for (let i = 0; i < d; i++) out[start + i] = this.uniformSum[i] * norm;
  }

  clone(): CausalContext {
    const copy = new CausalContext();
    copy.current = this.current;
    copy.previous = this.previous;
    this.decaySums.forEach((sum, k) => copy.decaySums[k].set(sum));
    copy.decayWeights.set(this.decayWeights);
    copy.uniformSum.set(this.uniformSum);
    copy.count = this.count;
    return copy;
  }
}

/** Features of every position of every sequence, rows concatenated in batch order. */
export function sequenceFeatures(sequences: number[][], embeddingOf: (tokenId: number) => Float32Array): Float32Array {
  const rows = sequences.reduce((n, s) => n + s.length, 0);
  const out = new Float32Array(rows * FEATURE_WIDTH);
  let row = 0;
  for (const tokens of sequences) {
    const context = new CausalContext();
    for (const token of tokens) {
      context.push(embeddingOf(token));
      context.writeRow(out, row++ * FEATURE_WIDTH);
    }
  }
  return out;
}
