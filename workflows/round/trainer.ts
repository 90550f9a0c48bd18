import { checkPythonFunctions, sandboxOf } from '../python/python';
import { pythonChecksOf } from '../../config/rules/python-calls';
import { condition, patched, workflowInfo } from '@temporalio/workflow';
import { lineageParts, roundKey } from '../../config/rules/keys';
import { failureDetail, failureMessageOf, failureTypeOf, recoverable } from '../failures';
import { untilInterrupted } from '../interrupt';
import type { RoundActivities } from './activities';
import {
  ownerTagFor,
  referenceTagFor,
  type EvaluationPoint,
  type PhaseInput,
  type Rollback,
  type RoundData,
  type RoundInput,
  type RoundPlan,
  type SegmentInput,
  type TrainingCheckpoint,
  type TrainingCursor,
} from './contract';
import type { RoundState } from './state';

/** A training checkpoint the round can reopen its trainer from (none: the round's start), and its round step. */
export interface Checkpoint {
  checkpointId?: string;
  loadOptimizer: boolean;
  step: number;
}

/** Where a rollback resumes from: the latest training checkpoint of the kept lineage, or the round's start. */
export interface RestorePoint extends Checkpoint {
  savedAtMs: number;
}

/**
 * The round's hold on a trainer: the lease (what cleanup must release), the open sessions, the step offset between
 * the trainer's step counter and the round's, the lineage the keys carry, and the restore point a rollback resumes
 * from. Every reopening of the trainer from a checkpoint is `reopenFrom`: a pause (in training, at a checkpoint of
 * the cursor; in any other phase, from the restore point), a recovery from a provider-side failure, and an early
 * stop's return to the best weights. This file alone sets the step offset.
 *
 * A phase that runs on the trainer (`phase`) is pausable (a pause interrupts its activity, releases the trainer,
 * and runs the phase again once resumed) and recovering (a provider-side failure rolls back to the restore point on
 * a fresh session or trainer, under a new lineage, and runs the phase again).
 */
export class RoundTrainer {
  /** What cleanup must release: set before provisioning, filled in as soon as an id is known. */
  readonly lease: { resourceId?: string; sessionId?: string } = {};
  /** The lease is a sweep's shared trainer (RoundInput.sharedTrainer): only the round's sessions are its to end. */
  private onShared = false;
  /** The sweep's shared trainer was not up when the round looked: from then on it provisions its own. */
  private sharedGone = false;
  /** The round's datasets, with the hashes the checks found. */
  data: RoundData;
  sessionId = '';
  /** GRPO's frozen reference session (the starting weights), when its loss has a KL penalty. */
  referenceSessionId?: string;
  /** Rollbacks so far: operations' keys carry it, so a provider never hands back a failed lineage's records. */
  lineage = 0;
  restore: RestorePoint;
  /** Rolling checkpoints saved so far (the report keeps the last few). */
  readonly checkpoints: TrainingCheckpoint[] = [];
  /** Each rollback: from lineage L on, training resumed from step `toStep`. */
  readonly rollbacks: Rollback[] = [];
  /** Evaluations during training so far, every lineage's (workflows/round/evaluation.ts keeps the kept weights' curve). */
  readonly evaluations: EvaluationPoint[] = [];
  /** When the phase running now started (GPU time lost by a rollback outside training counts from here). */
  phaseStartedAtMs = 0;

  /** Round-local step = trainer step − offset (non-zero when a session opened from a checkpoint). */
  private offset = 0;
  /** Whether a pause takes effect in any phase (histories recorded before the patch: only in training). */
  private pausesAnyPhase = false;

  constructor(
    readonly input: RoundInput,
    readonly state: RoundState,
    readonly activities: RoundActivities,
    private readonly options: { referenceSession: boolean },
  ) {
    this.data = { ...input.data, trainSha256: '', evalSha256: '' };
    this.restore = {
      checkpointId: input.startFrom?.checkpointId,
      loadOptimizer: input.startFrom?.loadOptimizer ?? true,
      step: 0,
      savedAtMs: 0,
    };
  }

