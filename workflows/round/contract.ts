import type { PythonCheck } from '../../config/rules/python-calls';
import { defineQuery, defineSignal } from '@temporalio/workflow';
import type { CampaignSpec } from '../../config/io/spec';
import { ROUND_WAITING_SIGNAL, type ProvisioningWait } from '../../config/rules/capacity';
import type { Rollback } from '../../config/rules/lineage';
import type { TokenUsage } from '../../config/rules/usage';
import type { PriceOverrides, RoundPricing } from '../../config/rules/prices';
import type { ArmOfSweep, SweepRecord } from '../sweep/record';
import type { SweepValue } from '../../config/rules/sweep';
import type { RoundKind } from '../../config/rules/round-kinds';

/**
 * The round's contract: its input and result, its messages, and the payloads its workflow and activities exchange.
 * Both sides import these types from here (activities as types only); neither imports the other's.
 */

/** What a round needs from the campaign spec (no secrets: API keys stay in the worker's environment). */
export type RoundSpec = Pick<CampaignSpec, 'name' | 'provider' | 'training' | 'sampling' | 'evaluation' | 'advanced'> &
  Partial<Pick<CampaignSpec, 'round' | 'tracking'>> & {
    /** Staged campaigns: the stage the round runs in (1-based), and its name; the tracker nests the round under it. */
    stage?: RoundStage;
    /** The checkpoints' TTL at the provider (Tinker), where the campaign's `retention.ttl` sets one. */
    retention?: { ttl?: number };
    /** An arm of a sweep: the tracker nests its run under the sweep's (the campaign's own id, the arm, its fields). */
    sweepArm?: { campaignId: string; arm: number; assign: Record<string, SweepValue> };
  };

export interface RoundStage {
  stage: number;
  name: string;
}

/** What every round of a campaign runs with: its part of the campaign's spec (a staged campaign's: its stage's). */
export function roundSpecOf(spec: CampaignSpec, stage?: RoundStage): RoundSpec {
  const { name, provider, training, sampling, evaluation, advanced, round, tracking, retention } = spec;
  return {
    name,
    provider,
    training,
    sampling,
    evaluation,
    advanced,
    round,
    ...(tracking ? { tracking } : {}),
    ...(retention?.ttl !== undefined ? { retention: { ttl: retention.ttl } } : {}),
    ...(stage ? { stage } : {}),
  };
}

export interface RoundInput {
  /** Business identity: idempotency keys are `${campaignId}/r${round}/…`. */
  campaignId: string;
  /** 1-based. */
  round: number;
  spec: RoundSpec;
  /** Dataset references: paths, and the sha256 they must still have (checked before anything is provisioned). */
  data: { train: string; eval: string; trainSha256?: string; evalSha256?: string; test?: string };
  /** Start from a training checkpoint (weights + optimizer + step) instead of the base model. */
  startFrom?: { checkpointId: string; loadOptimizer: boolean };
  /** Measure the starting weights only (no training step): how a line's champion is re-scored on new rows. */
  evaluateOnly?: boolean;
  /** Folder the round's report and evaluations are written to. */
  reportDir: string;
  /** Limits checked before every training segment; reaching one stops training early (status `stopped`). */
  budget?: RoundBudget;
  /** Also sample and score these rows after training (the campaign picks the next round's data from the mistakes). */
  pool?: string;
  /** Python functions the campaign will call after this round (its data policy): checked with the round's own. */
  pythonChecks?: PythonCheck[];
  /** An arm of a sweep (workflows/sweep/): at each rung it reports its eval figure to the sweep and waits to go on. */
  arm?: ArmOfSweep;
  /**
   * A trainer the sweep holds for several arms (their sessions side by side): the round opens its sessions there and
   * ends only them; the sweep bills and releases the trainer. Gone (released, dead), the round provisions its own.
   */
  sharedTrainer?: { resourceId: string };
}

