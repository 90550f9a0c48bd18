import { notFound } from '../errors';
import { LEARNER_MODELS, type LearnerOptions, type TrainerModel, type TrainerModels } from '../learner';
import { ZERO_COMPUTE_MODELS } from '../learner/zero-compute';
import type { EmulatedModel, TokenPrices } from '../models';
import type {
  CheckpointRecord,
  LoraSettings,
  OperationRecord,
  ResourceRecord,
  ResourceStatus,
  SessionRecord,
  SessionStatus,
} from './records';
import { TrainedLog } from './trained';

export interface EngineOptions {
  /** PENDING → CREATING → READY takes this long (half each). */
  provisioningDelayMs?: number;
  /** STOPPING → STOPPED. */
  stopDelayMs?: number;
  /** A RUNNING session expires after this long without operations. */
  sessionIdleExpiryMs?: number;
  /**
   * Concurrent sessions per LoRA resource for every model, instead of each model's `loraSessionCap` (emulator/models.ts):
   * a tight cap on the small model, for tests. A full-weight resource takes 1 regardless.
   */
  sessionCap?: number;
  /** Simulated compute time of each operation. */
  operationLatencyMs?: number;
  /** Clock-cycle mode: operations run only on ticks of this period, as hosted trainers batch work. */
  clockCycleMs?: number;
  /** Default inactivity auto-stop of a resource. */
  defaultInactiveTimeoutMs?: number;
  /**
   * `learner` (default): operations run the real learner. `none`: the zero-compute model answers every operation at
   * once with deterministic figures (emulator/learner/zero-compute.ts), for measuring orchestration alone.
   */
  compute?: 'learner' | 'none';
  /** How many training passes per session the trained-datums listing keeps (emulator/engine/trained.ts); 0 (default): none. */
  trainedBatches?: number;
  /**
   * Prices for every model, instead of each model's `pricePerGpuHour` and `tokenPrices` (emulator/models.ts): USD per
   * GPU-hour and per million tokens, so a test can spend a dollar in seconds. What the ledger bills and estimate-cost quotes.
   */
  prices?: { gpuHour?: number; tokens?: TokenPrices };
  now?: () => number;
}

export const ACTIVE_RESOURCE: ReadonlySet<ResourceStatus> = new Set(['PENDING', 'CREATING', 'READY']);
export const LIVE_SESSION: ReadonlySet<SessionStatus> = new Set(['CREATING', 'RUNNING', 'STOPPING']);

/** A live session's learners and queue: memory only, rebuilt from the snapshot on restore. */
export interface SessionRuntime {
  learner: TrainerModel;
  generator: TrainerModel;
  queue: OperationRecord[];
  pumping: boolean;
  /** A learner holding a checkpoint's weights, kept for repeated sampling from it. */
  pinned?: { checkpointId: string; learner: TrainerModel };
  /** Digests of the sample requests this runtime has drawn (prompts, parameters, weights): what `repeated` counts. */
  sampled?: Set<string>;
}

/**
 * What every part of the engine shares: the records, the live sessions' runtimes, the clock and the options.
 * Only the engine's own modules hold it; dialects go through the `Engine` facade.
 */
export class EngineState {
  readonly options: Required<Omit<EngineOptions, 'now' | 'sessionCap' | 'prices'>> & Pick<EngineOptions, 'sessionCap' | 'prices'>;
  readonly now: () => number;
  readonly resources = new Map<string, ResourceRecord>();
  readonly sessions = new Map<string, SessionRecord>();
  readonly checkpoints = new Map<string, CheckpointRecord>();
  readonly operations = new Map<string, OperationRecord>();
  /** Operations by `operationKey(session, idempotency key)`. */
  readonly operationsByKey = new Map<string, OperationRecord>();
  readonly runtimes = new Map<string, SessionRuntime>();
  /** What training passes received, when the options ask for it. */
  readonly trained: TrainedLog;
  /** What sessions train and sample with (`compute`). */
  readonly models: TrainerModels;
  private readonly listeners = new Set<() => void>();
  /** Who waits for an operation to settle (long polls, synchronous routes): woken by `noteSettled`, not by polling. */
  private readonly settleWaiters = new Map<OperationRecord, Set<() => void>>();

  constructor(options: EngineOptions) {
    this.now = options.now ?? Date.now;
    this.options = {
      provisioningDelayMs: options.provisioningDelayMs ?? 0,
      stopDelayMs: options.stopDelayMs ?? 0,
      sessionIdleExpiryMs: options.sessionIdleExpiryMs ?? 60 * 60 * 1000,
      sessionCap: options.sessionCap,
      operationLatencyMs: options.operationLatencyMs ?? 0,
      clockCycleMs: options.clockCycleMs ?? 0,
      defaultInactiveTimeoutMs: options.defaultInactiveTimeoutMs ?? 60 * 60 * 1000,
      compute: options.compute ?? 'learner',
      trainedBatches: options.trainedBatches ?? 0,
      prices: options.prices,
    };
    this.trained = new TrainedLog(this.options.trainedBatches);
    this.models = this.options.compute === 'none' ? ZERO_COMPUTE_MODELS : LEARNER_MODELS;
  }