  get stepOffset(): number {
    return this.offset;
  }

  /** An idempotency key of the round under its current lineage: `${campaignId}/r${round}[/L<n>]/…parts`. */
  key(...parts: (string | number)[]): string {
    return roundKey(this.input.campaignId, this.input.round, ...lineageParts(this.lineage), ...parts);
  }

  /** What a pass on the current session names: the round, its data, the session and the lineage its keys carry. */
  phaseInput(): Omit<PhaseInput, 'label'> {
    const { campaignId, round, spec } = this.input;
    return {
      campaignId,
      round,
      spec,
      data: this.data,
      sessionId: this.sessionId,
      lineage: this.lineage || undefined,
      ...this.state.spendGuard(),
    };
  }

  /** A training segment from the cursor on the current session. */
  segmentInput(cursor: TrainingCursor, totalSteps: number): SegmentInput {
    return {
      ...this.phaseInput(),
      stepOffset: this.offset,
      cursor,
      totalSteps,
      stepsDir: this.state.files.steps,
      lastCheckpoint: { step: this.restore.step, savedAtMs: Math.max(this.restore.savedAtMs, this.phaseStartedAtMs) },
    };
  }

  /** The trainer's own step count from a checkpoint, when it is one this round can have reached; else the cursor. */
  trainerStep(checkpointStep: number, cursor: TrainingCursor, totalSteps: number): TrainingCursor {
    const step = checkpointStep - this.offset;
    return step >= cursor.step && step <= totalSteps ? { step } : cursor;
  }

  /** Every check that needs no trainer (data, tokens, model, prices): the plan, and the data's hashes from now on. */
  async prepare(): Promise<RoundPlan> {
    const { input } = this;
    const plan = await this.activities.checks.prepareRound({
      spec: input.spec,
      data: input.data,
      ...(input.budget?.maxUsd !== undefined ? { budget: input.budget } : {}),
    });
    this.data = { ...input.data, trainSha256: plan.trainSha256, evalSha256: plan.evalSha256 };
    // The user's Python functions: registered and fit for their role on a live worker, or the round ends here.
    const python = [...pythonChecksOf(input.spec), ...(input.pythonChecks ?? [])];
    if (python.length) {
      const described = await checkPythonFunctions(python);
      this.state.result.sandbox = sandboxOf(described, [...new Set(python.map((c) => c.call.taskQueue))]);
    }
    return plan;
  }

  /**
   * The round's first trainer, from where the round starts. From here on a pause takes effect in any phase; during
   * provisioning it drains on cancel: a cancelled round hears which trainer it made, and cleanup releases it.
   */
  async acquire(): Promise<void> {
    this.pausesAnyPhase = patched('pause-in-any-phase');
    await this.pausable(() => this.provision(this.input.startFrom, 0), { reacquire: false, drainOnCancel: true });
  }

  /** A phase on the trainer, pausable (unless `pausable: false`) and recovering. */
  async phase<T>(name: string, body: () => Promise<T>, options: { pausable?: boolean } = {}): Promise<T> {
    const run = options.pausable === false ? body : () => this.pausable(body);
    this.phaseStartedAtMs = Date.now();
    for (;;) {
      try {
        return await run();
      } catch (err) {
        if (!recoverable(err)) throw err;
        await this.recover(name, err);
      }
    }
  }

  /**
   * Opens the round's session(s) from a checkpoint (none: the round's start) at round step `from.step`: on the
   * trainer the round holds (`same-trainer`), or on a newly provisioned one, the old one released first.
   */
  async reopenFrom(from: Checkpoint, where: 'same-trainer' | 'new-trainer'): Promise<void> {
    const start = from.checkpointId ? { checkpointId: from.checkpointId, loadOptimizer: from.loadOptimizer } : undefined;
    if (where === 'same-trainer') return this.openSessions(start, from.step);
    await this.release();
    await this.provision(start, from.step);
  }

