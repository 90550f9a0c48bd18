import { ApplicationFailure, CancellationScope, condition, log, patched } from '@temporalio/workflow';
import { evaluateDuring, evaluationDue, restoreBest } from './evaluation';
import { failureMessageOf, failureReasonOf, failureTypeOf, isCancellation } from './failures';
import { untilInterrupted } from './interrupt';
import { noteCheckpoint, recover, recoverable, recovering } from './recovery';
import { pausable, pausesAnyPhase, releaseRegistered } from './pause';
import { roundActivities } from './round-activities';
import type { RoundInput, RoundResult } from './round-contract';
import { ROUND_KINDS, type RoundKind } from './round-kinds';
import { roundReport } from './round-report';
import { acquireTrainer, releaseTrainerNow, runKey, type RoundRun } from './round-trainer';
import { RoundState } from './round-state';

/**
 * One round, as durable steps:
 *   validate → provision (lease first) → open session → baseline → training segments →
 *   training checkpoint → sampler weights → sample + score → trained loss
 *   └─ cleanup (release the trainer) and the report, on every path: success, failure, cancellation.
 * What the round kind changes (baseline, segment, evaluation) is in round-kinds.ts.
 */
export async function roundWorkflow(input: RoundInput): Promise<RoundResult> {
  const state = new RoundState(input);
  const { result, progress } = state;
  const kind = ROUND_KINDS[state.kind];
  const activities = roundActivities(input.spec.advanced.heartbeatTimeoutSeconds);
  // The lease: what cleanup must release, set before provisioning and filled in as soon as the trainer's id is known.
  // Deactivation is guaranteed on every path: (1) cleanup in `finally` below, non-cancellable, after success, failure
  // and cancellation; (2) provisioning releases a trainer it made when it fails or is cancelled before the workflow
  // hears the id; (3) a pause or a spent budget releases the trainer at once (releaseTrainerNow); (4) termination and
  // timeouts run no workflow code: the reaper deactivates trainers whose owning workflow (in their tag) is closed.
  const run: RoundRun = {
    input,
    state,
    activities,
    lease: {},
    data: { ...input.data, trainSha256: '', evalSha256: '' },
    sessionId: '',
    stepOffset: 0,
    lineage: 0,
    restore: { checkpointId: input.startFrom?.checkpointId, loadOptimizer: input.startFrom?.loadOptimizer ?? true, step: 0, savedAtMs: 0 },
    checkpoints: [],
    rollbacks: [],
    phaseStartedAtMs: 0,
    evaluations: [],
  };

  try {
    const plan = await activities.checks.prepareRound({ spec: input.spec, data: input.data });
    run.data = { ...input.data, trainSha256: plan.trainSha256, evalSha256: plan.evalSha256 };
    state.pricing(plan);
    progress.totalSteps = result.totalSteps = plan.totalSteps;

    const anyPhase = pausesAnyPhase();
    // Provisioning drains on cancel: a cancelled round hears which trainer it made, and cleanup releases it.
    await pausable(run, kind, anyPhase, () => acquireTrainer(run, kind, input.startFrom), { reacquire: false, drainOnCancel: true });
    await state.tell('baseline');
    await recovering(run, kind, 'baseline', () => pausable(run, kind, anyPhase, () => kind.baseline(run, run.stepOffset)));

    await state.tell('training');
    const { cursor, checkpoint, budgetInterrupts } = await trainToCheckpoint(run, kind, plan.totalSteps);
    if (budgetInterrupts) state.setStep(trainerStep(checkpoint.step, run.stepOffset, cursor, plan.totalSteps).step);
    result.trainingCheckpointId = checkpoint.checkpointId;
    run.restore = { checkpointId: checkpoint.checkpointId, loadOptimizer: true, step: state.progress.step, savedAtMs: Date.now() };
    if (result.stopReason) {
      result.status = 'stopped'; // over budget: keep the checkpoint, skip sampling, release the GPU now
    } else {
      await recovering(run, kind, 'sampler-weights', () =>
        pausable(run, kind, anyPhase, async () => {
          const sampler = await activities.onTrainer.saveSamplerWeights({
            spec: input.spec,
            sessionId: run.sessionId,
            key: runKey(run, 'sampler-weights'),
          });
          result.samplerCheckpointId = sampler.checkpointId;
        }),
      );
      await recovering(run, kind, 'evaluation', () => pausable(run, kind, anyPhase, () => kind.evaluate(run)));
      result.status = 'completed';
    }
  } catch (err) {
    state.failure = err instanceof Error ? err : new Error(String(err));
    result.status = isCancellation(err) ? 'cancelled' : 'failed';
    result.errorType = failureTypeOf(err);
    if (!isCancellation(err)) result.errorMessage = failureReasonOf(err);
    log.warn('round did not complete', { status: result.status, errorType: result.errorType });
  } finally {
    state.trainingOver = true;
    progress.phase = 'cleanup';
    // Runs even when the workflow is cancelled: a cleanup started in a cancelled scope would be cancelled too.
    await CancellationScope.nonCancellable(() => cleanUp(run));
  }
  if (state.failure !== undefined) {
    if (isCancellation(state.failure)) throw state.failure;
    throw ApplicationFailure.create({
      type: result.errorType ?? 'Unknown',
      message: `round ${input.round} of ${input.campaignId} failed (${result.errorType}): ${failureMessageOf(state.failure)}; report: ${result.reportPath}`,
      nonRetryable: true,
      details: [result],
      cause: state.failure,
    });
  }
  return result;
}

