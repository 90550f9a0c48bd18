import { z } from 'zod';
import { accountFingerprint } from '../account';
import { ProviderError, classifyOperationError, notReady } from '../errors';
import { HttpClient, poll, type HttpClientOptions } from '../http';
import type {
  WaitReadyOptions,
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
  WeightsSyncResult,
} from '../types';
import {
  EstimateCostWire,
  ModelResourcesListWire,
  ModelResourcesWire,
  OperationWire,
  SessionListWire,
  SessionWire,
  SupportedModelsWire,
} from './wire';
import { decodeOutput, legacyGrpoBody, lossBody, toResource, toSession, WIRE_KIND } from './mapping';

export const TOGETHER_DEFAULT_BASE_URL = 'https://api.together.ai';

export interface TogetherProviderOptions extends Omit<HttpClientOptions, 'baseUrl'> {
  /** `https://api.together.ai` (a trailing `/v1` is accepted too), or the emulator's URL. */
  baseUrl?: string;
  apiKey: string;
  /** Operation polling: first interval and ceiling. */
  pollIntervalMs?: number;
  maxPollIntervalMs?: number;
}

const P = '/v1/rl';
const anyJson = z.unknown();
/** The SDK's session client retries a 429 up to 7 times, honouring Retry-After (`_MAX_RETRIES`, its README). */
const SESSION_CREATE_RETRIES = 7;

export class TogetherProvider implements TrainingProvider {
  readonly kind = 'together' as const;
  readonly account: string;
  /** Model resources carry no name or metadata, and their create takes no idempotency key (see provision). */
  readonly tagsResourcesAtCreate = false;
  private readonly http: HttpClient;
  private readonly pollIntervalMs: number;
  private readonly maxPollIntervalMs: number;

  constructor(options: TogetherProviderOptions) {
    const baseUrl = (options.baseUrl ?? TOGETHER_DEFAULT_BASE_URL).replace(/\/+$/, '').replace(/\/v1$/, '');
    this.http = new HttpClient({ ...options, baseUrl, userAgent: options.userAgent ?? 'roundhouse-together' });
    this.account = accountFingerprint(baseUrl, options.apiKey);
    this.pollIntervalMs = options.pollIntervalMs ?? 100;
    this.maxPollIntervalMs = options.maxPollIntervalMs ?? 2_000;
  }

  async supportedModels(): Promise<ModelInfo[]> {
    const res = await this.http.request({ method: 'GET', path: `${P}/supported-models`, schema: SupportedModelsWire });
    return res.data.map((m) => {
      const lora = m.compute_configs?.find((c) => c.trainer_config?.lora)?.trainer_config?.lora;
      return {
        name: m.base_model,
        maxLoraRank: lora?.max_rank ?? 64,
        maxSeqLen: lora?.max_seq_length ?? 8192,
        maxBatchSize: lora?.max_batch_size ?? 256,
        vocabSize: m.vocab_size,
        tokenizer: m.tokenizer ?? m.base_model,
        gpuCount: m.gpu_count,
        adapterCapacity: m.adapter_capacity,
        ...(m.supports_stop_strings !== undefined ? { stopStrings: m.supports_stop_strings } : {}),
      };
    });
  }

  async estimateCost(model: string, generatorReplicas = 1): Promise<{ currency: string; pricePerHour: number }> {
    const res = await this.http.request({
      method: 'POST',
      path: `${P}/model-resources/estimate-cost`,
      body: { base_model: model, compute_config: { num_generator_replicas: generatorReplicas }, lora_enabled: true },
      replaySafe: true, // a quote changes nothing
      schema: EstimateCostWire,
    });
    return { currency: res.currency, pricePerHour: res.price_per_hour };
  }

