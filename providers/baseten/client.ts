import { randomUUID } from 'node:crypto';
import type { z } from 'zod';
import { accountFingerprint } from '../account';
import { checkpointName, operationKey } from '../keys';
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
  ResourceState,
  SampleResult,
  SamplingParams,
  SessionState,
  TrainerResource,
  TrainingProvider,
  TrainingSessionInfo,
  WeightsSyncResult,
} from '../types';
import {
  ADAM_DEFAULTS,
  AcceptedWire,
  AnyJson,
  CapabilitiesWire,
  CheckpointsEnvelope,
  CompletionWire,
  DeploymentEnvelope,
  DeploymentsEnvelope,
  ForwardOutput,
  OperationWire,
  OptimStepOutput,
  PolicyVersionWire,
  RunEnvelope,
  RunsEnvelope,
  SamplersEnvelope,
  SamplerEnvelope,
  SamplerWeightsOutput,
  SaveStateOutput,
  SessionEnvelope,
  StepOutput,
  fromLoopsLogprobs,
  operationErrorCode,
  toLoopsDatum,
  toLoopsPolicyDatum,
  type RunWire,
  type SamplerWire,
} from './wire';

export const BASETEN_DEFAULT_BASE_URL = 'https://api.baseten.co';

/**
 * `Authorization: Api-Key <key>` on every plane, as `baseten-loops` 0.32.0 sends it (`_headers.py`
 * `request_headers`); the API also accepts `Bearer`, the scheme its docs show (WIRE.md §1.3).
 */
const AUTH_SCHEME = 'Api-Key';

export interface BasetenProviderOptions extends Omit<HttpClientOptions, 'baseUrl' | 'authHeader' | 'authScheme'> {
  /** The control plane: `https://api.baseten.co`, or the emulator's URL. Trainer and sampler URLs come from it. */
  baseUrl?: string;
  apiKey: string;
  /** Operation polling between long polls: first interval and ceiling. */
  pollIntervalMs?: number;
  maxPollIntervalMs?: number;
}

/**
 * Baseten Loops behind the provider-neutral interface (wire notes: WIRE.md beside this file).
 *
 * - A trainer resource is a Loops **run**; its training session is the run's trainer, so a session's id is the
 *   run's id. Opening a session is `init_trainer_server` (a fresh adapter), then `load_state[_with_optimizer]`
 *   when resuming; closing one releases nothing (deactivating the run does).
 * - Every provision gets its own Loops **session** and names the run after the owner tag, so a run whose create
 *   response was lost is found by listing the session's runs, and deactivation covers every run of the session.
 * - Trainer operations use the 202 + long-poll protocol with an `Idempotency-Key` derived from (run, caller key):
 *   a resubmission gets the original operation. Losses are sums (`skip_token_normalization`), as for Together.
 * - Sampling goes to the run's paired (dedicated) sampler, which answers synchronously: the results are held
 *   here until `awaitOperation`, and a handle from another process is resubmitted by the caller (sampling
 *   changes nothing).
 */
export class BasetenProvider implements TrainingProvider {
  readonly kind = 'baseten' as const;
  readonly account: string;
  /** Runs are named after the owner tag at their create. */
  readonly tagsResourcesAtCreate = true;
  private readonly control: HttpClient;
  private readonly planes = new Map<string, HttpClient>();
  private readonly runs = new Map<string, RunWire>();
  private readonly samplers = new Map<string, { baseUrl: string; dedicated: boolean }>();
  /** The last policy version published per run: samples ask the sampler for at least this (`X-Min-Policy-Version`). */
  private readonly published = new Map<string, number>();
  private readonly samples = new Map<string, SampleResult[]>();
  private readonly pollIntervalMs: number;
  private readonly maxPollIntervalMs: number;

  constructor(private readonly options: BasetenProviderOptions) {
    const baseUrl = (options.baseUrl ?? BASETEN_DEFAULT_BASE_URL).replace(/\/+$/, '');
    this.control = new HttpClient({ ...options, baseUrl, authScheme: AUTH_SCHEME, userAgent: options.userAgent ?? 'roundhouse-baseten' });
    this.account = accountFingerprint(baseUrl, options.apiKey);
    this.pollIntervalMs = options.pollIntervalMs ?? 100;
    this.maxPollIntervalMs = options.maxPollIntervalMs ?? 2_000;
  }

