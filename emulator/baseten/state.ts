import { randomBytes } from 'node:crypto';
import type { Engine, ResourceRecord, SessionRecord } from '../engine';
import { ownerOf } from '../engine';
import { EmulatorHttpError, notFound } from '../errors';
import type { EmulatorRequest } from '../http';
import { checkpointRef, parseCheckpointPath } from './requests';

/**
 * How Baseten Loops' objects sit on the engine. A run (trainer) is an engine resource of dialect `baseten`
 * whose one engine session has the run's id; the session appears at the run's first trainer request
 * (`init_trainer_server`) and lives as long as the run. A run's paired sampler is part of the run's resource
 * (its generator); a standalone sampler is a resource of its own. Loops sessions are containers of runs.
 * Everything dialect-specific lives in the resource's `extra`, so it persists with the engine.
 */

export interface SamplerInfo {
  id: string;
  modelId: string;
  deploymentId: string;
  createdAt: number;
  sessionId: string;
  runId?: string;
  modelPath?: string;
  /** A duplicate made by a resent paired create (the `duplicate-create` fault): the run it was meant for. */
  duplicateOf?: string;
}

export interface RunExtra {
  kind: 'trainer';
  sessionId: string;
  name: string;
  deploymentId: string;
  loraRank: number;
  seed?: number;
  maxSeqLen: number;
  replicas: number;
  availabilityModel: 'dedicated' | 'spot';
  scaleDownDelaySeconds: number;
  path?: string;
  /** The prior run whose warm trainer this one reused (`reuse_from_run_id`, where it applied). */
  reusedFromRunId?: string;
  sampler?: SamplerInfo;
  /** Set when deactivated (or replaced by a newer run of the session); a stop without it is a scale-down. */
  deactivatedAt?: number;
  replacedBy?: string;
}

export interface SamplerExtra {
  kind: 'sampler';
  sampler: SamplerInfo;
  deactivatedAt?: number;
}

const ACTIVE = new Set(['PENDING', 'CREATING', 'READY']);

export function isActive(r: ResourceRecord): boolean {
  return ACTIVE.has(r.status);
}

export function runExtra(r: ResourceRecord): RunExtra {
  return r.extra as unknown as RunExtra;
}

export function samplerExtra(r: ResourceRecord): SamplerExtra {
  return r.extra as unknown as SamplerExtra;
}

/** Baseten-style short ids (lowercase letters and digits). */
export function loopsId(taken: (id: string) => boolean, length = 7): string {
  for (;;) {
    const id = [...randomBytes(length)].map((b) => 'abcdefghijklmnopqrstuvwxyz0123456789'[b % 36]).join('');
    if (/^[a-z]/.test(id) && !taken(id)) return id;
  }
}

/**
 * The API key, in what Baseten documents as accepted (providers/baseten/WIRE.md §1.3): `Authorization: Api-Key <key>`,
 * which the SDK sends on every plane, or `Authorization: Bearer <key>`, which the docs and OpenAPI show ("the legacy
 * `Api-Key` scheme is also accepted"). The scheme is case-insensitive (RFC 9110 §11.1). Anything else (no header, another
 * scheme, a bare key, `X-Api-Key`) is a 401. The owner derives from the key.
 */
export function loopsOwner(req: EmulatorRequest): string {
  const header = req.headers.authorization;
  const match = typeof header === 'string' ? /^(?:Api-Key|Bearer)\s+(\S+)$/i.exec(header.trim()) : null;
  if (!match)
    throw new EmulatorHttpError(
      401,
      'UNAUTHENTICATED',
      'missing or malformed Authorization header; expected "Api-Key <api key>" or "Bearer <api key>"',
    );
  return ownerOf(match[1]!);
}

/** The scheme and host the caller reached us on: data-plane URLs are built from it, so they survive a port change. */
export function originOf(req: EmulatorRequest): string {
  return `http://${req.headers.host ?? '127.0.0.1'}`;
}

/** A dedicated deployment that was deactivated answers this way; the SDK does not retry it. */
export function deactivatedModel(what: string): EmulatorHttpError {
  return new EmulatorHttpError(404, 'MODEL_DEACTIVATED', `${what} is inactive (deactivated, scaled to zero or failed)`, {
    'x-baseten-error-source': '01',
    'x-baseten-error-code': '631',
  });
}

