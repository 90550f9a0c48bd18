import { createHash } from 'node:crypto';
import { z } from 'zod';
import { accountFingerprint } from '../account';
import { checkpointName, operationKey } from '../keys';
import { ProviderError, classifyOperationError } from '../errors';
import { HttpClient, poll, type HttpClientOptions, type RequestSpec } from '../http';
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
import { decodeForwardBackwardOutput, decodeSampleResponse, encodeForwardBackward, type TinkerDatum } from './wire';

export const TINKER_DEFAULT_BASE_URL = 'https://tinker.thinkingmachines.dev/services/tinker-prod';
/** The SDK version whose wire this client speaks (WIRE.md); sent where the SDK sends its own. */
export const TINKER_WIRE_VERSION = '0.38.0';
/** How often an open session is heartbeated (the SDK's interval). */
const HEARTBEAT_MS = 10_000;

export interface TinkerProviderOptions extends Omit<HttpClientOptions, 'baseUrl' | 'authHeader'> {
  /** The service's base URL (`…/services/tinker-prod`), or the emulator's. Paths go under `<base>/api/v1`. */
  baseUrl?: string;
  /** `tml-…` (or a JWT); sent as `X-API-Key`. */
  apiKey: string;
  /** Heartbeat interval of open sessions (default 10 s, as the SDK). */
  heartbeatMs?: number;
  /** Called with each credential the client obtains (a JWT from `auth/token`) before any request carries it: the caller masks it. */
  onSecret?: (value: string) => void;
}

/** What this process knows of a model it drives: Tinker runs a model's operations in `seq_id` order, and only its driver knows the order. */
interface ModelState {
  id: string;
  tinkerSession: string;
  baseModel: string;
  /** The next `seq_id` to send (0 is the model's create). */
  nextSeq: number;
  /** The trainer's step when the model was made (a checkpoint's, with its optimizer), and optim steps submitted since. */
  baseStep: number;
  submittedSteps: number;
  /** Optim steps submitted and not yet seen to settle, and those that failed (they applied nothing). */
  pendingOptims: string[];
  failedOptims: number;
  /** Caller keys → the seq they were sent under and what was sent: a resubmission is the same operation. */
  keys: Map<string, { seq: number; fingerprint: string; handle?: OperationHandle<unknown> }>;
  /** A submit whose seq the service may not have: later operations would wait behind the gap, so none is sent. */
  gap?: { key: string; seq: number };
  /** The sampling session samples go to, and the step of its weights. */
  sampler?: { id: string; version: number; nextSeq: number };
  closed?: boolean;
  /** An operation failed because the model is gone (the service lost it): it takes no more. */
  failed?: boolean;
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
}

