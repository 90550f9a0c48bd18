import { z } from 'zod';
import { badRequest } from '../errors';
import type { OperationInput } from '../engine';
import type { AdamSettings, SampleParams, TokenSequence } from '../learner';
import type { PolicyAggregation, PolicyLossConfig } from '../learner';

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
  chunks: z.array(z.object({ encoded_text: z.object({ tokens: z.array(int64) }) })).min(1, 'model_input needs at least one chunk'),
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

export const OptimStepBody = z.object({ adam_params: AdamParamsSchema.optional(), muon_params: z.unknown().optional() }).default({});

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

function tensor(sample: z.infer<typeof SampleSchema>, name: string, index: number, length: number, dtype?: 'int64' | 'float32'): number[] {
  const t = sample.loss_fn_inputs[name];
  const where = `samples[${index}].loss_fn_inputs.${name}`;
  if (!t) throw badRequest(`${where} is required`);
  if (t.sparse_col_indices !== undefined || t.sparse_crow_indices !== undefined)
    throw badRequest(`${where}: sparse tensors are not supported`);
  if (t.shape && (t.shape.length !== 1 || t.shape[0] !== t.data.length)) {
    throw badRequest(`${where}: shape ${JSON.stringify(t.shape)} must be [${t.data.length}] (tensors are 1-D)`);
  }
  if (t.data.length !== length) {
    throw badRequest(
      `${where} has ${t.data.length} values but model_input has ${length} tokens; every loss tensor needs one value per input token`,
    );
  }
  if (dtype && t.dtype !== dtype) throw badRequest(`${where}: dtype must be ${dtype}, got ${t.dtype}`);
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

/** The `*_params` key each loss type may carry (IMPORTANCE_SAMPLING has none). */
const PARAMS_KEY: Record<(typeof LOSS_TYPES)[number], string | undefined> = {
  LOSS_TYPE_CROSS_ENTROPY: 'cross_entropy_params',
  LOSS_TYPE_GRPO: 'grpo_params',
  LOSS_TYPE_IMPORTANCE_SAMPLING: undefined,
  LOSS_TYPE_PPO: 'ppo_params',
  LOSS_TYPE_CISPO: 'cispo_params',
  LOSS_TYPE_DPPO: 'dppo_params',
  LOSS_TYPE_DRO: 'dro_params',
};

const ClipParams = z.object({
  clip_low_threshold: z.number().gt(0).max(1).optional(),
  clip_high_threshold: z.number().min(1).optional(),
});

const GrpoParams = ClipParams.extend({
  beta: z.number().min(0).optional(),
  agg_type: z
    .enum([
      'GRPO_LOSS_AGGREGATION_TYPE_UNSPECIFIED',
      'GRPO_LOSS_AGGREGATION_TYPE_TOKEN_MEAN',
      'GRPO_LOSS_AGGREGATION_TYPE_SEQUENCE_MEAN',
      'GRPO_LOSS_AGGREGATION_TYPE_FIXED_HORIZON',
    ])
    .optional(),
  ratio_type: z.enum(['GRPO_LOSS_RATIO_TYPE_TOKEN', 'GRPO_LOSS_RATIO_TYPE_SEQUENCE']).optional(),
});

/**
 * Together does not document what an unset (or UNSPECIFIED) `agg_type` means; every official example sets TOKEN_MEAN,
 * and the emulator reads it so. Roundhouse always sends one.
 */
const AGGREGATION: Record<string, PolicyAggregation> = {
  GRPO_LOSS_AGGREGATION_TYPE_UNSPECIFIED: 'token_mean',
  GRPO_LOSS_AGGREGATION_TYPE_TOKEN_MEAN: 'token_mean',
  GRPO_LOSS_AGGREGATION_TYPE_SEQUENCE_MEAN: 'sequence_mean',
  GRPO_LOSS_AGGREGATION_TYPE_FIXED_HORIZON: 'fixed_horizon',
};

/**
 * The policy-gradient loss of a LossConfig, with the per-sample inputs it needs (`target_tokens`, `logprobs` and
 * `advantages`; `weights`|`mask` optional; `reference_logprobs` when GRPO's beta > 0). IMPORTANCE_SAMPLING, PPO and
 * CISPO sum over weighted tokens, like cross-entropy (Together documents no unit for them; its SDK's Tinker shim
 * labels every loss `loss:sum`); GRPO aggregates by `agg_type` (a mean), TOKEN_MEAN when unset.
 */
function parsePolicyLoss(
  loss: z.infer<typeof LossConfig>,
  samples: z.infer<typeof SampleSchema>[],
  vocabSize: number,
): { sequences: TokenSequence[]; config: PolicyLossConfig } {
  const type = loss.type;
  const paramsKey = PARAMS_KEY[type];
  const raw = paramsKey ? (loss as Record<string, unknown>)[paramsKey] : undefined;
  let clipLow = 0.8;
  let clipHigh = 1.2;
  let beta = 0;
  let aggregation: PolicyAggregation = 'sum';
  let ratio: 'token' | 'sequence' = 'token';
  if (type === 'LOSS_TYPE_GRPO') {
    const p = parseBody(GrpoParams, raw, 'forward-backward loss.grpo_params');
    clipLow = p.clip_low_threshold ?? clipLow;
    clipHigh = p.clip_high_threshold ?? clipHigh;
    beta = p.beta ?? 0;
    aggregation = AGGREGATION[p.agg_type ?? 'GRPO_LOSS_AGGREGATION_TYPE_TOKEN_MEAN']!;
    ratio = p.ratio_type === 'GRPO_LOSS_RATIO_TYPE_SEQUENCE' ? 'sequence' : 'token';
  } else if (paramsKey) {
    const p = parseBody(ClipParams, raw, `forward-backward loss.${paramsKey}`);
    clipLow = p.clip_low_threshold ?? clipLow;
    clipHigh = p.clip_high_threshold ?? clipHigh;
  }
  const { sequences, weights } = parseSamples(samples, vocabSize, false);
  const samplingLogprobs: number[][] = [];
  const advantages: number[][] = [];
  const referenceLogprobs: number[][] = [];
  samples.forEach((sample, i) => {
    const length = sequences[i]!.inputTokens.length;
    samplingLogprobs.push(tensor(sample, 'logprobs', i, length, 'float32'));
    advantages.push(tensor(sample, 'advantages', i, length, 'float32'));
    const hasReference = 'reference_logprobs' in sample.loss_fn_inputs;
    if (beta > 0 && !hasReference) {
      throw badRequest(`samples[${i}].loss_fn_inputs.reference_logprobs is required when grpo_params.beta > 0`);
    }
    if (beta > 0) referenceLogprobs.push(tensor(sample, 'reference_logprobs', i, length, 'float32'));
  });
  const objective = type === 'LOSS_TYPE_IMPORTANCE_SAMPLING' ? 'importance_sampling' : type === 'LOSS_TYPE_CISPO' ? 'cispo' : 'ppo';
  return {
    sequences,
    config: {
      objective,
      samplingLogprobs,
      advantages,
      weights,
      clipLow,
      clipHigh,
      beta,
      referenceLogprobs: beta > 0 ? referenceLogprobs : undefined,
      aggregation,
      ratio,
    },
  };
}

export function parseForwardBackward(body: unknown, vocabSize: number): OperationInput {
  const b = parseBody(ForwardBackwardBody, body, 'forward-backward');
  const own = PARAMS_KEY[b.loss.type];
  for (const key of Object.keys(b.loss)) {
    if (key.endsWith('_params') && key !== own) throw badRequest(`loss.${key} does not belong to loss.type ${b.loss.type}`);
  }
  const common = {
    kind: 'forward-backward' as const,
    forwardOnly: b.forward_only ?? false,
    returnOutputs: b.return_loss_fn_outputs ?? false,
  };
  if (b.loss.type === 'LOSS_TYPE_CROSS_ENTROPY') {
    const { sequences, weights } = parseSamples(b.samples, vocabSize, true);
    return { ...common, sequences, loss: { type: 'cross_entropy', weights } };
  }
  if (b.loss.type === 'LOSS_TYPE_DPPO' || b.loss.type === 'LOSS_TYPE_DRO') {
    throw badRequest(`loss.type ${b.loss.type} is not supported by this emulator`, 'UNIMPLEMENTED');
  }
  const { sequences, config } = parsePolicyLoss(b.loss, b.samples, vocabSize);
  return { ...common, sequences, loss: { type: 'policy_gradient', config } };
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

/**
 * A sample request, with two of Together's documented rules (the guide's, as issue #44 quotes it): a stop string on a
 * model without stop-string support fails as invalid input (400, here at submit); a seed on a generator of more than
 * one replica ("inference engine") fails the operation with an internal error when it runs.
 */
export function parseSample(
  body: unknown,
  vocabSize: number,
  encodeStop: ((text: string) => number[]) | undefined,
  resource: { stopStrings: boolean; generatorReplicas: number },
): OperationInput {
  const b = parseBody(SampleBody, body, 'sample');
  const stop = b.sampling_params?.stop ?? [];
  if (stop.length > 0 && !resource.stopStrings)
    throw badRequest(
      'sampling_params.stop: this model does not support stop strings; omit stop and truncate the completion in your code',
      'INVALID_INPUT',
    );
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
  const seedRefused =
    sp.seed !== undefined && resource.generatorReplicas > 1
      ? {
          failsWith: {
            code: 'INTERNAL_ERROR' as const,
            message: `sampling_params.seed is not supported when the generator uses more than one inference engine (num_generator_replicas is ${resource.generatorReplicas}); leave seed unset`,
          },
        }
      : {};
  return { kind: 'sample', prompts, numSamples: b.num_samples ?? 1, params, promptLogprobs: b.prompt_logprobs ?? false, ...seedRefused };
}
