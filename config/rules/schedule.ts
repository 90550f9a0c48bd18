import { seededRandom } from './random';
import type { LrSchedule } from '../io/spec';

/**
 * The learning rate at a global step: a pure function of the step, so a resumed run continues the schedule
 * exactly where it was.
 */
export function learningRateAt(step: number, totalSteps: number, base: number, schedule: LrSchedule): number {
  const warmup = Math.min(schedule.warmupSteps, totalSteps);
  if (step < warmup) return (base * (step + 1)) / warmup;
  if (schedule.kind === 'constant' || totalSteps <= warmup) return base;
  const progress = Math.min(1, (step - warmup) / Math.max(1, totalSteps - warmup));
  const floor = base * schedule.minRatio;
  if (schedule.kind === 'linear') return floor + (base - floor) * (1 - progress);
  return floor + (base - floor) * 0.5 * (1 + Math.cos(Math.PI * progress));
}

/** A seeded permutation (Fisher–Yates over mulberry32): the same seed and size give the same order. */
export function permutation(size: number, seed: number): number[] {
  const random = seededRandom(seed);
  const order = Array.from({ length: size }, (_v, i) => i);
  for (let i = size - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  return order;
}

export interface StepPlan {
  stepsPerEpoch: number;
  totalSteps: number;
}

export function planSteps(trainRows: number, batchSize: number, epochs: number): StepPlan {
  const stepsPerEpoch = Math.ceil(trainRows / batchSize);
  return { stepsPerEpoch, totalSteps: stepsPerEpoch * epochs };
}

/** Which training rows form global step `step`: epoch-wise seeded shuffles, consecutive batches. */
export function batchRows(
  step: number,
  trainRows: number,
  batchSize: number,
  seed: number,
): { epoch: number; batch: number; rows: number[] } {
  const { stepsPerEpoch } = planSteps(trainRows, batchSize, 1);
  const epoch = Math.floor(step / stepsPerEpoch);
  const batch = step % stepsPerEpoch;
  const order = permutation(trainRows, (seed * 1_000_003 + epoch) >>> 0);
  return { epoch, batch, rows: order.slice(batch * batchSize, (batch + 1) * batchSize) };
}

/**
 * The rows of global step `step` with gradient accumulation (`training.accumulate`): the step's effective batch of
 * `batchSize × passes` rows (epochs are of effective batches), as its passes of `batchSize` rows each.
 */
export function accumulatedRows(step: number, trainRows: number, batchSize: number, passes: number, seed: number): number[][] {
  const { rows } = batchRows(step, trainRows, batchSize * passes, seed);
  const out: number[][] = [];
  for (let pass = 0; pass * batchSize < rows.length && pass < passes; pass++)
    out.push(rows.slice(pass * batchSize, (pass + 1) * batchSize));
  return out;
}
