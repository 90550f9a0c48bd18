import { nextDataCall, type PythonCheck } from '../../config/rules/python-calls';
import {
  CancellationScope,
  ParentClosePolicy,
  condition,
  patched,
  proxyActivities,
  setHandler,
  startChild,
  workflowInfo,
  type ChildWorkflowHandle,
} from '@temporalio/workflow';
import type { CampaignActivities } from '../../activities/campaign';
import { CampaignNotifier } from './notify';
import { CampaignPromotion } from './promotion';
import type { CampaignSpec } from '../../config/io/spec';
import { checkpointRefsMemo, deletionRuleOf } from '../../config/rules/retention';
import { describeVerdict, gateVerdict, headlineMetric, metricOf, stageSpecOf } from '../../config/rules/stages';
import {
  campaignProgressQuery,
  pauseCampaignUpdate,
  resumeCampaignUpdate,
  setCampaignLimitsUpdate,
  stopCampaignUpdate,
  validateCampaignLimits,
  validateStopRequest,
  type CampaignCarriedState,
  type CampaignInput,
  type CampaignProgress,
  type CampaignResult,
  type CampaignStatus,
  type RoundSummary,
  type StageProgress,
  type StageRecord,
} from './contract';
import { childRoundResultOf, failureReasonOf, failureTypeOf, isCancellation } from '../failures';
import {
  pauseRoundSignal,
  resumeRoundSignal,
  roundProgressSignal,
  setRoundBudgetSignal,
  type RoundBudget,
  type RoundInput,
  type RoundProgress,
  type RoundResult,
  roundSpecOf,
} from '../round/contract';
import { roundWorkflow } from '../round/round';
import { bestOf } from './best-round';
import { roundFiles } from '../../config/rules/round-files';

/**
 * What a campaign knows while it runs: what it carries across continue-as-new (summaries, limits, the next round's
 * data, whether it is paused or asked to stop), the round running now, and its status. Message handlers (progress,
 * pause, resume, stop, limits) are registered by the constructor and pass what concerns the round on to it.
 */
export class CampaignState {
  readonly campaignId: string;
  readonly spec: CampaignSpec;
  readonly carried: CampaignCarriedState;
  status: CampaignStatus;
  /** Why no further round starts, once one does not. */
  stopReason: string | undefined;

  private readonly dir: string;
  private readonly summaryPath: string;
  private child: ChildWorkflowHandle<typeof roundWorkflow> | undefined;
  private childScope: CancellationScope | undefined;
  /** The running round's latest progress (it tells the campaign at phase changes and segment ends). */
  private current: RoundProgress | undefined;
  // They heartbeat (keepingAlive): a worker that dies in one is noticed after the heartbeat timeout.
  private readonly activities: CampaignActivities;
  /** `notify`: the campaign's events, told. */
  readonly notifier: CampaignNotifier;
  /** `promotion`: the decision at the end of the campaign, and the approval it may wait for. */
  readonly promotion: CampaignPromotion;

  constructor(private readonly input: CampaignInput) {
    this.campaignId = input.campaignId ?? workflowInfo().workflowId;
    const spec = (this.spec = input.spec);
    this.dir = `${input.reportRoot}/${this.campaignId}`;
    this.summaryPath = `${this.dir}/campaign.json`;
    this.activities = proxyActivities<CampaignActivities>({
      startToCloseTimeout: '2 minutes',
      heartbeatTimeout: spec.advanced.heartbeatTimeoutSeconds * 1000,
      retry: { maximumAttempts: 10 },
    });
    this.notifier = new CampaignNotifier(this.campaignId, spec);
    this.carried = input.state ?? {
      startedAtMs: Date.now(),
      limits: {
        // A staged campaign's rounds are its stages' together; each stage's own target ends that stage, not the campaign.
        maxRounds: spec.stages ? spec.stages.reduce((a, s) => a + s.rounds.max, 0) : spec.rounds.max,
        maxGpuMinutes: spec.budget.maxGpuMinutes,
        maxWallMinutes: spec.budget.maxWallMinutes,
        targetAccuracy: spec.stages ? undefined : spec.rounds.target?.atLeast,
      },
      rounds: [],
      nextTrain: { path: spec.data.train },
      paused: false,
      ...(spec.stages ? { stages: [this.stageRecord(0, 1, spec.rounds.startFrom?.checkpointId)] } : {}),
    };
    this.status = this.carried.paused ? 'paused' : 'running';
    this.handleMessages();
    this.promotion = new CampaignPromotion({
      campaignId: this.campaignId,
      spec,
      carried: this.carried,
      reportRoot: input.reportRoot,
      dir: this.dir,
      notifier: this.notifier,
      saveProgress: () => this.writeSummary(this.progress()),
      markRunning: () => void (this.status = 'running'),
      nextRoundInput: () => this.roundInput(this.carried.rounds.length + 1),
    });
  }

