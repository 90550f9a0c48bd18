/**
 * The provider-neutral training interface. Activities call this; each wire dialect (together/, baseten/)
 * implements it. Every mutating trainer call takes the caller's idempotency key, derived from the business
 * identity (campaign, round, step, op), so a retried call returns the original operation.
 */

import type { GrpoAggregation } from '../config/rules/loss-units';

export type Dialect = 'together' | 'baseten' | 'tinker';

export interface ModelInfo {
  name: string;
  /** Absent where the provider does not say (a self-hosted Tinker server): the trainer refuses a rank over its limit. */
  maxLoraRank?: number;
  maxSeqLen: number;
  maxBatchSize: number;
  /** Present when the provider says (the emulator does); otherwise from the tokenizer. */
  vocabSize?: number;
  tokenizer?: string;
  /** GPUs a resource of this model holds, when the provider says. */
  gpuCount?: number;
  /** Concurrent sessions a LoRA resource of this model accepts, when the provider says (Together's "adapter capacity"). */
  adapterCapacity?: number;
  /** Whether its sampler takes stop strings, where the provider's listing says (config/rules/sampling.ts: stopToSend). */
  stopStrings?: boolean;
}

/** Where a trainer resource is in its life, across dialects. */
export type ResourceState = 'provisioning' | 'ready' | 'stopping' | 'stopped' | 'failed';

export interface TrainerResource {
  id: string;
  model: string;
  state: ResourceState;
  /** The provider's own status string, for reports. */
  providerStatus: string;
  createdAt: string;
  createdBy?: string;
  /** The tag the owner gave it at provisioning (where the dialect can carry one). */
  ownerTag?: string;
  error?: string;
  /** Why it failed, as the provider codes it without its enum prefix (CAPACITY_WAIT_TIMEOUT, PROVISIONING_FAILED, ...). */
  errorCode?: string;
  /** While a create waits in the provider's capacity queue: its place (1 = next), where the provider tells it. */
  queuePosition?: number;
}

/** Error codes that mean the provider had no GPUs for the create (retried, within the spec's provisioning limit). */
export const CAPACITY_ERROR_CODES: ReadonlySet<string> = new Set(['CAPACITY_WAIT_TIMEOUT', 'RESOURCE_AT_CAPACITY']);

/** Whether a failed resource failed for want of capacity (nothing ran on it, nothing billed). */
export function failedForCapacity(resource: TrainerResource): boolean {
  return resource.state === 'failed' && resource.errorCode !== undefined && CAPACITY_ERROR_CODES.has(resource.errorCode);
}

export interface ProvisionRequest {
  model: string;
  /** Identifies the owning workflow; carried in the resource's name/metadata where the dialect allows. */
  ownerTag: string;
  /** Generator (sampler) replicas; 0 = trainer only. */
  generatorReplicas?: number;
  /** Provider-side auto-stop after this much inactivity (a safety net beyond the reaper). */
  inactiveTimeoutSeconds?: number;
  /** The trainer's seed, longest sequence and LoRA rank, where the dialect fixes them at creation (Baseten Loops' run). */
  trainer?: { seed: number; maxSeqLen: number; loraRank: number };
  /** Baseten Loops' run settings (spec `provider.baseten`); absent, the service's defaults. */
  baseten?: BasetenRunOptions;
}

export interface BasetenRunOptions {
  availabilityModel: 'dedicated' | 'spot';
  replicas: number;
  reuseFromRunId?: string;
  scaleDownDelaySeconds: number;
}

export type SessionState = 'starting' | 'running' | 'stopping' | 'stopped' | 'failed' | 'expired';

export interface TrainingSessionInfo {
  id: string;
  resourceId: string;
  state: SessionState;
  /** The trainer's optimizer step counter (continues across a resume with optimizer state). */
  step: number;
  trainingCheckpointIds: string[];
  displayName?: string;
}

export interface OpenSessionRequest {
  resourceId: string;
  /** The resource's base model, where the provider cannot read it back from the resource (a self-hosted Tinker server). */
  baseModel?: string;
  loraRank: number;
  loraAlpha?: number;
  seed?: number;
  /** Resume from a training checkpoint: with its optimizer state and step, or weights only. */
  fromCheckpoint?: { id: string; loadOptimizer: boolean };
  displayName?: string;
  /** Session metadata where the dialect has it (Together: `{ wandb: { project, entity, group, run_name } }`). */
  metadata?: Record<string, unknown>;
  /** How long each checkpoint the session saves lives at the provider, where the dialect has a TTL (Tinker); unset: forever. */
  checkpointTtlSeconds?: number;
}

