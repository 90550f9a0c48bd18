import { createHash } from 'node:crypto';
import { z } from 'zod';
import { accountFingerprint } from '../account';
import { checkpointName, operationKey } from '../keys';
import { ProviderError } from '../errors';
import { HttpClient, errorBody, poll, type HttpClientOptions, type RequestSpec } from '../http';
import type {
  AdamParams,
  AwaitOptions,
  CheckpointResult,
  Datum,
  ForwardBackwardOptions,
  ForwardResult,
  ModelInfo,
  OpenSessionRequest,
  OperationHandle,
  OperationKind,
  OptimStepResult,
  ProvisionRequest,
  SampleResult,
  SamplingParams,
  TrainerResource,
  TrainingProvider,
  TrainingSessionInfo,
  WaitReadyOptions,
  WeightsSyncResult,
} from '../types';
import { operationFailure } from './failures';
import { decodeForwardBackwardOutput, decodeSampleResponse, encodeForwardBackward, type TinkerDatum } from './wire';

export const TINKER_DEFAULT_BASE_URL = 'https://tinker.thinkingmachines.dev/services/tinker-prod';
/** The SDK version whose wire this client speaks (WIRE.md); sent where the SDK sends its own. */
export const TINKER_WIRE_VERSION = '0.38.0';
/** How often an open session is heartbeated (the SDK's interval). */
const HEARTBEAT_MS = 10_000;

export interface TinkerProviderOptions extends Omit<HttpClientOptions, 'baseUrl' | 'authHeader'> {
  /** The service's base URL (`…/services/tinker-prod`), or the emulator's. Paths go under `<base>/api/v1`. */
  baseUrl?: string;
  /** Sent as `X-API-Key`: for the hosted service `tml-…` (or a JWT); a self-hosted server takes whatever it was given. */
  apiKey: string;
  /** Heartbeat interval of open sessions (default 10 s, as the SDK). */
  heartbeatMs?: number;
  /** Called with each credential the client obtains (a JWT from `auth/token`) before any request carries it: the caller masks it. */
  onSecret?: (value: string) => void;
}

/** What this process knows of a model it drives: Tinker runs a model's operations in `seq_id` order, and only its driver knows the order. */
interface ModelState {
  id: string;
  /** The Tinker session it was made in (its id, the server's, says nothing of it on every server). */
  tinkerSession: string;
  displayName?: string;
  baseModel: string;
  /** The next `seq_id` to send (0 is the model's create). */
  nextSeq: number;
  /** The trainer's step when the model was made (a checkpoint's, with its optimizer), and optim steps submitted since. */
  baseStep: number;
  submittedSteps: number;
  /** Optim steps submitted and not seen to settle, and those that failed (they applied nothing): request id → the step it was sent as. */
  pendingOptims: Map<string, number>;
  failedOptims: Map<string, number>;
  /** Caller keys → the seq they were sent under and what was sent: a resubmission is the same operation. */
  keys: Map<string, { seq: number; fingerprint: string; handle?: OperationHandle<unknown> }>;
  /** A submit whose seq the service may not have: later operations would wait behind the gap, so none is sent. */
  gap?: { key: string; seq: number };
  /** The sampling session samples go to, and the step of its weights. */
  sampler?: { id: string; version: number; nextSeq: number };
  closed?: boolean;
  /** An operation failed because the model is gone (the service lost it): it takes no more. */
  failed?: boolean;
  /** `unload_model` answered: nothing of it is left to release. */
  unloaded?: boolean;
}

/** A Tinker session as Roundhouse uses it: one per provisioned trainer, its base model and owner in its metadata. */
interface SessionState {
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
interface ServerTraits {
  /** `sessions/search`, `GET sessions/{id}`, `sessions/{id}/finish`. */
  sessionRoutes?: boolean;
  /** `load_weights` addressed to a session, making the model (SDK 0.38's); else create, then load as its first request (SDK 0.25's). */
  sessionLoad?: boolean;
}

/** The handle of a save found already made (its 409): `listed:<tinker path>`, settled from the checkpoint listing. */
const LISTED = 'listed:';
const Future = z.object({ request_id: z.string(), model_id: z.string().nullish() }).passthrough();
const MadeModel = z.object({ model_id: z.string().nullish() }).passthrough();
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
const SessionInfo = z
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
const AnyJson = z.unknown();

/** Metadata keys a Roundhouse session carries (Tinker's `user_metadata`, strings only). */
const OWNER_KEY = 'roundhouse_owner';
const MODEL_KEY = 'roundhouse_base_model';

/**
 * Tinker behind the provider-neutral interface (wire notes: WIRE.md beside this file), for the hosted service and
 * for self-hosted servers of the same API (SkyRL's: scripts/conformance/skyrl/FINDINGS.md).
 *
 * - A trainer resource is a Tinker **session**: free to hold (Tinker bills tokens, not GPU time), created with the
 *   owner tag and base model in its `user_metadata`, found again by `sessions/search`, released by `finish`, and
 *   heartbeated every 10 s while this process uses it. A server without session routes (SkyRL) can neither find nor
 *   finish one: a lost create is made again (an empty session holds nothing), its release unloads the models this
 *   process made in it and stops its heartbeats (the server then expires it, with any model nobody could name), and
 *   it is heartbeated at once, since a session never heartbeated never expires there.
 * - A training session is a LoRA **model** of that session, under the id the server answers: `create_model`, or
 *   `load_weights` addressed to the session (a checkpoint with or without its optimizer state, the SDK's
 *   `create_training_client_from_state[_with_optimizer]`); where a server refuses a load addressed to a session, the
 *   model is created with the checkpoint's rank and the load is its first request (SDK 0.25's way). Closing one
 *   unloads it.
 * - Every operation is a future polled through `retrieve_future` (408 = still running); forward-backward bodies and
 *   results, and samples, are protobuf.
 * - Tinker runs a model's operations in `seq_id` order and dedups a resend by it, but no call says where a model's
 *   order stands. So only the process that made a model drives it: a caller key keeps its seq (a resubmission is the
 *   same operation), and to any other process the model reads as `expired` — the round reopens a model from its
 *   latest checkpoint (recovery), as a restarted SDK script has to. A submit that may not have reached the service
 *   leaves a gap later operations would wait behind: until it is resent under its key, nothing else is sent.
 * - Steps: the service reports none, so the step is counted here (a checkpoint's name carries its step, and a model
 *   loaded with the optimizer continues from it).
 * - Sampling goes to the model's sampling session: the weights of the last sync or sampler save (the first sample
 *   syncs the current weights). Stop strings are not sent (Tinker takes stop token ids); the caller cuts at them.
 */
export class TinkerProvider implements TrainingProvider {
  readonly kind = 'tinker' as const;
  readonly account: string;
  /** A session carries its owner tag from its create, and `sessions/search` finds it by it. */
  readonly tagsResourcesAtCreate = true;
  private readonly http: HttpClient;
  private readonly models = new Map<string, ModelState>();
  private readonly sessions = new Map<string, SessionState>();
  private readonly samples = new Map<string, OperationHandle<SampleResult[]>>();
  /**
   * Per forward request: each position's weight (positions of weight 0 are reported as logprob 0; Tinker returns every
   * position's), and whether its loss is cross-entropy (−Σ w·logprob, what a result without `loss:sum` adds up to).
   */
  private readonly lossInputs = new Map<string, { weights: number[][]; crossEntropy: boolean }>();
  private readonly heartbeatMs: number;
  private readonly traits: ServerTraits = {};
  /** Sessions this process released on a server that cannot say (no session routes). */
  private readonly released = new Set<string>();
  /** Per sample request: its prompt's length (SkyRL's prompt logprobs are one short). */
  private readonly promptLengths = new Map<string, number>();
  /** Whether the service wants JWTs (asked once, from `client/config`), and the current one. */
  private jwtMode: Promise<boolean> | undefined;
  private jwt: { value: string; exp: number; refreshAt: number } | undefined;
  private exchange: Promise<void> | undefined;
  private readonly onSecret: ((value: string) => void) | undefined;

