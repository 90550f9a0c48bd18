import path from 'node:path';
import type { EvaluationSpec, RewardSpec } from '../config/io/spec';
import { finalNumber, scoreCompletion } from './scoring';

export { finalNumber } from './scoring';

/**
 * Rewards for policy-gradient rounds: the built-in matchers (exact / contains / regex, as the evaluation scorer),
 * numeric answer match for GSM8K-style data, or a user module. Plus group-centred advantages.
 */
export type { RewardSpec } from '../config/io/spec';

export type RewardFunction = (completion: string, answer: string, prompt: string) => number | Promise<number>;

export function rewardFunction(spec: RewardSpec, baseDir = process.cwd()): RewardFunction {
  switch (spec.kind) {
    case 'exact':
    case 'contains':
    case 'regex': {
      const evaluation: EvaluationSpec = {
        scorer: spec.kind,
        pattern: spec.pattern,
        caseSensitive: spec.caseSensitive ?? false,
        normalizeWhitespace: spec.normalizeWhitespace ?? true,
      };
      return (completion, answer) => (scoreCompletion(evaluation, completion, answer) ? 1 : 0);
    }
    case 'numeric': {
      const tolerance = spec.tolerance ?? 1e-6;
      return (completion, answer) => {
        const got = finalNumber(completion);
        const want = finalNumber(answer);
        return got !== undefined && want !== undefined && Math.abs(got - want) <= tolerance ? 1 : 0;
      };
    }
    case 'module': {
      // eslint-disable-next-line @typescript-eslint/no-require-imports -- the user's reward module, loaded by path at run time
      const loaded = require(path.resolve(baseDir, spec.path)) as Record<string, unknown>;
      const fn = loaded[spec.export ?? 'reward'] ?? loaded.default;
      if (typeof fn !== 'function') throw new Error(`${spec.path}: exports no function '${spec.export ?? 'reward'}' (or default)`);
      return fn as RewardFunction;
    }
    case 'python':
      throw new Error(`a python reward ('${spec.name}') runs on its Python worker`);
  }
}

/**
 * Group-centred advantages: each completion's reward minus its group's mean (divided by the group's standard
 * deviation when `normalize`). A group whose rewards are all equal teaches nothing and is dropped (undefined).
 */
export function groupAdvantages(groups: number[][], options: { normalize?: boolean } = {}): (number[] | undefined)[] {
  return groups.map((rewards) => {
    if (rewards.length < 2) return undefined;
    const mean = rewards.reduce((a, r) => a + r, 0) / rewards.length;
    const variance = rewards.reduce((a, r) => a + (r - mean) ** 2, 0) / rewards.length;
    if (variance === 0) return undefined;
    const scale = options.normalize ? Math.sqrt(variance) : 1;
    return rewards.map((r) => (r - mean) / scale);
  });
}