/**
 * One training example, aligned the Together/Tinker way: `modelInput` is (prompt + completion) minus its last
 * token, `targetTokens[i]` is the token that follows position i, and `weights[i]` (0 or more) says how much
 * position i counts in the loss (0 = prompt).
 */
export interface Datum {
  modelInput: number[];
  targetTokens: number[];
  weights: number[];
  /** Policy losses: the sampler's logprob of each target token (aligned with `targetTokens`). */
  logprobs?: number[];
  /** Policy losses: the advantage of each target token (aligned with `targetTokens`). */
  advantages?: number[];
  /** GRPO with beta > 0: the reference policy's logprob of each target token (aligned with `targetTokens`). */
  referenceLogprobs?: number[];
}

export interface AdamParams {
  learningRate: number;
  beta1?: number;
  beta2?: number;
  eps?: number;
  weightDecay?: number;
  /** Unset: the provider default (1.0); 0 disables clipping. */
  gradClipNorm?: number;
}

export interface SamplingParams {
  maxTokens: number;
  temperature: number;
  topP?: number;
  topK?: number;
  seed?: number;
  stop?: string[];
}

/**
 * The loss of a forward-backward. Policy losses read each datum's `logprobs` and `advantages` (and GRPO with
 * beta > 0 its `referenceLogprobs`); `weights` says which tokens count. Clip thresholds default to 0.8/1.2.
 */
export type PolicyLoss =
  | { type: 'cross_entropy' }
  | { type: 'importance_sampling' }
  | { type: 'ppo'; clipLow?: number; clipHigh?: number }
  | {
      type: 'grpo';
      clipLow?: number;
      clipHigh?: number;
      /** KL penalty against the reference policy; > 0 needs `referenceLogprobs` on every datum. */
      beta?: number;
      /** Unset: token_mean (config/rules/loss-units.ts); the loss is then a mean, not a sum. */
      aggregation?: GrpoAggregation;
      ratio?: 'token' | 'sequence';
    };

export interface ForwardBackwardOptions {
  /** Forward only: loss and logprobs, no gradient. */
  forwardOnly?: boolean;
  /** Per-token target logprobs in the result. */
  returnLogprobs?: boolean;
  /** Unset: cross-entropy. */
  loss?: PolicyLoss;
}

export interface ForwardResult {
  /**
   * The loss as the provider reports it: cross-entropy's is the sum over weighted target tokens of −logprob; a
   * policy loss's is a sum or a mean by dialect and loss type (config/rules/loss-units.ts says which).
   */
  loss: number;
  logprobs?: number[][];
}

export interface OptimStepResult {
  step: number;
}

export interface CheckpointResult {
  checkpointId: string;
  step: number;
}

export interface SampledSequence {
  tokens: number[];
  logprobs?: number[];
  stopReason: 'stop' | 'length';
}

export interface SampleResult {
  sequences: SampledSequence[];
  promptLogprobs?: number[];
  policyVersion?: number;
}

export type OperationKind =
  'forward-backward' | 'custom-forward-backward' | 'optim-step' | 'training-checkpoint' | 'sampler-weights' | 'weights-sync' | 'sample';

export interface WeightsSyncResult {
  /** The policy version the generators now serve (the trainer's step at the sync). */
  weightsVersion: number;
}

/**
 * A submitted operation: small and serialisable, so it can sit in a heartbeat's details and be awaited by
 * a later attempt. `T` is the result type `awaitOperation` resolves to.
 */
export interface OperationHandle<T> {
  kind: OperationKind;
  sessionId: string;
  operationId: string;
  idempotencyKey: string;
  /** Operations submitted with this one (same session, earlier in order) whose success it depends on. */
  prerequisites?: { wireKind: string; operationId: string }[];
  /** Phantom marker for the result type. */
  readonly __result?: T;
}

export interface AwaitOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
}

export interface WaitReadyOptions extends AwaitOptions {
  pollIntervalMs?: number;
  onWait?: (resource: TrainerResource) => void;
}

