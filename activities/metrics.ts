import { Context } from '@temporalio/activity';
import type { MetricMeter, MetricTags } from '@temporalio/common';
import type { ProviderErrorClass } from '../providers/errors';

/**
 * Roundhouse's own metrics, recorded on the activity's metric meter: they are served by the same Prometheus endpoint
 * as Temporal's worker metrics (ROUNDHOUSE_METRICS_ADDRESS), tagged with namespace, task queue and activity type.
 * Without a metrics endpoint the meter is a no-op.
 */
export const METRICS = {
  optimizerSteps: 'roundhouse_optimizer_steps',
  latestLoss: 'roundhouse_latest_loss',
  roundGpuMinutes: 'roundhouse_round_gpu_minutes',
  resourcesProvisioned: 'roundhouse_resources_provisioned',
  resourcesReleased: 'roundhouse_resources_released',
  resourcesReaped: 'roundhouse_resources_reaped',
  providerErrors: 'roundhouse_provider_errors',
} as const;

/** Buckets of the GPU-minutes-per-round histogram (its `_sum` is the GPU-minutes of finished rounds). */
export const GPU_MINUTES_BUCKETS = [0.1, 1, 5, 15, 60, 240, 1440];

function meter(): MetricMeter | undefined {
  try {
    return Context.current().metricMeter;
  } catch {
    return undefined; // outside an activity
  }
}

function add(name: string, value: number, tags: MetricTags, description: string): void {
  meter()?.createCounter(name, undefined, description).add(value, tags);
}

export function recordOptimizerSteps(steps: number, tags: { provider: string; campaign_name: string }): void {
  add(METRICS.optimizerSteps, steps, tags, 'Optimizer steps confirmed applied by the provider');
}

export function recordLatestLoss(lossPerToken: number, tags: { provider: string; campaign_name: string }): void {
  meter()?.createGauge(METRICS.latestLoss, 'float', 'nats', 'Training loss per trained token of the latest step').set(lossPerToken, tags);
}

export function recordRoundGpuMinutes(gpuMinutes: number, tags: { provider: string; status: string }): void {
  meter()
    ?.createHistogram(METRICS.roundGpuMinutes, 'float', 'min', 'GPU-minutes held by a finished round (sum: total GPU-minutes)')
    .record(gpuMinutes, tags);
}

export function recordResource(event: 'provisioned' | 'released' | 'reaped', tags: { provider: string }, count = 1): void {
  const name =
    event === 'provisioned' ? METRICS.resourcesProvisioned : event === 'released' ? METRICS.resourcesReleased : METRICS.resourcesReaped;
  add(name, count, tags, `Trainer resources ${event}`);
}

export function recordProviderError(errorClass: ProviderErrorClass, code: string): void {
  add(METRICS.providerErrors, 1, { class: errorClass, code }, 'Provider errors that reached an activity boundary, by class');
}
