import { FaultInjector } from '../faults';
import type { EmulatedModel } from '../models';
import type {
  OperationInput,
  OperationKind,
  OperationRecord,
  CheckpointRecord,
  CheckpointRef,
  ResourceRecord,
  SessionRecord,
} from './records';
import { Checkpoints, type CheckpointFilter } from './checkpoints';
import { ledgerOf, roundUsd, type Ledger } from './ledger';
import { Lifecycle } from './lifecycle';
import { Operations, type SubmitOptions } from './operations';
import { Resources, expiresAt, gpuSeconds, queuePosition, type ResourceFilter, type ResourceInput } from './resources';
import { Sessions, type SessionFilter, type SessionInput } from './sessions';
import { restoreInto, snapshotOf, type EngineSnapshot } from './snapshot';
import { EngineState, type EngineOptions } from './state';
import type { TrainedListing } from './trained';
import { OperationWork } from './work';

export * from './records';
export { ownerOf, shortId } from './ids';
export type {
  CheckpointFilter,
  EngineOptions,
  EngineSnapshot,
  Ledger,
  ResourceFilter,
  ResourceInput,
  SessionFilter,
  SessionInput,
  SubmitOptions,
  TrainedListing,
};

/**
 * The dialect-neutral engine behind every wire dialect: resources with a lifecycle and billing, sessions that
 * own a learner, operations run in submission order per session with idempotency-key dedup, checkpoints, and the
 * ledger. The one object dialects hold: they read and change records only through its methods.
 */
export class Engine {
  readonly faults = new FaultInjector();
  private readonly state: EngineState;
  private readonly lifecycle: Lifecycle;
  private readonly resources: Resources;
  private readonly sessions: Sessions;
  private readonly checkpoints: Checkpoints;
  private readonly operations: Operations;

  constructor(options: EngineOptions = {}) {
    this.state = new EngineState(options);
    this.lifecycle = new Lifecycle(this.state);
    this.resources = new Resources(this.state, this.lifecycle, this.faults);
    this.sessions = new Sessions(this.state, this.lifecycle, this.resources);
    this.checkpoints = new Checkpoints(this.state);
    const work = new OperationWork(this.state, this.checkpoints);
    this.operations = new Operations(this.state, this.lifecycle, this.sessions, work, this.faults);
  }

  /** Called after every state change that should be persisted. */
  onChange(listener: () => void): void {
    this.state.onChange(listener);
  }

  /** Dialects that change their own fields (a resource's `extra`) say so, so the change is persisted. */
  noteChange(): void {
    this.state.changed();
  }

  /** Brings time-driven state up to date: provisioning, stopping, inactivity auto-stop, session idle expiry. */
  refresh(): void {
    this.lifecycle.refresh();
  }

  /** The same for one resource and its sessions: what a read of one of them needs. */
  refreshAround(resourceId: string): void {
    this.lifecycle.refreshAround(resourceId);
  }

  // ── resources ────────────────────────────────────────────────────────────────────────────────────

  createResource(input: ResourceInput): ResourceRecord {
    return this.resources.create(input);
  }

  getResource(id: string, owner?: string): ResourceRecord {
    return this.resources.get(id, owner);
  }

  /** A resource by id as it was last brought up to date, whoever owns it; undefined when there is none. */
  findResource(id: string): ResourceRecord | undefined {
    return this.state.resources.get(id);
  }

  /** The resource a session runs on. */
  resourceOf(s: SessionRecord): ResourceRecord {
    return this.state.resourceOf(s);
  }

  listResources(filter: ResourceFilter): ResourceRecord[] {
    return this.resources.list(filter);
  }

  /** Stops a resource (400 while sessions are live unless forced, or when it already stopped or failed). */
  stopResource(id: string, owner: string | undefined, force: boolean): ResourceRecord {
    return this.resources.stop(id, owner, force);
  }

  extendExpiry(id: string, owner: string | undefined, seconds: number): ResourceRecord {
    return this.resources.extendExpiry(id, owner, seconds);
  }

  expiresAt(r: ResourceRecord): number | undefined {
    return expiresAt(r);
  }

  /** A PENDING create's place in the capacity queue (counting down to 1); undefined when it is not queued. */
  queuePosition(r: ResourceRecord): number | undefined {
    return queuePosition(r, this.state.now());
  }

  /** A request that keeps a resource warm without an operation (a health probe, a heartbeat). */
  noteActivity(resourceId: string): void {
    this.resources.noteActivity(resourceId);
  }

  /** A resource dies (preemption, hardware): billing stops, its sessions fail. */
  failResource(r: ResourceRecord, code: string, message: string): void {
    this.lifecycle.failResource(r, code, message);
  }

  gpuSeconds(r: ResourceRecord): number {
    return gpuSeconds(r, this.state.now());
  }

  /** What a resource of `model` costs per hour here, all its GPUs (USD): the price the ledger bills and estimate-cost quotes. */
  resourcePricePerHour(model: EmulatedModel): number {
    return roundUsd(model.gpuCount * this.state.gpuHourPrice(model));
  }

