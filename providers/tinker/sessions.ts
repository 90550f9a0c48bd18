import { z } from 'zod';
import { ProviderError } from '../errors';
import type { ModelInfo, ProvisionRequest, TrainerResource, WaitReadyOptions } from '../types';
import { AnyJson, TINKER_WIRE_VERSION, type TinkerApi } from './auth';
import { Future, retrieve, type ModelState } from './futures';

/** A Tinker session as Roundhouse uses it: one per provisioned trainer, its base model and owner in its metadata. */
export interface SessionState {
  id: string;
  baseModel: string;
  ownerTag?: string;
  displayName?: string;
  nextModelSeq: number;
  nextSamplerSeq: number;
  heartbeat?: NodeJS.Timeout;
  /** The models this process made in it: where a server lists none, what its release unloads. */
  models: Set<string>;
  /** Where the server cannot say what became of a session: a model of it was lost (its session may have expired with it). */
  lost?: boolean;
}

/**
 * What a server was found to offer, learned from its answers, never probed for while it offers everything: hosted
 * Tinker sees the wire it always did. SkyRL's server (scripts/conformance/skyrl/FINDINGS.md) has neither.
 */
export interface ServerTraits {
  /** `sessions/search`, `GET sessions/{id}`, `sessions/{id}/finish`. */
  sessionRoutes?: boolean;
  /** `load_weights` addressed to a session, making the model (SDK 0.38's); else create, then load as its first request (SDK 0.25's). */
  sessionLoad?: boolean;
}

const SessionCreated = z.object({ session_id: z.string() }).passthrough();
const Capabilities = z.object({
  supported_models: z.array(
    z
      .object({
        model_name: z.string().nullish(),
        max_context_length: z.number().nullish(),
        max_lora_rank: z.number().nullish(),
        vocab_size: z.number().nullish(),
      })
      .passthrough(),
  ),
});
export const SessionInfo = z
  .object({
    training_run_ids: z.array(z.string()),
    sampler_ids: z.array(z.string()),
    user_metadata: z.record(z.string(), z.string()).nullish(),
    display_name: z.string().nullish(),
  })
  .passthrough();
const SessionSummary = z
  .object({
    session_id: z.string(),
    created_at: z.string(),
    status: z.object({ type: z.string() }).passthrough().nullish(),
    display_name: z.string().nullish(),
    user_metadata: z.record(z.string(), z.string()).nullish(),
  })
  .passthrough();
type SessionSummary = z.infer<typeof SessionSummary>;
const SearchPage = z.object({
  sessions: z.array(SessionSummary),
  next_cursor: z.object({ last_created_at: z.string(), last_session_id: z.string() }).passthrough().nullish(),
});

/** Metadata keys a Roundhouse session carries (Tinker's `user_metadata`, strings only). */
export const OWNER_KEY = 'roundhouse_owner';
const MODEL_KEY = 'roundhouse_base_model';

/**
 * Tinker sessions as trainer resources: made, found, heartbeated and released; with what each server was found to
 * offer (`traits`), since a self-hosted one (SkyRL) has no session routes.
 */
export class TinkerSessions {
  readonly sessions = new Map<string, SessionState>();
  readonly traits: ServerTraits = {};
  /** Sessions this process released on a server that cannot say (no session routes). */
  private readonly released = new Set<string>();

  constructor(
    private readonly api: TinkerApi,
    /** The models this process drives (a released session's are closed). */
    private readonly models: Map<string, ModelState>,
    private readonly heartbeatMs: number,
  ) {}

  async supportedModels(): Promise<ModelInfo[]> {
    const res = await this.api.call({ method: 'GET', path: '/api/v1/get_server_capabilities', schema: Capabilities });
    return res.supported_models.flatMap((m) =>
      m.model_name
        ? [
            {
              name: m.model_name,
              ...(m.max_lora_rank ? { maxLoraRank: m.max_lora_rank } : {}), // not every server says (SkyRL does not)
              maxSeqLen: m.max_context_length ?? 32_768,
              // Tinker documents no batch limit. The SDK splits a forward_backward into requests of at most 1024
              // datums (`fwdbwd_max_chunk_len`, WIRE.md); this client sends a step as one request, so 1024 per step is
              // our assumption (checked before provisioning), not a documented limit of the service.
              maxBatchSize: 1024,
              vocabSize: m.vocab_size ?? undefined,
              tokenizer: m.model_name,
              gpuCount: 0, // no GPU is held: Tinker bills tokens
            },
          ]
        : [],
    );
  }

