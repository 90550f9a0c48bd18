import { condition, patched } from '@temporalio/workflow';
import { untilInterrupted } from './interrupt';
import type { RoundKind } from './round-kinds';
import { acquireTrainer, releaseTrainerNow, type RoundRun } from './round-trainer';

/**
 * A pause outside training (provisioning, the baseline and reference passes, sampler weights, sampling and
 * evaluation) takes effect at once: the phase's activity is interrupted, every trainer the round holds is released,
 * and once resumed the round takes a trainer again — from its restore point: the starting checkpoint before
 * training, the training checkpoint after — and runs the phase again. (Training pauses at a checkpoint of the
 * cursor: round.ts.) Histories recorded before this existed keep the old behaviour: a pause waited for training.
 */
export function pausesAnyPhase(): boolean {
  return patched('pause-in-any-phase');
}

/** Runs a phase that a pause interrupts (when `pausable`); returns its value once it completes. */
export async function pausable<T>(
  run: RoundRun,
  kind: RoundKind,
  enabled: boolean,
  body: () => Promise<T>,
  options: { reacquire: boolean; drainOnCancel?: boolean } = { reacquire: true },
): Promise<T> {
  if (!enabled) return body();
  for (;;) {
    if (run.state.pauseRequested) await pauseHere(run, kind, options.reacquire);
    const done = await untilInterrupted(
      async () => ({ value: await body() }),
      () => run.state.pauseRequested,
      { drainOnCancel: options.drainOnCancel },
    );
    if (done) return done.value;
  }
}

/**
 * Gives back every trainer the round holds, waits for resume, and takes a trainer again from the restore point
 * (unless the phase itself is the taking).
 */
async function pauseHere(run: RoundRun, kind: RoundKind, reacquire: boolean): Promise<void> {
  const { state } = run;
  const phase = state.progress.phase;
  await releaseTrainerNow(run);
  await releaseRegistered(run);
  await state.tell('paused');
  state.progress.paused = true;
  await condition(() => !state.pauseRequested);
  state.progress.paused = false;
  if (!reacquire) return void (await state.tell(phase));
  const restore = run.restore;
  await acquireTrainer(
    run,
    kind,
    restore.checkpointId ? { checkpointId: restore.checkpointId, loadOptimizer: restore.loadOptimizer } : undefined,
  );
  run.stepOffset -= restore.step;
  run.phaseStartedAtMs = Date.now();
  await state.tell(phase);
}

/**
 * Releases trainers the round knows only from its provisioning's word (a provisioning interrupted or failed before it
 * returned the id): idempotent, so also right for one the activity released itself.
 */
export async function releaseRegistered(run: RoundRun): Promise<string | undefined> {
  let failure: string | undefined;
  for (const resourceId of run.state.registeredTrainerIds()) {
    try {
      await run.activities.cleanup.releaseTrainer({ spec: run.input.spec, resourceId });
      run.state.released.push(resourceId);
      run.state.unregisterTrainer(resourceId);
    } catch (err) {
      failure = err instanceof Error ? err.message : String(err);
    }
  }
  return failure;
}