const Future = z.object({ request_id: z.string(), model_id: z.string().nullish() }).passthrough();
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
 * Tinker behind the provider-neutral interface (wire notes: WIRE.md beside this file).
 *
 * - A trainer resource is a Tinker **session**: free to hold (Tinker bills tokens, not GPU time), created with the
 *   owner tag and base model in its `user_metadata`, found again by `sessions/search`, released by `finish`, and
 *   heartbeated every 10 s while this process uses it.
 * - A training session is a LoRA **model** of that session (`<session>:train:<n>`): `create_model`, or
 *   `load_weights` addressed to the session (a checkpoint with or without its optimizer state, the SDK's
 *   `create_training_client_from_state[_with_optimizer]`); closing one unloads it.
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
  /** Per forward request: which positions count in its loss (the neutral result reports the others as 0; Tinker returns every position's). */
  private readonly counted = new Map<string, boolean[][]>();
  private readonly heartbeatMs: number;
  /** Whether the service wants JWTs (asked once, from `client/config`), and the current one. */
  private jwtMode: Promise<boolean> | undefined;
  private jwt: { value: string; exp: number; refreshAt: number } | undefined;
  private exchange: Promise<void> | undefined;
  private readonly onSecret: ((value: string) => void) | undefined;

  constructor(options: TinkerProviderOptions) {
    if (!(options.apiKey.startsWith('tml-') || options.apiKey.startsWith('eyJ')))
      throw new ProviderError('INVALID_INPUT', 'non-retryable', "a Tinker API key starts with 'tml-' (TINKER_API_KEY)");
    const baseUrl = (options.baseUrl ?? TINKER_DEFAULT_BASE_URL).replace(/\/+$/, '');
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
              maxLoraRank: m.max_lora_rank ?? 128,
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

  /** `create_session` with the owner tag and base model in its metadata; resending after a lost answer is harmless (an empty session holds nothing). */
  async provision(request: ProvisionRequest): Promise<TrainerResource> {
    const metadata = { [OWNER_KEY]: request.ownerTag, [MODEL_KEY]: request.model };
    let created: { session_id: string };
    try {
      created = await this.post(
        '/create_session',
        {
          tags: ['roundhouse'],
          user_metadata: metadata,
          sdk_version: TINKER_WIRE_VERSION,
          display_name: request.ownerTag.slice(0, 200),
          type: 'create_session',
        },
        SessionCreated,
        { replaySafe: false }, // not resent blindly: a lost answer is reconciled by the metadata it carries
      );
    } catch (err) {
      if (!(err instanceof ProviderError && err.errorClass === 'needs-reconcile')) throw err;
      const page = await this.post('/sessions/search', { user_metadata: metadata, statuses: [{ type: 'active' }], limit: 1 }, SearchPage, {
        replaySafe: true,
      });
      if (!page.sessions[0]) throw err; // not created (yet): the caller lists again before creating anew
      created = page.sessions[0];
    }
    this.remember({ id: created.session_id, baseModel: request.model, ownerTag: request.ownerTag, nextModelSeq: 0, nextSamplerSeq: 0 });
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
    s.heartbeat = setInterval(() => void this.heartbeat(s), this.heartbeatMs).unref();
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
   * The session as this process knows it, else from the service (its metadata names the base model). `fresh`: its
   * model and sampler seqs as the service lists them, for a create: another process may have made models there since
   * this one looked, and a create under a seq the service has is that model (it dedups by seq), not a new one.
   */
  private async session(sessionId: string, options: { fresh?: boolean } = {}): Promise<SessionState> {
    const known = this.sessions.get(sessionId);
    if (known && !options.fresh) return known;
    const info = await this.call({ method: 'GET', path: `/api/v1/sessions/${encodeURIComponent(sessionId)}`, schema: SessionInfo });
    const seqs = (ids: string[], kind: 'train' | 'sample') =>
      Math.max(-1, ...ids.map((id) => Number(new RegExp(`:${kind}:(\\d+)$`).exec(id)?.[1] ?? -1))) + 1;
    if (known) {
      known.nextModelSeq = Math.max(known.nextModelSeq, seqs(info.training_run_ids, 'train'));
      known.nextSamplerSeq = Math.max(known.nextSamplerSeq, seqs(info.sampler_ids, 'sample'));
      return known;
    }
    const baseModel = info.user_metadata?.[MODEL_KEY];
    if (!baseModel)
      throw new ProviderError('INVALID_INPUT', 'non-retryable', `Tinker session ${sessionId} was not made by Roundhouse (no ${MODEL_KEY})`);
    return this.remember({
      id: sessionId,
      baseModel,
      ownerTag: info.user_metadata?.[OWNER_KEY],
      displayName: info.display_name ?? undefined,
      nextModelSeq: seqs(info.training_run_ids, 'train'),
      nextSamplerSeq: seqs(info.sampler_ids, 'sample'),
    });
  }

  private async summary(sessionId: string): Promise<SessionSummary | undefined> {
    const page = await this.post('/sessions/search', { session_id: sessionId, limit: 1 }, SearchPage, { replaySafe: true });
    return page.sessions.find((s) => s.session_id === sessionId);
  }

  async getResource(resourceId: string): Promise<TrainerResource> {
    const s = await this.summary(resourceId);
    if (!s)
      throw new ProviderError('NOT_FOUND', 'non-retryable', `Tinker session ${resourceId} not found`, {
        status: 404,
      });
    return toResource(s);
  }

  /** A session is usable the moment it exists (nothing to place: the service is serverless). */
  async waitReady(resourceId: string, options: WaitReadyOptions = {}): Promise<TrainerResource> {
    const r = await this.getResource(resourceId);
    if (r.state !== 'ready')
      throw new ProviderError('RESOURCE_NOT_READY', 'non-retryable', `Tinker session ${resourceId} is ${r.providerStatus}`);
    options.onWait?.(r);
    return r;
  }

  /** Every session of the account (`sessions/search`, newest first); `activeOnly`: those not finished, failed or cancelled. */
  async listOwnedResources(options: { activeOnly?: boolean } = {}): Promise<TrainerResource[]> {
    const out: TrainerResource[] = [];
    let cursor: unknown;
    for (let pages = 0; pages < 10_000; pages++) {
      const page = await this.post(
        '/sessions/search',
        { limit: 200, ...(options.activeOnly ? { statuses: [{ type: 'active' }] } : {}), ...(cursor ? { cursor } : {}) },
        SearchPage,
        { replaySafe: true },
      );
      out.push(...page.sessions.map(toResource));
      if (!page.next_cursor) return out;
      cursor = page.next_cursor;
    }
    throw new ProviderError('INVALID_RESPONSE', 'retryable', 'sessions/search kept paging past 10,000 pages');
  }

  /** `sessions/{id}/finish`: the session's models are released with it. Finishing twice, or a session gone, is fine. */
  async deactivate(resourceId: string): Promise<TrainerResource> {
    try {
      await this.post(`/sessions/${encodeURIComponent(resourceId)}/finish`, { reason: { type: 'success' }, detail: null }, AnyJson, {
        replaySafe: true,
      });
    } catch (err) {
      if (!(err instanceof ProviderError && (err.status === 404 || err.status === 410))) throw err;
      this.forget(resourceId);
      return { id: resourceId, model: '', state: 'stopped', providerStatus: 'NOT_FOUND', createdAt: '' };
    }
    this.forget(resourceId);
    return this.getResource(resourceId).catch(() => ({
      id: resourceId,
      model: '',
      state: 'stopped' as const,
      providerStatus: 'client_finished',
      createdAt: '',
    }));
  }

  // ── models (training sessions) ───────────────────────────────────────────────────────────────────

  /** A LoRA model of the session: `create_model`, or `load_weights` addressed to the session when resuming. */
  async openSession(request: OpenSessionRequest): Promise<TrainingSessionInfo> {
    const s = await this.session(request.resourceId, { fresh: true });
    const modelSeq = s.nextModelSeq++;
    const id = `${s.id}:train:${modelSeq}`;
    const metadata = {
      ...(s.ownerTag ? { [OWNER_KEY]: s.ownerTag } : {}),
      ...(request.displayName ? { display_name: request.displayName } : {}),
    };
    let baseStep = 0;
    let future: { request_id: string };
    if (request.fromCheckpoint) {
      baseStep = request.fromCheckpoint.loadOptimizer ? checkpointStep(request.fromCheckpoint.id) : 0;
      future = await this.post(
        '/load_weights',
        {
          session_id: s.id,
          model_seq_id: modelSeq,
          path: request.fromCheckpoint.id,
          optimizer: request.fromCheckpoint.loadOptimizer,
          user_metadata: metadata,
          type: 'load_weights',
        },
        Future,
        { replaySafe: true }, // the model's seq 0: a resend is the same create
      );
    } else {
      future = await this.post(
        '/create_model',
        {
          session_id: s.id,
          model_seq_id: modelSeq,
          base_model: s.baseModel,
          lora_config: {
            rank: request.loraRank,
            ...(request.seed !== undefined ? { seed: request.seed } : {}),
            train_unembed: true,
            train_mlp: true,
            train_attn: true,
          },
          user_metadata: metadata,
          optimizer_config: { type: 'adamw' },
          type: 'create_model',
        },
        Future,
        { replaySafe: true },
      );
    }
    try {
      await this.retrieve(future.request_id, request.fromCheckpoint ? 'LoadWeights' : 'CreateModel', {});
    } catch (err) {
      // A create the service failed (it could not place the model) made nothing: opening again, under the next model
      // seq, is safe, so it is retryable as such, not a failed operation to roll back from.
      if (err instanceof ProviderError && err.code.startsWith('OPERATION_FAILED_') && err.errorClass === 'retryable')
        throw new ProviderError('MODEL_NOT_CREATED', 'retryable', `Tinker model ${id} was not created: ${err.message}`, {
          providerCode: err.providerCode,
          cause: err,
        });
      throw err;
    }
    this.models.set(id, {
      id,
      tinkerSession: s.id,
      baseModel: s.baseModel,
      nextSeq: 1,
      baseStep,
      submittedSteps: 0,
      pendingOptims: [],
      failedOptims: 0,
      keys: new Map(),
    });
    return { id, resourceId: s.id, state: 'running', step: baseStep, trainingCheckpointIds: [], displayName: request.displayName };
  }

  /**
   * A model this process drives: running, at the step its settled optim steps reached. Any other model reads as
   * `expired` (its operation order is unknown here), and so does one left with a gap.
   */
  async getSession(sessionId: string): Promise<TrainingSessionInfo> {
    const m = this.models.get(sessionId);
    const resourceId = tinkerSessionOf(sessionId);
    if (m && !m.closed && !m.gap && !m.failed) {
      try {
        await this.settleOptims(m);
      } catch (err) {
        if (!(err instanceof ProviderError && err.errorClass === 'needs-reconcile')) throw err;
        m.failed = true;
      }
    }
    if (!m || m.closed || m.gap || m.failed) {
      const r = await this.getResource(resourceId).catch(() => undefined);
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
    const res = await this.call({
      method: 'GET',
      path: `/api/v1/training_runs/${encodeURIComponent(modelId)}/checkpoints`,
      schema: z.object({
        checkpoints: z.array(z.object({ checkpoint_type: z.string(), time: z.string(), tinker_path: z.string() }).passthrough()),
      }),
    });
    return res.checkpoints
      .filter((c) => c.checkpoint_type === 'training')
      .sort((a, b) => a.time.localeCompare(b.time))
      .map((c) => c.tinker_path);
  }

  private appliedStep(m: ModelState): number {
    return m.baseStep + m.submittedSteps - m.pendingOptims.length - m.failedOptims;
  }

  /** Waits for the optim steps in flight to settle, so the step counted is the trainer's. */
  private async settleOptims(m: ModelState): Promise<void> {
    for (const requestId of [...m.pendingOptims]) {
      try {
        await this.retrieve(requestId, 'OptimStep', {});
      } catch (err) {
        if (err instanceof ProviderError && err.errorClass === 'needs-reconcile') throw err;
        if (m.pendingOptims.includes(requestId)) m.failedOptims += 1;
      }
      m.pendingOptims = m.pendingOptims.filter((r) => r !== requestId);
    }
  }

  async listSessions(resourceId: string): Promise<TrainingSessionInfo[]> {
    let info: z.infer<typeof SessionInfo>;
    try {
      info = await this.call({ method: 'GET', path: `/api/v1/sessions/${encodeURIComponent(resourceId)}`, schema: SessionInfo });
    } catch (err) {
      if (err instanceof ProviderError && err.status === 404) return [];
      throw err;
    }
    const sessions = await Promise.all(info.training_run_ids.map((id) => this.getSession(id)));
    return sessions.reverse().map((s) => ({ ...s, displayName: info.display_name ?? undefined }));
  }

  /** `unload_model`: the model's weights leave the service's memory; its checkpoints stay. */
  async closeSession(sessionId: string): Promise<void> {
    const m = this.models.get(sessionId);
    if (m) m.closed = true;
    try {
      const future = await this.post('/unload_model', { model_id: sessionId, type: 'unload_model' }, Future, { replaySafe: true });
      await this.retrieve(future.request_id, 'UnloadModel', {});
    } catch (err) {
      if (!(err instanceof ProviderError && (err.status === 404 || err.status === 410))) throw err;
    }
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
        this.counted.set(
          requestId,
          data.map((d) => d.weights.map((w) => w !== 0)),
        );
        if (this.counted.size > 4096) this.counted.delete(this.counted.keys().next().value!);
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
        m.pendingOptims.push(requestId);
        return `${requestId}#${m.baseStep + m.submittedSteps}`;
      },
    );
  }

  /** `save_weights` (weights + optimizer), named after the key and the step it holds: `tinker://<model>/weights/<name>`. */
  submitTrainingCheckpoint(sessionId: string, key: string): Promise<OperationHandle<CheckpointResult>> {
    const m = this.driven(sessionId);
    const name = `${checkpointName(key)}-st${m.baseStep + m.submittedSteps}`;
    return this.sequenced<CheckpointResult>(
      'training-checkpoint',
      sessionId,
      key,
      fingerprintOf('save_weights', {}),
      (seq) =>
        this.post('/save_weights', { model_id: m.id, path: name, seq_id: seq, type: 'save_weights' }, Future, {
          key: operationKey(m.id, key),
        }),
      (requestId) => requestId,
    );
  }

  /** `save_weights_for_sampler` under a name (a kept artifact), then a sampling session on it: what samples see next. */
  submitSamplerWeights(sessionId: string, key: string): Promise<OperationHandle<CheckpointResult>> {
    const m = this.driven(sessionId);
    const name = `${checkpointName(key)}-st${m.baseStep + m.submittedSteps}`;
    return this.sequenced<CheckpointResult>(
      'sampler-weights',
      sessionId,
      key,
      fingerprintOf('save_weights_for_sampler', { named: true }),
      (seq) =>
        this.post(
          '/save_weights_for_sampler',
          { model_id: m.id, path: name, seq_id: seq, kind: 'snapshot', type: 'save_weights_for_sampler' },
          Future,
          { key: operationKey(m.id, key) },
        ),
      (requestId) => requestId,
    );
  }

  /** Unnamed `save_weights_for_sampler`: a sampling session of the current weights (nothing kept beyond it). */
  async submitWeightsSync(sessionId: string, key: string): Promise<OperationHandle<WeightsSyncResult>> {
    const m = this.driven(sessionId);
    const s = await this.session(m.tinkerSession);
    const version = m.baseStep + m.submittedSteps;
    return this.sequenced<WeightsSyncResult>(
      'weights-sync',
      sessionId,
      key,
      fingerprintOf('save_weights_for_sampler', { named: false }),
      (seq) =>
        this.post(
          '/save_weights_for_sampler',
          { model_id: m.id, seq_id: seq, sampling_session_seq_id: s.nextSamplerSeq++, kind: 'snapshot', type: 'save_weights_for_sampler' },
          Future,
          { key: operationKey(m.id, key) },
        ),
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
   * Long-polls `retrieve_future` until the future settles: 408 (or a `try_again` body) means still running; an
   * `{error, category}` body is the operation's failure, coded by the `CODE:` its message starts with.
   */
  private async retrieve(requestId: string, type: string, options: AwaitOptions): Promise<{ json?: unknown; bytes?: Buffer }> {
    return poll(
      async () => {
        const answer = await this.callRaw({
          method: 'POST',
          path: '/api/v1/retrieve_future',
          body: { request_id: requestId, allow_metadata_only: false },
          replaySafe: true,
          passStatuses: [408],
          headers: { 'x-tinker-request-type': type },
          signal: options.signal,
        });
        if (answer.status === 408) return undefined;
        if (/application\/x-protobuf/i.test(answer.contentType)) return { bytes: answer.bytes };
        const json = JSON.parse(answer.bytes.toString('utf8') || '{}') as Record<string, unknown>;
        if (json.type === 'try_again') return undefined;
        if (typeof json.error === 'string')
          throw operationFailure(requestId, json.error, typeof json.category === 'string' ? json.category : 'unknown');
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
      if (m && err instanceof ProviderError && err.providerCode === 'SESSION_NOT_ACTIVE') m.failed = true;
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
        const loss = out.metrics['loss:sum'];
        if (loss === undefined)
          throw new ProviderError(
            'BAD_RESPONSE',
            'non-retryable',
            `forward ${requestPart}: no loss:sum metric in ${Object.keys(out.metrics).join(', ')}`,
          );
        const counted = this.counted.get(requestPart);
        const logprobs = out.outputs.map((o, i) => (o.logprobs ?? []).map((v, k) => (counted && !counted[i]?.[k] ? 0 : v)));
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
          if (m?.pendingOptims.includes(requestPart) && !(err instanceof ProviderError && err.errorClass === 'needs-reconcile')) {
            m.pendingOptims = m.pendingOptims.filter((r) => r !== requestPart);
            m.failedOptims += 1;
          }
          throw err;
        }
        if (m) m.pendingOptims = m.pendingOptims.filter((r) => r !== requestPart);
        const reported = (json as { metrics?: Record<string, number> } | undefined)?.metrics?.['step:max'];
        return { step: reported ?? Number(tag) } satisfies OptimStepResult as T;
      }
      case 'training-checkpoint': {
        const { json } = await this.retrieve(requestPart, 'SaveWeights', options);
        const path = z.object({ path: z.string() }).passthrough().parse(json).path;
        return { checkpointId: path, step: checkpointStep(path) } satisfies CheckpointResult as T;
      }
      case 'sampler-weights': {
        const { json } = await this.retrieve(requestPart, 'SaveWeightsForSampler', options);
        const path = z.object({ path: z.string() }).passthrough().parse(json).path;
        const step = checkpointStep(path);
        if (m) {
          // Samples see these weights next: a sampling session on them (named by the session's next sampler seq).
          const s = await this.session(m.tinkerSession);
          const created = await this.post(
            '/create_sampling_session',
            { session_id: s.id, sampling_session_seq_id: s.nextSamplerSeq++, model_path: path, type: 'create_sampling_session' },
            z.object({ sampling_session_id: z.string() }).passthrough(),
            { replaySafe: true },
          );
          if (!m.sampler || m.sampler.version <= step) m.sampler = { id: created.sampling_session_id, version: step, nextSeq: 0 };
        }
        return { checkpointId: path, step } satisfies CheckpointResult as T;
      }
      case 'weights-sync': {
        const { json } = await this.retrieve(requestPart, 'SaveWeightsForSampler', options);
        const id = z.object({ sampling_session_id: z.string() }).passthrough().parse(json).sampling_session_id;
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
          results.push({
            sequences: decoded.sequences,
            ...(decoded.promptLogprobs ? { promptLogprobs: decoded.promptLogprobs.map((v) => v ?? 0) } : {}),
            policyVersion: version,
          });
        }
        this.samples.delete(`${handle.sessionId}\u0000${handle.idempotencyKey}`);
        return results as T;
      }
    }
  }

  /** `DELETE training_runs/{model}/checkpoints/{weights|sampler_weights}/{name}`; one already gone is fine. */
  async deleteCheckpoint(checkpointId: string): Promise<void> {
    const m = /^tinker:\/\/([^/]+)\/(weights|sampler_weights)\/([^/]+)$/.exec(checkpointId);
    if (!m)
      throw new ProviderError(
        'INVALID_INPUT',
        'non-retryable',
        `${checkpointId} is not a tinker://<model>/<weights|sampler_weights>/<name> path`,
      );
    try {
      await this.call({
        method: 'DELETE',
        path: `/api/v1/training_runs/${encodeURIComponent(m[1]!)}/checkpoints/${m[2]}/${encodeURIComponent(m[3]!)}`,
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

/** `<session>:train:<n>` → the session. */
function tinkerSessionOf(modelId: string): string {
  return modelId.replace(/:train:\d+$/, '');
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

/** An operation's failure: the code its message starts with (`INTERNAL_ERROR: …`), classified as for every dialect. */
function operationFailure(requestId: string, message: string, category: string): ProviderError {
  const code = /^([A-Z][A-Z_]+):/.exec(message)?.[1] ?? (category === 'user' ? 'INVALID_INPUT' : 'INTERNAL_ERROR');
  return new ProviderError(
    `OPERATION_FAILED_${code}`,
    classifyOperationError(code),
    `Tinker operation ${requestId} failed (${category}): ${message}`,
    {
      providerCode: code,
      operationId: requestId,
    },
  );
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
