import { z } from 'zod';
import { abilitiesOf, billingOf, DIALECTS } from '../rules/dialects';
import {
  DEFAULT_ROUND_KIND,
  GATE_METRIC_NAMES,
  ROUND_KIND,
  ROUND_KINDS,
  optionsOf,
  type GateMetric,
  type NeededAbility,
} from '../rules/round-kinds';
import { PYTHON_CALL_DEFAULTS } from '../rules/python-defaults';
import { generatorReplicasProblem } from '../rules/trainer-shape';
import { seedProblem } from '../rules/sampling';

/**
 * The blocks a campaign spec is made of (spec.ts puts them together): each with its defaults. Every field is
 * documented in the README's spec reference.
 */

const positiveInt = z.number().int().min(1);

/** Why a value is not a share in [0, 1], if it is not; a percentage such as `60` is shown as the fraction meant. */
function fractionProblem(value: number): string | undefined {
  if (value >= 0 && value <= 1) return undefined;
  return value > 1 && value <= 100 ? `is a fraction: ${value / 100} (not ${value}%)` : `is a fraction between 0 and 1 (it is ${value})`;
}

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

/**
 * How Baseten Loops creates the round's run (docs.baseten.co, `CreateLoopsRunRequest`): `spot` runs on reclaimable
 * capacity and "cannot be resumed" once its GPUs are reclaimed, so the round recovers on a new run from its last
 * checkpoint; a run with more than one replica never reuses a warm run; a spot run reuses only a spot one.
 */
export const BasetenRunSpecSchema = z
  .object({
    availabilityModel: z.enum(['dedicated', 'spot']).default('dedicated'),
    /** Data-parallel trainer replicas (the service documents ≥ 1 and no maximum; 64 is ours). */
    replicas: z.number().int().min(1).max(64).default(1),
    /** A prior run of the same base model and team whose warm trainer (and sampler) the new run may reuse. */
    reuseFromRunId: z.string().trim().min(1).max(255).optional(),
    /** Idle seconds before the run scales to zero: the service takes 1 to 3600. */
    scaleDownDelaySeconds: z.number().int().min(1).max(3600).default(900),
  })
  .strict();

