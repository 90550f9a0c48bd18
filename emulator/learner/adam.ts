import { LearnerInputError } from './errors';
import type { ParameterSet } from './adapter';

export interface AdamSettings {
  learningRate: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  /** Global-norm clipping threshold; 0 disables clipping. */
  gradClipNorm: number;
}

export interface AdamMoments {
  first: ParameterSet;
  second: ParameterSet;
}

export function validateAdamSettings(adam: AdamSettings): void {
  const check = (field: keyof AdamSettings, ok: (v: number) => boolean, expected: string) => {
    const value = adam?.[field];
    if (typeof value !== 'number' || !Number.isFinite(value) || !ok(value)) {
      throw new LearnerInputError(`adam.${field} must be ${expected}, got ${String(value)}`);
    }
  };
  check('learningRate', (v) => v >= 0, 'a finite number ≥ 0');
  check('beta1', (v) => v >= 0 && v < 1, 'in [0, 1)');
  check('beta2', (v) => v >= 0 && v < 1, 'in [0, 1)');
  check('eps', (v) => v >= 0, 'a finite number ≥ 0');
  check('weightDecay', (v) => v >= 0, 'a finite number ≥ 0');
  check('gradClipNorm', (v) => v >= 0, 'a finite number ≥ 0 (0 disables clipping)');
}

/** The global L2 norm of a set of gradients. */
export function globalNorm(gradients: ParameterSet): number {
  let sum = 0;
  for (const values of gradients.values()) for (let i = 0; i < values.length; i++) sum += values[i] * values[i];
  return Math.sqrt(sum);
}

/**
 * One AdamW step in place, as torch.optim.AdamW does it: gradients clipped to the global norm, decoupled weight
 * decay p ← p·(1 − lr·wd), bias-corrected moments. `step` is the 1-based index of this step.
 * Returns the gradient norm before clipping.
 */
export function adamWStep(params: ParameterSet, gradients: ParameterSet, moments: AdamMoments, adam: AdamSettings, step: number): number {
  const gradNorm = globalNorm(gradients);
  const clip = adam.gradClipNorm > 0 && gradNorm > adam.gradClipNorm ? adam.gradClipNorm / gradNorm : 1;
  const decay = 1 - adam.learningRate * adam.weightDecay;
  const firstCorrection = 1 - adam.beta1 ** step;
  const secondCorrection = 1 - adam.beta2 ** step;
  for (const [name, p] of params) {
    const g = gradients.get(name)!;
    const m = moments.first.get(name)!;
    const v = moments.second.get(name)!;
    for (let i = 0; i < p.length; i++) {
      const grad = g[i] * clip;
      m[i] = adam.beta1 * m[i] + (1 - adam.beta1) * grad;
      v[i] = adam.beta2 * v[i] + (1 - adam.beta2) * grad * grad;
      const denominator = Math.sqrt(v[i] / secondCorrection) + adam.eps;
      const update = denominator > 0 ? m[i] / firstCorrection / denominator : 0; // eps = 0 with a zero gradient
      p[i] = p[i] * decay - adam.learningRate * update;
    }
  }
  return gradNorm;
}