  async supportedModels(): Promise<ModelInfo[]> {
    const res = await this.control.request({ method: 'GET', path: '/v1/loops/capabilities', schema: CapabilitiesWire });
    return res.supported_models.map((m) => ({
      name: m.model_name,
      maxLoraRank: m.max_lora_rank ?? 64,
      maxSeqLen: m.max_seq_len ?? m.max_context_length ?? 8192,
      maxBatchSize: m.max_batch_size ?? 256,
      vocabSize: m.vocab_size ?? undefined,
      tokenizer: m.tokenizer ?? m.model_name,
      gpuCount: m.gpu_count ?? undefined,
    }));
  }

  // ── runs ─────────────────────────────────────────────────────────────────────────────────────────

  /**
   * A new Loops session, then a run in it named after the owner tag. A create whose answer is lost is
   * reconciled by listing the session's runs (never resent): the one run found is the one created.
   */
  async provision(request: ProvisionRequest): Promise<TrainerResource> {
    if (!request.ownerTag || request.ownerTag.length > 255) {
      throw new ProviderError(
        'INVALID_INPUT',
        'non-retryable',
        `ownerTag must be 1 to 255 characters (it is the run's name), got ${request.ownerTag.length}`,
      );
    }
    // An empty session holds no GPUs, so resending its create after a lost answer is harmless.
    const session = await this.control.request({ method: 'POST', path: '/v1/loops/sessions', replaySafe: true, schema: SessionEnvelope });
    const body: Record<string, unknown> = {
      session_id: session.session.id,
      base_model: request.model,
      name: request.ownerTag,
      availability_model: 'dedicated',
      replicas: 1,
    };
    if (request.inactiveTimeoutSeconds !== undefined)
      body.scale_down_delay_seconds = Math.min(3600, Math.max(1, Math.round(request.inactiveTimeoutSeconds)));
    // `/runs` pairs a sampler with the trainer; `/trainers` is the trainer alone (a sampler can be paired later).
    const path = (request.generatorReplicas ?? 1) > 0 ? '/v1/loops/runs' : '/v1/loops/trainers';
    let run: RunWire;
    try {
      run = (await this.control.request({ method: 'POST', path, body, schema: RunEnvelope })).run;
    } catch (err) {
      if (!(err instanceof ProviderError && err.errorClass === 'needs-reconcile')) throw err;
      const found = await this.sessionRuns(session.session.id);
      if (found.length === 0) throw err; // not created (yet): the caller lists again before creating anew
      run = found[0]!;
    }
    this.runs.set(run.id, run);
    return this.describe(run);
  }

  async getResource(resourceId: string): Promise<TrainerResource> {
    return this.describe(await this.fetchRun(resourceId));
  }

  async waitReady(resourceId: string, options: WaitReadyOptions = {}): Promise<TrainerResource> {
    return poll(
      async () => {
        const r = await this.getResource(resourceId);
        if (r.state === 'ready' && (await this.healthy(resourceId))) return r;
        if (r.state !== 'provisioning' && r.state !== 'ready') {
          throw notReady(r, `run ${resourceId} is ${r.providerStatus} while waiting for it to be ready`);
        }
        options.onWait?.(r);
        return undefined;
      },
      `run ${resourceId} ready`,
      {
        initialIntervalMs: options.pollIntervalMs ?? 250,
        maxIntervalMs: 5_000,
        timeoutMs: options.timeoutMs ?? 3_600_000,
        signal: options.signal,
      },
    );
  }

  /** The trainer answers its health probe (what the SDK waits for before its first operation). */
  private async healthy(runId: string): Promise<boolean> {
    const run = await this.runInfo(runId);
    try {
      await this.plane(run).request({
        method: 'GET',
        path: '/health',
        query: { base_model: run.base_model },
        headers: this.runHeaders(runId),
        schema: AnyJson,
      });
      return true;
    } catch (err) {
      if (err instanceof ProviderError && err.errorClass !== 'non-retryable') return false;
      throw err;
    }
  }

  async listOwnedResources(options: { activeOnly?: boolean } = {}): Promise<TrainerResource[]> {
    const [runs, deployments] = await Promise.all([
      this.listAll('/v1/loops/runs', RunsEnvelope, (page) => page.runs),
      this.listAll('/v1/loops/deployments', DeploymentsEnvelope, (page) => page.deployments),
    ]);
    const statusOf = new Map(deployments.map((d) => [d.id, d.status.name]));
    return runs
      .filter((r) => !options.activeOnly || r.status.name === 'ACTIVE')
      .map((r) => toResource(r, r.deployment_id ? statusOf.get(r.deployment_id) : undefined));
  }