  /**
   * After a failure or an early stop: whether the trainer the round holds can take a new session (its old sessions
   * are closed then), or a new one must be provisioned.
   */
  async whereToReopen(): Promise<'same-trainer' | 'new-trainer'> {
    const sessions = [this.sessionId, this.referenceSessionId].filter((id): id is string => Boolean(id));
    const { lease, input } = this;
    const trainer = lease.resourceId
      ? await this.activities.onTrainer.prepareRecovery({ spec: input.spec, resourceId: lease.resourceId, sessionIds: sessions })
      : { trainerReady: false };
    return trainer.trainerReady ? 'same-trainer' : 'new-trainer';
  }

  /** Releases the trainer now (pause, budget, a dead trainer): its GPU time stops counting. */
  async release(): Promise<void> {
    const { lease } = this;
    if (!lease.resourceId) return;
    if (this.onShared) return void (await this.endSharedSessions());
    await this.activities.cleanup.releaseTrainer({ spec: this.input.spec, resourceId: lease.resourceId, sessionId: lease.sessionId });
    this.state.trainerReleased(lease.resourceId);
    lease.resourceId = lease.sessionId = undefined;
  }

  /**
   * Releases trainers the round knows only from its provisioning's word (a provisioning interrupted or failed before
   * it returned the id): idempotent, so also right for one the activity released itself. Returns a failure's message.
   */
  async releaseRegistered(): Promise<string | undefined> {
    let failure: string | undefined;
    for (const resourceId of this.state.registeredTrainerIds()) {
      try {
        await this.activities.cleanup.releaseTrainer({ spec: this.input.spec, resourceId });
        this.state.released.push(resourceId);
        this.state.unregisterTrainer(resourceId);
      } catch (err) {
        failure = err instanceof Error ? err.message : String(err);
      }
    }
    return failure;
  }

  /** At cleanup: releases what the lease holds, then what only the registry knows; returns the cleanup status. */
  async releaseAll(): Promise<string> {
    const { state, lease } = this;
    let status = state.released.length ? 'deactivated' : 'nothing-to-release';
    if (lease.resourceId && this.onShared) {
      try {
        await this.endSharedSessions();
        status = 'session-ended';
      } catch (err) {
        status = `failed: ${failureTypeOf(err)}`;
      }
    } else if (lease.resourceId) {
      try {
        const resourceId = lease.resourceId;
        status = (await this.activities.cleanup.releaseTrainer({ spec: this.input.spec, resourceId, sessionId: lease.sessionId })).status;
        state.released.push(resourceId);
        state.unregisterTrainer(resourceId);
      } catch (err) {
        status = `failed: ${failureTypeOf(err)}`;
      }
    }
    const unreleased = await this.releaseRegistered();
    return unreleased ? `failed: ${unreleased}` : status;
  }

  /** A rolling checkpoint became the round's latest: a later rollback resumes from it. */
  noteCheckpoint(checkpoint: TrainingCheckpoint): void {
    if (this.checkpoints.some((c) => c.checkpointId === checkpoint.checkpointId)) return;
    this.checkpoints.push(checkpoint);
    if (checkpoint.lineage === this.lineage && checkpoint.step >= this.restore.step) {
      this.restore = { checkpointId: checkpoint.checkpointId, loadOptimizer: true, step: checkpoint.step, savedAtMs: checkpoint.savedAtMs };
    }
  }

  /** A training checkpoint of the current session at round step `step`: the restore point from now on. */
  checkpointed(checkpointId: string, step: number): void {
    this.restore = { checkpointId, loadOptimizer: true, step, savedAtMs: Date.now() };
  }

  /** The latest `keep` rolling checkpoints, and always the one an early stop finished from. */
  keptCheckpoints(keep: number, best: string | undefined): { checkpointId: string; step: number; lineage: number }[] {
    const kept = this.checkpoints.filter((c, i) => i >= this.checkpoints.length - keep || c.checkpointId === best);
    return kept.map(({ checkpointId, step, lineage }) => ({ checkpointId, step, lineage }));
  }