export const ProviderSpecSchema = z
  .object({
    kind: z.enum(DIALECTS),
    /** Omitted for `local`: the worker's own emulator. */
    baseUrl: z.url({ protocol: /^https?$/ }).optional(),
    model: z.string().min(1),
    /** A folder or tokenizer.json to tokenise with, when the model's tokenizer is not bundled or cached. */
    tokenizer: z.string().min(1).optional(),
    /**
     * Generator (sampler) replicas to provision. Unset: 1 where the round samples, 0 (a trainer-only resource, no idle
     * generator billed) where it never does: dpo, and sft with `evaluation.sampleAnswers: false`. 0 is refused for a
     * round that samples.
     */
    generatorReplicas: z.number().int().min(0).max(16).optional(),
    /** Provider-side auto-stop after this much idleness: a safety net behind the reaper. */
    inactiveTimeoutSeconds: z.number().int().min(300).max(86_400).default(1800),
    /**
     * What the provider charges per million tokens (USD), for a provider that bills tokens (Tinker): the round's
     * estimated cost is its counted tokens at these prices. Take them from the provider's price list for the model.
     */
    tokenPrices: z
      .object({ prefill: z.number().min(0).max(1000), sample: z.number().min(0).max(1000), train: z.number().min(0).max(1000) })
      .strict()
      .optional(),
    /** Baseten Loops' run settings (its `CreateLoopsRunRequest`); only with kind baseten. Absent: the service's defaults. */
    baseten: BasetenRunSpecSchema.optional(),
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

/** A call to the user's function on a Python worker (python/: `python -m roundhouse worker my_env.py`). */
export const PythonRetrySchema = z
  .object({
    /** Attempts of a batch in all (what earlier attempts recorded is kept): past them the step fails, never scores 0. */
    maxAttempts: positiveInt.max(100).default(PYTHON_CALL_DEFAULTS.retry.maxAttempts),
    initialIntervalSeconds: z.number().positive().max(3600).default(PYTHON_CALL_DEFAULTS.retry.initialIntervalSeconds),
    maxIntervalSeconds: z.number().positive().max(86_400).default(PYTHON_CALL_DEFAULTS.retry.maxIntervalSeconds),
    backoff: z.number().min(1).max(10).default(PYTHON_CALL_DEFAULTS.retry.backoff),
  })
  .strict();

/** A python call's fields as written (the bounds, no defaults): `rounds.nextData` takes them as they are. */
const pythonCallBounds = {
  /** The function's registered name (`@roundhouse.reward`, `@roundhouse.scorer`, `@roundhouse.data_policy`). */
  name: z.string().trim().min(1).max(200),
  /** The task queue the Python worker polls (`--task-queue`). */
  taskQueue: z.string().trim().min(1).max(200),
  retry: PythonRetrySchema,
  /** One attempt's bound for a batch (a slow judge over many samples needs more). */
  timeoutSeconds: positiveInt.max(86_400),
  /** A Python worker that dies mid-batch is noticed after this long; the retry computes only what was not recorded. */
  heartbeatTimeoutSeconds: positiveInt.max(600),
  /** How long a call waits for a Python worker to take it (the check before provisioning, and every batch). */
  workerWaitSeconds: positiveInt.max(86_400),
  /** Samples scored at once on the worker (async functions concurrently; sync ones in threads). */
  concurrency: positiveInt.max(256),
};

const pythonCallFields = {
  name: pythonCallBounds.name,
  taskQueue: pythonCallBounds.taskQueue,
  retry: pythonCallBounds.retry.default(PYTHON_CALL_DEFAULTS.retry),
  timeoutSeconds: pythonCallBounds.timeoutSeconds.default(PYTHON_CALL_DEFAULTS.timeoutSeconds),
  heartbeatTimeoutSeconds: pythonCallBounds.heartbeatTimeoutSeconds.default(PYTHON_CALL_DEFAULTS.heartbeatTimeoutSeconds),
  workerWaitSeconds: pythonCallBounds.workerWaitSeconds.default(PYTHON_CALL_DEFAULTS.workerWaitSeconds),
  concurrency: pythonCallBounds.concurrency.default(PYTHON_CALL_DEFAULTS.concurrency),
};

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
    loss: PolicyLossSpecSchema.default({ type: 'grpo', beta: 0 }),
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

export const RoundKindSpecSchema = z
  .object({
    /** sft: supervised (cross-entropy on answers); grpo: sampled groups + rewards + policy-gradient loss; dpo: preference pairs. */
    kind: z.enum(ROUND_KINDS).default(DEFAULT_ROUND_KIND),
    grpo: GrpoSpecSchema.optional(),
    dpo: DpoSpecSchema.optional(),
  })
  .strict();

export const RoundsSpecSchema = z
  .object({
    max: positiveInt.max(1000).default(1),
    target: z
      .object({
        metric: z.enum(['accuracy']),
        atLeast: z.number().superRefine((v, ctx) => {
          const problem = fractionProblem(v);
          if (problem) ctx.addIssue({ code: 'custom', message: problem });
        }),
      })
      .strict()
      .optional(),
    nextData: z
      .object({
        policy: z.enum(['mistakes', 'all', 'static', 'python']).default('mistakes'),
        /** Share of the next training set drawn from rows the last round got right. */
        replayShare: z.number().min(0).max(1).default(0.3),
        // `policy: python`: a data policy registered on a Python worker, `(pool rows, last round's results) → rows`.
        name: pythonCallBounds.name.optional(),
        taskQueue: pythonCallBounds.taskQueue.optional(),
        retry: pythonCallBounds.retry.optional(),
        timeoutSeconds: pythonCallBounds.timeoutSeconds.optional(),
        heartbeatTimeoutSeconds: pythonCallBounds.heartbeatTimeoutSeconds.optional(),
        workerWaitSeconds: pythonCallBounds.workerWaitSeconds.optional(),
      })
      .strict()
      .superRefine((n, ctx) => {
        const python = ['name', 'taskQueue', 'retry', 'timeoutSeconds', 'heartbeatTimeoutSeconds', 'workerWaitSeconds'] as const;
        if (n.policy === 'python') {
          for (const field of ['name', 'taskQueue'] as const)
            if (!n[field]) ctx.addIssue({ code: 'custom', path: [field], message: 'is required when policy is python' });
        } else {
          for (const field of python)
            if (n[field] !== undefined) ctx.addIssue({ code: 'custom', path: [field], message: 'is only for policy: python' });
        }
      })
      .default({ policy: 'mistakes', replayShare: 0.3 }),
    /** Round N+1 starts from round N's training checkpoint with optimizer state, or fresh from the base model. */
    continueFrom: z.enum(['checkpoint', 'base']).default('checkpoint'),
    /**
     * The campaign's starting point instead of the bare base model: a training checkpoint (e.g. an SFT round's
     * `training_checkpoint_id` to warm-start GRPO or DPO). Weights only unless `loadOptimizer`.
     */
    startFrom: z
      .object({ checkpointId: z.string().min(1), loadOptimizer: z.boolean().default(false) })
      .strict()
      .optional(),
  })
  .strict();

export const BudgetSpecSchema = z
  .object({
    maxGpuMinutes: z.number().positive().optional(),
    maxWallMinutes: z.number().positive().optional(),
  })
  .strict();

export const AdvancedSpecSchema = z
  .object({
    /** A worker that dies is noticed after this long (the training heartbeat timeout). */
    heartbeatTimeoutSeconds: z.number().int().min(1).max(600).default(30),
    /** Give up waiting for a resource to become ready after this long. */
    provisionTimeoutMinutes: z
      .number()
      .positive()
      .max(24 * 60)
      .default(60),
    /** Recoveries from provider-side failures (a failed step, a lost session or trainer) before the round fails. */
    maxRecoveries: z.number().int().min(0).max(100).default(5),
  })
  .strict();

/**
 * Experiment tracking. MLflow: the campaign is a run, each round a nested run, logged from the durable records.
 * The server is `uri` or the worker's MLFLOW_TRACKING_URI; credentials only ever come from the worker's environment
 * (MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD), never from a spec.
 */
export const TrackingSpecSchema = z
  .object({
    mlflow: z
      .object({
        uri: z
          .string()
          .url()
          .refine((u) => /^https?:\/\//.test(u), 'must be an http(s) URL of the tracking server')
          .refine(
            (u) => !/^https?:\/\/[^/]*@/.test(u),
            'must not carry credentials: set MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/PASSWORD on the worker',
          )
          .optional(),
        /** The MLflow experiment (made if missing); default: the campaign's name. */
        experiment: z.string().min(1).max(500).optional(),
      })
      .strict()
      .optional(),
    /**
     * Weights & Biases, through the provider's own integration: Together's training sessions carry
     * `metadata.wandb {project, entity, group, run_name}` (labels that tie the session to a W&B run). No API key is
     * sent or needed; Baseten Loops' API takes no W&B settings (its SDK logs to W&B from the client).
     */
    wandb: z
      .object({
        project: z.string().min(1).max(128),
        entity: z.string().min(1).max(128).optional(),
        /** Default: the campaign id, so a campaign's rounds group together. */
        group: z.string().min(1).max(128).optional(),
        /** Default: the round's workflow id. */
        runName: z.string().min(1).max(128).optional(),
      })
      .strict()
      .optional(),
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

const DURATION = /^\d+(\.\d+)?(s|m|h|d)$/;
const SECONDS_PER_UNIT = { s: 1, m: 60, h: 3600, d: 86_400 };

/** `72h`, `30m`, `45s`, `2d` in seconds (unrounded). */
function durationSeconds(d: string): number {
  return Number(d.slice(0, -1)) * SECONDS_PER_UNIT[d.slice(-1) as keyof typeof SECONDS_PER_UNIT];
}

/** `72h`, `30m`, `45s`, `2d`: a duration, in milliseconds. */
const durationMs = z
  .string()
  .regex(DURATION, 'a duration such as 45s, 30m, 72h or 7d')
  .transform((d) => Math.round(durationSeconds(d) * 1000))
  .refine((ms) => ms >= 1_000 && ms <= 365 * 86_400_000, 'between 1s and 365d');

/**
 * A Tinker checkpoint's TTL, in seconds: a number of seconds or a duration (`1h`, `30d`). Tinker's SDK documents
 * "between 1 hour (3600) and 10 years"; "the service refuses less" is #44's wording (the SDK checks nothing), so it
 * is refused here, before anything runs.
 */
const checkpointTtlSeconds = z
  .union([
    z.number().int(),
    z
      .string()
      .regex(DURATION, 'seconds, or a duration such as 1h, 72h or 30d')
      .transform((d) => Math.round(durationSeconds(d))),
  ])
  .refine((s) => s >= 3600, "is below Tinker's minimum checkpoint TTL of 3600 s (1h)")
  .refine((s) => s <= 10 * 365 * 86_400, "is above Tinker's maximum checkpoint TTL of 10 years");

/**
 * Champion and challenger: at the end of a completed campaign its best round (by eval) is the challenger of the model
 * line `line`; it replaces the line's champion only when its accuracy on `on` beats the champion's on the same rows by
 * `minGain` (the champion is re-scored when its figures are for other data). `approval: manual` waits for
 * `roundhouse approve`/`reject` (at most `approvalTimeout`, then rejects).
 */
export const PromotionSpecSchema = z
  .object({
    line: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/, 'letters, digits, dot, dash and underscore; at most 100 characters'),
    metric: z.literal('accuracy').default('accuracy'),
    /** The set both are compared on: `test` (the default when data.test is set) or `eval`. */
    on: z.enum(['test', 'eval']).optional(),
    /** How much the challenger must beat the champion by (absolute, in accuracy). */
    minGain: z.number().min(0).max(1).default(0),
    approval: z.enum(['auto', 'manual']).default('auto'),
    /** How long a manual approval may wait before the challenger is rejected (parsed to milliseconds; default 72h). */
    approvalTimeout: durationMs.default(72 * 3_600_000),
  })
  .strict();

/** What a campaign can tell a webhook (`notify.events`). */
export const NOTIFY_EVENTS = [
  'campaign.completed',
  'campaign.failed',
  'campaign.stopped',
  'promotion.pending',
  'promotion.promoted',
  'promotion.rejected',
  'promotion.kept',
  /** A scheduled run skipped because the previous one still runs (told by the reaper's pass, once per skip count). */
  'schedule.skipped',
  /** A round has waited for the provider's capacity longer than `capacityWaitMinutes` (once per round). */
  'capacity.waiting',
] as const;
export type NotifyEvent = (typeof NOTIFY_EVENTS)[number];

const envName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'the name of an environment variable of the worker');

/**
 * Notifications: each event POSTed to a webhook at least once, with an `Idempotency-Key` (the campaign and the event)
 * so the receiver drops repeats, retried with backoff by a workflow of its own (a dead endpoint never holds or fails
 * the campaign), signed with HMAC-SHA256 of the body when the worker has the secret (`secretEnv`).
 */
export const NotifySpecSchema = z
  .object({
    /** The endpoint, when its URL is no secret... */
    webhook: z.url({ protocol: /^https?$/ }).optional(),
    /** ...or the worker's environment variable holding it (a Slack incoming-webhook URL is a secret). */
    webhookEnv: envName.optional(),
    events: z
      .array(z.enum(NOTIFY_EVENTS))
      .min(1)
      .default([...NOTIFY_EVENTS]),
    /** `json`: `{id, type, campaignId, at, text, data}`; `slack`: `{text}` (Slack's incoming webhooks). */
    format: z.enum(['json', 'slack']).default('json'),
    /**
     * The worker's environment variable holding the HMAC key (`X-Roundhouse-Signature: sha256=<hex>`). Named here, it
     * must be set on the worker (checked before the first round); unset, ROUNDHOUSE_WEBHOOK_SECRET signs when present.
     */
    secretEnv: envName.optional(),
    /** `capacity.waiting`: told once a round has waited this long for the provider's GPUs. */
    capacityWaitMinutes: z.number().positive().max(10_080).default(30),
  })
  .strict()
  .refine((n) => (n.webhook === undefined) !== (n.webhookEnv === undefined), {
    message: 'needs exactly one of webhook (a URL) and webhookEnv (the worker variable holding it)',
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
  })
  .strict();

export const CampaignSpecSchema = CampaignSpecBase.superRefine(roundKindProblems);

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
  // The policy loss's options against the dialect (round.grpo, when the round's kind reads them).
  const grpo = optionsOf(spec.round, 'grpo');
  if (grpo) {
    if (spec.provider.kind === 'baseten' && grpo.reference) {
      problem(
        ['round', 'grpo', 'reference'],
        "is not available on Baseten Loops: a run is one session, and opening a reference session re-initializes the run and loads the reference state over the policy's weights and optimizer state; remove it (a KL penalty needs the together dialect)",
      );
    }
    if ((spec.provider.kind === 'baseten' || spec.provider.kind === 'tinker') && grpo.loss.type === 'grpo') {
      problem(
        ['round', 'grpo', 'loss', 'type'],
        `${spec.provider.kind === 'baseten' ? 'Baseten Loops' : 'Tinker'} has no grpo loss: use ppo or importance_sampling (advantages are group-centred either way)`,
      );
    }
  }
  const seed = seedProblem(spec);
  if (seed) problem(['sampling', 'seed'], seed);
  if (spec.promotion?.on === 'test' && !spec.data.test)
    problem(['promotion', 'on'], 'is test, but the campaign has no data.test: add a held-out test set, or compare on eval');
  if (spec.tracking?.wandb && spec.provider.kind === 'baseten')
    problem(
      ['tracking', 'wandb'],
      'is not available on Baseten Loops: its API takes no W&B settings (the baseten-loops SDK starts the W&B run on the client); use tracking.mlflow, or the together dialect',
    );
  if (spec.provider.tokenPrices && billingOf(spec.provider.kind) !== 'tokens')
    problem(
      ['provider', 'tokenPrices'],
      `is for a provider that bills tokens (tinker); ${spec.provider.kind} bills GPU time, whose price the provider quotes`,
    );
  if (spec.provider.baseten && spec.provider.kind !== 'baseten')
    problem(['provider', 'baseten'], `is for kind baseten (Baseten Loops' run settings); this provider is ${spec.provider.kind}`);
  if (spec.provider.baseten?.reuseFromRunId && spec.provider.baseten.replicas > 1)
    problem(
      ['provider', 'baseten', 'reuseFromRunId'],
      `is not used when provider.baseten.replicas is ${spec.provider.baseten.replicas}: a run of more than one replica always starts new deployments; remove one`,
    );
  if (spec.retention?.ttl !== undefined && spec.provider.kind !== 'tinker')
    problem(['retention', 'ttl'], `is a Tinker checkpoint TTL; ${spec.provider.kind}'s API takes none`);
  if (spec.tracking?.wandb && spec.provider.kind === 'tinker')
    problem(
      ['tracking', 'wandb'],
      'is not available on Tinker: its API takes no W&B settings; use tracking.mlflow, or the together dialect',
    );
  const generatorProblem = generatorReplicasProblem(spec);
  if (generatorProblem) problem(['provider', 'generatorReplicas'], generatorProblem);
  sampleAnswersProblems(spec, problem);
  const { earlyStop, sampleEvery } = spec.evaluation;
  if (descriptor.samples !== 'never' && earlyStop?.on === 'metric' && sampleEvery === undefined)
    problem(['evaluation', 'earlyStop', 'on'], 'metric needs evaluation.sampleEvery: the metric is measured from sampled answers');
  // The dialect abilities the kind needs (config/rules/round-kinds.ts `needs`).
  const abilities = abilitiesOf(spec.provider.kind);
  for (const [ability, what] of Object.entries(descriptor.needs) as [NeededAbility, string][])
    if (!abilities[ability]) problem(['round', 'kind'], `${kind} ${what}, which ${abilities.name} does not offer`);
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

export type TrainingSpec = z.infer<typeof TrainingSpecSchema>;
export type SamplingSpec = z.infer<typeof SamplingSpecSchema>;
export type EvaluationSpec = z.infer<typeof EvaluationSpecSchema>;
export type ProviderSpec = z.infer<typeof ProviderSpecSchema>;
export type RoundKindSpec = z.infer<typeof RoundKindSpecSchema>;
export type RoundsSpec = z.infer<typeof RoundsSpecSchema>;
export type GrpoSpec = z.infer<typeof GrpoSpecSchema>;
export type EnvironmentSpec = z.infer<typeof EnvironmentSpecSchema>;
export type DpoSpec = z.infer<typeof DpoSpecSchema>;
export type DataSpec = z.infer<typeof DataSpecSchema>;
export type GateSpec = z.infer<typeof GateSpecSchema>;
/** Input form (defaults optional): what `rewardFunction` takes. */
export type RewardSpec = z.input<typeof RewardSpecSchema>;
export type LrSchedule = z.infer<typeof LrScheduleSchema>;
