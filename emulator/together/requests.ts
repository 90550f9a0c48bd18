import { z } from 'zod';
import { badRequest } from '../errors';
import type { OperationInput } from '../engine';
import type { AdamSettings, SampleParams, TokenSequence } from '../learner';

/**
 * Request bodies of Together's `/v1/rl/*` routes, as the official SDK sends them (see providers/together/WIRE.md).
 * int64 fields arrive as numbers or strings; both are accepted.
 */

const int64 = z.union([z.number(), z.string().regex(/^-?\d+$/, 'expected an integer')]).transform((v, ctx) => {
  const n = typeof v === 'string' ? Number(v) : v;
  if (!Number.isSafeInteger(n)) {
    ctx.addIssue({ code: 'custom', message: `expected an integer, got ${JSON.stringify(v)}` });
    return z.NEVER;
  }
  return n;
});

const ModelInput = z.object({
  chunks: z
    .array(z.object({ encoded_text: z.object({ tokens: z.array(int64) }) }))
    .min(1, 'model_input needs at least one chunk'),
});

const TensorData = z.object({
  data: z.array(z.number()),
  dtype: z.enum(['int64', 'float32']),
  shape: z.array(z.number().int()).optional(),
  sparse_crow_indices: z.unknown().optional(),
  sparse_col_indices: z.unknown().optional(),
});

const SampleSchema = z.object({
  model_input: ModelInput,
  loss_fn_inputs: z.record(z.string(), TensorData),
  routed_experts_key: z.string().optional(),
});

export const LOSS_TYPES = [
  'LOSS_TYPE_CROSS_ENTROPY',
  'LOSS_TYPE_GRPO',
  'LOSS_TYPE_IMPORTANCE_SAMPLING',
  'LOSS_TYPE_PPO',
  'LOSS_TYPE_CISPO',
  'LOSS_TYPE_DPPO',
  'LOSS_TYPE_DRO',
] as const;

const LossConfig = z.object({ type: z.enum(LOSS_TYPES) }).passthrough();

export const ForwardBackwardBody = z.object({
  loss: LossConfig,
  samples: z.array(SampleSchema).min(1, 'samples must not be empty'),
  forward_only: z.boolean().optional(),
  return_loss_fn_outputs: z.boolean().optional(),
  payload_id: z.string().optional(),
});

export const CustomForwardBackwardBody = z.object({
  samples: z.array(SampleSchema).min(1, 'samples must not be empty'),
  gradients: z.array(z.object({ data: z.array(z.number()), dtype: z.string().optional() })),
});

const AdamParamsSchema = z.object({
  learning_rate: z.number().min(0).optional(),
  beta1: z.number().min(0).lt(1).optional(),
  beta2: z.number().min(0).lt(1).optional(),
  eps: z.number().positive().optional(),
  weight_decay: z.number().min(0).optional(),
  grad_clip_norm: z.number().min(0).optional(),
});

export const OptimStepBody = z
  .object({ adam_params: AdamParamsSchema.optional(), muon_params: z.unknown().optional() })
  .default({});

export const WeightsSyncBody = z.object({
  weight_sync_type: z.enum(['WEIGHT_SYNC_TYPE_SYNCHRONOUS', 'WEIGHT_SYNC_TYPE_BACKGROUND_PUBLISH', 'WEIGHT_SYNC_TYPE_PIPELINE']),
});

export const SampleBody = z.object({
  model_inputs: z.array(ModelInput).min(1, 'model_inputs must not be empty'),
  num_samples: z.number().int().min(1).max(128).optional(),
  sampling_params: z
    .object({
      max_tokens: z.number().int().min(1).max(32_768).optional(),
      seed: int64.optional(),
      stop: z.array(z.string()).optional(),
      temperature: z.number().min(0).max(10).optional(),
      top_k: z.number().int().min(-1).optional(),
      top_p: z.number().gt(0).max(1).optional(),
    })
    .optional(),
  prompt_logprobs: z.boolean().optional(),
  topk_prompt_logprobs: z.number().int().min(0).max(20).optional(),
  return_routed_experts: z.boolean().optional(),
});

