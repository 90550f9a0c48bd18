import { z } from 'zod';
import { DEFAULT_ROUND_KIND, GATE_METRIC_NAMES, ROUND_KIND, ROUND_KINDS, type GateMetric } from '../rules/round-kinds';
import { generatorReplicasProblem } from '../rules/trainer-shape';
import { seedProblem } from '../rules/sampling';
import {
  AdvancedSpecSchema,
  BudgetSpecSchema,
  NotifySpecSchema,
  PromotionSpecSchema,
  RoundsSpecSchema,
  TrackingSpecSchema,
} from './spec-campaign';
import { dialectProblems } from './spec-dialect-checks';
import { SweepSpecSchema } from './spec-sweep';
import { EvaluationSpecSchema } from './spec-evaluation';
import {
  checkpointTtlSeconds,
  fractionProblem,
  positiveInt,
  optionalPythonCallFields,
  pythonCallBounds,
  pythonCallFields,
} from './spec-fields';
import { ProviderSpecSchema } from './spec-provider';
import { DataSpecSchema, SamplingSpecSchema, TrainingSpecSchema } from './spec-training';

/**
 * The blocks a campaign spec is made of, put together (spec.ts adds stages), with what each round kind needs from
 * the rest. The blocks themselves: spec-provider.ts, spec-training.ts, spec-evaluation.ts, spec-campaign.ts; here
 * the round kinds' blocks and the stage gate. Every field is documented in the README's spec reference.
 */

export const RewardSpecSchema = z.discriminatedUnion('kind', [
  z
    .object({
      kind: z.enum(['exact', 'contains', 'regex']),
      /** For `regex`: `{answer}` is replaced by the escaped expected answer. */
      pattern: z.string().optional(),
      caseSensitive: z.boolean().default(false),
      normalizeWhitespace: z.boolean().default(true),
    })
    .strict(),
  z.object({ kind: z.literal('numeric'), tolerance: z.number().min(0).default(1e-6) }).strict(),
  /** A CommonJS module (path relative to the spec) exporting `reward(completion, answer, prompt) → number`. */
  z.object({ kind: z.literal('module'), path: z.string().min(1), export: z.string().min(1).default('reward') }).strict(),
  /** A reward registered on a Python worker: `(completion, answer, prompt, row) → float`, durable and exactly once. */
  z.object({ kind: z.literal('python'), ...pythonCallFields }).strict(),
]);

export const PolicyLossSpecSchema = z
  .object({
    /**
     * `python`: your own loss function (`@roundhouse.loss`, on a Python worker, named by `name` and `taskQueue`)
     * instead of the built-in `type`, on the sampled completions with their advantages and sampler logprobs; trained
     * through the dialect's custom-loss pass.
     */
    kind: z.enum(['builtin', 'python']).default('builtin'),
    ...optionalPythonCallFields,
    type: z.enum(['grpo', 'ppo', 'importance_sampling']).default('grpo'),
    clipLow: z.number().min(0).max(1).optional(),
    clipHigh: z.number().min(1).optional(),
    /** KL penalty against the reference policy (grpo only); > 0 needs `round.grpo.reference`. */
    beta: z.number().min(0).default(0),
    aggregation: z.enum(['token_mean', 'sequence_mean', 'fixed_horizon']).optional(),
    ratio: z.enum(['token', 'sequence']).optional(),
    /**
     * `importance_sampling` is unclipped: with `maxStepsOffPolicy` > 0 the round refuses it unless this is set (users
     * of unclipped importance sampling three steps off-policy saw the sampler–trainer KL grow ~30× and entropy
     * collapse). `ppo` clips the ratio (clipLow/clipHigh) and is what off-policy rounds should use.
     */
    allowUnclippedOffPolicy: z.boolean().optional(),
  })
  .strict();

/**
 * A multi-turn environment whose episodes run on a Python worker against the round's sampler gateway (an
 * OpenAI-compatible endpoint): `verifiers` loads `load_environment(**args)` from the installed module `name`
 * (PrimeIntellect's verifiers, its classic API); `python` calls a function registered with `@roundhouse.environment`,
 * `(client, prompt, answer, row) → reward`. The environment's rubric (or the function) gives each episode's reward.
 */
export const EnvironmentSpecSchema = z
  .object({
    kind: z.enum(['verifiers', 'python']),
    ...pythonCallFields,
    /**
     * Episodes played at once on the worker. Default: all of a step's (`batchSize × groupSize`): an episode mostly
     * waits on the sampler, and one turn of every episode fits in one sampling round of the trainer.
     */
    concurrency: pythonCallBounds.concurrency.optional(),
    /** `verifiers`: the keyword arguments of the module's `load_environment`. */
    args: z.record(z.string(), z.unknown()).default({}),
    /** An episode that asks for more model turns than this is refused its next completion (the gateway answers 400). */
    maxTurns: positiveInt.max(1000).default(32),
  })
  .strict();

