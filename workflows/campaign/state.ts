import { nextDataCall, type PythonCheck } from '../../config/rules/python-calls';
import {
  CancellationScope,
  ParentClosePolicy,
  condition,
  patched,
  proxyActivities,
  startChild,
  workflowInfo,
  type ChildWorkflowHandle,
} from '@temporalio/workflow';
import type { CampaignActivities } from '../../activities/campaign';
import { CampaignNotifier } from './notify';
import { CampaignPromotion } from './promotion';
import type { CampaignSpec } from '../../config/io/spec';
import { checkpointRefsMemo, deletionRuleOf } from '../../config/rules/retention';
import {
  type CampaignCarriedState,
  type CampaignInput,
  type CampaignLimits,
  type CampaignProgress,
  type CampaignResult,
  type CampaignStatus,
  type RoundSummary,
} from './contract';
import { childRoundResultOf, failureReasonOf, failureTypeOf, isCancellation } from '../failures';
import {
  pauseRoundSignal,
  resumeRoundSignal,
  setRoundBudgetSignal,
  type RoundBudget,
  type RoundInput,
  type RoundProgress,
  type RoundResult,
  roundSpecOf,
} from '../round/contract';
import { roundWorkflow } from '../round/round';
import { sweepWorkflow } from '../sweep/sweep';
import { withAssignment } from '../../config/rules/sweep';
import { bestOf } from './best-round';
import { CampaignStages } from './stages';
import { roundFiles } from '../../config/rules/round-files';

