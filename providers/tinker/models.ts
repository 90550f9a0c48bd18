import { z } from 'zod';
import { ProviderError } from '../errors';
import type { OpenSessionRequest, TrainingSessionInfo } from '../types';
import type { TinkerApi } from './auth';
import { checkpointStep, trainingCheckpoints } from './checkpoints';
import { Future, MadeModel, appliedStep, retrieve, type ModelState } from './futures';
import { OWNER_KEY, SessionInfo, isNoRoute, type SessionState, type TinkerSessions } from './sessions';

/**
 * Tinker models as training sessions: made (or loaded from a checkpoint) in a Tinker session, read, listed and
 * unloaded; and the models this process drives, the only ones whose operation order it knows.
 */
export class TinkerModels {
  constructor(
    private readonly api: TinkerApi,
    private readonly resources: TinkerSessions,
    readonly models: Map<string, ModelState>,
  ) {}

  /**
   * A LoRA model of the session, under the id the server gives it: `create_model`, or, when resuming, `load_weights`
   * addressed to the session. Where a server refuses that (SkyRL: 422, no `model_id`), the model is created with the
   * checkpoint's rank and the load is its first request; the server is remembered as one that wants it so.
   */
  async openSession(request: OpenSessionRequest): Promise<TrainingSessionInfo> {
    const s = await this.resources.session(request.resourceId, { baseModel: request.baseModel, fresh: true });
    const from = request.fromCheckpoint;
    const baseStep = from?.loadOptimizer ? checkpointStep(from.id) : 0;
    let id = from && this.resources.traits.sessionLoad !== false ? await this.loadAsNewModel(s, request, from) : undefined;
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
      ...(request.checkpointTtlSeconds !== undefined ? { checkpointTtlSeconds: request.checkpointTtlSeconds } : {}),
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
    const future = await this.api.post(
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
      future = await this.api.post(
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
      this.resources.traits.sessionLoad = false;
      return undefined;
    }
    this.resources.traits.sessionLoad = true;
    return this.madeModel(s, future, 'LoadWeights');
  }

  /** The model a create (or create-via-load) made, once its future settles; a create the service failed made nothing. */
  private async madeModel(s: SessionState, future: z.infer<typeof Future>, type: string): Promise<string> {
    let result: unknown;
    try {
      result = (await retrieve(this.api, future.request_id, type, {})).json;
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
      const info = await this.api.post(
        '/weights_info',
        { tinker_path: path },
        z.object({ lora_rank: z.number().nullish() }).passthrough(),
        {
          replaySafe: true,
        },
      );
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
      const future = await this.api.post(
        '/load_weights',
        { model_id: modelId, seq_id: 1, path: from.id, optimizer: from.loadOptimizer, type: 'load_weights' },
        Future,
        { replaySafe: false },
      );
      await retrieve(this.api, future.request_id, 'LoadWeights', {});
      return 2;
    } catch (err) {
      await this.resources.closeSession(modelId).catch(() => undefined);
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
        this.resources.lost(m);
      }
    }
    if (!m || m.closed || m.gap || m.failed) {
      const r = resourceId ? await this.resources.getResource(resourceId).catch(() => undefined) : undefined;
      const state =
        r && r.state !== 'ready' ? (r.state === 'failed' ? 'failed' : 'stopped') : m?.failed ? 'failed' : m?.closed ? 'stopped' : 'expired';
      return { id: sessionId, resourceId, state, step: 0, trainingCheckpointIds: [] };
    }
    return {
      id: m.id,
      resourceId,
      state: 'running',
      step: appliedStep(m),
      trainingCheckpointIds: await trainingCheckpoints(this.api, m.id),
    };
  }

  /** Waits for the optim steps in flight to settle, so the step counted is the trainer's. */
  private async settleOptims(m: ModelState): Promise<void> {
    for (const [requestId, step] of [...m.pendingOptims]) {
      try {
        await retrieve(this.api, requestId, 'OptimStep', {});
      } catch (err) {
        if (err instanceof ProviderError && err.errorClass === 'needs-reconcile') throw err;
        if (m.pendingOptims.has(requestId)) m.failedOptims.set(requestId, step);
      }
      m.pendingOptims.delete(requestId);
    }
  }

  /** The session's models (`GET sessions/{id}`); a server without session routes lists none: those this process made in it. */
  async listSessions(resourceId: string): Promise<TrainingSessionInfo[]> {
    if (this.resources.traits.sessionRoutes !== false) {
      try {
        const info = await this.api.call({
          method: 'GET',
          path: `/api/v1/sessions/${encodeURIComponent(resourceId)}`,
          schema: SessionInfo,
        });
        const sessions = await Promise.all(info.training_run_ids.map((id) => this.getSession(id)));
        return sessions.reverse().map((s) => ({ ...s, displayName: info.display_name ?? undefined }));
      } catch (err) {
        if (!(await this.resources.lacksSessionRoutes(err, resourceId))) {
          if (err instanceof ProviderError && err.status === 404) return [];
          throw err;
        }
      }
    }
    const ids = [...(this.resources.sessions.get(resourceId)?.models ?? [])];
    const sessions = await Promise.all(ids.map((id) => this.getSession(id)));
    return sessions.reverse().map((s) => ({ ...s, displayName: this.models.get(s.id)?.displayName }));
  }

  /** The model this process drives, or SESSION_NOT_ACTIVE (reopen from a checkpoint). */
  driven(sessionId: string): ModelState {
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
}

/**
 * The session of a model this process did not make, where its id says (hosted Tinker's `<session>:train:<n>`); other
 * servers' ids (SkyRL's `model_<hex>`) say nothing.
 */
function tinkerSessionOf(modelId: string): string | undefined {
  return /^(.+):train:\d+$/.exec(modelId)?.[1];
}