export const GrpoSpecSchema = z
  .object({
    /** Completions sampled per prompt (one group); prompts per step is `training.batchSize`. */
    groupSize: z.number().int().min(2).max(64).default(4),
    /** Single-turn: each completion's reward. A round with an `environment` takes its rewards from it instead. */
    reward: RewardSpecSchema.optional(),
    /** Multi-turn: each group is `groupSize` episodes of this environment, on a Python worker. */
    environment: EnvironmentSpecSchema.optional(),
    loss: PolicyLossSpecSchema.default({ kind: 'builtin', type: 'grpo', beta: 0 }),
    /** Divide each group's centred rewards by its standard deviation. */
    normalizeAdvantages: z.boolean().default(false),
    /**
     * How many optimizer steps behind the trained policy the sampling may be: 0 samples every step after the
     * previous step's weights sync; k > 0 lets the sampling of the next k steps overlap this step's training.
     */
    maxStepsOffPolicy: z.number().int().min(0).max(8).default(0),
    /** The reference policy for the KL penalty: `start` = the round's starting weights (a frozen second session). */
    reference: z.enum(['start']).optional(),
  })
  .strict();

export const DpoSpecSchema = z
  .object({
    /** Strength of the preference (the β of DPO). */
    beta: z.number().positive().max(100).default(0.1),
  })
  .strict();

/**
 * A loss function the user wrote, registered on a Python worker with `@roundhouse.loss` (or `@roundhouse.loss.torch`):
 * `(batch) → (loss, d loss / d logprob per token, metrics)`, trained through the dialect's custom-loss pass.
 */
export const PythonLossSpecSchema = z.object({ kind: z.literal('python'), ...pythonCallFields }).strict();

export const CustomSpecSchema = z
  .object({
    /** The loss every step trains on, and the eval set is measured by (forward only). */
    loss: PythonLossSpecSchema,
    /**
     * `start`: the starting weights' logprobs of every train and eval completion, computed once before the first step
     * (kept beside the report), reach the loss function as each datum's `reference_logprobs` (DPO, KTO, a KL term).
     */
    reference: z.enum(['start']).optional(),
  })
  .strict();

export const RoundKindSpecSchema = z
  .object({
    /**
     * sft: supervised (cross-entropy on answers); grpo: sampled groups + rewards + policy-gradient loss; dpo: preference
     * pairs; custom: your own loss (Python) on rows of named completions.
     */
    kind: z.enum(ROUND_KINDS).default(DEFAULT_ROUND_KIND),
    grpo: GrpoSpecSchema.optional(),
    dpo: DpoSpecSchema.optional(),
    custom: CustomSpecSchema.optional(),
  })
  .strict();
export type { GateMetric };

/** What a stage must reach before the next one starts: a bound on one metric of its last round. */
export const GateSpecSchema = z
  .object({
    metric: z.enum(GATE_METRIC_NAMES),
    atLeast: z.number().optional(),
    atMost: z.number().optional(),
  })
  .strict()
  .superRefine((g, ctx) => {
    if ((g.atLeast === undefined) === (g.atMost === undefined))
      return ctx.addIssue({
        code: 'custom',
        path: [],
        message: 'needs exactly one bound: atLeast (accuracy, reward) or atMost (evalLoss)',
      });
    // A gate is a bar to clear: a loss from above, every other metric from below.
    const lower = g.metric === 'evalLoss';
    const wrong = lower ? 'atLeast' : 'atMost';
    if (g[wrong] !== undefined)
      return ctx.addIssue({
        code: 'custom',
        path: [wrong],
        message: `${g.metric} ${lower ? 'is lower when better: bound it with atMost' : 'is higher when better: bound it with atLeast'}`,
      });
    if (g.metric === 'accuracy' || g.metric === 'preferenceAccuracy') {
      const problem = fractionProblem(g.atLeast!);
      if (problem) ctx.addIssue({ code: 'custom', path: ['atLeast'], message: problem });
    }
    if (lower && g.atMost! <= 0) ctx.addIssue({ code: 'custom', path: ['atMost'], message: 'a loss is above 0: give a positive bound' });
  });

/** A campaign's spec (without `stages`: spec.ts adds them), and what each round kind needs from the rest. */
const CampaignSpecBase = z
  .object({
    name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/, 'letters, digits, dot, dash and underscore; at most 100 characters'),
    provider: ProviderSpecSchema,
    data: DataSpecSchema,
    training: TrainingSpecSchema,
    sampling: SamplingSpecSchema,
    evaluation: EvaluationSpecSchema.default({ scorer: 'exact', caseSensitive: false, normalizeWhitespace: true }),
    round: RoundKindSpecSchema.default({ kind: 'sft' }),
    rounds: RoundsSpecSchema.default({ max: 1, nextData: { policy: 'mistakes', replayShare: 0.3 }, continueFrom: 'checkpoint' }),
    budget: BudgetSpecSchema.default({}),
    advanced: AdvancedSpecSchema.default({ heartbeatTimeoutSeconds: 30, provisionTimeoutMinutes: 60, maxRecoveries: 5 }),
    tracking: TrackingSpecSchema.optional(),
    /**
     * Checkpoint retention, applied after each round: the final checkpoints of the best `keepBest` and the last
     * `keepLast` rounds are kept, the rest deleted at the provider where it has a delete call; never one that an open
     * or scheduled workflow starts from. Unset: nothing is deleted.
     */
    retention: z
      .object({
        /** Default 1 (config/rules/retention.ts deletionRuleOf); with only `ttl` set, nothing is deleted. */
        keepBest: z.number().int().min(0).max(100).optional(),
        /** Default 2. */
        keepLast: z.number().int().min(1).max(100).optional(),
        /** Tinker: how long each saved checkpoint lives at the provider, in seconds. Unset: it never expires. */
        ttl: checkpointTtlSeconds.optional(),
      })
      .strict()
      .optional(),
    promotion: PromotionSpecSchema.optional(),
    notify: NotifySpecSchema.optional(),
    sweep: SweepSpecSchema.optional(),
  })
  .strict();