/**
 * Training segments until every planned step is applied (or a budget is reached), then the training checkpoint. A
 * pause interrupts the running segment (within about a step) rather than waiting for its end, and so does a spent
 * budget; a provider-side failure rolls back to the latest checkpoint (recovery.ts) and training goes on from there.
 */
async function trainToCheckpoint(
  run: RoundRun,
  kind: RoundKind,
  totalSteps: number,
): Promise<{ cursor: { step: number }; checkpoint: { checkpointId: string; step: number }; budgetInterrupts: boolean }> {
  const { input, state, activities } = run;
  const interruptible = patched('pause-interrupts-segments');
  const budgetInterrupts = interruptible && patched('budget-interrupts-segments');
  if (budgetInterrupts) void state.watchBudget().catch(() => undefined); // ends with training, or with the round's cancellation
  let cursor = { step: 0 };
  run.phaseStartedAtMs = Date.now();
  for (;;) {
    cursor = await trainAllSteps(run, kind, cursor, totalSteps, interruptible);
    state.trainingOver = true;
    await state.tell('checkpointing');
    if (state.result.earlyStop) {
      // Stopped early: the round finishes from its best evaluated weights, whose checkpoint is already saved.
      const stepOffset = run.stepOffset;
      const best = await recovering(run, kind, 'restore-best', () => restoreBest(run, kind));
      return { cursor, checkpoint: { checkpointId: best.checkpointId, step: stepOffset + best.step }, budgetInterrupts };
    }
    try {
      const key = runKey(run, 'training-checkpoint', `s${cursor.step}`);
      const checkpoint = await activities.onTrainer.saveTrainingCheckpoint({ spec: input.spec, sessionId: run.sessionId, key });
      return { cursor, checkpoint, budgetInterrupts };
    } catch (err) {
      if (!recoverable(err)) throw err;
      cursor = await recover(run, kind, 'checkpointing', err);
      state.trainingOver = false;
      if (budgetInterrupts) void state.watchBudget().catch(() => undefined);
      await state.tell('training');
    }
  }
}

/** Training segments from the cursor until every planned step is applied or a budget is reached. */
async function trainAllSteps(
  run: RoundRun,
  kind: RoundKind,
  from: { step: number },
  totalSteps: number,
  interruptible: boolean,
): Promise<{ step: number }> {
  const { input, state, activities } = run;
  let cursor = from;
  while (cursor.step < totalSteps) {
    state.result.stopReason = state.overBudget();
    if (state.result.stopReason) break;
    if (state.pauseRequested) cursor = await pauseAndResume(run, kind, cursor, interruptible, totalSteps);
    const segmentInput = {
      campaignId: input.campaignId,
      round: input.round,
      spec: input.spec,
      data: run.data,
      sessionId: run.sessionId,
      stepOffset: run.stepOffset,
      cursor,
      totalSteps,
      stepsDir: state.file('steps'),
      lineage: run.lineage || undefined,
      lastCheckpoint: { step: run.restore.step, savedAtMs: Math.max(run.restore.savedAtMs, run.phaseStartedAtMs) },
    };
    const train = () => kind.segment(interruptible ? activities.segments : activities.onTrainer, run, segmentInput);
    let segment;
    try {
      segment = interruptible ? await untilInterrupted(train, () => state.pauseRequested || state.budgetHit) : await train();
    } catch (err) {
      if (!recoverable(err)) throw err;
      cursor = await recover(run, kind, 'training', err);
      continue;
    }
    if (!segment) continue; // interrupted without an answer: the next checkpoint says where the trainer is
    state.addUsage(segment.usage);
    for (const checkpoint of segment.checkpoints ?? []) noteCheckpoint(run, checkpoint);
    cursor = segment.cursor;
    state.setStep(cursor.step);
    if (segment.latestLoss !== undefined) state.progress.latestLoss = segment.latestLoss;
    if (segment.latestReward !== undefined) {
      state.progress.latestReward = state.result.latestReward = segment.latestReward;
      state.result.firstReward ??= segment.firstReward;
    }
    if (segment.latestMargin !== undefined) state.progress.latestMargin = segment.latestMargin;
    await state.tell('training', { segmentEnd: true });
    if (evaluationDue(run, cursor.step, totalSteps)) {
      try {
        await evaluateDuring(run, cursor.step, totalSteps);
      } catch (err) {
        if (!recoverable(err)) throw err;
        cursor = await recover(run, kind, 'evaluation', err);
        continue;
      }
      if (state.result.earlyStop) break;
    }
  }
  return cursor;
}