  /**
   * `create_session` with the owner tag and base model in its metadata. Not resent blindly: a lost answer is
   * reconciled by the metadata it carries; where the server cannot search (SkyRL), it is made again (an empty
   * session holds nothing).
   */
  async provision(request: ProvisionRequest): Promise<TrainerResource> {
    const metadata = { [OWNER_KEY]: request.ownerTag, [MODEL_KEY]: request.model };
    const create = () =>
      this.api.post(
        '/create_session',
        {
          tags: ['roundhouse'],
          user_metadata: metadata,
          sdk_version: TINKER_WIRE_VERSION,
          display_name: request.ownerTag.slice(0, 200),
          type: 'create_session',
        },
        SessionCreated,
        { replaySafe: false },
      );
    let created: { session_id: string };
    try {
      created = await create();
    } catch (err) {
      if (!(err instanceof ProviderError && err.errorClass === 'needs-reconcile')) throw err;
      const page = await this.search({ user_metadata: metadata, statuses: [{ type: 'active' }], limit: 1 });
      if (page && !page.sessions[0]) throw err; // not created (yet): the caller lists again before creating anew
      created = page ? page.sessions[0]! : await create();
    }
    this.remember({
      id: created.session_id,
      baseModel: request.model,
      ownerTag: request.ownerTag,
      nextModelSeq: 0,
      nextSamplerSeq: 0,
      models: new Set(),
    });
    return {
      id: created.session_id,
      model: request.model,
      state: 'ready',
      providerStatus: 'active',
      createdAt: new Date().toISOString(),
      ownerTag: request.ownerTag,
    };
  }

  private remember(s: SessionState): SessionState {
    const known = this.sessions.get(s.id);
    if (known) return known;
    this.sessions.set(s.id, s);
    this.released.delete(s.id);
    s.heartbeat = setInterval(() => void this.heartbeat(s), this.heartbeatMs).unref();
    if (this.traits.sessionRoutes === false) void this.heartbeat(s); // a session never heartbeated never expires there
    return s;
  }

  private async heartbeat(s: SessionState): Promise<void> {
    try {
      await this.api.post('/session_heartbeat', { session_id: s.id, type: 'session_heartbeat' }, AnyJson, { replaySafe: true });
    } catch (err) {
      // 410: the session finished (the SDK's heartbeat stops too); 404: gone. Others: the next beat tries again.
      if (err instanceof ProviderError && (err.status === 410 || err.status === 404)) this.forget(s.id);
    }
  }

  private forget(sessionId: string): void {
    const s = this.sessions.get(sessionId);
    if (s?.heartbeat) clearInterval(s.heartbeat);
    this.sessions.delete(sessionId);
    for (const m of this.models.values()) if (m.tinkerSession === sessionId) m.closed = true;
  }

  /**
   * `sessions/search`, or undefined on a server without session routes (learned from its 404 the first time; the
   * sessions this process holds are then heartbeated at once, so that they can expire).
   */
  private async search(body: Record<string, unknown>): Promise<z.infer<typeof SearchPage> | undefined> {
    if (this.traits.sessionRoutes === false) return undefined;
    try {
      const page = await this.api.post('/sessions/search', body, SearchPage, { replaySafe: true });
      this.traits.sessionRoutes = true;
      return page;
    } catch (err) {
      if (!(err instanceof ProviderError && (err.status === 404 || err.status === 405))) throw err;
      this.traits.sessionRoutes = false;
      for (const s of this.sessions.values()) void this.heartbeat(s);
      return undefined;
    }
  }

  /** Whether a 404 (or 405) from a session route says the server has none (asked by a search when not known yet), not that the session is gone. */
  async lacksSessionRoutes(err: unknown, sessionId: string): Promise<boolean> {
    if (!(err instanceof ProviderError && (err.status === 404 || err.status === 405))) return false;
    if (this.traits.sessionRoutes === undefined) await this.search({ session_id: sessionId, limit: 1 }).catch(() => undefined);
    return this.traits.sessionRoutes === false;
  }

