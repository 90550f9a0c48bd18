import { abilitiesOf, type Dialect, type Wire } from './dialects';

/**
 * What a step's loss figure is, per dialect and loss type, and the per-trained-token loss Roundhouse reports from it
 * (`train/loss_per_token`, the segment's latest and mean loss). Sources: docs/research/provider-caveats-2026-12.md §3.
 */

/** GRPO's aggregation; Roundhouse always sends one (Together's default for an unset `agg_type` is not documented). */
export type GrpoAggregation = 'token_mean' | 'sequence_mean' | 'fixed_horizon';

/** The aggregation every official Together GRPO example sets explicitly, and Roundhouse's default. */
export const DEFAULT_GRPO_AGGREGATION: GrpoAggregation = 'token_mean';

/** A step's loss as the round asked for it: a provider loss type, or DPO's loss computed by the round itself. */
export type StepLoss =
  | { type: 'cross_entropy' | 'importance_sampling' | 'ppo' }
  | { type: 'grpo'; aggregation?: GrpoAggregation }
  /** The mean over the step's preference pairs of −log σ(β·margin), computed by the round (a custom loss). */
  | { type: 'dpo' }
  /** The user's loss function's figure (`@roundhouse.loss`), as it returns it: its unit is the function's. */
  | { type: 'custom' };

/**
 * What the loss figure the dialect's client returns is:
 * - `sum`: Σ over trained (weighted) tokens;
 * - `token_mean`: that sum over the number of trained tokens (already per token);
 * - `sequence_mean`: the mean over sequences of each sequence's token mean;
 * - `fixed_horizon`: the sum over (sequences × a horizon the provider fixes);
 * - `pair_mean`: DPO's mean over pairs;
 * - `as_returned`: a user's loss function's figure, reported as the function returns it.
 */
export type LossUnit = 'sum' | GrpoAggregation | 'pair_mean' | 'as_returned';

/** Per wire: the unit of each provider loss's figure, as its client hands it to the round (a dialect's is its wire's). */
const UNITS: Record<Wire, (loss: Exclude<StepLoss, { type: 'dpo' | 'custom' }>) => LossUnit> = {
  // Together's guide: cross-entropy's `result.loss` is a sum over the batch's trained tokens. GRPO follows the
  // `agg_type` Roundhouse sends. IMPORTANCE_SAMPLING and PPO are not documented; we read them as sums (the SDK's
  // Tinker shim labels every loss `loss:sum`, and the emulator computes them so).
  together: togetherUnit,
  // Tinker: the client reads `metrics["loss:sum"]` (a `:sum` metric adds up across chunks), or on servers without
  // it (SkyRL) adds up each position's `elementwise_loss`: a sum for every built-in loss.
  tinker: () => 'sum',
  // Baseten Loops: the client sends `skip_token_normalization` and refuses a result that did not honour it.
  baseten: () => 'sum',
};

function togetherUnit(loss: Exclude<StepLoss, { type: 'dpo' | 'custom' }>): LossUnit {
  return loss.type === 'grpo' ? (loss.aggregation ?? DEFAULT_GRPO_AGGREGATION) : 'sum';
}

export function lossUnitOf(dialect: Dialect, loss: StepLoss): LossUnit {
  if (loss.type === 'dpo') return 'pair_mean';
  if (loss.type === 'custom') return 'as_returned';
  return UNITS[abilitiesOf(dialect).speaks](loss);
}

/**
 * The loss per trained token of a step whose loss figure is `figure` over `tokens` trained tokens. A sum is divided
 * by the tokens; a figure the provider already normalised is reported as it is (a sequence mean weighs each sequence
 * equally, a fixed-horizon figure divides by the horizon rather than the trained tokens, DPO's is per pair).
 */
export function lossPerToken(dialect: Dialect, loss: StepLoss, figure: number, tokens: number): number {
  return lossUnitOf(dialect, loss) === 'sum' ? figure / Math.max(1, tokens) : figure;
}
