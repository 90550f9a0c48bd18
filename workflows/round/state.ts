import { condition, getExternalWorkflowHandle, patched, upsertMemo, workflowInfo } from '@temporalio/workflow';
import {
  roundProgressSignal,
  type RoundBudget,
  type RoundInput,
  type RoundPhase,
  type RoundProgress,
  type RoundRecovery,
  type RoundResult,
  type SegmentOutcome,
  type SpendGuard,
} from './contract';
import { addUsage, emptyUsage, tokenCostUsd, type TokenUsage } from '../../config/rules/usage';
import { kindOf, type RoundKind } from '../../config/rules/round-kinds';
import { TRAINERS_MEMO, type RegisteredTrainer } from '../../config/rules/trainer-registry';
import { roundFiles, type RoundFiles } from '../../config/rules/round-files';
import { closingReserveMs, heldUsd, tokensUsd, type RoundPricing } from '../../config/rules/prices';

/**
 * What a round knows while it runs: its progress (answered to queries, told to the parent), the GPU time it has
 * held, its budget and whether a pause was asked for; what its messages (registered in round.ts) change.
 */
export class RoundState {
  readonly kind: RoundKind;
  readonly progress: RoundProgress;
  readonly result: RoundResult;
  /** The files beside the round's report (`round-N.<what>`). */
  readonly files: RoundFiles;
  /** Trainers released so far (pause, budget, a dead trainer, cleanup). */
  readonly released: string[] = [];
  /** Recoveries from provider-side failures, in order. */
  readonly recoveries: RoundRecovery[] = [];
  /** Why the round did not complete, once it did not. */
  failure: Error | undefined;
  pauseRequested = false;
  /** True once training is over (the budget watch ends). */
  trainingOver = false;
  /** True while the budget is spent (set by the budget watch). */
  budgetHit = false;
  /** An arm of a sweep: the sweep's decision at each rung (true: go on). */
  readonly armDecisions = new Map<number, boolean>();

  private budget: RoundBudget;
  private budgetVersion = 0;
  private heldMs = 0;
  private readyAtMs: number | undefined;
  private gpuCount = 1;
  private pricePerHour: number | undefined;
  /** With a dollar budget: how the round's spend is priced (the plan's). */
  private pricing: RoundPricing | undefined;
  /** The slowest training step seen (ms): what closing a GPU-billed round is estimated from. */
  private slowestStepMs = 0;
  /** An activity found the next unit of work would cross the dollar budget: why training stops. */
  private spentOut: string | undefined;
  /** GPU time: the admitted segments' estimates, summed, and what those segments cost (the report's `budget`). */
  private estimatedUsd = 0;
  private segmentsUsd = 0;
  /** Tokens processed so far, as activities report them (a per-token biller's bill: Tinker). */
  private usage: TokenUsage | undefined;
  private segmentEndToldMs: number | undefined;
  /** Trainers created and not released yet, as the memo lists them for the reaper. */
  private readonly trainers: RegisteredTrainer[] = [];

  constructor(private readonly input: RoundInput) {
    const { campaignId, round } = input;
    this.kind = kindOf(input.spec);
    this.budget = { ...input.budget };
    this.files = roundFiles(input.reportDir, round);
    this.progress = { campaignId, round, phase: 'validating', step: 0, totalSteps: 0, gpuMinutes: 0 };
    this.result = {
      campaignId,
      round,
      kind: this.kind,
      status: 'failed',
      reportPath: this.files.report,
      stepsApplied: 0,
      totalSteps: 0,
      gpuMinutes: 0,
    };
  }

  /** What provisioning waits for (capacity, the provision gate), told to the campaign while it provisions. */
  async waiting(wait: RoundProgress['waiting'] | null): Promise<void> {
    this.progress.waiting = wait ?? undefined;
    if (this.progress.phase === 'provisioning') await this.tell('provisioning');
  }

