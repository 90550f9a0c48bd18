import fs from 'node:fs';
import path from 'node:path';
import type { ProviderSpec } from '../config/io/spec';
import { DEFAULT_SEGMENT_SECONDS, DEFAULT_SEGMENT_STEPS, parseCampaignSpec } from '../config/io/spec';
import { TogetherProvider } from '../providers/together/client';
import type { TrainingProvider } from '../providers/types';
import { LOCAL_EMULATOR_KEY, ProviderRegistry } from '../workers/providers';
import type { CampaignInput, CampaignResult } from '../workflows/campaign/contract';
import type { RoundResult } from '../workflows/round/contract';
import { benchRoundInput, note, startBenchEmulator, trainingPhase, withWorker, type BenchContext, type Report } from './harness';
import { campaignWorkflow, roundWorkflow } from '../workflows';

const TARGET = 0.1;

/**
 * Polls operations every few milliseconds: history does not depend on how fast steps go (segments are bounded
 * by steps here), so the long rounds may as well run at the emulator's own speed.
 */
class FastPollingRegistry extends ProviderRegistry {
  private readonly fast = new Map<string, TrainingProvider>();
  override async providerFor(spec: ProviderSpec): Promise<TrainingProvider> {
    const baseUrl = spec.baseUrl!;
    let p = this.fast.get(baseUrl);
    if (!p)
      this.fast.set(baseUrl, (p = new TogetherProvider({ baseUrl, apiKey: LOCAL_EMULATOR_KEY, pollIntervalMs: 2, maxPollIntervalMs: 10 })));
    return p;
  }
  override async close(): Promise<void> {
    for (const p of this.fast.values()) await p.close();
    await super.close();
  }
}

/**
 * History events per optimizer step, counted in the server's own history: the events of the training phase
 * (segments, their workflow tasks, progress signals) divided by the steps, for a standalone round and for a
 * round run by a campaign (which it tells of its progress), at two lengths. The round's fixed events
 * (validate, provision, baseline, checkpoint, sample, cleanup) are reported separately.
 */
/** The events one progress signal adds to a round's history: initiated, signaled, and its workflow task (3). */
const SIGNAL_EVENTS = 5;

export async function historyBenchmark(ctx: BenchContext, report: Report): Promise<void> {
  const lengths = ctx.quick ? [20, 40] : [100, 2000];
  const emulator = await startBenchEmulator({});
  const registry = new FastPollingRegistry({ stateDir: fs.mkdtempSync(path.join(ctx.scratch, 'history-')) });
  try {
    await withWorker(
      ctx,
      `bench-history-${Date.now()}`,
      async (worker) => {
        const taskQueue = worker.options.taskQueue;
        const perStep: Record<string, number[]> = { round: [], campaign: [] };
        const totals: Record<string, number[]> = { round: [], campaign: [] };
        for (const steps of lengths) {
          // Standalone round.
          const input = benchRoundInput({
            baseUrl: emulator.url,
            campaignId: `history-${steps}-${taskQueue}`,
            steps,
            batchSize: 2,
            segmentSteps: ctx.quick ? 10 : 100, // segments of 100 steps, as these figures always measured
          });
          const roundId = `round-${steps}-${taskQueue}`;
          const result: RoundResult = await ctx.client.workflow.execute(roundWorkflow, { taskQueue, workflowId: roundId, args: [input] });
          if (result.stepsApplied !== steps) throw new Error(`round of ${steps} steps applied ${result.stepsApplied}`);
          const phase = trainingPhase(await ctx.client.workflow.getHandle(roundId).fetchHistory());
          note(
            `history round ${steps} steps: ${phase.totalEvents} events in all, ${phase.events} in training over ${phase.segments} segment(s), ${(phase.ms / 1000).toFixed(1)} s training`,
          );
          report({
            name: `history.round.${steps}_steps.events_per_step`,
            value: phase.events / steps,
            target: `≤ ${TARGET}`,
            met: phase.events / steps <= TARGET,
          });
          report({ name: `history.round.${steps}_steps.fixed_events`, value: phase.totalEvents - phase.events, target: 'info' });
          perStep.round!.push(phase.events / steps);
          totals.round!.push(phase.totalEvents);

          // The same round, run by a one-round campaign: its progress signals to the campaign add events.
          const campaignId = `campaign-${steps}-${taskQueue}`;
          const result2: CampaignResult = await ctx.client.workflow.execute(campaignWorkflow, {
            taskQueue,
            workflowId: campaignId,
            args: [campaignInputLike(input, path.join(ctx.scratch, 'campaigns'))],
          });
          if (result2.rounds[0]?.stepsApplied !== steps)
            throw new Error(`campaign round of ${steps} steps applied ${result2.rounds[0]?.stepsApplied}`);
          const child = trainingPhase(await ctx.client.workflow.getHandle(`${campaignId}-round-1`).fetchHistory());
          note(
            `history campaign round ${steps} steps: ${child.totalEvents} events in all, ${child.events} in training over ${child.segments} segment(s), ${child.signals} progress signal(s) in ${(child.ms / 1000).toFixed(1)} s`,
          );
          report({
            name: `history.campaign_round.${steps}_steps.progress_signals_per_minute`,
            value: child.signals / (child.ms / 60_000),
            target: 'info; ≤ 2 a minute past the first segment end, which is always told',
          });
          report({
            name: `history.campaign_round.${steps}_steps.events_per_step`,
            value: child.events / steps,
            target: `≤ ${TARGET}`,
            met: child.events / steps <= TARGET,
          });
          // Growth is measured without the progress signals: they are throttled by time (≤ 1 per 30 s, 5 events each), so
          // how many a round sends depends on how fast this machine trains, not on how many steps the round has.
          perStep.campaign!.push((child.events - SIGNAL_EVENTS * child.signals) / steps);
          totals.campaign!.push(child.totalEvents);
        }
        for (const [kind, values] of Object.entries(perStep)) {
          const growth = values[1]! / values[0]!;
          report({
            name: `history.${kind}.growth_${lengths[1]}_over_${lengths[0]}`,
            value: growth,
            target: kind === 'campaign' ? '≤ 1.1: not growing, time-throttled progress signals apart' : '≤ 1.1: not growing',
            met: growth <= 1.1,
          });
          // The same without any window: whole histories of both lengths, their difference over the extra steps.
          const marginal = (totals[kind]![1]! - totals[kind]![0]!) / (lengths[1]! - lengths[0]!);
          report({ name: `history.${kind}.marginal_events_per_step`, value: marginal, target: `≤ ${TARGET}`, met: marginal <= TARGET });
        }
      },
      registry,
    );
  } finally {
    await emulator.close();
  }
  await hostedSpeedHistory(ctx, report);
}