  /** Together's resources carry no name or metadata: the owner tag cannot travel with them (see reconcile). */
  async provision(request: ProvisionRequest): Promise<TrainerResource> {
    const body: Record<string, unknown> = {
      base_model: request.model,
      compute_config: { num_generator_replicas: request.generatorReplicas ?? 1 },
      lora_enabled: true,
    };
    if (request.inactiveTimeoutSeconds !== undefined) body.inactive_timeout = request.inactiveTimeoutSeconds;
    const res = await this.http.request({ method: 'POST', path: `${P}/model-resources`, body, schema: ModelResourcesWire });
    return toResource(res);
  }

  async getResource(resourceId: string): Promise<TrainerResource> {
    return toResource(
      await this.http.request({
        method: 'GET',
        path: `${P}/model-resources/${encodeURIComponent(resourceId)}`,
        schema: ModelResourcesWire,
      }),
    );
  }

  async waitReady(resourceId: string, options: WaitReadyOptions = {}): Promise<TrainerResource> {
    return poll(
      async () => {
        const r = await this.getResource(resourceId);
        if (r.state === 'ready') return r;
        if (r.state !== 'provisioning') throw notReady(r, `model resource ${resourceId} is ${r.providerStatus} while waiting for READY`);
        options.onWait?.(r);
        return undefined;
      },
      `model resource ${resourceId} ready`,
      {
        initialIntervalMs: options.pollIntervalMs ?? 250,
        maxIntervalMs: 5_000,
        timeoutMs: options.timeoutMs ?? 3_600_000,
        signal: options.signal,
      },
    );
  }

  async listOwnedResources(options: { activeOnly?: boolean } = {}): Promise<TrainerResource[]> {
    const out: TrainerResource[] = [];
    let after: string | undefined;
    for (let pageNo = 0; pageNo < 1000; pageNo++) {
      const res = await this.http.request({
        method: 'GET',
        path: `${P}/model-resources`,
        query: {
          created_by: 'me',
          limit: 100,
          after,
          status: options.activeOnly
            ? ['MODEL_RESOURCES_STATUS_PENDING', 'MODEL_RESOURCES_STATUS_CREATING', 'MODEL_RESOURCES_STATUS_READY']
            : undefined,
        },
        schema: ModelResourcesListWire,
      });
      out.push(...res.data.map(toResource));
      if (!res.meta?.has_more || !res.meta.next_cursor) break;
      after = res.meta.next_cursor;
    }
    return out;
  }

  async deactivate(resourceId: string): Promise<TrainerResource> {
    try {
      const res = await this.http.request({
        method: 'POST',
        path: `${P}/model-resources/${encodeURIComponent(resourceId)}/stop`,
        query: { force: true },
        replaySafe: true, // stopping twice is harmless
        schema: ModelResourcesWire,
      });
      return toResource(res);
    } catch (err) {
      if (err instanceof ProviderError && err.status === 404) {
        return { id: resourceId, model: '', state: 'stopped', providerStatus: 'NOT_FOUND', createdAt: '' };
      }
      if (err instanceof ProviderError && err.status === 400) {
        // The service refuses to stop what already stopped or failed: check, and accept those.
        const current = await this.getResource(resourceId);
        if (current.state === 'stopped' || current.state === 'stopping' || current.state === 'failed') return current;
      }
      throw err;
    }
  }

  async openSession(request: OpenSessionRequest): Promise<TrainingSessionInfo> {
    const body: Record<string, unknown> = {
      model_resources_id: request.resourceId,
      lora_config: {
        rank: request.loraRank,
        ...(request.loraAlpha !== undefined ? { alpha: request.loraAlpha } : {}),
        ...(request.seed !== undefined ? { seed: request.seed } : {}),
      },
    };
    if (request.fromCheckpoint) {
      body.resume_from_checkpoint_id = request.fromCheckpoint.id;
      body.load_optimizer = request.fromCheckpoint.loadOptimizer;
    }
    if (request.displayName) body.display_name = request.displayName;
    if (request.metadata) body.metadata = request.metadata;
    const created = toSession(await this.createSession(request, body));
    if (created.state === 'running') return created;
    return poll(
      async () => {
        const s = await this.getSession(created.id);
        if (s.state === 'running') return s;
        if (s.state !== 'starting')
          throw new ProviderError('SESSION_NOT_RUNNING', 'non-retryable', `training session ${s.id} is ${s.state} while starting`);
        return undefined;
      },
      `training session ${created.id} running`,
      { initialIntervalMs: 250, maxIntervalMs: 5_000, timeoutMs: 3_600_000 },
    );
  }

