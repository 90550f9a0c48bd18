import type { EvaluationSpec } from '../io/spec-evaluation';
import type { SamplingSpec } from '../io/spec-training';

/** How evaluation draws its answers, every default filled in. */
export interface EvaluationSampling {
  temperature: number;
  maxTokens: number;
  topP?: number;
  topK?: number;
  stop?: string[];
  /** Answers per prompt (pass@n beside pass@1 when above 1). */
  n: number;
  /** The top-level `sampling.seed`, when set: part of what makes two measures alike (the seeds draws send: config/rules/sampling.ts drawSeed). */
  seed?: number;
}

/**
 * `evaluation.sampling` over its defaults: greedy, one answer per prompt, the top-level block's `maxTokens` and
 * `stop` (an answer is as long, and ends where, a training draw's would). The training draws' temperature, topP and
 * topK never reach evaluation: a GRPO round samples hot to explore and is still measured greedily.
 */
export function evaluationSampling(spec: { sampling: SamplingSpec; evaluation: EvaluationSpec }): EvaluationSampling {
  const own = spec.evaluation.sampling;
  const stop = own?.stop ?? spec.sampling.stop;
  return {
    temperature: own?.temperature ?? 0,
    maxTokens: own?.maxTokens ?? spec.sampling.maxTokens,
    ...(own?.topP !== undefined ? { topP: own.topP } : {}),
    ...(own?.topK !== undefined ? { topK: own.topK } : {}),
    ...(stop ? { stop } : {}),
    n: own?.n ?? 1,
    ...(spec.sampling.seed !== undefined ? { seed: spec.sampling.seed } : {}),
  };
}

/**
 * The unbiased pass@k of one prompt from n answers of which c are right (Chen et al. 2021, "Evaluating Large
 * Language Models Trained on Code"): 1 − C(n−c, k) / C(n, k), computed as a product so large n stays exact enough.
 */
export function passAtK(n: number, c: number, k: number): number {
  if (k > n) throw new RangeError(`pass@${k} needs at least ${k} answers per prompt (there are ${n})`);
  if (n - c < k) return 1;
  let allWrong = 1;
  for (let i = n - c + 1; i <= n; i++) allWrong *= 1 - k / i;
  return 1 - allWrong;
}
