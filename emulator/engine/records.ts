import type { AdamSettings, LearnerState, PolicyLossConfig, SampleParams, SampledSequence, TokenSequence } from '../learner';
import type { EmulatedModel } from '../models';

/** The engine's records: what it persists, what the dialects render, and what operations take and give. */

export type ResourceStatus = 'PENDING' | 'CREATING' | 'READY' | 'STOPPING' | 'STOPPED' | 'ERROR';
export type SessionStatus = 'CREATING' | 'RUNNING' | 'STOPPING' | 'STOPPED' | 'ERROR' | 'EXPIRED';
export type OperationStatus = 'PENDING' | 'RUNNING' | 'COMPLETED' | 'FAILED';
export type OperationKind =
  | 'forward-backward'
  | 'custom-forward-backward'
  | 'optim-step'
  | 'weights-sync'
  | 'sample'
  | 'training-checkpoint'
  | 'inference-checkpoint';
/** Every kind the engine runs: the shared ones plus in-place trainer resets and loads (Baseten's trainer). */
export type EngineOperationKind = OperationKind | 'trainer-reset' | 'load-checkpoint';

export const OPERATION_ERROR_CODES = [
  'RESOURCE_EXHAUSTED',
  'TIMEOUT',
  'INTERNAL_ERROR',
  'SESSION_NOT_ACTIVE',
  'INVALID_INPUT',
  'NON_FINITE_LOSS',
] as const;
export type OperationErrorCode = (typeof OPERATION_ERROR_CODES)[number];

export interface StatusError {
  code: string;
  message: string;
  occurredAt: number;
}

export interface ResourceRecord {
  id: string;
  dialect: string;
  /** Who created it (derived from the API key): what `created_by=me` filters on. */
  owner: string;
  /** A caller-chosen tag (a name or metadata) that lets the owner find the resource by listing. */
  ownerTag?: string;
  model: EmulatedModel;
  status: ResourceStatus;
  createdAt: number;
  updatedAt: number;
  /** When it became (or will become) READY. */
  readyAt: number;
  /** When it left READY (stop requested, error, idle expiry); billing ends here. */
  leftReadyAt?: number;
  stopRequestedAt?: number;
  numGeneratorReplicas: number;
  loraEnabled: boolean;
  inactiveTimeoutMs: number;
  lastActivityAt: number;
  error?: StatusError;
  /**
   * A create that waited for capacity (an injected `capacity-queue` or `capacity-timeout`): it joined the queue at
   * `position` and leaves it at `until`, then provisions as usual, or fails there when `timesOut`.
   */
  capacityQueue?: { position: number; until: number; timesOut: boolean };
  /** Dialect-specific fields echoed back (compute config, optimizer config, names, ...). */
  extra: Record<string, unknown>;
}

export interface LoraSettings {
  rank: number;
  alpha?: number;
  seed?: number;
  trainUnembed?: boolean;
}

export interface SessionRecord {
  id: string;
  resourceId: string;
  owner: string;
  status: SessionStatus;
  createdAt: number;
  updatedAt: number;
  lastActivityAt: number;
  lora: LoraSettings;
  /** The generator's adapter settings when they differ from the trainer's (after an in-place reset or load). */
  generatorLora?: LoraSettings;
  /** The checkpoint the trainer's weights came from: at creation, or the last in-place load (Baseten's `load_state`). */
  resumeFromCheckpointId?: string;
  loadOptimizer?: boolean;
  displayName?: string;
  metadata: Record<string, unknown>;
  /** Optimizer steps applied in this session (the ledger's count; the learner's step may start higher on resume). */
  optimizerSteps: number;
  /** Of those, the ones applied with no gradient accumulated since the previous optimizer step. */
  emptyOptimizerSteps: number;
  /** The trainer's step and its weights' lineage count of empty steps, as last seen (kept when the learner is freed). */
  step?: number;
  lineageEmptyOptimizerSteps?: number;
  operationsSubmitted: number;
  duplicatesAbsorbed: number;
  /** Tokens processed, as a per-token biller (Tinker) counts them: forward-only passes and prompts (prefill), generated (sample), forward-backward (train). */
  tokens?: { prefill: number; sample: number; train: number };
  /**
   * Sample operations drawn (duplicates absorbed by their key not counted), the sequences they returned, and how many
   * repeated a seeded draw this session had already made: the same prompts and parameters (seed included) from the
   * same weights, i.e. a completion paid for twice. An unseeded draw is a new draw however alike its request (the
   * episodes of a group ask the same first turn), so it is never counted here; and how many were drawn greedily (temperature 0).
   */
  sampling?: { operations: number; sequences: number; repeated: number; greedy?: number };
  /** Policy version the generator replicas serve (the trainer step at the last weights sync). */
  weightsVersion: number;
  checkpointIds: string[];
  error?: StatusError;
  stopRequestedAt?: number;
}