  /**
   * Samplers billed on their own: every listed sampler that is no run's paired sampler (those stop with their run) and
   * still holds GPUs. Roundhouse creates none on purpose; one exists when a resent create was applied twice. Its owner
   * tag is its run's (or its session's) where the listing names them (the emulator does; the service's schema does
   * not, so there such a sampler is untagged).
   */
  async listStrayResources(): Promise<TrainerResource[]> {
    const { runs, samplers } = await this.straySamplers();
    const tagOf = (s: SamplerWire) =>
      (runs.find((r) => r.id === s.run_id) ?? runs.find((r) => s.session_id && r.session_id === s.session_id))?.name || undefined;
    return samplers.map((s) => {
      const tag = tagOf(s);
      return { ...samplerResource(s), ...(tag ? { ownerTag: tag } : {}) };
    });
  }

  /** The runs, and the samplers that still hold GPUs and are no run's paired sampler. */
  private async straySamplers(): Promise<{ runs: RunWire[]; samplers: SamplerWire[] }> {
    const [runs, samplers] = await Promise.all([
      this.listAll('/v1/loops/runs', RunsEnvelope, (page) => page.runs),
      this.listAll('/v1/loops/samplers', SamplersEnvelope, (page) => page.samplers),
    ]);
    const paired = new Set(runs.flatMap((r) => (r.sampler ? [r.sampler.id] : [])));
    return { runs, samplers: samplers.filter((s) => !paired.has(s.id) && samplerHoldsGpus(s)) };
  }

  /** Every page of a listing: the service documents no paging for these, so a `next_page_token` is followed if given. */
  private async listAll<P extends { next_page_token?: number | string | null }, T>(
    path: string,
    schema: z.ZodType<P>,
    items: (page: NoInfer<P>) => T[],
    query: Record<string, string> = {},
  ): Promise<T[]> {
    const out: T[] = [];
    const seen = new Set<string>();
    let token: string | undefined;
    for (;;) {
      const page = await this.control.request({ method: 'GET', path, query: token ? { ...query, page_token: token } : query, schema });
      out.push(...items(page));
      const next = page.next_page_token;
      if (next === undefined || next === null || next === '' || seen.has(String(next))) return out;
      seen.add(String(next));
      if (seen.size > 10_000) throw new ProviderError('INVALID_RESPONSE', 'retryable', `${path} kept paging past 10,000 pages`);
      token = String(next);
    }
  }

  /** Deactivates the run and every other active run of its Loops session (a duplicate from an unclear create). */
  async deactivate(resourceId: string): Promise<TrainerResource> {
    let run: RunWire;
    try {
      run = await this.fetchRun(resourceId);
    } catch (err) {
      if (err instanceof ProviderError && err.status === 404) return this.deactivateSampler(resourceId);
      throw err;
    }
    await this.releaseSession(run.session_id);
    return this.getResource(resourceId);
  }

  /** A sampler billed on its own (what `listStrayResources` lists), by its id; not found is stopped. */
  private async deactivateSampler(samplerId: string): Promise<TrainerResource> {
    const path = `/v1/loops/samplers/${encodeURIComponent(samplerId)}`;
    try {
      await this.control.request({ method: 'POST', path: `${path}/deactivate`, replaySafe: true, schema: AnyJson });
      return samplerResource((await this.control.request({ method: 'GET', path, schema: SamplerEnvelope })).sampler);
    } catch (err) {
      if (err instanceof ProviderError && err.status === 404)
        return { id: samplerId, model: '', state: 'stopped', providerStatus: 'NOT_FOUND', createdAt: '' };
      throw err;
    }
  }

  /**
   * Deactivates every active run of a Loops session (what the guide's `release_session` does), and every sampler of
   * the session billed on its own (a duplicate from a resent create, where the listing names its session); returns
   * the runs' ids.
   */
  async releaseSession(sessionId: string): Promise<string[]> {
    const runs = await this.sessionRuns(sessionId);
    const active = runs.filter((r) => r.status.name === 'ACTIVE');
    // A sampler is paired with a run of its own session, so the session's runs say which of its samplers are strays
    // (listing every run of the account here made each release cost as much as the account is large).
    const paired = new Set(runs.flatMap((r) => (r.sampler ? [r.sampler.id] : [])));
    const samplers = await this.listAll('/v1/loops/samplers', SamplersEnvelope, (page) => page.samplers);
    const strays = samplers.filter(
      (x) => (x.session_id === sessionId || runs.some((r) => r.id === x.run_id)) && !paired.has(x.id) && samplerHoldsGpus(x),
    );
    for (const s of strays) await this.deactivateSampler(s.id);
    for (const r of active) {
      try {
        // Deactivating twice answers the same, so a resend after a lost answer is harmless.
        await this.control.request({
          method: 'POST',
          path: `/v1/loops/runs/${encodeURIComponent(r.id)}/deactivate`,
          replaySafe: true,
          schema: RunDeactivated,
        });
      } catch (err) {
        if (!(err instanceof ProviderError && err.status === 404)) throw err;
      }
    }
    return active.map((r) => r.id);
  }

