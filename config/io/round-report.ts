import { z } from 'zod';
import { readText } from './artifacts';

/**
 * A round's report (`round-N.json`, config/rules/round-files.ts), written once per round by the report activity and
 * read by the campaign report, `roundhouse checkpoints`, promotion and the experiment tracker. One schema for both
 * sides: the writer is typed by what parsing gives (`RoundReport`), every reader parses. The fields without a default
 * were in the first reports; those added since default (null, [] or absent), so every older campaign's reports parse.
 */

const nullableNumber = z.number().nullable();
/** A nullable field added later: null in reports written before it. */
const addedNullable = <T extends z.ZodType>(schema: T) => schema.nullable().default(null);
/** A list added later: empty in reports written before it. */
const addedList = <T extends z.ZodType>(item: T) => z.array(item).default([]);

/** A checkpoint the round saved, as `roundhouse checkpoints` lists it (activities/checkpoints.ts). */
export const CheckpointEntrySchema = z.object({
  round: z.number(),
  kind: z.enum(['training', 'sampler']),
  checkpoint_id: z.string(),
  step: z.number(),
  lineage: z.number().optional(),
  /** The round's last checkpoint of its kind (evaluated: the metric and eval loss are its). */
  final: z.boolean(),
  metric: nullableNumber.optional(),
  eval_loss: nullableNumber.optional(),
  /** `data.test`: the final weights' test figure (shown beside the metric; never compared). */
  test_metric: nullableNumber.optional(),
});
export type CheckpointEntry = z.infer<typeof CheckpointEntrySchema>;

const SampledAnswerSchema = z.object({ completion: z.string(), match: z.boolean(), score: nullableNumber.optional() });

/**
 * One eval row as scored: sampled (SFT, GRPO: `expected`, `completion`, a Python scorer's `score`; with n > 1 every
 * answer in `samples` and how many were right) or measured (DPO: `chosen`, `rejected`, `margin`, `loss`).
 */
const EvaluationRowSchema = z.object({
  line: z.number(),
  prompt: z.string(),
  match: z.boolean(),
  expected: z.string().optional(),
  completion: z.string().optional(),
  score: nullableNumber.optional(),
  samples: z.array(SampledAnswerSchema).optional(),
  correct: z.number().optional(),
  chosen: z.string().optional(),
  rejected: z.string().optional(),
  margin: z.number().optional(),
  loss: z.number().optional(),
});

/** A confirmed step (activities/step-records.ts): GRPO adds `meanReward`, DPO `margin` and `accuracy`. */
const StepRowSchema = z.object({
  step: z.number(),
  loss: z.number(),
  tokens: z.number(),
  lossPerToken: z.number().optional(),
  lineage: z.number().optional(),
  at: z.number().optional(),
  meanReward: z.number().optional(),
  margin: z.number().optional(),
  accuracy: z.number().optional(),
  /** Custom rounds: the loss function's named metrics for the step. */
  metrics: z.record(z.string(), z.number()).optional(),
});