/** A campaign's spec: what its dialect cannot do (spec-dialect-checks.ts), then what its round kind needs. */
export const CampaignSpecSchema = CampaignSpecBase.superRefine((spec, ctx) => {
  dialectProblems(spec, (path, message) => ctx.addIssue({ code: 'custom', path, message }));
  roundKindProblems(spec, ctx);
});

/** What the round kind needs from the rest of the spec: each problem names the field to change. */
function roundKindProblems(spec: z.infer<typeof CampaignSpecBase>, ctx: z.RefinementCtx): void {
  const problem = (path: (string | number)[], message: string) => ctx.addIssue({ code: 'custom', path, message });
  const { kind } = spec.round;
  const descriptor = ROUND_KIND[kind];
  for (const other of ROUND_KINDS) {
    const options = ROUND_KIND[other].options;
    if (options && other !== kind && spec.round[options])
      problem(['round', options], `is only used when round.kind is ${other} (it is ${kind})`);
  }
  if (descriptor.specProblems(spec, problem) === 'stop') return;
  const seed = seedProblem(spec);
  if (seed) problem(['sampling', 'seed'], seed);
  if (spec.promotion?.on === 'test' && !spec.data.test)
    problem(['promotion', 'on'], 'is test, but the campaign has no data.test: add a held-out test set, or compare on eval');
  if (spec.provider.baseten?.reuseFromRunId && spec.provider.baseten.replicas > 1)
    problem(
      ['provider', 'baseten', 'reuseFromRunId'],
      `is not used when provider.baseten.replicas is ${spec.provider.baseten.replicas}: a run of more than one replica always starts new deployments; remove one`,
    );
  const generatorProblem = generatorReplicasProblem(spec);
  if (generatorProblem) problem(['provider', 'generatorReplicas'], generatorProblem);
  sampleAnswersProblems(spec, problem);
  const { earlyStop, sampleEvery } = spec.evaluation;
  if (descriptor.samples !== 'never' && earlyStop?.on === 'metric' && sampleEvery === undefined)
    problem(['evaluation', 'earlyStop', 'on'], 'metric needs evaluation.sampleEvery: the metric is measured from sampled answers');
}

/**
 * `evaluation.sampleAnswers: false` (on a kind whose only sampling is its evaluation's answers) leaves nothing that
 * needs sampled answers; the kinds that always or never sample refuse the field themselves.
 */
function sampleAnswersProblems(
  spec: z.infer<typeof CampaignSpecBase>,
  problem: (path: (string | number)[], message: string) => void,
): void {
  if (spec.evaluation.sampleAnswers !== false || ROUND_KIND[spec.round.kind].samples !== 'answers') return;
  const needs = (path: string[], what: string) => problem(path, `${what}, and evaluation.sampleAnswers is false: remove one of them`);
  if (spec.data.test) needs(['data', 'test'], 'is scored by sampled answers');
  if (spec.evaluation.sampleEvery !== undefined) needs(['evaluation', 'sampleEvery'], 'samples the eval set during training');
  if (spec.rounds.target) needs(['rounds', 'target'], 'is an accuracy, measured from sampled answers');
  const policy = spec.rounds.nextData.policy;
  if (spec.rounds.max > 1 && (policy === 'mistakes' || policy === 'python'))
    needs(['rounds', 'nextData', 'policy'], `${policy} chooses the next round's rows by the pool's sampled answers`);
  if (spec.promotion) needs(['promotion'], 'compares the accuracy of sampled answers');
}

export type RoundKindSpec = z.infer<typeof RoundKindSpecSchema>;
export type GrpoSpec = z.infer<typeof GrpoSpecSchema>;
export type EnvironmentSpec = z.infer<typeof EnvironmentSpecSchema>;
export type DpoSpec = z.infer<typeof DpoSpecSchema>;
export type CustomSpec = z.infer<typeof CustomSpecSchema>;
export type GateSpec = z.infer<typeof GateSpecSchema>;
/** Input form (defaults optional): what `rewardFunction` takes. */
export type RewardSpec = z.input<typeof RewardSpecSchema>;
