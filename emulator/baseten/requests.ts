import { z } from 'zod';
import { badRequest } from '../errors';
import type { CheckpointRef, OperationInput } from '../engine';
import type { PolicyLossConfig, SampleParams, TokenSequence } from '../learner';
import { parseBody } from '../together/requests';

// Both SDKs share Tinker's types for these: one parser for the request body helper and `optim_step`'s AdamParams.
export { parseBody, parseOptimStep } from '../together/requests';

/**
 * Request bodies of Baseten Loops, as the official `baseten-loops` SDK (0.32.0) sends them
 * (providers/baseten/WIRE.md). Unknown fields pass (the SDK adds `seq_id`, `run_id`, `model`, trace fields).
 * A body that fails here is a 400 on the control plane, but on the trainer it becomes a failed operation:
 * the SDK resends a 400 submit for up to an hour.
 */

// ── control plane ───────────────────────────────────────────────────────────────────────────────────

/** `CreateLoopsRunRequest`: the same body for `POST /v1/loops/runs` (with a paired sampler) and `/trainers`. */
export const CreateRunBody = z
  .object({
    session_id: z.string().min(1, 'session_id is required'),
    base_model: z.string().min(1, 'base_model is required'),
    name: z.string().min(1).max(255).nullish(),
    max_seq_len: z.number().int().positive().nullish(),
    /** The service's default is 64 (capped here at the model's maximum); the SDK always sends its own (32). */
    lora_rank: z.number().int().min(1).nullish(),
    seed: z.number().int().nullish(),
    scale_down_delay_seconds: z.number().int().gt(0).max(3600).default(900),
    availability_model: z.enum(['dedicated', 'spot']).default('dedicated'),
    replicas: z.number().int().min(1).max(64).default(1),
    path: z.string().nullish(),
    base_checkpoint: z.string().nullish(),
    reuse_from_run_id: z.string().nullish(),
    reuse_from_session_id: z.string().nullish(),
  })
  .passthrough();

/** `CreateLoopsSamplerRequest`: paired (`run_id`) or standalone (exactly one of `base_model`, `model_path`). */
export const CreateSamplerBody = z
  .object({
    session_id: z.string().min(1, 'session_id is required'),
    run_id: z.string().nullish(),
    base_model: z.string().nullish(),
    model_path: z.string().nullish(),
    max_seq_length: z.number().int().positive().nullish(),
    num_replicas: z.number().int().min(1).max(64).nullish(),
    availability_model: z.enum(['dedicated', 'spot']).nullish(),
    reuse_from_session_id: z.string().nullish(),
  })
  .passthrough();

export const ValidateCheckpointBody = z
  .object({ checkpoint_path: z.string().min(1, 'checkpoint_path is required'), run_id: z.string().nullish() })
  .passthrough();

/** A `bt://loops:<run>/weights/<name>` (trainer target) or `…/sampler_weights/<name>` (sampler target) URI. */
export interface CheckpointPath {
  runId: string;
  target: 'trainer' | 'sampler';
  name: string;
}

export function parseCheckpointPath(uri: string): CheckpointPath | undefined {
  const m = /^bt:\/\/loops:([^/]+)\/(weights|sampler_weights)\/([^/]+)\/?$/.exec(uri.trim());
  if (!m) return undefined;
  return { runId: m[1]!, target: m[2] === 'weights' ? 'trainer' : 'sampler', name: m[3]! };
}

export function checkpointPath(runId: string, target: 'trainer' | 'sampler', name: string): string {
  return `bt://loops:${runId}/${target === 'trainer' ? 'weights' : 'sampler_weights'}/${name}`;
}

export function checkpointRef(path: CheckpointPath): CheckpointRef {
  return { resourceId: path.runId, name: path.name, type: path.target === 'trainer' ? 'training' : 'inference' };
}

// ── trainer data plane ──────────────────────────────────────────────────────────────────────────────

/** The trainer routes, and the engine operation each becomes. */
export const TRAINER_OPS = {
  init_trainer_server: 'trainer-reset',
  forward: 'forward-backward',
  forward_backward: 'forward-backward',
  optim_step: 'optim-step',
  save_state: 'training-checkpoint',
  save_weights_for_sampler: 'inference-checkpoint',
  load_state: 'load-checkpoint',
  load_state_with_optimizer: 'load-checkpoint',
} as const;
export type TrainerOp = keyof typeof TRAINER_OPS;

export function isTrainerOp(name: string): name is TrainerOp {
  return Object.prototype.hasOwnProperty.call(TRAINER_OPS, name);
}

type Nested = number | null | Nested[];
const NestedNumbers: z.ZodType<Nested> = z.lazy(() => z.union([z.number(), z.null(), z.array(NestedNumbers)]));