  // ── sessions ─────────────────────────────────────────────────────────────────────────────────────

  /** Concurrent sessions a LoRA resource of `model` accepts here (its `loraSessionCap`, unless the options override it). */
  loraSessionCap(model: EmulatedModel): number {
    return this.state.loraSessionCap(model);
  }

  createSession(input: SessionInput): Promise<SessionRecord> {
    return this.sessions.create(input);
  }

  getSession(id: string, owner?: string): SessionRecord {
    return this.sessions.get(id, owner);
  }

  /** A session by id as it was last brought up to date, whoever owns it; undefined when there is none. */
  findSession(id: string): SessionRecord | undefined {
    return this.state.sessions.get(id);
  }

  /** The trainer's optimizer step (continues across a resume with optimizer state). */
  sessionStep(s: SessionRecord): number {
    return this.state.sessionStep(s);
  }

  listSessions(filter: SessionFilter): SessionRecord[] {
    return this.sessions.list(filter);
  }

  updateSession(id: string, owner: string, patch: { displayName?: string; metadata?: Record<string, unknown> }): SessionRecord {
    return this.sessions.update(id, owner, patch);
  }

  stopSession(id: string, owner: string): SessionRecord {
    return this.sessions.stop(id, owner);
  }

  // ── operations ───────────────────────────────────────────────────────────────────────────────────

  /** Submits an operation under an idempotency key (see `Operations.submit` for dedup and invalid bodies). */
  submitOperation(
    sessionId: string,
    owner: string,
    key: string | undefined,
    bodyText: string,
    parse: () => OperationInput,
    options: SubmitOptions = {},
  ): OperationRecord {
    return this.operations.submit(sessionId, owner, key, bodyText, parse, options);
  }

  /** The operation a session recorded under an idempotency key (dialects whose operation ids are the keys). */
  operationByKey(sessionId: string, owner: string, key: string): OperationRecord {
    return this.operations.byKey(sessionId, owner, key);
  }

  getOperation(sessionId: string, owner: string, operationId: string, kind?: OperationKind): OperationRecord {
    return this.operations.get(sessionId, owner, operationId, kind);
  }

  /** True once the operation has completed or failed; false when `ms` pass first or `interrupt` aborts (long polls). */
  whenSettled(op: OperationRecord, ms: number, interrupt?: AbortSignal): Promise<boolean> {
    return this.state.whenSettled(op, ms, interrupt);
  }

  /** Resolves when the operation has completed or failed (for synchronous dialect routes and tests). */
  settled(op: OperationRecord, timeoutMs?: number): Promise<OperationRecord> {
    return this.operations.settled(op, timeoutMs);
  }

  // ── checkpoints ──────────────────────────────────────────────────────────────────────────────────

  listCheckpoints(filter: CheckpointFilter): CheckpointRecord[] {
    return this.checkpoints.list(filter);
  }

  /** A checkpoint by id, or the latest saved under a name on a resource; undefined when there is none. */
  findCheckpoint(ref: CheckpointRef, owner?: string): CheckpointRecord | undefined {
    return this.checkpoints.find(ref, owner);
  }

  getCheckpoint(id: string, owner?: string): CheckpointRecord {
    return this.checkpoints.get(id, owner);
  }

  /** Deletes a checkpoint (its weights go with it); one already gone is not an error. Where a dialect has the call (Tinker). */
  deleteCheckpoint(id: string, owner: string): boolean {
    const c = this.state.checkpoints.get(id);
    if (!c) return false;
    this.checkpoints.get(id, owner); // someone else's is not found
    this.state.checkpoints.delete(id);
    this.state.changed();
    return true;
  }

  /** The checkpoints a session saved, in the order it saved them. */
  sessionCheckpoints(s: SessionRecord): CheckpointRecord[] {
    return this.checkpoints.ofSession(s);
  }

  // ── ledger and persistence ───────────────────────────────────────────────────────────────────────

  ledger(): Ledger {
    this.lifecycle.refresh();
    return ledgerOf(this.state);
  }

  /** The datums each session's last training passes received (`trainedBatches`; empty when off). */
  trained(): TrainedListing {
    return this.state.trained.listing(this.state.sessions.values());
  }

  /** Everything needed to come back after a restart: records, learner states of live sessions, checkpoints. */
  snapshot(): EngineSnapshot {
    return snapshotOf(this.state);
  }

  restore(snapshot: EngineSnapshot): Promise<void> {
    return restoreInto(this.state, snapshot);
  }

  /** Waits (up to 5 s each) for queued operations to finish. */
  drain(): Promise<void> {
    return this.operations.drain();
  }

  /** Waits for queued operations to finish, then frees every learner. */
  async close(): Promise<void> {
    await this.drain();
    for (const id of [...this.state.runtimes.keys()]) this.lifecycle.disposeRuntime(id);
  }
}