  private handleMessages(): void {
    const state = this.carried;
    setHandler(campaignProgressQuery, () => this.progress());
    setHandler(roundProgressSignal, (p) => {
      if (this.child && p.round === state.rounds.length + 1) this.current = p;
    });
    setHandler(pauseCampaignUpdate, async () => {
      state.paused = true;
      this.status = 'paused';
      if (this.child) await this.child.signal(pauseRoundSignal);
      return this.progress();
    });
    setHandler(resumeCampaignUpdate, async () => {
      state.paused = false;
      this.status = 'running';
      if (this.child) await this.child.signal(resumeRoundSignal);
      return this.progress();
    });
    setHandler(
      stopCampaignUpdate,
      ({ mode }) => {
        state.stop = mode;
        if (mode === 'now') this.childScope?.cancel();
        return this.progress();
      },
      { validator: validateStopRequest },
    );
    setHandler(
      setCampaignLimitsUpdate,
      async (limits) => {
        state.limits = { ...state.limits, ...limits };
        if (this.child) await this.child.signal(setRoundBudgetSignal, this.roundBudget());
        return this.progress();
      },
      { validator: validateCampaignLimits },
    );
  }

  progress(): CampaignProgress {
    const { rounds, limits, startedAtMs } = this.carried;
    return {
      campaignId: this.campaignId,
      status: this.status,
      rounds,
      ...(this.carried.stages ? { stages: this.carried.stages.map((s) => this.stageProgress(s)) } : {}),
      currentRound: this.current,
      limits,
      gpuMinutes: rounds.reduce((a, r) => a + r.gpuMinutes, 0) + (this.current?.gpuMinutes ?? 0),
      costUsd: this.costUsd(),
      wallMinutes: (Date.now() - startedAtMs) / 60_000,
      stopReason: this.stopReason,
      summaryPath: this.summaryPath,
      ...bestOf(rounds),
      ...(this.promotion.state ? { promotion: this.promotion.state } : {}),
    };
  }

  /** Until the campaign is not paused, or is asked to stop. */
  async unpaused(): Promise<void> {
    await condition(() => !this.carried.paused || this.carried.stop !== undefined);
  }

  /** Why the campaign should not start another round, if it should not. Checked before each round. */
  reasonToStop(): string | undefined {
    const { rounds, limits, stop } = this.carried;
    const last = rounds[rounds.length - 1];
    if (stop) return stop === 'now' ? 'stopped by request' : 'stopped by request after the round';
    if (last?.status === 'stopped') return `${last.stopReason ?? 'budget reached'} in round ${last.round}`;
    if (last && last.status !== 'completed') return `round ${last.round} ${last.status}${last.errorType ? ` (${last.errorType})` : ''}`;
    if (last?.accuracy !== undefined && limits.targetAccuracy !== undefined && last.accuracy >= limits.targetAccuracy) {
      return `target reached: accuracy ${last.accuracy.toFixed(3)} ≥ ${limits.targetAccuracy}`;
    }
    const stage = this.carried.stages?.at(-1);
    if (stage?.gate && !stage.gate.passed)
      return `stage ${stage.stage} (${stage.name}) did not pass its gate: ${describeVerdict(stage.gate)}`;
    if (stage?.endedBy && stage.stage === this.spec.stages!.length)
      return `all ${stage.stage} stages done: stage ${stage.stage} (${stage.name}) ${stage.endedBy}`;
    if (rounds.length >= limits.maxRounds) return `rounds.max (${limits.maxRounds}) reached`;
    const budget = this.roundBudget();
    if (budget.maxGpuMinutes !== undefined && budget.maxGpuMinutes <= 0) return 'GPU-minute budget reached';
    if (budget.deadlineMs !== undefined && Date.now() >= budget.deadlineMs) return 'wall-time budget reached';
    return undefined;
  }

