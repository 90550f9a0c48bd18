import { z } from 'zod';
import { positiveInt, pythonCallFields } from './spec-fields';

/**
 * How evaluation samples (the eval, pool and test sets): greedy and one answer per prompt unless set; `maxTokens` and
 * `stop` default to the top-level `sampling` block's (config/rules/evaluation-sampling.ts resolves it).
 */
export const EvaluationSamplingSchema = z
  .object({
    temperature: z.number().min(0).max(10).default(0),
    maxTokens: positiveInt.max(32_768).optional(),
    topP: z.number().gt(0).max(1).optional(),
    topK: z.number().int().min(0).optional(),
    stop: z.array(z.string().min(1)).max(16).optional(),
    /** Answers drawn per prompt: with n > 1 the round reports pass@n beside pass@1 (the accuracy). */
    n: positiveInt.max(128).default(1),
  })
  .strict()
  .superRefine((s, ctx) => {
    if (s.n > 1 && s.temperature === 0)
      ctx.addIssue({
        code: 'custom',
        path: ['temperature'],
        message: `must be above 0 when n is ${s.n}: greedy answers to one prompt are all alike, so pass@${s.n} would equal pass@1`,
      });
  });

export const EvaluationSpecSchema = z
  .object({
    /** `numeric`: the final number of the completion equals the answer's (GSM8K-style, `####` aware). */
    scorer: z.union([
      z.enum(['exact', 'contains', 'regex', 'numeric']),
      /** A scorer registered on a Python worker: `(completion, answer, prompt, row) → bool | float`. */
      z.object({ kind: z.literal('python'), ...pythonCallFields }).strict(),
    ]),
    /** For `regex`: the pattern a completion must match; `{answer}` is replaced by the escaped expected answer. */
    pattern: z.string().optional(),
    caseSensitive: z.boolean().default(false),
    /** Trim and collapse whitespace before comparing. */
    normalizeWhitespace: z.boolean().default(true),
    /** How the answers scored are drawn (default: greedy, one per prompt), apart from the training draws' `sampling`. */
    sampling: EvaluationSamplingSchema.optional(),
    /**
     * Evaluation during training: an eval-loss pass (forward only; DPO: the eval pairs' loss and preference accuracy)
     * every this many optimizer steps, between segments. The round's start and end are measured anyway.
     */
    every: positiveInt.max(1_000_000).optional(),
    /**
     * SFT: sample an answer for every eval row after training and score it (the round's accuracy); default true.
     * false: the round measures eval loss only and samples nothing, so its trainer is provisioned without a generator.
     */
    sampleAnswers: z.boolean().optional(),
    /** SFT and GRPO: every k-th of those passes also samples the eval set and scores it (the metric's curve). */
    sampleEvery: positiveInt.max(1000).optional(),
    /**
     * End the round when the evaluations stop improving: after `patience` evaluations without an improvement of more
     * than `minDelta` (on eval loss, or the metric), training stops and the round finishes from its best evaluated
     * weights, saved as a checkpoint when they were measured.
     */
    earlyStop: z
      .object({
        patience: positiveInt.max(1000).default(3),
        minDelta: z.number().min(0).default(0),
        on: z.enum(['loss', 'metric']).default('loss'),
      })
      .strict()
      .optional(),
  })
  .strict()
  .superRefine((e, ctx) => {
    if (e.sampleEvery !== undefined && e.every === undefined)
      ctx.addIssue({ code: 'custom', path: ['sampleEvery'], message: 'needs evaluation.every (the steps between evaluations)' });
    if (e.earlyStop && e.every === undefined)
      ctx.addIssue({ code: 'custom', path: ['earlyStop'], message: 'needs evaluation.every (the steps between evaluations)' });
    if (e.scorer === 'regex') {
      if (!e.pattern) {
        ctx.addIssue({ code: 'custom', path: ['pattern'], message: 'is required when scorer is regex' });
        return;
      }
      try {
        new RegExp(e.pattern.replace('{answer}', 'x'));
      } catch (err) {
        ctx.addIssue({ code: 'custom', path: ['pattern'], message: `is not a valid regular expression: ${(err as Error).message}` });
      }
    }
  });

export type EvaluationSpec = z.infer<typeof EvaluationSpecSchema>;