const TensorData = z
  .object({
    data: z.array(NestedNumbers),
    dtype: z.enum(['float32', 'float16', 'bfloat16', 'float64', 'int32', 'int64', 'int8', 'bool']),
    shape: z.array(z.number().int().min(0)).nullish(),
  })
  .passthrough();

const Chunk = z.union([
  z.object({ type: z.literal('encoded_text').optional(), tokens: z.array(z.number().int()) }).passthrough(),
  z.object({ type: z.literal('image') }).passthrough(),
]);

const DatumSchema = z
  .object({
    model_input: z.object({ chunks: z.array(Chunk).min(1, 'model_input needs at least one chunk') }).passthrough(),
    loss_fn_inputs: z.record(z.string(), TensorData),
  })
  .passthrough();

const ForwardBody = z
  .object({
    data: z.array(DatumSchema).min(1, 'data must not be empty'),
    loss_fn: z.string().default('cross_entropy'),
    loss_fn_config: z.record(z.string(), z.unknown()).nullish(),
    top_k_logprobs: z.number().int().min(0).max(20).default(0),
  })
  .passthrough();

/** `TensorData.from_list` may leave `data` nested: flatten it, and check the shape when one is given. */
function flatTensor(t: z.infer<typeof TensorData>, where: string): number[] {
  const flat: number[] = [];
  const walk = (v: Nested): void => {
    if (Array.isArray(v)) v.forEach(walk);
    else if (v === null) throw badRequest(`${where}: null values are not allowed`);
    else flat.push(v);
  };
  t.data.forEach(walk);
  if (t.shape && t.shape.reduce((a, b) => a * b, 1) !== flat.length) {
    throw badRequest(`${where}: shape ${JSON.stringify(t.shape)} does not match its ${flat.length} values`);
  }
  if (t.shape && t.shape.length !== 1) {
    throw badRequest(`${where}: shape ${JSON.stringify(t.shape)} is not supported by this emulator (one target per position: shape [N])`);
  }
  if (flat.some((v) => !Number.isFinite(v))) throw badRequest(`${where}: values must be finite`);
  return flat;
}

const MASK = -100;

export interface ForwardRequest {
  input: OperationInput;
  /** `loss_fn_config.skip_token_normalization`: the loss and gradients are plain sums, not per-token means. */
  skipTokenNormalization: boolean;
}

/**
 * Baseten's cross-entropy convention → the engine's: `model_input` is the whole sequence, `target_tokens` has
 * one id per position, shifted by the caller, with -100 where nothing trains (the prompt, the last position),
 * and optional `weights`. By default the loss is normalised by the number of trained tokens (a per-token mean,
 * as the service reports it); `skip_token_normalization` keeps the plain weighted sum.
 * `importance_sampling` and `ppo` (the engine's policy-gradient loss) also read the sampler's `logprobs` and the
 * `advantages`, aligned with `target_tokens` (shape [N], or a per-datum scalar [1]), and an optional `mask`;
 * ppo's clip thresholds come from `loss_fn_config.clip_low_threshold`/`clip_high_threshold` (0.8/1.2).
 */
