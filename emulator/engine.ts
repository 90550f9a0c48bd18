import { createHash, randomUUID } from 'node:crypto';
import {
  Learner,
  LearnerInputError,
  crossEntropyLoss,
  linearLogprobLoss,
  policyGradientLoss,
  type AdamSettings,
  type LearnerOptions,
  type LearnerState,
  type PolicyLossConfig,
  type SampleParams,
  type SampledSequence,
  type TokenSequence,
} from './learner';
import { EmulatorHttpError, badRequest, notFound, tooManyRequests } from './errors';
import { FaultInjector } from './faults';
import { findModel, type EmulatedModel } from './models';

/**
 * The dialect-neutral engine behind every wire dialect: resources with a lifecycle and billing, sessions that
 * own a learner, operations run in submission order per session with idempotency-key dedup, checkpoints, and the
 * ledger. Time-driven transitions (provisioning, stopping, idle expiry) are computed from timestamps on every
 * access, so the ledger is exact whenever it is read.
 */

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

export type OperationErrorCode =
  | 'RESOURCE_EXHAUSTED'
  | 'TIMEOUT'
  | 'INTERNAL_ERROR'
  | 'SESSION_NOT_ACTIVE'
  | 'INVALID_INPUT'
  | 'NON_FINITE_LOSS';

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
  resumeFromCheckpointId?: string;
  loadOptimizer?: boolean;
  displayName?: string;
  metadata: Record<string, unknown>;
  /** Optimizer steps applied in this session (the ledger's count; the learner's step may start higher on resume). */
  optimizerSteps: number;
  operationsSubmitted: number;
  duplicatesAbsorbed: number;
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
  state: LearnerState;
  /** Dialect-specific naming (e.g. a path or URI). */
  name?: string;
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
    }
  | { kind: 'training-checkpoint'; name?: string }
  /** `publish`: the generators also start serving these weights (a weights sync in the same operation). */
  | { kind: 'inference-checkpoint'; name?: string; publish?: boolean }
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

export interface EngineOptions {
  /** PENDING → CREATING → READY takes this long (half each). */
  provisioningDelayMs?: number;
  /** STOPPING → STOPPED. */
  stopDelayMs?: number;
  /** A RUNNING session expires after this long without operations. */
  sessionIdleExpiryMs?: number;
  /** Concurrent LoRA sessions per resource (a full-weight resource takes 1). */
  sessionCap?: number;
  /** Simulated compute time of each operation. */
  operationLatencyMs?: number;
  /** Clock-cycle mode: operations run only on ticks of this period, as hosted trainers batch work. */
  clockCycleMs?: number;
  /** Default inactivity auto-stop of a resource. */
  defaultInactiveTimeoutMs?: number;
  now?: () => number;
}

const ACTIVE_RESOURCE: ReadonlySet<ResourceStatus> = new Set(['PENDING', 'CREATING', 'READY']);
const LIVE_SESSION: ReadonlySet<SessionStatus> = new Set(['CREATING', 'RUNNING', 'STOPPING']);

export function shortId(prefix: string): string {
  return `${prefix}-${randomUUID().replace(/-/g, '').slice(0, 12)}`;
}

export function ownerOf(apiKey: string): string {
  return `user-${createHash('sha256').update(apiKey).digest('hex').slice(0, 10)}`;
}

interface SessionRuntime {
  learner: Learner;
  generator: Learner;
  queue: OperationRecord[];
  pumping: boolean;
  /** A learner holding a checkpoint's weights, kept for repeated sampling from it. */
  pinned?: { checkpointId: string; learner: Learner };
}

export class Engine {
  readonly faults = new FaultInjector();
  readonly options: Required<Omit<EngineOptions, 'now'>>;
  private readonly now: () => number;
  readonly resources = new Map<string, ResourceRecord>();
  readonly sessions = new Map<string, SessionRecord>();
  readonly checkpoints = new Map<string, CheckpointRecord>();
  private readonly operations = new Map<string, OperationRecord>();
  private readonly operationsByKey = new Map<string, OperationRecord>();
  private readonly runtimes = new Map<string, SessionRuntime>();
  private readonly listeners = new Set<() => void>();

  constructor(options: EngineOptions = {}) {
    this.now = options.now ?? Date.now;
    this.options = {
      provisioningDelayMs: options.provisioningDelayMs ?? 0,
      stopDelayMs: options.stopDelayMs ?? 0,
      sessionIdleExpiryMs: options.sessionIdleExpiryMs ?? 60 * 60 * 1000,
      sessionCap: options.sessionCap ?? 5,
      operationLatencyMs: options.operationLatencyMs ?? 0,
      clockCycleMs: options.clockCycleMs ?? 0,
      defaultInactiveTimeoutMs: options.defaultInactiveTimeoutMs ?? 60 * 60 * 1000,
    };
  }

  /** Called after every state change that should be persisted. */
  onChange(listener: () => void): void {
    this.listeners.add(listener);
  }

