import {
  ActivityFailure,
  ApplicationFailure,
  CancelledFailure,
  CancellationScope,
  condition,
  getExternalWorkflowHandle,
  isCancellation,
  log,
  patched,
  proxyActivities,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { Activities } from '../activities';
import {
  ownerTagFor,
  pauseRoundSignal,
  referenceTagFor,
  resumeRoundSignal,
  roundProgressQuery,
  roundProgressSignal,
  setRoundBudgetSignal,
  type RoundBudget,
  type RoundInput,
  type RoundProgress,
  type RoundResult,
  type RoundStatus,
} from './round-contract';

/**
 * One round, as durable steps:
 *   validate → provision (lease first) → open session → baseline loss → training segments →
 *   training checkpoint → sampler weights → sample + score → trained loss
 *   └─ cleanup (release the trainer) and the report, on every path: success, failure, cancellation.
 *
 * The round kind (`spec.round.kind`) changes what a segment does and how the round is measured, nothing else:
 *   sft   segments of cross-entropy steps; baseline/trained = eval loss; accuracy from sampled answers.
 *   grpo  segments of sample-groups → rewards → policy-gradient step → weights sync; a frozen reference session
 *         when the loss has a KL penalty; accuracy from sampled answers.
 *   dpo   reference logprobs of every pair first (kept in a file), then segments of forward → DPO gradients →
 *         custom forward-backward → optim step; baseline/trained = eval DPO loss; accuracy = preference accuracy.
 */
export async function roundWorkflow(input: RoundInput): Promise<RoundResult> {
  const { campaignId, round, spec } = input;
  const kind = spec.round?.kind ?? 'sft';
  const heartbeatTimeout = spec.advanced.heartbeatTimeoutSeconds * 1000;
  const quick = proxyActivities<Activities>({
    startToCloseTimeout: '2 minutes',
    retry: { maximumAttempts: 5, initialInterval: '1 second' },
  });
  // Long, heartbeating activities; they differ only in what a cancellation does.
  const heartbeating = (cancellationType: 'TRY_CANCEL' | 'WAIT_CANCELLATION_COMPLETED') =>
    proxyActivities<Activities>({
      startToCloseTimeout: '24 hours',
      heartbeatTimeout,
      cancellationType,
      retry: { initialInterval: '1 second', maximumInterval: '30 seconds', maximumAttempts: 20 },
    });
  const long = heartbeating('TRY_CANCEL');
  // A training segment a pause interrupts: cancelled, it takes no new step, lets the steps in flight land and returns
  // its cursor, so the workflow waits for that answer instead of abandoning the activity.
  const segments = heartbeating('WAIT_CANCELLATION_COMPLETED');
  // Provisioning is never abandoned: on cancel the workflow waits for the activity, which either reports the
  // resource it made (so cleanup releases it) or releases it itself before acknowledging the cancel.
  const provisioning = heartbeating('WAIT_CANCELLATION_COMPLETED');
  const cleanup = proxyActivities<Activities>({
    startToCloseTimeout: '2 minutes',
    retry: { initialInterval: '1 second', maximumInterval: '30 seconds', maximumAttempts: 30 },
  });

  const key = (...parts: (string | number)[]) => [campaignId, `r${round}`, ...parts].join('/');
  const ownerTag = ownerTagFor(workflowInfo().workflowId);
  const parent = workflowInfo().parent;
  const progress: RoundProgress = { campaignId, round, phase: 'validating', step: 0, totalSteps: 0, gpuMinutes: 0 };

  // GPU time: the finished holds plus the current one (from ready until now).
  let heldMs = 0;
  let readyAtMs: number | undefined;
  let gpuCount = 1;
  let pricePerHour: number | undefined;
  const heldNowMs = () => heldMs + (readyAtMs === undefined ? 0 : Math.max(0, Date.now() - readyAtMs));
  const gpuMinutes = () => (heldNowMs() / 60_000) * gpuCount;
  const costUsd = () => (pricePerHour === undefined ? undefined : (heldNowMs() / 3_600_000) * pricePerHour);
  const snapshot = (): RoundProgress => ({ ...progress, gpuMinutes: gpuMinutes(), costUsd: costUsd() });
  setHandler(roundProgressQuery, snapshot);

  // Control: pause/resume and budget changes, from the campaign or an operator.
  let pauseRequested = false;
  let budget: RoundBudget = { ...input.budget };
  setHandler(pauseRoundSignal, () => void (pauseRequested = true));
  setHandler(resumeRoundSignal, () => void (pauseRequested = false));
  let budgetVersion = 0;
  setHandler(setRoundBudgetSignal, (b) => {
    budget = { ...budget, ...b };
    budgetVersion += 1;
  });

  // Phase changes and the first segment end always reach the parent; later segment ends at most every 30 s: a
  // signal adds 5 history events, and a segment's own 6 leave room for fewer under 0.1 event per step.
  let segmentEndToldMs: number | undefined;
  const tellParent = async (phase: RoundProgress['phase'], options: { segmentEnd?: boolean } = {}) => {
    progress.phase = phase;
    if (!parent) return;
    if (options.segmentEnd) {
      const recent = segmentEndToldMs !== undefined && Date.now() - segmentEndToldMs < 30_000;
      if (recent && patched('throttle-segment-progress-signals')) return;
      segmentEndToldMs = Date.now();
    }
    await getExternalWorkflowHandle(parent.workflowId, parent.runId).signal(roundProgressSignal, snapshot()).catch(() => undefined);
  };

  const result: RoundResult = {
    campaignId,
    round,
    kind,
    status: 'failed',
    reportPath: `${input.reportDir}/round-${round}.json`,
    stepsApplied: 0,
    totalSteps: 0,
    gpuMinutes: 0,
  };
  const evaluationsPath = `${input.reportDir}/round-${round}.evaluations.json`;
  const poolEvaluationsPath = `${input.reportDir}/round-${round}.pool-evaluations.json`;
  const stepsDir = `${input.reportDir}/round-${round}.steps`;
  const samplesDir = `${input.reportDir}/round-${round}.samples`;
  const referencePath = `${input.reportDir}/round-${round}.reference-logprobs.json`;
  let referenceSessionId: string | undefined;
  // The lease: what cleanup must release. Set before provisioning, filled in as soon as the id is known.
  const lease: { resourceId?: string; sessionId?: string } = {};
  const released: string[] = [];
  let failure: unknown;
  let data: RoundInput['data'] & { trainSha256: string; evalSha256: string } = { ...input.data, trainSha256: '', evalSha256: '' };

  /** Provision (lease first) and open a session, fresh or from a checkpoint. */
  const acquireTrainer = async (startFrom: RoundInput['startFrom']) => {
    await tellParent('provisioning');
    try {
      const trainer = await provisioning.provisionTrainer({ spec, ownerTag });
      lease.resourceId = trainer.resourceId;
      readyAtMs = trainer.readyAtMs;
    } catch (err) {
      lease.resourceId ??= resourceIdFrom(err); // created, then failed: still ours to release
      throw err;
    }
    progress.resourceId = lease.resourceId;
    const session = await long.openTrainingSession({ spec, resourceId: lease.resourceId, ownerTag, startFrom });
    lease.sessionId = progress.sessionId = session.sessionId;
    if (kind === 'grpo' && spec.round?.grpo?.reference) {
      // The reference policy: the round's starting weights, frozen in a second session on the same trainer.
      const referenceFrom = input.startFrom && { checkpointId: input.startFrom.checkpointId, loadOptimizer: false };
      referenceSessionId = (await long.openTrainingSession({ spec, resourceId: lease.resourceId, ownerTag: referenceTagFor(workflowInfo().workflowId), startFrom: referenceFrom })).sessionId;
    }
    return session;
  };

  /** Releases the trainer now (pause, budget): its GPU time stops counting. */
  const releaseNow = async () => {
    if (!lease.resourceId) return;
    await cleanup.releaseTrainer({ spec, resourceId: lease.resourceId, sessionId: lease.sessionId });
    released.push(lease.resourceId);
    heldMs = heldNowMs();
    readyAtMs = undefined;
    lease.resourceId = lease.sessionId = undefined;
  };

  const overBudget = (): string | undefined => {
    if (budget.deadlineMs !== undefined && Date.now() >= budget.deadlineMs) return 'wall-time budget reached';
    if (budget.maxGpuMinutes !== undefined && gpuMinutes() >= budget.maxGpuMinutes) return 'GPU-minute budget reached';
    return undefined;
  };
  /** How long until a limit is reached at the current rate (GPU time runs only while a trainer is held). */
  const msUntilOverBudget = (): number | undefined => {
    const waits: number[] = [];
    if (budget.deadlineMs !== undefined) waits.push(budget.deadlineMs - Date.now());
    if (budget.maxGpuMinutes !== undefined && readyAtMs !== undefined) waits.push(((budget.maxGpuMinutes - gpuMinutes()) * 60_000) / gpuCount);
    return waits.length ? Math.max(0, Math.min(...waits)) : undefined;
  };
  // While training, one timer stands for the moment the budget runs out (re-armed when the budget or the trainer
  // changes), so a limit interrupts the running segment like a pause does instead of waiting for its end.
  let budgetHit = false;
  let trainingOver = false;
  const watchBudget = async () => {
    while (!trainingOver) {
      const version = budgetVersion;
      const held = readyAtMs;
      const changed = () => trainingOver || budgetVersion !== version || readyAtMs !== held;
      budgetHit = overBudget() !== undefined;
      const ms = budgetHit ? undefined : msUntilOverBudget();
      if (ms === undefined) await condition(changed);
      else if (!(await condition(changed, Math.max(1, Math.ceil(ms))))) budgetHit = overBudget() !== undefined;
      if (budgetHit) await condition(changed);
    }
  };
  /** The trainer's own step count from a checkpoint, when it is one this round can have reached; else the cursor. */
  const trainerStep = (checkpointStep: number, stepOffset: number, cursor: { step: number }, totalSteps: number) => {
    const step = checkpointStep - stepOffset;
    return step >= cursor.step && step <= totalSteps ? { step } : cursor;
  };

  try {
    const plan = await quick.prepareRound({ spec, data: input.data });
    data = { ...input.data, trainSha256: plan.trainSha256, evalSha256: plan.evalSha256 };
    gpuCount = plan.gpuCount;
    pricePerHour = plan.pricePerHour;
    progress.totalSteps = result.totalSteps = plan.totalSteps;

    let session = await acquireTrainer(input.startFrom);
    // Round-local step = provider step − offset (the offset is non-zero when resuming from a checkpoint).
    let stepOffset = session.stepOffset;

    await tellParent('baseline');
    if (kind === 'dpo') {
      await long.computeDpoReference({ campaignId, round, spec, data, sessionId: session.sessionId, stepOffset, outputPath: referencePath });
      const baseline = await long.evaluateDpo({ campaignId, round, label: 'baseline', spec, data, sessionId: session.sessionId, referencePath });
      progress.baselineLoss = result.baselineLoss = baseline.loss;
      result.baselineAccuracy = baseline.accuracy;
      result.baselineMargin = baseline.meanMargin;
    } else {
      const baseline = await long.measureLoss({ campaignId, round, label: 'baseline', spec, data, sessionId: session.sessionId, which: 'eval' });
      progress.baselineLoss = result.baselineLoss = baseline.perToken;
    }

    await tellParent('training');
    // A pause interrupts the running segment (within about a step) rather than waiting for its end; so does a limit.
    const interruptible = patched('pause-interrupts-segments');
    const budgetInterrupts = interruptible && patched('budget-interrupts-segments');
    if (budgetInterrupts) void watchBudget().catch(() => undefined); // ends with training, or with the round's cancellation
    let cursor = { step: 0 };
    while (cursor.step < plan.totalSteps) {
      result.stopReason = overBudget();
      if (result.stopReason) break;
      if (pauseRequested) {
        // Finish cleanly: checkpoint at this step, give the GPU back, wait, then come back to the same step.
        const checkpoint = await long.saveTrainingCheckpoint({ spec, sessionId: session.sessionId, key: key('pause', `s${cursor.step}`) });
        // The checkpoint's step is the trainer's own count: the truth, should an interrupted segment not have said.
        if (interruptible) {
          cursor = trainerStep(checkpoint.step, stepOffset, cursor, plan.totalSteps);
          progress.step = result.stepsApplied = cursor.step;
        }
        await releaseNow();
        await tellParent('paused');
        progress.paused = true;
        await condition(() => !pauseRequested);
        progress.paused = false;
        session = await acquireTrainer({ checkpointId: checkpoint.checkpointId, loadOptimizer: true });
        stepOffset = session.stepOffset - cursor.step;
        await tellParent('training');
      }
      const segmentInput = { campaignId, round, spec, data, sessionId: session.sessionId, stepOffset, cursor, totalSteps: plan.totalSteps, stepsDir };
      const proxy = interruptible ? segments : long;
      const train = (): Promise<SegmentOutcome> =>
        kind === 'grpo'
          ? proxy.trainGrpoSegment({ ...segmentInput, samplesDir, referenceSessionId })
          : kind === 'dpo'
            ? proxy.trainDpoSegment({ ...segmentInput, referencePath })
            : proxy.trainSegment(segmentInput);
      const segment = interruptible ? await untilPaused(train, () => pauseRequested || budgetHit) : await train();
      if (!segment) continue; // interrupted without an answer: the next checkpoint says where the trainer is
      cursor = segment.cursor;
      progress.step = result.stepsApplied = cursor.step;
      if (segment.latestLoss !== undefined) progress.latestLoss = segment.latestLoss;
      if (segment.latestReward !== undefined) {
        progress.latestReward = result.latestReward = segment.latestReward;
        result.firstReward ??= segment.firstReward;
      }
      if (segment.latestMargin !== undefined) progress.latestMargin = segment.latestMargin;
      await tellParent('training', { segmentEnd: true });
    }

    trainingOver = true;
    await tellParent('checkpointing');
    const checkpoint = await long.saveTrainingCheckpoint({ spec, sessionId: session.sessionId, key: key('training-checkpoint', `s${cursor.step}`) });
    if (budgetInterrupts) {
      cursor = trainerStep(checkpoint.step, stepOffset, cursor, plan.totalSteps);
      progress.step = result.stepsApplied = cursor.step;
    }
    result.trainingCheckpointId = checkpoint.checkpointId;
    if (result.stopReason) {
      result.status = 'stopped'; // over budget: keep the checkpoint, skip sampling, release the GPU now
    } else {
      const sampler = await long.saveSamplerWeights({ spec, sessionId: session.sessionId, key: key('sampler-weights') });
      result.samplerCheckpointId = sampler.checkpointId;

      if (kind === 'dpo') {
        await tellParent('evaluating');
        const trained = await long.evaluateDpo({ campaignId, round, label: 'trained', spec, data, sessionId: session.sessionId, referencePath, outputPath: evaluationsPath });
        result.evaluationsPath = evaluationsPath;
        result.accuracy = trained.accuracy;
        result.trainedMargin = trained.meanMargin;
        result.trainedLoss = trained.loss;
        result.status = 'completed';
      } else {
        await tellParent('sampling');
        const scored = await long.sampleAndScore({ campaignId, round, spec, data, sessionId: session.sessionId, outputPath: evaluationsPath, label: 'sample' });
        result.accuracy = scored.accuracy;
        result.evaluationsPath = evaluationsPath;
        if (input.pool) {
          const pool = await long.sampleAndScore({ campaignId, round, spec, data, sessionId: session.sessionId, outputPath: poolEvaluationsPath, label: 'pool', dataset: input.pool });
          result.poolEvaluationsPath = poolEvaluationsPath;
          result.poolAccuracy = pool.accuracy;
        }

        await tellParent('evaluating');
        const trained = await long.measureLoss({ campaignId, round, label: 'trained', spec, data, sessionId: session.sessionId, which: 'eval' });
        result.trainedLoss = trained.perToken;
        result.status = 'completed';
      }
    }
  } catch (err) {
    failure = err;
    result.status = isCancellation(err) ? 'cancelled' : 'failed';
    result.errorType = errorTypeOf(err);
    log.warn('round did not complete', { status: result.status, errorType: result.errorType });
  } finally {
    trainingOver = true;
    progress.phase = 'cleanup';
    // Runs even when the workflow is cancelled: a cleanup started in a cancelled scope would be cancelled too.
    await CancellationScope.nonCancellable(async () => {
      let cleanupStatus = released.length ? 'deactivated' : 'nothing-to-release';
      if (lease.resourceId) {
        try {
          const resourceId = lease.resourceId;
          cleanupStatus = (await cleanup.releaseTrainer({ spec, resourceId, sessionId: lease.sessionId })).status;
          released.push(resourceId);
        } catch (err) {
          cleanupStatus = `failed: ${errorTypeOf(err)}`; // the reaper will find it
        }
      }
      heldMs = heldNowMs();
      readyAtMs = undefined;
      result.gpuMinutes = gpuMinutes();
      result.costUsd = costUsd();
      await cleanup.writeRoundReport({
        path: result.reportPath,
        evaluationsPath: result.evaluationsPath,
        stepsDir,
        report: reportOf(input, result, data, progress, released, cleanupStatus, failure === undefined ? undefined : messageOf(failure)),
      });
      await tellParent(result.status as RoundStatus);
    });
  }
  if (failure !== undefined) {
    if (isCancellation(failure)) throw failure;
    throw ApplicationFailure.create({
      type: result.errorType ?? 'RoundFailed',
      message: `round ${round} of ${campaignId} failed (${result.errorType}): ${messageOf(failure)}; report: ${result.reportPath}`,
      nonRetryable: true,
      details: [result],
      cause: failure instanceof Error ? failure : undefined,
    });
  }
  return result;
}

/**
 * Runs a segment that `stop()` may interrupt: when it turns true the segment's activity is cancelled; it drains and
 * returns its cursor (the result), or ends without one (undefined). A cancellation of the round itself is passed
 * on at once as a cancellation, without waiting for the segment.
 */
async function untilPaused<T>(run: () => Promise<T>, stop: () => boolean): Promise<T | undefined> {
  const scope = new CancellationScope();
  let settled = false;
  let interrupted = false;
  const running = scope.run(run);
  running.then(
    () => void (settled = true),
    () => void (settled = true),
  );
  condition(() => settled || stop()).then(
    () => {
      if (settled) return;
      interrupted = true;
      scope.cancel();
    },
    () => undefined, // the round itself was cancelled: its scope cancels the segment
  );
  try {
    // A cancellation of the round itself does not wait for the segment to drain: cleanup releases the trainer now.
    return await Promise.race([running, CancellationScope.current().cancelRequested]);
  } catch (err) {
    if (CancellationScope.current().consideredCancelled) throw isCancellation(err) ? err : new CancelledFailure('round cancelled while its segment was stopping');
    if (interrupted) return undefined;
    throw err;
  }
}

/** What any kind's training segment reports. */
interface SegmentOutcome {
  cursor: { step: number };
  latestLoss?: number;
  latestReward?: number;
  firstReward?: number;
  latestMargin?: number;
}

function resourceIdFrom(err: unknown): string | undefined {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  if (cause instanceof ApplicationFailure) {
    const d = cause.details?.[0] as { resourceId?: string } | undefined;
    return d?.resourceId;
  }
  return undefined;
}

function messageOf(err: unknown): string {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  return cause instanceof Error ? cause.message : String(err);
}

/** The error type a report shows: the activity's failure type (e.g. NON_FINITE_LOSS), else the failure's name. */
function errorTypeOf(err: unknown): string {
  if (isCancellation(err)) return 'Cancelled';
  const cause = err instanceof ActivityFailure ? err.cause : err;
  if (cause instanceof ApplicationFailure && cause.type) return cause.type;
  if (cause instanceof Error) return cause.name;
  return 'Unknown';
}

function reportOf(
  input: RoundInput,
  result: RoundResult,
  data: { train: string; eval: string; trainSha256: string; evalSha256: string },
  progress: RoundProgress,
  released: string[],
  cleanupStatus: string,
  failureMessage: string | undefined,
): Record<string, unknown> {
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
    kind: result.kind ?? 'sft',
    loss_unit:
      result.kind === 'dpo'
        ? 'mean DPO loss (−log σ(β·margin)) over the eval pairs'
        : 'mean cross-entropy per trained (answer) token of the eval set, in nats',
    first_reward: result.firstReward ?? null,
    latest_reward: result.latestReward ?? null,
    baseline_preference_accuracy: result.baselineAccuracy ?? null,
    baseline_margin: result.baselineMargin ?? null,
    trained_margin: result.trainedMargin ?? null,
    accuracy: result.accuracy ?? null,
    pool_accuracy: result.poolAccuracy ?? null,
    training_checkpoint_id: result.trainingCheckpointId ?? null,
    sampler_checkpoint_id: result.samplerCheckpointId ?? null,
    steps_applied: result.stepsApplied,
    steps_planned: result.totalSteps,
    gpu_minutes: result.gpuMinutes,
    estimated_cost_usd: result.costUsd ?? null,
    status: result.status,
    stop_reason: result.stopReason ?? null,
    error_type: result.errorType ?? null,
    error_message: failureMessage ?? null,
    cleanup_status: cleanupStatus,
    deactivated_ids: released,
  };
}