  /** Runs of a Loops session, newest first. The service filters runs by id and model only, so the session filter is applied here too. */
  private async sessionRuns(sessionId: string): Promise<RunWire[]> {
    const runs = await this.listAll('/v1/loops/runs', RunsEnvelope, (page) => page.runs, { session_id: sessionId });
    return runs.filter((r) => r.session_id === sessionId);
  }

  private async fetchRun(runId: string): Promise<RunWire> {
    const { run } = await this.control.request({ method: 'GET', path: `/v1/loops/runs/${encodeURIComponent(runId)}`, schema: RunEnvelope });
    this.runs.set(run.id, run);
    return run;
  }

  private async runInfo(runId: string): Promise<RunWire> {
    return this.runs.get(runId) ?? this.fetchRun(runId);
  }

  private async deploymentStatus(deploymentId: string): Promise<string | undefined> {
    try {
      return (
        await this.control.request({
          method: 'GET',
          path: `/v1/loops/deployments/${encodeURIComponent(deploymentId)}`,
          schema: DeploymentEnvelope,
        })
      ).deployment.status.name;
    } catch (err) {
      if (err instanceof ProviderError && err.status === 404) return undefined;
      throw err;
    }
  }

  private async describe(run: RunWire): Promise<TrainerResource> {
    return toResource(run, run.deployment_id ? await this.deploymentStatus(run.deployment_id) : undefined);
  }

  // ── sessions (a run's trainer) ───────────────────────────────────────────────────────────────────

  /** `init_trainer_server` (a fresh adapter of this rank), then the checkpoint when resuming. The run's seed was set at provisioning. */
  async openSession(request: OpenSessionRequest): Promise<TrainingSessionInfo> {
    const run = await this.runInfo(request.resourceId);
    const init = await this.submitTrainer(run.id, 'init_trainer_server', oneOffKey(), {
      lora_rank: request.loraRank,
      base_model: run.base_model,
    });
    let step = StepOutput.parse(await this.settle(run.id, init, {})).step;
    if (request.fromCheckpoint) {
      const route = request.fromCheckpoint.loadOptimizer ? 'load_state_with_optimizer' : 'load_state';
      const load = await this.submitTrainer(run.id, route, oneOffKey(), { path: request.fromCheckpoint.id });
      step = StepOutput.parse(await this.settle(run.id, load, {})).step;
    }
    return {
      id: run.id,
      resourceId: run.id,
      state: 'running',
      step,
      trainingCheckpointIds: await this.trainingCheckpoints(run.id),
      displayName: run.name,
    };
  }

  async getSession(sessionId: string): Promise<TrainingSessionInfo> {
    const run = await this.fetchRun(sessionId);
    const resource = await this.describe(run);
    const state = sessionState(resource);
    const step = state === 'running' ? await this.policyVersion(run.id) : 0;
    return {
      id: run.id,
      resourceId: run.id,
      state,
      step,
      trainingCheckpointIds: await this.trainingCheckpoints(run.id),
      displayName: run.name,
    };
  }

  async listSessions(resourceId: string): Promise<TrainingSessionInfo[]> {
    try {
      return [await this.getSession(resourceId)];
    } catch (err) {
      if (err instanceof ProviderError && err.status === 404) return [];
      throw err;
    }
  }

  /** Nothing to release: the trainer belongs to the run, which `deactivate` releases. */
  async closeSession(): Promise<void> {}

  /** The trainer's optimizer step (restored by `load_state_with_optimizer`). */
  private async policyVersion(runId: string): Promise<number> {
    const run = await this.runInfo(runId);
    const res = await this.plane(run).request({
      method: 'GET',
      path: '/policy_version',
      headers: this.runHeaders(runId),
      schema: PolicyVersionWire,
    });
    return res.policy_version;
  }

  /** The run's trainer checkpoints (oldest first), named by their `bt://` paths: what `openSession` resumes from. */
  private async trainingCheckpoints(runId: string): Promise<string[]> {
    const res = await this.control.request({
      method: 'GET',
      path: '/v1/loops/checkpoints',
      query: { run_id: runId },
      schema: CheckpointsEnvelope,
    });
    return res.checkpoints
      .filter((c) => c.target === 'trainer')
      .sort((a, b) => a.created_at.localeCompare(b.created_at))
      .map((c) => `bt://loops:${c.run_id}/weights/${c.checkpoint_id}`);
  }