/**
 * What a campaign knows while it runs: what it carries across continue-as-new (summaries, limits, the next round's
 * data, whether it is paused or asked to stop), the round running now, and its status. What its messages (pause,
 * resume, stop, limits; registered in campaign.ts) do, passing what concerns the round on to it.
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
  /** `stages`: a staged campaign's stages, the running one last. */
  readonly stages: CampaignStages;

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
        maxRounds: CampaignStages.maxRounds(spec),
        maxGpuMinutes: spec.budget.maxGpuMinutes,
        maxWallMinutes: spec.budget.maxWallMinutes,
        ...(spec.budget.maxUsd !== undefined ? { maxUsd: spec.budget.maxUsd } : {}),
        targetAccuracy: spec.stages ? undefined : spec.rounds.target?.atLeast,
      },
      rounds: [],
      nextTrain: { path: spec.data.train },
      paused: false,
      ...CampaignStages.started(spec),
    };
    this.stages = new CampaignStages(spec, this.carried);
    this.status = this.carried.paused ? 'paused' : 'running';
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

  /** The running round told its progress (a late word from a round already over is dropped). */
  noteRoundProgress(progress: RoundProgress): void {
    if (this.child && progress.round === this.carried.rounds.length + 1) this.current = progress;
  }

  /** No further round starts until resumed; the running round pauses too (it releases its trainer). */
  async pause(): Promise<CampaignProgress> {
    this.carried.paused = true;
    this.status = 'paused';
    if (this.child) {
      // A round that has just ended, whose result the campaign has not taken in yet (a message landing at the
      // hand-off), is no longer there to signal: the campaign's own state, set above, decides what happens next, and
      // the answer waits for the ended round to be recorded. (Inline, not a helper: the same awaits as before on the
      // path every recorded history took.)
      try {
        await this.child.signal(pauseRoundSignal);
      } catch (err) {
        if (isCancellation(err)) throw err;
        await condition(() => this.child === undefined);
      }
    }
    return this.progress();
  }

  async resume(): Promise<CampaignProgress> {
    this.carried.paused = false;
    this.status = 'running';
    if (this.child) {
      // As in pause(): a round that has just ended is no longer there to signal.
      try {
        await this.child.signal(resumeRoundSignal);
      } catch (err) {
        if (isCancellation(err)) throw err;
        await condition(() => this.child === undefined);
      }
    }
    return this.progress();
  }

  /** `now` cancels the running round; `after-round` lets it finish. Either way no further round starts. */
  stop(mode: NonNullable<CampaignCarriedState['stop']>): CampaignProgress {
    this.carried.stop = mode;
    if (mode === 'now') this.childScope?.cancel();
    return this.progress();
  }

  /** New limits, passed on to the running round as its budget. */
  async setLimits(limits: Partial<CampaignLimits>): Promise<CampaignProgress> {
    this.carried.limits = { ...this.carried.limits, ...limits };
    if (this.child) {
      // As in pause(): a round that has just ended is no longer there to signal.
      try {
        await this.child.signal(setRoundBudgetSignal, this.roundBudget());
      } catch (err) {
        if (isCancellation(err)) throw err;
        await condition(() => this.child === undefined);
      }
    }
    return this.progress();
  }

  progress(): CampaignProgress {
    const { rounds, limits, startedAtMs } = this.carried;
    return {
      campaignId: this.campaignId,
      status: this.status,
      rounds,
      ...this.stages.progress(),
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
    const staged = this.stages.reasonToStop();
    if (staged) return staged;
    if (rounds.length >= limits.maxRounds) return `rounds.max (${limits.maxRounds}) reached`;
    const budget = this.roundBudget();
    if (budget.maxGpuMinutes !== undefined && budget.maxGpuMinutes <= 0) return 'GPU-minute budget reached';
    if (budget.deadlineMs !== undefined && Date.now() >= budget.deadlineMs) return 'wall-time budget reached';
    if (budget.maxUsd !== undefined && budget.maxUsd <= 0) return 'dollar budget reached';
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
      ...this.stages.roundFields(),
    };
    let summary = started;
    let result: RoundResult | undefined;
    this.childScope = new CancellationScope();
    try {
      result = await this.childScope.run(async () => {
        // The checkpoint the round starts from is in its memo: retention (any campaign's) never deletes it meanwhile.
        const memo = patched('checkpoint-refs-memo') ? checkpointRefsMemo([roundInput.startFrom?.checkpointId]) : undefined;
        const sweep = round === 1 ? this.spec.sweep : undefined;
        // `sweep`: the first round is a sweep of arms (workflows/sweep/), whose result is its winner's; the same messages.
        this.child = sweep
          ? ((await startChild(sweepWorkflow, {
              workflowId,
              args: [{ round: roundInput, arms: sweep.arms, select: sweep.select }],
              parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
              ...(memo ? { memo } : {}),
            })) as unknown as ChildWorkflowHandle<typeof roundWorkflow>)
          : await startChild(roundWorkflow, {
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
    this.stages.noteRoundEnd(summary);
    return result;
  }

  /** The next round's training data, chosen by the next-data policy from the pool and the last round's answers. */
  async chooseNextData(last: RoundResult): Promise<void> {
    if (this.stages.startNext()) return; // the next stage starts on its own data
    const spec = this.stages.runningSpec();
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
      ...this.stages.checkpointIds(),
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
    const gateMissed = this.stages.gateMissed();
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
      // A dollar budget: what the rounds so far left of it, and the spec's negotiated prices.
      ...(limits.maxUsd !== undefined
        ? {
            maxUsd: Math.max(0, limits.maxUsd - rounds.reduce((a, r) => a + (r.costUsd ?? 0), 0)),
            ...(this.spec.budget.prices ? { prices: this.spec.budget.prices } : {}),
          }
        : {}),
    };
  }

  private costUsd(): number | undefined {
    const costs = [...this.carried.rounds.map((r) => r.costUsd), this.current?.costUsd].filter((c): c is number => c !== undefined);
    return costs.length ? costs.reduce((a, c) => a + c, 0) : undefined;
  }

  /** Round N+1 starts from round N's training checkpoint (or the spec's start) and trains on the data chosen for it. */
  private roundInput(round: number): RoundInput {
    const { carried: state } = this;
    // After a sweep, the campaign goes on with its winner's fields.
    const winner = state.rounds[0]?.sweep?.winner;
    const spec = winner ? withAssignment(this.stages.runningSpec(), winner.assign) : this.stages.runningSpec();
    const stage = this.stages.current;
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
   * (`rounds.startFrom`, else the base model); a staged campaign's, where its stage says (`CampaignStages.startOf`).
   */
  private startOf(round: number): RoundInput['startFrom'] {
    const { carried: state, spec } = this;
    return this.stages.startOf(round, () =>
      spec.rounds.continueFrom === 'checkpoint' && state.lastCheckpointId
        ? { checkpointId: state.lastCheckpointId, loadOptimizer: true }
        : spec.rounds.startFrom,
    );
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
    ...(result.sweep ? { sweep: result.sweep } : {}),
  };
}

/** A python data policy is checked by the round before it provisions (the campaign calls it after the round). */
function pythonChecksFor(rounds: CampaignSpec['rounds']): { pythonChecks?: PythonCheck[] } {
  const call = nextDataCall(rounds.nextData);
  return call && rounds.max > 1 ? { pythonChecks: [{ field: 'rounds.nextData', role: 'data_policy', call }] } : {};
}
