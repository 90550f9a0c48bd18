import {
  ApplicationFailure,
  CancellationScope,
  condition,
  defineSignal,
  getExternalWorkflowHandle,
  log,
  patched,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import { armDecisionSignal, armRungSignal } from '../sweep/record';
import { evaluateDuring, evaluationDue, restoreBest } from './evaluation';
import { failureDetail, failureMessageOf, failureReasonOf, failureTypeOf, isCancellation, recoverable } from '../failures';
import type { TokenUsage } from '../../config/rules/usage';
import { untilInterrupted } from '../interrupt';
import { roundActivities } from './activities';
import {
  pauseRoundSignal,
  resumeRoundSignal,
  roundProgressQuery,
  roundWaitingSignal,
  setRoundBudgetSignal,
  type RoundInput,
  type RoundResult,
  type SegmentOutcome,
  type TrainingCursor,
} from './contract';
import { TRAINER_CREATED_SIGNAL } from '../../config/rules/trainer-registry';
import { ROUND_KIND_STEPS, type EvaluationFigures, type RoundKindSteps } from './kinds';
import { roundReport } from './report';
import { RoundState } from './state';
import { RoundTrainer } from './trainer';

/**
 * One round, as durable steps:
 *   validate → provision (lease first) → open session → baseline → training segments →
 *   training checkpoint → sampler weights → sample + score → trained loss
 *   └─ cleanup (release the trainer) and the report, on every path: success, failure, cancellation.
 * What the round kind changes (baseline, segment, evaluation) is in kinds.ts; the trainer the round holds, and
 * every pause, rollback and reopening of it, in round-trainer.ts.
 *
 * Deactivation is guaranteed on every path: (1) cleanup in `finally` below, non-cancellable, after success, failure
 * and cancellation; (2) provisioning releases a trainer it made when it fails or is cancelled before the workflow
 * hears the id; (3) a pause or a spent budget releases the trainer at once; (4) termination and timeouts run no
 * workflow code: the reaper deactivates trainers whose owning workflow (in their tag) is closed. The round catches
 * every error on purpose: releasing the GPU matters more than retrying a stuck workflow task.
 */
export async function roundWorkflow(input: RoundInput): Promise<RoundResult> {
  const state = new RoundState(input);
  // Its messages (contract.ts), answered from its first workflow task on: progress; pause and resume, from the campaign;
  // a trainer created and what provisioning waits for, from the provisioning activity; the budget, from the campaign.
  setHandler(roundProgressQuery, () => state.snapshot());
  setHandler(pauseRoundSignal, () => void (state.pauseRequested = true));
  setHandler(resumeRoundSignal, () => void (state.pauseRequested = false));
  setHandler(defineSignal<[{ resourceId: string }]>(TRAINER_CREATED_SIGNAL), ({ resourceId }) => state.registerTrainer(resourceId));
  setHandler(roundWaitingSignal, (wait) => state.waiting(wait));
  setHandler(setRoundBudgetSignal, (budget) => state.setBudget(budget));
  setHandler(armDecisionSignal, ({ rung, keep }) => void state.armDecisions.set(rung, keep));

  const { result } = state;
  const kind = ROUND_KIND_STEPS[state.kind];
  const activities = roundActivities(input.spec.advanced.heartbeatTimeoutSeconds);
  const trainer = new RoundTrainer(input, state, activities, { referenceSession: kind.referenceSession(input) });

  try {
    const plan = await trainer.prepare();
    if (input.evaluateOnly) plan.totalSteps = 0; // measured as it starts: no step is trained
    state.planned(plan);
    await trainer.acquire();
    await state.tell('baseline');
    const baselineStartedMs = Date.now();
    const baseline = await trainer.phase('baseline', () => kind.baseline(trainer));
    state.baselineMs = Date.now() - baselineStartedMs;
    Object.assign(result, baseline);
    state.progress.baselineLoss = baseline.baselineLoss;

    await state.tell('training');
    const { cursor, checkpoint, budgetInterrupts } = await trainToCheckpoint(trainer, kind, plan.totalSteps);
    if (budgetInterrupts) state.setStep(trainer.trainerStep(checkpoint.step, cursor, plan.totalSteps).step);
    result.trainingCheckpointId = checkpoint.checkpointId;
    trainer.checkpointed(checkpoint.checkpointId, state.progress.step);
    if (!result.stopReason && !state.affords(state.baselineMs)) result.stopReason = 'dollar budget reached before evaluation';
    if (result.stopReason) {
      result.status = 'stopped'; // over budget: keep the checkpoint, skip sampling, release the GPU now
    } else {
      await trainer.phase('sampler-weights', async () => {
        const key = trainer.key('sampler-weights');
        const sampler = await activities.onTrainer.saveSamplerWeights({ spec: input.spec, sessionId: trainer.sessionId, key });
        result.samplerCheckpointId = sampler.checkpointId;
      });
      // Each figure goes on the result as it is measured: a later failure keeps what was measured before it.
      const measured = (figures: EvaluationFigures) => void Object.assign(result, figures);
      Object.assign(result, await trainer.phase('evaluation', () => kind.evaluate(trainer, measured)));
      result.status = 'completed';
    }
  } catch (err) {
    if (budgetRefusal(err, state)) {
      // An activity found its next operation would cross the dollar budget (tokens): nothing past it was submitted.
      result.status = 'stopped';
      result.stopReason = result.trainingCheckpointId ? 'dollar budget reached before evaluation' : 'dollar budget reached';
    } else {
      state.failure = err instanceof Error ? err : new Error(String(err));
      result.status = isCancellation(err) ? 'cancelled' : 'failed';
      result.errorType = failureTypeOf(err);
      if (!isCancellation(err)) result.errorMessage = failureReasonOf(err);
      log.warn('round did not complete', { status: result.status, errorType: result.errorType });
    }
  } finally {
    state.trainingOver = true;
    state.progress.phase = 'cleanup';
    // Runs even when the workflow is cancelled: a cleanup started in a cancelled scope would be cancelled too.
    await CancellationScope.nonCancellable(() => cleanUp(trainer));
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
 * budget; a provider-side failure rolls back to the latest checkpoint and training goes on from there.
 */
async function trainToCheckpoint(
  trainer: RoundTrainer,
  kind: RoundKindSteps,
  totalSteps: number,
): Promise<{ cursor: TrainingCursor; checkpoint: { checkpointId: string; step: number }; budgetInterrupts: boolean }> {
  const { input, state, activities } = trainer;
  const interruptible = patched('pause-interrupts-segments');
  const budgetInterrupts = interruptible && patched('budget-interrupts-segments');
  if (budgetInterrupts) void state.watchBudget().catch(() => undefined); // ends with training, or with the round's cancellation
  let cursor = { step: 0 };
  trainer.phaseStartedAtMs = Date.now();
  for (;;) {
    cursor = await trainAllSteps(trainer, kind, cursor, totalSteps, interruptible);
    state.trainingOver = true;
    await state.tell('checkpointing');
    if (state.result.earlyStop) {
      // Stopped early: the round finishes from its best evaluated weights, whose checkpoint is already saved.
      const stepOffset = trainer.stepOffset;
      const best = await trainer.phase('restore-best', () => restoreBest(trainer), { pausable: false });
      return { cursor, checkpoint: { checkpointId: best.checkpointId, step: stepOffset + best.step }, budgetInterrupts };
    }
    try {
      const key = trainer.key('training-checkpoint', `s${cursor.step}`);
      const checkpoint = await activities.onTrainer.saveTrainingCheckpoint({ spec: input.spec, sessionId: trainer.sessionId, key });
      return { cursor, checkpoint, budgetInterrupts };
    } catch (err) {
      if (!recoverable(err)) throw err;
      cursor = await trainer.recover('checkpointing', err);
      state.trainingOver = false;
      if (budgetInterrupts) void state.watchBudget().catch(() => undefined);
      await state.tell('training');
    }
  }
}

/** Training segments from the cursor until every planned step is applied or a budget is reached. */
async function trainAllSteps(
  trainer: RoundTrainer,
  kind: RoundKindSteps,
  from: TrainingCursor,
  totalSteps: number,
  interruptible: boolean,
): Promise<TrainingCursor> {
  const { state, activities } = trainer;
  let cursor = from;
  while (cursor.step < totalSteps) {
    state.result.stopReason = state.overBudget();
    if (state.result.stopReason) break;
    if (state.pauseRequested) cursor = await trainer.pauseAt(cursor, totalSteps, { trainerCounts: interruptible });
    // A dollar budget on GPU time: the next segment starts only if a step of it, and closing, still fit.
    const steps = Math.min(totalSteps - cursor.step, trainer.input.spec.training.segmentSteps);
    if (!state.affords(state.stepMs, steps * state.stepMs)) {
      state.result.stopReason = 'dollar budget reached';
      break;
    }
    const segmentInput = trainer.segmentInput(cursor, totalSteps);
    const startedMs = Date.now();
    const train = () => kind.segment(interruptible ? activities.segments : activities.onTrainer, trainer, segmentInput);
    let segment: SegmentOutcome | undefined;
    try {
      segment = interruptible ? await untilInterrupted(train, () => state.pauseRequested || state.budgetHit) : await train();
    } catch (err) {
      if (!recoverable(err)) throw err;
      cursor = await trainer.recover('training', err);
      continue;
    }
    if (!segment) continue; // interrupted without an answer: the next checkpoint says where the trainer is
    for (const checkpoint of segment.checkpoints ?? []) trainer.noteCheckpoint(checkpoint);
    state.noteSegmentTime(segment.cursor.step - cursor.step, Date.now() - startedMs);
    cursor = segment.cursor;
    state.segmentEnded(segment);
    await state.tell('training', { segmentEnd: true });
    if (evaluationDue(trainer, cursor.step, totalSteps)) {
      try {
        await evaluateDuring(trainer, cursor.step, totalSteps);
      } catch (err) {
        if (budgetRefusal(err, state)) continue; // the loop's next turn stops training
        if (!recoverable(err)) throw err;
        cursor = await trainer.recover('evaluation', err);
        continue;
      }
      if (state.result.earlyStop) break;
      if (await stoppedAtRung(trainer, cursor.step, totalSteps)) break;
    }
  }
  return cursor;
}

/**
 * An arm of a sweep at a rung (a multiple of its rung steps, before its end): it tells the sweep its eval figure and
 * waits for the decision; stopped, training ends here (the round checkpoints and releases its trainer).
 */
async function stoppedAtRung(trainer: RoundTrainer, step: number, totalSteps: number): Promise<boolean> {
  const { input, state } = trainer;
  const arm = input.arm;
  if (!arm || step % arm.rungSteps !== 0 || step >= totalSteps) return false;
  const rung = step / arm.rungSteps;
  if (!state.armDecisions.has(rung)) {
    const point = trainer.evaluations[trainer.evaluations.length - 1];
    const value = (arm.metric === 'eval_loss' ? point?.loss : point?.metric) ?? Number.NaN;
    const parent = workflowInfo().parent;
    if (parent) await getExternalWorkflowHandle(parent.workflowId, parent.runId).signal(armRungSignal, { arm: arm.arm, rung, step, value });
    await condition(() => state.armDecisions.has(rung));
  }
  if (state.armDecisions.get(rung)) return false;
  state.result.stopReason = `sweep: stopped at rung ${rung} (step ${step})`;
  return true;
}

/** A BudgetReached failure (an activity refused to cross the dollar budget), noted on the state; false otherwise. */
function budgetRefusal(err: unknown, state: RoundState): boolean {
  if (failureTypeOf(err) !== 'BudgetReached') return false;
  state.addUsage(failureDetail<TokenUsage>(err, 'usage'));
  state.budgetRefused(failureReasonOf(err));
  return true;
}

/** Releases what the round holds and writes the report; the reaper finds a trainer whose release failed. */
async function cleanUp(trainer: RoundTrainer): Promise<void> {
  const { input, state } = trainer;
  const cleanupStatus = await trainer.releaseAll();
  state.settleCost();
  if (state.recoveries.length) state.result.recoveries = state.recoveries;
  const keep = input.spec.training.checkpointEvery?.keep ?? 3;
  if (trainer.checkpoints.length) state.result.checkpoints = trainer.keptCheckpoints(keep, state.result.earlyStop?.bestCheckpointId);
  const failureMessage = state.failure === undefined ? undefined : failureMessageOf(state.failure);
  const writeReport = trainer.activities.cleanup.writeRoundReport({
    path: state.result.reportPath,
    evaluationsPath: state.result.evaluationsPath,
    stepsDir: state.files.steps,
    rollbacks: trainer.rollbacks.length ? trainer.rollbacks : undefined,
    report: roundReport(input, state.result, trainer.data, state.progress, state.released, cleanupStatus, failureMessage),
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