  // ── trainer operations ───────────────────────────────────────────────────────────────────────────

  private plane(run: RunWire): HttpClient {
    if (!run.base_url) throw new ProviderError('RUN_NOT_READY', 'retryable', `run ${run.id} has no trainer URL yet`);
    let client = this.planes.get(run.base_url);
    if (!client) {
      client = new HttpClient({
        ...this.options,
        baseUrl: run.base_url,
        authScheme: AUTH_SCHEME,
        userAgent: this.options.userAgent ?? 'roundhouse-baseten',
      });
      this.planes.set(run.base_url, client);
    }
    return client;
  }

  private runHeaders(runId: string): Record<string, string> {
    return { 'x-run-id': runId, 'x-baseten-accept-error': '1' };
  }

  /** POST `/<route>` → 202 `{operation_id}`; the operation id is the key sent, so a resubmission names the same operation. */
  private async submitTrainer(runId: string, route: string, key: string, body: Record<string, unknown>): Promise<string> {
    const run = await this.runInfo(runId);
    try {
      const res = await this.plane(run).request({
        method: 'POST',
        path: `/${route}`,
        idempotencyKey: key,
        body: { ...body, run_id: run.id, model: run.base_model },
        headers: this.runHeaders(run.id),
        schema: AcceptedWire,
      });
      return res.operation_id;
    } catch (err) {
      throw await this.dataPlaneError(run.id, err);
    }
  }

  private async submit<T>(
    kind: OperationKind,
    runId: string,
    key: string,
    route: string,
    body: Record<string, unknown>,
  ): Promise<OperationHandle<T>> {
    const operationId = await this.submitTrainer(runId, route, operationKey(runId, key), body);
    return { kind, sessionId: runId, operationId, idempotencyKey: key };
  }

  /** Loops trainers take only their built-in losses over HTTP: a caller-defined loss has no route. */
  async submitCustomForwardBackward(): Promise<OperationHandle<Record<string, never>>> {
    throw new ProviderError(
      'UNSUPPORTED',
      'non-retryable',
      'Baseten Loops trainers have no custom forward-backward route; use a built-in loss',
    );
  }

  async submitForwardBackward(
    sessionId: string,
    key: string,
    data: Datum[],
    options: ForwardBackwardOptions = {},
  ): Promise<OperationHandle<ForwardResult>> {
    const loss = options.loss ?? { type: 'cross_entropy' };
    if (loss.type === 'grpo') {
      throw new ProviderError(
        'UNSUPPORTED',
        'non-retryable',
        "Baseten Loops has no GRPO loss; use 'ppo' or 'importance_sampling' with group-normalised advantages",
      );
    }
    return this.submit('forward-backward', sessionId, key, options.forwardOnly ? 'forward' : 'forward_backward', {
      data: data.map((d, i) => (loss.type === 'cross_entropy' ? toLoopsDatum(d, i) : toLoopsPolicyDatum(d, i))),
      loss_fn: loss.type,
      // Sums, not per-token means: the loss the neutral interface reports, and gradients that add up across calls.
      loss_fn_config: {
        skip_token_normalization: true,
        ...(loss.type === 'ppo' && loss.clipLow !== undefined ? { clip_low_threshold: loss.clipLow } : {}),
        ...(loss.type === 'ppo' && loss.clipHigh !== undefined ? { clip_high_threshold: loss.clipHigh } : {}),
      },
      top_k_logprobs: 0,
    });
  }

  submitOptimStep(sessionId: string, key: string, adam: AdamParams): Promise<OperationHandle<OptimStepResult>> {
    return this.submit('optim-step', sessionId, key, 'optim_step', {
      adam_params: {
        learning_rate: adam.learningRate,
        beta1: adam.beta1 ?? ADAM_DEFAULTS.beta1,
        beta2: adam.beta2 ?? ADAM_DEFAULTS.beta2,
        eps: adam.eps ?? ADAM_DEFAULTS.eps,
        weight_decay: adam.weightDecay ?? ADAM_DEFAULTS.weightDecay,
        grad_clip_norm: adam.gradClipNorm ?? ADAM_DEFAULTS.gradClipNorm,
      },
    });
  }

  /** `save_state`: weights, optimizer and step under `bt://loops:<run>/weights/<name>`; the name derives from the key. */
  submitTrainingCheckpoint(sessionId: string, key: string): Promise<OperationHandle<CheckpointResult>> {
    return this.submit('training-checkpoint', sessionId, key, 'save_state', { name: checkpointName(key), ttl_seconds: null });
  }