  /**
   * The next round, as a child workflow (cancelled if the campaign closes), to its end; its summary is recorded.
   * Returns its result, when it gave one. A cancellation of the campaign itself is recorded and passed on.
   */
  async runRound(): Promise<RoundResult | undefined> {
    const state = this.carried;
    const round = state.rounds.length + 1;
    const roundInput = this.roundInput(round);
    const workflowId = `${this.campaignId}-round-${round}`;
    const started: RoundSummary = {
      round,
      workflowId,
      status: 'failed',
      stepsApplied: 0,
      totalSteps: 0,
      gpuMinutes: 0,
      reportPath: roundFiles(this.dir, round).report,
      train: state.nextTrain,
      ...(state.stages ? { stage: state.stages.length, kind: this.stageSpec().round.kind } : {}),
    };
    let summary = started;
    let result: RoundResult | undefined;
    this.childScope = new CancellationScope();
    try {
      result = await this.childScope.run(async () => {
        // The checkpoint the round starts from is in its memo: retention (any campaign's) never deletes it meanwhile.
        const memo = patched('checkpoint-refs-memo') ? checkpointRefsMemo([roundInput.startFrom?.checkpointId]) : undefined;
        this.child = await startChild(roundWorkflow, {
          workflowId,
          args: [roundInput],
          parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
          ...(memo ? { memo } : {}),
        });
        if (state.paused) await this.child.signal(pauseRoundSignal);
        let over = false;
        void this.notifier
          .watchCapacity(
            round,
            () => over,
            () => this.current?.waiting,
          )
          .catch(() => undefined);
        try {
          return await this.child.result();
        } finally {
          over = true;
        }
      });
    } catch (err) {
      if (isCancellation(err) && state.stop !== 'now') {
        // The campaign itself was cancelled: the round cleaned up after itself (REQUEST_CANCEL); record and end.
        state.rounds.push({ ...started, status: 'cancelled', errorType: 'Cancelled' });
        this.status = 'stopped';
        this.stopReason = 'campaign cancelled';
        await CancellationScope.nonCancellable(() => this.writeSummary(this.progress()));
        throw err;
      }
      result = childRoundResultOf<RoundResult>(err);
      if (!result)
        summary = {
          ...started,
          status: isCancellation(err) || state.stop === 'now' ? 'cancelled' : 'failed',
          errorType: failureTypeOf(err),
          ...(isCancellation(err) ? {} : { errorMessage: failureReasonOf(err) }),
          gpuMinutes: this.current?.gpuMinutes ?? 0,
        };
    }
    if (result) summary = roundSummary(started, result);
    this.child = undefined;
    this.current = undefined;
    state.rounds.push(summary);
    if (summary.trainingCheckpointId) state.lastCheckpointId = summary.trainingCheckpointId;
    this.noteStageEnd(summary);
    return result;
  }

  /**
   * Staged campaigns: whether the round just run ended its stage (the stage's rounds.max or target) and, if so, its
   * gate's verdict and the checkpoint it passes on, recorded in the stage's record.
   */
  private noteStageEnd(last: RoundSummary): void {
    const record = this.carried.stages?.at(-1);
    if (!record || last.status !== 'completed') return;
    const { rounds, gate } = this.spec.stages![record.stage - 1]!;
    const done = this.carried.rounds.length - record.firstRound + 1;
    if (rounds.target && last.accuracy !== undefined && last.accuracy >= rounds.target.atLeast)
      record.endedBy = `target reached: accuracy ${last.accuracy.toFixed(3)} ≥ ${rounds.target.atLeast}`;
    else if (done >= rounds.max) record.endedBy = `rounds.max (${rounds.max}) reached`;
    else return;
    if (last.trainingCheckpointId) record.passedOn = last.trainingCheckpointId;
    if (gate) record.gate = gateVerdict(gate, last);
  }