  constructor(options: TinkerProviderOptions) {
    const baseUrl = (options.baseUrl ?? TINKER_DEFAULT_BASE_URL).replace(/\/+$/, '');
    if (isHostedTinker(baseUrl) && !(options.apiKey.startsWith('tml-') || options.apiKey.startsWith('eyJ')))
      throw new ProviderError('INVALID_INPUT', 'non-retryable', "a Tinker API key starts with 'tml-' (TINKER_API_KEY)");
    this.http = new HttpClient({ ...options, baseUrl, authHeader: 'x-api-key', userAgent: options.userAgent ?? 'roundhouse-tinker' });
    this.account = accountFingerprint(baseUrl, options.apiKey);
    this.heartbeatMs = options.heartbeatMs ?? HEARTBEAT_MS;
    this.onSecret = options.onSecret;
  }

  // ── auth ─────────────────────────────────────────────────────────────────────────────────────────

  /**
   * The credential requests carry in `X-API-Key`: the key itself, or, when the service's `client/config` says
   * `pjwt_auth_enabled`, a JWT from `auth/token` (exchanged with the key, refreshed at half its lifetime or within
   * 60 s of its expiry, and once more when a request is refused with `invalid_token`), as the SDK does.
   */
  private async credential(force = false): Promise<Record<string, string>> {
    this.jwtMode ??= this.http
      .request({
        method: 'POST',
        path: '/api/v1/client/config',
        body: { sdk_version: TINKER_WIRE_VERSION },
        replaySafe: true,
        schema: z.object({ pjwt_auth_enabled: z.boolean().nullish() }).passthrough(),
      })
      .then((c) => c.pjwt_auth_enabled === true)
      .catch((err: unknown) => {
        this.jwtMode = undefined; // asked again next time
        throw err;
      });
    if (!(await this.jwtMode)) return {};
    const now = Date.now() / 1000;
    const token = this.jwt;
    const stale = !token || now >= token.refreshAt || token.exp - now <= 60;
    if (force || stale) {
      this.exchange ??= this.http
        .request({
          method: 'POST',
          path: '/api/v1/auth/token',
          body: {},
          replaySafe: true,
          schema: z.object({ jwt: z.string() }).passthrough(),
        })
        .then(({ jwt }) => {
          this.onSecret?.(jwt);
          const claims = jwtClaims(jwt);
          this.jwt = { value: jwt, exp: claims.exp, refreshAt: claims.iat + (claims.exp - claims.iat) / 2 };
        })
        .finally(() => (this.exchange = undefined));
      await this.exchange;
    }
    return { 'x-api-key': this.jwt!.value };
  }

  /** A request with the current credential; a JWT refused as `invalid_token` is exchanged again and the request sent once more. */
  private async call<T>(spec: RequestSpec<T>): Promise<T> {
    try {
      return await this.http.request({ ...spec, headers: { ...spec.headers, ...(await this.credential()) } });
    } catch (err) {
      if (!(this.jwt && err instanceof ProviderError && err.status === 401)) throw err;
      return this.http.request({ ...spec, headers: { ...spec.headers, ...(await this.credential(true)) } });
    }
  }

  private async callRaw(spec: Omit<RequestSpec<unknown>, 'schema'>): Promise<{ status: number; contentType: string; bytes: Buffer }> {
    try {
      return await this.http.requestRaw({ ...spec, headers: { ...spec.headers, ...(await this.credential()) } });
    } catch (err) {
      if (!(this.jwt && err instanceof ProviderError && err.status === 401)) throw err;
      return this.http.requestRaw({ ...spec, headers: { ...spec.headers, ...(await this.credential(true)) } });
    }
  }

  private post<T>(path: string, body: Record<string, unknown>, schema: z.ZodType<T>, options: { replaySafe?: boolean; key?: string } = {}) {
    return this.call({
      method: 'POST',
      path: `/api/v1${path}`,
      body,
      schema,
      ...(options.key ? { idempotencyKey: options.key, idempotencyHeader: 'x-idempotency-key' } : {}),
      ...(options.replaySafe !== undefined ? { replaySafe: options.replaySafe } : {}),
    });
  }

  async supportedModels(): Promise<ModelInfo[]> {
    const res = await this.call({ method: 'GET', path: '/api/v1/get_server_capabilities', schema: Capabilities });
    return res.supported_models.flatMap((m) =>
      m.model_name
        ? [
            {
              name: m.model_name,
              ...(m.max_lora_rank ? { maxLoraRank: m.max_lora_rank } : {}), // not every server says (SkyRL does not)
              maxSeqLen: m.max_context_length ?? 32_768,
              maxBatchSize: 1024, // the SDK's chunk of datums per request; larger batches are several requests
              vocabSize: m.vocab_size ?? undefined,
              tokenizer: m.model_name,
              gpuCount: 0, // no GPU is held: Tinker bills tokens
            },
          ]
        : [],
    );
  }

  // ── sessions (trainer resources) ─────────────────────────────────────────────────────────────────