  /** The campaign's limits changed: what the round may still spend (the budget watch re-arms). */
  setBudget(budget: RoundBudget): void {
    this.budget = { ...this.budget, ...budget };
    this.budgetVersion += 1;
  }

  /** Tokens an activity had processed: on the result, and in the cost where the spec prices tokens. */
  addUsage(usage: TokenUsage | undefined): void {
    if (!usage) return;
    this.usage = addUsage(this.usage, usage);
  }

  /** A segment ended: its step, tokens and latest figures. */
  segmentEnded(segment: SegmentOutcome & { budgetReached?: string }): void {
    this.addUsage(segment.usage);
    if (segment.budgetReached) this.spentOut = segment.budgetReached;
    this.setStep(segment.cursor.step);
    if (segment.latestLoss !== undefined) this.progress.latestLoss = segment.latestLoss;
    if (segment.latestReward !== undefined) {
      this.progress.latestReward = this.result.latestReward = segment.latestReward;
      this.result.firstReward ??= segment.firstReward;
    }
    if (segment.latestMargin !== undefined) this.progress.latestMargin = segment.latestMargin;
    if (segment.latestMetrics !== undefined) this.progress.latestMetrics = segment.latestMetrics;
  }

  /** The plan of the checks before provisioning: the steps to train and the trainer's price. */
  planned(plan: { totalSteps: number; gpuCount: number; pricePerHour?: number; pricing?: RoundPricing }): void {
    this.progress.totalSteps = this.result.totalSteps = plan.totalSteps;
    this.gpuCount = plan.gpuCount;
    this.pricePerHour = plan.pricePerHour;
    this.pricing = plan.pricing;
  }

  /** A segment trained `steps` steps in `ms`: the slowest step so far sizes the reserve for closing. */
  noteSegmentTime(steps: number, ms: number): void {
    if (steps > 0) this.slowestStepMs = Math.max(this.slowestStepMs, ms / steps);
    if (this.pricing) this.segmentsUsd += heldUsd(this.pricing, ms);
  }

  /** An activity refused a unit of work that would have crossed the dollar budget (BudgetReached). */
  budgetRefused(message: string): void {
    this.spentOut = message;
  }

  /**
   * What an activity that spends tokens is given, with a dollar budget on a provider that bills them: what is left,
   * and the prices; it prices each operation before submitting it. Nothing without one.
   */
  spendGuard(): { spend?: SpendGuard } {
    if (this.budget.maxUsd === undefined || this.pricing?.billing !== 'tokens') return {};
    const leftUsd = Math.max(0, this.budget.maxUsd - (this.costUsd() ?? 0));
    return { spend: { leftUsd, prices: this.pricing.tokens } };
  }

  /**
   * With a dollar budget on GPU time: whether a unit of work that cannot take less than `ms` may start now (that time
   * and the reserve for closing within what is left). Its estimate (`estimateMs`) is summed for the report.
   */
  affords(ms: number, estimateMs = ms): boolean {
    if (this.budget.maxUsd === undefined || this.pricing?.billing !== 'gpu-time') return true;
    const reserve = heldUsd(this.pricing, closingReserveMs(this.slowestStepMs));
    if ((this.costUsd() ?? 0) + heldUsd(this.pricing, ms) + reserve > this.budget.maxUsd) return false;
    this.estimatedUsd += heldUsd(this.pricing, estimateMs);
    return true;
  }

  /** How long the baseline took: an evaluation of the final weights is estimated from it. */
  baselineMs = 0;

  /** How long one training step is expected to take (the slowest seen so far). */
  get stepMs(): number {
    return this.slowestStepMs;
  }

  /** The confirmed step (progress and result move together). */
  setStep(step: number): void {
    this.progress.step = this.result.stepsApplied = step;
  }

  trainerReady(resourceId: string, readyAtMs: number): void {
    this.readyAtMs = readyAtMs;
    this.progress.resourceId = resourceId;
  }

