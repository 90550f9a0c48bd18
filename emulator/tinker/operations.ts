import { z } from 'zod';
import type { CheckpointRef, Engine, OperationInput, ResourceRecord } from '../engine';
import { EmulatorHttpError, badRequest } from '../errors';
import { parseForward } from '../baseten/requests';
import type { ForwardBackwardRequest } from './proto';

/** What both Tinker flavours (the hosted wire in routes.ts, SkyRL's in skyrl.ts) read and place the same way. */

export const SampleBody = z
  .object({
    sampling_session_id: z.string().min(1, 'sampling_session_id is required'),
    seq_id: z.number().int().min(0),
    num_samples: z.number().int().min(1).max(64).default(1),
    prompt: z.object({
      chunks: z.array(z.object({ type: z.string().optional(), tokens: z.array(z.number().int()).optional() }).passthrough()),
    }),
    sampling_params: z
      .object({
        max_tokens: z.number().int().min(1).nullish(),
        seed: z.number().int().nullish(),
        stop: z.union([z.string(), z.array(z.string()), z.array(z.number().int())]).nullish(),
        temperature: z.number().min(0).default(1),
        top_k: z.number().int().default(-1),
        top_p: z.number().gt(0).max(1).default(1),
      })
      .passthrough(),
    prompt_logprobs: z.boolean().default(false),
    topk_prompt_logprobs: z.number().int().default(0),
  })
  .passthrough();

/** `tinker://<model id>/weights/<name>` (training state) or `…/sampler_weights/<name>`. */
export function parseTinkerPath(uri: string): { modelId: string; kind: 'weights' | 'sampler_weights'; name: string } | undefined {
  const m = /^tinker:\/\/([^/]+)\/(weights|sampler_weights)\/([^/]+)$/.exec(uri);
  return m ? { modelId: m[1]!, kind: m[2] as 'weights' | 'sampler_weights', name: m[3]! } : undefined;
}

/**
 * A Tinker model on the engine: a resource of dialect `tinker` (ready at once: the service is serverless, unless a
 * capacity fault holds it) with one engine session of the same id, from a checkpoint when given. A model that cannot
 * be placed throws a 503.
 */
export async function placeModel(
  engine: Engine,
  m: {
    id: string;
    owner: string;
    sessionId: string;
    baseModel: string;
    lora: { rank: number; seed?: number };
    from?: { checkpointId: string; optimizer: boolean };
    userMetadata?: Record<string, unknown>;
  },
): Promise<void> {
  const r = engine.createResource({
    id: m.id,
    dialect: 'tinker',
    owner: m.owner,
    baseModel: m.baseModel,
    numGeneratorReplicas: 0,
    extra: { kind: 'model', sessionId: m.sessionId, userMetadata: m.userMetadata ?? {} },
  });
  while (r.status === 'PENDING' || r.status === 'CREATING') {
    await new Promise((resolve) => setTimeout(resolve, 20));
    engine.refreshAround(m.id);
  }
  if (r.status !== 'READY')
    throw new EmulatorHttpError(503, 'UNAVAILABLE', `model ${m.id} could not be placed (${r.status.toLowerCase()})`);
  await engine.createSession({
    id: m.id,
    resourceId: m.id,
    owner: m.owner,
    lora: { rank: Math.min(m.lora.rank, r.model.maxLoraRank), ...(m.lora.seed !== undefined ? { seed: m.lora.seed } : {}) },
    ...(m.from ? { resumeFromCheckpointId: m.from.checkpointId, loadOptimizer: m.from.optimizer } : {}),
  });
}

/** An `asample` body as the engine's sample operation, from the sampler weights `checkpoint`. */
export function sampleInput(b: z.infer<typeof SampleBody>, checkpoint: CheckpointRef): OperationInput {
  const prompt = b.prompt.chunks.flatMap((c, i) => {
    if (!c.tokens) throw badRequest(`prompt.chunks[${i}]: only encoded_text chunks are supported by this model`);
    return c.tokens;
  });
  if (prompt.length === 0) throw badRequest('prompt has no tokens');
  const stop = b.sampling_params.stop;
  if (typeof stop === 'string' || (Array.isArray(stop) && stop.some((v) => typeof v === 'string')))
    throw badRequest('stop strings are not served by this emulator: pass stop token ids');
  const sp = b.sampling_params;
  return {
    kind: 'sample',
    prompts: [prompt],
    numSamples: b.num_samples,
    params: {
      maxTokens: sp.max_tokens ?? 256,
      temperature: sp.temperature,
      topK: sp.top_k > 0 ? sp.top_k : undefined,
      topP: sp.top_p,
      ...(typeof sp.seed === 'number' ? { seed: sp.seed } : {}),
      ...(Array.isArray(stop) && stop.length ? { stopTokenSequences: (stop as number[]).map((t) => [t]) } : {}),
    },
    promptLogprobs: b.prompt_logprobs,
    fromCheckpoint: checkpoint,
  };
}

/** A long poll: until the future settles, `holdMs` passes, or the server closes. */
export async function holdFor(future: Promise<unknown>, holdMs: number, closing: AbortSignal): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  let onClose: (() => void) | undefined;
  await Promise.race([
    future,
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, holdMs);
      onClose = resolve;
      closing.addEventListener('abort', onClose, { once: true });
    }),
  ]);
  clearTimeout(timer);
  closing.removeEventListener('abort', onClose!); // a listener per held poll would pile up on the one signal
}

/**
 * Tinker's datum → the engine's: `model_input` is the sequence without its last token and `target_tokens` the next
 * token of each position (the caller shifts); `weights` say which count. Losses are plain sums (`loss:sum`), so the
 * Baseten parser's `skip_token_normalization` reading is the one that applies.
 */
export function forwardInput(fb: ForwardBackwardRequest, r: ResourceRecord): OperationInput {
  const body = {
    data: fb.data.map((d) => ({
      model_input: { chunks: [{ type: 'encoded_text', tokens: d.tokens }] },
      loss_fn_inputs: Object.fromEntries(
        Object.entries(d.lossFnInputs).map(([k, t]) => [k, { data: t.data, dtype: t.dtype, shape: t.shape }]),
      ),
    })),
    loss_fn: fb.lossFn,
    loss_fn_config: { ...fb.lossFnConfig, skip_token_normalization: true },
  };
  return parseForward(body, r.model.vocabSize, fb.forwardOnly).input;
}
