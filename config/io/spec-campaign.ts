import { z } from 'zod';
import { durationMs, fractionProblem, optionalPythonCallFields, positiveInt } from './spec-fields';

/** The campaign-wide blocks: how rounds follow each other, budget, advanced settings, tracking, promotion, notify. */

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
        ...optionalPythonCallFields,
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

const TokenPricesSchema = z
  .object({ prefill: z.number().min(0).max(1000), sample: z.number().min(0).max(1000), train: z.number().min(0).max(1000) })
  .strict();

export const BudgetSpecSchema = z
  .object({
    maxGpuMinutes: z.number().positive().optional(),
    maxWallMinutes: z.number().positive().optional(),
    /**
     * Dollars the campaign may spend, checked before each unit of work is issued (docs/design/budget.md): a round
     * that would cross it stops cleanly (`stopped`, "dollar budget reached"), and a campaign whose cheapest round
     * costs more is refused before anything is provisioned.
     */
    maxUsd: z.number().positive().max(10_000_000).optional(),
    /**
     * Negotiated rates over the documented defaults (config/rules/prices.ts): `gpuHour` (USD per GPU-hour) where the
     * provider bills GPU time, `tokens` (USD per million) where it bills tokens.
     */
    prices: z
      .object({ gpuHour: z.number().positive().max(10_000).optional(), tokens: TokenPricesSchema.optional() })
      .strict()
      .optional(),
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

export type RoundsSpec = z.infer<typeof RoundsSpecSchema>;
