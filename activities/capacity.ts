import type { Client } from '@temporalio/client';
import { log } from '@temporalio/activity';
import { ROUND_WAITING_SIGNAL, type ProvisioningWait } from '../config/rules/capacity';
import type { TrainerResource } from '../providers/types';

/** Position-only changes reach the round at most this often (each is a signal: history events on the round). */
const TELL_EVERY_MS = 5_000;

/**
 * Tells the round, while its provisioning waits for GPUs, that it waits and where it stands in the provider's
 * capacity queue; the round keeps it in its progress, so `status` and `watch` show it. Best effort: a signal that
 * cannot be sent changes nothing but what `status` shows.
 */
export class CapacityWatch {
  private told: ProvisioningWait | undefined;
  private toldAtMs = 0;
  private sending: Promise<void> = Promise.resolve();

  constructor(
    private readonly client: Client,
    private readonly workflow: { workflowId: string; runId?: string } | undefined,
    readonly sinceMs: number,
    /** Creates sent so far, including the one waited on now. */
    public creates: number,
  ) {}

  /** A poll that found the trainer not ready yet: waiting for capacity if the provider says it is queued. */
  note(resource: TrainerResource): void {
    const queued = resource.queuePosition !== undefined;
    if (!queued && this.creates <= 1) return this.clear();
    const wait: ProvisioningWait = {
      for: 'capacity',
      sinceMs: this.sinceMs,
      creates: this.creates,
      ...(queued ? { queuePosition: resource.queuePosition } : {}),
    };
    // A new create, or the first position heard for it (the retry announced the create before its position was known).
    const entering = this.told === undefined || this.told.creates !== wait.creates || (this.told.queuePosition === undefined && queued);
    const moved = this.told?.queuePosition !== wait.queuePosition;
    if (entering || (moved && Date.now() - this.toldAtMs >= TELL_EVERY_MS)) this.tell(wait);
  }

  /** Waiting again after the provider gave up on a create for want of capacity. */
  retrying(): void {
    this.creates += 1;
    this.tell({ for: 'capacity', sinceMs: this.sinceMs, creates: this.creates });
  }

  /** No longer waiting (ready, or given up). */
  clear(): void {
    if (this.told !== undefined) this.tell(undefined);
  }

  /** Waits for the signals sent so far (so a round never hears "waiting" after it heard the trainer is ready). */
  async flush(): Promise<void> {
    await this.sending;
  }

  private tell(wait: ProvisioningWait | undefined): void {
    this.told = wait;
    this.toldAtMs = Date.now();
    const workflow = this.workflow;
    if (!workflow) return;
    this.sending = this.sending.then(() =>
      this.client.workflow
        .getHandle(workflow.workflowId, workflow.runId)
        .signal(ROUND_WAITING_SIGNAL, wait ?? null)
        .catch((err: unknown) => log.debug('could not tell the round it waits for capacity', { error: String(err) })),
    );
  }
}
