// Pure (no Temporal, no Node): a sweep's arms (a grid, or seeded random draws), each arm's spec, and the decision at a
// rung of successive halving. The spec (config/io/spec-sweep.ts) computes the arms once; the workflows apply them.
import { seededRandom } from './random';

/** A value an arm sets: a spec field's own (number, string or boolean). */
export type SweepValue = number | string | boolean;

/** A distribution to draw from (random search): numbers uniform or log-uniform in [low, high], or one of a list. */
export type SweepDistribution = { uniform: [number, number] } | { logUniform: [number, number] } | { choice: SweepValue[] };

/** One arm: its index (1-based) and the spec fields it sets (dotted paths: `training.learningRate`). */
export interface SweepArm {
  arm: number;
  assign: Record<string, SweepValue>;
}

/** `select.metric`: what the eval set says at each rung, and which way is better. */
export type SweepMetric = 'eval_loss' | 'accuracy';

export function lowerIsBetter(metric: SweepMetric): boolean {
  return metric === 'eval_loss';
}

/**
 * The arms: every combination of the listed values (a grid), in the order the fields and values are written; or, with
 * `samples`, that many draws (seeded), a list's values drawn uniformly among them.
 */
export function armsOf(over: Record<string, SweepValue[] | SweepDistribution>, samples: number | undefined, seed: number): SweepArm[] {
  const fields = Object.keys(over);
  if (samples === undefined) {
    let combos: Record<string, SweepValue>[] = [{}];
    for (const field of fields) {
      const values = over[field] as SweepValue[];
      combos = combos.flatMap((c) => values.map((v) => ({ ...c, [field]: v })));
    }
    return combos.map((assign, i) => ({ arm: i + 1, assign }));
  }
  const random = seededRandom(seed);
  return Array.from({ length: samples }, (_, i) => ({
    arm: i + 1,
    assign: Object.fromEntries(fields.map((f) => [f, draw(over[f]!, random)])),
  }));
}

function draw(d: SweepValue[] | SweepDistribution, random: () => number): SweepValue {
  if (Array.isArray(d)) return d[Math.floor(random() * d.length)]!;
  if ('choice' in d) return d.choice[Math.floor(random() * d.choice.length)]!;
  if ('uniform' in d) return d.uniform[0] + random() * (d.uniform[1] - d.uniform[0]);
  const [low, high] = d.logUniform;
  return Math.exp(Math.log(low) + random() * (Math.log(high) - Math.log(low)));
}

/** An object with the arm's fields set (a deep copy: the original is untouched). */
export function withAssignment<T extends object>(spec: T, assign: Record<string, SweepValue>): T {
  const copy = JSON.parse(JSON.stringify(spec)) as Record<string, unknown>;
  for (const [field, value] of Object.entries(assign)) {
    const parts = field.split('.');
    let node = copy;
    for (const part of parts.slice(0, -1)) {
      if (typeof node[part] !== 'object' || node[part] === null) node[part] = {};
      node = node[part] as Record<string, unknown>;
    }
    node[parts[parts.length - 1]!] = value;
  }
  return copy as T;
}

/** An arm as people read it: `training.learningRate=0.001, training.loraRank=8`. */
export function describeAssignment(assign: Record<string, SweepValue>): string {
  return Object.entries(assign)
    .map(([f, v]) => `${f}=${typeof v === 'number' ? Number(v.toPrecision(4)) : v}`)
    .join(', ');
}

/** An arm's figure at a rung: its metric on the eval set (never the test set). */
export interface RungFigure {
  arm: number;
  value: number;
}

/**
 * Successive halving at a rung: of the arms measured, keep the best ⌈n / η⌉ by the metric (ties: the lower arm
 * number), the rest stop. Arms without a finite figure are ranked last.
 */
export function rungDecision(figures: RungFigure[], metric: SweepMetric, eta: number): { kept: number[]; stopped: number[] } {
  const sign = lowerIsBetter(metric) ? 1 : -1;
  const score = (f: RungFigure) => (Number.isFinite(f.value) ? sign * f.value : Infinity);
  const ranked = [...figures].sort((a, b) => score(a) - score(b) || a.arm - b.arm);
  const keep = Math.max(1, Math.ceil(figures.length / eta));
  return {
    kept: ranked
      .slice(0, keep)
      .map((f) => f.arm)
      .sort((a, b) => a - b),
    stopped: ranked
      .slice(keep)
      .map((f) => f.arm)
      .sort((a, b) => a - b),
  };
}