  /**
   * A pause in training: a checkpoint at the cursor, the GPU given back, and once resumed a new trainer from that
   * checkpoint at the same step. Returns the cursor (the checkpoint's step is the trainer's own count: the truth,
   * should an interrupted segment not have said).
   */
  async pauseAt(cursor: TrainingCursor, totalSteps: number, options: { trainerCounts: boolean }): Promise<TrainingCursor> {
    const { state } = this;
    const checkpoint = await this.activities.onTrainer.saveTrainingCheckpoint({
      spec: this.input.spec,
      sessionId: this.sessionId,
      key: this.key('pause', `s${cursor.step}`),
    });
    if (options.trainerCounts) {
      cursor = this.trainerStep(checkpoint.step, cursor, totalSteps);
      state.setStep(cursor.step);
    }
    this.checkpointed(checkpoint.checkpointId, cursor.step);
    await this.release();
    await this.waitForResume();
    await this.reopenFrom({ checkpointId: checkpoint.checkpointId, loadOptimizer: true, step: cursor.step }, 'new-trainer');
    await state.tell('training');
    return cursor;
  }

  /**
   * Rolls the round back to its restore point on a fresh session (or trainer) under a new lineage, and records the
   * recovery; bounded by `advanced.maxRecoveries`. Returns the step training resumes at.
   */
  async recover(phase: string, err: unknown): Promise<TrainingCursor> {
    const { state, input } = this;
    const maxRecoveries = input.spec.advanced.maxRecoveries ?? 5;
    if (state.recoveries.length >= maxRecoveries) throw err;
    for (const c of failureDetail<TrainingCheckpoint[]>(err, 'checkpoints') ?? []) this.noteCheckpoint(c);
    const failedAtStep = Math.max(state.progress.step, failureDetail<number>(err, 'step') ?? 0);
    const restore = this.restore;
    const inTraining = phase === 'training' || phase === 'checkpointing';
    const gpuMinutesLost = state.gpuMinutesSince(inTraining ? Math.max(restore.savedAtMs, this.phaseStartedAtMs) : this.phaseStartedAtMs);

    const where = await this.whereToReopen();
    this.lineage += 1;
    this.rollbacks.push({ lineage: this.lineage, toStep: restore.step });
    await this.reopenFrom(restore, where);
    state.setStep(restore.step);
    const recovery = {
      phase,
      errorType: failureTypeOf(err),
      code: failureDetail<string>(err, 'code'),
      message: failureMessageOf(err).slice(0, 300),
      failedAtStep,
      rolledBackTo: restore.step,
      stepsRolledBack: Math.max(0, failedAtStep - restore.step),
      newTrainer: where === 'new-trainer',
      lineage: this.lineage,
      gpuMinutesLost,
      checkpointId: restore.checkpointId ?? null,
    };
    state.recoveries.push(recovery);
    state.progress.recoveries = state.recoveries.length;
    state.progress.lastRecovery = `${recovery.errorType}${recovery.code ? ` (${recovery.code})` : ''} in ${phase} at step ${failedAtStep}: resumed from step ${restore.step} on ${recovery.newTrainer ? 'a new trainer' : 'a new session'}`;
    return { step: restore.step };
  }

  /** Runs a phase that a pause interrupts (in any phase, once the patch holds); returns its value once it completes. */
  private async pausable<T>(
    body: () => Promise<T>,
    options: { reacquire: boolean; drainOnCancel?: boolean } = { reacquire: true },
  ): Promise<T> {
    if (!this.pausesAnyPhase) return body();
    for (;;) {
      if (this.state.pauseRequested) await this.pauseHere(options.reacquire);
      const done = await untilInterrupted(
        async () => ({ value: await body() }),
        () => this.state.pauseRequested,
        { drainOnCancel: options.drainOnCancel },
      );
      if (done) return done.value;
    }
  }

  /**
   * A pause outside training: every trainer the round holds given back, and once resumed a trainer again from the
   * restore point (the starting checkpoint before training, the training checkpoint after), unless the phase itself
   * is the taking of one.
   */
  private async pauseHere(reacquire: boolean): Promise<void> {
    const { state } = this;
    const phase = state.progress.phase;
    await this.release();
    await this.releaseRegistered();
    await this.waitForResume();
    if (!reacquire) return void (await state.tell(phase));
    await this.reopenFrom(this.restore, 'new-trainer');
    this.phaseStartedAtMs = Date.now();
    await state.tell(phase);
  }

