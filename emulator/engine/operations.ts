import { createHash, randomUUID } from 'node:crypto';
import { EmulatorHttpError, badRequest, notFound } from '../errors';
import { OPERATION_FAULTS, type FaultInjector } from '../faults';
import type { Lifecycle } from './lifecycle';
import type { EngineOperationKind, OperationInput, OperationKind, OperationRecord, ResourceRecord, SessionRecord } from './records';
import type { Sessions } from './sessions';
import { LIVE_SESSION, noteTrainer, operationKey, type EngineState, type SessionRuntime } from './state';
import type { OperationWork } from './work';

export interface SubmitOptions {
  invalidAs?: 'http-error' | 'failed-operation';
  kind?: EngineOperationKind;
}

/** Operations: submitted with idempotency-key dedup, run one at a time per session in submission order. */
export class Operations {
  constructor(
    private readonly state: EngineState,
    private readonly lifecycle: Lifecycle,
    private readonly sessions: Sessions,
    private readonly work: OperationWork,
    private readonly faults: FaultInjector,
  ) {}

  /**
   * Submits an operation. The same idempotency key returns the original operation (counted as a duplicate
   * absorbed); the same key with a different body is refused. With `invalidAs: 'failed-operation'` a body that
   * fails validation is recorded as an operation FAILED with INVALID_INPUT (for dialects whose clients resend
   * a refused submit), instead of a 400.
   */
  submit(
    sessionId: string,
    owner: string,
    key: string | undefined,
    bodyText: string,
    parse: () => OperationInput,
    options: SubmitOptions = {},
  ): OperationRecord {
    const s = this.sessions.get(sessionId, owner);
    if (!key || key.trim() === '')
      throw badRequest('the Idempotency-Key header is required on operation requests', 'MISSING_IDEMPOTENCY_KEY');
    if (key.length > 255) throw badRequest('Idempotency-Key must be at most 255 characters', 'INVALID_IDEMPOTENCY_KEY');
    const bodyHash = createHash('sha256').update(bodyText).digest('hex');
    const existing = this.state.operationsByKey.get(operationKey(s.id, key));
    if (existing) {
      if (existing.bodyHash !== bodyHash) {
        throw new EmulatorHttpError(
          400,
          'IDEMPOTENCY_KEY_REUSED',
          `Idempotency-Key '${key}' was already used for a different ${existing.kind} request on this session; use a new key for a changed body`,
        );
      }
      s.duplicatesAbsorbed += 1;
      this.state.changed();
      return existing;
    }
    const { input, invalid } = parseOrRecordInvalid(parse, options);
    const op = this.record(s, key, bodyHash, input?.kind ?? options.kind!, input);
    const rt = this.state.runtimes.get(s.id);
    if (invalid !== undefined) {
      this.lifecycle.failOperation(op, 'INVALID_INPUT', invalid);
    } else if (s.status !== 'RUNNING' || !rt) {
      this.lifecycle.failOperation(op, 'SESSION_NOT_ACTIVE', `session ${s.id} is ${s.status.toLowerCase()}`);
    } else {
      rt.queue.push(op);
      void this.pump(s, rt);
    }
    this.state.changed();
    return op;
  }

  /** A new PENDING operation under its key; submitting counts as activity on the session and its resource. */
  private record(
    s: SessionRecord,
    key: string,
    bodyHash: string,
    kind: EngineOperationKind,
    input: OperationInput | undefined,
  ): OperationRecord {
    const op: OperationRecord = {
      id: randomUUID(),
      sessionId: s.id,
      kind,
      key,
      bodyHash,
      status: 'PENDING',
      submittedAt: this.state.now(),
      input,
    };
    this.state.operations.set(op.id, op);
    this.state.operationsByKey.set(operationKey(s.id, key), op);
    s.operationsSubmitted += 1;
    s.lastActivityAt = op.submittedAt;
    const r = this.state.resources.get(s.resourceId);
    if (r) r.lastActivityAt = op.submittedAt;
    return op;
  }

  /** The operation a session recorded under an idempotency key (dialects whose operation ids are the keys). */
  byKey(sessionId: string, owner: string, key: string): OperationRecord {
    this.sessions.get(sessionId, owner);
    const op = this.state.operationsByKey.get(operationKey(sessionId, key));
    if (!op) throw notFound('operation', key);
    return op;
  }

  get(sessionId: string, owner: string, operationId: string, kind?: OperationKind): OperationRecord {
    this.sessions.get(sessionId, owner);
    const op = this.state.operations.get(operationId);
    if (!op || op.sessionId !== sessionId || (kind !== undefined && op.kind !== kind)) throw notFound('operation', operationId);
    return op;
  }

  /** Resolves when the operation has completed or failed (for synchronous dialect routes and tests). */
  async settled(op: OperationRecord, timeoutMs = 60_000): Promise<OperationRecord> {
    await this.state.whenSettled(op, timeoutMs);
    return op;
  }