export function parseForward(body: unknown, vocabSize: number, forwardOnly: boolean): ForwardRequest {
  const b = parseBody(ForwardBody, body, forwardOnly ? 'forward' : 'forward_backward');
  const lossFn = b.loss_fn;
  if (lossFn !== 'cross_entropy' && lossFn !== 'importance_sampling' && lossFn !== 'ppo') {
    throw badRequest(`loss_fn '${lossFn}' is not supported by this emulator (cross_entropy, importance_sampling and ppo only)`);
  }
  if (b.top_k_logprobs > 0) throw badRequest('top_k_logprobs > 0 is not supported by this emulator');
  const skipTokenNormalization = b.loss_fn_config?.skip_token_normalization === true;
  const policy = lossFn !== 'cross_entropy';
  let clipLow = 0.8;
  let clipHigh = 1.2;
  if (lossFn === 'ppo') {
    const p = parseBody(PpoConfig, b.loss_fn_config ?? {}, 'forward_backward loss_fn_config');
    clipLow = p.clip_low_threshold ?? clipLow;
    clipHigh = p.clip_high_threshold ?? clipHigh;
    if (!(clipLow <= clipHigh)) throw badRequest(`loss_fn_config: clip_low_threshold ${clipLow} is above clip_high_threshold ${clipHigh}`);
  }
  const sequences: TokenSequence[] = [];
  const weights: number[][] = [];
  const samplingLogprobs: number[][] = [];
  const advantages: number[][] = [];
  b.data.forEach((d, i) => {
    const tokens: number[] = [];
    d.model_input.chunks.forEach((c, j) => {
      if (!('tokens' in c) || !Array.isArray(c.tokens))
        throw badRequest(`data[${i}].model_input.chunks[${j}]: only encoded_text chunks are supported by this emulator`);
      tokens.push(...(c.tokens as number[]));
    });
    if (tokens.length === 0) throw badRequest(`data[${i}].model_input has no tokens`);
    checkTokens(tokens, vocabSize, `data[${i}].model_input`);
    const targetsTensor = d.loss_fn_inputs.target_tokens;
    if (!targetsTensor) throw badRequest(`data[${i}].loss_fn_inputs.target_tokens is required for ${lossFn}`);
    const targets = flatTensor(targetsTensor, `data[${i}].loss_fn_inputs.target_tokens`);
    if (targets.length !== tokens.length) {
      throw badRequest(
        `data[${i}].loss_fn_inputs.target_tokens has ${targets.length} values but model_input has ${tokens.length} tokens (same length, shifted by the caller, -100 where masked)`,
      );
    }
    targets.forEach((t) => {
      if (t !== MASK && (!Number.isInteger(t) || t < 0 || t >= vocabSize)) {
        throw badRequest(`data[${i}].loss_fn_inputs.target_tokens: ${t} is neither -100 nor a token id in [0, ${vocabSize})`);
      }
    });
    const w = d.loss_fn_inputs.weights ? flatTensor(d.loss_fn_inputs.weights, `data[${i}].loss_fn_inputs.weights`) : undefined;
    if (w && w.length !== tokens.length)
      throw badRequest(`data[${i}].loss_fn_inputs.weights has ${w.length} values but model_input has ${tokens.length} tokens`);
    let mask: number[] | undefined;
    if (policy) {
      // RL losses: `logprobs` (the sampler's) and `advantages`, aligned with target_tokens ([N], or a per-datum scalar [1]); `mask` optional.
      const aligned = (name: string, required: boolean): number[] | undefined => {
        const t = d.loss_fn_inputs[name];
        if (!t) {
          if (required) throw badRequest(`data[${i}].loss_fn_inputs.${name} is required for ${lossFn}`);
          return undefined;
        }
        const v = flatTensor(t, `data[${i}].loss_fn_inputs.${name}`);
        if (v.length === 1 && tokens.length !== 1) return tokens.map(() => v[0]!);
        if (v.length !== tokens.length) {
          throw badRequest(
            `data[${i}].loss_fn_inputs.${name} has ${v.length} values but target_tokens has ${tokens.length} (one per position, or a scalar [1])`,
          );
        }
        return v;
      };
      samplingLogprobs.push(aligned('logprobs', true)!);
      advantages.push(aligned('advantages', true)!);
      mask = aligned('mask', false);
    }
    // A masked position still needs a target for the engine: the next input token (already in the vocabulary), weight 0.
    sequences.push({
      inputTokens: tokens,
      targetTokens: targets.map((t, k) => (t === MASK ? tokens[Math.min(k + 1, tokens.length - 1)]! : t)),
    });
    weights.push(targets.map((t, k) => (t === MASK ? 0 : (w?.[k] ?? 1) * (mask?.[k] ?? 1))));
  });
  if (policy) {
    const config: PolicyLossConfig = {
      objective: lossFn,
      samplingLogprobs,
      advantages,
      weights,
      clipLow,
      clipHigh,
      beta: 0,
      aggregation: skipTokenNormalization ? 'sum' : 'token_mean',
      ratio: 'token',
    };
    return {
      input: { kind: 'forward-backward', sequences, loss: { type: 'policy_gradient', config }, forwardOnly, returnOutputs: true },
      skipTokenNormalization,
    };
  }
  if (!skipTokenNormalization) {
    const trained = weights.flat().filter((v) => v !== 0).length;
    const scale = 1 / Math.max(1, trained);
    for (const row of weights) row.forEach((v, k) => (row[k] = v * scale));
  }
  return {
    input: { kind: 'forward-backward', sequences, loss: { type: 'cross_entropy', weights }, forwardOnly, returnOutputs: true },
    skipTokenNormalization,
  };
}

/** `loss_fn_config` for ppo (the SDK's docstring: clip_low_threshold=0.8, clip_high_threshold=1.2). */
const PpoConfig = z
  .object({
    clip_low_threshold: z.number().gt(0).max(1).nullish(),
    clip_high_threshold: z.number().min(1).nullish(),
  })
  .passthrough();

function checkTokens(tokens: number[], vocabSize: number, where: string): void {
  for (const t of tokens) {
    if (!Number.isInteger(t) || t < 0 || t >= vocabSize)
      throw badRequest(`${where}: token id ${t} is outside the vocabulary [0, ${vocabSize})`);
  }
}

