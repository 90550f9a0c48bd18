import { z } from 'zod';

/**
 * Response shapes of Together's `/v1/rl/*` API, as tolerant as the official SDK: unknown fields pass, int64
 * values may be strings or numbers, absent lists are empty. See WIRE.md beside this file.
 */

export const int64 = z.union([z.number(), z.string()]).transform((v) => (typeof v === 'string' ? Number(v) : v));

export const ModelResourcesWire = z
  .object({
    id: z.string().min(1),
    base_model: z.string().default(''),
    created_at: z.string().default(''),
    created_by: z.string().optional(),
    status: z.string(),
    /** While PENDING: the create's place in the capacity queue (0 once it waits only for its pods). */
    status_details: z.object({ queue_position: int64.optional() }).passthrough().optional().nullable(),
    error: z.object({ code: z.string().optional(), message: z.string().optional() }).passthrough().optional().nullable(),
  })
  .passthrough();
export type ModelResourcesWire = z.infer<typeof ModelResourcesWire>;

const Meta = z.object({ has_more: z.boolean().optional(), next_cursor: z.string().optional().nullable() }).passthrough().optional();

export const ModelResourcesListWire = z.object({ data: z.array(ModelResourcesWire).default([]), meta: Meta }).passthrough();

export const SessionWire = z
  .object({
    id: z.string().min(1),
    model_resources_id: z.string().default(''),
    status: z.string(),
    step: int64.default(0),
    display_name: z.string().optional().nullable(),
    training_checkpoints: z
      .array(z.object({ id: z.string() }).passthrough())
      .nullable()
      .default([]),
  })
  .passthrough();
export type SessionWire = z.infer<typeof SessionWire>;

export const SessionListWire = z
  .object({
    data: z.array(SessionWire).nullable().default([]),
    meta: z.object({ has_more: z.boolean().optional(), next_cursor: z.string().optional().nullable() }).passthrough().optional().nullable(),
  })
  .passthrough();

export const OperationWire = z
  .object({
    id: z.string().min(1),
    status: z.string().default('TRAINING_OPERATION_STATUS_UNSPECIFIED'),
    error: z.object({ code: z.string().optional(), message: z.string().optional() }).passthrough().optional().nullable(),
    output: z.unknown().optional().nullable(),
  })
  .passthrough();
export type OperationWire = z.infer<typeof OperationWire>;

export const ForwardBackwardOutput = z
  .object({
    loss: z.number(),
    loss_fn_outputs: z
      .array(
        z.object({ tensors: z.object({ logprobs: z.object({ data: z.array(z.number()) }).passthrough() }).passthrough() }).passthrough(),
      )
      .optional()
      .nullable(),
  })
  .passthrough();

export const OptimStepOutput = z.object({ step: int64 }).passthrough();
export const WeightsSyncOutput = z.object({ weights_version: int64 }).passthrough();
export const CheckpointOutput = z.object({ checkpoint: z.object({ id: z.string(), step: int64.default(0) }).passthrough() }).passthrough();

export const SampleOutput = z
  .object({
    results: z.array(
      z
        .object({
          sequences: z.array(
            z
              .object({
                tokens: z.array(int64),
                logprobs: z.array(z.number()).optional().nullable(),
                stop_reason: z.string().optional(),
              })
              .passthrough(),
          ),
          policy_segments: z
            .array(z.object({ start_token: z.number().optional(), version: int64 }).passthrough())
            .optional()
            .nullable(),
          prompt_logprobs: z.array(z.number().nullable()).optional().nullable(),
        })
        .passthrough(),
    ),
  })
  .passthrough();

export const SupportedModelsWire = z
  .object({
    data: z.array(
      z
        .object({
          base_model: z.string(),
          vocab_size: z.number().optional(),
          gpu_count: z.number().optional(),
          tokenizer: z.string().optional(),
          /** The catalog's "adapter capacity" (the emulator publishes it; SDK 3.1.1's RlSupportedModel has no such field). */
          adapter_capacity: z.number().int().positive().optional(),
          // Not in the SDK's RlSupportedModel: our emulator's stand-in for the catalog table's stop-string column.
          supports_stop_strings: z.boolean().optional(),
          compute_configs: z
            .array(
              z
                .object({
                  trainer_config: z
                    .object({
                      lora: z
                        .object({ max_batch_size: z.number(), max_rank: z.number(), max_seq_length: z.number() })
                        .passthrough()
                        .optional(),
                    })
                    .passthrough()
                    .optional(),
                })
                .passthrough(),
            )
            .optional()
            .nullable(),
        })
        .passthrough(),
    ),
  })
  .passthrough();

export const EstimateCostWire = z.object({ currency: z.string(), price_per_hour: z.number() }).passthrough();