  /** Waits (up to 5 s each) for queued operations to finish. */
  async drain(): Promise<void> {
    for (const s of this.state.sessions.values()) {
      const rt = this.state.runtimes.get(s.id);
      if (rt) for (const op of [...rt.queue]) await this.settled(op, 5_000);
    }
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
      if (!LIVE_SESSION.has(s.status)) this.lifecycle.disposeRuntime(s.id);
    }
  }

  /**
   * Simulated compute. Latency: each operation takes `operationLatencyMs`, one after another per session.
   * Clock cycles: an operation runs on the first tick after it was submitted, and every operation queued by a
   * tick runs in that tick, as hosted trainers batch work (so a client that awaits forward_backward before
   * submitting optim_step spends two cycles per step, one that submits both back to back spends one).
   */
  private async waitForCompute(op: OperationRecord): Promise<void> {
    const { operationLatencyMs, clockCycleMs } = this.state.options;
    if (operationLatencyMs > 0) await new Promise((r) => setTimeout(r, operationLatencyMs));
    if (clockCycleMs > 0) {
      const tick = Math.ceil((op.submittedAt + 1) / clockCycleMs) * clockCycleMs;
      const wait = tick - this.state.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
  }

  /** An injected operation-level fault takes the operation's place (it applies nothing); false when none fires. */
  private injectFault(s: SessionRecord, r: ResourceRecord, op: OperationRecord): boolean {
    const fault = this.faults.draw(OPERATION_FAULTS, { operation: op.kind, dialect: r.dialect });
    switch (fault?.kind) {
      case 'fail-operation':
        this.lifecycle.failOperation(op, fault.errorCode, 'injected fault: operation failed');
        return true;
      case 'resource-error':
      case 'preempt': {
        const preempted = fault.kind === 'preempt';
        const message = preempted ? 'injected fault: the GPUs were reclaimed (preempted)' : 'injected fault: the resource died';
        this.lifecycle.failResource(r, preempted ? 'PREEMPTED' : 'RESOURCE_UNAVAILABLE', message);
        this.lifecycle.failOperation(op, 'SESSION_NOT_ACTIVE', `resource ${r.id} failed while running this operation`);
        return true;
      }
      case 'session-expire':
      case 'session-error': {
        if (r.dialect === 'tinker') {
          // The model's Tinker session expired: the dialect ends the session and its other models when it next looks.
          this.lifecycle.failResource(r, 'SESSION_EXPIRED', 'injected fault: the Tinker session expired');
          this.lifecycle.failOperation(op, 'SESSION_NOT_ACTIVE', `the Tinker session of model ${r.id} expired`);
          return true;
        }
        const status = fault.kind === 'session-expire' ? 'EXPIRED' : 'ERROR';
        const error = { code: 'SESSION_FAILED', message: 'injected fault: the session failed', occurredAt: this.state.now() };
        this.lifecycle.endSession(s, status, status === 'ERROR' ? error : undefined);
        this.lifecycle.failOperation(op, 'SESSION_NOT_ACTIVE', `session ${s.id} is ${status.toLowerCase()}`);
        return true;
      }
      default:
        return false;
    }
  }

  /** The work itself: COMPLETED with its output, or FAILED with the learner's error (a failed one applied nothing). */
  private async run(s: SessionRecord, rt: SessionRuntime, op: OperationRecord, input: OperationInput): Promise<void> {
    try {
      op.output = await this.work.run(s, rt, input);
      this.state.trained.note(s, op.key, input);
      noteTrainer(s, rt.learner);
      op.status = 'COMPLETED';
      op.completedAt = this.state.now();
      delete op.input;
      this.state.noteSettled(op);
    } catch (err) {
      const code = (err as { code?: string }).code;
      this.lifecycle.failOperation(
        op,
        code === 'NON_FINITE_LOSS' ? 'NON_FINITE_LOSS' : code === 'INVALID_INPUT' ? 'INVALID_INPUT' : 'INTERNAL_ERROR',
        (err as Error).message,
      );
    }
  }

  /** Runs one operation unless the session is over or an injected fault takes its place. */
  private async execute(s: SessionRecord, rt: SessionRuntime, op: OperationRecord): Promise<void> {
    const input = op.input!;
    const r = this.state.resourceOf(s);
    this.lifecycle.refreshResource(r, this.state.now());
    if (r.status !== 'READY' || s.status !== 'RUNNING') {
      this.lifecycle.failOperation(
        op,
        'SESSION_NOT_ACTIVE',
        `session ${s.id} is ${s.status.toLowerCase()} (resource ${r.status.toLowerCase()})`,
      );
      return;
    }
    if (!this.injectFault(s, r, op)) await this.run(s, rt, op, input);
    s.lastActivityAt = this.state.now();
    r.lastActivityAt = this.state.now();
    this.state.changed();
  }
}

/** Validation errors surface as 400 before anything is recorded, unless the dialect records them as a failed operation. */
function parseOrRecordInvalid(parse: () => OperationInput, options: SubmitOptions): { input?: OperationInput; invalid?: string } {
  try {
    return { input: parse() };
  } catch (err) {
    if (options.invalidAs !== 'failed-operation' || !options.kind || !(err instanceof EmulatorHttpError && err.status === 400)) throw err;
    return { invalid: err.message };
  }
}
