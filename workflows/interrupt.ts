import { CancellationScope, CancelledFailure, condition, isCancellation } from '@temporalio/workflow';

/**
 * Runs a segment that `stop()` may interrupt: when it turns true the segment's activity is cancelled; it drains and
 * returns its cursor (the result), or ends without one (undefined). A cancellation of the round itself is passed
 * on at once as a cancellation, without waiting for the segment (unless `drainOnCancel`).
 */
export async function untilInterrupted<T>(
  run: () => Promise<T>,
  stop: () => boolean,
  options: { drainOnCancel?: boolean } = {},
): Promise<T | undefined> {
  const scope = new CancellationScope();
  let settled = false;
  let interrupted = false;
  const running = scope.run(run);
  running.then(
    () => void (settled = true),
    () => void (settled = true),
  );
  condition(() => settled || stop()).then(
    () => {
      if (settled) return;
      interrupted = true;
      scope.cancel();
    },
    () => undefined, // the round itself was cancelled: its scope cancels the segment
  );
  try {
    // A cancellation of the round itself does not wait for the segment to drain: cleanup releases the trainer now.
    // Provisioning does wait (`drainOnCancel`): only its answer says which trainer it made, so cleanup can release it.
    return await (options.drainOnCancel ? running : Promise.race([running, CancellationScope.current().cancelRequested]));
  } catch (err) {
    if (CancellationScope.current().consideredCancelled)
      throw isCancellation(err) ? err : new CancelledFailure('round cancelled while its segment was stopping');
    if (interrupted) return undefined;
    throw err;
  }
}
