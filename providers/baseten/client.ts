import { randomUUID } from 'node:crypto';
import type { z } from 'zod';
import { accountFingerprint } from '../account';
import { checkpointName, operationKey } from '../keys';
import { ProviderError, notReady } from '../errors';
import { HttpClient, poll } from '../http';
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
import { LoopsControlPlane, sessionState } from './control';
import { AUTH_SCHEME, LoopsDataPlanes, type LoopsPlaneOptions } from './planes';
import { sampleOnSampler } from './sampling';
import {
  ADAM_DEFAULTS,
  ForwardOutput,
  OptimStepOutput,
  SamplerWeightsOutput,
  SaveStateOutput,
  StepOutput,
  fromLoopsLogprobs,
  toLoopsDatum,
  toLoopsPolicyDatum,
} from './wire';

export const BASETEN_DEFAULT_BASE_URL = 'https://api.baseten.co';

export interface BasetenProviderOptions extends LoopsPlaneOptions {
  /** The control plane: `https://api.baseten.co`, or the emulator's URL. Trainer and sampler URLs come from it. */
  baseUrl?: string;
  apiKey: string;
}

/**
 * Baseten Loops behind the provider-neutral interface (wire notes: WIRE.md beside this file): the control plane's
 * runs in control.ts, the trainer's and sampler's data planes in planes.ts and sampling.ts, the wire shapes in wire.ts.
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
  private readonly http: HttpClient;
  private readonly control: LoopsControlPlane;
  private readonly planes: LoopsDataPlanes;
  /** The last policy version published per run: samples ask the sampler for at least this (`X-Min-Policy-Version`). */
  private readonly published = new Map<string, number>();
  private readonly samples = new Map<string, SampleResult[]>();

  constructor(options: BasetenProviderOptions) {
    const baseUrl = (options.baseUrl ?? BASETEN_DEFAULT_BASE_URL).replace(/\/+$/, '');
    this.http = new HttpClient({ ...options, baseUrl, authScheme: AUTH_SCHEME, userAgent: options.userAgent ?? 'roundhouse-baseten' });
    this.account = accountFingerprint(baseUrl, options.apiKey);
    this.control = new LoopsControlPlane(this.http);
    this.planes = new LoopsDataPlanes(options, this.control);
  }

  supportedModels(): Promise<ModelInfo[]> {
    return this.control.supportedModels();
  }

  // ── runs ─────────────────────────────────────────────────────────────────────────────────────────

  /** A run in a Loops session of its own, named after the owner tag (control.ts). */
  provision(request: ProvisionRequest): Promise<TrainerResource> {
    return this.control.provision(request);
  }

  getResource(resourceId: string): Promise<TrainerResource> {
    return this.control.resource(resourceId);
  }

  async waitReady(resourceId: string, options: WaitReadyOptions = {}): Promise<TrainerResource> {
    return poll(
      async () => {
        const r = await this.getResource(resourceId);
        if (r.state === 'ready' && (await this.planes.healthy(resourceId))) return r;
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

  listOwnedResources(options: { activeOnly?: boolean } = {}): Promise<TrainerResource[]> {
    return this.control.listOwnedResources(options);
  }

  /** Samplers billed on their own (control.ts). */
  listStrayResources(): Promise<TrainerResource[]> {
    return this.control.listStrayResources();
  }

  /** Deactivates the run and every other active run of its Loops session (a duplicate from an unclear create). */
  deactivate(resourceId: string): Promise<TrainerResource> {
    return this.control.deactivate(resourceId);
  }

  /** Deactivates every active run of a Loops session, and its samplers billed on their own; returns the runs' ids. */
  releaseSession(sessionId: string): Promise<string[]> {
    return this.control.releaseSession(sessionId);
  }

  // ── sessions (a run's trainer) ───────────────────────────────────────────────────────────────────

  /**
   * `init_trainer_server` (a fresh adapter of this rank), then the checkpoint when resuming. The seed, max_seq_len and
   * the same rank were given to the run's create (control.ts): the run is the trainer, so it is seeded there.
   */
  async openSession(request: OpenSessionRequest): Promise<TrainingSessionInfo> {
    const run = await this.control.runInfo(request.resourceId);
    const init = await this.planes.submit(run.id, 'init_trainer_server', oneOffKey(), {
      lora_rank: request.loraRank,
      base_model: run.base_model,
    });
    let step = StepOutput.parse(await this.planes.settle(run.id, init, {})).step;
    if (request.fromCheckpoint) {
      const route = request.fromCheckpoint.loadOptimizer ? 'load_state_with_optimizer' : 'load_state';
      const load = await this.planes.submit(run.id, route, oneOffKey(), { path: request.fromCheckpoint.id });
      step = StepOutput.parse(await this.planes.settle(run.id, load, {})).step;
    }
    return {
      id: run.id,
      resourceId: run.id,
      state: 'running',
      step,
      trainingCheckpointIds: await this.control.trainingCheckpoints(run.id),
      displayName: run.name,
    };
  }

  async getSession(sessionId: string): Promise<TrainingSessionInfo> {
    const run = await this.control.fetchRun(sessionId);
    const resource = await this.control.describe(run);
    const state = sessionState(resource);
    const step = state === 'running' ? await this.planes.policyVersion(run.id) : 0;
    return {
      id: run.id,
      resourceId: run.id,
      state,
      step,
      trainingCheckpointIds: await this.control.trainingCheckpoints(run.id),
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

  // ── trainer operations ───────────────────────────────────────────────────────────────────────────

  private async submit<T>(
    kind: OperationKind,
    runId: string,
    key: string,
    route: string,
    body: Record<string, unknown>,
  ): Promise<OperationHandle<T>> {
    const operationId = await this.planes.submit(runId, route, operationKey(runId, key), body);
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
    const output = await this.planes.settle(handle.sessionId, handle.operationId, options);
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
        return { step: step ?? (await this.planes.policyVersion(handle.sessionId)) } satisfies OptimStepResult;
      }
      case 'training-checkpoint': {
        const o = parse(SaveStateOutput);
        return { checkpointId: o.path, step: o.step ?? (await this.planes.policyVersion(handle.sessionId)) } satisfies CheckpointResult;
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

  /** On the run's paired sampler (made now if it has none); the results are held here until `awaitOperation`. */
  async submitSample(
    sessionId: string,
    key: string,
    prompts: number[][],
    params: SamplingParams,
    options: { numSamples?: number; promptLogprobs?: boolean } = {},
  ): Promise<OperationHandle<SampleResult[]>> {
    const sampler = await this.control.pairedSampler(sessionId);
    if (!sampler.dedicated)
      throw new ProviderError(
        'UNSUPPORTED',
        'non-retryable',
        `run ${sessionId}'s sampler is serverless, which this client does not drive yet`,
      );
    const results = await sampleOnSampler(this.planes, sampler.baseUrl, {
      sessionId,
      key,
      prompts,
      params,
      options,
      floor: this.published.get(sessionId),
    });
    const operationId = operationKey(sessionId, key);
    this.samples.set(operationId, results);
    if (this.samples.size > 256) this.samples.delete(this.samples.keys().next().value!); // unawaited handles don't pile up
    return { kind: 'sample', sessionId, operationId, idempotencyKey: key };
  }

  async close(): Promise<void> {
    await Promise.all([this.http.close(), this.planes.close()]);
  }
}

function oneOffKey(): string {
  return randomUUID().replace(/-/g, '');
}