  /**
   * `create_session` with the owner tag and base model in its metadata. Not resent blindly: a lost answer is
   * reconciled by the metadata it carries; where the server cannot search (SkyRL), it is made again (an empty
   * session holds nothing).
   */
  async provision(request: ProvisionRequest): Promise<TrainerResource> {
    const metadata = { [OWNER_KEY]: request.ownerTag, [MODEL_KEY]: request.model };
    const create = () =>
      this.post(
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
      await this.post('/session_heartbeat', { session_id: s.id, type: 'session_heartbeat' }, AnyJson, { replaySafe: true });
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
      const page = await this.post('/sessions/search', body, SearchPage, { replaySafe: true });
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
  private async lacksSessionRoutes(err: unknown, sessionId: string): Promise<boolean> {
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
  private async session(sessionId: string, options: { baseModel?: string; fresh?: boolean } = {}): Promise<SessionState> {
    const known = this.sessions.get(sessionId);
    if (known && (!options.fresh || this.traits.sessionRoutes === false)) return known;
    let info: z.infer<typeof SessionInfo> | undefined;
    if (this.traits.sessionRoutes !== false) {
      try {
        info = await this.call({ method: 'GET', path: `/api/v1/sessions/${encodeURIComponent(sessionId)}`, schema: SessionInfo });
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
        await this.post(`/sessions/${encodeURIComponent(resourceId)}/finish`, { reason: { type: 'success' }, detail: null }, AnyJson, {
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

  // ── models (training sessions) ───────────────────────────────────────────────────────────────────

  /**
   * A LoRA model of the session, under the id the server gives it: `create_model`, or, when resuming, `load_weights`
   * addressed to the session. Where a server refuses that (SkyRL: 422, no `model_id`), the model is created with the
   * checkpoint's rank and the load is its first request; the server is remembered as one that wants it so.
   */
  async openSession(request: OpenSessionRequest): Promise<TrainingSessionInfo> {
    const s = await this.session(request.resourceId, { baseModel: request.baseModel, fresh: true });
    const from = request.fromCheckpoint;
    const baseStep = from?.loadOptimizer ? checkpointStep(from.id) : 0;
    let id = from && this.traits.sessionLoad !== false ? await this.loadAsNewModel(s, request, from) : undefined;
    let nextSeq = 1;
    if (!id) {
      const rank = from ? ((await this.checkpointRank(from.id)) ?? request.loraRank) : request.loraRank;
      id = await this.createModel(s, request, rank);
      if (from) nextSeq = await this.loadFirst(id, from);
    }
    this.models.set(id, {
      id,
      tinkerSession: s.id,
      displayName: request.displayName,
      baseModel: s.baseModel,
      nextSeq,
      baseStep,
      submittedSteps: 0,
      pendingOptims: new Map(),
      failedOptims: new Map(),
      keys: new Map(),
    });
    return { id, resourceId: s.id, state: 'running', step: baseStep, trainingCheckpointIds: [], displayName: request.displayName };
  }

  private modelMetadata(s: SessionState, request: OpenSessionRequest): Record<string, string> {
    return {
      ...(s.ownerTag ? { [OWNER_KEY]: s.ownerTag } : {}),
      ...(request.displayName ? { display_name: request.displayName } : {}),
    };
  }

  /** `create_model` of the session: the id the server answers (its future's result, else its submit's). */
  private async createModel(s: SessionState, request: OpenSessionRequest, rank: number): Promise<string> {
    const future = await this.post(
      '/create_model',
      {
        session_id: s.id,
        model_seq_id: s.nextModelSeq++,
        base_model: s.baseModel,
        lora_config: {
          rank,
          ...(request.seed !== undefined ? { seed: request.seed } : {}),
          train_unembed: true,
          train_mlp: true,
          train_attn: true,
        },
        user_metadata: this.modelMetadata(s, request),
        optimizer_config: { type: 'adamw' },
        type: 'create_model',
      },
      Future,
      // A resend of the model's seq 0 is the same create on hosted Tinker. SkyRL makes a second model (the first one,
      // unnamed, is released with its session's expiry): either way one model comes back.
      { replaySafe: true },
    );
    return this.madeModel(s, future, 'CreateModel');
  }

  /** `load_weights` addressed to the session (the model's seq 0); undefined when the server refuses that form. */
  private async loadAsNewModel(
    s: SessionState,
    request: OpenSessionRequest,
    from: NonNullable<OpenSessionRequest['fromCheckpoint']>,
  ): Promise<string | undefined> {
    let future: z.infer<typeof Future>;
    try {
      future = await this.post(
        '/load_weights',
        {
          session_id: s.id,
          model_seq_id: s.nextModelSeq++,
          path: from.id,
          optimizer: from.loadOptimizer,
          user_metadata: this.modelMetadata(s, request),
          type: 'load_weights',
        },
        Future,
        { replaySafe: true }, // the model's seq 0: a resend is the same create
      );
    } catch (err) {
      if (!(err instanceof ProviderError && (err.status === 422 || isNoRoute(err)))) throw err;
      this.traits.sessionLoad = false;
      return undefined;
    }
    this.traits.sessionLoad = true;
    return this.madeModel(s, future, 'LoadWeights');
  }

  /** The model a create (or create-via-load) made, once its future settles; a create the service failed made nothing. */
  private async madeModel(s: SessionState, future: z.infer<typeof Future>, type: string): Promise<string> {
    let result: unknown;
    try {
      result = (await this.retrieve(future.request_id, type, {})).json;
    } catch (err) {
      // It could not place the model: opening again is safe, so retryable as such, not a failed operation to roll back from.
      if (err instanceof ProviderError && err.code.startsWith('OPERATION_FAILED_') && err.errorClass === 'retryable')
        throw new ProviderError('MODEL_NOT_CREATED', 'retryable', `a Tinker model of session ${s.id} was not created: ${err.message}`, {
          providerCode: err.providerCode,
          cause: err,
        });
      throw err;
    }
    const id = MadeModel.safeParse(result ?? {}).data?.model_id ?? future.model_id;
    if (!id)
      throw new ProviderError(
        'BAD_RESPONSE',
        'non-retryable',
        `${type} ${future.request_id}: no model_id in the submit answer or the result`,
      );
    s.models.add(id);
    return id;
  }

  /** `weights_info`: a training checkpoint's LoRA rank (a model it is loaded into must have it); undefined where there is no such route. */
  private async checkpointRank(path: string): Promise<number | undefined> {
    try {
      const info = await this.post('/weights_info', { tinker_path: path }, z.object({ lora_rank: z.number().nullish() }).passthrough(), {
        replaySafe: true,
      });
      return info.lora_rank ?? undefined;
    } catch (err) {
      if (isNoRoute(err)) return undefined;
      throw err;
    }
  }

  /**
   * The checkpoint loaded as a fresh model's first request (seq 1; a server refuses it later, and refuses a resend);
   * the model's next seq. A load that failed, or whose answer was lost, leaves a model that holds no checkpoint (or
   * cannot be told to): it is unloaded, and opening again is safe.
   */
  private async loadFirst(modelId: string, from: NonNullable<OpenSessionRequest['fromCheckpoint']>): Promise<number> {
    try {
      const future = await this.post(
        '/load_weights',
        { model_id: modelId, seq_id: 1, path: from.id, optimizer: from.loadOptimizer, type: 'load_weights' },
        Future,
        { replaySafe: false },
      );
      await this.retrieve(future.request_id, 'LoadWeights', {});
      return 2;
    } catch (err) {
      await this.closeSession(modelId).catch(() => undefined);
      if (
        err instanceof ProviderError &&
        (err.errorClass === 'needs-reconcile' || (err.code.startsWith('OPERATION_FAILED_') && err.errorClass === 'retryable'))
      )
        throw new ProviderError('MODEL_NOT_CREATED', 'retryable', `Tinker model ${modelId} did not load ${from.id}: ${err.message}`, {
          providerCode: err.providerCode,
          cause: err,
        });
      throw err;
    }
  }

  /**
   * A model this process drives: running, at the step its settled optim steps reached. Any other model reads as
   * `expired` (its operation order is unknown here), and so does one left with a gap.
   */
  async getSession(sessionId: string): Promise<TrainingSessionInfo> {
    const m = this.models.get(sessionId);
    const resourceId = m?.tinkerSession ?? tinkerSessionOf(sessionId) ?? '';
    if (m && !m.closed && !m.gap && !m.failed) {
      try {
        await this.settleOptims(m);
      } catch (err) {
        if (!(err instanceof ProviderError && err.errorClass === 'needs-reconcile')) throw err;
        this.lost(m);
      }
    }
    if (!m || m.closed || m.gap || m.failed) {
      const r = resourceId ? await this.getResource(resourceId).catch(() => undefined) : undefined;
      const state =
        r && r.state !== 'ready' ? (r.state === 'failed' ? 'failed' : 'stopped') : m?.failed ? 'failed' : m?.closed ? 'stopped' : 'expired';
      return { id: sessionId, resourceId, state, step: 0, trainingCheckpointIds: [] };
    }
    return {
      id: m.id,
      resourceId,
      state: 'running',
      step: this.appliedStep(m),
      trainingCheckpointIds: await this.trainingCheckpoints(m.id),
    };
  }

  /** The model's training checkpoints (`tinker://…/weights/…`), oldest first. */
  private async trainingCheckpoints(modelId: string): Promise<string[]> {
    return (await this.checkpointsOf(modelId))
      .filter((c) => c.checkpoint_type === 'training')
      .sort((a, b) => a.time.localeCompare(b.time))
      .map((c) => c.tinker_path);
  }

  /** `GET training_runs/{model}/checkpoints`: the model's completed checkpoints. */
  private async checkpointsOf(modelId: string): Promise<{ checkpoint_type: string; time: string; tinker_path: string }[]> {
    const res = await this.call({
      method: 'GET',
      path: `/api/v1/training_runs/${encodeURIComponent(modelId)}/checkpoints`,
      schema: z.object({
        checkpoints: z.array(z.object({ checkpoint_type: z.string(), time: z.string(), tinker_path: z.string() }).passthrough()),
      }),
    });
    return res.checkpoints;
  }

  private appliedStep(m: ModelState): number {
    return m.baseStep + m.submittedSteps - m.pendingOptims.size - m.failedOptims.size;
  }

  /** Waits for the optim steps in flight to settle, so the step counted is the trainer's. */
  private async settleOptims(m: ModelState): Promise<void> {
    for (const [requestId, step] of [...m.pendingOptims]) {
      try {
        await this.retrieve(requestId, 'OptimStep', {});
      } catch (err) {
        if (err instanceof ProviderError && err.errorClass === 'needs-reconcile') throw err;
        if (m.pendingOptims.has(requestId)) m.failedOptims.set(requestId, step);
      }
      m.pendingOptims.delete(requestId);
    }
  }

  /** The session's models (`GET sessions/{id}`); a server without session routes lists none: those this process made in it. */
  async listSessions(resourceId: string): Promise<TrainingSessionInfo[]> {
    if (this.traits.sessionRoutes !== false) {
      try {
        const info = await this.call({ method: 'GET', path: `/api/v1/sessions/${encodeURIComponent(resourceId)}`, schema: SessionInfo });
        const sessions = await Promise.all(info.training_run_ids.map((id) => this.getSession(id)));
        return sessions.reverse().map((s) => ({ ...s, displayName: info.display_name ?? undefined }));
      } catch (err) {
        if (!(await this.lacksSessionRoutes(err, resourceId))) {
          if (err instanceof ProviderError && err.status === 404) return [];
          throw err;
        }
      }
    }
    const ids = [...(this.sessions.get(resourceId)?.models ?? [])];
    const sessions = await Promise.all(ids.map((id) => this.getSession(id)));
    return sessions.reverse().map((s) => ({ ...s, displayName: this.models.get(s.id)?.displayName }));
  }

  /** `unload_model`: the model's weights leave the service's memory; its checkpoints stay. */
  async closeSession(sessionId: string): Promise<void> {
    const m = this.models.get(sessionId);
    if (m?.unloaded) return;
    if (m) m.closed = true;
    try {
      const future = await this.post('/unload_model', { model_id: sessionId, type: 'unload_model' }, Future, { replaySafe: true });
      await this.retrieve(future.request_id, 'UnloadModel', {});
    } catch (err) {
      if (!(err instanceof ProviderError && (err.status === 404 || err.status === 410))) throw err;
    }
    if (m) m.unloaded = true;
  }

  /**
   * A model the service lost takes nothing more. On a server that says nothing of sessions, its session is taken as
   * lost with it (it may have expired: a model made there would never be released by the server).
   */
  private lost(m: ModelState): void {
    m.failed = true;
    const s = this.sessions.get(m.tinkerSession);
    if (s && this.traits.sessionRoutes === false) s.lost = true;
  }

  // ── operations ───────────────────────────────────────────────────────────────────────────────────

  /** The model this process drives, or SESSION_NOT_ACTIVE (reopen from a checkpoint). */
  private driven(sessionId: string): ModelState {
    const m = this.models.get(sessionId);
    if (!m || m.closed || m.failed)
      throw new ProviderError(
        'SESSION_NOT_ACTIVE',
        'needs-reconcile',
        `Tinker model ${sessionId} is ${m ? (m.failed ? 'lost' : 'closed') : 'not driven by this process (its operation order is unknown here)'}; reopen it from a checkpoint`,
        { providerCode: 'SESSION_NOT_ACTIVE' },
      );
    return m;
  }

  /**
   * Sends one operation of a model under the next seq_id (or, for a key sent before, under its own): a resubmission
   * is the same operation, the same key with another body is refused, and a send that may have failed leaves a gap
   * no other operation may be sent behind.
   */
  private async sequenced<T>(
    kind: OperationKind,
    sessionId: string,
    key: string,
    fingerprint: string,
    send: (seq: number, m: ModelState) => Promise<{ request_id: string }>,
    describe: (requestId: string, m: ModelState) => string,
  ): Promise<OperationHandle<T>> {
    const m = this.driven(sessionId);
    const known = m.keys.get(key);
    if (known && known.fingerprint !== fingerprint)
      throw new ProviderError('IDEMPOTENCY_KEY_REUSED', 'non-retryable', `key ${key} was sent with a different body`, {
        providerCode: 'IDEMPOTENCY_KEY_REUSED',
      });
    if (known?.handle) return known.handle as OperationHandle<T>;
    if (m.gap && m.gap.key !== key)
      throw new ProviderError(
        'SESSION_NOT_ACTIVE',
        'needs-reconcile',
        `Tinker model ${sessionId}: operation ${m.gap.seq} (${m.gap.key}) may not have reached the service, and later ones would wait behind it; reopen from a checkpoint`,
        { providerCode: 'SESSION_NOT_ACTIVE' },
      );
    const seq = known?.seq ?? m.nextSeq++;
    const entry = known ?? { seq, fingerprint };
    m.keys.set(key, entry);
    let future: { request_id: string };
    try {
      future = await send(seq, m);
    } catch (err) {
      m.gap = { key, seq };
      throw err;
    }
    if (m.gap?.key === key) m.gap = undefined;
    const handle: OperationHandle<T> = { kind, sessionId, operationId: describe(future.request_id, m), idempotencyKey: key };
    entry.handle = handle;
    if (m.keys.size > 4096) m.keys.delete(m.keys.keys().next().value!); // old keys are not resent
    return handle;
  }

  async submitForwardBackward(
    sessionId: string,
    key: string,
    data: Datum[],
    options: ForwardBackwardOptions = {},
  ): Promise<OperationHandle<ForwardResult>> {
    const loss = options.loss ?? { type: 'cross_entropy' };
    if (loss.type === 'grpo')
      throw new ProviderError(
        'UNSUPPORTED',
        'non-retryable',
        "Tinker has no grpo loss; use 'ppo' or 'importance_sampling' with group-normalised advantages",
      );
    const lossFnConfig: Record<string, number> = {};
    if (loss.type === 'ppo') {
      lossFnConfig.clip_low_threshold = loss.clipLow ?? 0.8;
      lossFnConfig.clip_high_threshold = loss.clipHigh ?? 1.2;
    }
    const wire = data.map((d) => toTinkerDatum(d, loss.type !== 'cross_entropy'));
    return this.sequenced<ForwardResult>(
      'forward-backward',
      sessionId,
      key,
      fingerprintOf('forward_backward', { wire, loss, forwardOnly: options.forwardOnly ?? false }),
      (seq, m) => this.sendForwardBackward(m.id, seq, key, wire, loss.type, lossFnConfig, options.forwardOnly ?? false),
      (requestId) => {
        this.lossInputs.set(requestId, { weights: data.map((d) => d.weights), crossEntropy: loss.type === 'cross_entropy' });
        if (this.lossInputs.size > 4096) this.lossInputs.delete(this.lossInputs.keys().next().value!);
        return requestId;
      },
    );
  }

  private async sendForwardBackward(
    modelId: string,
    seq: number,
    key: string,
    data: TinkerDatum[],
    lossFn: string,
    lossFnConfig: Record<string, number>,
    forwardOnly: boolean,
  ): Promise<{ request_id: string }> {
    const bytes = encodeForwardBackward({ modelId, seqId: seq, data, lossFn, lossFnConfig, forwardOnly });
    const answer = await this.callRaw({
      method: 'POST',
      path: '/api/v1/forward_backward',
      rawBody: { bytes, contentType: 'application/x-protobuf' },
      idempotencyKey: operationKey(modelId, key),
      idempotencyHeader: 'x-idempotency-key',
    });
    return Future.parse(JSON.parse(answer.bytes.toString('utf8')));
  }

  /**
   * A caller-defined loss the way the SDK's `forward_backward_custom` sends it: cross-entropy is −Σ w·logprob, so
   * weights of −∂loss/∂logprob back-propagate the caller's gradients.
   */
  async submitCustomForwardBackward(
    sessionId: string,
    key: string,
    data: Datum[],
    gradients: number[][],
  ): Promise<OperationHandle<Record<string, never>>> {
    const wire = data.map((d, i) => toTinkerDatum({ ...d, weights: (gradients[i] ?? []).map((g) => (g === 0 ? 0 : -g)) }, false));
    const handle = await this.sequenced<ForwardResult>(
      'forward-backward',
      sessionId,
      key,
      fingerprintOf('forward_backward_custom', { wire }),
      (seq, m) => this.sendForwardBackward(m.id, seq, key, wire, 'cross_entropy', {}, false),
      (requestId) => requestId,
    );
    return { ...handle, kind: 'custom-forward-backward' } as OperationHandle<Record<string, never>>;
  }

  submitOptimStep(sessionId: string, key: string, adam: AdamParams): Promise<OperationHandle<OptimStepResult>> {
    const adamParams = {
      learning_rate: adam.learningRate,
      beta1: adam.beta1 ?? 0.9,
      beta2: adam.beta2 ?? 0.95,
      eps: adam.eps ?? 1e-12,
      weight_decay: adam.weightDecay ?? 0,
      grad_clip_norm: adam.gradClipNorm ?? 0,
    };
    return this.sequenced<OptimStepResult>(
      'optim-step',
      sessionId,
      key,
      fingerprintOf('optim_step', adamParams),
      (seq, m) =>
        this.post('/optim_step', { model_id: m.id, seq_id: seq, adam_params: adamParams, type: 'optim_step' }, Future, {
          key: operationKey(m.id, key),
        }),
      (requestId, m) => {
        m.submittedSteps += 1;
        m.pendingOptims.set(requestId, m.baseStep + m.submittedSteps);
        return `${requestId}#${m.baseStep + m.submittedSteps}`;
      },
    );
  }

  /**
   * A save's submit. A server that keeps no seq for saves (SkyRL) answers the resend of a save whose answer was lost
   * with 409 "already exists": the checkpoint is then the one being saved, and its handle (`listed:<path>`) waits for
   * it in the model's checkpoint listing instead of a future.
   */
  private async save(path: string, send: () => Promise<{ request_id: string }>): Promise<{ request_id: string }> {
    try {
      return await send();
    } catch (err) {
      if (!(err instanceof ProviderError && err.status === 409 && /already exists/i.test(err.message))) throw err;
      return { request_id: `${LISTED}${path}` };
    }
  }

  /** Waits until the model's checkpoint listing (completed checkpoints) holds `path`. */
  private async listed(path: string, options: AwaitOptions): Promise<void> {
    const modelId = parseCheckpointPath(path)?.modelId ?? '';
    await poll(
      async () => ((await this.checkpointsOf(modelId)).some((c) => c.tinker_path === path) ? true : undefined),
      `Tinker checkpoint ${path}`,
      { initialIntervalMs: 100, maxIntervalMs: 2_000, timeoutMs: options.timeoutMs ?? 600_000, signal: options.signal },
    );
  }

  /** `save_weights` (weights + optimizer), named after the key and the step it holds: `tinker://<model>/weights/<name>`. */
  submitTrainingCheckpoint(sessionId: string, key: string): Promise<OperationHandle<CheckpointResult>> {
    const m = this.driven(sessionId);
    const name = `${checkpointName(key)}-st${nextStep(m)}`;
    return this.sequenced<CheckpointResult>(
      'training-checkpoint',
      sessionId,
      key,
      fingerprintOf('save_weights', {}),
      (seq) =>
        this.save(`tinker://${m.id}/weights/${name}`, () =>
          this.post('/save_weights', { model_id: m.id, path: name, seq_id: seq, type: 'save_weights' }, Future, {
            key: operationKey(m.id, key),
          }),
        ),
      (requestId) => requestId,
    );
  }

  /** `save_weights_for_sampler` under a name (a kept artifact), then a sampling session on it: what samples see next. */
  submitSamplerWeights(sessionId: string, key: string): Promise<OperationHandle<CheckpointResult>> {
    const m = this.driven(sessionId);
    const name = `${checkpointName(key)}-st${nextStep(m)}`;
    return this.sequenced<CheckpointResult>(
      'sampler-weights',
      sessionId,
      key,
      fingerprintOf('save_weights_for_sampler', { named: true }),
      (seq) =>
        this.save(`tinker://${m.id}/sampler_weights/${name}`, () =>
          this.post(
            '/save_weights_for_sampler',
            { model_id: m.id, path: name, seq_id: seq, kind: 'snapshot', type: 'save_weights_for_sampler' },
            Future,
            { key: operationKey(m.id, key) },
          ),
        ),
      (requestId) => requestId,
    );
  }

  /** Unnamed `save_weights_for_sampler`: a sampling session of the current weights (nothing kept beyond it). */
  async submitWeightsSync(sessionId: string, key: string): Promise<OperationHandle<WeightsSyncResult>> {
    const m = this.driven(sessionId);
    const s = await this.session(m.tinkerSession);
    const version = nextStep(m);
    return this.sequenced<WeightsSyncResult>(
      'weights-sync',
      sessionId,
      key,
      fingerprintOf('save_weights_for_sampler', { named: false }),
      (seq) => {
        const samplerSeq = s.nextSamplerSeq++;
        // SkyRL keeps an unnamed save as `ss<sampler seq>_seq<seq>`: where the save was made, the sampling session is opened on that.
        return this.save(`tinker://${m.id}/sampler_weights/ss${samplerSeq}_seq${seq}`, () =>
          this.post(
            '/save_weights_for_sampler',
            { model_id: m.id, seq_id: seq, sampling_session_seq_id: samplerSeq, kind: 'snapshot', type: 'save_weights_for_sampler' },
            Future,
            { key: operationKey(m.id, key) },
          ),
        );
      },
      (requestId) => `${requestId}#${version}`,
    );
  }

  async submitSample(
    sessionId: string,
    key: string,
    prompts: number[][],
    params: SamplingParams,
    options: { numSamples?: number; promptLogprobs?: boolean } = {},
  ): Promise<OperationHandle<SampleResult[]>> {
    const m = this.driven(sessionId);
    const cached = this.samples.get(`${sessionId}\u0000${key}`);
    if (cached) return cached;
    if (!m.sampler) await this.awaitOperation(await this.submitWeightsSync(sessionId, `${key}#weights`));
    const sampler = m.sampler!;
    const body = {
      num_samples: options.numSamples ?? 1,
      sampling_params: {
        max_tokens: params.maxTokens,
        temperature: params.temperature,
        top_k: params.topK !== undefined && params.topK > 0 ? params.topK : -1,
        top_p: params.topP ?? 1,
        ...(params.seed !== undefined ? { seed: params.seed } : {}),
      },
      prompt_logprobs: options.promptLogprobs ?? false,
      topk_prompt_logprobs: 0,
      type: 'sample',
    };
    const requestIds: string[] = [];
    for (const [i, prompt] of prompts.entries()) {
      const seq = sampler.nextSeq++;
      const res = await this.post(
        '/asample',
        {
          ...body,
          sampling_session_id: sampler.id,
          seq_id: seq,
          prompt: { chunks: [{ type: 'encoded_text', tokens: prompt }] },
          ...(params.seed !== undefined ? { sampling_params: { ...body.sampling_params, seed: params.seed + i } } : {}),
        },
        Future,
        { key: operationKey(sampler.id, `${key}#${i}`) },
      );
      requestIds.push(res.request_id);
      this.promptLengths.set(res.request_id, prompt.length);
      if (this.promptLengths.size > 4096) this.promptLengths.delete(this.promptLengths.keys().next().value!);
    }
    const handle: OperationHandle<SampleResult[]> = {
      kind: 'sample',
      sessionId,
      operationId: `${requestIds.join(',')}#${sampler.version}`,
      idempotencyKey: key,
    };
    this.samples.set(`${sessionId}\u0000${key}`, handle);
    if (this.samples.size > 1024) this.samples.delete(this.samples.keys().next().value!);
    return handle;
  }

  /**
   * Long-polls `retrieve_future` until the future settles: 408 (or a `try_again` body) means still running. A failure
   * is an `{error, category}` body (hosted Tinker) or HTTP 400 `{"detail": …}` (SkyRL; a 500 there is retried by the
   * HTTP helper, then fails as retryable), the server's text kept and classified (failures.ts).
   */
  private async retrieve(requestId: string, type: string, options: AwaitOptions): Promise<{ json?: unknown; bytes?: Buffer }> {
    return poll(
      async () => {
        const answer = await this.callRaw({
          method: 'POST',
          path: '/api/v1/retrieve_future',
          body: { request_id: requestId, allow_metadata_only: false },
          replaySafe: true,
          passStatuses: [400, 408],
          headers: { 'x-tinker-request-type': type },
          signal: options.signal,
        });
        if (answer.status === 408) return undefined;
        if (answer.status === 400) {
          const text = answer.bytes.toString('utf8');
          const { message } = errorBody(text);
          if (message) throw operationFailure(requestId, message, { status: 400 });
          throw new ProviderError('HTTP_400', 'non-retryable', `POST /api/v1/retrieve_future: HTTP 400 (no body)`, { status: 400 });
        }
        if (/application\/x-protobuf/i.test(answer.contentType)) return { bytes: answer.bytes };
        const json = JSON.parse(answer.bytes.toString('utf8') || '{}') as Record<string, unknown>;
        if (json.type === 'try_again') return undefined;
        if (typeof json.error === 'string')
          throw operationFailure(requestId, json.error, { category: typeof json.category === 'string' ? json.category : 'unknown' });
        return { json };
      },
      `Tinker future ${requestId}`,
      { initialIntervalMs: 0, maxIntervalMs: 0, timeoutMs: options.timeoutMs ?? 3_600_000, signal: options.signal },
    );
  }

  async awaitOperation<T>(handle: OperationHandle<T>, options: AwaitOptions = {}): Promise<T> {
    try {
      return await this.settle(handle, options);
    } catch (err) {
      // The model is gone (the service lost it): nothing more is sent to it.
      const m = this.models.get(handle.sessionId);
      if (m && err instanceof ProviderError && err.providerCode === 'SESSION_NOT_ACTIVE') this.lost(m);
      throw err;
    }
  }

  private async settle<T>(handle: OperationHandle<T>, options: AwaitOptions): Promise<T> {
    const [requestPart, tag] = handle.operationId.split('#') as [string, string | undefined];
    const m = this.models.get(handle.sessionId);
    switch (handle.kind) {
      case 'forward-backward': {
        const { bytes } = await this.retrieve(requestPart, 'ForwardBackward', options);
        if (!bytes) throw new ProviderError('BAD_RESPONSE', 'non-retryable', `forward ${requestPart}: the result is not protobuf`);
        const out = decodeForwardBackwardOutput(bytes);
        const inputs = this.lossInputs.get(requestPart);
        const loss = out.metrics['loss:sum'] ?? lossOfOutputs(out.outputs, inputs);
        if (loss === undefined)
          throw new ProviderError(
            'BAD_RESPONSE',
            'non-retryable',
            `forward ${requestPart}: no loss:sum metric in ${Object.keys(out.metrics).join(', ') || 'no metrics'}, and no elementwise_loss to add up`,
          );
        const logprobs = out.outputs.map((o, i) => (o.logprobs ?? []).map((v, k) => (inputs && !inputs.weights[i]?.[k] ? 0 : v)));
        return { loss, logprobs } satisfies ForwardResult as T;
      }
      case 'custom-forward-backward':
        await this.retrieve(requestPart, 'ForwardBackward', options);
        return {} as T;
      case 'optim-step': {
        let json: unknown;
        try {
          json = (await this.retrieve(requestPart, 'OptimStep', options)).json;
        } catch (err) {
          if (m?.pendingOptims.has(requestPart) && !(err instanceof ProviderError && err.errorClass === 'needs-reconcile')) {
            m.pendingOptims.delete(requestPart);
            m.failedOptims.set(requestPart, Number(tag));
          }
          throw err;
        }
        m?.pendingOptims.delete(requestPart);
        // Hosted Tinker reports the step (`step:max`); SkyRL does not: the step at submit, less the failed steps before it.
        const reported = (json as { metrics?: Record<string, number> } | undefined)?.metrics?.['step:max'];
        const failedBefore = m ? [...m.failedOptims.values()].filter((step) => step < Number(tag)).length : 0;
        return { step: reported ?? Number(tag) - failedBefore } satisfies OptimStepResult as T;
      }
      case 'training-checkpoint': {
        const path = await this.savedPath(requestPart, 'SaveWeights', options);
        return { checkpointId: path, step: checkpointStep(path) } satisfies CheckpointResult as T;
      }
      case 'sampler-weights': {
        // SkyRL answers a named sampler save `tinker://<model>/<name>`: kept in the form its listing (and delete) uses.
        const path = canonicalPath(await this.savedPath(requestPart, 'SaveWeightsForSampler', options));
        const step = checkpointStep(path);
        if (m) {
          // Samples see these weights next: a sampling session on them.
          const id = await this.samplingSession(m, path);
          if (!m.sampler || m.sampler.version <= step) m.sampler = { id, version: step, nextSeq: 0 };
        }
        return { checkpointId: path, step } satisfies CheckpointResult as T;
      }
      case 'weights-sync': {
        let id: string;
        if (requestPart.startsWith(LISTED)) {
          const path = requestPart.slice(LISTED.length);
          await this.listed(path, options);
          id = await this.samplingSession(m ?? this.driven(handle.sessionId), path);
        } else {
          const { json } = await this.retrieve(requestPart, 'SaveWeightsForSampler', options);
          id = z.object({ sampling_session_id: z.string() }).passthrough().parse(json).sampling_session_id;
        }
        const version = Number(tag);
        if (m && (!m.sampler || m.sampler.id !== id) && (!m.sampler || m.sampler.version <= version))
          m.sampler = { id, version, nextSeq: 0 };
        return { weightsVersion: version } satisfies WeightsSyncResult as T;
      }
      case 'sample': {
        const version = Number(tag);
        const results: SampleResult[] = [];
        for (const requestId of requestPart.split(',')) {
          const { bytes } = await this.retrieve(requestId, 'Sample', options);
          if (!bytes) throw new ProviderError('BAD_RESPONSE', 'non-retryable', `sample ${requestId}: the result is not protobuf`);
          const decoded = decodeSampleResponse(bytes);
          const prompt = decoded.promptLogprobs && alignedPromptLogprobs(decoded.promptLogprobs, this.promptLengths.get(requestId));
          results.push({
            sequences: decoded.sequences,
            ...(prompt ? { promptLogprobs: prompt.map((v) => v ?? 0) } : {}),
            policyVersion: version,
          });
        }
        this.samples.delete(`${handle.sessionId}\u0000${handle.idempotencyKey}`);
        return results as T;
      }
    }
  }

  /** A save's path: its future's result, or (`listed:<path>`, a save found already made) once the listing holds it. */
  private async savedPath(requestPart: string, type: string, options: AwaitOptions): Promise<string> {
    if (!requestPart.startsWith(LISTED)) {
      const { json } = await this.retrieve(requestPart, type, options);
      return z.object({ path: z.string() }).passthrough().parse(json).path;
    }
    const path = requestPart.slice(LISTED.length);
    await this.listed(path, options);
    return path;
  }

  /** A sampling session (in the model's Tinker session, under its next sampler seq) on sampler weights. */
  private async samplingSession(m: ModelState, path: string): Promise<string> {
    const s = await this.session(m.tinkerSession);
    const created = await this.post(
      '/create_sampling_session',
      { session_id: s.id, sampling_session_seq_id: s.nextSamplerSeq++, model_path: path, type: 'create_sampling_session' },
      z.object({ sampling_session_id: z.string() }).passthrough(),
      { replaySafe: true },
    );
    return created.sampling_session_id;
  }

  /** `DELETE training_runs/{model}/checkpoints/{weights|sampler_weights}/{name}`; one already gone is fine. */
  async deleteCheckpoint(checkpointId: string): Promise<void> {
    const m = parseCheckpointPath(checkpointId);
    if (!m)
      throw new ProviderError(
        'INVALID_INPUT',
        'non-retryable',
        `${checkpointId} is not a tinker://<model>/[weights|sampler_weights/]<name> path`,
      );
    try {
      await this.call({
        method: 'DELETE',
        path: `/api/v1/training_runs/${encodeURIComponent(m.modelId)}/checkpoints/${m.kind}/${encodeURIComponent(m.name)}`,
        schema: AnyJson,
        replaySafe: true,
      });
    } catch (err) {
      if (!(err instanceof ProviderError && err.status === 404)) throw err;
    }
  }

  async close(): Promise<void> {
    for (const s of this.sessions.values()) if (s.heartbeat) clearInterval(s.heartbeat);
    this.sessions.clear();
    await this.http.close();
  }
}

/** A JWT's `iat` and `exp` (seconds), read without verifying it (the service does). */
function jwtClaims(jwt: string): { iat: number; exp: number } {
  try {
    const claims = JSON.parse(Buffer.from(jwt.split('.')[1] ?? '', 'base64url').toString('utf8')) as { iat?: unknown; exp?: unknown };
    const exp = Number(claims.exp);
    const iat = Number(claims.iat ?? Date.now() / 1000);
    if (!Number.isFinite(exp)) throw new Error('no exp');
    return { iat: Number.isFinite(iat) ? iat : Date.now() / 1000, exp };
  } catch (err) {
    throw new ProviderError(
      'BAD_RESPONSE',
      'non-retryable',
      `auth/token answered a token that is not a JWT with an exp: ${(err as Error).message}`,
    );
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

/**
 * The session of a model this process did not make, where its id says (hosted Tinker's `<session>:train:<n>`); other
 * servers' ids (SkyRL's `model_<hex>`) say nothing.
 */
function tinkerSessionOf(modelId: string): string | undefined {
  return /^(.+):train:\d+$/.exec(modelId)?.[1];
}

/** FastAPI's answer for a route a server does not have: 404 `{"detail":"Not Found"}`, or 405. */
function isNoRoute(err: unknown): boolean {
  return err instanceof ProviderError && (err.status === 405 || (err.status === 404 && /HTTP 404: Not Found$/.test(err.message)));
}

/** Thinking Machines' hosted service, whose keys start `tml-`; a self-hosted server takes whatever key it was given. */
export function isHostedTinker(baseUrl: string): boolean {
  try {
    return /(^|\.)thinkingmachines\.(dev|ai)$/i.test(new URL(baseUrl).hostname);
  } catch {
    return false;
  }
}

/** Tinker's datum: the neutral datum's tokens, targets and weights (and a policy loss's logprobs and advantages). */
function toTinkerDatum(d: Datum, policy: boolean): TinkerDatum {
  const floats: Record<string, readonly number[]> = { weights: d.weights };
  if (policy) {
    if (!d.logprobs || !d.advantages)
      throw new ProviderError('INVALID_INPUT', 'non-retryable', 'a policy loss needs logprobs and advantages on every datum');
    floats.logprobs = d.logprobs;
    floats.advantages = d.advantages;
  }
  return { tokens: d.modelInput, targetTokens: d.targetTokens, floats };
}

/** The trainer's step once every optim step submitted has applied (those known to have failed applied nothing). */
function nextStep(m: ModelState): number {
  return m.baseStep + m.submittedSteps - m.failedOptims.size;
}

/**
 * A forward result's loss where the server reports no `loss:sum` (SkyRL): the sum of its `elementwise_loss` (each
 * position's loss, already weighted), or for cross-entropy −Σ w·logprob; undefined when neither can be had.
 */
function lossOfOutputs(
  outputs: Record<string, number[]>[],
  inputs: { weights: number[][]; crossEntropy: boolean } | undefined,
): number | undefined {
  if (outputs.length > 0 && outputs.every((o) => o.elementwise_loss))
    return outputs.reduce((sum, o) => sum + o.elementwise_loss!.reduce((a, v) => a + v, 0), 0);
  if (!inputs?.crossEntropy || outputs.some((o) => !o.logprobs)) return undefined;
  return -outputs.reduce((sum, o, i) => sum + o.logprobs!.reduce((a, lp, k) => a + (inputs.weights[i]?.[k] ?? 0) * lp, 0), 0);
}

/**
 * A checkpoint's path: `tinker://<model>/<weights|sampler_weights>/<name>`, or `tinker://<model>/<name>`, which SkyRL
 * answers a named sampler save with (a sampler checkpoint).
 */
function parseCheckpointPath(path: string): { modelId: string; kind: 'weights' | 'sampler_weights'; name: string } | undefined {
  const m = /^tinker:\/\/([^/]+)\/(?:(weights|sampler_weights)\/)?([^/]+)$/.exec(path);
  return m ? { modelId: m[1]!, kind: (m[2] as 'weights' | 'sampler_weights' | undefined) ?? 'sampler_weights', name: m[3]! } : undefined;
}

/** A checkpoint's path in the form listings use (`…/sampler_weights/<name>` for SkyRL's short sampler form). */
function canonicalPath(path: string): string {
  const p = parseCheckpointPath(path);
  return p ? `tinker://${p.modelId}/${p.kind}/${p.name}` : path;
}

/**
 * Prompt logprobs one per prompt token, the first null (none precedes it). SkyRL's JAX backend answers one fewer,
 * without that leading NaN: a null is put first, so position i is token i's on every server.
 */
function alignedPromptLogprobs(values: (number | null)[], promptLength: number | undefined): (number | null)[] {
  const short = promptLength !== undefined ? values.length === promptLength - 1 : values.length > 0 && values[0] !== null;
  return short ? [null, ...values] : values;
}

/** The next model (or sampler) seq after those a session lists: hosted ids (`…:train:<n>`) name theirs; others count. */
function nextSeqOf(ids: string[], kind: 'train' | 'sample'): number {
  return Math.max(ids.length, ...ids.map((id) => Number(new RegExp(`:${kind}:(\\d+)$`).exec(id)?.[1] ?? -1) + 1));
}

/** The step a checkpoint holds, from its name (`…-st<step>`); 0 for a checkpoint Roundhouse did not name. */
function checkpointStep(path: string): number {
  const m = /-st(\d+)$/.exec(path);
  return m ? Number(m[1]) : 0;
}

function fingerprintOf(op: string, body: unknown): string {
  return createHash('sha256')
    .update(`${op}\n${JSON.stringify(body)}`)
    .digest('hex');
}
