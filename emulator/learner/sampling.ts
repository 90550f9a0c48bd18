import { LearnerInputError } from './errors';
import type { RandomStream } from './prng';
import type { OutputGrid } from './vocabulary';

export interface SampleParams {
  maxTokens: number;
  /** 0 = greedy. */
  temperature: number;
  /** Nucleus sampling threshold in (0, 1]; undefined or 1 = off. */
  topP?: number;
  /** 0 or undefined = off. */
  topK?: number;
  /** Seeds the draws; without it the learner's own stream is used (deterministic for a sequence of calls). */
  seed?: number;
  /** Generation ends once one of these has been produced; it is kept at the end of `tokens`. */
  stopTokenSequences?: number[][];
  /** Generation ends once one of these is produced; it is kept as the last token. */
  eosTokenIds?: number[];
}

/**
 * One next-token distribution: log p of each active-vocabulary token, and of every other id through the output
 * grid: unseen token (i, j) has log p = rows[i] + columns[j].
 */
export interface TokenDistribution {
  seen: Float32Array;
  /** Row order of `seen`: token ids. */
  tokenIds: readonly number[];
  rows: Float32Array;
  columns: Float32Array;
  grid: OutputGrid;
}

/** A drawn token and its log p (at temperature 1, before top-k and top-p). */
export interface TokenChoice {
  token: number;
  logprob: number;
}

export function validateSampleParams(params: SampleParams, isTokenId: (value: unknown) => boolean): void {
  const fail = (message: string) => {
    throw new LearnerInputError(`sampling params: ${message}`);
  };
  if (!Number.isInteger(params?.maxTokens) || params.maxTokens < 0)
    fail(`maxTokens must be an integer ≥ 0, got ${String(params?.maxTokens)}`);
  if (!Number.isFinite(params.temperature) || params.temperature < 0) fail(`temperature must be ≥ 0, got ${String(params.temperature)}`);
  if (params.topP !== undefined && !(params.topP > 0 && params.topP <= 1)) fail(`topP must be in (0, 1], got ${String(params.topP)}`);
  if (params.topK !== undefined && (!Number.isInteger(params.topK) || params.topK < 0))
    fail(`topK must be an integer ≥ 0, got ${String(params.topK)}`);
  if (params.seed !== undefined && !Number.isSafeInteger(params.seed)) fail(`seed must be an integer, got ${String(params.seed)}`);
  for (const sequence of params.stopTokenSequences ?? []) {
    if (!Array.isArray(sequence) || sequence.length === 0 || !sequence.every(isTokenId)) {
      fail('each stop token sequence must be a non-empty array of token ids of this model');
    }
  }
  if (params.eosTokenIds !== undefined && !params.eosTokenIds.every(isTokenId)) fail('eosTokenIds must be token ids of this model');
}

/**
 * Picks the next token: greedy at temperature 0; with top-k or top-p, temperature, then top-k, then top-p over the
 * whole vocabulary, then one draw; otherwise one draw at the temperature, without listing the unseen ids (the grid
 * gives each row's unseen mass). Ties go to the smaller token id.
 */
export function chooseToken(dist: TokenDistribution, params: SampleParams, random: RandomStream): TokenChoice {
  if (params.temperature === 0) return greedyChoice(dist);
  if ((params.topK ?? 0) > 0 || (params.topP ?? 1) < 1) return filteredChoice(dist, params, random);
  return gridChoice(dist, params.temperature, random);
}

function seenChoice(dist: TokenDistribution, row: number): TokenChoice {
  return { token: dist.tokenIds[row], logprob: dist.seen[row] };
}

function unseenChoice(dist: TokenDistribution, row: number, column: number): TokenChoice {
  return { token: dist.grid.tokenAt(row, column), logprob: dist.rows[row] + dist.columns[column] };
}

/** Whether `column` of `row` holds an unseen id. */
function unseenCell(grid: OutputGrid, row: number, column: number): boolean {
  return column < grid.columnsIn(row) && !grid.seenColumns(row).includes(column);
}

function greedyChoice(dist: TokenDistribution): TokenChoice {
  let best: TokenChoice | undefined;
  const better = (c: TokenChoice) => !best || c.logprob > best.logprob || (c.logprob === best.logprob && c.token < best.token);
  dist.seen.forEach((_, row) => {
    const c = seenChoice(dist, row);
    if (better(c)) best = c;
  });
  if (dist.grid.unseenCount > 0) {
    const byScore = Array.from(dist.columns.keys()).sort((a, b) => dist.columns[b] - dist.columns[a]);
    for (let row = 0; row < dist.grid.rows; row++) {
      // Each row's best unseen id is its best column that holds one (ties between equal floats are vanishingly rare).
      const column = byScore.find((j) => unseenCell(dist.grid, row, j));
      if (column !== undefined) {
        const c = unseenChoice(dist, row, column);
        if (better(c)) best = c;
      }
    }
  }
  return best!;
}

