import { z } from 'zod';
import { checkDatum, checkPolicyDatum } from '../datum';
import type { Datum } from '../types';

/**
 * Wire shapes of Baseten Loops (control plane `/v1/loops/*`, a run's trainer, a sampler), as tolerant as the
 * official SDK: unknown fields pass, optional fields may be null. See WIRE.md beside this file.
 */

const nullableString = z.string().nullish();

/** A body that is not read (a health probe's). */
export const AnyJson = z.unknown();

export const CapabilitiesWire = z
  .object({
    supported_models: z.array(
      z
        .object({
          model_name: z.string(),
          max_context_length: z.number().nullish(),
          // Emulator extensions (absent on the service): limits a client checks before provisioning.
          max_seq_len: z.number().nullish(),
          max_lora_rank: z.number().nullish(),
          max_batch_size: z.number().nullish(),
          vocab_size: z.number().nullish(),
          tokenizer: nullableString,
          gpu_count: z.number().nullish(),
        })
        .passthrough(),
    ),
  })
  .passthrough();

export const SessionEnvelope = z.object({ session: z.object({ id: z.string().min(1) }).passthrough() }).passthrough();

const Status = z.object({ name: z.string() }).passthrough();

export const SamplerWire = z
  .object({
    id: z.string().min(1),
    base_url: z.string().min(1),
    model_id: nullableString,
    deployment_id: nullableString,
    status: Status.nullish(),
    base_model: nullableString,
    created_at: nullableString,
    user: z.object({ email: nullableString }).passthrough().nullish(),
    // Not in the schema (the emulator gives them): the run and session a sampler was created for.
    run_id: nullableString,
    session_id: nullableString,
  })
  .passthrough();
export type SamplerWire = z.infer<typeof SamplerWire>;

export const RunWire = z
  .object({
    id: z.string().min(1),
    session_id: z.string(),
    deployment_id: nullableString,
    name: z.string().default(''),
    base_model: z.string(),
    base_url: nullableString,
    created_at: z.string().default(''),
    status: Status,
    user: z.object({ email: nullableString }).passthrough().nullish(),
    sampler: SamplerWire.nullish(),
    /** Why the run ended (CAPACITY_WAIT_TIMEOUT, ...), where the API says. */
    error: z.object({ code: nullableString, message: nullableString }).passthrough().nullish(),
  })
  .passthrough();
export type RunWire = z.infer<typeof RunWire>;

export const RunEnvelope = z.object({ run: RunWire }).passthrough();
/** A listing's next page, where the service pages it (it documents none for runs, samplers, deployments). */
const NextPage = z.union([z.number(), z.string()]).nullish();
export const RunsEnvelope = z.object({ runs: z.array(RunWire).default([]), next_page_token: NextPage }).passthrough();
export const SamplerEnvelope = z.object({ sampler: SamplerWire }).passthrough();
export const SamplersEnvelope = z.object({ samplers: z.array(SamplerWire).default([]), next_page_token: NextPage }).passthrough();

const DeploymentWire = z.object({ id: z.string(), status: Status }).passthrough();
export const DeploymentEnvelope = z.object({ deployment: DeploymentWire }).passthrough();
export const DeploymentsEnvelope = z.object({ deployments: z.array(DeploymentWire).default([]), next_page_token: NextPage }).passthrough();

export const CheckpointsEnvelope = z
  .object({
    checkpoints: z
      .array(
        z
          .object({
            id: z.string(),
            checkpoint_id: z.string(),
            run_id: z.string(),
            target: nullableString,
            created_at: z.string().default(''),
          })
          .passthrough(),
      )
      .default([]),
  })
  .passthrough();

/** A trainer submit's answer (202): the operation id is the Idempotency-Key that was sent. */
export const AcceptedWire = z.object({ operation_id: z.string().min(1), schema_version: z.number().nullish() }).passthrough();

export const OperationWire = z
  .object({
    status: z.string(),
    result: z.unknown().optional(),
    error: z.unknown().optional(),
    error_class: nullableString,
    /** Emulator extension: the engine's error code. */
    error_code: nullableString,
  })
  .passthrough();
export type OperationWire = z.infer<typeof OperationWire>;

export const ForwardOutput = z
  .object({
    loss: z.number(),
    loss_fn_outputs: z
      .array(z.object({ logprobs: z.object({ data: z.array(z.number().nullable()) }).passthrough() }).passthrough())
      .default([]),
    metrics: z.record(z.string(), z.number()).nullish(),
  })
  .passthrough();