  private async waitForResume(): Promise<void> {
    const { state } = this;
    await state.tell('paused');
    state.progress.paused = true;
    await condition(() => !state.pauseRequested);
    state.progress.paused = false;
  }

  /**
   * The round's sessions end on the sweep's shared trainer, which stays for the other arms (the sweep releases it):
   * what the report lists as released is the sessions.
   */
  private async endSharedSessions(): Promise<void> {
    const { lease, state } = this;
    const sessionIds = [lease.sessionId, this.referenceSessionId].filter((id): id is string => Boolean(id));
    await this.activities.cleanup.releaseTrainer({ spec: this.input.spec, resourceId: lease.resourceId!, sessionOnly: { sessionIds } });
    state.released.push(...sessionIds);
    lease.resourceId = lease.sessionId = undefined;
    this.onShared = false;
  }

  /** Provisions a trainer (lease first) and opens the round's session(s) on it, fresh or from a checkpoint. */
  private async provision(startFrom: RoundInput['startFrom'], fromStep: number): Promise<void> {
    const { input, state, lease } = this;
    await state.tell('provisioning');
    const shared = input.sharedTrainer?.resourceId;
    if (shared && !this.sharedGone) {
      // An arm of a sweep: its sessions on the sweep's trainer while it is up; gone, a trainer of its own.
      const trainer = await this.activities.onTrainer.prepareRecovery({ spec: input.spec, resourceId: shared, sessionIds: [] });
      if (trainer.trainerReady) {
        lease.resourceId = state.progress.resourceId = shared;
        this.onShared = true;
        return this.openSessions(startFrom, fromStep);
      }
      this.sharedGone = true;
    }
    try {
      const trainer = await this.activities.provisioning.provisionTrainer({
        spec: input.spec,
        ownerTag: ownerTagFor(workflowInfo().workflowId),
      });
      lease.resourceId = trainer.resourceId;
      state.registerTrainer(trainer.resourceId);
      state.trainerReady(trainer.resourceId, trainer.readyAtMs);
      state.progress.waiting = undefined;
      if (trainer.capacityWait)
        (state.result.capacityWaits ??= []).push({
          creates: trainer.capacityWait.creates,
          waitedMinutes: trainer.capacityWait.waitedMs / 60_000,
        });
    } catch (err) {
      lease.resourceId ??= failureDetail<string>(err, 'resourceId'); // created, then failed: still ours to release
      if (lease.resourceId) state.registerTrainer(lease.resourceId);
      throw err;
    }
    await this.openSessions(startFrom, fromStep);
  }

  /**
   * Opens the round's training session on the leased trainer (and GRPO's frozen reference session when it has one);
   * the trainer's step counter then stands at round step `fromStep`.
   */
  private async openSessions(startFrom: RoundInput['startFrom'], fromStep: number): Promise<void> {
    const { input, state, lease, activities } = this;
    const resourceId = lease.resourceId!;
    const session = await activities.onTrainer.openTrainingSession({
      spec: input.spec,
      resourceId,
      ownerTag: ownerTagFor(workflowInfo().workflowId),
      startFrom,
      campaignId: input.campaignId,
    });
    lease.sessionId = state.progress.sessionId = this.sessionId = session.sessionId;
    this.offset = session.stepOffset - fromStep;
    if (this.options.referenceSession) {
      // The reference policy: the round's starting weights, frozen in a second session on the same trainer.
      const referenceFrom = input.startFrom && { checkpointId: input.startFrom.checkpointId, loadOptimizer: false };
      const reference = await activities.onTrainer.openTrainingSession({
        spec: input.spec,
        resourceId,
        ownerTag: referenceTagFor(workflowInfo().workflowId),
        startFrom: referenceFrom,
        campaignId: input.campaignId,
      });
      this.referenceSessionId = reference.sessionId;
    }
  }
}
