import { ActivityFailure, ApplicationFailure, ChildWorkflowFailure, isCancellation, patched } from '@temporalio/workflow';
import { isRecoverableFailure } from '../config/rules/failures';

/**
 * Reading failures in workflow code: the one place a workflow turns an activity's or a child's failure into the
 * type and message a report shows. The types are config/failures.ts's closed set (histories recorded before it may
 * carry older names, which are shown as they are).
 */

/** The failure an activity or child workflow failure wraps (the activity's own error), else the error itself. */
function causeOf(err: unknown): unknown {
  return err instanceof ActivityFailure || err instanceof ChildWorkflowFailure ? err.cause : err;
}

/** The error type a report shows: the failure's type (e.g. NonFiniteLoss), `Cancelled`, else the error's name. */
export function failureTypeOf(err: unknown): string {
  if (isCancellation(err)) return 'Cancelled';
  const cause = causeOf(err);
  if (cause instanceof ApplicationFailure && cause.type) return cause.type;
  return cause instanceof Error ? cause.name : 'Unknown';
}

export function failureMessageOf(err: unknown): string {
  const cause = causeOf(err);
  return cause instanceof Error ? cause.message : String(err);
}

/** A failure's message as a round's result and the campaign's state keep it (across continue-as-new): a reason, not a dump. */
export function failureReasonOf(err: unknown): string {
  return failureMessageOf(err).slice(0, 1000);
}

/** A detail field of an activity's failure (e.g. the `resourceId` provisioning made before it failed). */
export function failureDetail<T>(err: unknown, field: string): T | undefined {
  const cause = causeOf(err);
  if (!(cause instanceof ApplicationFailure)) return undefined;
  const details = cause.details?.[0] as Record<string, unknown> | undefined;
  return details?.[field] as T | undefined;
}

/**
 * Whether a round recovers from this failure by rolling back (a failed operation, a lost session, a dead or preempted
 * trainer: config/rules/failures.ts); histories recorded before recovery existed never do.
 */
export function recoverable(err: unknown): boolean {
  return isRecoverableFailure(failureTypeOf(err)) && patched('provider-failure-recovery');
}

/** The round result a failed child round carries in its failure's details. */
export function childRoundResultOf<T>(err: unknown): T | undefined {
  return err instanceof ChildWorkflowFailure && err.cause instanceof ApplicationFailure
    ? (err.cause.details?.[0] as T | undefined)
    : undefined;
}

export { isCancellation };