  /** `save_weights_for_sampler` with `bump_version`: saved under `…/sampler_weights/<name>` and served by the paired sampler. */
  submitSamplerWeights(sessionId: string, key: string): Promise<OperationHandle<CheckpointResult>> {
    return this.submit('sampler-weights', sessionId, key, 'save_weights_for_sampler', {
      name: checkpointName(key),
      ttl_seconds: null,
      bump_version: true,
    });
  }

  /** Loops publishes weights to the sampler by saving them for it (bumping the policy version); the artifact is kept an hour. */
  submitWeightsSync(sessionId: string, key: string): Promise<OperationHandle<WeightsSyncResult>> {
    return this.submit('weights-sync', sessionId, key, 'save_weights_for_sampler', {
      name: checkpointName(key),
      ttl_seconds: 3600,
      bump_version: true,
    });
  }

  /** Long-polls `GET /operations/{id}`: the trainer holds it until done, and a 408 just means "ask again". */
  private async settle(runId: string, operationId: string, options: AwaitOptions): Promise<unknown> {
    const run = await this.runInfo(runId);
    const op = await poll(
      async () => {
        try {
          const o = await this.plane(run).request({
            method: 'GET',
            path: `/operations/${encodeURIComponent(operationId)}`,
            headers: this.runHeaders(runId),
            schema: OperationWire,
            signal: options.signal,
          });
          return o.status === 'done' || o.status === 'error' ? o : undefined;
        } catch (err) {
          if (err instanceof ProviderError && err.status === 408) return undefined;
          throw await this.dataPlaneError(runId, err, operationId);
        }
      },
      `operation ${operationId} on run ${runId}`,
      {
        initialIntervalMs: this.pollIntervalMs,
        maxIntervalMs: this.maxPollIntervalMs,
        timeoutMs: options.timeoutMs ?? 3_600_000,
        signal: options.signal,
      },
    );
    if (op.status === 'error') {
      const code = operationErrorCode(op);
      const message = typeof op.error === 'string' ? op.error : JSON.stringify(op.error);
      throw new ProviderError(
        `OPERATION_FAILED_${code}`,
        classifyOperationError(code),
        `operation ${operationId} on run ${runId} failed: ${code} (${op.error_class ?? 'error'}): ${message}`,
        {
          providerCode: code,
          operationId,
        },
      );
    }
    return op.result;
  }

  /** A trainer or sampler that answers "not here" after its run ended means the session is gone: reconcile. */
  private async dataPlaneError(runId: string, err: unknown, operationId?: string): Promise<unknown> {
    if (!(err instanceof ProviderError) || ![404, 410, 503].includes(err.status ?? 0)) return err;
    const run = await this.fetchRun(runId).catch(() => undefined);
    if (!run || run.status.name !== 'ACTIVE') {
      return new ProviderError('SESSION_NOT_ACTIVE', 'needs-reconcile', `run ${runId} is ${run ? 'inactive' : 'gone'}: ${err.message}`, {
        providerCode: 'SESSION_NOT_ACTIVE',
        status: err.status,
        cause: err,
      });
    }
    if (err.status === 404 && operationId) {
      // The trainer has no record of it (never submitted, or evicted): resubmitting under the same key is safe.
      return new ProviderError(
        'OPERATION_UNKNOWN',
        'retryable',
        `run ${runId} has no operation ${operationId}; resubmit it with the same key`,
        { status: 404, operationId, cause: err },
      );
    }
    return err;
  }

  async awaitOperation<T>(handle: OperationHandle<T>, options: AwaitOptions = {}): Promise<T> {
    if (handle.kind === 'sample') {
      const results = this.samples.get(handle.operationId);
      if (!results) {
        throw new ProviderError(
          'SAMPLE_RESULT_UNAVAILABLE',
          'retryable',
          `samples of ${handle.idempotencyKey} were taken by another process; submit them again (sampling changes nothing)`,
        );
      }
      this.samples.delete(handle.operationId);
      return results as T;
    }
    const output = await this.settle(handle.sessionId, handle.operationId, options);
    return (await this.decode(handle, output)) as T;
  }