  /**
   * The session as this process knows it, else from the service (its metadata names the base model). A server
   * without session routes says nothing of it: its base model is the caller's (or the one model the server serves).
   * `fresh`: its model and sampler seqs as the service lists them, for a create: another process may have made models
   * there since this one looked, and a create under a seq the service has is that model (it dedups by seq), not a new one.
   */
  async session(sessionId: string, options: { baseModel?: string; fresh?: boolean } = {}): Promise<SessionState> {
    const known = this.sessions.get(sessionId);
    if (known && (!options.fresh || this.traits.sessionRoutes === false)) return known;
    let info: z.infer<typeof SessionInfo> | undefined;
    if (this.traits.sessionRoutes !== false) {
      try {
        info = await this.api.call({ method: 'GET', path: `/api/v1/sessions/${encodeURIComponent(sessionId)}`, schema: SessionInfo });
      } catch (err) {
        if (!(await this.lacksSessionRoutes(err, sessionId))) throw err;
      }
    }
    if (known) {
      if (info) {
        known.nextModelSeq = Math.max(known.nextModelSeq, nextSeqOf(info.training_run_ids, 'train'));
        known.nextSamplerSeq = Math.max(known.nextSamplerSeq, nextSeqOf(info.sampler_ids, 'sample'));
      }
      return known;
    }
    if (!info) {
      const model = options.baseModel ?? (await this.onlyServedModel());
      if (!model)
        throw new ProviderError('INVALID_INPUT', 'non-retryable', `Tinker session ${sessionId}: this server cannot say its base model`);
      return this.remember({ id: sessionId, baseModel: model, nextModelSeq: 0, nextSamplerSeq: 0, models: new Set() });
    }
    const model = info.user_metadata?.[MODEL_KEY];
    if (!model)
      throw new ProviderError('INVALID_INPUT', 'non-retryable', `Tinker session ${sessionId} was not made by Roundhouse (no ${MODEL_KEY})`);
    return this.remember({
      id: sessionId,
      baseModel: model,
      ownerTag: info.user_metadata?.[OWNER_KEY],
      displayName: info.display_name ?? undefined,
      nextModelSeq: nextSeqOf(info.training_run_ids, 'train'),
      nextSamplerSeq: nextSeqOf(info.sampler_ids, 'sample'),
      models: new Set(),
    });
  }

  /** The server's model, when it serves exactly one (a self-hosted server serves the model it was started with). */
  private async onlyServedModel(): Promise<string | undefined> {
    const models = await this.supportedModels();
    return models.length === 1 ? models[0]!.name : undefined;
  }

  async getResource(resourceId: string): Promise<TrainerResource> {
    const page = await this.search({ session_id: resourceId, limit: 1 });
    if (!page) return this.heldResource(resourceId);
    const s = page.sessions.find((x) => x.session_id === resourceId);
    if (!s)
      throw new ProviderError('NOT_FOUND', 'non-retryable', `Tinker session ${resourceId} not found`, {
        status: 404,
      });
    return toResource(s);
  }

  /**
   * A session as this process knows it, on a server that says nothing of sessions: held (ready), released here
   * (stopped), a model of it lost (failed: it may have expired). One it does not hold is taken as ready: such a server
   * deletes no session, and one takes models whatever became of it.
   */
  private heldResource(resourceId: string): TrainerResource {
    const s = this.sessions.get(resourceId);
    const state = this.released.has(resourceId) ? 'stopped' : s?.lost ? 'failed' : 'ready';
    const providerStatus = state === 'stopped' ? 'released' : state === 'failed' ? 'model lost' : s ? 'active' : 'unverified';
    return {
      id: resourceId,
      model: s?.baseModel ?? '',
      state,
      providerStatus,
      createdAt: '',
      ...(s?.ownerTag ? { ownerTag: s.ownerTag } : {}),
    };
  }

  /** A session is usable the moment it exists (nothing to place: the service is serverless). */
  async waitReady(resourceId: string, options: WaitReadyOptions = {}): Promise<TrainerResource> {
    const r = await this.getResource(resourceId);
    if (r.state !== 'ready')
      throw new ProviderError('RESOURCE_NOT_READY', 'non-retryable', `Tinker session ${resourceId} is ${r.providerStatus}`);
    options.onWait?.(r);
    return r;
  }

  /**
   * Every session of the account (`sessions/search`, newest first); `activeOnly`: those not finished, failed or
   * cancelled. A server without session routes lists none: only the sessions this process holds are known.
   */
  async listOwnedResources(options: { activeOnly?: boolean } = {}): Promise<TrainerResource[]> {
    const out: TrainerResource[] = [];
    let cursor: unknown;
    for (let pages = 0; pages < 10_000; pages++) {
      const page = await this.search({
        limit: 200,
        ...(options.activeOnly ? { statuses: [{ type: 'active' }] } : {}),
        ...(cursor ? { cursor } : {}),
      });
      if (!page)
        return [...this.sessions.keys()].map((id) => this.heldResource(id)).filter((r) => !options.activeOnly || r.state === 'ready');
      out.push(...page.sessions.map(toResource));
      if (!page.next_cursor) return out;
      cursor = page.next_cursor;
    }
    throw new ProviderError('INVALID_RESPONSE', 'retryable', 'sessions/search kept paging past 10,000 pages');
  }