  /**
   * The session create, retried on 429 as the SDK's session client does (7 times, honouring Retry-After). A 429 that
   * outlasts them is the resource's cap on concurrent sessions, the one 429 Together documents for it: a
   * non-retryable error that names the cap and the sessions holding it.
   */
  private async createSession(request: OpenSessionRequest, body: Record<string, unknown>): Promise<SessionWire> {
    const startedAt = Date.now();
    try {
      return await this.http.request({
        method: 'POST',
        path: `${P}/training-sessions`,
        body,
        schema: SessionWire,
        maxRetries: SESSION_CREATE_RETRIES,
      });
    } catch (err) {
      if (!(err instanceof ProviderError && err.status === 429)) throw err;
      throw await this.sessionCapReached(request, err, Date.now() - startedAt);
    }
  }

  private async sessionCapReached(request: OpenSessionRequest, refusal: ProviderError, waitedMs: number): Promise<ProviderError> {
    const { resourceId, baseModel } = request;
    const [holding, capacity] = await Promise.all([
      this.listSessions(resourceId)
        .then((all) => all.filter((s) => s.state === 'starting' || s.state === 'running' || s.state === 'stopping'))
        .catch(() => undefined),
      baseModel
        ? this.supportedModels()
            .then((models) => models.find((m) => m.name === baseModel)?.adapterCapacity)
            .catch(() => undefined)
        : undefined,
    ]);
    const cap =
      capacity !== undefined
        ? `${baseModel} accepts ${capacity} concurrent session${capacity === 1 ? '' : 's'} per LoRA resource`
        : 'a LoRA resource accepts up to 5 concurrent sessions by default, fewer for some models; a full-weight one accepts 1';
    const held = holding ? `; ${holding.length} active on it: ${holding.map((s) => s.id).join(', ') || 'none listed'}` : '';
    return new ProviderError(
      'SESSION_CAP_REACHED',
      'non-retryable',
      `model resource ${resourceId} refused a new training session with HTTP 429 for ${(waitedMs / 1000).toFixed(1)} s ` +
        `(retried as the SDK does, honouring Retry-After): its cap on concurrent sessions is reached ` +
        `(${cap}${held}). Stop a session on it, or use another resource. The provider said: ${refusal.message}`,
      { status: 429, providerCode: refusal.providerCode, method: refusal.method, path: refusal.path, cause: refusal },
    );
  }

  async getSession(sessionId: string): Promise<TrainingSessionInfo> {
    return toSession(
      await this.http.request({ method: 'GET', path: `${P}/training-sessions/${encodeURIComponent(sessionId)}`, schema: SessionWire }),
    );
  }

  async listSessions(resourceId: string): Promise<TrainingSessionInfo[]> {
    const out: TrainingSessionInfo[] = [];
    let after: string | undefined;
    for (let pageNo = 0; pageNo < 100; pageNo++) {
      const res = await this.http.request({
        method: 'GET',
        path: `${P}/training-sessions`,
        query: { model_resources_id: resourceId, created_by: 'me', limit: 100, after },
        schema: SessionListWire,
      });
      out.push(...(res.data ?? []).map(toSession));
      if (!res.meta?.has_more || !res.meta.next_cursor) break;
      after = res.meta.next_cursor;
    }
    return out;
  }

  async closeSession(sessionId: string): Promise<void> {
    try {
      await this.http.request({
        method: 'POST',
        path: `${P}/training-sessions/${encodeURIComponent(sessionId)}/stop`,
        replaySafe: true,
        schema: anyJson,
      });
    } catch (err) {
      if (err instanceof ProviderError && (err.status === 404 || err.status === 400)) return; // gone already
      throw err;
    }
  }