  private async decode(handle: OperationHandle<unknown>, output: unknown): Promise<unknown> {
    const parse = <S extends z.ZodTypeAny>(schema: S): z.infer<S> => {
      const parsed = schema.safeParse(output);
      if (!parsed.success)
        throw new ProviderError(
          'BAD_RESPONSE',
          'non-retryable',
          `${handle.kind} operation ${handle.operationId}: unexpected result: ${parsed.error.issues[0]?.message}`,
        );
      return parsed.data;
    };
    switch (handle.kind) {
      case 'forward-backward': {
        const o = parse(ForwardOutput);
        if (o.metrics?.skip_token_normalization !== 1) {
          throw new ProviderError(
            'UNSUPPORTED',
            'non-retryable',
            `run ${handle.sessionId}'s trainer ignored skip_token_normalization, so its loss is not a sum`,
          );
        }
        return { loss: o.loss, logprobs: o.loss_fn_outputs.map((out) => fromLoopsLogprobs(out.logprobs.data)) } satisfies ForwardResult;
      }
      case 'custom-forward-backward':
        throw new ProviderError('UNSUPPORTED', 'non-retryable', 'Baseten Loops trainers have no custom forward-backward route');
      case 'optim-step': {
        const step = parse(OptimStepOutput).metrics?.step;
        return { step: step ?? (await this.policyVersion(handle.sessionId)) } satisfies OptimStepResult;
      }
      case 'training-checkpoint': {
        const o = parse(SaveStateOutput);
        return { checkpointId: o.path, step: o.step ?? (await this.policyVersion(handle.sessionId)) } satisfies CheckpointResult;
      }
      case 'sampler-weights': {
        const o = parse(SamplerWeightsOutput);
        this.published.set(handle.sessionId, Math.max(o.version, this.published.get(handle.sessionId) ?? 0));
        return { checkpointId: o.path, step: o.version } satisfies CheckpointResult;
      }
      case 'weights-sync': {
        const o = parse(SamplerWeightsOutput);
        this.published.set(handle.sessionId, Math.max(o.version, this.published.get(handle.sessionId) ?? 0));
        return { weightsVersion: o.version } satisfies WeightsSyncResult;
      }
      case 'sample':
        return output;
    }
  }

  // ── sampling ─────────────────────────────────────────────────────────────────────────────────────

  /** The run's paired sampler: the one it has, or one created now (idempotent per run). */
  private async pairedSampler(runId: string): Promise<{ baseUrl: string; dedicated: boolean }> {
    const known = this.samplers.get(runId);
    if (known) return known;
    const run = await this.fetchRun(runId);
    const sampler =
      run.sampler ??
      (
        await this.control.request({
          method: 'POST',
          path: '/v1/loops/samplers',
          body: { session_id: run.session_id, run_id: run.id },
          replaySafe: true,
          schema: SamplerEnvelope,
        })
      ).sampler;
    // A sampler without a model id is serverless (queued); a dedicated one answers /sample directly.
    const info = { baseUrl: sampler.base_url, dedicated: Boolean(sampler.model_id) };
    this.samplers.set(runId, info);
    return info;
  }

  async submitSample(
    sessionId: string,
    key: string,
    prompts: number[][],
    params: SamplingParams,
    options: { numSamples?: number; promptLogprobs?: boolean } = {},
  ): Promise<OperationHandle<SampleResult[]>> {
    const sampler = await this.pairedSampler(sessionId);
    if (!sampler.dedicated)
      throw new ProviderError(
        'UNSUPPORTED',
        'non-retryable',
        `run ${sessionId}'s sampler is serverless, which this client does not drive yet`,
      );
    let client = this.planes.get(sampler.baseUrl);
    if (!client) {
      client = new HttpClient({
        ...this.options,
        baseUrl: sampler.baseUrl,
        authScheme: AUTH_SCHEME,
        userAgent: this.options.userAgent ?? 'roundhouse-baseten',
      });
      this.planes.set(sampler.baseUrl, client);
    }
    const floor = this.published.get(sessionId);
    const body: Record<string, unknown> = {
      n: options.numSamples ?? 1,
      temperature: params.temperature,
      top_p: params.topP ?? 1,
      max_tokens: params.maxTokens,
      logprobs: 0,
      return_tokens_as_token_ids: true,
      ...(params.topK !== undefined && params.topK > 0 ? { top_k: params.topK } : {}),
      ...(params.seed !== undefined ? { seed: params.seed } : {}),
      ...(params.stop?.length ? { stop: params.stop } : {}),
      ...(options.promptLogprobs ? { prompt_logprobs: 0 } : {}),
    };
    const results = await Promise.all(
      prompts.map(async (prompt, i) => {
        let policyVersion: number | undefined;
        try {
          const res = await client.request({
            method: 'POST',
            path: '/sample',
            idempotencyKey: operationKey(sessionId, prompts.length === 1 ? key : `${key}#${i}`),
            body: { prompt, ...body },
            headers: { ...this.runHeaders(sessionId), ...(floor ? { 'x-min-policy-version': String(floor) } : {}) },
            onResponseHeaders: (h) => {
              const v = Number(
                Array.isArray(h['x-trainers-policy-version']) ? h['x-trainers-policy-version'][0] : h['x-trainers-policy-version'],
              );
              if (Number.isFinite(v)) policyVersion = v;
            },
            schema: CompletionWire,
          });
          return toSampleResult(prompt, res, policyVersion);
        } catch (err) {
          throw await this.dataPlaneError(sessionId, err);
        }
      }),
    );
    const operationId = operationKey(sessionId, key);
    this.samples.set(operationId, results);
    if (this.samples.size > 256) this.samples.delete(this.samples.keys().next().value!); // unawaited handles don't pile up
    return { kind: 'sample', sessionId, operationId, idempotencyKey: key };
  }

