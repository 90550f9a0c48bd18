import { proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../../activities';

/**
 * The round's activity proxies, named for what they do; they differ in timeouts, retries and what a cancellation
 * does. Created in the workflow (they read the spec's heartbeat timeout).
 */
export function roundActivities(heartbeatTimeoutSeconds: number) {
  const heartbeatTimeout = heartbeatTimeoutSeconds * 1000;
  const heartbeating = (cancellationType: 'TRY_CANCEL' | 'WAIT_CANCELLATION_COMPLETED') =>
    proxyActivities<Activities>({
      startToCloseTimeout: '24 hours',
      heartbeatTimeout,
      cancellationType,
      retry: { initialInterval: '1 second', maximumInterval: '30 seconds', maximumAttempts: 20 },
    });
  return {
    /** Checks that need no trainer: data, tokens, model, prices. */
    checks: proxyActivities<Activities>({ startToCloseTimeout: '2 minutes', retry: { maximumAttempts: 5, initialInterval: '1 second' } }),
    /**
     * Provisioning is never abandoned: on cancel the workflow waits for the activity, which either reports the
     * resource it made (so cleanup releases it) or releases it itself before acknowledging the cancel.
     */
    provisioning: heartbeating('WAIT_CANCELLATION_COMPLETED'),
    /** Work on the trainer: sessions, loss passes, checkpoints, sampling; a cancellation abandons it at once. */
    onTrainer: heartbeating('TRY_CANCEL'),
    /**
     * A training segment that a pause or budget interrupts: cancelled, it takes no new step, lets the steps in
     * flight land and returns its cursor, so the workflow waits for that answer instead of abandoning the activity.
     */
    segments: heartbeating('WAIT_CANCELLATION_COMPLETED'),
    /**
     * Releasing the trainer and writing the report: retried long, since a trainer left running bills. They heartbeat
     * (keepingAlive), so a worker that dies in them is noticed after the heartbeat timeout, not the start-to-close.
     */
    cleanup: proxyActivities<Activities>({
      startToCloseTimeout: '2 minutes',
      heartbeatTimeout,
      retry: { initialInterval: '1 second', maximumInterval: '30 seconds', maximumAttempts: 30 },
    }),
  };
}

export type RoundActivities = ReturnType<typeof roundActivities>;