const CheckpointName = z
  .string()
  .min(1, 'name is required')
  .max(200)
  .regex(/^[A-Za-z0-9._-]+$/, 'use letters, digits, ".", "_" and "-" only (it becomes part of a bt:// path)');

const SaveBody = z
  .object({ name: CheckpointName, ttl_seconds: z.number().int().positive().nullish(), bump_version: z.boolean().nullish() })
  .passthrough();

export function parseSave(body: unknown, op: 'save_state' | 'save_weights_for_sampler'): OperationInput {
  const b = parseBody(SaveBody, body, op);
  return op === 'save_state'
    ? { kind: 'training-checkpoint', name: b.name }
    : { kind: 'inference-checkpoint', name: b.name, publish: b.bump_version === true };
}

const LoadBody = z.object({ path: z.string().min(1, 'path is required') }).passthrough();

export function parseLoad(body: unknown, op: 'load_state' | 'load_state_with_optimizer'): OperationInput {
  const b = parseBody(LoadBody, body, op);
  const path = parseCheckpointPath(b.path);
  if (!path)
    throw badRequest(
      `path '${b.path}' is not a bt://loops:<run>/weights/<name> URI (s3:// and local paths are not supported by this emulator)`,
    );
  if (path.target !== 'trainer')
    throw badRequest(`path '${b.path}' is sampler weights, which cannot be resumed; load a bt://loops:<run>/weights/<name> checkpoint`);
  return { kind: 'load-checkpoint', checkpoint: checkpointRef(path), optimizer: op === 'load_state_with_optimizer' };
}

const InitBody = z.object({ lora_rank: z.number().int().min(1), base_model: z.string().nullish() }).passthrough();

export function parseInit(body: unknown, baseModel: string, maxRank: number, seed: number | undefined): OperationInput {
  const b = parseBody(InitBody, body, 'init_trainer_server');
  if (b.base_model && b.base_model !== baseModel) throw badRequest(`base_model '${b.base_model}' does not match this run's ${baseModel}`);
  if (b.lora_rank > maxRank) throw badRequest(`lora_rank ${b.lora_rank} is over ${baseModel}'s maximum of ${maxRank}`);
  return { kind: 'trainer-reset', lora: { rank: b.lora_rank, ...(seed !== undefined ? { seed } : {}) } };
}

// ── sampler data plane ──────────────────────────────────────────────────────────────────────────────

/** vLLM's completions body as the SDK sends it (prompt as token ids). */
const SampleBody = z
  .object({
    prompt: z.array(z.number().int()).min(1, 'prompt must hold at least one token id'),
    n: z.number().int().min(1).max(128).default(1),
    temperature: z.number().min(0).max(10).default(1),
    top_p: z.number().gt(0).max(1).default(1),
    top_k: z.number().int().min(-1).nullish(),
    max_tokens: z.number().int().min(0).max(32_768).nullish(),
    seed: z.number().int().nullish(),
    stop: z.union([z.string(), z.array(z.string())]).nullish(),
    stop_token_ids: z.array(z.number().int()).nullish(),
    logprobs: z.number().int().min(0).nullish(),
    prompt_logprobs: z.number().int().min(0).nullish(),
    model_input_chunks: z.array(z.unknown()).nullish(),
  })
  .passthrough();

export interface SampleRequest {
  prompt: number[];
  numSamples: number;
  params: SampleParams;
  promptLogprobs: boolean;
}

export function parseSample(body: unknown, vocabSize: number, encodeStop: ((text: string) => number[]) | undefined): SampleRequest {
  const b = parseBody(SampleBody, body, 'sample');
  if (b.model_input_chunks?.length) throw badRequest('image prompts (model_input_chunks) are not supported by this emulator');
  checkTokens(b.prompt, vocabSize, 'prompt');
  checkTokens(b.stop_token_ids ?? [], vocabSize, 'stop_token_ids');
  const stopStrings = typeof b.stop === 'string' ? [b.stop] : (b.stop ?? []);
  const stopTokenSequences = [
    ...(b.stop_token_ids ?? []).map((t) => [t]),
    ...(encodeStop ? stopStrings.map(encodeStop).filter((s) => s.length > 0) : []),
  ];
  return {
    prompt: b.prompt,
    numSamples: b.n,
    params: {
      maxTokens: b.max_tokens ?? 16, // vLLM's default
      temperature: b.temperature,
      topP: b.top_p,
      topK: b.top_k !== undefined && b.top_k !== null && b.top_k > 0 ? b.top_k : undefined,
      seed: b.seed ?? undefined,
      stopTokenSequences,
    },
    promptLogprobs: b.prompt_logprobs !== undefined && b.prompt_logprobs !== null,
  };
}