  private async submit<T>(
    kind: OperationKind,
    sessionId: string,
    key: string,
    body: unknown,
    wireKind = WIRE_KIND[kind],
  ): Promise<OperationHandle<T>> {
    const op = await this.http.request({
      method: 'POST',
      path: `${P}/training-sessions/${encodeURIComponent(sessionId)}/operations/${wireKind}`,
      idempotencyKey: key,
      body,
      schema: OperationWire,
    });
    return { kind, sessionId, operationId: op.id, idempotencyKey: key };
  }

  async submitForwardBackward(
    sessionId: string,
    key: string,
    data: Datum[],
    options: ForwardBackwardOptions = {},
  ): Promise<OperationHandle<ForwardResult>> {
    const body = {
      ...lossBody(options.loss ?? { type: 'cross_entropy' }, data),
      ...(options.forwardOnly ? { forward_only: true } : {}),
      ...(options.returnLogprobs ? { return_loss_fn_outputs: true } : {}),
    };
    try {
      return await this.submit<ForwardResult>('forward-backward', sessionId, key, body);
    } catch (err) {
      // A GRPO step submitted by a worker from before agg_type was always sent (#44), resent under its key after a
      // deploy: the service refuses the key with today's body. The body it was sent with then is today's without the
      // default agg_type; resent as it was, the key answers the step's original operation (no second gradient).
      const legacy = legacyGrpoBody(body, options.loss);
      if (!(err instanceof ProviderError && err.providerCode === 'IDEMPOTENCY_KEY_REUSED' && legacy)) throw err;
      return this.submit<ForwardResult>('forward-backward', sessionId, key, legacy);
    }
  }

  async submitCustomForwardBackward(
    sessionId: string,
    key: string,
    data: Datum[],
    gradients: number[][],
  ): Promise<OperationHandle<Record<string, never>>> {
    if (
      gradients.length !== data.length ||
      gradients.some((g, i) => g.length !== data[i]!.targetTokens.length || g.some((v) => !Number.isFinite(v)))
    ) {
      throw new ProviderError(
        'INVALID_INPUT',
        'non-retryable',
        'custom forward-backward needs one finite gradient per target token of every datum',
      );
    }
    return this.submit('custom-forward-backward', sessionId, key, {
      samples: lossBody({ type: 'cross_entropy' }, data).samples,
      gradients: gradients.map((g) => ({ data: g, dtype: 'D_TYPE_FLOAT32' })),
    });
  }

  submitOptimStep(sessionId: string, key: string, adam: AdamParams): Promise<OperationHandle<OptimStepResult>> {
    const adamParams: Record<string, number> = { learning_rate: adam.learningRate };
    if (adam.beta1 !== undefined) adamParams.beta1 = adam.beta1;
    if (adam.beta2 !== undefined) adamParams.beta2 = adam.beta2;
    if (adam.eps !== undefined) adamParams.eps = adam.eps;
    if (adam.weightDecay !== undefined) adamParams.weight_decay = adam.weightDecay;
    if (adam.gradClipNorm !== undefined) adamParams.grad_clip_norm = adam.gradClipNorm;
    return this.submit('optim-step', sessionId, key, { adam_params: adamParams });
  }

  submitTrainingCheckpoint(sessionId: string, key: string): Promise<OperationHandle<CheckpointResult>> {
    return this.submit('training-checkpoint', sessionId, key, undefined);
  }

  /** weights-sync (the generators serve the trained weights) then an inference checkpoint (the deployable artifact). */
  async submitSamplerWeights(sessionId: string, key: string): Promise<OperationHandle<CheckpointResult>> {
    const sync = await this.submit<unknown>(
      'sampler-weights',
      sessionId,
      `${key}/weights-sync`,
      { weight_sync_type: 'WEIGHT_SYNC_TYPE_SYNCHRONOUS' },
      'weights-sync',
    );
    const handle = await this.submit<CheckpointResult>('sampler-weights', sessionId, key, undefined);
    return { ...handle, prerequisites: [{ wireKind: 'weights-sync', operationId: sync.operationId }] };
  }

