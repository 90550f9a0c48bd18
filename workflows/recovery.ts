import { patched } from '@temporalio/workflow';
import type { TrainingCheckpoint } from './round-contract';
import { isRecoverableFailure } from '../config/rules/failures';
import { failureDetail, failureMessageOf, failureTypeOf } from './failures';
import type { RoundKind } from './round-kinds';
import { acquireTrainer, openSessions, releaseTrainerNow, type RoundRun } from './round-trainer';

/**
 * Recovery from provider-side failures (a failed operation, a lost session, a dead or preempted trainer): roll back,
 * never forward. The round opens a fresh session — on the same trainer when it is ready, otherwise on a newly
 * provisioned one (lease first, the dead one released) — from its latest training checkpoint with its optimizer
 * state, and continues from that checkpoint's step under keys of a new lineage, so the provider's deduplication never
 * hands back the failed records. Bounded by `advanced.maxRecoveries`; every recovery is recorded.
 */

/** Whether this failure is one the round recovers from (histories recorded before recovery existed never do). */
export function recoverable(err: unknown): boolean {
  return isRecoverableFailure(failureTypeOf(err)) && patched('provider-failure-recovery');
}

/** Runs a phase on the trainer; a recoverable failure rolls back and runs the phase again. */
export async function recovering<T>(run: RoundRun, kind: RoundKind, phase: string, body: () => Promise<T>): Promise<T> {
  run.phaseStartedAtMs = Date.now();
  for (;;) {
    try {
      return await body();
    } catch (err) {
      if (!recoverable(err)) throw err;
      await recover(run, kind, phase, err);
    }
  }
}

/** A rolling checkpoint became the round's latest: a later rollback resumes from it. */
export function noteCheckpoint(run: RoundRun, checkpoint: TrainingCheckpoint): void {
  if (run.checkpoints.some((c) => c.checkpointId === checkpoint.checkpointId)) return;
  run.checkpoints.push(checkpoint);
  if (checkpoint.lineage === run.lineage && checkpoint.step >= run.restore.step) {
    run.restore = { checkpointId: checkpoint.checkpointId, loadOptimizer: true, step: checkpoint.step, savedAtMs: checkpoint.savedAtMs };
  }
}

/** Rolls the round back to its restore point on a fresh session (or trainer); returns the step training resumes at. */
export async function recover(run: RoundRun, kind: RoundKind, phase: string, err: unknown): Promise<{ step: number }> {
  const { state, input } = run;
  const maxRecoveries = input.spec.advanced.maxRecoveries ?? 5;
  if (state.recoveries.length >= maxRecoveries) throw err;
  for (const c of failureDetail<TrainingCheckpoint[]>(err, 'checkpoints') ?? []) noteCheckpoint(run, c);
  const failedAtStep = Math.max(state.progress.step, failureDetail<number>(err, 'step') ?? 0);
  const restore = run.restore;
  const inTraining = phase === 'training' || phase === 'checkpointing';
  const gpuMinutesLost = state.gpuMinutesSince(inTraining ? Math.max(restore.savedAtMs, run.phaseStartedAtMs) : run.phaseStartedAtMs);

  const sessions = [run.sessionId, run.referenceSessionId].filter((id): id is string => Boolean(id));
  const trainer = run.lease.resourceId
    ? await run.activities.onTrainer.prepareRecovery({ spec: input.spec, resourceId: run.lease.resourceId, sessionIds: sessions })
    : { trainerReady: false };
  run.lineage += 1;
  run.rollbacks.push({ lineage: run.lineage, toStep: restore.step });
  const from = restore.checkpointId ? { checkpointId: restore.checkpointId, loadOptimizer: restore.loadOptimizer } : undefined;
  if (trainer.trainerReady) {
    await openSessions(run, kind, from);
  } else {
    await releaseTrainerNow(run);
    await acquireTrainer(run, kind, from);
  }
  run.stepOffset -= restore.step;
  state.setStep(restore.step);
  const recovery = {
    phase,
    errorType: failureTypeOf(err),
    code: failureDetail<string>(err, 'code'),
    message: failureMessageOf(err).slice(0, 300),
    failedAtStep,
    rolledBackTo: restore.step,
    stepsRolledBack: Math.max(0, failedAtStep - restore.step),
    newTrainer: !trainer.trainerReady,
    lineage: run.lineage,
    gpuMinutesLost,
    checkpointId: restore.checkpointId ?? null,
  };
  state.recoveries.push(recovery);
  state.progress.recoveries = state.recoveries.length;
  state.progress.lastRecovery = `${recovery.errorType}${recovery.code ? ` (${recovery.code})` : ''} in ${phase} at step ${failedAtStep}: resumed from step ${restore.step} on ${recovery.newTrainer ? 'a new trainer' : 'a new session'}`;
  return { step: restore.step };
}