  private changed(): void {
    for (const l of this.listeners) l();
  }

  /** Dialects that change their own fields (a resource's `extra`) say so, so the change is persisted. */
  noteChange(): void {
    this.changed();
  }

  // ── resources ────────────────────────────────────────────────────────────────────────────────────

  createResource(input: {
    /** A dialect-shaped id; generated when absent. */
    id?: string;
    dialect: string;
    owner: string;
    baseModel: string;
    ownerTag?: string;
    numGeneratorReplicas?: number;
    loraEnabled?: boolean;
    inactiveTimeoutMs?: number;
    extra?: Record<string, unknown>;
  }): ResourceRecord {
    const model = findModel(input.baseModel);
    if (!model) throw badRequest(`base_model '${input.baseModel}' is not supported; see the supported models list`);
    const now = this.now();
    const resource: ResourceRecord = {
      id: input.id ?? shortId('mr'),
      dialect: input.dialect,
      owner: input.owner,
      ownerTag: input.ownerTag,
      model,
      status: this.options.provisioningDelayMs > 0 ? 'PENDING' : 'READY',
      createdAt: now,
      updatedAt: now,
      readyAt: now + this.options.provisioningDelayMs,
      numGeneratorReplicas: input.numGeneratorReplicas ?? 1,
      loraEnabled: input.loraEnabled ?? true,
      inactiveTimeoutMs: input.inactiveTimeoutMs ?? this.options.defaultInactiveTimeoutMs,
      lastActivityAt: now,
      extra: input.extra ?? {},
    };
    this.resources.set(resource.id, resource);
    this.changed();
    return resource;
  }

  /** Brings time-driven state up to date: provisioning, stopping, inactivity auto-stop, session idle expiry. */
  refresh(): void {
    const now = this.now();
    for (const r of this.resources.values()) this.refreshResource(r, now);
    for (const s of this.sessions.values()) this.refreshSession(s, now);
  }

  private refreshResource(r: ResourceRecord, now: number): void {
    if (r.status === 'PENDING' || r.status === 'CREATING') {
      const half = r.createdAt + this.options.provisioningDelayMs / 2;
      const next: ResourceStatus = now >= r.readyAt ? 'READY' : now >= half ? 'CREATING' : 'PENDING';
      if (next !== r.status) {
        r.status = next;
        r.updatedAt = now;
        if (next === 'READY') r.lastActivityAt = r.readyAt;
        this.changed();
      }
    }
    if (r.status === 'READY' && !this.hasRunningOperation(r.id) && now - r.lastActivityAt >= r.inactiveTimeoutMs) {
      this.beginStop(r, r.lastActivityAt + r.inactiveTimeoutMs, 'EXPIRED');
    }
    if (r.status === 'STOPPING' && now >= (r.stopRequestedAt ?? now) + this.options.stopDelayMs) {
      r.status = 'STOPPED';
      r.updatedAt = now;
      this.changed();
    }
  }

  private refreshSession(s: SessionRecord, now: number): void {
    if (s.status === 'RUNNING' && now - s.lastActivityAt >= this.options.sessionIdleExpiryMs) {
      this.endSession(s, 'EXPIRED');
    }
    if (s.status === 'STOPPING' && now >= (s.stopRequestedAt ?? now) + this.options.stopDelayMs) {
      this.endSession(s, 'STOPPED');
    }
  }

  private hasRunningOperation(resourceId: string): boolean {
    for (const s of this.sessions.values()) {
      if (s.resourceId !== resourceId) continue;
      const rt = this.runtimes.get(s.id);
      if (rt && (rt.pumping || rt.queue.length > 0)) return true;
    }
    return false;
  }

  getResource(id: string, owner?: string): ResourceRecord {
    this.refresh();
    const r = this.resources.get(id);
    if (!r || (owner !== undefined && r.owner !== owner)) throw notFound('model resource', id);
    return r;
  }

  listResources(filter: { owner?: string; statuses?: ResourceStatus[]; dialect?: string; ownerTag?: string }): ResourceRecord[] {
    this.refresh();
    return [...this.resources.values()]
      .filter((r) => filter.owner === undefined || r.owner === filter.owner)
      .filter((r) => !filter.statuses?.length || filter.statuses.includes(r.status))
      .filter((r) => filter.dialect === undefined || r.dialect === filter.dialect)
      .filter((r) => filter.ownerTag === undefined || r.ownerTag === filter.ownerTag)
      .sort((a, b) => b.createdAt - a.createdAt || (a.id < b.id ? 1 : -1));
  }