  /** The next round's training data, chosen by the next-data policy from the pool and the last round's answers. */
  async chooseNextData(last: RoundResult): Promise<void> {
    const stage = this.carried.stages?.at(-1);
    if (stage?.endedBy) {
      // The next stage starts on its own data, from the checkpoint this one passed on.
      const next = this.stageRecord(stage.stage, this.carried.rounds.length + 1, stage.passedOn);
      this.carried.stages!.push(next);
      this.carried.nextTrain = { path: this.spec.stages![next.stage - 1]!.data.train };
      return;
    }
    const spec = this.stageSpec();
    const round = this.carried.rounds.length; // the one just run
    this.carried.nextTrain = await this.activities.selectNextTrainingData({
      campaignId: this.campaignId,
      round: round + 1,
      policy: spec.rounds.nextData.policy,
      replayShare: spec.rounds.nextData.replayShare,
      seed: spec.training.seed + round,
      pool: spec.data.train,
      poolEvaluationsPath: last.poolEvaluationsPath,
      outDir: this.dir,
      ...(spec.rounds.nextData.policy === 'python' ? { python: nextDataCall(spec.rounds.nextData) } : {}),
    });
  }

  /** campaign.json and the reports made from it; tracked (MLflow) and checkpoint retention applied, per the spec. */
  async writeSummary(summary: CampaignProgress): Promise<void> {
    const { spec } = this;
    // Checkpoint retention: never what the campaign starts or continues from.
    const own = [
      spec.rounds.startFrom?.checkpointId,
      this.carried.lastCheckpointId,
      ...(this.carried.stages ?? []).flatMap((s) => [s.startedFrom, s.passedOn]),
      // The challenger put to its line (and the champion it may become) is never deleted under it.
      this.promotion.state?.decision?.challenger.checkpointId,
    ].filter((id): id is string => Boolean(id));
    // A `retention` block with only a TTL deletes nothing (histories before the TTL had keepBest/keepLast: the same rule).
    const deletionRule = deletionRuleOf(spec.retention);
    await this.activities.writeCampaignSummary({
      path: this.summaryPath,
      summary,
      // Where the campaign is tracked (MLflow): the spec's settings or the worker's environment.
      track: { name: spec.name, ...(spec.tracking ? { tracking: spec.tracking } : {}) },
      retention: deletionRule ? { rule: deletionRule, provider: spec.provider, own } : undefined,
    });
  }

  /** What the next run of the campaign starts from (continue-as-new): its input and the summaries so far. */
  continued(): CampaignInput {
    return { ...this.input, campaignId: this.campaignId, state: this.carried };
  }

  /** The campaign's result once no further round starts. */
  finish(): CampaignResult {
    const { rounds, stop } = this.carried;
    const last = rounds[rounds.length - 1];
    const gateMissed = this.carried.stages?.at(-1)?.gate?.passed === false;
    this.status =
      stop || last?.status === 'stopped' || /budget/.test(this.stopReason ?? '')
        ? 'stopped'
        : (last && last.status !== 'completed') || gateMissed
          ? 'failed'
          : 'completed';
    const accuracies = rounds.map((r) => r.accuracy).filter((a): a is number => a !== undefined);
    return { ...this.progress(), bestAccuracy: accuracies.length ? Math.max(...accuracies) : undefined };
  }

  /** What the running round may still spend. */
  private roundBudget(): RoundBudget {
    const { limits, startedAtMs, rounds } = this.carried;
    return {
      deadlineMs: limits.maxWallMinutes !== undefined ? startedAtMs + limits.maxWallMinutes * 60_000 : undefined,
      maxGpuMinutes:
        limits.maxGpuMinutes !== undefined ? Math.max(0, limits.maxGpuMinutes - rounds.reduce((a, r) => a + r.gpuMinutes, 0)) : undefined,
    };
  }

  private costUsd(): number | undefined {
    const costs = [...this.carried.rounds.map((r) => r.costUsd), this.current?.costUsd].filter((c): c is number => c !== undefined);
    return costs.length ? costs.reduce((a, c) => a + c, 0) : undefined;
  }

