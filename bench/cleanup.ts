import type { WorkflowHandle } from '@temporalio/client';
import type { SessionRecord } from '../emulator/engine';
import type { RunningEmulator } from '../emulator/server';
import { ensureReaperSchedule } from '../workers/schedules';
import { benchRoundInput, note, startBenchEmulator, waitFor, withWorker, type BenchContext, type Report } from './harness';
import { roundWorkflow } from '../workflows';

const ACTIVITY_TASK_FAILED = 13;

/** The first session a round opened (its display name ends with the round's workflow id). */
function firstSessionOf(emulator: RunningEmulator, workflowId: string): SessionRecord | undefined {
  return emulator.engine
    .listSessions({})
    .filter((s) => s.displayName?.endsWith(workflowId))
    .at(-1); // listings are newest first
}

/** The one resource a round created (its tag names the round's workflow id) and when its stop was requested. */
function resourceOf(emulator: RunningEmulator, workflowId: string): { id: string; stopRequestedAt?: number } | undefined {
  const first = firstSessionOf(emulator, workflowId);
  const resource = first && emulator.engine.getResource(first.resourceId);
  return resource && { id: resource.id, stopRequestedAt: resource.stopRequestedAt };
}

async function stoppedAt(emulator: RunningEmulator, workflowId: string, timeoutMs: number): Promise<number> {
  return waitFor(`the trainer of ${workflowId} to be deactivated`, () => resourceOf(emulator, workflowId)?.stopRequestedAt, timeoutMs, 20);
}

async function inTraining(emulator: RunningEmulator, workflowId: string): Promise<void> {
  await waitFor(
    `${workflowId} to train`,
    () => {
      const s = firstSessionOf(emulator, workflowId);
      return s && s.optimizerSteps >= 3 ? true : undefined;
    },
    60_000,
  );
}

/**
 * Cleanup latency, each from the moment it happens to the emulator's record of the trainer's stop request:
 * a round failing (a non-retryable operation failure in training; from the server's ActivityTaskFailed event),
 * a round cancelled, and a round terminated (no workflow code runs; the reaper schedule finds it).
 */
export async function cleanupBenchmark(ctx: BenchContext, report: Report): Promise<void> {
  const reaperPeriodSeconds = ctx.quick ? 5 : 60; // the reaper schedule's default is one minute
  const emulator = await startBenchEmulator({ operationLatencyMs: 50 });
  const taskQueue = `bench-cleanup-${Date.now()}`;
  const input = (name: string) =>
    benchRoundInput({ baseUrl: emulator.url, campaignId: `cleanup-${name}-${taskQueue}`, steps: 200, batchSize: 2 });
  const start = (name: string): Promise<WorkflowHandle> =>
    ctx.client.workflow.start(roundWorkflow, { taskQueue, workflowId: `round-${name}-${taskQueue}`, args: [input(name)] });
  try {
    await withWorker(ctx, taskQueue, async () => {
      // Failure: the 6th forward_backward fails as invalid input (not retried).
      emulator.engine.faults.configure({
        rules: [{ kind: 'fail-operation', operation: 'forward-backward', errorCode: 'INVALID_INPUT', after: 5, max: 1 }],
      });
      const failing = await start('failure');
      await failing.result().catch(() => undefined);
      emulator.engine.faults.configure({});
      const failedEvent = (await failing.fetchHistory()).events!.find((e) => e.eventType === ACTIVITY_TASK_FAILED);
      if (!failedEvent) throw new Error('the failing round has no ActivityTaskFailed event');
      const failedAt = Number(failedEvent.eventTime!.seconds) * 1000 + Math.floor((failedEvent.eventTime!.nanos ?? 0) / 1e6);
      const failureS = ((await stoppedAt(emulator, failing.workflowId, 30_000)) - failedAt) / 1000;
      report({ name: 'cleanup.failure_to_deactivated_s', value: failureS, target: '≤ 10', met: failureS <= 10 });

      // Cancel during training.
      const cancelled = await start('cancel');
      await inTraining(emulator, cancelled.workflowId);
      const cancelAt = Date.now();
      await cancelled.cancel();
      const cancelS = ((await stoppedAt(emulator, cancelled.workflowId, 30_000)) - cancelAt) / 1000;
      await cancelled.result().catch(() => undefined);
      report({ name: 'cleanup.cancel_to_deactivated_s', value: cancelS, target: '≤ 10', met: cancelS <= 10 });

      // Terminate during training: nothing of the round runs again; the reaper schedule (default grace) reaps it.
      const schedule = await ensureReaperSchedule(ctx.client, {
        taskQueue,
        scheduleId: `bench-reaper-${taskQueue}`,
        providers: [{ kind: 'local', baseUrl: emulator.url, model: 'roundhouse/tiny-chat' }],
        every: `${reaperPeriodSeconds} seconds`,
      });
      try {
        const terminated = await start('terminate');
        await inTraining(emulator, terminated.workflowId);
        const terminateAt = Date.now();
        await terminated.terminate('benchmark: terminate → reaped');
        const reapedS = ((await stoppedAt(emulator, terminated.workflowId, (reaperPeriodSeconds + 400) * 1000)) - terminateAt) / 1000;
        const bound = reaperPeriodSeconds + 30;
        report({
          name: 'cleanup.terminate_to_reaped_s',
          value: reapedS,
          target: `≤ ${bound} = reaper period ${reaperPeriodSeconds} s + 30 s`,
          met: reapedS <= bound,
        });
      } finally {
        await schedule.delete();
      }
      note(`cleanup: ledger ${JSON.stringify(emulator.engine.ledger().totals)}`);
    });
    const active = emulator.engine.ledger().active;
    report({ name: 'cleanup.resources_left_active', value: active.length, target: '0', met: active.length === 0 });
  } finally {
    await emulator.close();
  }
}
