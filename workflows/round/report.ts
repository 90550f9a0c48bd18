import { workflowInfo } from '@temporalio/workflow';
import { billingOf } from '../../config/rules/dialects';
import { DEFAULT_ROUND_KIND, ROUND_KIND } from '../../config/rules/round-kinds';
import type { RoundInput, RoundProgress, RoundResult } from './contract';
import type { RoundReportFields } from '../../config/io/round-report';

/** The round's report (round-N.json) as the workflow knows it; the report activity merges in checkpoints, evaluations and steps. */
export function roundReport(
  input: RoundInput,
  result: RoundResult,
  data: { train: string; eval: string; trainSha256: string; evalSha256: string; test?: string },
  progress: RoundProgress,
  released: string[],
  cleanupStatus: string,
  failureMessage: string | undefined,
): RoundReportFields {
  const info = workflowInfo();
  return {
    campaign_id: input.campaignId,
    round: input.round,
    name: input.spec.name,
    workflow_id: info.workflowId,
    run_id: info.runId,
    provider: input.spec.provider.kind,
    base_model: input.spec.provider.model,
    resource_id: progress.resourceId ?? null,
    session_id: progress.sessionId ?? null,
    train_path: data.train,
    eval_path: data.eval,
    train_sha256: data.trainSha256,
    eval_sha256: data.evalSha256,
    started_from_checkpoint: input.startFrom?.checkpointId ?? null,
    baseline_loss: result.baselineLoss ?? null,
    trained_loss: result.trainedLoss ?? null,
    kind: result.kind ?? DEFAULT_ROUND_KIND,
    loss_unit: ROUND_KIND[result.kind ?? DEFAULT_ROUND_KIND].evalLoss,
    first_reward: result.firstReward ?? null,
    latest_reward: result.latestReward ?? null,
    baseline_preference_accuracy: result.baselineAccuracy ?? null,
    baseline_margin: result.baselineMargin ?? null,
    trained_margin: result.trainedMargin ?? null,
    loss_metrics:
      result.baselineLossMetrics || result.trainedLossMetrics
        ? { baseline: result.baselineLossMetrics ?? null, trained: result.trainedLossMetrics ?? null }
        : null,
    accuracy: result.accuracy ?? null,
    // Sampled rounds: accuracy is pass@1; with evaluation.sampling.n > 1, pass@n beside it (k = n).
    pass_at_k: result.passAtK ? { k: result.passAtK.k, value: result.passAtK.value } : null,
    pool_accuracy: result.poolAccuracy ?? null,
    // `data.test`: the final weights on the held-out test set; shown, never used for a choice.
    test_path: data.test ?? null,
    test: result.test
      ? {
          accuracy: result.test.accuracy,
          rows: result.test.rows,
          sha256: result.test.sha256 ?? null,
          evaluations_path: result.test.evaluationsPath ?? null,
        }
      : null,
    training_checkpoint_id: result.trainingCheckpointId ?? null,
    sampler_checkpoint_id: result.samplerCheckpointId ?? null,
    steps_applied: result.stepsApplied,
    steps_planned: result.totalSteps,
    gpu_minutes: result.gpuMinutes,
    // Tokens the round processed (what a per-token biller charges: Tinker), and how its cost was estimated.
    tokens: result.tokens ?? null,
    billing: billingOf(input.spec.provider.kind),
    estimated_cost_usd: result.costUsd ?? null,
    budget: result.budget
      ? {
          max_usd: result.budget.maxUsd,
          spent_usd: result.budget.spentUsd,
          estimated_usd: result.budget.estimatedUsd,
          estimate_error_usd: result.budget.estimatedUsd - result.budget.spentUsd,
          billing: result.budget.pricing.billing,
          price_source: result.budget.pricing.source,
          usd_per_hour: result.budget.pricing.billing === 'gpu-time' ? result.budget.pricing.perHour : null,
          usd_per_million_tokens: result.budget.pricing.billing === 'tokens' ? result.budget.pricing.tokens : null,
        }
      : null,
    status: result.status,
    stop_reason: result.stopReason ?? null,
    error_type: result.errorType ?? null,
    error_message: failureMessage ?? null,
    cleanup_status: cleanupStatus,
    // What the Python worker's code sandbox was (python -m roundhouse sandbox), when the round called one.
    sandbox: result.sandbox ?? null,
    recoveries: (result.recoveries ?? []).map((r) => ({
      phase: r.phase,
      error_type: r.errorType,
      code: r.code ?? null,
      message: r.message,
      failed_at_step: r.failedAtStep,
      rolled_back_to: r.rolledBackTo,
      steps_rolled_back: r.stepsRolledBack,
      new_trainer: r.newTrainer,
      lineage: r.lineage,
      gpu_minutes_lost: r.gpuMinutesLost,
      checkpoint_id: r.checkpointId,
    })),
    evaluation_curve: (result.evaluationCurve ?? []).map((p) => ({
      step: p.step,
      loss: p.loss,
      metric: p.metric ?? null,
      ...(p.margin !== undefined ? { margin: p.margin } : {}),
      ...(p.lineage ? { lineage: p.lineage } : {}),
      checkpoint_id: p.checkpointId ?? null,
    })),
    early_stop: result.earlyStop
      ? {
          on: result.earlyStop.on,
          stopped_at_step: result.earlyStop.stoppedAtStep,
          best_step: result.earlyStop.bestStep,
          best_value: result.earlyStop.bestValue,
          best_checkpoint_id: result.earlyStop.bestCheckpointId,
          patience: result.earlyStop.patience,
        }
      : null,
    rolling_checkpoints: (result.checkpoints ?? []).map((c) => ({ checkpoint_id: c.checkpointId, step: c.step, lineage: c.lineage })),
    capacity_waits: (result.capacityWaits ?? []).map((w) => ({ creates: w.creates, waited_minutes: w.waitedMinutes })),
    deactivated_ids: released,
  };
}
