import { badRequest } from '../errors';
import { CAPACITY_FAULTS, type FaultInjector } from '../faults';
import { findModel } from '../models';
import { shortId } from './ids';
import type { Lifecycle } from './lifecycle';
import type { ResourceRecord, ResourceStatus } from './records';
import { ACTIVE_RESOURCE, newestFirst, ownedOrNotFound, type EngineState } from './state';

export interface ResourceInput {
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
}

export interface ResourceFilter {
  owner?: string;
  statuses?: ResourceStatus[];
  dialect?: string;
  ownerTag?: string;
}

/** Resources (trainers with their generators): creation, lookup, stopping, keeping warm, and what they bill. */
export class Resources {
  constructor(
    private readonly state: EngineState,
    private readonly lifecycle: Lifecycle,
    private readonly faults: FaultInjector,
  ) {}

  /** A new resource: PENDING (in the capacity queue first when an injected capacity fault says so), then provisioning. */
  create(input: ResourceInput): ResourceRecord {
    const model = findModel(input.baseModel);
    if (!model) throw badRequest(`base_model '${input.baseModel}' is not supported; see the supported models list`);
    const { provisioningDelayMs, defaultInactiveTimeoutMs } = this.state.options;
    const now = this.state.now();
    const capacity = this.faults.draw(CAPACITY_FAULTS, { dialect: input.dialect });
    const queue = capacity && {
      position: capacity.queuePosition,
      until: now + capacity.durationMs,
      timesOut: capacity.kind === 'capacity-timeout',
    };
    const resource: ResourceRecord = {
      id: input.id ?? shortId('mr'),
      dialect: input.dialect,
      owner: input.owner,
      ownerTag: input.ownerTag,
      model,
      status: queue || provisioningDelayMs > 0 ? 'PENDING' : 'READY',
      createdAt: now,
      updatedAt: now,
      readyAt: (queue?.until ?? now) + provisioningDelayMs,
      numGeneratorReplicas: input.numGeneratorReplicas ?? 1,
      loraEnabled: input.loraEnabled ?? true,
      inactiveTimeoutMs: input.inactiveTimeoutMs ?? defaultInactiveTimeoutMs,
      lastActivityAt: now,
      extra: input.extra ?? {},
      ...(queue ? { capacityQueue: queue } : {}),
    };
    this.state.resources.set(resource.id, resource);
    this.state.changed();
    return resource;
  }

  get(id: string, owner?: string): ResourceRecord {
    this.lifecycle.refreshAround(id);
    return ownedOrNotFound(this.state.resources.get(id), owner, 'model resource', id);
  }

  list(filter: ResourceFilter): ResourceRecord[] {
    this.lifecycle.refresh();
    return [...this.state.resources.values()]
      .filter((r) => filter.owner === undefined || r.owner === filter.owner)
      .filter((r) => !filter.statuses?.length || filter.statuses.includes(r.status))
      .filter((r) => filter.dialect === undefined || r.dialect === filter.dialect)
      .filter((r) => filter.ownerTag === undefined || r.ownerTag === filter.ownerTag)
      .sort(newestFirst);
  }

  /**
   * Stops a resource. Refused (400) while sessions are live unless forced; a forced stop stops them too.
   * Stopping a resource that already stopped or failed is refused (400), as the real service does.
   */
  stop(id: string, owner: string | undefined, force: boolean): ResourceRecord {
    const r = this.get(id, owner);
    if (!ACTIVE_RESOURCE.has(r.status)) {
      throw badRequest(`model resource ${id} is already ${r.status.toLowerCase()}`, 'FAILED_PRECONDITION');
    }
    const live = this.state.liveSessionsOn(id);
    if (live.length > 0 && !force) {
      throw badRequest(
        `model resource ${id} has ${live.length} active training session(s); stop them first or pass force=true`,
        'FAILED_PRECONDITION',
      );
    }
    for (const s of live) this.lifecycle.endSession(s, 'STOPPED');
    this.lifecycle.beginStop(r, this.state.now());
    this.lifecycle.refreshResource(r, this.state.now());
    return r;
  }

  extendExpiry(id: string, owner: string | undefined, seconds: number): ResourceRecord {
    const r = this.get(id, owner);
    if (r.status !== 'READY') throw badRequest(`model resource ${id} is ${r.status.toLowerCase()}, not ready`, 'FAILED_PRECONDITION');
    const target = this.state.now() + seconds * 1000 - r.inactiveTimeoutMs;
    r.lastActivityAt = Math.max(r.lastActivityAt, target);
    r.updatedAt = this.state.now();
    this.state.changed();
    return r;
  }

  /** A request that keeps a resource warm without an operation (a health probe, a heartbeat). */
  noteActivity(resourceId: string): void {
    const r = this.state.resources.get(resourceId);
    if (!r || r.status !== 'READY') return;
    const now = this.state.now();
    r.lastActivityAt = now;
    for (const s of this.state.sessions.values()) if (s.resourceId === resourceId && s.status === 'RUNNING') s.lastActivityAt = now;
    this.state.changed();
  }
}

/** Where a create waiting for capacity stands in the queue (counting down to 1); undefined once it left (or never joined). */
export function queuePosition(r: ResourceRecord, now: number): number | undefined {
  const queue = r.capacityQueue;
  if (!queue || r.status !== 'PENDING' || now >= queue.until) return undefined;
  const left = (queue.until - now) / Math.max(1, queue.until - r.createdAt);
  return Math.max(1, Math.ceil(queue.position * left));
}

export function expiresAt(r: ResourceRecord): number | undefined {
  return r.status === 'READY' ? r.lastActivityAt + r.inactiveTimeoutMs : undefined;
}

/** Whether the resource's dialect bills the tokens its sessions process (Tinker) instead of GPU time. */
export function billsTokens(r: ResourceRecord): boolean {
  return r.dialect === 'tinker';
}

/** Billing: GPU-seconds while READY, per GPU the model holds (none where the dialect bills tokens). */
export function gpuSeconds(r: ResourceRecord, now: number): number {
  if (now < r.readyAt || billsTokens(r)) return 0;
  const end = r.leftReadyAt ?? (r.status === 'READY' ? now : r.readyAt);
  return (Math.max(0, end - r.readyAt) / 1000) * r.model.gpuCount;
}