  /**
   * `sessions/{id}/finish`: the session's models are released with it. Finishing twice, or a session gone, is fine.
   * Where the server has no finish (SkyRL), the models this process made in it are unloaded and its heartbeats stop:
   * the server expires it, and any model of it nobody could name, once its timeout has passed without a heartbeat.
   */
  async deactivate(resourceId: string): Promise<TrainerResource> {
    if (this.traits.sessionRoutes !== false) {
      try {
        await this.api.post(`/sessions/${encodeURIComponent(resourceId)}/finish`, { reason: { type: 'success' }, detail: null }, AnyJson, {
          replaySafe: true,
        });
        this.forget(resourceId);
        return await this.getResource(resourceId).catch(() => ({
          id: resourceId,
          model: '',
          state: 'stopped' as const,
          providerStatus: 'client_finished',
          createdAt: '',
        }));
      } catch (err) {
        if (!(err instanceof ProviderError && (err.status === 404 || err.status === 410))) throw err;
        if (!(await this.lacksSessionRoutes(err, resourceId))) {
          this.forget(resourceId);
          return { id: resourceId, model: '', state: 'stopped', providerStatus: 'NOT_FOUND', createdAt: '' };
        }
      }
    }
    const s = this.sessions.get(resourceId);
    for (const id of s?.models ?? []) if (!this.models.get(id)?.unloaded) await this.closeSession(id);
    this.forget(resourceId);
    this.released.add(resourceId);
    if (this.released.size > 4096) this.released.delete(this.released.values().next().value!);
    return { id: resourceId, model: s?.baseModel ?? '', state: 'stopped', providerStatus: 'released', createdAt: '' };
  }

  /** `unload_model`: the model's weights leave the service's memory; its checkpoints stay. */
  async closeSession(sessionId: string): Promise<void> {
    const m = this.models.get(sessionId);
    if (m?.unloaded) return;
    if (m) m.closed = true;
    try {
      const future = await this.api.post('/unload_model', { model_id: sessionId, type: 'unload_model' }, Future, { replaySafe: true });
      await retrieve(this.api, future.request_id, 'UnloadModel', {});
    } catch (err) {
      if (!(err instanceof ProviderError && (err.status === 404 || err.status === 410))) throw err;
    }
    if (m) m.unloaded = true;
  }

  /**
   * A model the service lost takes nothing more. On a server that says nothing of sessions, its session is taken as
   * lost with it (it may have expired: a model made there would never be released by the server).
   */
  lost(m: ModelState): void {
    m.failed = true;
    const s = this.sessions.get(m.tinkerSession);
    if (s && this.traits.sessionRoutes === false) s.lost = true;
  }

  /** Stops every heartbeat: the process is done with the service. */
  stopHeartbeats(): void {
    for (const s of this.sessions.values()) if (s.heartbeat) clearInterval(s.heartbeat);
    this.sessions.clear();
  }
}

function toResource(s: SessionSummary): TrainerResource {
  const status = s.status?.type ?? 'unknown';
  return {
    id: s.session_id,
    model: s.user_metadata?.[MODEL_KEY] ?? '',
    // A session whose status the service does not know (null) is taken as live: finishing it is harmless.
    state: status === 'failed' ? 'failed' : status === 'client_finished' || status === 'cancelled' ? 'stopped' : 'ready',
    providerStatus: status,
    createdAt: s.created_at,
    ...(s.user_metadata?.[OWNER_KEY] ? { ownerTag: s.user_metadata[OWNER_KEY] } : {}),
  };
}

/** FastAPI's answer for a route a server does not have: 404 `{"detail":"Not Found"}`, or 405. */
export function isNoRoute(err: unknown): boolean {
  return err instanceof ProviderError && (err.status === 405 || (err.status === 404 && /HTTP 404: Not Found$/.test(err.message)));
}

/** The next model (or sampler) seq after those a session lists: hosted ids (`…:train:<n>`) name theirs; others count. */
function nextSeqOf(ids: string[], kind: 'train' | 'sample'): number {
  return Math.max(ids.length, ...ids.map((id) => Number(new RegExp(`:${kind}:(\\d+)$`).exec(id)?.[1] ?? -1) + 1));
}
