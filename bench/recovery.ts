import fs from 'node:fs';
import path from 'node:path';
import type { RoundResult } from '../workflows/round/contract';
import { startWorkerProcess, type WorkerProcess } from '../test/helpers/worker-process';
import { benchRoundInput, note, sleep, startBenchEmulator, waitFor, type BenchContext, type Report } from './harness';
import { roundWorkflow } from '../workflows';

/** The environment of a real `roundhouse worker` process on the bench's dev server. */
export function workerProcessEnv(ctx: BenchContext, taskQueue: string, extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {
    TEMPORAL_ADDRESS: ctx.settings.address!,
    ROUNDHOUSE_TASK_QUEUE: taskQueue,
    ROUNDHOUSE_WORKFLOW_BUNDLE: ctx.bundleFile,
    ROUNDHOUSE_STATE_DIR: fs.mkdtempSync(path.join(ctx.scratch, 'worker-state-')),
    ...extra,
  };
  // `ROUNDHOUSE_BENCH_CPU_PROF=<dir>`: each worker process writes a V8 CPU profile there when it exits cleanly.
  const profDir = process.env.ROUNDHOUSE_BENCH_CPU_PROF;
  if (profDir) {
    env.ROUNDHOUSE_BENCH_CPU_PROF = path.resolve(profDir);
    env.NODE_OPTIONS = `${process.env.NODE_OPTIONS ?? ''} --require ${path.join(__dirname, 'cpu-profile.js')}`.trim();
  }
  return env;
}

/**
 * Recovery: SIGKILL the worker process in the middle of a training segment, start a fresh one at once, and time
 * the kill → the first optimizer step the fresh worker gets applied, over the configured heartbeat timeout.
 * Steps lost or doubled are read from the emulator's ledger at the end.
 */
export async function recoveryBenchmark(ctx: BenchContext, report: Report): Promise<void> {
  const heartbeatTimeoutSeconds = ctx.quick ? 3 : 10;
  const steps = ctx.quick ? 20 : 60;
  const segmentSteps = ctx.quick ? 10 : 20;
  const killAtStep = segmentSteps + segmentSteps / 2; // the middle of the second segment
  const emulator = await startBenchEmulator({ operationLatencyMs: 50 });
  const taskQueue = `bench-recovery-${Date.now()}`;
  // A short sticky-queue timeout only speeds up the rest of the round; the figure does not involve workflow tasks.
  const env = workerProcessEnv(ctx, taskQueue, { ROUNDHOUSE_STICKY_QUEUE_TIMEOUT_MS: '1000' });
  let worker: WorkerProcess = startWorkerProcess(env);
  try {
    await worker.ready;
    const input = benchRoundInput({
      baseUrl: emulator.url,
      campaignId: `recovery-${taskQueue}`,
      steps,
      segmentSteps,
      heartbeatTimeoutSeconds,
      batchSize: 2,
    });
    const handle = await ctx.client.workflow.start(roundWorkflow, { taskQueue, workflowId: `round-${taskQueue}`, args: [input] });
    const applied = () => emulator.engine.ledger().totals.optimizerSteps;
    await waitFor(`optimizer step ${killAtStep}`, () => (applied() >= killAtStep ? true : undefined), 120_000, 5);
    const killedAt = Date.now();
    const stepAtKill = applied();
    await worker.kill();
    worker = startWorkerProcess(env);
    // Operations the dead worker had in flight still complete at the provider: let them land (≪ the heartbeat
    // timeout, before which no new attempt can start), then wait for the first step beyond them.
    await sleep(1000);
    const settled = applied();
    await waitFor('the fresh worker to apply an optimizer step', () => (applied() > settled ? true : undefined), 120_000, 10);
    const recoveredAt = Date.now();
    const seconds = (recoveredAt - killedAt) / 1000;
    note(
      `recovery: killed at step ${stepAtKill} (${settled} after in-flight operations), step ${settled + 1} applied ${seconds.toFixed(2)} s after the kill`,
    );
    const result: RoundResult = await handle.result();
    const l = emulator.engine.ledger();
    const ratio = seconds / heartbeatTimeoutSeconds;
    const bound = 1 + 5 / heartbeatTimeoutSeconds;
    report({ name: 'recovery.kill_to_next_step_s', value: seconds, target: `info; heartbeat timeout ${heartbeatTimeoutSeconds} s` });
    report({
      name: 'recovery.kill_to_next_step_over_heartbeat_timeout',
      value: ratio,
      target: `≤ ${bound.toFixed(2)} = 1 + 5 s / ${heartbeatTimeoutSeconds} s`,
      met: ratio <= bound,
    });
    const lost = Math.max(0, steps - l.totals.optimizerSteps);
    const doubled = Math.max(0, l.totals.optimizerSteps - steps);
    report({
      name: 'recovery.steps_lost',
      value: lost + Math.max(0, steps - result.stepsApplied),
      target: '0',
      met: lost === 0 && result.stepsApplied === steps,
    });
    report({ name: 'recovery.steps_doubled', value: doubled, target: '0', met: doubled === 0 });
    report({ name: 'recovery.duplicate_submissions_absorbed', value: l.totals.duplicatesAbsorbed, target: 'info' });
    report({ name: 'recovery.resources_left_active', value: l.active.length, target: '0', met: l.active.length === 0 });
  } finally {
    await worker.stop();
    await emulator.close();
  }
}
