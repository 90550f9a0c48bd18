import {
  CancellationScope,
  ParentClosePolicy,
  allHandlersFinished,
  condition,
  continueAsNew,
  patched,
  proxyActivities,
  setHandler,
  startChild,
  workflowInfo,
  type ChildWorkflowHandle,
} from '@temporalio/workflow';
import type { CampaignActivities } from '../activities/campaign';
import {
  campaignProgressQuery,
  pauseCampaignUpdate,
  resumeCampaignUpdate,
  setCampaignLimitsUpdate,
  stopCampaignUpdate,
  type CampaignInput,
  type CampaignProgress,
  type CampaignResult,
  type CampaignState,
  type RoundSummary,
  validateCampaignLimits,
  validateStopRequest,
} from './campaign-contract';
import { childRoundResultOf, failureReasonOf, failureTypeOf, isCancellation } from './failures';
import {
  pauseRoundSignal,
  resumeRoundSignal,
  roundProgressSignal,
  setRoundBudgetSignal,
  type RoundInput,
  type RoundProgress,
  type RoundResult,
} from './round-contract';
import { roundWorkflow } from './round';
import { checkpointRefsMemo } from '../config/rules/retention';

/**
 * A campaign: rounds until the target metric, `rounds.max`, or a budget is reached. Each round is a child
 * workflow (cancelled if the campaign closes); round N+1 starts from round N's training checkpoint and trains on
 * data chosen by the next-data policy. The campaign continues-as-new after every round, carrying only summaries.
 */
