import { z } from 'zod';
import { armsOf, type SweepArm } from '../rules/sweep';

/**
 * `sweep`: the campaign's first round as several arms, each the spec with some fields set otherwise (a grid of values,
 * or seeded draws), trained side by side; successive halving keeps the best 1/η at each rung by the eval metric, and the
 * winner continues as the campaign (docs/spec.md, Sweeps).
 */

const scalar = z.union([z.number(), z.string(), z.boolean()]);
const range = z.tuple([z.number(), z.number()]).refine(([low, high]) => low < high, 'low must be below high');
const distribution = z.union([
  z.object({ uniform: range }).strict(),
  z.object({ logUniform: range.refine(([low]) => low > 0, 'log-uniform needs a positive low') }).strict(),
  z.object({ choice: z.array(scalar).min(1).max(100) }).strict(),
]);

/** The fields an arm may set: the training, sampling and round-kind knobs (not data, provider or budget). */
const SWEEPABLE = /^(training|sampling|round)\.[A-Za-z]+(\.[A-Za-z]+)*$/;

export const SweepSpecSchema = z
  .object({
    /** Field path → the values of a grid, or a distribution (with `samples`). */
    over: z
      .record(z.string(), z.union([z.array(scalar).min(1).max(100), distribution]))
      .refine((o) => Object.keys(o).length > 0, 'names at least one field'),
    /** Random search: this many arms drawn from `over` (seeded). Unset: the grid of every listed value. */
    samples: z.number().int().min(2).max(64).optional(),
    seed: z.number().int().min(0).default(0),
    /** Successive halving: after each rung, keep the best ⌈n / eta⌉ arms by `metric` on the eval set. */
    select: z
      .object({
        metric: z.enum(['eval_loss', 'accuracy']).default('eval_loss'),
        /** Optimizer steps per rung. */
        rungs: z.number().int().min(1).max(100_000),
        eta: z.number().int().min(2).max(16).default(2),
      })
      .strict(),
  })
  .strict()
  .superRefine((s, ctx) => {
    for (const field of Object.keys(s.over))
      if (!SWEEPABLE.test(field))
        ctx.addIssue({
          code: 'custom',
          path: ['over', field],
          message: 'is not a field an arm may set: one under training, sampling or round (e.g. training.learningRate)',
        });
    const random = Object.entries(s.over).filter(([, v]) => !Array.isArray(v));
    if (random.length && s.samples === undefined)
      ctx.addIssue({ code: 'custom', path: ['samples'], message: `is required with a distribution (${random[0]![0]})` });
    const arms = s.samples ?? Object.values(s.over).reduce((n, v) => n * (Array.isArray(v) ? v.length : 1), 1);
    if (arms < 2) ctx.addIssue({ code: 'custom', path: ['over'], message: 'gives one arm: a sweep needs at least two' });
    if (arms > 64) ctx.addIssue({ code: 'custom', path: ['over'], message: `gives ${arms} arms: at most 64` });
  })
  .transform((s) => ({ ...s, arms: armsOf(s.over, s.samples, s.seed) as SweepArm[] }));

export type SweepSpec = z.output<typeof SweepSpecSchema>;