export interface CheckpointRecord {
  id: string;
  type: 'training' | 'inference';
  owner: string;
  sessionId: string;
  resourceId: string;
  baseModel: string;
  step: number;
  createdAt: number;
  loraRank: number;
  withOptimizer: boolean;
  /** Empty optimizer steps in the saved weights' lineage (also inside `state`, so a resume carries them on). */
  lineageEmptyOptimizerSteps?: number;
  state: LearnerState;
  /** Dialect-specific naming (e.g. a path or URI). */
  name?: string;
  /** The TTL the save asked for (Tinker's `ttl_seconds`): shown as its expiry; the emulator deletes nothing for it. */
  ttlSeconds?: number;
}

/** A checkpoint named by id, or by the name it was saved under on a resource (latest first). */
export type CheckpointRef = { id: string } | { resourceId: string; name: string; type: 'training' | 'inference' };

export type LossSpec =
  | { type: 'cross_entropy'; weights: number[][] }
  | { type: 'linear'; gradients: number[][] }
  /** Importance sampling, PPO, CISPO, GRPO: `config.weights` says which tokens count. */
  | { type: 'policy_gradient'; config: PolicyLossConfig };

export type OperationInput =
  | { kind: 'forward-backward'; sequences: TokenSequence[]; loss: LossSpec; forwardOnly: boolean; returnOutputs: boolean }
  | { kind: 'custom-forward-backward'; sequences: TokenSequence[]; gradients: number[][] }
  | { kind: 'optim-step'; adam: AdamSettings }
  | { kind: 'weights-sync' }
  | {
      kind: 'sample';
      prompts: number[][];
      numSamples: number;
      params: SampleParams;
      promptLogprobs: boolean;
      /** Sample from this checkpoint's weights instead of the weights the generators serve. */
      fromCheckpoint?: CheckpointRef;
      /**
       * A rule of the dialect's that the service enforces when the sample runs, not when it is submitted: the
       * operation fails with this (Together: a seed on a generator of more than one replica, INTERNAL_ERROR).
       */
      failsWith?: { code: OperationErrorCode; message: string };
    }
  | { kind: 'training-checkpoint'; name?: string; ttlSeconds?: number }
  /** `publish`: the generators also start serving these weights (a weights sync in the same operation). */
  | { kind: 'inference-checkpoint'; name?: string; publish?: boolean; ttlSeconds?: number }
  /** The trainer starts over from a fresh adapter (the generators keep serving what they served). */
  | { kind: 'trainer-reset'; lora: LoraSettings }
  /** The trainer loads a checkpoint in place: weights, and with `optimizer` the Adam moments and step. */
  | { kind: 'load-checkpoint'; checkpoint: CheckpointRef; optimizer: boolean };

export type OperationOutput =
  | {
      kind: 'forward-backward';
      loss: number;
      logprobs: number[][];
      /** Which positions the loss counted (weight ≠ 0); dialects report the others as 0 or null. */
      counted: boolean[][];
      tokens: number;
      /** `mean`: the loss is divided by its aggregation's count (a GRPO loss); absent: a sum over the counted tokens. */
      reduction?: 'mean';
      returnOutputs: boolean;
    }
  | { kind: 'custom-forward-backward'; loss: number; logprobs: number[][] }
  | { kind: 'optim-step'; step: number; gradNorm: number }
  | { kind: 'weights-sync'; weightsVersion: number }
  | { kind: 'sample'; results: { sequences: SampledSequence[]; promptLogprobs?: number[]; policyVersion: number }[] }
  | { kind: 'training-checkpoint'; checkpointId: string }
  | { kind: 'inference-checkpoint'; checkpointId: string }
  | { kind: 'trainer-reset'; step: number; loraRank: number }
  | { kind: 'load-checkpoint'; step: number; checkpointId: string };

export interface OperationRecord {
  id: string;
  sessionId: string;
  kind: EngineOperationKind;
  key: string;
  bodyHash: string;
  status: OperationStatus;
  submittedAt: number;
  completedAt?: number;
  input?: OperationInput;
  output?: OperationOutput;
  error?: { code: OperationErrorCode; message: string };
  /** What a dialect needs to render the result beyond the output (which route, request flags); persisted with it. */
  dialectNote?: Record<string, unknown>;
}
