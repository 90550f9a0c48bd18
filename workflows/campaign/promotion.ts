import { ParentClosePolicy, condition, executeChild, patched, proxyActivities } from '@temporalio/workflow';
import type { PromotionActivities } from '../../activities/promotion';
import type { CampaignSpec } from '../../config/io/spec';
import { evaluationSampling } from '../../config/rules/evaluation-sampling';
import { checkpointRefsMemo } from '../../config/rules/retention';
import { stageSpecOf } from '../../config/rules/stages';
import { bestOf } from './best-round';
import type { CampaignCarriedState, CampaignResult } from './contract';
import type { CampaignNotifier } from './notify';
import { failureReasonOf, isCancellation } from '../failures';
import {
  type ApprovalRequest,
  type PromotionApproval,
  type PromotionDecision,
  type PromotionMeasure,
  type PromotionState,
} from './promotion-contract';
import type { RoundInput } from '../round/contract';
import { roundWorkflow } from '../round/round';

/** What a campaign's promotion needs of the campaign. */
export interface PromotionHost {
  readonly campaignId: string;
  readonly spec: CampaignSpec;
  readonly carried: CampaignCarriedState;
  readonly reportRoot: string;
  /** The campaign's report folder. */
  readonly dir: string;
  readonly notifier: CampaignNotifier;
  /** campaign.json (and the reports) as the campaign stands now. */
  saveProgress(): Promise<void>;
  /** The campaign is not done while its promotion is decided. */
  markRunning(): void;
  /** The input a next round would run with (the spec, data and budget the re-scoring uses). */
  nextRoundInput(): RoundInput;
}

/**
 * Champion and challenger (`promotion`), at the end of a completed campaign: its decision, the approval it may wait
 * for (the updates `approvePromotion`/`rejectPromotion`, registered in campaign.ts), and its record.
 */
export class CampaignPromotion {
  state: PromotionState | undefined;
  private approval: PromotionApproval | undefined;
  private readonly activities: PromotionActivities;
  /** The registry (MLflow): its own retries, and a registry that stays down never fails the campaign. */
  private readonly registry: PromotionActivities;

  constructor(private readonly host: PromotionHost) {
    const heartbeatTimeout = host.spec.advanced.heartbeatTimeoutSeconds * 1000;
    this.activities = proxyActivities<PromotionActivities>({
      startToCloseTimeout: '2 minutes',
      heartbeatTimeout,
      retry: { maximumAttempts: 10 },
    });
    this.registry = proxyActivities<PromotionActivities>({
      startToCloseTimeout: '2 minutes',
      heartbeatTimeout,
      retry: { maximumAttempts: 5, initialInterval: '2 seconds', backoffCoefficient: 2 },
    });
  }

  /** A winning challenger waits for an approval and has none yet (what `approve`/`reject` are accepted for). */
  approvalPending(): boolean {
    return this.state?.status === 'pending-approval' && this.approval === undefined;
  }

  /** `roundhouse approve`: the challenger waiting for approval is promoted. */
  approve({ by, reason }: ApprovalRequest): PromotionState {
    this.approval = { approved: true, by: by.trim(), ...(reason ? { reason } : {}), atMs: Date.now() };
    return { ...this.state!, approval: this.approval };
  }

  /** `roundhouse reject --reason`: the challenger waiting for approval is not promoted. */
  reject({ by, reason }: ApprovalRequest): PromotionState {
    this.approval = { approved: false, by: by.trim(), reason: reason!.trim(), atMs: Date.now() };
    return { ...this.state!, approval: this.approval };
  }

  /** Whether this finished campaign has a challenger to put to its line (`promotion`, and it completed). */
  promotes(final: CampaignResult): boolean {
    return Boolean(this.host.spec.promotion) && final.status === 'completed';
  }