export interface RoundBudget {
  /** Wall-clock deadline (ms since epoch). */
  deadlineMs?: number;
  /** GPU-minutes this round may still use. */
  maxGpuMinutes?: number;
  /** Dollars this round may still spend (docs/design/budget.md). */
  maxUsd?: number;
  /** `budget.prices`: negotiated rates over the documented defaults. */
  prices?: PriceOverrides;
  /** Spent elsewhere (a sweep's shared trainers): training stops now, for this reason. */
  exhausted?: string;
}

export type RoundPhase =
  | 'validating'
  | 'provisioning'
  | 'baseline'
  | 'training'
  | 'checkpointing'
  | 'sampling'
  | 'evaluating'
  | 'paused'
  | 'cleanup'
  | 'completed'
  | 'failed'
  | 'cancelled'
  | 'stopped';

export interface RoundProgress {
  campaignId: string;
  round: number;
  phase: RoundPhase;
  /** Optimizer steps confirmed (updated at every segment boundary; live steps are in the training activity's heartbeat). */
  step: number;
  totalSteps: number;
  latestLoss?: number;
  baselineLoss?: number;
  /** GRPO: mean reward of the latest step's samples. */
  latestReward?: number;
  /** DPO: mean preference margin (policy − reference, chosen − rejected) of the latest step's pairs, in nats. */
  latestMargin?: number;
  /** Custom rounds: the loss function's metrics at the latest step. */
  latestMetrics?: Record<string, number>;
  /** GPU-minutes held so far (wall time since the trainer became ready × its GPUs). */
  gpuMinutes: number;
  /** Estimated provider cost so far, when the provider quotes a price (or the spec prices tokens). */
  costUsd?: number;
  /** Tokens processed so far, where activities counted them (what Tinker bills): prefill, sample, train. */
  tokens?: TokenUsage;
  resourceId?: string;
  sessionId?: string;
  paused?: boolean;
  /** Recoveries from provider-side failures so far, and the latest in a line. */
  recoveries?: number;
  lastRecovery?: string;
  /** While provisioning waits for the provider's GPUs (told by the provisioning activity). */
  waiting?: ProvisioningWait;
  /** The latest evaluations during training (`evaluation.every`): the curve `watch` draws. */
  evaluations?: { step: number; loss: number; metric?: number }[];
  /** A sweep's round: its arms side by side, and the decision at each rung. */
  sweep?: SweepRecord;
}

/** Why and where a round stopped early (`evaluation.earlyStop`): it finished from the best evaluated weights. */
export interface EarlyStop {
  on: 'loss' | 'metric';
  /** The evaluation that ended training, and the best one (whose weights the round finished from). */
  stoppedAtStep: number;
  bestStep: number;
  bestValue: number;
  bestCheckpointId: string;
  patience: number;
}

/** A recovery from a provider-side failure: what failed, where the round rolled back to, and what it cost. */
export interface RoundRecovery {
  /** The phase that failed (baseline, training, checkpointing, sampler-weights, evaluation). */
  phase: string;
  errorType: string;
  /** The provider's code (e.g. INTERNAL_ERROR, SESSION_NOT_ACTIVE) where it gave one. */
  code?: string;
  message: string;
  /** The step the round had reached, and the checkpoint step it resumed from (steps rolled back = the difference). */
  failedAtStep: number;
  rolledBackTo: number;
  stepsRolledBack: number;
  /** Resumed on a newly provisioned trainer (the old one was not ready), else on a new session of the same one. */
  newTrainer: boolean;
  /** The lineage the round continued under: its operations' keys carry it. */
  lineage: number;
  /** GPU time spent on work the rollback discarded (since the checkpoint, or the phase's start). */
  gpuMinutesLost: number;
  checkpointId: string | null;
}

export type RoundStatus = 'completed' | 'failed' | 'cancelled' | 'stopped';

