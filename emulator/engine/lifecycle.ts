import type {
  OperationErrorCode,
  OperationRecord,
  ResourceRecord,
  ResourceStatus,
  SessionRecord,
  SessionStatus,
  StatusError,
} from './records';
import { ACTIVE_RESOURCE, noteTrainer, type EngineState } from './state';

/**
 * The records' state machines. Time-driven transitions (provisioning, stopping, idle expiry) are computed from
 * timestamps whenever state is read, so the ledger is exact whenever it is read; the others end sessions and
 * fail their queued operations.
 */
export class Lifecycle {
  constructor(private readonly state: EngineState) {}

  /** Brings time-driven state up to date: provisioning, stopping, inactivity auto-stop, session idle expiry. */
  refresh(): void {
    const now = this.state.now();
    // Which resources have work queued or running, found once (a per-resource search made this quadratic in the
    // sessions, on every request: the bottleneck of the scale benchmark at 1,000 rounds).
    const busy = this.busyResources();
    for (const r of this.state.resources.values()) this.refreshResource(r, now, busy);
    for (const s of this.state.sessions.values()) this.refreshSession(s, now);
  }

  /**
   * One resource's time-driven state and its sessions': what a read of that resource or one of its sessions needs.
   * A read of one record refreshes only its neighbourhood; lists and the ledger refresh everything.
   */
  refreshAround(resourceId: string): void {
    const now = this.state.now();
    const r = this.state.resources.get(resourceId);
    if (r) this.refreshResource(r, now);
    for (const s of this.state.sessions.values()) if (s.resourceId === resourceId) this.refreshSession(s, now);
  }

  /** `busy`: the resources with work queued or running, when the caller has them (else this resource is looked up). */
  refreshResource(r: ResourceRecord, now: number, busy?: Set<string>): void {
    const { provisioningDelayMs, stopDelayMs } = this.state.options;
    const queue = r.capacityQueue;
    if (r.status === 'PENDING' && queue?.timesOut && now >= queue.until) {
      this.failResource(r, 'CAPACITY_WAIT_TIMEOUT', 'injected fault: no capacity for this GPU type within the capacity wait', queue.until);
    }
    if (r.status === 'PENDING' || r.status === 'CREATING') {
      // Provisioning starts when the create leaves the capacity queue: half waiting for pods, half loading.
      const half = (queue?.until ?? r.createdAt) + provisioningDelayMs / 2;
      const next: ResourceStatus = now >= r.readyAt ? 'READY' : now >= half ? 'CREATING' : 'PENDING';
      if (next !== r.status) {
        r.status = next;
        r.updatedAt = now;
        if (next === 'READY') r.lastActivityAt = r.readyAt;
        this.state.changed();
      }
    }
    const running = () => (busy ? busy.has(r.id) : this.hasRunningOperation(r.id));
    if (r.status === 'READY' && now - r.lastActivityAt >= r.inactiveTimeoutMs && !running()) {
      this.beginStop(r, r.lastActivityAt + r.inactiveTimeoutMs, 'EXPIRED');
    }
    if (r.status === 'STOPPING' && now >= (r.stopRequestedAt ?? now) + stopDelayMs) {
      r.status = 'STOPPED';
      r.updatedAt = now;
      this.state.changed();
    }
  }

  refreshSession(s: SessionRecord, now: number): void {
    const { sessionIdleExpiryMs, stopDelayMs } = this.state.options;
    if (s.status === 'RUNNING' && now - s.lastActivityAt >= sessionIdleExpiryMs) {
      this.endSession(s, 'EXPIRED');
    }
    if (s.status === 'STOPPING' && now >= (s.stopRequestedAt ?? now) + stopDelayMs) {
      this.endSession(s, 'STOPPED');
    }
  }

  private busyResources(): Set<string> {
    const busy = new Set<string>();
    for (const [sessionId, rt] of this.state.runtimes) {
      if (!(rt.pumping || rt.queue.length > 0)) continue;
      const s = this.state.sessions.get(sessionId);
      if (s) busy.add(s.resourceId);
    }
    return busy;
  }

  /** A resource with work queued or running never idles out. */
  private hasRunningOperation(resourceId: string): boolean {
    for (const s of this.state.sessions.values()) {
      if (s.resourceId !== resourceId) continue;
      const rt = this.state.runtimes.get(s.id);
      if (rt && (rt.pumping || rt.queue.length > 0)) return true;
    }
    return false;
  }

  /** A resource starts stopping at `at` (billing ends there) and its live sessions end with `sessionEnd`. */
  beginStop(r: ResourceRecord, at: number, sessionEnd: SessionStatus = 'STOPPED'): void {
    if (r.status === 'READY' || r.status === 'PENDING' || r.status === 'CREATING') {
      r.leftReadyAt = r.status === 'READY' ? at : undefined;
      r.status = 'STOPPING';
      r.stopRequestedAt = at;
      r.updatedAt = this.state.now();
      for (const s of this.state.liveSessionsOn(r.id)) this.endSession(s, sessionEnd);
      this.state.changed();
    }
  }

  /** A resource dies (preemption, hardware, no capacity) at `at`: billing stops, its sessions fail. */
  failResource(r: ResourceRecord, code: string, message: string, at = this.state.now()): void {
    if (!ACTIVE_RESOURCE.has(r.status)) return;
    const now = this.state.now();
    if (r.status === 'READY') r.leftReadyAt = at;
    r.status = 'ERROR';
    r.updatedAt = now;
    r.error = { code, message, occurredAt: at };
    for (const s of this.state.liveSessionsOn(r.id)) this.endSession(s, 'ERROR', { code: 'RESOURCE_UNAVAILABLE', message, occurredAt: at });
    this.state.changed();
  }

  /** A session ends (with `error` for ERROR): its queued operations fail, and its learners are freed once no operation runs. */
  endSession(s: SessionRecord, status: SessionStatus, error?: StatusError): void {
    if (error) s.error = error;
    s.status = status;
    s.updatedAt = this.state.now();
    const rt = this.state.runtimes.get(s.id);
    if (rt) {
      for (const op of rt.queue) this.failOperation(op, 'SESSION_NOT_ACTIVE', `session ${s.id} is ${status.toLowerCase()}`);
      rt.queue.length = 0;
      if (!rt.pumping) this.disposeRuntime(s.id);
    }
    this.state.changed();
  }

  disposeRuntime(sessionId: string): void {
    const rt = this.state.runtimes.get(sessionId);
    if (!rt) return;
    const s = this.state.sessions.get(sessionId);
    if (s) noteTrainer(s, rt.learner);
    this.state.runtimes.delete(sessionId);
    rt.learner.dispose();
    rt.generator.dispose();
    rt.pinned?.learner.dispose();
  }

  failOperation(op: OperationRecord, code: OperationErrorCode, message: string): void {
    op.status = 'FAILED';
    op.error = { code, message };
    op.completedAt = this.state.now();
    delete op.input;
    this.state.noteSettled(op);
  }
}