export const RoundReportSchema = z.object({
  campaign_id: z.string(),
  round: z.number(),
  name: z.string(),
  workflow_id: z.string(),
  run_id: z.string(),
  provider: z.string(),
  base_model: z.string(),
  resource_id: z.string().nullable(),
  session_id: z.string().nullable(),
  train_path: z.string(),
  eval_path: z.string(),
  train_sha256: z.string(),
  eval_sha256: z.string(),
  started_from_checkpoint: z.string().nullable(),
  baseline_loss: nullableNumber,
  trained_loss: nullableNumber,
  /** Absent in the first reports, which were all SFT. */
  kind: z.string().default('sft'),
  loss_unit: z.string(),
  first_reward: addedNullable(z.number()),
  latest_reward: addedNullable(z.number()),
  baseline_preference_accuracy: addedNullable(z.number()),
  baseline_margin: addedNullable(z.number()),
  trained_margin: addedNullable(z.number()),
  accuracy: nullableNumber,
  /** Custom rounds: the loss function's named metrics on the eval set before and after training. */
  loss_metrics: addedNullable(
    z.object({ baseline: z.record(z.string(), z.number()).nullable(), trained: z.record(z.string(), z.number()).nullable() }),
  ),
  /** Sampled rounds with evaluation.sampling.n > 1: pass@n beside `accuracy` (pass@1). */
  pass_at_k: addedNullable(z.object({ k: z.number(), value: z.number() })),
  pool_accuracy: addedNullable(z.number()),
  /** `data.test`: the final weights on the held-out test set. */
  test_path: addedNullable(z.string()),
  test: addedNullable(
    z.object({ accuracy: z.number(), rows: z.number(), sha256: z.string().nullable(), evaluations_path: z.string().nullable() }),
  ),
  training_checkpoint_id: z.string().nullable(),
  sampler_checkpoint_id: z.string().nullable(),
  steps_applied: z.number(),
  steps_planned: z.number(),
  gpu_minutes: z.number(),
  /** Tokens the round processed (what a per-token biller charges), and how its cost was estimated. */
  tokens: addedNullable(z.object({ prefill: z.number(), sample: z.number(), train: z.number() })),
  /** Absent in reports written before billing was recorded. */
  billing: z.enum(['gpu-time', 'tokens']).optional(),
  estimated_cost_usd: addedNullable(z.number()),
  /**
   * `budget.maxUsd`: what the round could spend, what it spent (settled from the tokens processed or the GPU time
   * held), the sum of the estimates its units of work were admitted on and their difference, and how it was priced.
   */
  budget: addedNullable(
    z.object({
      max_usd: z.number(),
      spent_usd: z.number(),
      estimated_usd: z.number(),
      estimate_error_usd: z.number(),
      billing: z.enum(['gpu-time', 'tokens']),
      price_source: z.string(),
      usd_per_hour: z.number().nullable(),
      usd_per_million_tokens: z.object({ prefill: z.number(), sample: z.number(), train: z.number() }).nullable(),
    }),
  ),
  status: z.string(),
  stop_reason: addedNullable(z.string()),
  error_type: z.string().nullable(),
  error_message: z.string().nullable(),
  cleanup_status: z.string(),
  /** The Python worker's code sandbox, when the round called one. */
  sandbox: addedNullable(z.string()),
  /** Recoveries from provider-side failures (rolled back to a checkpoint). */
  recoveries: addedList(
    z.object({
      phase: z.string(),
      error_type: z.string(),
      code: z.string().nullable(),
      message: z.string(),
      failed_at_step: z.number(),
      rolled_back_to: z.number(),
      steps_rolled_back: z.number(),
      new_trainer: z.boolean(),
      lineage: z.number(),
      gpu_minutes_lost: z.number(),
      checkpoint_id: z.string().nullable().default(null),
    }),
  ),
  /** Evaluations during training (`evaluation.every`). */
  evaluation_curve: addedList(
    z.object({
      step: z.number(),
      loss: z.number(),
      metric: nullableNumber,
      margin: z.number().optional(),
      lineage: z.number().optional(),
      checkpoint_id: z.string().nullable(),
    }),
  ),
  /** Where an early stop ended the round, and the best evaluation it finished from. */
  early_stop: addedNullable(
    z.object({
      on: z.enum(['loss', 'metric']),
      stopped_at_step: z.number(),
      best_step: z.number(),
      best_value: z.number(),
      best_checkpoint_id: z.string(),
      patience: z.number(),
    }),
  ),
  rolling_checkpoints: addedList(z.object({ checkpoint_id: z.string(), step: z.number(), lineage: z.number().optional() })),
  capacity_waits: addedList(z.object({ creates: z.number(), waited_minutes: z.number() })),
  deactivated_ids: z.array(z.string()),
  /** Every checkpoint the round saved; absent in reports written before checkpoints were records (derived then). */
  checkpoints: z.array(CheckpointEntrySchema).optional(),
  /** The final weights' eval rows, from the evaluations file. */
  evaluations: z.array(EvaluationRowSchema),
  /** The kept weights' step records, in step order. */
  steps: z.array(StepRowSchema),
});

/** A round report as read (older reports' missing fields filled in) and as the report activity writes it. */
export type RoundReport = z.infer<typeof RoundReportSchema>;

/** What the round workflow knows of its report; the report activity merges in checkpoints, evaluations and steps. */
export type RoundReportFields = Omit<RoundReport, 'checkpoints' | 'evaluations' | 'steps'>;

/** A round report that does not parse: names the file and the field. */
export class RoundReportError extends Error {
  readonly code = 'ROUND_REPORT_INVALID';
  constructor(
    readonly file: string,
    readonly field: string | undefined,
    problem: string,
  ) {
    super(`${file}: ${field ? `${field}: ` : ''}${problem}`);
    this.name = 'RoundReportError';
  }
}

/** `evaluation_curve[2].step` */
function fieldOf(path: readonly PropertyKey[]): string {
  return path.reduce<string>((s, p) => (typeof p === 'number' ? `${s}[${p}]` : s ? `${s}.${String(p)}` : String(p)), '');
}

/** A report's contents, parsed; `file` names it in the error. */
export function parseRoundReport(file: string, raw: unknown): RoundReport {
  const parsed = RoundReportSchema.safeParse(raw);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0]!;
  return failReport(file, issue.path.length ? fieldOf(issue.path) : undefined, issue.message);
}

function failReport(file: string, field: string | undefined, problem: string): never {
  throw new RoundReportError(file, field, problem);
}

/** The round report at `location` (any store), parsed; undefined when there is none. */
export async function readRoundReport(location: string): Promise<RoundReport | undefined> {
  const text = await readText(location);
  if (text === undefined) return undefined;
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return failReport(location, undefined, `not JSON: ${(err as Error).message}`);
  }
  return parseRoundReport(location, raw);
}