  /**
   * Stops a resource. Refused (400) while sessions are live unless forced; a forced stop stops them too.
   * Stopping a resource that already stopped or failed is refused (400), as the real service does.
   */
  stopResource(id: string, owner: string | undefined, force: boolean): ResourceRecord {
    const r = this.getResource(id, owner);
    if (!ACTIVE_RESOURCE.has(r.status)) {
      throw badRequest(`model resource ${id} is already ${r.status.toLowerCase()}`, 'FAILED_PRECONDITION');
    }
    const live = [...this.sessions.values()].filter((s) => s.resourceId === id && LIVE_SESSION.has(s.status));
    if (live.length > 0 && !force) {
      throw badRequest(
        `model resource ${id} has ${live.length} active training session(s); stop them first or pass force=true`,
        'FAILED_PRECONDITION',
      );
    }
    for (const s of live) this.endSession(s, 'STOPPED');
    this.beginStop(r, this.now());
    this.refreshResource(r, this.now());
    return r;
  }

  extendExpiry(id: string, owner: string | undefined, seconds: number): ResourceRecord {
    const r = this.getResource(id, owner);
    if (r.status !== 'READY') throw badRequest(`model resource ${id} is ${r.status.toLowerCase()}, not ready`, 'FAILED_PRECONDITION');
    const target = this.now() + seconds * 1000 - r.inactiveTimeoutMs;
    r.lastActivityAt = Math.max(r.lastActivityAt, target);
    r.updatedAt = this.now();
    this.changed();
    return r;
  }

  expiresAt(r: ResourceRecord): number | undefined {
    return r.status === 'READY' ? r.lastActivityAt + r.inactiveTimeoutMs : undefined;
  }

  /** A request that keeps a resource warm without an operation (a health probe, a heartbeat). */
  noteActivity(resourceId: string): void {
    const r = this.resources.get(resourceId);
    if (!r || r.status !== 'READY') return;
    const now = this.now();
    r.lastActivityAt = now;
    for (const s of this.sessions.values()) if (s.resourceId === resourceId && s.status === 'RUNNING') s.lastActivityAt = now;
    this.changed();
  }

  private beginStop(r: ResourceRecord, at: number, sessionEnd: SessionStatus = 'STOPPED'): void {
    if (r.status === 'READY' || r.status === 'PENDING' || r.status === 'CREATING') {
      r.leftReadyAt = r.status === 'READY' ? at : undefined;
      r.status = 'STOPPING';
      r.stopRequestedAt = at;
      r.updatedAt = this.now();
      for (const s of this.sessions.values()) {
        if (s.resourceId === r.id && LIVE_SESSION.has(s.status)) this.endSession(s, sessionEnd);
      }
      this.changed();
    }
  }

  /** A resource dies (preemption, hardware): billing stops, its sessions fail. */
  failResource(r: ResourceRecord, code: string, message: string): void {
    if (!ACTIVE_RESOURCE.has(r.status)) return;
    const now = this.now();
    if (r.status === 'READY') r.leftReadyAt = now;
    r.status = 'ERROR';
    r.updatedAt = now;
    r.error = { code, message, occurredAt: now };
    for (const s of this.sessions.values()) {
      if (s.resourceId === r.id && LIVE_SESSION.has(s.status)) {
        s.error = { code: 'RESOURCE_UNAVAILABLE', message, occurredAt: now };
        this.endSession(s, 'ERROR');
      }
    }
    this.changed();
  }

  gpuSeconds(r: ResourceRecord): number {
    const now = this.now();
    if (now < r.readyAt) return 0;
    const end = r.leftReadyAt ?? (r.status === 'READY' ? now : r.readyAt);
    return (Math.max(0, end - r.readyAt) / 1000) * r.model.gpuCount;
  }

  // ── sessions ─────────────────────────────────────────────────────────────────────────────────────

