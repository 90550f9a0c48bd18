/**
 * Heartbeats per second that the long-running activities of one worker process (training segments, provisioning)
 * send together, at most. Each heartbeat is a server request (a billed action on Temporal Cloud), and they share a
 * worker: one activity alone may send one every 10 ms, 100 running one a second each, 1,000 one every 10 s each, so
 * the server's heartbeat load per worker stays flat however many rounds it holds. Never wider than a third of the
 * heartbeat timeout, so no activity is timed out for it. The SDK's throttle (maxHeartbeatThrottleInterval) applies on
 * top.
 */
export const HEARTBEATS_PER_SECOND = 100;

let running = 0;

/** Counts an activity in the budget until the returned function is called. */
export function joinHeartbeatBudget(): () => void {
  running += 1;
  let left = false;
  return () => {
    if (!left) running -= 1;
    left = true;
  };
}

/** The least time between two heartbeats of one activity now. */
export function heartbeatGapMs(heartbeatTimeoutMs: number | undefined): number {
  return Math.min((heartbeatTimeoutMs ?? 30_000) / 3, (running * 1000) / HEARTBEATS_PER_SECOND);
}
