import { z } from 'zod';
import { ProviderError } from '../errors';
import { operationKey } from '../keys';
import type { AwaitOptions, OperationHandle, SampleResult, SamplingParams, WeightsSyncResult } from '../types';
import type { TinkerApi } from './auth';
import { listed, save } from './checkpoints';
import { Future, LISTED, checkpointTtl, fingerprintOf, nextStep, retrieve, sequenced, type ModelState } from './futures';
import type { TinkerModels } from './models';
import type { TinkerSessions } from './sessions';
import { decodeSampleResponse } from './wire';

/**
 * Sampling: a model's samples go to its sampling session, on the weights of the last sync or sampler save (the first
 * sample syncs the current weights).
 */
export class TinkerSampling {
  private readonly samples = new Map<string, OperationHandle<SampleResult[]>>();
  /** Per sample request: its prompt's length (SkyRL's prompt logprobs are one short). */
  private readonly promptLengths = new Map<string, number>();

  constructor(
    private readonly api: TinkerApi,
    private readonly resources: TinkerSessions,
    private readonly training: TinkerModels,
    /** The provider's: a failure that says the model is gone marks it lost. */
    private readonly awaitOperation: <T>(handle: OperationHandle<T>) => Promise<T>,
  ) {}

  /** Unnamed `save_weights_for_sampler`: a sampling session of the current weights (nothing kept beyond it). */
  async submitWeightsSync(sessionId: string, key: string): Promise<OperationHandle<WeightsSyncResult>> {
    const m = this.training.driven(sessionId);
    const s = await this.resources.session(m.tinkerSession);
    const version = nextStep(m);
    return sequenced<WeightsSyncResult>(
      this.training,
      'weights-sync',
      sessionId,
      key,
      fingerprintOf('save_weights_for_sampler', { named: false }),
      (seq) => {
        const samplerSeq = s.nextSamplerSeq++;
        // SkyRL keeps an unnamed save as `ss<sampler seq>_seq<seq>`: where the save was made, the sampling session is opened on that.
        return save(`tinker://${m.id}/sampler_weights/ss${samplerSeq}_seq${seq}`, () =>
          this.api.post(
            '/save_weights_for_sampler',
            {
              model_id: m.id,
              seq_id: seq,
              sampling_session_seq_id: samplerSeq,
              kind: 'snapshot',
              type: 'save_weights_for_sampler',
              ...checkpointTtl(m),
            },
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
    const m = this.training.driven(sessionId);
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
      const res = await this.api.post(
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

  /** A weights sync's result: the sampling session its future made, or one opened on the save found already made. */
  async settleWeightsSync<T>(handle: OperationHandle<T>, options: AwaitOptions): Promise<T> {
    const [requestPart, tag] = handle.operationId.split('#') as [string, string | undefined];
    const m = this.training.models.get(handle.sessionId);
    let id: string;
    if (requestPart.startsWith(LISTED)) {
      const path = requestPart.slice(LISTED.length);
      await listed(this.api, path, options);
      id = await this.samplingSession(m ?? this.training.driven(handle.sessionId), path);
    } else {
      const { json } = await retrieve(this.api, requestPart, 'SaveWeightsForSampler', options);
      id = z.object({ sampling_session_id: z.string() }).passthrough().parse(json).sampling_session_id;
    }
    const version = Number(tag);
    if (m && (!m.sampler || m.sampler.id !== id) && (!m.sampler || m.sampler.version <= version)) m.sampler = { id, version, nextSeq: 0 };
    return { weightsVersion: version } satisfies WeightsSyncResult as T;
  }

  /** A sample request's results, each prompt's from its own future. */
  async settleSample<T>(handle: OperationHandle<T>, options: AwaitOptions): Promise<T> {
    const [requestPart, tag] = handle.operationId.split('#') as [string, string | undefined];
    const version = Number(tag);
    const results: SampleResult[] = [];
    for (const requestId of requestPart.split(',')) {
      const { bytes } = await retrieve(this.api, requestId, 'Sample', options);
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

  /** A sampling session (in the model's Tinker session, under its next sampler seq) on sampler weights. */
  async samplingSession(m: ModelState, path: string): Promise<string> {
    const s = await this.resources.session(m.tinkerSession);
    const created = await this.api.post(
      '/create_sampling_session',
      { session_id: s.id, sampling_session_seq_id: s.nextSamplerSeq++, model_path: path, type: 'create_sampling_session' },
      z.object({ sampling_session_id: z.string() }).passthrough(),
      { replaySafe: true },
    );
    return created.sampling_session_id;
  }
}

/**
 * Prompt logprobs one per prompt token, the first null (none precedes it). SkyRL's JAX backend answers one fewer,
 * without that leading NaN: a null is put first, so position i is token i's on every server.
 */
function alignedPromptLogprobs(values: (number | null)[], promptLength: number | undefined): (number | null)[] {
  const short = promptLength !== undefined ? values.length === promptLength - 1 : values.length > 0 && values[0] !== null;
  return short ? [null, ...values] : values;
}
