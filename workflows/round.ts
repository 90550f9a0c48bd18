import {
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  isCancellation,
  log,
  proxyActivities,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { RoundActivities } from '../activities/round';
import { roundProgressQuery, type RoundInput, type RoundProgress, type RoundResult, type RoundStatus } from './round-contract';

/**
 * One round, as durable steps:
 *   validate → provision (lease first) → open session → baseline loss → training segments →
 *   training checkpoint → sampler weights → sample + score → trained loss
 *   └─ cleanup (release the trainer) and the report, on every path: success, failure, cancellation.
 */
export async function roundWorkflow(input: RoundInput): Promise<RoundResult> {
  const { campaignId, round, spec } = input;
  const heartbeatTimeout = spec.advanced.heartbeatTimeoutSeconds * 1000;
  const quick = proxyActivities<RoundActivities>({
    startToCloseTimeout: '2 minutes',
    retry: { maximumAttempts: 5, initialInterval: '1 second' },
  });
  const long = proxyActivities<RoundActivities>({
    startToCloseTimeout: '24 hours',
    heartbeatTimeout,
    cancellationType: 'TRY_CANCEL',
    retry: { initialInterval: '1 second', maximumInterval: '30 seconds', maximumAttempts: 20 },
  });
  const cleanup = proxyActivities<RoundActivities>({
    startToCloseTimeout: '2 minutes',
    retry: { initialInterval: '1 second', maximumInterval: '30 seconds', maximumAttempts: 30 },
  });

  const key = (...parts: (string | number)[]) => [campaignId, `r${round}`, ...parts].join('/');
  const ownerTag = workflowInfo().workflowId;
  const progress: RoundProgress = { campaignId, round, phase: 'validating', step: 0, totalSteps: 0, gpuMinutes: 0 };
  let readyAtMs: number | undefined;
  let gpuCount = 1;
  const gpuMinutes = () => (readyAtMs === undefined ? 0 : (Math.max(0, Date.now() - readyAtMs) / 60_000) * gpuCount);
  setHandler(roundProgressQuery, () => ({ ...progress, gpuMinutes: gpuMinutes() }));

  const result: RoundResult = {
    campaignId,
    round,
    status: 'failed',
    reportPath: `${input.reportDir}/round-${round}.json`,
    stepsApplied: 0,
    totalSteps: 0,
    gpuMinutes: 0,
  };
  const evaluationsPath = `${input.reportDir}/round-${round}.evaluations.json`;
  const stepsDir = `${input.reportDir}/round-${round}.steps`;
  // The lease: what cleanup must release. Set before provisioning, filled in as soon as the id is known.
  const lease: { resourceId?: string; sessionId?: string } = {};
  let failure: unknown;
  let data: RoundInput['data'] & { trainSha256: string; evalSha256: string } = { ...input.data, trainSha256: '', evalSha256: '' };

  try {
    const plan = await quick.prepareRound({ spec, data: input.data });
    data = { ...input.data, trainSha256: plan.trainSha256, evalSha256: plan.evalSha256 };
    gpuCount = plan.gpuCount;
    progress.totalSteps = result.totalSteps = plan.totalSteps;

    progress.phase = 'provisioning';
    try {
      const trainer = await long.provisionTrainer({ spec, ownerTag });
      lease.resourceId = trainer.resourceId;
      readyAtMs = trainer.readyAtMs;
    } catch (err) {
      lease.resourceId ??= resourceIdFrom(err); // created, then failed: still ours to release
      throw err;
    }
    progress.resourceId = lease.resourceId;
    const session = await long.openTrainingSession({ spec, resourceId: lease.resourceId, ownerTag, startFrom: input.startFrom });
    lease.sessionId = progress.sessionId = session.sessionId;

    progress.phase = 'baseline';
    const baseline = await long.measureLoss({ campaignId, round, label: 'baseline', spec, data, sessionId: session.sessionId, which: 'eval' });
    progress.baselineLoss = result.baselineLoss = baseline.perToken;

    progress.phase = 'training';
    let cursor = { step: 0 };
    while (cursor.step < plan.totalSteps) {
      const segment = await long.trainSegment({
        campaignId,
        round,
        spec,
        data,
        sessionId: session.sessionId,
        stepOffset: session.stepOffset,
        cursor,
        totalSteps: plan.totalSteps,
        stepsDir,
      });
      cursor = segment.cursor;
      progress.step = result.stepsApplied = cursor.step;
      if (segment.latestLoss !== undefined) progress.latestLoss = segment.latestLoss;
    }

    progress.phase = 'checkpointing';
    const checkpoint = await long.saveTrainingCheckpoint({ spec, sessionId: session.sessionId, key: key('training-checkpoint') });
    result.trainingCheckpointId = checkpoint.checkpointId;
    const sampler = await long.saveSamplerWeights({ spec, sessionId: session.sessionId, key: key('sampler-weights') });
    result.samplerCheckpointId = sampler.checkpointId;

    progress.phase = 'sampling';
    const scored = await long.sampleAndScore({ campaignId, round, spec, data, sessionId: session.sessionId, outputPath: evaluationsPath });
    result.accuracy = scored.accuracy;
    result.evaluationsPath = evaluationsPath;

    progress.phase = 'evaluating';
    const trained = await long.measureLoss({ campaignId, round, label: 'trained', spec, data, sessionId: session.sessionId, which: 'eval' });
    result.trainedLoss = trained.perToken;
    result.status = 'completed';
  } catch (err) {
    failure = err;
    result.status = isCancellation(err) ? 'cancelled' : 'failed';
    result.errorType = errorTypeOf(err);
    log.warn('round did not complete', { status: result.status, errorType: result.errorType });
  } finally {
    progress.phase = 'cleanup';
    // Runs even when the workflow is cancelled: a cleanup started in a cancelled scope would be cancelled too.
    await CancellationScope.nonCancellable(async () => {
      let cleanupStatus = 'nothing-to-release';
      if (lease.resourceId) {
        try {
          cleanupStatus = (await cleanup.releaseTrainer({ spec, resourceId: lease.resourceId, sessionId: lease.sessionId })).status;
        } catch (err) {
          cleanupStatus = `failed: ${errorTypeOf(err)}`; // the reaper will find it
        }
      }
      result.gpuMinutes = gpuMinutes();
      await cleanup.writeRoundReport({
        path: result.reportPath,
        evaluationsPath: result.evaluationsPath,
        stepsDir,
        report: reportOf(input, result, data, lease, cleanupStatus, workflowInfo().workflowId, workflowInfo().runId, failure === undefined ? undefined : messageOf(failure)),
      });
    });
    progress.phase = result.status as RoundStatus;
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
  lease: { resourceId?: string; sessionId?: string },
  cleanupStatus: string,
  workflowId: string,
  runId: string,
  failureMessage: string | undefined,
): Record<string, unknown> {
  return {
    campaign_id: input.campaignId,
    round: input.round,
    name: input.spec.name,
    workflow_id: workflowId,
    run_id: runId,
    provider: input.spec.provider.kind,
    base_model: input.spec.provider.model,
    resource_id: lease.resourceId ?? null,
    session_id: lease.sessionId ?? null,
    train_path: data.train,
    eval_path: data.eval,
    train_sha256: data.trainSha256,
    eval_sha256: data.evalSha256,
    started_from_checkpoint: input.startFrom?.checkpointId ?? null,
    baseline_loss: result.baselineLoss ?? null,
    trained_loss: result.trainedLoss ?? null,
    loss_unit: 'mean cross-entropy per trained (answer) token of the eval set, in nats',
    accuracy: result.accuracy ?? null,
    training_checkpoint_id: result.trainingCheckpointId ?? null,
    sampler_checkpoint_id: result.samplerCheckpointId ?? null,
    steps_applied: result.stepsApplied,
    steps_planned: result.totalSteps,
    gpu_minutes: result.gpuMinutes,
    status: result.status,
    error_type: result.errorType ?? null,
    error_message: failureMessage ?? null,
    cleanup_status: cleanupStatus,
    deactivated_ids: cleanupStatus === 'deactivated' || cleanupStatus === 'already-failed' ? [lease.resourceId] : [],
  };
}
