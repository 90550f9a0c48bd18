import { ApplicationFailure, CancellationScope, condition, log, patched, workflowInfo } from '@temporalio/workflow';
import { failureDetail, failureMessageOf, failureTypeOf, isCancellation } from './failures';
import { untilInterrupted } from './interrupt';
import { roundActivities, type RoundActivities } from './round-activities';
import { ownerTagFor, referenceTagFor, type RoundInput, type RoundResult } from './round-contract';
import { ROUND_KINDS, type KindRun, type RoundKind } from './round-kinds';
import { roundReport } from './round-report';
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
  };

  try {
    const plan = await activities.checks.prepareRound({ spec: input.spec, data: input.data });
    run.data = { ...input.data, trainSha256: plan.trainSha256, evalSha256: plan.evalSha256 };
    state.pricing(plan);
    progress.totalSteps = result.totalSteps = plan.totalSteps;

    await acquireTrainer(run, kind, input.startFrom);
    await state.tell('baseline');
    await kind.baseline(run, run.stepOffset);

    await state.tell('training');
    const { cursor, budgetInterrupts } = await trainAllSteps(run, kind, plan.totalSteps);

    state.trainingOver = true;
    await state.tell('checkpointing');
    const checkpoint = await activities.onTrainer.saveTrainingCheckpoint({
      spec: input.spec,
      sessionId: run.sessionId,
      key: state.key('training-checkpoint', `s${cursor.step}`),
    });
    if (budgetInterrupts) state.setStep(trainerStep(checkpoint.step, run.stepOffset, cursor, plan.totalSteps).step);
    result.trainingCheckpointId = checkpoint.checkpointId;
    if (result.stopReason) {
      result.status = 'stopped'; // over budget: keep the checkpoint, skip sampling, release the GPU now
    } else {
      const sampler = await activities.onTrainer.saveSamplerWeights({
        spec: input.spec,
        sessionId: run.sessionId,
        key: state.key('sampler-weights'),
      });
      result.samplerCheckpointId = sampler.checkpointId;
      await kind.evaluate(run);
      result.status = 'completed';
    }
  } catch (err) {
    state.failure = err instanceof Error ? err : new Error(String(err));
    result.status = isCancellation(err) ? 'cancelled' : 'failed';
    result.errorType = failureTypeOf(err);
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

/** A running round: its input, state, activities, lease and current session. */
interface RoundRun extends KindRun {
  activities: RoundActivities;
  lease: { resourceId?: string; sessionId?: string };
  data: KindRun['data'];
  /** Round-local step = provider step − offset (non-zero when a session resumed from a checkpoint). */
  stepOffset: number;
}

/** Provisions a trainer (lease first) and opens the round's session, fresh or from a checkpoint. */
async function acquireTrainer(run: RoundRun, kind: RoundKind, startFrom: RoundInput['startFrom']): Promise<void> {
  const { input, state, activities, lease } = run;
  const ownerTag = ownerTagFor(workflowInfo().workflowId);
  await state.tell('provisioning');
  try {
    const trainer = await activities.provisioning.provisionTrainer({ spec: input.spec, ownerTag });
    lease.resourceId = trainer.resourceId;
    state.trainerReady(trainer.resourceId, trainer.readyAtMs);
  } catch (err) {
    lease.resourceId ??= failureDetail<string>(err, 'resourceId'); // created, then failed: still ours to release
    throw err;
  }
  const session = await activities.onTrainer.openTrainingSession({ spec: input.spec, resourceId: lease.resourceId, ownerTag, startFrom });
  lease.sessionId = state.progress.sessionId = run.sessionId = session.sessionId;
  run.stepOffset = session.stepOffset;
  if (kind.referenceSession(input)) {
    // The reference policy: the round's starting weights, frozen in a second session on the same trainer.
    const referenceFrom = input.startFrom && { checkpointId: input.startFrom.checkpointId, loadOptimizer: false };
    const reference = await activities.onTrainer.openTrainingSession({
      spec: input.spec,
      resourceId: lease.resourceId,
      ownerTag: referenceTagFor(workflowInfo().workflowId),
      startFrom: referenceFrom,
    });
    run.referenceSessionId = reference.sessionId;
  }
}

/** Releases the trainer now (pause, budget): its GPU time stops counting. */
async function releaseTrainerNow(run: RoundRun): Promise<void> {
  const { lease } = run;
  if (!lease.resourceId) return;
  await run.activities.cleanup.releaseTrainer({ spec: run.input.spec, resourceId: lease.resourceId, sessionId: lease.sessionId });
  run.state.trainerReleased(lease.resourceId);
  lease.resourceId = lease.sessionId = undefined;
}

/**
 * Training segments until every planned step is applied or a budget is reached. A pause interrupts the running
 * segment (within about a step) rather than waiting for its end, and so does a spent budget.
 */
async function trainAllSteps(
  run: RoundRun,
  kind: RoundKind,
  totalSteps: number,
): Promise<{ cursor: { step: number }; budgetInterrupts: boolean }> {
  const { input, state, activities } = run;
  const interruptible = patched('pause-interrupts-segments');
  const budgetInterrupts = interruptible && patched('budget-interrupts-segments');
  if (budgetInterrupts) void state.watchBudget().catch(() => undefined); // ends with training, or with the round's cancellation
  let cursor = { step: 0 };
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
    };
    const train = () => kind.segment(interruptible ? activities.segments : activities.onTrainer, run, segmentInput);
    const segment = interruptible ? await untilInterrupted(train, () => state.pauseRequested || state.budgetHit) : await train();
    if (!segment) continue; // interrupted without an answer: the next checkpoint says where the trainer is
    cursor = segment.cursor;
    state.setStep(cursor.step);
    if (segment.latestLoss !== undefined) state.progress.latestLoss = segment.latestLoss;
    if (segment.latestReward !== undefined) {
      state.progress.latestReward = state.result.latestReward = segment.latestReward;
      state.result.firstReward ??= segment.firstReward;
    }
    if (segment.latestMargin !== undefined) state.progress.latestMargin = segment.latestMargin;
    await state.tell('training', { segmentEnd: true });
  }
  return { cursor, budgetInterrupts };
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
    key: state.key('pause', `s${cursor.step}`),
  });
  // The checkpoint's step is the trainer's own count: the truth, should an interrupted segment not have said.
  if (interruptible) {
    cursor = trainerStep(checkpoint.step, run.stepOffset, cursor, totalSteps);
    state.setStep(cursor.step);
  }
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
    } catch (err) {
      cleanupStatus = `failed: ${failureTypeOf(err)}`;
    }
  }
  state.settleCost();
  const failureMessage = state.failure === undefined ? undefined : failureMessageOf(state.failure);
  await run.activities.cleanup.writeRoundReport({
    path: state.result.reportPath,
    evaluationsPath: state.result.evaluationsPath,
    stepsDir: state.file('steps'),
    report: roundReport(input, state.result, run.data, state.progress, state.released, cleanupStatus, failureMessage),
  });
  await state.tell(state.result.status);
}