  onChange(listener: () => void): void {
    this.listeners.add(listener);
  }

  /** `op` has just completed or failed: wake whoever waits for it. */
  noteSettled(op: OperationRecord): void {
    const waiters = this.settleWaiters.get(op);
    if (!waiters) return;
    this.settleWaiters.delete(op);
    for (const wake of waiters) wake();
  }

  /**
   * True once `op` has completed or failed; false when `ms` pass first or `interrupt` aborts. One timer per waiter
   * instead of a poll every few milliseconds (1,000 held long polls polled at 5 ms were 200,000 wake-ups a second).
   */
  whenSettled(op: OperationRecord, ms: number, interrupt?: AbortSignal): Promise<boolean> {
    const settled = () => op.status === 'COMPLETED' || op.status === 'FAILED';
    if (settled() || interrupt?.aborted) return Promise.resolve(settled());
    return new Promise((resolve) => {
      const waiters = this.settleWaiters.get(op) ?? new Set<() => void>();
      this.settleWaiters.set(op, waiters);
      const done = () => {
        clearTimeout(timer);
        interrupt?.removeEventListener('abort', done);
        waiters.delete(done);
        if (waiters.size === 0 && this.settleWaiters.get(op) === waiters) this.settleWaiters.delete(op);
        resolve(settled());
      };
      const timer = setTimeout(done, ms);
      interrupt?.addEventListener('abort', done, { once: true });
      waiters.add(done);
    });
  }

  /** Called after every state change that should be persisted. */
  changed(): void {
    for (const l of this.listeners) l();
  }

  /** The resource a session runs on (it exists for as long as the session does). */
  resourceOf(s: SessionRecord): ResourceRecord {
    return this.resources.get(s.resourceId)!;
  }

  /** Concurrent sessions a LoRA resource of `model` accepts. */
  loraSessionCap(model: EmulatedModel): number {
    return this.options.sessionCap ?? model.loraSessionCap;
  }

  /** USD per GPU-hour of `model` here (its `pricePerGpuHour`, unless the options override it). */
  gpuHourPrice(model: EmulatedModel): number {
    return this.options.prices?.gpuHour ?? model.pricePerGpuHour;
  }

  /** USD per million tokens of `model` here (its `tokenPrices`, unless the options override them). */
  tokenPrices(model: EmulatedModel): TokenPrices {
    return this.options.prices?.tokens ?? model.tokenPrices;
  }

  /** Sessions on a resource that are not over yet. */
  liveSessionsOn(resourceId: string): SessionRecord[] {
    return [...this.sessions.values()].filter((s) => s.resourceId === resourceId && LIVE_SESSION.has(s.status));
  }

  /** The trainer's optimizer step (continues across a resume with optimizer state). */
  sessionStep(s: SessionRecord): number {
    return this.runtimes.get(s.id)?.learner.step ?? s.step ?? s.optimizerSteps;
  }

  /** Empty optimizer steps in the weights the session's trainer holds (its checkpoint's lineage plus its own). */
  lineageEmptySteps(s: SessionRecord): number {
    return this.runtimes.get(s.id)?.learner.emptyOptimizerSteps ?? s.lineageEmptyOptimizerSteps ?? 0;
  }
}

/** Copies what the ledger reads from a trainer onto its session's record, so it outlives the learner. */
export function noteTrainer(s: SessionRecord, learner: TrainerModel): void {
  s.step = learner.step;
  s.lineageEmptyOptimizerSteps = learner.emptyOptimizerSteps;
}

/** Idempotency keys are scoped to a session. */
export function operationKey(sessionId: string, key: string): string {
  return `${sessionId}\u0000${key}`;
}

export function learnerOptions(model: EmulatedModel, lora: LoraSettings): LearnerOptions {
  return {
    vocabSize: model.vocabSize,
    seed: model.seed,
    loraRank: lora.rank,
    loraAlpha: lora.alpha,
    loraSeed: lora.seed,
    trainUnembed: lora.trainUnembed,
  };
}

/** A record the owner may see (any owner when `owner` is undefined), else 404 naming what was asked for. */
export function ownedOrNotFound<T extends { owner: string }>(
  record: T | undefined,
  owner: string | undefined,
  what: string,
  id: string,
): T {
  if (!record || (owner !== undefined && record.owner !== owner)) throw notFound(what, id);
  return record;
}

/** Newest first; ties by id, so listings are stable. */
export function newestFirst(a: { createdAt: number; id: string }, b: { createdAt: number; id: string }): number {
  return b.createdAt - a.createdAt || (a.id < b.id ? 1 : -1);
}