  /**
   * Champion and challenger: the campaign's best round (by eval; in a staged campaign, the last stage's) against the
   * line's champion measured alike (the champion re-scored by an evaluation-only round when its figures are for other
   * rows, scorer or sampling), then, if it wins, an approval when the rule asks for one (waiting durably, at most
   * `approvalTimeout`), then the record: the decision always, the new champion on a promotion, and its registry
   * version and alias where the campaign is tracked. The record is made only if the champion is still the one judged
   * against; if another campaign crowned one meanwhile, the challenger is judged again against it (an approval given
   * stands: it approved the challenger).
   */
  async promote(final: CampaignResult): Promise<void> {
    const rule = this.host.spec.promotion!;
    const line = rule.line;
    const { spec, carried } = this.host;
    // A staged campaign's challenger is its last stage's best round, measured on that stage's sets.
    const lastStage = spec.stages && patched('promotion-last-stage') ? spec.stages.length : undefined;
    const measured = lastStage ? stageSpecOf(spec, lastStage - 1) : spec;
    const on = rule.on ?? (measured.data.test ? 'test' : 'eval');
    const best = lastStage ? bestOf(carried.rounds.filter((r) => r.stage === lastStage)).best : final.best;
    const bestRound = best && carried.rounds.find((r) => r.round === best.round);
    if (!best?.checkpointId || !bestRound) {
      this.state = { line, status: 'skipped', reason: 'no completed round with a checkpoint to put forward' };
      return;
    }
    this.host.markRunning();
    const challenger = {
      checkpointId: best.checkpointId,
      campaignId: this.host.campaignId,
      round: best.round,
      reportPath: bestRound.reportPath,
    };
    const judge = (rescoredChampion?: { reportPath: string }) =>
      this.activities.judgePromotion({
        decisionId: this.host.campaignId,
        line,
        rule: { on, minGain: rule.minGain },
        reportRoot: this.host.reportRoot,
        challenger,
        measure: measureOf(measured),
        ...(rescoredChampion ? { rescoredChampion } : {}),
      });
    this.state = { line, status: 'deciding' };
    let decision = await this.decide(line, judge, 0);
    let approval: PromotionApproval | undefined;
    if (decision.verdict === 'promote' && rule.approval === 'manual') approval = await this.awaitApproval(line, decision);
    const recordOf = (d: PromotionDecision) =>
      this.activities.recordPromotion({
        reportRoot: this.host.reportRoot,
        decision: d,
        atMs: Date.now(),
        ...(approval ? { approval } : {}),
      });
    let recorded = await recordOf(decision);
    // Another campaign crowned a champion since the judgement: judged again, against that one, on the same rows.
    for (let again = 1; recorded && 'changedSince' in recorded && patched('promotion-rejudge'); again++) {
      const changed = recorded.changedSince;
      this.state = { line, status: 'deciding', reason: changed };
      decision = await this.decide(line, judge, again);
      decision = { ...decision, reason: `${decision.reason} (judged again: ${changed})` };
      recorded = await recordOf(decision);
    }
    const record = recorded && !('changedSince' in recorded) ? recorded : undefined;
    let registry: { name: string; version: string } | undefined;
    let registryError: string | undefined;
    if (record) {
      try {
        registry = await this.registry.registerChampion({
          reportRoot: this.host.reportRoot,
          line,
          decisionId: decision.decisionId,
          track: { name: this.host.spec.name, ...(this.host.spec.tracking ? { tracking: this.host.spec.tracking } : {}) },
        });
      } catch (err) {
        registryError = failureReasonOf(err) ?? String(err);
      }
    }
    this.state = {
      line,
      status: record ? 'promoted' : approval && !approval.approved ? 'rejected' : 'kept',
      decision,
      reason: approval && !approval.approved ? `rejected by ${approval.by}: ${approval.reason ?? ''}` : decision.reason,
      ...(approval ? { approval } : {}),
      ...(record ? { champion: { checkpointId: record.checkpointId, ...(registry ? { registry } : {}) } } : {}),
      ...(registryError ? { registryError } : {}),
    };
    const outcome = this.state.status as 'promoted' | 'rejected' | 'kept';
    await this.host.notifier.notify(
      `promotion.${outcome}`,
      `Roundhouse: the challenger for ${line} (round ${best.round} of ${this.host.campaignId}) was ${outcome}: ${this.state.reason ?? ''}`,
      { line, decision, ...(approval ? { approval } : {}), ...(record ? { champion: this.state.champion } : {}) },
    );
  }