export const ResourceCreateBody = z.object({
  base_model: z.string().min(1, 'base_model is required'),
  base_weights_ref: z.string().optional(),
  compute_config: z
    .object({ gpu_type: z.enum(['B200-SXM', 'H100-80GB']).optional(), num_generator_replicas: z.number().int().min(0).max(64).optional() })
    .optional(),
  inactive_timeout: z.number().int().min(300).max(86_400).optional(),
  lora_enabled: z.boolean().optional(),
  optimizer_config: z.record(z.string(), z.unknown()).optional(),
});

export const SessionCreateBody = z.object({
  model_resources_id: z.string().min(1, 'model_resources_id is required'),
  display_name: z.string().optional(),
  load_optimizer: z.boolean().optional(),
  lora_config: z
    .object({
      rank: z.number().int().optional(),
      alpha: z.number().optional(),
      dropout: z.number().min(0).max(1).optional(),
      seed: int64.optional(),
      train_unembed: z.boolean().optional(),
    })
    .optional(),
  metadata: z.record(z.string(), z.unknown()).optional(),
  resume_from_checkpoint_id: z.string().optional(),
});

export const SessionPatchBody = z.object({
  display_name: z.string().optional(),
  metadata: z.record(z.string(), z.unknown()).optional(),
});

export const ExtendExpiryBody = z.object({ seconds: z.number().int().min(60).max(86_400) });

/** Parses a body with a schema; a mismatch is a 400 naming the field. */
export function parseBody<T>(schema: z.ZodType<T>, body: unknown, what: string): T {
  const parsed = schema.safeParse(body ?? {});
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const field = issue.path.length ? issue.path.join('.') : '(body)';
    throw badRequest(`invalid ${what} request: ${field}: ${issue.message}`);
  }
  return parsed.data;
}

function tokensOf(input: z.infer<typeof ModelInput>): number[] {
  return input.chunks.flatMap((c) => c.encoded_text.tokens);
}

function checkTokenRange(tokens: number[], vocabSize: number, where: string): void {
  for (const t of tokens) {
    if (t < 0 || t >= vocabSize) throw badRequest(`${where}: token id ${t} is outside the vocabulary [0, ${vocabSize})`);
  }
}

function tensor(sample: z.infer<typeof SampleSchema>, name: string, index: number, length: number, dtype?: 'int64'): number[] {
  const t = sample.loss_fn_inputs[name];
  const where = `samples[${index}].loss_fn_inputs.${name}`;
  if (!t) throw badRequest(`${where} is required`);
  if (t.sparse_col_indices !== undefined || t.sparse_crow_indices !== undefined) throw badRequest(`${where}: sparse tensors are not supported`);
  if (t.shape && (t.shape.length !== 1 || t.shape[0] !== t.data.length)) {
    throw badRequest(`${where}: shape ${JSON.stringify(t.shape)} must be [${t.data.length}] (tensors are 1-D)`);
  }
  if (t.data.length !== length) {
    throw badRequest(`${where} has ${t.data.length} values but model_input has ${length} tokens; every loss tensor needs one value per input token`);
  }
  if (dtype === 'int64' && t.dtype !== 'int64') throw badRequest(`${where}: dtype must be int64, got ${t.dtype}`);
  if (t.dtype === 'int64' && t.data.some((v) => !Number.isInteger(v))) throw badRequest(`${where}: int64 tensor holds a non-integer value`);
  if (t.data.some((v) => !Number.isFinite(v))) throw badRequest(`${where}: values must be finite`);
  return t.data;
}

/** Token sequences and per-token weights of cross-entropy samples (`target_tokens` + `weights` or `mask`). */
export function parseSamples(
  samples: z.infer<typeof SampleSchema>[],
  vocabSize: number,
  requireWeights: boolean,
): { sequences: TokenSequence[]; weights: number[][] } {
  const sequences: TokenSequence[] = [];
  const weights: number[][] = [];
  samples.forEach((sample, i) => {
    const inputTokens = tokensOf(sample.model_input);
    if (inputTokens.length === 0) throw badRequest(`samples[${i}].model_input has no tokens`);
    checkTokenRange(inputTokens, vocabSize, `samples[${i}].model_input`);
    const targetTokens = tensor(sample, 'target_tokens', i, inputTokens.length, 'int64');
    checkTokenRange(targetTokens, vocabSize, `samples[${i}].loss_fn_inputs.target_tokens`);
    const hasWeights = 'weights' in sample.loss_fn_inputs;
    const hasMask = 'mask' in sample.loss_fn_inputs;
    if (hasWeights && hasMask) throw badRequest(`samples[${i}].loss_fn_inputs: weights and mask cannot both be present`);
    if (requireWeights && !hasWeights && !hasMask) throw badRequest(`samples[${i}].loss_fn_inputs.weights is required for cross-entropy`);
    const w = hasWeights || hasMask ? tensor(sample, hasWeights ? 'weights' : 'mask', i, inputTokens.length) : inputTokens.map(() => 1);
    sequences.push({ inputTokens, targetTokens });
    weights.push(w);
  });
  return { sequences, weights };
}