export interface RoundResult {
  campaignId: string;
  round: number;
  status: RoundStatus;
  reportPath: string;
  /** Set when the report could not be written (the round's result stands; the message says why). */
  reportError?: string;
  evaluationsPath?: string;
  /** SFT and GRPO: pass@1 of the eval set's answers (DPO: preference accuracy). */
  accuracy?: number;
  /** With `evaluation.sampling.n` > 1: pass@n of the eval set (the unbiased estimate, averaged over its rows). */
  passAtK?: { k: number; value: number };
  baselineLoss?: number;
  trainedLoss?: number;
  trainingCheckpointId?: string;
  samplerCheckpointId?: string;
  stepsApplied: number;
  totalSteps: number;
  gpuMinutes: number;
  costUsd?: number;
  /**
   * With a dollar budget: what the round could spend, what it spent (settled from the tokens processed or the GPU time
   * held), how it was priced, and the sum of the estimates its units of work were admitted on.
   */
  budget?: { maxUsd: number; spentUsd: number; pricing: RoundPricing; estimatedUsd: number };
  /** A sweep's round: the winner's result, with the sweep's record (its arms, the decision at each rung). */
  sweep?: SweepRecord;
  /** Tokens the round processed (what Tinker bills), counted by its activities: prefill, sample, train. */
  tokens?: TokenUsage;
  errorType?: string;
  /** Why a `failed` round failed (its error's message, e.g. the model the provider does not support). */
  errorMessage?: string;
  /** Why a `stopped` round ended early. */
  stopReason?: string;
  /** Recoveries from provider-side failures, in order. */
  recoveries?: RoundRecovery[];
  /** Provisionings that waited for the provider's GPUs: how long, and how many creates it took. */
  capacityWaits?: { creates: number; waitedMinutes: number }[];
  /** The latest rolling training checkpoints (`training.checkpointEvery.keep`), oldest first. */
  checkpoints?: { checkpointId: string; step: number; lineage: number }[];
  poolEvaluationsPath?: string;
  poolAccuracy?: number;
  /** `data.test`: the final weights scored on the held-out test set (never read by any choice). */
  test?: TestFigures;
  kind?: RoundKind;
  /** GRPO: mean reward of the first and of the latest trained step's samples. */
  firstReward?: number;
  latestReward?: number;
  /** DPO: eval preference accuracy and mean margin before and after training (`accuracy` is the trained one). */
  baselineAccuracy?: number;
  baselineMargin?: number;
  trainedMargin?: number;
  /** Custom: the loss function's metrics on the eval set before and after training (`baselineLoss`/`trainedLoss` are its loss). */
  baselineLossMetrics?: Record<string, number>;
  trainedLossMetrics?: Record<string, number>;
  /** Evaluations during training (`evaluation.every`), in step order; after a rollback, the kept weights' only. */
  evaluationCurve?: EvaluationPoint[];
  earlyStop?: EarlyStop;
  /** The code sandbox mode the round's Python worker(s) said they run (`describe`), or why they refuse one. */
  sandbox?: string;
}

// ---------------------------------------------------------------------------------------------------------------
// Payloads between the round workflow and its activities.
// ---------------------------------------------------------------------------------------------------------------

/** A checkpoint's score on a test set: the share right, over how many rows, and the set's sha256 (what it is comparable with). */
export interface TestFigures {
  accuracy: number;
  rows: number;
  sha256?: string;
  evaluationsPath?: string;
}

/** The round's datasets once checked: locations and the sha256 they had (activities refuse data that changed). */
export interface RoundData {
  train: string;
  eval: string;
  trainSha256: string;
  evalSha256: string;
  test?: string;
}

/** What the checks before provisioning found (`prepareRound`): the data's hashes, the step plan, the price. */
export interface RoundPlan {
  trainSha256: string;
  evalSha256: string;
  trainRows: number;
  evalRows: number;
  stepsPerEpoch: number;
  totalSteps: number;
  gpuCount: number;
  /** The provider's quoted price of the trainer resource per hour (USD), when it quotes one. */
  pricePerHour?: number;
  /** How the round's spend is priced, with a dollar budget (config/rules/prices.ts). */
  pricing?: RoundPricing;
}