export const OptimStepOutput = z.object({ metrics: z.record(z.string(), z.number()).nullish() }).passthrough();
export const SaveStateOutput = z.object({ path: z.string().min(1), step: z.number().nullish() }).passthrough();
export const SamplerWeightsOutput = z.object({ version: z.number(), path: z.string().min(1) }).passthrough();
export const StepOutput = z.object({ step: z.number() }).passthrough();
export const PolicyVersionWire = z.object({ policy_version: z.number() }).passthrough();

/** vLLM's completions answer, as far as sampling reads it. */
export const CompletionWire = z
  .object({
    choices: z.array(
      z
        .object({
          token_ids: z.array(z.number()).nullish(),
          finish_reason: nullableString,
          logprobs: z
            .object({
              tokens: z.array(z.union([z.string(), z.number()])).nullish(),
              token_logprobs: z.array(z.number().nullable()).nullish(),
            })
            .passthrough()
            .nullish(),
          prompt_logprobs: z.array(z.record(z.string(), z.object({ logprob: z.number() }).passthrough()).nullable()).nullish(),
        })
        .passthrough(),
    ),
  })
  .passthrough();
export type CompletionWire = z.infer<typeof CompletionWire>;

/** `AdamParams` as the SDK sends it: all six fields, its defaults for the ones not given. */
export const ADAM_DEFAULTS = { beta1: 0.9, beta2: 0.95, eps: 1e-12, weightDecay: 0, gradClipNorm: 1 } as const;

const MASK = -100;

/**
 * A provider-neutral datum (Together-aligned: input = sequence minus its last token, targets shifted, weights)
 * → Baseten's cross-entropy datum: the whole sequence as input, one target per position shifted by the caller,
 * -100 where nothing trains (weight 0, and the last position), and a `weights` tensor only when a weight is
 * neither 0 nor 1.
 */
export function toLoopsDatum(d: Datum, index: number): Record<string, unknown> {
  checkDatum(d, index);
  const tokens = [...d.modelInput, d.targetTokens[d.targetTokens.length - 1]!];
  const targets = [...d.targetTokens.map((t, i) => (d.weights[i] === 0 ? MASK : t)), MASK];
  const weighted = d.weights.some((w) => w !== 0 && w !== 1);
  return {
    model_input: { chunks: [{ type: 'encoded_text', tokens }] },
    loss_fn_inputs: {
      target_tokens: { data: targets, dtype: 'int64', shape: [targets.length] },
      ...(weighted ? { weights: { data: [...d.weights, 0], dtype: 'float32', shape: [targets.length] } } : {}),
    },
    routed_experts_ref: null,
  };
}

/**
 * A neutral datum → Baseten's RL datum (importance_sampling, ppo): the cross-entropy datum plus `logprobs` and
 * `advantages` aligned with its `target_tokens` (0 at the final, masked position).
 */
export function toLoopsPolicyDatum(d: Datum, index: number): Record<string, unknown> {
  checkPolicyDatum(d, index, false);
  const datum = toLoopsDatum(d, index) as { loss_fn_inputs: Record<string, unknown> };
  const n = d.targetTokens.length + 1;
  datum.loss_fn_inputs.logprobs = { data: [...d.logprobs!, 0], dtype: 'float32', shape: [n] };
  datum.loss_fn_inputs.advantages = { data: [...d.advantages!, 0], dtype: 'float32', shape: [n] };
  return datum;
}

/** Logprobs aligned with a Baseten datum (masked positions null) → aligned with the neutral datum (0 there). */
export function fromLoopsLogprobs(data: (number | null)[]): number[] {
  return data.slice(0, -1).map((v) => v ?? 0);
}

/** Operation failures carry an exception class name; the engine behind the emulator also says its code. */
export function operationErrorCode(op: OperationWire): string {
  if (op.error_code) return op.error_code;
  switch (op.error_class) {
    case 'ValueError':
    case 'TypeError':
    case 'KeyError':
    case 'IndexError':
    case 'FileNotFoundError':
      return 'INVALID_INPUT';
    case 'FloatingPointError':
      return 'NON_FINITE_LOSS';
    case 'TimeoutError':
      return 'TIMEOUT';
    case 'MemoryError':
    case 'OutOfMemoryError':
      return 'RESOURCE_EXHAUSTED';
    case 'TrainerShutdownError':
      return 'SESSION_NOT_ACTIVE';
    default:
      return 'INTERNAL_ERROR';
  }
}