  /**
   * Records a trainer the round created in its memo, where the reaper reads it through visibility: the reaper then
   * never takes it while the round runs, and releases it if the round closes without doing so (terminated, timed
   * out). Told by the provisioning activity the moment the create answers, and again when provisioning returns.
   */
  registerTrainer(resourceId: string): void {
    if (this.trainers.some((t) => t.resourceId === resourceId) || !patched('trainers-in-memo')) return;
    const { kind, baseUrl } = this.input.spec.provider;
    this.trainers.push({ resourceId, kind, ...(baseUrl ? { baseUrl } : {}) });
    upsertMemo({ [TRAINERS_MEMO]: [...this.trainers] });
  }

  /** Trainers the memo lists (created, not released). */
  registeredTrainerIds(): string[] {
    return this.trainers.map((t) => t.resourceId);
  }

  /** The trainer was released: the memo no longer lists it. */
  unregisterTrainer(resourceId: string): void {
    const i = this.trainers.findIndex((t) => t.resourceId === resourceId);
    if (i < 0) return;
    this.trainers.splice(i, 1);
    upsertMemo({ [TRAINERS_MEMO]: [...this.trainers] });
  }

  /** A trainer was released: its GPU time stops counting. */
  trainerReleased(resourceId: string): void {
    this.unregisterTrainer(resourceId);
    this.released.push(resourceId);
    this.heldMs = this.heldNowMs();
    this.readyAtMs = undefined;
  }

  /** GPU-minutes and cost as final figures on the result (at cleanup). */
  settleCost(): void {
    this.heldMs = this.heldNowMs();
    this.readyAtMs = undefined;
    this.result.gpuMinutes = this.gpuMinutes();
    this.result.costUsd = this.costUsd();
    if (this.usage) this.result.tokens = { ...this.usage };
    if (this.budget.maxUsd !== undefined && this.pricing) {
      const spentUsd = this.result.costUsd ?? 0;
      // The estimate: GPU time, each training segment at the slowest step seen before it (the first one blind), the rest
      // as held; tokens, each operation as admitted (a sample's generated tokens at their bound, n × maxTokens). The
      // settled figure counts what was processed.
      this.result.budget = {
        maxUsd: this.budget.maxUsd,
        spentUsd,
        pricing: this.pricing,
        estimatedUsd:
          this.pricing.billing === 'gpu-time'
            ? spentUsd - this.segmentsUsd + this.estimatedUsd
            : tokensUsd(this.pricing, { ...(this.usage ?? emptyUsage()), sample: this.usage?.sampleBound ?? this.usage?.sample ?? 0 }),
      };
    }
  }

  /** GPU-minutes held since a moment (capped at what is held now): what a rollback discards. */
  gpuMinutesSince(ms: number): number {
    const since = this.readyAtMs === undefined ? 0 : Math.max(0, Date.now() - Math.max(ms, this.readyAtMs));
    return (since / 60_000) * this.gpuCount;
  }

  snapshot(): RoundProgress {
    return {
      ...this.progress,
      gpuMinutes: this.gpuMinutes(),
      costUsd: this.costUsd(),
      ...(this.usage ? { tokens: { ...this.usage } } : {}),
    };
  }

  /**
   * Tells the parent campaign the phase. Phase changes and the first segment end always reach it; later segment ends
   * at most every 30 s: a signal adds 5 history events, and a segment's own 6 leave room for fewer under 0.1 event
   * per step.
   */
  async tell(phase: RoundPhase, options: { segmentEnd?: boolean } = {}): Promise<void> {
    this.progress.phase = phase;
    const parent = workflowInfo().parent;
    if (!parent) return;
    if (options.segmentEnd) {
      const recent = this.segmentEndToldMs !== undefined && Date.now() - this.segmentEndToldMs < 30_000;
      if (recent && patched('throttle-segment-progress-signals')) return;
      this.segmentEndToldMs = Date.now();
    }
    await getExternalWorkflowHandle(parent.workflowId, parent.runId)
      .signal(roundProgressSignal, this.snapshot())
      .catch(() => undefined);
  }

