import { z } from 'zod';
import { positiveInt } from './spec-fields';

/** How a round trains and samples, and what it trains on: the `training`, `sampling` and `data` blocks. */

/**
 * Segment bounds for hosted step times. A segment costs the same few history events however long it runs (steps
 * add none: their progress rides on heartbeats), and pause, budget and a worker's shutdown interrupt a running one,
 * so segments can be long: at 10 s per step a 30-minute segment holds 180 steps, at 30 s 60. See BENCHMARKS.md
 * (history at hosted speed).
 */
export const DEFAULT_SEGMENT_STEPS = 1000;
export const DEFAULT_SEGMENT_SECONDS = 1800;

export const LrScheduleSchema = z
  .object({
    kind: z.enum(['constant', 'linear', 'cosine']).default('constant'),
    /** Steps of linear warm-up from 0 to the learning rate. */
    warmupSteps: z.number().int().min(0).default(0),
    /** Where linear and cosine decay end, as a fraction of the learning rate. */
    minRatio: z.number().min(0).max(1).default(0),
  })
  .strict();

export const AdamSchema = z
  .object({
    beta1: z.number().min(0).lt(1).default(0.9),
    beta2: z.number().min(0).lt(1).default(0.95),
    eps: z.number().positive().default(1e-8),
    weightDecay: z.number().min(0).default(0),
    /** 0 disables clipping. */
    gradClipNorm: z.number().min(0).default(1),
  })
  .strict();

export const TrainingSpecSchema = z
  .object({
    epochs: positiveInt.max(1000),
    batchSize: positiveInt.max(4096),
    learningRate: z.number().positive().max(10),
    lrSchedule: LrScheduleSchema.default({ kind: 'constant', warmupSteps: 0, minRatio: 0 }),
    loraRank: positiveInt.max(128),
    loraAlpha: z.number().positive().optional(),
    maxSeqLen: positiveInt.max(1_000_000),
    adam: AdamSchema.default({ beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0, gradClipNorm: 1 }),
    /** Seeds the per-epoch shuffle (and the LoRA init where the provider takes one). */
    seed: z.number().int().min(0).default(0),
    /** A training segment (one heartbeating activity) ends after this many steps… */
    segmentSteps: positiveInt.max(100_000).default(DEFAULT_SEGMENT_STEPS),
    /** …or this many seconds, whichever comes first. */
    segmentSeconds: positiveInt.max(3600).default(DEFAULT_SEGMENT_SECONDS),
    /**
     * Gradient accumulation: each optimizer step is this many forward-backward passes of `batchSize` rows (their
     * gradients summed on the trainer) and one optim_step, so an effective batch of `batchSize × accumulate` rows fits
     * the trainer's maximum batch size. Steps per epoch count effective batches. Not for grpo rounds (a step's batch is
     * its sampled groups).
     */
    accumulate: positiveInt.max(64).optional(),
    /** Steps submitted ahead of the one being awaited (forward_backward + optim_step each). */
    pipelineDepth: positiveInt.max(8).default(2),
    /**
     * Rolling training checkpoints (weights + optimizer + step) saved while training, after this many steps or
     * minutes, whichever comes first: a lost trainer or a failed step rolls back to the latest, so at most this much
     * work is redone. The round keeps the last `keep` of them.
     */
    checkpointEvery: z
      .object({
        steps: positiveInt.max(1_000_000).optional(),
        minutes: z
          .number()
          .positive()
          .max(24 * 60)
          .optional(),
        keep: positiveInt.max(100).default(3),
      })
      .strict()
      .default({ minutes: 5, keep: 3 }),
  })
  .strict();

export const SamplingSpecSchema = z
  .object({
    maxTokens: positiveInt.max(32_768),
    temperature: z.number().min(0).max(10).default(0),
    topP: z.number().gt(0).max(1).optional(),
    topK: z.number().int().min(0).optional(),
    stop: z.array(z.string().min(1)).max(16).optional(),
    /**
     * Seeds the draws (each derives its own: a step's, a batch's, a turn's). Unset: the dialect decides (Together
     * sends none; Tinker and Baseten derive them from training.seed). Refused on Together with generatorReplicas > 1.
     */
    seed: z.number().int().min(0).max(2_147_483_647).optional(),
  })
  .strict();

export const DataSpecSchema = z
  .object({
    train: z.string().min(1),
    eval: z.string().min(1),
    /**
     * A held-out test set, for the final assessment only: each round's final weights are scored on it and reports
     * show the figure apart from eval's, but nothing is chosen by it (data, early stopping, the campaign's target, the
     * best checkpoint all read eval). Checked before spend like eval: rows held out from train and eval.
     */
    test: z.string().min(1).optional(),
    /**
     * false (default): `run` and `schedule create` copy the files into the artifact store, content-addressed, and
     * every round (every scheduled run too) trains on that copy. true: each run reads the path or URI as it is then.
     */
    reread: z.boolean().default(false),
  })
  .strict();

export type TrainingSpec = z.infer<typeof TrainingSpecSchema>;
export type SamplingSpec = z.infer<typeof SamplingSpecSchema>;
export type DataSpec = z.infer<typeof DataSpecSchema>;
export type LrSchedule = z.infer<typeof LrScheduleSchema>;
