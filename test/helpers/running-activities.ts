import type { WorkflowHandle } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import { SEGMENT_ACTIVITIES } from '../../config/rules/round-kinds';

/** An activity attempt of a workflow that a worker runs right now: what a SIGKILL of that worker interrupts. */
export interface RunningActivity {
  activityId: string;
  type: string;
  attempt: number;
  /** The process id in the identity (`pid@host`) of the worker running it. */
  workerPid: number;
  /** `step` of its latest heartbeat details where they have one (a training segment's confirmed round step). */
  heartbeatStep?: number;
}

/** The round's training segments, of every kind (each kind's `segmentActivity`). */
export const TRAINING_ACTIVITY = new RegExp(`^(${SEGMENT_ACTIVITIES.join('|')})$`);

/** temporal.api.enums.v1.PendingActivityState.PENDING_ACTIVITY_STATE_STARTED: a worker holds the attempt. */
const STARTED = 2;

/** The workflow's activities a worker runs now (its pending activities in the STARTED state), from the server. */
export async function runningActivities(handle: WorkflowHandle): Promise<RunningActivity[]> {
  const pending = (await handle.describe()).raw.pendingActivities ?? [];
  return pending
    .filter((a) => a.state === STARTED)
    .map((a) => ({
      activityId: a.activityId ?? '',
      type: a.activityType?.name ?? '',
      attempt: a.attempt ?? 0,
      workerPid: Number((a.lastWorkerIdentity ?? '').split('@')[0]),
      heartbeatStep: heartbeatStepOf(a.heartbeatDetails?.payloads?.[0]),
    }));
}

function heartbeatStepOf(payload: Parameters<typeof defaultPayloadConverter.fromPayload>[0] | undefined): number | undefined {
  if (!payload) return undefined;
  try {
    const step = (defaultPayloadConverter.fromPayload(payload) as { step?: unknown } | undefined)?.step;
    return typeof step === 'number' ? step : undefined;
  } catch {
    return undefined; // not JSON (an encrypted payload): no step to read
  }
}

/**
 * Whether the activity's attempt `attempt` ended without finishing, proven by the server: a later attempt of the same
 * activity was scheduled (still pending, or in the history's started event once it closed). False when that attempt
 * itself completed or failed (a kill that came too late to interrupt it). Waits up to `timeoutMs` for the server to
 * notice the dead worker (its heartbeat timeout) and decide.
 */
export async function attemptWasInterrupted(
  handle: WorkflowHandle,
  activityId: string,
  attempt: number,
  timeoutMs = 60_000,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const pending = (await handle.describe()).raw.pendingActivities?.find((a) => a.activityId === activityId);
    if (pending) {
      if ((pending.attempt ?? 0) > attempt) return true;
    } else {
      const closed = await lastStartedAttempt(handle, activityId);
      if (closed !== undefined) return closed > attempt;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`activity ${activityId} attempt ${attempt}: neither finished nor retried within ${timeoutMs} ms`);
}

/** The attempt of a closed activity's started event (history records only the last attempt), if it has closed. */
async function lastStartedAttempt(handle: WorkflowHandle, activityId: string): Promise<number | undefined> {
  const events = (await handle.fetchHistory()).events ?? [];
  const scheduled = events.find((e) => e.activityTaskScheduledEventAttributes?.activityId === activityId);
  if (!scheduled) return undefined;
  const started = events.find((e) => String(e.activityTaskStartedEventAttributes?.scheduledEventId) === String(scheduled.eventId));
  return started?.activityTaskStartedEventAttributes?.attempt ?? undefined;
}