  /** Why training must stop now, if a limit is reached. */
  overBudget(): string | undefined {
    if (this.budget.exhausted) return this.budget.exhausted;
    if (this.budget.deadlineMs !== undefined && Date.now() >= this.budget.deadlineMs) return 'wall-time budget reached';
    if (this.budget.maxGpuMinutes !== undefined && this.gpuMinutes() >= this.budget.maxGpuMinutes) return 'GPU-minute budget reached';
    if (this.budget.maxUsd !== undefined) {
      if (this.spentOut) return 'dollar budget reached';
      if (this.pricing?.billing === 'gpu-time' && this.msUntilDollars() <= 0) return 'dollar budget reached';
    }
    return undefined;
  }

  /** GPU time: how long the held resource may run before what is left of maxUsd is only the reserve for closing. */
  private msUntilDollars(): number {
    if (this.budget.maxUsd === undefined || this.pricing?.billing !== 'gpu-time') return Infinity;
    const left = this.budget.maxUsd - (this.costUsd() ?? 0) - heldUsd(this.pricing, closingReserveMs(this.slowestStepMs));
    return this.readyAtMs === undefined && left > 0 ? Infinity : (left / this.pricing.perHour) * 3_600_000;
  }

  /**
   * While training, one timer stands for the moment the budget runs out (re-armed when the budget or the trainer
   * changes), so a limit interrupts the running segment like a pause does instead of waiting for its end.
   */
  async watchBudget(): Promise<void> {
    while (!this.trainingOver) {
      const version = this.budgetVersion;
      const held = this.readyAtMs;
      const changed = () => this.trainingOver || this.budgetVersion !== version || this.readyAtMs !== held;
      this.budgetHit = this.overBudget() !== undefined;
      const ms = this.budgetHit ? undefined : this.msUntilOverBudget();
      if (ms === undefined) await condition(changed);
      else if (!(await condition(changed, Math.max(1, Math.ceil(ms))))) this.budgetHit = this.overBudget() !== undefined;
      if (this.budgetHit) await condition(changed);
    }
  }

  /** How long until a limit is reached at the current rate (GPU time runs only while a trainer is held). */
  private msUntilOverBudget(): number | undefined {
    const waits: number[] = [];
    if (this.budget.exhausted) waits.push(0);
    if (this.budget.deadlineMs !== undefined) waits.push(this.budget.deadlineMs - Date.now());
    if (this.budget.maxGpuMinutes !== undefined && this.readyAtMs !== undefined)
      waits.push(((this.budget.maxGpuMinutes - this.gpuMinutes()) * 60_000) / this.gpuCount);
    if (this.budget.maxUsd !== undefined && this.readyAtMs !== undefined && this.pricing?.billing === 'gpu-time')
      waits.push(this.msUntilDollars());
    return waits.length ? Math.max(0, Math.min(...waits)) : undefined;
  }

  /** GPU time: the finished holds plus the current one (from ready until now). */
  private heldNowMs(): number {
    return this.heldMs + (this.readyAtMs === undefined ? 0 : Math.max(0, Date.now() - this.readyAtMs));
  }

  private gpuMinutes(): number {
    return (this.heldNowMs() / 60_000) * this.gpuCount;
  }

  /** GPU time at the quoted hourly price, plus tokens at the spec's token prices (USD per million), where given. */
  private costUsd(): number | undefined {
    if (this.pricing)
      return heldUsd(this.pricing, this.heldNowMs()) + tokensUsd(this.pricing, this.usage ?? { prefill: 0, sample: 0, train: 0 });
    const prices = this.input.spec.provider.tokenPrices;
    const gpu = this.pricePerHour === undefined ? undefined : (this.heldNowMs() / 3_600_000) * this.pricePerHour;
    if (!prices) return gpu;
    return (gpu ?? 0) + tokenCostUsd(this.usage ?? { prefill: 0, sample: 0, train: 0 }, prices);
  }
}
