import { accountFingerprint } from '../account';
import { checkpointName, operationKey } from '../keys';
import { ProviderError } from '../errors';
import { HttpClient, type HttpClientOptions } from '../http';
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
import { TinkerApi } from './auth';
import { canonicalPath, checkpointStep, deleteCheckpoint, save, savedPath } from './checkpoints';
import { Future, checkpointTtl, fingerprintOf, nextStep, retrieve, sequenced, type ModelState } from './futures';
import { TinkerModels } from './models';
import { TinkerSampling } from './sampling';
import { TinkerSessions } from './sessions';
import { decodeForwardBackwardOutput, encodeForwardBackward, type TinkerDatum } from './wire';

export { TINKER_WIRE_VERSION } from './auth';

export const TINKER_DEFAULT_BASE_URL = 'https://tinker.thinkingmachines.dev/services/tinker-prod';
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
  private readonly api: TinkerApi;
  /** Tinker sessions (trainer resources), and what the server was found to offer. */
  private readonly resources: TinkerSessions;
  /** Tinker models (training sessions), and those this process drives. */
  private readonly training: TinkerModels;
  private readonly sampling: TinkerSampling;
  /**
   * Per forward request: each position's weight (positions of weight 0 are reported as logprob 0; Tinker returns every
   * position's), and whether its loss is cross-entropy (−Σ w·logprob, what a result without `loss:sum` adds up to).
   */
  private readonly lossInputs = new Map<string, { weights: number[][]; crossEntropy: boolean }>();

  constructor(options: TinkerProviderOptions) {
    const baseUrl = (options.baseUrl ?? TINKER_DEFAULT_BASE_URL).replace(/\/+$/, '');
    if (isHostedTinker(baseUrl) && !(options.apiKey.startsWith('tml-') || options.apiKey.startsWith('eyJ')))
      throw new ProviderError('INVALID_INPUT', 'non-retryable', "a Tinker API key starts with 'tml-' (TINKER_API_KEY)");
    const http = new HttpClient({ ...options, baseUrl, authHeader: 'x-api-key', userAgent: options.userAgent ?? 'roundhouse-tinker' });
    this.account = accountFingerprint(baseUrl, options.apiKey);
    this.api = new TinkerApi(http, options.onSecret);
    const models = new Map<string, ModelState>();
    this.resources = new TinkerSessions(this.api, models, options.heartbeatMs ?? HEARTBEAT_MS);
    this.training = new TinkerModels(this.api, this.resources, models);
    this.sampling = new TinkerSampling(this.api, this.resources, this.training, (handle) => this.awaitOperation(handle));
  }

  // ── sessions (trainer resources): sessions.ts ─────────────────────────────────────────────────────

  supportedModels(): Promise<ModelInfo[]> {
    return this.resources.supportedModels();
  }

  provision(request: ProvisionRequest): Promise<TrainerResource> {
    return this.resources.provision(request);
  }

  getResource(resourceId: string): Promise<TrainerResource> {
    return this.resources.getResource(resourceId);
  }

  waitReady(resourceId: string, options: WaitReadyOptions = {}): Promise<TrainerResource> {
    return this.resources.waitReady(resourceId, options);
  }

  listOwnedResources(options: { activeOnly?: boolean } = {}): Promise<TrainerResource[]> {
    return this.resources.listOwnedResources(options);
  }

  deactivate(resourceId: string): Promise<TrainerResource> {
    return this.resources.deactivate(resourceId);
  }

  // ── models (training sessions): models.ts ─────────────────────────────────────────────────────────

  openSession(request: OpenSessionRequest): Promise<TrainingSessionInfo> {
    return this.training.openSession(request);
  }

  getSession(sessionId: string): Promise<TrainingSessionInfo> {
    return this.training.getSession(sessionId);
  }

  listSessions(resourceId: string): Promise<TrainingSessionInfo[]> {
    return this.training.listSessions(resourceId);
  }

  closeSession(sessionId: string): Promise<void> {
    return this.resources.closeSession(sessionId);
  }

  // ── operations (sequencing and futures: futures.ts) ───────────────────────────────────────────────

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
    return sequenced<ForwardResult>(
      this.training,
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
    const answer = await this.api.callRaw({
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
    const handle = await sequenced<ForwardResult>(
      this.training,
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
    return sequenced<OptimStepResult>(
      this.training,
      'optim-step',
      sessionId,
      key,
      fingerprintOf('optim_step', adamParams),
      (seq, m) =>
        this.api.post('/optim_step', { model_id: m.id, seq_id: seq, adam_params: adamParams, type: 'optim_step' }, Future, {
          key: operationKey(m.id, key),
        }),
      (requestId, m) => {
        m.submittedSteps += 1;
        m.pendingOptims.set(requestId, m.baseStep + m.submittedSteps);
        return `${requestId}#${m.baseStep + m.submittedSteps}`;
      },
    );
  }

  /** `save_weights` (weights + optimizer), named after the key and the step it holds: `tinker://<model>/weights/<name>`. */
  submitTrainingCheckpoint(sessionId: string, key: string): Promise<OperationHandle<CheckpointResult>> {
    const m = this.training.driven(sessionId);
    const name = `${checkpointName(key)}-st${nextStep(m)}`;
    return sequenced<CheckpointResult>(
      this.training,
      'training-checkpoint',
      sessionId,
      key,
      fingerprintOf('save_weights', {}),
      (seq) =>
        save(`tinker://${m.id}/weights/${name}`, () =>
          this.api.post('/save_weights', { model_id: m.id, path: name, seq_id: seq, type: 'save_weights', ...checkpointTtl(m) }, Future, {
            key: operationKey(m.id, key),
          }),
        ),
      (requestId) => requestId,
    );
  }

  /** `save_weights_for_sampler` under a name (a kept artifact), then a sampling session on it: what samples see next. */
  submitSamplerWeights(sessionId: string, key: string): Promise<OperationHandle<CheckpointResult>> {
    const m = this.training.driven(sessionId);
    const name = `${checkpointName(key)}-st${nextStep(m)}`;
    return sequenced<CheckpointResult>(
      this.training,
      'sampler-weights',
      sessionId,
      key,
      fingerprintOf('save_weights_for_sampler', { named: true }),
      (seq) =>
        save(`tinker://${m.id}/sampler_weights/${name}`, () =>
          this.api.post(
            '/save_weights_for_sampler',
            { model_id: m.id, path: name, seq_id: seq, kind: 'snapshot', type: 'save_weights_for_sampler', ...checkpointTtl(m) },
            Future,
            { key: operationKey(m.id, key) },
          ),
        ),
      (requestId) => requestId,
    );
  }

  async awaitOperation<T>(handle: OperationHandle<T>, options: AwaitOptions = {}): Promise<T> {
    try {
      return await this.settle(handle, options);
    } catch (err) {
      // The model is gone (the service lost it): nothing more is sent to it.
      const m = this.training.models.get(handle.sessionId);
      if (m && err instanceof ProviderError && err.providerCode === 'SESSION_NOT_ACTIVE') this.resources.lost(m);
      throw err;
    }
  }

  private async settle<T>(handle: OperationHandle<T>, options: AwaitOptions): Promise<T> {
    const [requestPart, tag] = handle.operationId.split('#') as [string, string | undefined];
    const m = this.training.models.get(handle.sessionId);
    switch (handle.kind) {
      case 'forward-backward': {
        const { bytes } = await retrieve(this.api, requestPart, 'ForwardBackward', options);
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
        await retrieve(this.api, requestPart, 'ForwardBackward', options);
        return {} as T;
      case 'optim-step': {
        let json: unknown;
        try {
          json = (await retrieve(this.api, requestPart, 'OptimStep', options)).json;
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
        const path = await savedPath(this.api, requestPart, 'SaveWeights', options);
        return { checkpointId: path, step: checkpointStep(path) } satisfies CheckpointResult as T;
      }
      case 'sampler-weights': {
        // SkyRL answers a named sampler save `tinker://<model>/<name>`: kept in the form its listing (and delete) uses.
        const path = canonicalPath(await savedPath(this.api, requestPart, 'SaveWeightsForSampler', options));
        const step = checkpointStep(path);
        if (m) {
          // Samples see these weights next: a sampling session on them.
          const id = await this.sampling.samplingSession(m, path);
          if (!m.sampler || m.sampler.version <= step) m.sampler = { id, version: step, nextSeq: 0 };
        }
        return { checkpointId: path, step } satisfies CheckpointResult as T;
      }
      case 'weights-sync':
        return this.sampling.settleWeightsSync(handle, options);
      case 'sample':
        return this.sampling.settleSample(handle, options);
    }
  }

  // ── sampling: sampling.ts ─────────────────────────────────────────────────────────────────────────

  submitWeightsSync(sessionId: string, key: string): Promise<OperationHandle<WeightsSyncResult>> {
    return this.sampling.submitWeightsSync(sessionId, key);
  }

  submitSample(
    sessionId: string,
    key: string,
    prompts: number[][],
    params: SamplingParams,
    options: { numSamples?: number; promptLogprobs?: boolean } = {},
  ): Promise<OperationHandle<SampleResult[]>> {
    return this.sampling.submitSample(sessionId, key, prompts, params, options);
  }

  // ── checkpoints: checkpoints.ts ───────────────────────────────────────────────────────────────────

  deleteCheckpoint(checkpointId: string): Promise<void> {
    return deleteCheckpoint(this.api, checkpointId);
  }

  async close(): Promise<void> {
    this.resources.stopHeartbeats();
    await this.api.close();
  }
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
