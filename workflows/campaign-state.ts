import { nextDataCall, type PythonCheck } from '../config/rules/python-calls';
import {
  CancellationScope,
  ParentClosePolicy,
  condition,
  executeChild,
  log,
  patched,
  proxyActivities,
  setHandler,
  startChild,
  workflowInfo,
  type ChildWorkflowHandle,
} from '@temporalio/workflow';
import type { CampaignActivities } from '../activities/campaign';
import type { PromotionActivities } from '../activities/promotion';
import {
  approvePromotionUpdate,
  rejectPromotionUpdate,
  validateApproval,
  type PromotionApproval,
  type PromotionDecision,
  type PromotionState,
} from './promotion-contract';
import type { CampaignSpec } from '../config/io/spec';
import { checkpointRefsMemo } from '../config/rules/retention';
import { describeVerdict, gateVerdict, headlineMetric, metricOf, stageSpecOf } from '../config/rules/stages';
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
} from './campaign-contract';
import { childRoundResultOf, failureReasonOf, failureTypeOf, isCancellation } from './failures';
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
} from './round-contract';
import { roundWorkflow } from './round';
import { notifyWorkflow } from './notify';
import type { NotifyEvent } from '../config/io/spec';

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
  private readonly activities: CampaignActivities & PromotionActivities;
  /** The registry (MLflow): its own retries, and a registry that stays down never fails the campaign. */
  private readonly registry: PromotionActivities;
  /** `promotion`: the decision at the end of the campaign, and the approval it may wait for. */
  private promotion: PromotionState | undefined;
  private approval: PromotionApproval | undefined;

  constructor(private readonly input: CampaignInput) {
    this.campaignId = input.campaignId ?? workflowInfo().workflowId;
    const spec = (this.spec = input.spec);
    this.dir = `${input.reportRoot}/${this.campaignId}`;
    this.summaryPath = `${this.dir}/campaign.json`;
    this.activities = proxyActivities<CampaignActivities & PromotionActivities>({
      startToCloseTimeout: '2 minutes',
      heartbeatTimeout: spec.advanced.heartbeatTimeoutSeconds * 1000,
      retry: { maximumAttempts: 10 },
    });
    this.registry = proxyActivities<PromotionActivities>({
      startToCloseTimeout: '2 minutes',
      heartbeatTimeout: spec.advanced.heartbeatTimeoutSeconds * 1000,
      retry: { maximumAttempts: 5, initialInterval: '2 seconds', backoffCoefficient: 2 },
    });
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
    const approvalPending = () => this.promotion?.status === 'pending-approval' && this.approval === undefined;
    setHandler(
      approvePromotionUpdate,
      ({ by, reason }) => {
        this.approval = { approved: true, by: by.trim(), ...(reason ? { reason } : {}), atMs: Date.now() };
        return { ...this.promotion!, approval: this.approval };
      },
      { validator: (request) => validateApproval(request, approvalPending(), false) },
    );
    setHandler(
      rejectPromotionUpdate,
      ({ by, reason }) => {
        this.approval = { approved: false, by: by.trim(), reason: reason!.trim(), atMs: Date.now() };
        return { ...this.promotion!, approval: this.approval };
      },
      { validator: (request) => validateApproval(request, approvalPending(), true) },
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
      ...(this.promotion ? { promotion: this.promotion } : {}),
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
      reportPath: `${this.dir}/round-${round}.json`,
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
        void this.watchCapacity(round, () => over).catch(() => undefined);
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
      this.promotion?.decision?.challenger.checkpointId,
    ].filter((id): id is string => Boolean(id));
    await this.activities.writeCampaignSummary({
      path: this.summaryPath,
      summary,
      // Where the campaign is tracked (MLflow): the spec's settings or the worker's environment.
      track: { name: spec.name, ...(spec.tracking ? { tracking: spec.tracking } : {}) },
      retention: spec.retention ? { rule: spec.retention, provider: spec.provider, own } : undefined,
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

  /**
   * A notification (`notify`), when the spec asks for this event: started as a workflow of its own under the id
   * `notify:<campaign>/<event>` (also its idempotency key), abandoned by the campaign, so its retries neither hold nor
   * fail it. Starting it cannot fail the campaign either.
   */
  async notify(type: NotifyEvent, text: string, data: Record<string, unknown> = {}, suffix?: string): Promise<void> {
    const n = this.spec.notify;
    if (!n || !n.events.includes(type)) return;
    const key = `${this.campaignId}/${type}${suffix ? `/${suffix}` : ''}`;
    try {
      await startChild(notifyWorkflow, {
        workflowId: `notify:${key}`,
        args: [
          {
            key,
            type,
            campaignId: this.campaignId,
            atMs: Date.now(),
            text,
            data,
            target: {
              ...(n.webhook ? { webhook: n.webhook } : {}),
              ...(n.webhookEnv ? { webhookEnv: n.webhookEnv } : {}),
              format: n.format,
              secretEnv: n.secretEnv,
            },
          },
        ],
        parentClosePolicy: ParentClosePolicy.ABANDON,
      });
    } catch (err) {
      if (isCancellation(err)) throw err;
      log.warn('a notification could not be started', { type, error: failureReasonOf(err) });
    }
  }

  /**
   * `capacity.waiting`: while the round waits for the provider's capacity (its progress says since when), told once
   * the wait passes `notify.capacityWaitMinutes`. Only with that event asked for (nothing is timed otherwise).
   */
  private async watchCapacity(round: number, over: () => boolean): Promise<void> {
    const n = this.spec.notify;
    if (!n?.events.includes('capacity.waiting')) return;
    const threshold = n.capacityWaitMinutes * 60_000;
    while (!over()) {
      await condition(() => over() || this.current?.waiting !== undefined);
      if (over()) return;
      const wait = this.current!.waiting!;
      const left = wait.sinceMs + threshold - Date.now();
      if (left <= 0) {
        const minutes = ((Date.now() - wait.sinceMs) / 60_000).toFixed(1);
        await this.notify(
          'capacity.waiting',
          `Roundhouse campaign ${this.campaignId}: round ${round} has waited ${minutes} min for ${this.spec.provider.kind}'s capacity (${this.spec.provider.model}${wait.queuePosition !== undefined ? `, queue position ${wait.queuePosition}` : ''}, ${wait.creates} create(s))`,
          { round, waiting: wait, provider: this.spec.provider.kind, model: this.spec.provider.model },
          `r${round}`,
        );
        return;
      }
      await condition(() => over() || this.current?.waiting?.sinceMs !== wait.sinceMs, left);
    }
  }

  /** The campaign's own end, told: completed, failed, or stopped (by a limit or a request). */
  async notifyEnd(final: CampaignResult): Promise<void> {
    const type = final.status === 'completed' ? 'campaign.completed' : final.status === 'failed' ? 'campaign.failed' : 'campaign.stopped';
    const best = final.best
      ? `; best round ${final.best.round}, accuracy ${(final.best.accuracy * 100).toFixed(1)}%${final.best.test ? ` (held-out test ${(final.best.test.accuracy * 100).toFixed(1)}%)` : ''}`
      : '';
    await this.notify(
      type,
      `Roundhouse campaign ${this.campaignId} ${final.status}${final.stopReason ? ` (${final.stopReason})` : ''}: ${final.rounds.length} round(s)${best}, ${final.gpuMinutes.toFixed(2)} GPU-min`,
      {
        status: final.status,
        stopReason: final.stopReason ?? null,
        rounds: final.rounds.length,
        best: final.best ?? null,
        gpuMinutes: final.gpuMinutes,
        summaryPath: final.summaryPath,
      },
    );
  }

  /** Whether this finished campaign has a challenger to put to its line (`promotion`, and it completed). */
  promotes(final: CampaignResult): boolean {
    return Boolean(this.spec.promotion) && final.status === 'completed';
  }

  /**
   * Champion and challenger: the campaign's best round (by eval) against the line's champion on the same rows (the
   * champion re-scored by an evaluation-only round when its figures are for other rows), then, if it wins, an
   * approval when the rule asks for one (waiting durably, at most `approvalTimeout`), then the record: the decision
   * always, the new champion on a promotion, and its registry version and alias where the campaign is tracked.
   */
  async promote(final: CampaignResult): Promise<void> {
    const rule = this.spec.promotion!;
    const line = rule.line;
    const on = rule.on ?? (this.spec.data.test ? 'test' : 'eval');
    const best = final.best;
    const bestRound = best && this.carried.rounds.find((r) => r.round === best.round);
    if (!best?.checkpointId || !bestRound) {
      this.promotion = { line, status: 'skipped', reason: 'no completed round with a checkpoint to put forward' };
      return;
    }
    this.status = 'running';
    const challenger = {
      checkpointId: best.checkpointId,
      campaignId: this.campaignId,
      round: best.round,
      reportPath: bestRound.reportPath,
    };
    const judge = (rescoredChampion?: { reportPath: string }) =>
      this.activities.judgePromotion({
        decisionId: this.campaignId,
        line,
        rule: { on, minGain: rule.minGain },
        reportRoot: this.input.reportRoot,
        challenger,
        ...(rescoredChampion ? { rescoredChampion } : {}),
      });
    this.promotion = { line, status: 'deciding' };
    let decision: PromotionDecision = await judge();
    if (decision.verdict === 'rescore') {
      this.promotion = { line, status: 'rescoring', decision, reason: decision.reason };
      await this.writeSummary(this.progress());
      const rescored = await this.rescoreChampion(decision.champion!.checkpointId);
      decision = rescored.reportPath
        ? await judge({ reportPath: rescored.reportPath })
        : { ...decision, verdict: 'keep', reason: `the champion could not be re-scored on the challenger's rows: ${rescored.error}` };
      if (decision.verdict === 'rescore') decision = { ...decision, verdict: 'keep', reason: `after re-scoring, ${decision.reason}` };
    }
    let approval: PromotionApproval | undefined;
    if (decision.verdict === 'promote' && rule.approval === 'manual') {
      const since = Date.now();
      this.promotion = {
        line,
        status: 'pending-approval',
        decision,
        reason: decision.reason,
        pendingSinceMs: since,
        timeoutAtMs: since + rule.approvalTimeout,
      };
      await this.writeSummary(this.progress());
      await this.notify(
        'promotion.pending',
        `Roundhouse: a challenger for ${line} waits for approval (${decision.reason}): roundhouse approve ${this.campaignId}, or roundhouse reject ${this.campaignId} --reason "…"; rejected at ${new Date(since + rule.approvalTimeout).toISOString()} without an answer`,
        { line, decision, timeoutAt: new Date(since + rule.approvalTimeout).toISOString() },
      );
      // `roundhouse stop` while it waits ends the wait too: the challenger is not promoted.
      const answered = await condition(() => this.approval !== undefined || this.carried.stop !== undefined, rule.approvalTimeout);
      approval =
        this.approval ??
        (answered
          ? { approved: false, by: 'stop', reason: 'the campaign was stopped while the promotion waited for approval', atMs: Date.now() }
          : {
              approved: false,
              by: 'approvalTimeout',
              reason: `no approval within ${formatDuration(rule.approvalTimeout)}`,
              atMs: Date.now(),
            });
    }
    const record = await this.activities.recordPromotion({
      reportRoot: this.input.reportRoot,
      decision,
      atMs: Date.now(),
      ...(approval ? { approval } : {}),
    });
    let registry: { name: string; version: string } | undefined;
    let registryError: string | undefined;
    if (record) {
      try {
        registry = await this.registry.registerChampion({
          reportRoot: this.input.reportRoot,
          line,
          decisionId: decision.decisionId,
          track: { name: this.spec.name, ...(this.spec.tracking ? { tracking: this.spec.tracking } : {}) },
        });
      } catch (err) {
        registryError = failureReasonOf(err) ?? String(err);
      }
    }
    this.promotion = {
      line,
      status: record ? 'promoted' : approval && !approval.approved ? 'rejected' : 'kept',
      decision,
      reason: approval && !approval.approved ? `rejected by ${approval.by}: ${approval.reason ?? ''}` : decision.reason,
      ...(approval ? { approval } : {}),
      ...(record ? { champion: { checkpointId: record.checkpointId, ...(registry ? { registry } : {}) } } : {}),
      ...(registryError ? { registryError } : {}),
    };
    const outcome = this.promotion.status as 'promoted' | 'rejected' | 'kept';
    await this.notify(
      `promotion.${outcome}`,
      `Roundhouse: the challenger for ${line} (round ${best.round} of ${this.campaignId}) was ${outcome}: ${this.promotion.reason ?? ''}`,
      { line, decision, ...(approval ? { approval } : {}), ...(record ? { champion: this.promotion.champion } : {}) },
    );
  }

  /** The champion measured on this campaign's rows: an evaluation-only round from its checkpoint (no step trained). */
  private async rescoreChampion(checkpointId: string): Promise<{ reportPath?: string; error?: string }> {
    const input: RoundInput = {
      ...this.roundInput(this.carried.rounds.length + 1),
      campaignId: `${this.campaignId}-champion`,
      round: 1,
      startFrom: { checkpointId, loadOptimizer: false },
      reportDir: `${this.dir}/champion`,
      evaluateOnly: true,
      pool: undefined,
      pythonChecks: undefined,
    };
    try {
      const result = await executeChild(roundWorkflow, {
        workflowId: `${this.campaignId}-champion-rescore`,
        args: [input],
        parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
        memo: checkpointRefsMemo([checkpointId]),
      });
      return result.status === 'completed' ? { reportPath: result.reportPath } : { error: `the round ended ${result.status}` };
    } catch (err) {
      if (isCancellation(err)) throw err;
      return { error: failureReasonOf(err) ?? 'the round failed' };
    }
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
  };
}

/** A python data policy is checked by the round before it provisions (the campaign calls it after the round). */
function pythonChecksFor(rounds: CampaignSpec['rounds']): { pythonChecks?: PythonCheck[] } {
  const call = nextDataCall(rounds.nextData);
  return call && rounds.max > 1 ? { pythonChecks: [{ field: 'rounds.nextData', role: 'data_policy', call }] } : {};
}

/**
 * The campaign's best round, as its best checkpoint is chosen (activities/checkpoints.ts): the highest eval accuracy,
 * then the lower eval loss, then the later round. Eval alone chooses; the round's test figure is shown beside it.
 */
function bestOf(rounds: RoundSummary[]): { best?: CampaignProgress['best'] } {
  let best: RoundSummary | undefined;
  for (const r of rounds) {
    if (r.status !== 'completed' || r.accuracy === undefined || !r.trainingCheckpointId) continue;
    if (best === undefined || r.accuracy > best.accuracy!) best = r;
    else if (r.accuracy === best.accuracy && (r.trainedLoss ?? Infinity) <= (best.trainedLoss ?? Infinity)) best = r;
  }
  if (!best) return {};
  return {
    best: {
      round: best.round,
      accuracy: best.accuracy!,
      ...(best.trainingCheckpointId ? { checkpointId: best.trainingCheckpointId } : {}),
      ...(best.test ? { test: best.test } : {}),
    },
  };
}

/** 72h, 30m, 45s: how an approval timeout is said. */
function formatDuration(ms: number): string {
  for (const [unit, size] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
  ] as const)
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  return `${Math.round(ms / 1000)}s`;
}
