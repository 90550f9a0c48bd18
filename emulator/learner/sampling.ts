import { LearnerInputError } from './errors';
import type { RandomStream } from './prng';

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

/** One next-token distribution: log p of each active-vocabulary row and of each single unseen id. */
export interface TokenDistribution {
  seen: Float32Array;
  /** Row order of `seen`: token ids. */
  tokenIds: readonly number[];
  unseen: number;
  unseenCount: number;
}

/** A choice: a row of the active vocabulary, or the remainder class (an unseen id is then drawn uniformly). */
export type TokenChoice = { kind: 'seen'; row: number } | { kind: 'unseen' };

interface Candidate {
  choice: TokenChoice;
  score: number;
  /** How many vocabulary ids the candidate stands for (the remainder class stands for every unseen id). */
  count: number;
  tokenId: number;
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
 * Picks the next token: greedy at temperature 0, otherwise temperature, then top-k, then top-p over the whole
 * vocabulary (the remainder class counts as `unseenCount` tied tokens, so top-k and top-p may keep part of it),
 * then one draw. Ties go to the smaller token id; the remainder class loses ties.
 */
export function chooseToken(dist: TokenDistribution, params: SampleParams, random: RandomStream): TokenChoice {
  if (params.temperature === 0) return greedyChoice(dist);
  let candidates: Candidate[] = Array.from(dist.seen, (logprob, row) => ({
    choice: { kind: 'seen', row } as TokenChoice,
    score: logprob / params.temperature,
    count: 1,
    tokenId: dist.tokenIds[row],
  }));
  if (dist.unseenCount > 0) {
    candidates.push({ choice: { kind: 'unseen' }, score: dist.unseen / params.temperature, count: dist.unseenCount, tokenId: Infinity });
  }
  const topK = params.topK ?? 0;
  const topP = params.topP ?? 1;
  if (topK > 0 || topP < 1) {
    candidates.sort((a, b) => b.score - a.score || a.tokenId - b.tokenId);
    candidates = keepTopP(keepTopK(candidates, topK), topP);
  }
  const top = candidates.reduce((m, c) => Math.max(m, c.score), -Infinity);
  const masses = candidates.map((c) => c.count * Math.exp(c.score - top));
  let u = random.next() * masses.reduce((a, b) => a + b, 0);
  for (let i = 0; i < candidates.length; i++) {
    u -= masses[i];
    if (u < 0) return candidates[i].choice;
  }
  return candidates[candidates.length - 1].choice; // rounding left u a hair above 0
}

function greedyChoice(dist: TokenDistribution): TokenChoice {
  let best = -1;
  for (let row = 0; row < dist.seen.length; row++) {
    const better =
      best < 0 || dist.seen[row] > dist.seen[best] || (dist.seen[row] === dist.seen[best] && dist.tokenIds[row] < dist.tokenIds[best]);
    if (better) best = row;
  }
  if (dist.unseenCount > 0 && (best < 0 || dist.unseen > dist.seen[best])) return { kind: 'unseen' };
  return { kind: 'seen', row: best };
}

/** The k highest-scoring individual tokens (candidates sorted by score). */
function keepTopK(sorted: Candidate[], k: number): Candidate[] {
  if (k <= 0) return sorted;
  const kept: Candidate[] = [];
  let room = k;
  for (const candidate of sorted) {
    if (room === 0) break;
    const count = Math.min(candidate.count, room);
    kept.push({ ...candidate, count });
    room -= count;
  }
  return kept;
}

/** The smallest high-probability prefix whose mass reaches p (candidates sorted by score). */
function keepTopP(sorted: Candidate[], p: number): Candidate[] {
  if (p >= 1) return sorted;
  const top = sorted[0].score;
  const total = sorted.reduce((sum, c) => sum + c.count * Math.exp(c.score - top), 0);
  const kept: Candidate[] = [];
  let mass = 0;
  for (const candidate of sorted) {
    const each = Math.exp(candidate.score - top) / total;
    // Only as many of a tied block as are needed to reach p.
    const count = Math.min(candidate.count, Math.max(1, Math.ceil((p - mass) / each)));
    kept.push({ ...candidate, count });
    mass += count * each;
    if (mass >= p) break;
  }
  return kept;
}
