import { workflowInfo } from '@temporalio/workflow';
import { lineageParts, roundKey } from '../config/rules/keys';
import type { RoundActivities } from './round-activities';
import {
  ownerTagFor,
  referenceTagFor,
  type EvaluationPoint,
  type Rollback,
  type RoundInput,
  type TrainingCheckpoint,
} from './round-contract';
import type { KindRun, RoundKind } from './round-kinds';
import { failureDetail } from './failures';

/** A running round: its input, state, activities, lease, current session and where a rollback resumes from. */
export interface RoundRun extends KindRun {
  activities: RoundActivities;
  /** What cleanup must release: set before provisioning, filled in as soon as an id is known. */
  lease: { resourceId?: string; sessionId?: string };
  /** Round-local step = provider step − offset (non-zero when a session resumed from a checkpoint). */
  stepOffset: number;
  /** Where a rollback resumes from: the latest training checkpoint, or where the round started (step 0). */
  restore: RestorePoint;
  /** Rolling checkpoints saved so far (the report keeps the last few). */
  checkpoints: TrainingCheckpoint[];
  /** Each rollback: from lineage L on, training resumed from step `toStep`. */
  rollbacks: Rollback[];
  /** When the phase running now started (GPU time lost by a rollback outside training counts from here). */
  phaseStartedAtMs: number;
  /** Evaluations during training so far, every lineage's (workflows/evaluation.ts keeps the kept weights' curve). */
  evaluations: EvaluationPoint[];
}

export interface RestorePoint {
  checkpointId?: string;
  loadOptimizer: boolean;
  step: number;
  savedAtMs: number;
}

/** An idempotency key of the round under its current lineage: `${campaignId}/r${round}[/L<n>]/…parts`. */
export function runKey(run: RoundRun, ...parts: (string | number)[]): string {
  return roundKey(run.input.campaignId, run.input.round, ...lineageParts(run.lineage), ...parts);
}

/** Provisions a trainer (lease first) and opens the round's session(s) on it, fresh or from a checkpoint. */
export async function acquireTrainer(run: RoundRun, kind: RoundKind, startFrom: RoundInput['startFrom']): Promise<void> {
  const { input, state, activities, lease } = run;
  await state.tell('provisioning');
  try {
    const trainer = await activities.provisioning.provisionTrainer({ spec: input.spec, ownerTag: ownerTagFor(workflowInfo().workflowId) });
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
  await openSessions(run, kind, startFrom);
}

/** Opens the round's training session on the leased trainer (and GRPO's frozen reference session when it has one). */
export async function openSessions(run: RoundRun, kind: RoundKind, startFrom: RoundInput['startFrom']): Promise<void> {
  const { input, state, activities, lease } = run;
  const resourceId = lease.resourceId!;
  const ownerTag = ownerTagFor(workflowInfo().workflowId);
  const session = await activities.onTrainer.openTrainingSession({
    spec: input.spec,
    resourceId,
    ownerTag,
    startFrom,
    campaignId: input.campaignId,
  });
  lease.sessionId = state.progress.sessionId = run.sessionId = session.sessionId;
  run.stepOffset = session.stepOffset;
  if (kind.referenceSession(input)) {
    // The reference policy: the round's starting weights, frozen in a second session on the same trainer.
    const referenceFrom = input.startFrom && { checkpointId: input.startFrom.checkpointId, loadOptimizer: false };
    const reference = await activities.onTrainer.openTrainingSession({
      spec: input.spec,
      resourceId,
      ownerTag: referenceTagFor(workflowInfo().workflowId),
      startFrom: referenceFrom,
      campaignId: input.campaignId,
    });
    run.referenceSessionId = reference.sessionId;
  }
}

/** Releases the trainer now (pause, budget, a dead trainer): its GPU time stops counting. */
export async function releaseTrainerNow(run: RoundRun): Promise<void> {
  const { lease } = run;
  if (!lease.resourceId) return;
  await run.activities.cleanup.releaseTrainer({ spec: run.input.spec, resourceId: lease.resourceId, sessionId: lease.sessionId });
  run.state.trainerReleased(lease.resourceId);
  lease.resourceId = lease.sessionId = undefined;
}