export async function campaignWorkflow(input: CampaignInput): Promise<CampaignResult> {
  const campaignId = input.campaignId ?? workflowInfo().workflowId;
  const { spec } = input;
  const campaignDir = `${input.reportRoot}/${campaignId}`;
  const summaryPath = `${campaignDir}/campaign.json`;
  // Where the campaign is tracked (MLflow), for the summary activity: the spec's settings or the worker's environment.
  const track = { name: spec.name, ...(spec.tracking ? { tracking: spec.tracking } : {}) };
  // Checkpoint retention, for the summary activity: never what the campaign starts or continues from.
  const retention = () =>
    spec.retention
      ? {
          rule: spec.retention,
          provider: spec.provider,
          own: [spec.rounds.startFrom?.checkpointId, state.lastCheckpointId].filter((id): id is string => Boolean(id)),
        }
      : undefined;
  // They heartbeat (keepingAlive): a worker that dies in one is noticed after the heartbeat timeout.
  const activities = proxyActivities<CampaignActivities>({
    startToCloseTimeout: '2 minutes',
    heartbeatTimeout: spec.advanced.heartbeatTimeoutSeconds * 1000,
    retry: { maximumAttempts: 10 },
  });

  const state: CampaignState = input.state ?? {
    startedAtMs: Date.now(),
    limits: {
      maxRounds: spec.rounds.max,
      maxGpuMinutes: spec.budget.maxGpuMinutes,
      maxWallMinutes: spec.budget.maxWallMinutes,
      targetAccuracy: spec.rounds.target?.atLeast,
    },
    rounds: [],
    nextTrain: { path: spec.data.train },
    paused: false,
  };
  let child: ChildWorkflowHandle<typeof roundWorkflow> | undefined;
  let childScope: CancellationScope | undefined;
  let current: RoundProgress | undefined;
  let stopReason: string | undefined;
  let status: CampaignProgress['status'] = state.paused ? 'paused' : 'running';

  const usedGpuMinutes = () => state.rounds.reduce((a, r) => a + r.gpuMinutes, 0) + (current?.gpuMinutes ?? 0);
  const usedCost = () => {
    const costs = [...state.rounds.map((r) => r.costUsd), current?.costUsd].filter((c): c is number => c !== undefined);
    return costs.length ? costs.reduce((a, c) => a + c, 0) : undefined;
  };
  const progress = (): CampaignProgress => ({
    campaignId,
    status,
    rounds: state.rounds,
    currentRound: current,
    limits: state.limits,
    gpuMinutes: usedGpuMinutes(),
    costUsd: usedCost(),
    wallMinutes: (Date.now() - state.startedAtMs) / 60_000,
    stopReason,
    summaryPath,
  });
  /** What the running round may still spend. */
  const roundBudget = () => ({
    deadlineMs: state.limits.maxWallMinutes !== undefined ? state.startedAtMs + state.limits.maxWallMinutes * 60_000 : undefined,
    maxGpuMinutes:
      state.limits.maxGpuMinutes !== undefined
        ? Math.max(0, state.limits.maxGpuMinutes - state.rounds.reduce((a, r) => a + r.gpuMinutes, 0))
        : undefined,
  });

  setHandler(campaignProgressQuery, progress);
  setHandler(roundProgressSignal, (p) => {
    if (child && p.round === state.rounds.length + 1) current = p;
  });
  setHandler(pauseCampaignUpdate, async () => {
    state.paused = true;
    status = 'paused';
    if (child) await child.signal(pauseRoundSignal);
    return progress();
  });
  setHandler(resumeCampaignUpdate, async () => {
    state.paused = false;
    status = 'running';
    if (child) await child.signal(resumeRoundSignal);
    return progress();
  });
  setHandler(
    stopCampaignUpdate,
    ({ mode }) => {
      state.stop = mode;
      if (mode === 'now') childScope?.cancel();
      return progress();
    },
    { validator: validateStopRequest },
  );
  setHandler(
    setCampaignLimitsUpdate,
    async (limits) => {
      state.limits = { ...state.limits, ...limits };
      if (child) await child.signal(setRoundBudgetSignal, roundBudget());
      return progress();
    },
    { validator: validateCampaignLimits },
  );

  /** Why the campaign should not start another round, if it should not. Checked before each round. */
  const reasonToStop = (): string | undefined => {
    const last = state.rounds[state.rounds.length - 1];
    if (state.stop) return state.stop === 'now' ? 'stopped by request' : 'stopped by request after the round';
    if (last?.status === 'stopped') return `${last.stopReason ?? 'budget reached'} in round ${last.round}`;
    if (last && last.status !== 'completed') return `round ${last.round} ${last.status}${last.errorType ? ` (${last.errorType})` : ''}`;
    if (last?.accuracy !== undefined && state.limits.targetAccuracy !== undefined && last.accuracy >= state.limits.targetAccuracy) {
      return `target reached: accuracy ${last.accuracy.toFixed(3)} ≥ ${state.limits.targetAccuracy}`;
    }
    if (state.rounds.length >= state.limits.maxRounds) return `rounds.max (${state.limits.maxRounds}) reached`;
    const budget = roundBudget();
    if (budget.maxGpuMinutes !== undefined && budget.maxGpuMinutes <= 0) return 'GPU-minute budget reached';
    if (budget.deadlineMs !== undefined && Date.now() >= budget.deadlineMs) return 'wall-time budget reached';
    return undefined;
  };

  await condition(() => !state.paused || state.stop !== undefined);
  stopReason = reasonToStop();
  if (stopReason === undefined) {
    const round = state.rounds.length + 1;
    const roundInput: RoundInput = {
      campaignId,
      round,
      spec: {
        name: spec.name,
        provider: spec.provider,
        training: spec.training,
        sampling: spec.sampling,
        evaluation: spec.evaluation,
        advanced: spec.advanced,
        round: spec.round,
        ...(spec.tracking ? { tracking: spec.tracking } : {}),
      },
      data: { train: state.nextTrain.path, eval: spec.data.eval, trainSha256: state.nextTrain.sha256 },
      startFrom:
        spec.rounds.continueFrom === 'checkpoint' && state.lastCheckpointId
          ? { checkpointId: state.lastCheckpointId, loadOptimizer: true }
          : spec.rounds.startFrom,
      reportDir: campaignDir,
      budget: roundBudget(),
      pool: spec.rounds.nextData.policy === 'mistakes' ? spec.data.train : undefined,
    };
    const workflowId = `${campaignId}-round-${round}`;
    let summary: RoundSummary = {
      round,
      workflowId,
      status: 'failed',
      stepsApplied: 0,
      totalSteps: 0,
      gpuMinutes: 0,
      reportPath: `${campaignDir}/round-${round}.json`,
      train: state.nextTrain,
    };
    let result: RoundResult | undefined;
    childScope = new CancellationScope();
    try {
      result = await childScope.run(async () => {
        // The checkpoint the round starts from is in its memo: retention (any campaign's) never deletes it meanwhile.
        const memo = patched('checkpoint-refs-memo') ? checkpointRefsMemo([roundInput.startFrom?.checkpointId]) : undefined;
        child = await startChild(roundWorkflow, {
          workflowId,
          args: [roundInput],
          parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
          ...(memo ? { memo } : {}),
        });
        if (state.paused) await child.signal(pauseRoundSignal);
        return child.result();
      });
    } catch (err) {
      if (isCancellation(err) && state.stop !== 'now') {
        // The campaign itself was cancelled: the round cleaned up after itself (REQUEST_CANCEL); record and end.
        state.rounds.push({ ...summary, status: 'cancelled', errorType: 'Cancelled' });
        status = 'stopped';
        stopReason = 'campaign cancelled';
        await CancellationScope.nonCancellable(() =>
          activities.writeCampaignSummary({ path: summaryPath, summary: progress(), track, retention: retention() }),
        );
        throw err;
      }
      result = childRoundResultOf<RoundResult>(err);
      if (!result)
        summary = {
          ...summary,
          status: isCancellation(err) || state.stop === 'now' ? 'cancelled' : 'failed',
          errorType: failureTypeOf(err),
          ...(isCancellation(err) ? {} : { errorMessage: failureReasonOf(err) }),
          gpuMinutes: current?.gpuMinutes ?? 0,
        };
    }
    if (result) {
      summary = {
        ...summary,
        status: result.status,
        accuracy: result.accuracy,
        baselineLoss: result.baselineLoss,
        trainedLoss: result.trainedLoss,
        stepsApplied: result.stepsApplied,
        totalSteps: result.totalSteps,
        gpuMinutes: result.gpuMinutes,
        costUsd: result.costUsd,
        ...(result.tokens ? { tokens: result.tokens } : {}),
        reportPath: result.reportPath,
        trainingCheckpointId: result.trainingCheckpointId,
        errorType: result.errorType,
        errorMessage: result.errorMessage,
        stopReason: result.stopReason,
        recoveries: result.recoveries?.length,
      };
    }
    child = undefined;
    current = undefined;
    state.rounds.push(summary);
    if (summary.trainingCheckpointId) state.lastCheckpointId = summary.trainingCheckpointId;
    if (result?.status === 'completed' && reasonToStop() === undefined) {
      state.nextTrain = await activities.selectNextTrainingData({
        campaignId,
        round: round + 1,
        policy: spec.rounds.nextData.policy,
        replayShare: spec.rounds.nextData.replayShare,
        seed: spec.training.seed + round,
        pool: spec.data.train,
        poolEvaluationsPath: result.poolEvaluationsPath,
        outDir: campaignDir,
      });
    }
    await activities.writeCampaignSummary({
      path: summaryPath,
      summary: { ...progress(), status: 'running' },
      track,
      retention: retention(),
    });
    // Let update handlers finish so nothing sent to this run is lost, then start afresh with the summary only.
    await condition(allHandlersFinished);
    await continueAsNew<typeof campaignWorkflow>({ ...input, campaignId, state });
  }

  const last = state.rounds[state.rounds.length - 1];
  status =
    state.stop || last?.status === 'stopped' || /budget/.test(stopReason ?? '')
      ? 'stopped'
      : last && last.status !== 'completed'
        ? 'failed'
        : 'completed';
  const accuracies = state.rounds.map((r) => r.accuracy).filter((a): a is number => a !== undefined);
  const final: CampaignResult = { ...progress(), bestAccuracy: accuracies.length ? Math.max(...accuracies) : undefined };
  await activities.writeCampaignSummary({ path: summaryPath, summary: final, track, retention: retention() });
  await condition(allHandlersFinished);
  return final;
}
