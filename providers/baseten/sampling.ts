import { operationKey } from '../keys';
import type { SampleResult, SamplingParams } from '../types';
import { runHeaders, type LoopsDataPlanes } from './planes';
import { CompletionWire } from './wire';

/** Requests sent to one sampler at once: an eval set's thousand prompts wait here, not in the sampler's queue. */
export const SAMPLER_CONCURRENCY = 32;

/**
 * Samples every prompt on a run's dedicated sampler (at `baseUrl`), which answers synchronously: one request per
 * prompt (at most `SAMPLER_CONCURRENCY` at once), each under a key of its own, asking for at least the policy version
 * last published to it (`floor`).
 */
export async function sampleOnSampler(
  planes: LoopsDataPlanes,
  baseUrl: string,
  request: {
    sessionId: string;
    key: string;
    prompts: number[][];
    params: SamplingParams;
    options: { numSamples?: number; promptLogprobs?: boolean };
    floor: number | undefined;
  },
): Promise<SampleResult[]> {
  const { sessionId, key, prompts, params, options, floor } = request;
  const sampler = planes.at(baseUrl);
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
  return mapBounded(prompts, SAMPLER_CONCURRENCY, async (prompt, i) => {
    let policyVersion: number | undefined;
    try {
      const res = await sampler.request({
        method: 'POST',
        path: '/sample',
        idempotencyKey: operationKey(sessionId, prompts.length === 1 ? key : `${key}#${i}`),
        body: { prompt, ...body },
        headers: { ...runHeaders(sessionId), ...(floor ? { 'x-min-policy-version': String(floor) } : {}) },
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
      throw await planes.dataPlaneError(sessionId, err);
    }
  });
}

/** `fn` over `items`, at most `limit` running at once, results in order; after a failure nothing more is started. */
async function mapBounded<T, R>(items: T[], limit: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  let failed = false;
  const lane = async () => {
    while (!failed && next < items.length) {
      const i = next++;
      try {
        results[i] = await fn(items[i]!, i);
      } catch (err) {
        failed = true;
        throw err;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  return results;
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