export class LoopsState {
  /** Loops sessions created since start (a session is only a container; after a restart its runs vouch for it). */
  private readonly sessions = new Map<string, { id: string; owner: string; createdAt: number }>();
  private readonly creatingSessions = new Map<string, Promise<SessionRecord>>();

  constructor(readonly engine: Engine) {}

  newId(): string {
    return loopsId((id) => this.engine.findResource(id) !== undefined || this.sessions.has(id) || this.samplerIdTaken(id));
  }

  private samplerIdTaken(id: string): boolean {
    return this.engine.listResources({ dialect: 'baseten' }).some((r) => (r.extra as { sampler?: SamplerInfo }).sampler?.id === id);
  }

  createSession(owner: string): { id: string; createdAt: number } {
    const session = { id: this.newId(), owner, createdAt: Date.now() };
    this.sessions.set(session.id, session);
    return session;
  }

  session(id: string, owner: string): { id: string; createdAt: number } {
    const known = this.sessions.get(id);
    if (known && known.owner === owner) return known;
    const run = this.runs(owner).find((r) => runExtra(r).sessionId === id);
    if (run) return { id, createdAt: run.createdAt };
    throw notFound('session', id);
  }

  /** This owner's trainer runs, newest first. */
  runs(owner: string): ResourceRecord[] {
    return this.engine.listResources({ owner, dialect: 'baseten' }).filter((r) => r.extra.kind === 'trainer');
  }

  run(id: string, owner: string): ResourceRecord {
    this.engine.refreshAround(id);
    const r = this.engine.findResource(id);
    if (!r || r.owner !== owner || r.dialect !== 'baseten' || r.extra.kind !== 'trainer') throw notFound('run', id);
    return r;
  }

  runByDeployment(deploymentId: string, owner: string): ResourceRecord {
    const r = this.runs(owner).find((x) => runExtra(x).deploymentId === deploymentId);
    if (!r) throw notFound('deployment', deploymentId);
    return r;
  }

  /** Samplers of this owner, newest first: the resource that serves each (a run's, or the sampler's own). */
  samplers(owner: string): { resource: ResourceRecord; sampler: SamplerInfo }[] {
    return this.engine
      .listResources({ owner, dialect: 'baseten' })
      .flatMap((r) => {
        const sampler = (r.extra as { sampler?: SamplerInfo }).sampler;
        return sampler ? [{ resource: r, sampler }] : [];
      })
      .sort((a, b) => b.sampler.createdAt - a.sampler.createdAt);
  }

  sampler(id: string, owner: string): { resource: ResourceRecord; sampler: SamplerInfo } {
    const found = this.samplers(owner).find((s) => s.sampler.id === id);
    if (!found) throw notFound('sampler', id);
    return found;
  }

  /** Deactivation: the resource stops (billing ends) and the run (or sampler) is INACTIVE from now on. */
  deactivate(r: ResourceRecord, replacedBy?: string): void {
    if (!isActive(r)) return;
    const extra = r.extra as { deactivatedAt?: number; replacedBy?: string };
    extra.deactivatedAt = Date.now();
    if (replacedBy) extra.replacedBy = replacedBy;
    this.engine.stopResource(r.id, r.owner, true);
  }

  /** The run's (or sampler's) engine session, created on first use with a fresh adapter (or the run's `path`). */
  async ensureSession(r: ResourceRecord): Promise<SessionRecord> {
    const existing = this.engine.findSession(r.id);
    if (existing) return existing;
    let creating = this.creatingSessions.get(r.id);
    if (!creating) {
      const extra = r.extra as Partial<RunExtra> & Partial<SamplerExtra>;
      const fromCheckpoint = extra.kind === 'sampler' ? extra.sampler?.modelPath : extra.path;
      creating = this.engine
        .createSession({
          id: r.id,
          resourceId: r.id,
          owner: r.owner,
          lora: { rank: Math.min(extra.loraRank ?? 8, r.model.maxLoraRank), ...(extra.seed !== undefined ? { seed: extra.seed } : {}) },
          resumeFromCheckpointId: fromCheckpoint ? this.checkpointIdOf(fromCheckpoint, r.owner) : undefined,
        })
        .finally(() => this.creatingSessions.delete(r.id));
      this.creatingSessions.set(r.id, creating);
    }
    return creating;
  }

  /** The engine checkpoint a bt:// path names (latest of that name on that run). */
  checkpointIdOf(uri: string, owner: string): string | undefined {
    const path = parseCheckpointPath(uri);
    return path && this.engine.findCheckpoint(checkpointRef(path), owner)?.id;
  }
}