  submitWeightsSync(sessionId: string, key: string): Promise<OperationHandle<WeightsSyncResult>> {
    return this.submit('weights-sync', sessionId, key, { weight_sync_type: 'WEIGHT_SYNC_TYPE_SYNCHRONOUS' });
  }

  submitSample(
    sessionId: string,
    key: string,
    prompts: number[][],
    params: SamplingParams,
    options: { numSamples?: number; promptLogprobs?: boolean } = {},
  ): Promise<OperationHandle<SampleResult[]>> {
    const sampling: Record<string, unknown> = { max_tokens: params.maxTokens, temperature: params.temperature };
    if (params.topP !== undefined) sampling.top_p = params.topP;
    if (params.topK !== undefined) sampling.top_k = params.topK;
    if (params.seed !== undefined) sampling.seed = params.seed;
    if (params.stop?.length) sampling.stop = params.stop;
    return this.submit('sample', sessionId, key, {
      model_inputs: prompts.map((tokens) => ({ chunks: [{ encoded_text: { tokens } }] })),
      num_samples: options.numSamples ?? 1,
      sampling_params: sampling,
      ...(options.promptLogprobs ? { prompt_logprobs: true } : {}),
    });
  }

  private async settle(sessionId: string, wireKind: string, operationId: string, options: AwaitOptions): Promise<unknown> {
    const path = `${P}/training-sessions/${encodeURIComponent(sessionId)}/operations/${wireKind}/${encodeURIComponent(operationId)}`;
    const op = await poll(
      async () => {
        const o = await this.http.request({ method: 'GET', path, schema: OperationWire, signal: options.signal });
        return o.status === 'TRAINING_OPERATION_STATUS_COMPLETED' || o.status === 'TRAINING_OPERATION_STATUS_FAILED' ? o : undefined;
      },
      `${wireKind} operation ${operationId}`,
      {
        initialIntervalMs: this.pollIntervalMs,
        maxIntervalMs: this.maxPollIntervalMs,
        timeoutMs: options.timeoutMs ?? 300_000,
        signal: options.signal,
      },
    );
    if (op.status === 'TRAINING_OPERATION_STATUS_FAILED') {
      const code = (op.error?.code ?? 'TRAINING_OPERATION_ERROR_CODE_UNSPECIFIED').replace('TRAINING_OPERATION_ERROR_CODE_', '');
      throw new ProviderError(
        `OPERATION_FAILED_${code}`,
        classifyOperationError(code),
        `${wireKind} operation ${operationId} failed: ${code}: ${op.error?.message ?? ''}`,
        {
          providerCode: code,
          operationId,
        },
      );
    }
    if (op.output === undefined || op.output === null) {
      throw new ProviderError('BAD_RESPONSE', 'retryable', `${wireKind} operation ${operationId} completed without an output`, {
        operationId,
      });
    }
    return op.output;
  }

  async awaitOperation<T>(handle: OperationHandle<T>, options: AwaitOptions = {}): Promise<T> {
    for (const pre of handle.prerequisites ?? []) await this.settle(handle.sessionId, pre.wireKind, pre.operationId, options);
    const output = await this.settle(handle.sessionId, WIRE_KIND[handle.kind], handle.operationId, options);
    return decodeOutput(handle, output) as T;
  }

  /** Publishes weights to the generators without a checkpoint (the policy version sampling then sees). */
  async syncWeights(sessionId: string, key: string, options: AwaitOptions = {}): Promise<number> {
    return (await this.awaitOperation(await this.submitWeightsSync(sessionId, key), options)).weightsVersion;
  }

  close(): Promise<void> {
    return this.http.close();
  }
}