  async createSession(input: {
    /** A dialect-shaped id; generated when absent. */
    id?: string;
    resourceId: string;
    owner: string;
    lora?: Partial<LoraSettings>;
    resumeFromCheckpointId?: string;
    loadOptimizer?: boolean;
    displayName?: string;
    metadata?: Record<string, unknown>;
  }): Promise<SessionRecord> {
    const r = this.getResource(input.resourceId, input.owner);
    if (r.status !== 'READY') {
      throw badRequest(`model resource ${r.id} is ${r.status.toLowerCase()}; sessions attach to a ready resource`, 'FAILED_PRECONDITION');
    }
    const cap = r.loraEnabled ? this.options.sessionCap : 1;
    const live = [...this.sessions.values()].filter((s) => s.resourceId === r.id && LIVE_SESSION.has(s.status)).length;
    if (live >= cap) throw tooManyRequests(`model resource ${r.id} already has ${live} active sessions (limit ${cap})`);

    let checkpoint: CheckpointRecord | undefined;
    if (input.resumeFromCheckpointId) {
      checkpoint = this.checkpoints.get(input.resumeFromCheckpointId);
      if (!checkpoint || checkpoint.owner !== input.owner) throw notFound('checkpoint', input.resumeFromCheckpointId);
      if (checkpoint.baseModel !== r.model.name) {
        throw badRequest(`checkpoint ${checkpoint.id} was trained on ${checkpoint.baseModel}, not ${r.model.name}`);
      }
      if (checkpoint.type === 'inference' && input.loadOptimizer !== undefined) {
        throw badRequest('load_optimizer is only valid when resuming from a training checkpoint');
      }
    } else if (input.loadOptimizer !== undefined) {
      throw badRequest('load_optimizer requires resume_from_checkpoint_id');
    }
    const rank = checkpoint?.loraRank ?? input.lora?.rank ?? 8;
    if (!Number.isInteger(rank) || rank < 1 || rank > r.model.maxLoraRank) {
      throw badRequest(`lora_config.rank must be an integer from 1 to ${r.model.maxLoraRank} for ${r.model.name}`);
    }
    const lora: LoraSettings = { ...input.lora, rank };
    const learnerOptions = this.learnerOptions(r.model, lora);
    const restoreOptimizer = checkpoint?.type === 'training' && input.loadOptimizer !== false && checkpoint.withOptimizer;
    const learner = checkpoint
      ? await Learner.fromState(learnerOptions, checkpoint.state, { optimizer: restoreOptimizer })
      : await Learner.create(learnerOptions);
    const generator = await Learner.fromState(learnerOptions, learner.exportState({ withOptimizer: false }), { optimizer: false });

    const now = this.now();
    const session: SessionRecord = {
      id: input.id ?? shortId('sess'),
      resourceId: r.id,
      owner: input.owner,
      status: 'RUNNING',
      createdAt: now,
      updatedAt: now,
      lastActivityAt: now,
      lora,
      resumeFromCheckpointId: input.resumeFromCheckpointId,
      loadOptimizer: input.loadOptimizer,
      displayName: input.displayName,
      metadata: input.metadata ?? {},
      optimizerSteps: 0,
      operationsSubmitted: 0,
      duplicatesAbsorbed: 0,
      weightsVersion: learner.step,
      checkpointIds: [],
    };
    this.sessions.set(session.id, session);
    this.runtimes.set(session.id, { learner, generator, queue: [], pumping: false });
    r.lastActivityAt = now;
    this.changed();
    return session;
  }

  private learnerOptions(model: EmulatedModel, lora: LoraSettings): LearnerOptions {
    return {
      vocabSize: model.vocabSize,
      seed: model.seed,
      loraRank: lora.rank,
      loraAlpha: lora.alpha,
      loraSeed: lora.seed,
      trainUnembed: lora.trainUnembed,
    };
  }

  getSession(id: string, owner?: string): SessionRecord {
    this.refresh();
    const s = this.sessions.get(id);
    if (!s || (owner !== undefined && s.owner !== owner)) throw notFound('training session', id);
    return s;
  }

  /** The trainer's optimizer step (continues across a resume with optimizer state). */
  sessionStep(s: SessionRecord): number {
    return this.runtimes.get(s.id)?.learner.step ?? s.optimizerSteps;
  }

  listSessions(filter: { owner?: string; resourceId?: string; statuses?: SessionStatus[] }): SessionRecord[] {
    this.refresh();
    return [...this.sessions.values()]
      .filter((s) => filter.owner === undefined || s.owner === filter.owner)
      .filter((s) => filter.resourceId === undefined || s.resourceId === filter.resourceId)
      .filter((s) => !filter.statuses?.length || filter.statuses.includes(s.status))
      .sort((a, b) => b.createdAt - a.createdAt || (a.id < b.id ? 1 : -1));
  }

  updateSession(id: string, owner: string, patch: { displayName?: string; metadata?: Record<string, unknown> }): SessionRecord {
    const s = this.getSession(id, owner);
    if (patch.displayName !== undefined) s.displayName = patch.displayName === '' ? undefined : patch.displayName;
    if (patch.metadata !== undefined) s.metadata = patch.metadata;
    s.updatedAt = this.now();
    this.changed();
    return s;
  }

  stopSession(id: string, owner: string): SessionRecord {
    const s = this.getSession(id, owner);
    if (LIVE_SESSION.has(s.status) && s.status !== 'STOPPING') {
      s.status = 'STOPPING';
      s.stopRequestedAt = this.now();
      s.updatedAt = this.now();
      this.refreshSession(s, this.now());
      this.changed();
    }
    return s;
  }

  private endSession(s: SessionRecord, status: SessionStatus): void {
    s.status = status;
    s.updatedAt = this.now();
    const rt = this.runtimes.get(s.id);
    if (rt) {
      for (const op of rt.queue) this.failOperation(op, 'SESSION_NOT_ACTIVE', `session ${s.id} is ${status.toLowerCase()}`);
      rt.queue.length = 0;
      if (!rt.pumping) this.disposeRuntime(s.id);
    }
    this.changed();
  }

  private disposeRuntime(sessionId: string): void {
    const rt = this.runtimes.get(sessionId);
    if (!rt) return;
    this.runtimes.delete(sessionId);
    rt.learner.dispose();
    rt.generator.dispose();
    rt.pinned?.learner.dispose();
  }

  // ── operations ───────────────────────────────────────────────────────────────────────────────────