  /** Round N+1 starts from round N's training checkpoint (or the spec's start) and trains on the data chosen for it. */
  private roundInput(round: number): RoundInput {
    const { carried: state } = this;
    const spec = this.stageSpec();
    const stage = state.stages?.at(-1);
    return {
      campaignId: this.campaignId,
      round,
      spec: roundSpecOf(spec, stage && { stage: stage.stage, name: stage.name }),
      data: {
        train: state.nextTrain.path,
        eval: spec.data.eval,
        trainSha256: state.nextTrain.sha256,
        ...(spec.data.test ? { test: spec.data.test } : {}),
      },
      startFrom: this.startOf(round),
      reportDir: this.dir,
      budget: this.roundBudget(),
      pool: spec.rounds.nextData.policy === 'mistakes' || spec.rounds.nextData.policy === 'python' ? spec.data.train : undefined,
      ...pythonChecksFor(spec.rounds),
    };
  }

  /**
   * Where a round starts: the last round's training checkpoint with its optimizer state, or the start of the campaign
   * (`rounds.startFrom`, else the base model). A staged campaign's stage starts from the checkpoint the previous
   * stage passed on (weights, and the optimizer state if the stage says `loadOptimizer`); `continueFrom: base`
   * starts each of its rounds there.
   */
  private startOf(round: number): RoundInput['startFrom'] {
    const { carried: state } = this;
    const spec = this.stageSpec();
    const stage = state.stages?.at(-1);
    if (!stage)
      return spec.rounds.continueFrom === 'checkpoint' && state.lastCheckpointId
        ? { checkpointId: state.lastCheckpointId, loadOptimizer: true }
        : spec.rounds.startFrom;
    if (round > stage.firstRound && spec.rounds.continueFrom === 'checkpoint' && state.lastCheckpointId)
      return { checkpointId: state.lastCheckpointId, loadOptimizer: true };
    if (stage.stage === 1) return spec.rounds.startFrom;
    return stage.startedFrom ? { checkpointId: stage.startedFrom, loadOptimizer: stage.loadOptimizer ?? false } : undefined;
  }

  /** The spec the running stage's rounds run with (a campaign without stages: its own). */
  private stageSpec(): CampaignSpec {
    const stage = this.carried.stages?.at(-1);
    return stage ? stageSpecOf(this.spec, stage.stage - 1) : this.spec;
  }

  /** The record of a stage as it starts (`index` 0-based). */
  private stageRecord(index: number, firstRound: number, startedFrom: string | undefined): StageRecord {
    const stage = this.spec.stages![index]!;
    return {
      stage: index + 1,
      name: stage.name,
      kind: stage.round.kind,
      firstRound,
      ...(startedFrom ? { startedFrom } : {}),
      ...(index > 0 ? { loadOptimizer: stage.loadOptimizer } : {}),
    };
  }

  /** A stage as shown: its rounds so far and the latest value of the metric that matters for its kind. */
  private stageProgress(record: StageRecord): StageProgress {
    const rounds = this.carried.rounds.filter((r) => r.stage === record.stage);
    const metric = headlineMetric(record.kind);
    const measured = rounds.filter((r) => r.status === 'completed' && metricOf(metric, r) !== undefined).at(-1);
    const value = measured ? metricOf(metric, measured) : undefined;
    return { ...record, rounds: rounds.length, headline: { metric, ...(value !== undefined ? { value } : {}) } };
  }
}

/** A finished round's summary: what the campaign keeps of its result across continue-as-new. */
function roundSummary(started: RoundSummary, result: RoundResult): RoundSummary {
  return {
    ...started,
    status: result.status,
    ...(result.kind ? { kind: result.kind } : {}),
    accuracy: result.accuracy,
    ...(result.test
      ? { test: { accuracy: result.test.accuracy, rows: result.test.rows, ...(result.test.sha256 ? { sha256: result.test.sha256 } : {}) } }
      : {}),
    ...(result.firstReward !== undefined ? { firstReward: result.firstReward } : {}),
    ...(result.latestReward !== undefined ? { meanReward: result.latestReward } : {}),
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
    ...(result.sandbox !== undefined ? { sandbox: result.sandbox } : {}),
  };
}

/** A python data policy is checked by the round before it provisions (the campaign calls it after the round). */
function pythonChecksFor(rounds: CampaignSpec['rounds']): { pythonChecks?: PythonCheck[] } {
  const call = nextDataCall(rounds.nextData);
  return call && rounds.max > 1 ? { pythonChecks: [{ field: 'rounds.nextData', role: 'data_policy', call }] } : {};
}