/**
 * A dollar budget on a provider that bills tokens, as an activity gets it: what the round may still spend, and the
 * prices. The activity prices each operation before submitting it (activities/usage.ts).
 */
export interface SpendGuard {
  leftUsd: number;
  prices: TokenUsage;
}

/** What a forward-only pass over the round's data needs: whose keys (`label`, and the lineage after a rollback). */
export interface PhaseInput {
  campaignId: string;
  round: number;
  label: string;
  /** After a rollback: the lineage its keys carry. */
  lineage?: number;
  spec: RoundSpec;
  data: RoundData;
  sessionId: string;
  /** A dollar budget on a provider that bills tokens: operations are priced before they are submitted. */
  spend?: SpendGuard;
}

/** A provisioned trainer (`provisionTrainer`). */
export interface ProvisionedTrainer {
  resourceId: string;
  /** When it was seen ready (ms since epoch). */
  readyAtMs: number;
  /** Set when the provider had no GPUs at first: how long provisioning waited, and how many creates it took. */
  capacityWait?: { creates: number; waitedMs: number };
}

export interface TrainingCursor {
  /** Round-local optimizer steps confirmed applied. */
  step: number;
}

export interface SegmentInput {
  campaignId: string;
  round: number;
  spec: RoundSpec;
  data: RoundData;
  sessionId: string;
  /** The provider's step counter when the session opened (non-zero when resumed from a checkpoint). */
  stepOffset: number;
  cursor: TrainingCursor;
  totalSteps: number;
  /** Where the segment's step records are written (atomically). */
  stepsDir: string;
  /** Rollbacks so far: keys carry the lineage so a provider's deduplication never returns a failed lineage's records. */
  lineage?: number;
  /** The round's latest training checkpoint (or where training started): rolling checkpoints count from it. */
  lastCheckpoint?: { step: number; savedAtMs: number };
  /** A dollar budget on a provider that bills tokens: a step that would cross it is not submitted. */
  spend?: SpendGuard;
}

export interface SegmentResult {
  cursor: TrainingCursor;
  stepsApplied: number;
  latestLoss?: number;
  meanLoss?: number;
  /** Rolling checkpoints this segment saved. */
  checkpoints?: TrainingCheckpoint[];
  /** Tokens this segment had processed (what a per-token biller charges). */
  usage?: TokenUsage;
  /** The segment stopped because its next step would have crossed the dollar budget. */
  budgetReached?: string;
}

/** A rolling training checkpoint a segment saved: the trainer's full state at a confirmed round step. */
export interface TrainingCheckpoint {
  checkpointId: string;
  step: number;
  savedAtMs: number;
  lineage: number;
}

export type { Rollback };

/** What the round reads of any kind's segment (the kinds' results add their own figures). */
export interface SegmentOutcome {
  cursor: TrainingCursor;
  checkpoints?: TrainingCheckpoint[];
  latestLoss?: number;
  latestReward?: number;
  firstReward?: number;
  latestMargin?: number;
  /** Custom rounds: the loss function's metrics at the segment's last step. */
  latestMetrics?: Record<string, number>;
  usage?: TokenUsage;
}

/** GRPO's segment: where it keeps each step's samples, and the frozen reference session (KL penalty). */
export interface GrpoSegmentInput extends SegmentInput {
  /** Where each step's samples are kept (`s0000012.json`): the step's training input, reused on retry. */
  samplesDir: string;
  /** A frozen session holding the reference policy, for the KL penalty (`round.grpo.reference`). */
  referenceSessionId?: string;
  /** A Python reward's batches and its per-sample records (`s0000012/p3-c1.json`), kept across lineages. */
  rewardsDir?: string;
  /**
   * A multi-turn environment's records: per step, each episode's turns as the sampler gateway recorded them
   * (`s0000012/p3-c1/t2-<digest>.json`: prompt tokens, completion tokens, logprobs) and its result (`p3-c1.json`).
   */
  episodesDir?: string;
  /** `round.grpo.loss: { kind: python }`: where each step's loss call is recorded (as a custom round's are). */
  lossDir?: string;
}