  /**
   * Submits an operation. The same idempotency key returns the original operation (counted as a duplicate
   * absorbed); the same key with a different body is refused. With `invalidAs: 'failed-operation'` a body that
   * fails validation is recorded as an operation FAILED with INVALID_INPUT (for dialects whose clients resend
   * a refused submit), instead of a 400.
   */
  submitOperation(
    sessionId: string,
    owner: string,
    key: string | undefined,
    bodyText: string,
    parse: () => OperationInput,
    options: { invalidAs?: 'http-error' | 'failed-operation'; kind?: EngineOperationKind } = {},
  ): OperationRecord {
    const s = this.getSession(sessionId, owner);
    if (!key || key.trim() === '') throw badRequest('the Idempotency-Key header is required on operation requests', 'MISSING_IDEMPOTENCY_KEY');
    if (key.length > 255) throw badRequest('Idempotency-Key must be at most 255 characters', 'INVALID_IDEMPOTENCY_KEY');
    const bodyHash = createHash('sha256').update(bodyText).digest('hex');
    const existing = this.operationsByKey.get(`${s.id}\u0000${key}`);
    if (existing) {
      if (existing.bodyHash !== bodyHash) {
        throw new EmulatorHttpError(
          400,
          'IDEMPOTENCY_KEY_REUSED',
          `Idempotency-Key '${key}' was already used for a different ${existing.kind} request on this session; use a new key for a changed body`,
        );
      }
      s.duplicatesAbsorbed += 1;
      this.changed();
      return existing;
    }
    let input: OperationInput | undefined;
    let invalid: string | undefined;
    try {
      input = parse(); // validation errors surface as 400 before anything is recorded
    } catch (err) {
      if (options.invalidAs !== 'failed-operation' || !options.kind || !(err instanceof EmulatorHttpError && err.status === 400)) throw err;
      invalid = err.message;
    }
    const op: OperationRecord = {
      id: randomUUID(),
      sessionId: s.id,
      kind: input?.kind ?? options.kind!,
      key,
      bodyHash,
      status: 'PENDING',
      submittedAt: this.now(),
      input,
    };
    this.operations.set(op.id, op);
    this.operationsByKey.set(`${s.id}\u0000${key}`, op);
    s.operationsSubmitted += 1;
    s.lastActivityAt = op.submittedAt;
    const r = this.resources.get(s.resourceId);
    if (r) r.lastActivityAt = op.submittedAt;
    const rt = this.runtimes.get(s.id);
    if (invalid !== undefined) {
      this.failOperation(op, 'INVALID_INPUT', invalid);
    } else if (s.status !== 'RUNNING' || !rt) {
      this.failOperation(op, 'SESSION_NOT_ACTIVE', `session ${s.id} is ${s.status.toLowerCase()}`);
    } else {
      rt.queue.push(op);
      void this.pump(s, rt);
    }
    this.changed();
    return op;
  }

  /** The operation a session recorded under an idempotency key (dialects whose operation ids are the keys). */
  operationByKey(sessionId: string, owner: string, key: string): OperationRecord {
    this.getSession(sessionId, owner);
    const op = this.operationsByKey.get(`${sessionId}\u0000${key}`);
    if (!op) throw notFound('operation', key);
    return op;
  }

  getOperation(sessionId: string, owner: string, operationId: string, kind?: OperationKind): OperationRecord {
    this.getSession(sessionId, owner);
    const op = this.operations.get(operationId);
    if (!op || op.sessionId !== sessionId || (kind !== undefined && op.kind !== kind)) throw notFound('operation', operationId);
    return op;
  }

