// Pure (no Temporal, no Node): what a round's provisioning waits for, shared by the activity that tells it, the round
// workflow that keeps it in its progress, and the CLI that shows it.

/** The signal the provisioning activity sends its round while (and when no longer) waiting for GPUs. */
export const ROUND_WAITING_SIGNAL = 'roundWaiting';

/** A provisioning that waits for the provider's GPUs. */
export interface ProvisioningWait {
  for: 'capacity';
  /** When the first create of this provisioning was sent (ms since epoch). */
  sinceMs: number;
  /** Creates sent so far (each after the provider gave up on the one before for want of capacity). */
  creates: number;
  /** The create's place in the provider's capacity queue (1 = next), where the provider tells it. */
  queuePosition?: number;
}

/** "waiting for capacity (queue position 3), 4.5 min, 2nd create": what `status` and `watch` print. */
export function describeWait(wait: ProvisioningWait, nowMs: number): string {
  const position = wait.queuePosition !== undefined ? ` (queue position ${wait.queuePosition})` : '';
  const minutes = (Math.max(0, nowMs - wait.sinceMs) / 60_000).toFixed(1);
  return `waiting for capacity${position}, ${minutes} min${wait.creates > 1 ? `, create ${wait.creates}` : ''}`;
}
