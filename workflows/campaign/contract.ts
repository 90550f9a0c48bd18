import type { PythonCall } from '../../config/rules/python-calls';
import { defineQuery, defineUpdate } from '@temporalio/workflow';
import type { CampaignSpec, GateMetric } from '../../config/io/spec';
import type { GateVerdict } from '../../config/rules/stages';
import type { RoundProgress, RoundStatus } from '../round/contract';
import type { PromotionState } from './promotion-contract';
import type { RoundKind } from '../../config/rules/round-kinds';
import type { SweepRecord } from '../sweep/record';

export interface CampaignLimits {
  maxRounds: number;
  maxGpuMinutes?: number;
  maxWallMinutes?: number;
  /** `budget.maxUsd`: dollars the campaign may spend (set by the spec only). */
  maxUsd?: number;
  /** Stop once a round's eval accuracy reaches this. */
  targetAccuracy?: number;
}

export interface RoundSummary {
  round: number;
  workflowId: string;
  status: RoundStatus;
  /** Staged campaigns: the stage the round belongs to (1-based). */
  stage?: number;
  kind?: RoundKind;
  /** SFT and GRPO: eval accuracy of sampled answers; DPO: eval preference accuracy. */
  accuracy?: number;
  /** `data.test`: the round's final weights on the held-out test set (shown; never chosen by). */
  test?: { accuracy: number; rows: number; sha256?: string };
  /** GRPO: mean reward of the first and of the last trained step's samples. */
  firstReward?: number;
  meanReward?: number;
  baselineLoss?: number;
  trainedLoss?: number;
  stepsApplied: number;
  totalSteps: number;
  gpuMinutes: number;
  costUsd?: number;
  /** Tokens the round processed (what Tinker bills). */
  tokens?: { prefill: number; sample: number; train: number };
  reportPath: string;
  trainingCheckpointId?: string;
  /** Recoveries from provider-side failures in the round. */
  recoveries?: number;
  train: { path: string; sha256?: string; rows?: number };
  errorType?: string;
  /** Why a failed round failed: its error's message (what `status`, `watch` and `run --wait` print). */
  errorMessage?: string;
  /** Why a `stopped` round ended early (a budget). */
  stopReason?: string;
  /** The code sandbox mode its Python worker(s) said they run, when the round called one. */
  sandbox?: string;
  /** A sweep's round (the campaign's first, with `sweep`): its arms, the decision at each rung, and the winner. */
  sweep?: SweepRecord;
}

/** A stage of a staged campaign, as the campaign records it: where it started from, how it ended, what it passed on. */
export interface StageRecord {
  /** 1-based. */
  stage: number;
  name: string;
  kind: RoundKind;
  /** The campaign round that is the stage's first. */
  firstRound: number;
  /** The training checkpoint its first round started from: the previous stage's last (stage 1: the spec's, if any). */
  startedFrom?: string;
  /** Whether the previous stage's optimizer state was loaded with its weights. */
  loadOptimizer?: boolean;
  /** Why it ended (its rounds.max or its target), once it has. */
  endedBy?: string;
  /** Its gate's verdict on its last round. */
  gate?: GateVerdict;
  /** The training checkpoint it passed on: its last round's. */
  passedOn?: string;
}

/** A stage as `status` and the reports show it: its record, its rounds, and the metric that matters for its kind. */
export interface StageProgress extends StageRecord {
  rounds: number;
  headline: { metric: GateMetric; value?: number };
}

/** Everything a campaign carries across continue-as-new: summaries, not data. */
export interface CampaignCarriedState {
  startedAtMs: number;
  limits: CampaignLimits;
  rounds: RoundSummary[];
  nextTrain: { path: string; sha256?: string; rows?: number };
  lastCheckpointId?: string;
  paused: boolean;
  stop?: 'after-round' | 'now';
  /** Staged campaigns: the stages started so far, the running one last. */
  stages?: StageRecord[];
}

export interface CampaignInput {
  /** Defaults to the workflow id (scheduled runs get a distinct one each). */
  campaignId?: string;
  spec: CampaignSpec;
  /** Reports go to `<reportRoot>/<campaignId>/`. */
  reportRoot: string;
  state?: CampaignCarriedState;
}