/** Temperature over the whole vocabulary, unseen ids by grid row: pick a token, or a row then one of its unseen ids. */
function gridChoice(dist: TokenDistribution, temperature: number, random: RandomStream): TokenChoice {
  const { grid } = dist;
  const columnShift = Math.max(...dist.columns) / temperature;
  const columnWeights = Float64Array.from(dist.columns, (c) => Math.exp(c / temperature - columnShift));
  const columnPrefix = new Float64Array(grid.columns + 1);
  columnWeights.forEach((w, j) => (columnPrefix[j + 1] = columnPrefix[j] + w));
  // Row i's unseen mass (scaled by e^{-shift}): e^{rows_i/T} · Σ over its unseen columns of e^{columns_j/T}.
  const rowShift = grid.unseenCount > 0 ? Math.max(...dist.rows) / temperature + columnShift : -Infinity;
  const seenMax = dist.seen.reduce((m, v) => Math.max(m, v), -Infinity) / temperature;
  const shift = Math.max(rowShift, seenMax);
  const seenWeights = Float64Array.from(dist.seen, (v) => Math.exp(v / temperature - shift));
  const rowWeights = new Float64Array(grid.unseenCount > 0 ? grid.rows : 0).map((_, i) => {
    const unseen = grid.seenColumns(i).reduce((sum, j) => sum - columnWeights[j], columnPrefix[grid.columnsIn(i)]);
    return Math.exp(dist.rows[i] / temperature + columnShift - shift) * Math.max(0, unseen);
  });
  const total = seenWeights.reduce((a, b) => a + b, 0) + rowWeights.reduce((a, b) => a + b, 0);
  let u = random.next() * total;
  for (let row = 0; row < seenWeights.length; row++) {
    u -= seenWeights[row];
    if (u < 0) return seenChoice(dist, row);
  }
  let row = rowWeights.findIndex((w) => (u -= w) < 0);
  // Rounding left u a hair above 0: the last row with mass, else the last seen token.
  for (let i = rowWeights.length - 1; row < 0 && i >= 0; i--) if (rowWeights[i] > 0) row = i;
  if (row < 0) return seenChoice(dist, seenWeights.length - 1);
  return unseenChoice(dist, row, drawColumn(grid, row, columnWeights, random));
}

/** One of `row`'s unseen columns, drawn in proportion to its weight. */
function drawColumn(grid: OutputGrid, row: number, weights: Float64Array, random: RandomStream): number {
  const columns = Array.from({ length: grid.columnsIn(row) }, (_, j) => j).filter((j) => !grid.seenColumns(row).includes(j));
  let u = random.next() * columns.reduce((sum, j) => sum + weights[j], 0);
  for (const j of columns) {
    u -= weights[j];
    if (u < 0) return j;
  }
  return columns[columns.length - 1];
}

/**
 * Top-k and top-p need a ranking: with top-k, of each grid row's best k unseen ids (the global top k is among them;
 * ties at a row's k-th value are all taken); with top-p alone, of the whole vocabulary.
 */
function filteredChoice(dist: TokenDistribution, params: SampleParams, random: RandomStream): TokenChoice {
  const topK = (params.topK ?? 0) > 0 ? params.topK! : undefined;
  const candidates: TokenChoice[] = Array.from(dist.seen, (_, row) => seenChoice(dist, row));
  if (dist.grid.unseenCount > 0) {
    const byScore = topK === undefined ? undefined : Array.from(dist.columns.keys()).sort((a, b) => dist.columns[b] - dist.columns[a]);
    for (let row = 0; row < dist.grid.rows; row++) {
      if (byScore) {
        // Along byScore a row's logprobs never increase: stop after k, and after every id tied with the k-th.
        let taken = 0;
        let kth = -Infinity;
        for (const column of byScore) {
          if (!unseenCell(dist.grid, row, column)) continue;
          const c = unseenChoice(dist, row, column);
          if (taken >= topK! && c.logprob < kth) break;
          candidates.push(c);
          taken += 1;
          if (taken === topK) kth = c.logprob;
        }
        continue;
      }
      for (let column = 0; column < dist.grid.columnsIn(row); column++) {
        if (unseenCell(dist.grid, row, column)) candidates.push(unseenChoice(dist, row, column));
      }
    }
  }
  candidates.sort((a, b) => b.logprob - a.logprob || a.token - b.token);
  const kept = keepTopP(candidates.slice(0, topK), params.topP ?? 1, params.temperature);
  const top = kept[0].logprob / params.temperature;
  const masses = kept.map((c) => Math.exp(c.logprob / params.temperature - top));
  let u = random.next() * masses.reduce((a, b) => a + b, 0);
  for (let i = 0; i < kept.length; i++) {
    u -= masses[i];
    if (u < 0) return kept[i];
  }
  return kept[kept.length - 1]; // rounding left u a hair above 0
}

/** The smallest high-probability prefix whose mass (at the temperature) reaches p (candidates sorted by logprob). */
function keepTopP(sorted: TokenChoice[], p: number, temperature: number): TokenChoice[] {
  if (p >= 1) return sorted;
  const top = sorted[0].logprob / temperature;
  const weights = sorted.map((c) => Math.exp(c.logprob / temperature - top));
  const total = weights.reduce((a, b) => a + b, 0);
  let mass = 0;
  for (let i = 0; i < sorted.length; i++) {
    mass += weights[i] / total;
    if (mass >= p) return sorted.slice(0, i + 1);
  }
  return sorted;
}