export function parseForwardBackward(body: unknown, vocabSize: number): OperationInput {
  const b = parseBody(ForwardBackwardBody, body, 'forward-backward');
  if (b.loss.type !== 'LOSS_TYPE_CROSS_ENTROPY') {
    throw badRequest(`loss.type ${b.loss.type} is not supported by this emulator (cross-entropy only)`, 'UNIMPLEMENTED');
  }
  const { sequences, weights } = parseSamples(b.samples, vocabSize, true);
  return {
    kind: 'forward-backward',
    sequences,
    loss: { type: 'cross_entropy', weights },
    forwardOnly: b.forward_only ?? false,
    returnOutputs: b.return_loss_fn_outputs ?? false,
  };
}

export function parseCustomForwardBackward(body: unknown, vocabSize: number): OperationInput {
  const b = parseBody(CustomForwardBackwardBody, body, 'custom-forward-backward');
  const { sequences } = parseSamples(b.samples, vocabSize, false);
  if (b.gradients.length !== sequences.length) {
    throw badRequest(`gradients has ${b.gradients.length} entries but samples has ${sequences.length}; one per sample`);
  }
  b.gradients.forEach((g, i) => {
    if (g.data.length !== sequences[i]!.inputTokens.length) {
      throw badRequest(`gradients[${i}] has ${g.data.length} values but samples[${i}] has ${sequences[i]!.inputTokens.length} tokens`);
    }
    if (g.data.some((v) => !Number.isFinite(v))) throw badRequest(`gradients[${i}]: values must be finite`);
  });
  return { kind: 'custom-forward-backward', sequences, gradients: b.gradients.map((g) => g.data) };
}

export const DEFAULT_ADAM: AdamSettings = { learningRate: 1e-4, beta1: 0.9, beta2: 0.95, eps: 1e-12, weightDecay: 0, gradClipNorm: 1 };

export function parseOptimStep(body: unknown): OperationInput {
  const b = parseBody(OptimStepBody, body, 'optim-step');
  if (b.muon_params !== undefined) throw badRequest('muon_params is not supported by this emulator; use adam_params', 'UNIMPLEMENTED');
  const a = b.adam_params ?? {};
  return {
    kind: 'optim-step',
    adam: {
      learningRate: a.learning_rate ?? DEFAULT_ADAM.learningRate,
      beta1: a.beta1 ?? DEFAULT_ADAM.beta1,
      beta2: a.beta2 ?? DEFAULT_ADAM.beta2,
      eps: a.eps ?? DEFAULT_ADAM.eps,
      weightDecay: a.weight_decay ?? DEFAULT_ADAM.weightDecay,
      gradClipNorm: a.grad_clip_norm ?? DEFAULT_ADAM.gradClipNorm,
    },
  };
}

export function parseSample(
  body: unknown,
  vocabSize: number,
  encodeStop: ((text: string) => number[]) | undefined,
): OperationInput {
  const b = parseBody(SampleBody, body, 'sample');
  const prompts = b.model_inputs.map((m, i) => {
    const tokens = tokensOf(m);
    if (tokens.length === 0) throw badRequest(`model_inputs[${i}] has no tokens`);
    checkTokenRange(tokens, vocabSize, `model_inputs[${i}]`);
    return tokens;
  });
  const sp = b.sampling_params ?? {};
  const params: SampleParams = {
    maxTokens: sp.max_tokens ?? 256,
    temperature: sp.temperature ?? 1,
    topK: sp.top_k !== undefined && sp.top_k > 0 ? sp.top_k : undefined,
    topP: sp.top_p,
    seed: sp.seed,
    stopTokenSequences: encodeStop ? (sp.stop ?? []).map(encodeStop).filter((s) => s.length > 0) : undefined,
  };
  return { kind: 'sample', prompts, numSamples: b.num_samples ?? 1, params, promptLogprobs: b.prompt_logprobs ?? false };
}