  async close(): Promise<void> {
    await Promise.all([this.control.close(), ...[...this.planes.values()].map((c) => c.close())]);
    this.planes.clear();
  }
}

const RunDeactivated = RunEnvelope.shape.run.pick({ id: true }).passthrough();

function toResource(run: RunWire, deployment: string | undefined): TrainerResource {
  return {
    id: run.id,
    model: run.base_model,
    state: resourceState(run.status.name, deployment),
    providerStatus: deployment ? `${run.status.name}/${deployment}` : run.status.name,
    createdAt: run.created_at,
    createdBy: run.user?.email ?? undefined,
    ownerTag: run.name,
    ...(run.error?.code ? { error: run.error.message ?? undefined, errorCode: run.error.code } : {}),
  };
}

/** The run says ACTIVE or INACTIVE; its trainer deployment says where in its life it is. */
const SAMPLER_STOPPED = new Set(['INACTIVE', 'FAILED', 'DEPLOY_FAILED', 'BUILD_FAILED', 'BUILD_STOPPED']);

/** A sampler holds GPUs in every status but the ended ones (deactivating still bills until it is inactive). */
function samplerHoldsGpus(s: SamplerWire): boolean {
  return !SAMPLER_STOPPED.has(s.status?.name ?? 'ACTIVE');
}

function samplerResource(s: SamplerWire): TrainerResource {
  const status = s.status?.name ?? 'UNKNOWN';
  return {
    id: s.id,
    model: s.base_model ?? '',
    state: SAMPLER_STOPPED.has(status) ? 'stopped' : status === 'DEACTIVATING' ? 'stopping' : 'ready',
    providerStatus: `SAMPLER/${status}`,
    createdAt: s.created_at ?? '',
    createdBy: s.user?.email ?? undefined,
  };
}

function resourceState(run: string, deployment: string | undefined): ResourceState {
  if (deployment === 'FAILED' || deployment === 'PREEMPTED') return 'failed';
  if (run !== 'ACTIVE') return 'stopped';
  if (deployment === 'CREATED' || deployment === 'DEPLOYING') return 'provisioning';
  if (deployment === 'STOPPED') return 'stopping';
  return 'ready'; // RUNNING, SCALED_TO_ZERO (wakes on use), or serverless (no deployment)
}

function sessionState(resource: TrainerResource): SessionState {
  switch (resource.state) {
    case 'provisioning':
      return 'starting';
    case 'ready':
      return 'running';
    case 'failed':
      return 'failed';
    case 'stopping':
      return 'stopping';
    case 'stopped':
      return resource.providerStatus.endsWith('SCALED_TO_ZERO') ? 'expired' : 'stopped';
  }
}

function toSampleResult(prompt: number[], res: CompletionWire, policyVersion: number | undefined): SampleResult {
  const withPromptLogprobs = res.choices.find((c) => c.prompt_logprobs);
  return {
    // Completion tokens only (the body asks for no echo of the prompt).
    sequences: res.choices.map((c) => ({
      tokens: c.token_ids ?? (c.logprobs?.tokens ?? []).map((t) => Number(String(t).replace(/^token_id:/, ''))),
      logprobs: c.logprobs?.token_logprobs?.map((v) => v ?? 0),
      stopReason: c.finish_reason === 'stop' ? 'stop' : 'length',
    })),
    promptLogprobs: withPromptLogprobs?.prompt_logprobs?.map((entry, i) =>
      entry ? (entry[String(prompt[i])]?.logprob ?? Object.values(entry)[0]?.logprob ?? 0) : 0,
    ),
    policyVersion,
  };
}

function oneOffKey(): string {
  return randomUUID().replace(/-/g, '');
}
