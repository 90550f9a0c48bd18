import { ScheduleNotFoundError, ScheduleOverlapPolicy, type Client, type ScheduleHandle } from '@temporalio/client';
import type { Duration } from '@temporalio/common';
import type { CampaignSpec, ProviderSpec } from '../config/io/spec';
import type { ReaperInput } from '../activities/reaper';
import type { CampaignInput } from '../workflows/campaign/contract';
import { campaignWorkflow, reaperWorkflow } from '../workflows';

export { campaignSchedules, type ScheduleHealth } from '../activities/schedule-health';

export type OverlapName = 'skip' | 'buffer-one' | 'buffer-all' | 'cancel-other' | 'allow-all';

const OVERLAP: Record<OverlapName, ScheduleOverlapPolicy> = {
  skip: ScheduleOverlapPolicy.SKIP,
  'buffer-one': ScheduleOverlapPolicy.BUFFER_ONE,
  'buffer-all': ScheduleOverlapPolicy.BUFFER_ALL,
  'cancel-other': ScheduleOverlapPolicy.CANCEL_OTHER,
  'allow-all': ScheduleOverlapPolicy.ALLOW_ALL,
};

export interface CampaignScheduleOptions {
  scheduleId: string;
  spec: CampaignSpec;
  taskQueue: string;
  reportRoot: string;
  /** An interval like '1h' or '30 minutes'… */
  every?: string;
  /** …or cron expressions. */
  cron?: string[];
  /** SKIP by default: a retraining run never starts while the previous one is still running. */
  overlap?: OverlapName;
  note?: string;
}

/**
 * Scheduled retraining: a Temporal Schedule that starts `campaignWorkflow` from a spec. Each run's workflow id is
 * the schedule's id plus the scheduled time, and the campaign id defaults to it, so every run is a distinct campaign.
 */
export async function upsertCampaignSchedule(client: Client, options: CampaignScheduleOptions): Promise<ScheduleHandle> {
  if (!options.every && !options.cron?.length) throw new Error('a schedule needs --every or --cron');
  const input: CampaignInput = { spec: options.spec, reportRoot: options.reportRoot };
  const scheduleSpec = { intervals: options.every ? [{ every: options.every as Duration }] : undefined, cronExpressions: options.cron };
  const action = {
    type: 'startWorkflow' as const,
    workflowType: campaignWorkflow,
    args: [input] as [CampaignInput],
    taskQueue: options.taskQueue,
    workflowId: options.scheduleId,
  };
  const policies = { overlap: OVERLAP[options.overlap ?? 'skip'] };
  const handle = client.schedule.getHandle(options.scheduleId);
  try {
    await handle.describe();
    await handle.update((previous) => ({ ...previous, spec: scheduleSpec, action, policies: { ...previous.policies, ...policies } }));
    return handle;
  } catch (err) {
    if (!(err instanceof ScheduleNotFoundError)) throw err;
  }
  return client.schedule.create({
    scheduleId: options.scheduleId,
    spec: scheduleSpec,
    action,
    policies,
    state: { note: options.note ?? `roundhouse campaign ${options.spec.name}` },
  });
}

export const REAPER_SCHEDULE_ID = 'roundhouse-reaper';

/** One reaper schedule per deployment (task queue): the default queue's keeps its original id. */
export function reaperScheduleId(taskQueue: string): string {
  return taskQueue === 'roundhouse' ? REAPER_SCHEDULE_ID : `${REAPER_SCHEDULE_ID}-${taskQueue}`;
}

/**
 * The reaper's schedule (default every minute, SKIP overlaps), created or brought up to date. The endpoints given
 * are merged with those the schedule already scans (each worker adds its own, none removes another's); the
 * endpoints rounds used are read from the rounds themselves on every pass.
 */
export async function ensureReaperSchedule(
  client: Client,
  options: {
    taskQueue: string;
    providers: Pick<ProviderSpec, 'kind' | 'baseUrl' | 'model'>[];
    every?: string;
    graceSeconds?: number;
    reapUntagged?: boolean;
    scheduleId?: string;
  },
): Promise<ScheduleHandle> {
  const scheduleId = options.scheduleId ?? reaperScheduleId(options.taskQueue);
  const inputWith = (earlier: ReaperInput | undefined): ReaperInput => {
    const providers = new Map<string, ReaperInput['providers'][number]>();
    for (const p of [...(earlier?.providers ?? []), ...options.providers]) providers.set(`${p.kind}@${p.baseUrl ?? ''}`, p);
    return {
      ...earlier,
      providers: [...providers.values()],
      graceSeconds: options.graceSeconds ?? earlier?.graceSeconds ?? 300,
      ...(options.reapUntagged !== undefined ? { reapUntagged: options.reapUntagged } : {}),
    };
  };
  const scheduleSpec = { intervals: [{ every: (options.every ?? '1 minute') as Duration }] };
  const action = (input: ReaperInput) => ({
    type: 'startWorkflow' as const,
    workflowType: reaperWorkflow,
    args: [input] as [ReaperInput],
    taskQueue: options.taskQueue,
    workflowId: scheduleId,
  });
  const handle = client.schedule.getHandle(scheduleId);
  try {
    await handle.describe();
    await handle.update((previous) => {
      const earlier = previous.action.type === 'startWorkflow' ? (previous.action.args?.[0] as ReaperInput | undefined) : undefined;
      return { ...previous, spec: scheduleSpec, action: action(inputWith(earlier)) };
    });
    return handle;
  } catch (err) {
    if (!(err instanceof ScheduleNotFoundError)) throw err;
  }
  return client.schedule.create({
    scheduleId,
    spec: scheduleSpec,
    action: action(inputWith(undefined)),
    policies: { overlap: ScheduleOverlapPolicy.SKIP },
    state: { note: 'roundhouse reaper' },
  });
}