  /** A judgement, with the champion re-scored first when its figures are not like the challenger's. */
  private async decide(
    line: string,
    judge: (rescoredChampion?: { reportPath: string }) => Promise<PromotionDecision>,
    attempt: number,
  ): Promise<PromotionDecision> {
    let decision = await judge();
    if (decision.verdict !== 'rescore') return decision;
    this.state = { line, status: 'rescoring', decision, reason: decision.reason };
    await this.host.saveProgress();
    const rescored = await this.rescoreChampion(decision.champion!.checkpointId, attempt);
    decision = rescored.reportPath
      ? await judge({ reportPath: rescored.reportPath })
      : { ...decision, verdict: 'keep', reason: `the champion could not be re-scored on the challenger's rows: ${rescored.error}` };
    if (decision.verdict === 'rescore') decision = { ...decision, verdict: 'keep', reason: `after re-scoring, ${decision.reason}` };
    return decision;
  }

  /** A person's approval of a winning challenger, waited for durably (at most `approvalTimeout`; a stop ends the wait). */
  private async awaitApproval(line: string, decision: PromotionDecision): Promise<PromotionApproval> {
    const rule = this.host.spec.promotion!;
    const since = Date.now();
    this.state = {
      line,
      status: 'pending-approval',
      decision,
      reason: decision.reason,
      pendingSinceMs: since,
      timeoutAtMs: since + rule.approvalTimeout,
    };
    await this.host.saveProgress();
    await this.host.notifier.notify(
      'promotion.pending',
      `Roundhouse: a challenger for ${line} waits for approval (${decision.reason}): roundhouse approve ${this.host.campaignId}, or roundhouse reject ${this.host.campaignId} --reason "…"; rejected at ${new Date(since + rule.approvalTimeout).toISOString()} without an answer`,
      { line, decision, timeoutAt: new Date(since + rule.approvalTimeout).toISOString() },
    );
    // `roundhouse stop` while it waits ends the wait too: the challenger is not promoted.
    const answered = await condition(() => this.approval !== undefined || this.host.carried.stop !== undefined, rule.approvalTimeout);
    return (
      this.approval ??
      (answered
        ? { approved: false, by: 'stop', reason: 'the campaign was stopped while the promotion waited for approval', atMs: Date.now() }
        : {
            approved: false,
            by: 'approvalTimeout',
            reason: `no approval within ${formatDuration(rule.approvalTimeout)}`,
            atMs: Date.now(),
          })
    );
  }

  /** The champion measured on this campaign's rows: an evaluation-only round from its checkpoint (no step trained). */
  private async rescoreChampion(checkpointId: string, attempt: number): Promise<{ reportPath?: string; error?: string }> {
    // A re-judgement's re-scoring has ids (and idempotency keys) of its own: the first one's would be found again.
    const again = attempt > 0 ? `-${attempt + 1}` : '';
    const input: RoundInput = {
      ...this.host.nextRoundInput(),
      campaignId: `${this.host.campaignId}-champion${again}`,
      round: 1,
      startFrom: { checkpointId, loadOptimizer: false },
      reportDir: `${this.host.dir}/champion${again}`,
      evaluateOnly: true,
      pool: undefined,
      pythonChecks: undefined,
    };
    try {
      const result = await executeChild(roundWorkflow, {
        workflowId: `${this.host.campaignId}-champion-rescore${again}`,
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
}

/**
 * How a campaign's figures are measured: its base model, scorer and evaluation's sampling (what a python scorer's
 * retries are is not; nor the training draws' sampling, which evaluation no longer uses).
 */
function measureOf(spec: CampaignSpec): PromotionMeasure {
  const { scorer, pattern, caseSensitive, normalizeWhitespace } = spec.evaluation;
  return {
    baseModel: spec.provider.model,
    scorer: {
      scorer: typeof scorer === 'string' ? scorer : { kind: 'python', name: scorer.name },
      ...(pattern !== undefined ? { pattern } : {}),
      caseSensitive,
      normalizeWhitespace,
    },
    sampling: { ...evaluationSampling(spec) },
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