/**
 * History at hosted speed: steps of ≥ 2 s (1 s per operation at the emulator, polled as the worker polls a hosted
 * trainer), segments cut by time. A segment adds the same events however many steps it holds (a step adds none: its
 * progress rides on the heartbeat), so events per step at step time T with the default segment bounds are
 * events per segment ÷ min(DEFAULT_SEGMENT_STEPS, DEFAULT_SEGMENT_SECONDS ÷ T): measured per segment, divided out for
 * 10 s and 30 s steps.
 */
export async function hostedSpeedHistory(ctx: BenchContext, report: Report): Promise<void> {
  const steps = ctx.quick ? 6 : 12; // 12 steps of ≥ 2 s: two or three 10 s segments, enough to divide by
  const segmentSeconds = ctx.quick ? 1 : 10;
  const emulator = await startBenchEmulator({ operationLatencyMs: ctx.quick ? 200 : 1000 });
  try {
    await withWorker(ctx, `bench-history-hosted-${Date.now()}`, async (worker) => {
      const taskQueue = worker.options.taskQueue;
      const input = benchRoundInput({
        baseUrl: emulator.url,
        campaignId: `history-hosted-${taskQueue}`,
        steps,
        stepsPerEpoch: steps,
        batchSize: 2,
        segmentSeconds,
      });
      const roundId = `round-hosted-${taskQueue}`;
      const result: RoundResult = await ctx.client.workflow.execute(roundWorkflow, { taskQueue, workflowId: roundId, args: [input] });
      if (result.stepsApplied !== steps) throw new Error(`round of ${steps} steps applied ${result.stepsApplied}`);
      const phase = trainingPhase(await ctx.client.workflow.getHandle(roundId).fetchHistory());
      const stepMs = phase.ms / steps;
      const perSegment = phase.events / phase.segments;
      note(
        `history at hosted speed: ${steps} steps at ${(stepMs / 1000).toFixed(2)} s each, ${phase.segments} segments of ≤ ${segmentSeconds} s, ${phase.events} events in training (${perSegment.toFixed(1)} per segment)`,
      );
      const minStepMs = ctx.quick ? 200 : 2000;
      report({ name: 'history.round.hosted_speed.ms_per_step', value: stepMs, target: `≥ ${minStepMs}`, met: stepMs >= minStepMs });
      report({ name: 'history.round.hosted_speed.segments', value: phase.segments, target: '≥ 2: cut by time', met: phase.segments >= 2 });
      report({ name: 'history.round.hosted_speed.events_per_segment', value: perSegment, target: 'info' });
      report({ name: 'history.round.hosted_speed.events_per_step_with_short_segments', value: phase.events / steps, target: 'info' });
      for (const [label, ms, target] of [
        ['measured_step_time', stepMs, undefined],
        ['10s_steps', 10_000, TARGET],
        ['30s_steps', 30_000, undefined],
      ] as const) {
        const perDefaultSegment = Math.min(DEFAULT_SEGMENT_STEPS, Math.floor((DEFAULT_SEGMENT_SECONDS * 1000) / ms));
        const value = perSegment / perDefaultSegment;
        report({
          name: `history.round.${label}.events_per_step`,
          value,
          target: target === undefined ? `info; ${perDefaultSegment} steps per default segment` : `≤ ${target}`,
          met: target === undefined ? undefined : value <= target,
        });
      }
    });
  } finally {
    await emulator.close();
  }
}

/** A one-round campaign over the round input's spec and data. */
function campaignInputLike(input: ReturnType<typeof benchRoundInput>, reportRoot: string): CampaignInput {
  const s = input.spec;
  const yaml = JSON.stringify({
    name: s.name,
    provider: s.provider,
    data: { train: input.data.train, eval: input.data.eval },
    training: s.training,
    sampling: s.sampling,
    evaluation: s.evaluation,
    advanced: s.advanced,
    rounds: { max: 1 },
  });
  return { spec: parseCampaignSpec(yaml, path.join(path.dirname(input.data.train), 'campaign.json')), reportRoot };
}
