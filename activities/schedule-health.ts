import { WorkflowExecutionAlreadyStartedError, WorkflowIdReusePolicy, type Client } from '@temporalio/client';
import { readChampion } from './promotion';
import type { CampaignInput } from '../workflows/campaign/contract';
import type { NotificationInput } from '../workflows/notify-contract';
import { DEFAULT_WEBHOOK_SECRET_ENV } from '../config/rules/preflight';

/**
 * Scheduled retraining, looked at from outside: per campaign schedule, its last run and how that run ended, the
 * runs it skipped because the previous one still ran (overlap SKIP: one stuck run blocks the schedule), and its
 * model line's champion (`promotion.line`) with when it last changed.
 */
export interface ScheduleHealth {
  scheduleId: string;
  paused: boolean;
  taskQueue?: string;
  next?: string;
  lastRun?: { workflowId: string; scheduledAt: string; status: string };
  running: string[];
  skipped: number;
  line?: { name: string; champion?: { checkpointId: string; campaignId: string; round: number; promotedAt: string; changes: number } };
}

/** Every schedule that starts campaigns (of one task queue, when given), with its health. */
export async function campaignSchedules(client: Client, taskQueue?: string): Promise<{ health: ScheduleHealth; input: CampaignInput }[]> {
  const out: { health: ScheduleHealth; input: CampaignInput }[] = [];
  for await (const summary of client.schedule.list()) {
    if (summary.action?.workflowType !== 'campaignWorkflow') continue;
    const d = await client.schedule.getHandle(summary.scheduleId).describe();
    if (d.action.type !== 'startWorkflow' || (taskQueue && d.action.taskQueue !== taskQueue)) continue;
    const input = d.action.args?.[0] as CampaignInput | undefined;
    if (!input?.spec) continue;
    const last = d.info.recentActions.at(-1);
    let status = 'unknown';
    if (last)
      status = await client.workflow
        .getHandle(last.action.workflow.workflowId)
        .describe()
        .then((w) => w.status.name.toLowerCase())
        .catch(() => 'unknown');
    const line = input.spec.promotion?.line;
    const champion = line ? (await readChampion(input.reportRoot, line).catch(() => undefined))?.record : undefined;
    out.push({
      input,
      health: {
        scheduleId: summary.scheduleId,
        paused: d.state.paused,
        taskQueue: d.action.taskQueue,
        ...(d.info.nextActionTimes[0] ? { next: d.info.nextActionTimes[0].toISOString() } : {}),
        ...(last ? { lastRun: { workflowId: last.action.workflow.workflowId, scheduledAt: last.scheduledAt.toISOString(), status } } : {}),
        running: d.info.runningActions.map((a) => a.workflow.workflowId),
        skipped: d.info.numActionsSkippedOverlap,
        ...(line
          ? {
              line: {
                name: line,
                ...(champion
                  ? {
                      champion: {
                        checkpointId: champion.checkpointId,
                        campaignId: champion.campaignId,
                        round: champion.round,
                        promotedAt: champion.promotedAt,
                        changes: champion.history.length,
                      },
                    }
                  : {}),
              },
            }
          : {}),
      },
    });
  }
  return out;
}

/**
 * `schedule.skipped` notifications: for each campaign schedule of the task queue whose spec asks for them, one per
 * skip count (`<schedule>/schedule.skipped/<n>`: the notification workflow's id, so a count is told once however
 * many passes see it). Returns the keys started now.
 */
export async function noticeSkippedRuns(client: Client, taskQueue: string): Promise<string[]> {
  const started: string[] = [];
  for (const { health, input } of await campaignSchedules(client, taskQueue)) {
    const n = input.spec.notify;
    if (!n || !n.events.includes('schedule.skipped') || health.skipped === 0) continue;
    const key = `${health.scheduleId}/schedule.skipped/${health.skipped}`;
    const notification: NotificationInput = {
      key,
      type: 'schedule.skipped',
      campaignId: health.running[0] ?? health.lastRun?.workflowId ?? health.scheduleId,
      atMs: Date.now(),
      text: `Roundhouse schedule ${health.scheduleId} skipped a run (${health.skipped} so far) because the last one still runs: ${health.running.join(', ') || health.lastRun?.workflowId || '?'}`,
      data: { scheduleId: health.scheduleId, skipped: health.skipped, running: health.running, lastRun: health.lastRun ?? null },
      target: {
        ...(n.webhook ? { webhook: n.webhook } : {}),
        ...(n.webhookEnv ? { webhookEnv: n.webhookEnv } : {}),
        format: n.format,
        secretEnv: n.secretEnv ?? DEFAULT_WEBHOOK_SECRET_ENV,
      },
    };
    try {
      // Never again under this id, even once the first has closed: one notification per skip count.
      await client.workflow.start('notifyWorkflow', {
        workflowId: `notify:${key}`,
        taskQueue,
        args: [notification],
        workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
      });
      started.push(key);
    } catch (err) {
      if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
    }
  }
  return started;
}
