import type { SweepArm, SweepMetric } from '../../config/rules/sweep';
import type { RoundInput, RoundResult } from '../round/contract';
import type { SweepRecord } from './record';

export * from './record';

/** A sweep (workflows/sweep/sweep.ts): the campaign's round, as arms. */
export interface SweepInput {
  /** The round as the campaign would run it without a sweep (its spec, data, budget, start). */
  round: RoundInput;
  arms: SweepArm[];
  select: { metric: SweepMetric; rungs: number; eta: number };
}

/** The sweep's result: the winner's round result (the campaign continues from it), the sweep's cost, and its record. */
export type SweepResult = RoundResult & { sweep: SweepRecord };