export interface TrainingProvider {
  readonly kind: Dialect;
  /** The endpoint + account, as a fingerprint (never the key): what per-account coordination is keyed on. */
  readonly account: string;
  /**
   * A created resource carries its `ownerTag` from the create on (Baseten names runs after it), so an unanswered
   * create is found by its tag. Where not (Together model resources: untagged until a session opens, no idempotency
   * key on the create), only creates serialized per account and model make a new resource attributable.
   */
  readonly tagsResourcesAtCreate: boolean;
  supportedModels(): Promise<ModelInfo[]>;
  /** The provider's on-demand price of one trainer resource of this model, when it quotes one. */
  estimateCost?(model: string, generatorReplicas?: number): Promise<{ currency: string; pricePerHour: number }>;

  /** Creates a trainer resource. Not idempotent on every dialect: after a lost response, reconcile by listing. */
  provision(request: ProvisionRequest): Promise<TrainerResource>;
  getResource(resourceId: string): Promise<TrainerResource>;
  /**
   * Polls until ready; fails (non-retryable) if the resource fails or stops on the way: with code NO_CAPACITY when it
   * failed for want of capacity. `onWait` sees each poll that found it not ready yet (a capacity queue's position).
   */
  waitReady(resourceId: string, options?: WaitReadyOptions): Promise<TrainerResource>;
  /** Resources this account created, newest first (`activeOnly`: still holding GPUs). */
  listOwnedResources(options?: { activeOnly?: boolean }): Promise<TrainerResource[]>;
  /**
   * Billable resources that serve no trainer (Baseten: samplers billed on their own), still holding GPUs: the reaper
   * judges them as it does trainers, and `deactivate` takes their ids. Absent where a dialect has none.
   */
  listStrayResources?(): Promise<TrainerResource[]>;
  /** Releases the GPUs. Idempotent: a resource already stopped, stopping or failed is fine. Stops its sessions. */
  deactivate(resourceId: string): Promise<TrainerResource>;

  openSession(request: OpenSessionRequest): Promise<TrainingSessionInfo>;
  getSession(sessionId: string): Promise<TrainingSessionInfo>;
  /** Sessions on a resource (newest first): how an unanswered session create is reconciled, by display name. */
  listSessions(resourceId: string): Promise<TrainingSessionInfo[]>;
  closeSession(sessionId: string): Promise<void>;

  submitForwardBackward(
    sessionId: string,
    key: string,
    data: Datum[],
    options?: ForwardBackwardOptions,
  ): Promise<OperationHandle<ForwardResult>>;
  /**
   * A caller-defined loss (e.g. DPO): `gradients[i][j]` is ∂loss/∂logprob of datum i's target j; the trainer
   * back-propagates them and accumulates until the next optim step. Not every dialect has it (UNSUPPORTED).
   */
  submitCustomForwardBackward(
    sessionId: string,
    key: string,
    data: Datum[],
    gradients: number[][],
  ): Promise<OperationHandle<Record<string, never>>>;
  submitOptimStep(sessionId: string, key: string, adam: AdamParams): Promise<OperationHandle<OptimStepResult>>;
  /** Weights + optimizer + step: what a later session resumes from. */
  submitTrainingCheckpoint(sessionId: string, key: string): Promise<OperationHandle<CheckpointResult>>;
  /** Publishes the current weights to the sampler and saves them as a deployable artifact. */
  submitSamplerWeights(sessionId: string, key: string): Promise<OperationHandle<CheckpointResult>>;
  /** Publishes the current weights to the generators (no artifact kept where the dialect allows): what sampling sees next. */
  submitWeightsSync(sessionId: string, key: string): Promise<OperationHandle<WeightsSyncResult>>;
  submitSample(
    sessionId: string,
    key: string,
    prompts: number[][],
    params: SamplingParams,
    options?: { numSamples?: number; promptLogprobs?: boolean },
  ): Promise<OperationHandle<SampleResult[]>>;
  awaitOperation<T>(handle: OperationHandle<T>, options?: AwaitOptions): Promise<T>;

  close(): Promise<void>;
  /**
   * Deletes a checkpoint at the provider, where the API has a delete call (Together's and Baseten's have none, so
   * their providers leave it out); deleting one already gone is not an error.
   */
  deleteCheckpoint?(checkpointId: string): Promise<void>;
}
