import { ParentClosePolicy, condition, log, startChild } from '@temporalio/workflow';
import type { CampaignSpec, NotifyEvent } from '../../config/io/spec';
import type { ProvisioningWait } from '../../config/rules/capacity';
import type { CampaignProgress, CampaignResult } from './contract';
import { failureReasonOf, isCancellation } from '../failures';
import { notifyWorkflow } from '../notify';
import { DEFAULT_WEBHOOK_SECRET_ENV } from '../../config/rules/preflight';

/**
 * A campaign's notifications (`notify`): its end, its promotion, a round waiting long for capacity. Each is a workflow
 * of its own (workflows/notify.ts), started and abandoned, so a dead endpoint neither holds nor fails the campaign.
 */
export class CampaignNotifier {
  constructor(
    readonly campaignId: string,
    private readonly spec: CampaignSpec,
  ) {}

  /**
   * A notification (`notify`), when the spec asks for this event: started as a workflow of its own under the id
   * `notify:<campaign>/<event>` (also its idempotency key), abandoned by the campaign, so its retries neither hold nor
   * fail it. Starting it cannot fail the campaign either.
   */
  async notify(type: NotifyEvent, text: string, data: Record<string, unknown> = {}, suffix?: string): Promise<void> {
    const n = this.spec.notify;
    if (!n || !n.events.includes(type)) return;
    const key = `${this.campaignId}/${type}${suffix ? `/${suffix}` : ''}`;
    try {
      await startChild(notifyWorkflow, {
        workflowId: `notify:${key}`,
        args: [
          {
            key,
            type,
            campaignId: this.campaignId,
            atMs: Date.now(),
            text,
            data,
            target: {
              ...(n.webhook ? { webhook: n.webhook } : {}),
              ...(n.webhookEnv ? { webhookEnv: n.webhookEnv } : {}),
              format: n.format,
              secretEnv: n.secretEnv ?? DEFAULT_WEBHOOK_SECRET_ENV,
            },
          },
        ],
        parentClosePolicy: ParentClosePolicy.ABANDON,
      });
    } catch (err) {
      if (isCancellation(err)) throw err;
      log.warn('a notification could not be started', { type, error: failureReasonOf(err) });
    }
  }

  /**
   * `capacity.waiting`: while the round waits for the provider's capacity (its progress says since when), told once
   * the wait passes `notify.capacityWaitMinutes`. Only with that event asked for (nothing is timed otherwise).
   */
  async watchCapacity(round: number, over: () => boolean, waiting: () => ProvisioningWait | undefined): Promise<void> {
    const n = this.spec.notify;
    if (!n?.events.includes('capacity.waiting')) return;
    const threshold = n.capacityWaitMinutes * 60_000;
    while (!over()) {
      await condition(() => over() || waiting() !== undefined);
      if (over()) return;
      const wait = waiting()!;
      const left = wait.sinceMs + threshold - Date.now();
      if (left <= 0) {
        const minutes = ((Date.now() - wait.sinceMs) / 60_000).toFixed(1);
        await this.notify(
          'capacity.waiting',
          `Roundhouse campaign ${this.campaignId}: round ${round} has waited ${minutes} min for ${this.spec.provider.kind}'s capacity (${this.spec.provider.model}${wait.queuePosition !== undefined ? `, queue position ${wait.queuePosition}` : ''}, ${wait.creates} create(s))`,
          { round, waiting: wait, provider: this.spec.provider.kind, model: this.spec.provider.model },
          `r${round}`,
        );
        return;
      }
      await condition(() => over() || waiting()?.sinceMs !== wait.sinceMs, left);
    }
  }

  /** The campaign's own failure (it threw: a data policy, its promotion, a summary write), told before it fails. */
  async failed(error: string, progress: CampaignProgress): Promise<void> {
    await this.notify('campaign.failed', `Roundhouse campaign ${this.campaignId} failed: ${error}`, {
      status: 'failed',
      error,
      rounds: progress.rounds.length,
      best: progress.best ?? null,
      gpuMinutes: progress.gpuMinutes,
      summaryPath: progress.summaryPath,
    });
  }

  /** The campaign's own end, told: completed, failed, or stopped (by a limit or a request). */
  async end(final: CampaignResult): Promise<void> {
    const type = final.status === 'completed' ? 'campaign.completed' : final.status === 'failed' ? 'campaign.failed' : 'campaign.stopped';
    const best = final.best
      ? `; best round ${final.best.round}, accuracy ${(final.best.accuracy * 100).toFixed(1)}%${final.best.test ? ` (held-out test ${(final.best.test.accuracy * 100).toFixed(1)}%)` : ''}`
      : '';
    await this.notify(
      type,
      `Roundhouse campaign ${this.campaignId} ${final.status}${final.stopReason ? ` (${final.stopReason})` : ''}: ${final.rounds.length} round(s)${best}, ${final.gpuMinutes.toFixed(2)} GPU-min`,
      {
        status: final.status,
        stopReason: final.stopReason ?? null,
        rounds: final.rounds.length,
        best: final.best ?? null,
        gpuMinutes: final.gpuMinutes,
        summaryPath: final.summaryPath,
      },
    );
  }
}