  /** Resolves when the operation has completed or failed (for synchronous dialect routes and tests). */
  async settled(op: OperationRecord, timeoutMs = 60_000): Promise<OperationRecord> {
    const deadline = this.now() + timeoutMs;
    while (op.status === 'PENDING' || op.status === 'RUNNING') {
      if (this.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 2));
    }
    return op;
  }

  private failOperation(op: OperationRecord, code: OperationErrorCode, message: string): void {
    op.status = 'FAILED';
    op.error = { code, message };
    op.completedAt = this.now();
    delete op.input;
  }

  /** Runs a session's operations one at a time, in submission order. */
  private async pump(s: SessionRecord, rt: SessionRuntime): Promise<void> {
    if (rt.pumping) return;
    rt.pumping = true;
    try {
      while (rt.queue.length > 0) {
        const op = rt.queue[0]!;
        await this.waitForCompute(op);
        rt.queue.shift();
        if (op.status !== 'PENDING') continue; // failed while queued (session ended)
        op.status = 'RUNNING';
        await this.execute(s, rt, op);
        await new Promise((r) => setImmediate(r)); // let HTTP requests in between operations
      }
    } finally {
      rt.pumping = false;
      if (!LIVE_SESSION.has(s.status)) this.disposeRuntime(s.id);
    }
  }

  /**
   * Simulated compute. Latency: each operation takes `operationLatencyMs`, one after another per session.
   * Clock cycles: an operation runs on the first tick after it was submitted, and every operation queued by a
   * tick runs in that tick, as hosted trainers batch work (so a client that awaits forward_backward before
   * submitting optim_step spends two cycles per step, one that submits both back to back spends one).
   */
  private async waitForCompute(op: OperationRecord): Promise<void> {
    const { operationLatencyMs, clockCycleMs } = this.options;
    if (operationLatencyMs > 0) await new Promise((r) => setTimeout(r, operationLatencyMs));
    if (clockCycleMs > 0) {
      const tick = Math.ceil((op.submittedAt + 1) / clockCycleMs) * clockCycleMs;
      const wait = tick - this.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
  }

  private async execute(s: SessionRecord, rt: SessionRuntime, op: OperationRecord): Promise<void> {
    const input = op.input!;
    const r = this.resources.get(s.resourceId)!;
    this.refreshResource(r, this.now());
    if (r.status !== 'READY' || s.status !== 'RUNNING') {
      this.failOperation(op, 'SESSION_NOT_ACTIVE', `session ${s.id} is ${s.status.toLowerCase()} (resource ${r.status.toLowerCase()})`);
      return;
    }
    const fault = this.faults.draw(['fail-operation', 'resource-error'], { operation: op.kind });
    if (fault?.kind === 'resource-error') {
      this.failResource(r, 'RESOURCE_UNAVAILABLE', 'injected fault: the resource died');
      this.failOperation(op, 'SESSION_NOT_ACTIVE', `resource ${r.id} failed while running this operation`);
      return;
    }
    if (fault?.kind === 'fail-operation') {
      this.failOperation(op, (fault.errorCode as OperationErrorCode) ?? 'INTERNAL_ERROR', 'injected fault: operation failed');
      return;
    }
    try {
      op.output = await this.run(s, rt, input);
      op.status = 'COMPLETED';
      op.completedAt = this.now();
      delete op.input;
    } catch (err) {
      const code = (err as { code?: string }).code;
      this.failOperation(
        op,
        code === 'NON_FINITE_LOSS' ? 'NON_FINITE_LOSS' : code === 'INVALID_INPUT' ? 'INVALID_INPUT' : 'INTERNAL_ERROR',
        (err as Error).message,
      );
    }
    s.lastActivityAt = this.now();
    r.lastActivityAt = this.now();
    this.changed();
  }

  private async run(s: SessionRecord, rt: SessionRuntime, input: OperationInput): Promise<OperationOutput> {
    switch (input.kind) {
      case 'forward-backward': {
        const spec = input.loss;
        const loss =
          spec.type === 'cross_entropy'
            ? crossEntropyLoss(spec.weights)
            : spec.type === 'policy_gradient'
              ? policyGradientLoss(spec.config)
              : linearLogprobLoss(spec.gradients);
        const result = input.forwardOnly ? rt.learner.forward(input.sequences, loss) : rt.learner.forwardBackward(input.sequences, loss);
        const weights = spec.type === 'cross_entropy' ? spec.weights : spec.type === 'policy_gradient' ? spec.config.weights : undefined;
        const tokens = weights ? weights.flat().filter((w) => w !== 0).length : 0;
        const counted = weights ? weights.map((w) => w.map((v) => v !== 0)) : result.logprobs.map((l) => l.map(() => true));
        return { kind: 'forward-backward', loss: result.loss, logprobs: result.logprobs, counted, tokens, returnOutputs: input.returnOutputs };
      }
      case 'custom-forward-backward': {
        const result = rt.learner.forwardBackward(input.sequences, linearLogprobLoss(input.gradients));
        return { kind: 'custom-forward-backward', loss: result.loss, logprobs: result.logprobs };
      }
      case 'optim-step': {
        const { step, gradNorm } = rt.learner.optimStep(input.adam);
        s.optimizerSteps += 1;
        return { kind: 'optim-step', step, gradNorm };
      }
      case 'weights-sync': {
        const options = this.learnerOptions(this.resources.get(s.resourceId)!.model, s.lora);
        const state = rt.learner.exportState({ withOptimizer: false });
        const previous = rt.generator;
        rt.generator = await Learner.fromState(options, state, { optimizer: false });
        previous.dispose();
        delete s.generatorLora;
        s.weightsVersion = rt.learner.step;
        return { kind: 'weights-sync', weightsVersion: s.weightsVersion };
      }
      case 'sample': {
        const eosTokenIds = this.resources.get(s.resourceId)!.model.eosTokenIds;
        const params = eosTokenIds && !input.params.eosTokenIds ? { ...input.params, eosTokenIds } : input.params;
        const pinned = input.fromCheckpoint ? await this.pinnedLearner(s, rt, input.fromCheckpoint) : undefined;
        const generator = pinned?.learner ?? rt.generator;
        const results = input.prompts.map((prompt) => ({
          sequences: generator.sample(prompt, params, input.numSamples),
          promptLogprobs: input.promptLogprobs ? generator.promptLogprobs(prompt) : undefined,
          policyVersion: pinned ? pinned.step : s.weightsVersion,
        }));
        return { kind: 'sample', results };
      }
      case 'trainer-reset': {
        const learner = await Learner.create(this.learnerOptions(this.resources.get(s.resourceId)!.model, input.lora));
        rt.learner.dispose();
        rt.learner = learner;
        s.generatorLora ??= s.lora;
        s.lora = input.lora;
        return { kind: 'trainer-reset', step: learner.step, loraRank: input.lora.rank };
      }
      case 'load-checkpoint': {
        const checkpoint = this.checkpointFor(s, input.checkpoint);
        if (input.optimizer && !checkpoint.withOptimizer) {
          throw new LearnerInputError(`checkpoint ${checkpoint.name ?? checkpoint.id} holds no optimizer state; load its weights only`);
        }
        const lora: LoraSettings = { ...s.lora, rank: checkpoint.loraRank };
        const learner = await Learner.fromState(this.learnerOptions(this.resources.get(s.resourceId)!.model, lora), checkpoint.state, { optimizer: input.optimizer });
        rt.learner.dispose();
        rt.learner = learner;
        s.generatorLora ??= s.lora;
        s.lora = lora;
        return { kind: 'load-checkpoint', step: learner.step, checkpointId: checkpoint.id };
      }
      case 'training-checkpoint':
      case 'inference-checkpoint': {
        const training = input.kind === 'training-checkpoint';
        const checkpoint: CheckpointRecord = {
          id: shortId(training ? 'ckpt-train' : 'ckpt-infer'),
          type: training ? 'training' : 'inference',
          owner: s.owner,
          sessionId: s.id,
          resourceId: s.resourceId,
          baseModel: this.resources.get(s.resourceId)!.model.name,
          step: rt.learner.step,
          createdAt: this.now(),
          loraRank: s.lora.rank,
          withOptimizer: training,
          state: rt.learner.exportState({ withOptimizer: training }),
          name: input.name,
        };
        this.checkpoints.set(checkpoint.id, checkpoint);
        s.checkpointIds.push(checkpoint.id);
        if (input.kind === 'inference-checkpoint' && input.publish) await this.run(s, rt, { kind: 'weights-sync' });
        return { kind: input.kind, checkpointId: checkpoint.id };
      }
    }
  }

  listCheckpoints(filter: { owner?: string; sessionId?: string; type?: 'training' | 'inference'; baseModel?: string }): CheckpointRecord[] {
    return [...this.checkpoints.values()]
      .filter((c) => filter.owner === undefined || c.owner === filter.owner)
      .filter((c) => filter.sessionId === undefined || c.sessionId === filter.sessionId)
      .filter((c) => filter.type === undefined || c.type === filter.type)
      .filter((c) => filter.baseModel === undefined || c.baseModel === filter.baseModel)
      .sort((a, b) => b.createdAt - a.createdAt || (a.id < b.id ? 1 : -1));
  }

  /** A checkpoint by id, or the latest saved under a name on a resource; undefined when there is none. */
  findCheckpoint(ref: CheckpointRef, owner?: string): CheckpointRecord | undefined {
    if ('id' in ref) {
      const c = this.checkpoints.get(ref.id);
      return c && (owner === undefined || c.owner === owner) ? c : undefined;
    }
    return this.listCheckpoints({ owner, type: ref.type }).find((c) => c.resourceId === ref.resourceId && c.name === ref.name);
  }

  /** The checkpoint an operation names, resolved when it runs (it may have been saved by the operation before). */
  private checkpointFor(s: SessionRecord, ref: CheckpointRef): CheckpointRecord {
    const checkpoint = this.findCheckpoint(ref, s.owner);
    const model = this.resources.get(s.resourceId)!.model.name;
    if (!checkpoint) throw new LearnerInputError(`no checkpoint ${'id' in ref ? ref.id : `'${ref.name}' (${ref.type}) on ${ref.resourceId}`}`);
    if (checkpoint.baseModel !== model) throw new LearnerInputError(`checkpoint ${checkpoint.name ?? checkpoint.id} was trained on ${checkpoint.baseModel}, not ${model}`);
    return checkpoint;
  }

  private async pinnedLearner(s: SessionRecord, rt: SessionRuntime, ref: CheckpointRef): Promise<{ learner: Learner; step: number }> {
    const checkpoint = this.checkpointFor(s, ref);
    if (rt.pinned?.checkpointId !== checkpoint.id) {
      const options = this.learnerOptions(this.resources.get(s.resourceId)!.model, { ...s.lora, rank: checkpoint.loraRank });
      const learner = await Learner.fromState(options, checkpoint.state, { optimizer: false });
      rt.pinned?.learner.dispose();
      rt.pinned = { checkpointId: checkpoint.id, learner };
    }
    return { learner: rt.pinned.learner, step: checkpoint.step };
  }

  getCheckpoint(id: string, owner?: string): CheckpointRecord {
    const c = this.checkpoints.get(id);
    if (!c || (owner !== undefined && c.owner !== owner)) throw notFound('checkpoint', id);
    return c;
  }

  // ── ledger ───────────────────────────────────────────────────────────────────────────────────────

  ledger(): Ledger {
    this.refresh();
    const resources = [...this.resources.values()].map((r) => ({
      id: r.id,
      dialect: r.dialect,
      owner: r.owner,
      ownerTag: r.ownerTag ?? null,
      baseModel: r.model.name,
      status: r.status,
      gpuSeconds: round3(this.gpuSeconds(r)),
      createdAt: new Date(r.createdAt).toISOString(),
    }));
    const sessions = [...this.sessions.values()].map((s) => ({
      id: s.id,
      resourceId: s.resourceId,
      status: s.status,
      step: this.sessionStep(s),
      optimizerSteps: s.optimizerSteps,
      operationsSubmitted: s.operationsSubmitted,
      duplicatesAbsorbed: s.duplicatesAbsorbed,
    }));
    return {
      resources,
      sessions,
      active: resources.filter((r) => ACTIVE_RESOURCE.has(r.status as ResourceStatus)).map((r) => r.id),
      totals: {
        gpuSeconds: round3(resources.reduce((a, r) => a + r.gpuSeconds, 0)),
        optimizerSteps: sessions.reduce((a, s) => a + s.optimizerSteps, 0),
        operationsSubmitted: sessions.reduce((a, s) => a + s.operationsSubmitted, 0),
        duplicatesAbsorbed: sessions.reduce((a, s) => a + s.duplicatesAbsorbed, 0),
      },
    };
  }

  // ── persistence ──────────────────────────────────────────────────────────────────────────────────

  /** Everything needed to come back after a restart: records, learner states of live sessions, checkpoints. */
  snapshot(): EngineSnapshot {
    return {
      version: 1,
      resources: [...this.resources.values()].map((r) => ({ ...r, model: r.model.name })),
      sessions: [...this.sessions.values()].map((s) => {
        const rt = this.runtimes.get(s.id);
        return {
          record: s,
          learner: rt?.learner.exportState({ withOptimizer: true }),
          generator: rt?.generator.exportState({ withOptimizer: false }),
        };
      }),
      checkpoints: [...this.checkpoints.values()],
      operations: [...this.operations.values()].filter((o) => o.status === 'COMPLETED' || o.status === 'FAILED'),
    };
  }

  async restore(snapshot: EngineSnapshot): Promise<void> {
    for (const r of snapshot.resources) {
      const model = findModel(r.model);
      if (model) this.resources.set(r.id, { ...r, model });
    }
    for (const c of snapshot.checkpoints) this.checkpoints.set(c.id, c);
    for (const { record, learner, generator } of snapshot.sessions) {
      this.sessions.set(record.id, record);
      const r = this.resources.get(record.resourceId);
      if (r && learner && generator && LIVE_SESSION.has(record.status)) {
        const options = this.learnerOptions(r.model, record.lora);
        this.runtimes.set(record.id, {
          learner: await Learner.fromState(options, learner, { optimizer: true }),
          generator: await Learner.fromState(this.learnerOptions(r.model, record.generatorLora ?? record.lora), generator, { optimizer: false }),
          queue: [],
          pumping: false,
        });
      }
    }
    for (const op of snapshot.operations) {
      this.operations.set(op.id, op);
      this.operationsByKey.set(`${op.sessionId}\u0000${op.key}`, op);
    }
  }

  /** Waits (up to 5 s each) for queued operations to finish. */
  async drain(): Promise<void> {
    for (const s of this.sessions.values()) {
      const rt = this.runtimes.get(s.id);
      if (rt) for (const op of [...rt.queue]) await this.settled(op, 5_000);
    }
  }

  /** Waits for queued operations to finish, then frees every learner. */
  async close(): Promise<void> {
    await this.drain();
    for (const id of [...this.runtimes.keys()]) this.disposeRuntime(id);
  }
}

export interface EngineSnapshot {
  version: 1;
  resources: (Omit<ResourceRecord, 'model'> & { model: string })[];
  sessions: { record: SessionRecord; learner?: LearnerState; generator?: LearnerState }[];
  checkpoints: CheckpointRecord[];
  operations: OperationRecord[];
}

export interface Ledger {
  resources: { id: string; dialect: string; owner: string; ownerTag: string | null; baseModel: string; status: string; gpuSeconds: number; createdAt: string }[];
  sessions: { id: string; resourceId: string; status: string; step: number; optimizerSteps: number; operationsSubmitted: number; duplicatesAbsorbed: number }[];
  active: string[];
  totals: { gpuSeconds: number; optimizerSteps: number; operationsSubmitted: number; duplicatesAbsorbed: number };
}

function round3(n: number): number {
  return Math.round(n * 1000) / 1000;
}
