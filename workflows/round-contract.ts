import { defineQuery } from '@temporalio/workflow';
import type { CampaignSpec } from '../config/spec';

/** What a round needs from the campaign spec (no secrets: API keys stay in the worker's environment). */
export type RoundSpec = Pick<CampaignSpec, 'name' | 'provider' | 'training' | 'sampling' | 'evaluation' | 'advanced'>;

export interface RoundInput {
  /** Business identity: idempotency keys are `${campaignId}/r${round}/…`. */
  campaignId: string;
  /** 1-based. */
  round: number;
  spec: RoundSpec;
  /** Dataset references: paths, and the sha256 they must still have (checked before anything is provisioned). */
  data: { train: string; eval: string; trainSha256?: string; evalSha256?: string };
  /** Start from a training checkpoint (weights + optimizer + step) instead of the base model. */
  startFrom?: { checkpointId: string; loadOptimizer: boolean };
  /** Folder the round's report and evaluations are written to. */
  reportDir: string;
}

export type RoundPhase =
  | 'validating'
  | 'provisioning'
  | 'baseline'
  | 'training'
  | 'checkpointing'
  | 'sampling'
  | 'evaluating'
  | 'cleanup'
  | 'completed'
  | 'failed'
  | 'cancelled';

export interface RoundProgress {
  campaignId: string;
  round: number;
  phase: RoundPhase;
  /** Optimizer steps confirmed (updated at every segment boundary; live steps are in the training activity's heartbeat). */
  step: number;
  totalSteps: number;
  latestLoss?: number;
  baselineLoss?: number;
  /** GPU-minutes held so far (wall time since the trainer became ready × its GPUs). */
  gpuMinutes: number;
  resourceId?: string;
  sessionId?: string;
}

export type RoundStatus = 'completed' | 'failed' | 'cancelled';

export interface RoundResult {
  campaignId: string;
  round: number;
  status: RoundStatus;
  reportPath: string;
  evaluationsPath?: string;
  accuracy?: number;
  baselineLoss?: number;
  trainedLoss?: number;
  trainingCheckpointId?: string;
  samplerCheckpointId?: string;
  stepsApplied: number;
  totalSteps: number;
  gpuMinutes: number;
  errorType?: string;
}

export const roundProgressQuery = defineQuery<RoundProgress>('roundProgress');