export type CampaignStatus = 'running' | 'paused' | 'completed' | 'stopped' | 'failed';

export interface CampaignProgress {
  campaignId: string;
  status: CampaignStatus;
  rounds: RoundSummary[];
  /** Staged campaigns: the stages started so far, the running one last. */
  stages?: StageProgress[];
  currentRound?: RoundProgress;
  limits: CampaignLimits;
  gpuMinutes: number;
  costUsd?: number;
  wallMinutes: number;
  stopReason?: string;
  summaryPath: string;
  /** `promotion`: the challenger's decision against the line's champion, pending approval or done. */
  promotion?: PromotionState;
  /** The completed round with the best eval accuracy (chosen by eval only), with its test figure when there is one. */
  best?: { round: number; accuracy: number; checkpointId?: string; test?: { accuracy: number; rows: number; sha256?: string } };
}

export interface CampaignResult extends CampaignProgress {
  bestAccuracy?: number;
}

// Payloads between the campaign workflow and its activities.

/** How the next round's training data is chosen (`rounds.nextData.policy`). */
export type NextDataPolicy = 'mistakes' | 'all' | 'static' | 'python';

export interface NextDataInput {
  campaignId: string;
  /** The round the data is for. */
  round: number;
  policy: NextDataPolicy;
  replayShare: number;
  seed: number;
  /** The campaign's training pool (`data.train`). */
  pool: string;
  /** The last round's scored pool rows (`mistakes` and `python` policies). */
  poolEvaluationsPath?: string;
  /** `python`: the registered data policy and its Python worker's task queue. */
  python?: PythonCall;
  outDir: string;
}

export interface NextTrainingData {
  path: string;
  sha256: string;
  rows: number;
  mistakes?: number;
}

export const campaignProgressQuery = defineQuery<CampaignProgress>('campaignProgress');
/** Pause: the running round interrupts its segment, checkpoints and releases the GPU; no new round starts. */
export const pauseCampaignUpdate = defineUpdate<CampaignProgress>('pauseCampaign');
/** Resume: the paused round re-provisions and continues from its checkpoint at the same step. */
export const resumeCampaignUpdate = defineUpdate<CampaignProgress>('resumeCampaign');
/** Stop after the current round, or now (the running round is cancelled and cleans up). */
export const stopCampaignUpdate = defineUpdate<CampaignProgress, [{ mode: 'after-round' | 'now' }]>('stopCampaign');
export const setCampaignLimitsUpdate = defineUpdate<CampaignProgress, [Partial<CampaignLimits>]>('setCampaignLimits');

/** Update validators: a bad request is rejected before it reaches the campaign's history. */
export function validateCampaignLimits(limits: Partial<CampaignLimits>): void {
  const allowed: (keyof CampaignLimits)[] = ['maxRounds', 'maxGpuMinutes', 'maxWallMinutes', 'targetAccuracy'];
  for (const [field, value] of Object.entries(limits ?? {})) {
    if (field === 'maxUsd')
      throw new Error(
        'limits.maxUsd: a dollar budget is the spec’s (budget.maxUsd): its prices are resolved before the first round provisions',
      );
    if (!allowed.includes(field as keyof CampaignLimits)) throw new Error(`limits.${field}: unknown limit; known: ${allowed.join(', ')}`);
    if (value === undefined) continue;
    if (typeof value !== 'number' || !Number.isFinite(value) || value < 0)
      throw new Error(`limits.${field}: must be a number ≥ 0 (got ${JSON.stringify(value)})`);
    if (field === 'maxRounds' && (!Number.isInteger(value) || value < 1))
      throw new Error(`limits.maxRounds: must be a whole number ≥ 1 (got ${value})`);
    if (field === 'targetAccuracy' && value > 1) throw new Error(`limits.targetAccuracy: must be within 0..1 (got ${value})`);
  }
}

export function validateStopRequest(request: { mode: 'after-round' | 'now' }): void {
  if (request?.mode !== 'after-round' && request?.mode !== 'now')
    throw new Error(`mode: must be 'after-round' or 'now' (got ${JSON.stringify(request?.mode)})`);
}