export interface GrpoSegmentResult extends SegmentResult {
  firstReward?: number;
  latestReward?: number;
  meanReward?: number;
}

/** DPO's segment: the reference logprobs file computed before training. */
export interface DpoSegmentInput extends SegmentInput {
  referencePath: string;
}

export interface DpoSegmentResult extends SegmentResult {
  latestMargin?: number;
  latestAccuracy?: number;
}

/** A custom round's segment: where its loss calls are recorded. */
export interface CustomSegmentInput extends SegmentInput {
  lossDir: string;
  /** `round.custom.reference: start`: the starting weights' logprobs of every completion (computeCustomReference). */
  referencePath?: string;
}

export interface CustomSegmentResult extends SegmentResult {
  /** The loss function's metrics at the segment's last step. */
  latestMetrics?: Record<string, number>;
}

/** A custom round's measure of a session's weights: the loss function on the eval set, forward only. */
export interface CustomLossEvaluation {
  loss: number;
  metrics: Record<string, number>;
  rows: number;
  usage?: TokenUsage;
}

/** DPO's reference logprobs, computed on the starting weights (`stepOffset`: the session's step then) into `outputPath`. */
export interface DpoReferenceInput extends Omit<PhaseInput, 'label'> {
  stepOffset: number;
  outputPath: string;
}

/** DPO's measure of a session's weights on the eval pairs (`evaluateDpo`). */
export interface DpoEvaluation {
  loss: number;
  accuracy: number;
  meanMargin: number;
  pairs: number;
  /** Tokens the evaluation had processed. */
  usage?: TokenUsage;
}

/** An evaluation during training (`evaluation.every`): the weights at a step, measured between two segments. */
export interface EvaluationPoint {
  /** The round step the weights were at (optimizer steps applied). */
  step: number;
  /** Eval loss: per trained token (SFT, GRPO), or the mean DPO loss per pair. */
  loss: number;
  /** The metric: the sampled scorer's accuracy (SFT, GRPO, when sampled), or the preference accuracy (DPO). */
  metric?: number;
  /** DPO: the eval pairs' mean preference margin, in nats. */
  margin?: number;
  /** The rollback lineage whose weights were measured (absent for the first). */
  lineage?: number;
  /** When it was measured (the workflow's clock: the same on every attempt). */
  at: number;
  /** Tokens the evaluation had processed (returned to the round; not written to the record). */
  usage?: TokenUsage;
  /** The training checkpoint saved at this step because it was the best so far (with `evaluation.earlyStop`). */
  checkpointId?: string;
}

export interface EvaluateDuringInput extends PhaseInput {
  step: number;
  at: number;
  /** Also sample and score the eval set (SFT, GRPO), writing the scored answers here. */
  samplesPath?: string;
  /** DPO: the reference logprobs file. */
  referencePath?: string;
  stepsDir: string;
  totalSteps: number;
}

// Owner tags live in config/rules/owner-tag.ts (pure), so the reaper activity reads them without importing workflow code.
export { ownerTagFor, referenceTagFor } from '../../config/rules/owner-tag';

export const roundProgressQuery = defineQuery<RoundProgress>('roundProgress');
/** Interrupt the running segment (its in-flight steps land), save a training checkpoint, release the GPU, and wait. */
export const pauseRoundSignal = defineSignal('pauseRound');
/** Re-provision, reopen from the pause checkpoint (with optimizer), continue at the same step. */
export const resumeRoundSignal = defineSignal('resumeRound');
export const setRoundBudgetSignal = defineSignal<[RoundBudget]>('setRoundBudget');
/** Sent by the provisioning activity to its round while it waits for capacity (null: no longer waiting). */
export const roundWaitingSignal = defineSignal<[ProvisioningWait | null]>(ROUND_WAITING_SIGNAL);
/** Sent by a round to its parent campaign at phase changes and segment ends. */
export const roundProgressSignal = defineSignal<[RoundProgress]>('roundProgress');