/** A pause: checkpoint at the cursor, give the GPU back, wait for resume, then come back to the same step. */
async function pauseAndResume(
  run: RoundRun,
  kind: RoundKind,
  cursor: { step: number },
  interruptible: boolean,
  totalSteps: number,
): Promise<{ step: number }> {
  const { state } = run;
  const checkpoint = await run.activities.onTrainer.saveTrainingCheckpoint({
    spec: run.input.spec,
    sessionId: run.sessionId,
    key: runKey(run, 'pause', `s${cursor.step}`),
  });
  // The checkpoint's step is the trainer's own count: the truth, should an interrupted segment not have said.
  if (interruptible) {
    cursor = trainerStep(checkpoint.step, run.stepOffset, cursor, totalSteps);
    state.setStep(cursor.step);
  }
  run.restore = { checkpointId: checkpoint.checkpointId, loadOptimizer: true, step: cursor.step, savedAtMs: Date.now() };
  await releaseTrainerNow(run);
  await state.tell('paused');
  state.progress.paused = true;
  await condition(() => !state.pauseRequested);
  state.progress.paused = false;
  await acquireTrainer(run, kind, { checkpointId: checkpoint.checkpointId, loadOptimizer: true });
  run.stepOffset -= cursor.step;
  await state.tell('training');
  return cursor;
}

/** The trainer's own step count from a checkpoint, when it is one this round can have reached; else the cursor. */
function trainerStep(checkpointStep: number, stepOffset: number, cursor: { step: number }, totalSteps: number): { step: number } {
  const step = checkpointStep - stepOffset;
  return step >= cursor.step && step <= totalSteps ? { step } : cursor;
}

/** Releases what the lease holds and writes the report; the reaper finds a trainer whose release failed. */
async function cleanUp(run: RoundRun): Promise<void> {
  const { input, state, lease } = run;
  let cleanupStatus = state.released.length ? 'deactivated' : 'nothing-to-release';
  if (lease.resourceId) {
    try {
      const resourceId = lease.resourceId;
      cleanupStatus = (await run.activities.cleanup.releaseTrainer({ spec: input.spec, resourceId, sessionId: lease.sessionId })).status;
      state.released.push(resourceId);
      state.unregisterTrainer(resourceId);
    } catch (err) {
      cleanupStatus = `failed: ${failureTypeOf(err)}`;
    }
  }
  // A trainer the round heard of only from its provisioning's word (cancelled or failed before it returned the id).
  const unreleased = await releaseRegistered(run);
  if (unreleased) cleanupStatus = `failed: ${unreleased}`;
  state.settleCost();
  if (state.recoveries.length) state.result.recoveries = state.recoveries;
  const keep = input.spec.training.checkpointEvery?.keep ?? 3;
  if (run.checkpoints.length) {
    // The latest `keep`, and always the one an early stop finished from.
    const best = state.result.earlyStop?.bestCheckpointId;
    const kept = run.checkpoints.filter((c, i) => i >= run.checkpoints.length - keep || c.checkpointId === best);
    state.result.checkpoints = kept.map(({ checkpointId, step, lineage }) => ({ checkpointId, step, lineage }));
  }
  const failureMessage = state.failure === undefined ? undefined : failureMessageOf(state.failure);
  const writeReport = run.activities.cleanup.writeRoundReport({
    path: state.result.reportPath,
    evaluationsPath: state.result.evaluationsPath,
    stepsDir: state.file('steps'),
    rollbacks: run.rollbacks.length ? run.rollbacks : undefined,
    report: roundReport(input, state.result, run.data, state.progress, state.released, cleanupStatus, failureMessage),
    // For the experiment tracker (the spec's settings or the worker's MLFLOW_TRACKING_URI).
    track: { campaignId: input.campaignId, round: input.round, spec: input.spec, totalSteps: state.result.totalSteps },
  });
  try {
    await writeReport;
  } catch (err) {
    // The round's outcome stands (its checkpoint is what the campaign continues from); the report's loss is said.
    state.result.reportError = failureMessageOf(err);
    log.warn('the round report could not be written', { reportPath: state.result.reportPath, error: state.result.reportError });
  }
  await state.tell(state.result.status);
}
