import type { OperationErrorCode, OperationRecord, ResourceRecord, ResourceStatus, SessionRecord, SessionStatus } from './records';
import { ACTIVE_RESOURCE, type EngineState } from './state';

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
    for (const r of this.state.resources.values()) this.refreshResource(r, now);
    for (const s of this.state.sessions.values()) this.refreshSession(s, now);
  }

  refreshResource(r: ResourceRecord, now: number): void {
    const { provisioningDelayMs, stopDelayMs } = this.state.options;
    if (r.status === 'PENDING' || r.status === 'CREATING') {
      const half = r.createdAt + provisioningDelayMs / 2;
      const next: ResourceStatus = now >= r.readyAt ? 'READY' : now >= half ? 'CREATING' : 'PENDING';
      if (next !== r.status) {
        r.status = next;
        r.updatedAt = now;
        if (next === 'READY') r.lastActivityAt = r.readyAt;
        this.state.changed();
      }
    }
    if (r.status === 'READY' && !this.hasRunningOperation(r.id) && now - r.lastActivityAt >= r.inactiveTimeoutMs) {
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

  /** A resource dies (preemption, hardware): billing stops, its sessions fail. */
  failResource(r: ResourceRecord, code: string, message: string): void {
    if (!ACTIVE_RESOURCE.has(r.status)) return;
    const now = this.state.now();
    if (r.status === 'READY') r.leftReadyAt = now;
    r.status = 'ERROR';
    r.updatedAt = now;
    r.error = { code, message, occurredAt: now };
    for (const s of this.state.liveSessionsOn(r.id)) {
      s.error = { code: 'RESOURCE_UNAVAILABLE', message, occurredAt: now };
      this.endSession(s, 'ERROR');
    }
    this.state.changed();
  }

  /** A session ends: its queued operations fail, and its learners are freed once no operation runs. */
  endSession(s: SessionRecord, status: SessionStatus): void {
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
  }
}
