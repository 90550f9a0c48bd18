import { Context, log } from '@temporalio/activity';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { noticeSkippedRuns } from './schedule-health';
import type { ProviderSpec } from '../config/io/spec';
import { abilitiesOf } from '../config/rules/dialects';
import { endpointOf, registeredTrainers, type RegisteredTrainer } from '../config/rules/trainer-registry';
import type { TrainerResource, TrainingProvider } from '../providers/types';
import type { ActivityDeps } from './deps';
import { atBoundary } from './failures';
import { recordResource } from './metrics';
import { ownerOfTag } from '../config/rules/owner-tag';

type Endpoint = Pick<ProviderSpec, 'kind' | 'baseUrl'> & { model?: string };

export interface ReaperInput {
  /** Endpoints to scan beyond those the rounds' own records name (each kind's default endpoint, a proxy...). */
  providers: Endpoint[];
  /** The untagged rule's age before `untaggedGraceMinutes` existed; read only when that is absent (with a 90-min floor). */
  graceSeconds: number;
  /** Report what would be reaped without deactivating anything. */
  dryRun?: boolean;
  /**
   * The explicit rule for resources no round records and no tag names (a Together resource created by a round that
   * was killed before it heard the id): reap them once older than `untaggedGraceMinutes` by the provider's own
   * creation time. Off by default except for the local emulator; a resource with no creation time is never reaped.
   */
  reapUntagged?: boolean;
  /** Default 90: beyond the default provisioning limit (60 min), so a create still waiting for capacity is never taken. */
  untaggedGraceMinutes?: number;
  /** How far back closed rounds' records are read (default 7 days). */
  lookbackHours?: number;
}

export interface ReapedResource {
  provider: string;
  resourceId: string;
  owner?: string;
  ownerStatus: string;
  /** Why it was reaped or kept, in words. */
  reason?: string;
  action: 'deactivated' | 'would-deactivate' | 'kept';
}

export interface ReaperResult {
  checked: number;
  reaped: ReapedResource[];
  kept: ReapedResource[];
  /** What this pass could not check (an endpoint down, a resource whose state or owner could not be read). */
  unchecked: { provider: string; resourceId?: string; error: string }[];
  /** The endpoints this pass covered. */
  endpoints: string[];
}

/** Statuses of a workflow that will never release anything again. Anything else (running, paused, unknown) is live. */
const CLOSED = new Set(['COMPLETED', 'FAILED', 'CANCELLED', 'TERMINATED', 'TIMED_OUT', 'CONTINUED_AS_NEW']);

/**
 * One reaper pass over the rounds of one task queue. The rounds' own records come first: every round lists the trainers it created and has not
 * released in its memo (config/trainer-registry.ts), read here through visibility. A running round's trainers are
 * never touched; a closed round's are released if still active, on the endpoint the round used. Then each endpoint
 * (configured, or named by a round) is listed, and a resource no round records is judged by its owner tag: reaped
 * when the owning workflow is closed, kept when it is live or not found in this namespace (reported), and untagged
 * resources only under the explicit rule (`reapUntagged`). Failures are isolated per endpoint and per resource and
 * reported in `unchecked`; one never stops the pass.
 */
export async function reapOrphans(
  deps: ActivityDeps,
  client: Client,
  input: ReaperInput,
  options: { taskQueue: string; onResource?: () => void },
): Promise<ReaperResult> {
  const onResource = options.onResource ?? (() => undefined);
  const result: ReaperResult = { checked: 0, reaped: [], kept: [], unchecked: [], endpoints: [] };
  const rounds = await roundRecords(client, options.taskQueue, input.lookbackHours ?? 24 * 7);
  const live = new Map(
    rounds.filter((r) => !CLOSED.has(r.status)).flatMap((r) => r.trainers.map((t) => [trainerKey(t), r.status] as const)),
  );
  const endpoints = new Map<string, Endpoint>();
  for (const spec of input.providers) endpoints.set(endpointOf(spec), spec);
  for (const r of rounds) for (const t of r.trainers) endpoints.set(endpointOf(t), { kind: t.kind, baseUrl: t.baseUrl });
  result.endpoints = [...endpoints.keys()];

  const providerOf = async (spec: Endpoint): Promise<TrainingProvider> =>
    deps.providerFor({ generatorReplicas: 1, inactiveTimeoutSeconds: 1800, model: '', ...spec } as ProviderSpec);
  const reap = async (provider: TrainingProvider, entry: ReapedResource) => {
    if (!input.dryRun) await provider.deactivate(entry.resourceId);
    entry.action = input.dryRun ? 'would-deactivate' : 'deactivated';
    result.reaped.push(entry);
  };

  // 1. Closed rounds' trainers, on the endpoints the rounds used.
  const handled = new Set<string>();
  for (const round of rounds.filter((r) => CLOSED.has(r.status))) {
    for (const trainer of round.trainers) {
      const key = trainerKey(trainer);
      if (live.has(key) || handled.has(key)) continue;
      handled.add(key);
      const label = endpointOf(trainer);
      try {
        onResource();
        const provider = await providerOf(trainer);
        const resource = await provider.getResource(trainer.resourceId);
        if (!isActive(resource)) continue;
        result.checked += 1;
        const entry = {
          provider: label,
          resourceId: trainer.resourceId,
          owner: round.workflowId,
          ownerStatus: round.status,
          action: 'kept' as const,
        };
        await reap(provider, { ...entry, reason: `its round is ${round.status.toLowerCase()} and never released it` });
      } catch (err) {
        result.unchecked.push({ provider: label, resourceId: trainer.resourceId, error: errorText(err) });
      }
    }
  }

  // 2. Every endpoint's active resources that no round records.
  for (const [label, spec] of endpoints) {
    let resources: TrainerResource[];
    let provider: TrainingProvider;
    try {
      provider = await providerOf(spec);
      resources = [...(await provider.listOwnedResources({ activeOnly: true })), ...((await provider.listStrayResources?.()) ?? [])];
    } catch (err) {
      result.unchecked.push({ provider: label, error: errorText(err) });
      continue;
    }
    for (const resource of resources) {
      const key = trainerKey({ ...spec, resourceId: resource.id });
      if (handled.has(key)) continue;
      handled.add(key);
      result.checked += 1;
      onResource();
      const entry: ReapedResource = { provider: label, resourceId: resource.id, ownerStatus: 'UNKNOWN', action: 'kept' };
      try {
        const liveStatus = live.get(key);
        if (liveStatus !== undefined) {
          result.kept.push({ ...entry, ownerStatus: liveStatus, reason: `a ${liveStatus.toLowerCase()} round records it` });
          continue;
        }
        // A Baseten run carries its tag; only an untagged resource needs its sessions listed (which calls the trainer).
        const tags =
          resource.ownerTag !== undefined
            ? [resource.ownerTag]
            : (await provider.listSessions(resource.id)).flatMap((s) => (s.displayName ? [s.displayName] : []));
        // A trainer shared by a sweep's arms has a session per arm: it is reaped only when every owner is closed.
        const owners = [...new Set(tags.map(ownerOfTag).filter((o): o is string => o !== undefined))];
        if (owners.length) {
          const statuses = await Promise.all(owners.map((o) => workflowStatus(client, o)));
          const open = statuses.findIndex((st) => !CLOSED.has(st));
          const owner = owners[open >= 0 ? open : 0]!;
          entry.owner = owner;
          entry.ownerStatus = statuses[open >= 0 ? open : 0]!;
          if (CLOSED.has(entry.ownerStatus)) await reap(provider, { ...entry, reason: `its owner is ${entry.ownerStatus.toLowerCase()}` });
          else
            result.kept.push({
              ...entry,
              reason:
                entry.ownerStatus === 'NOT_FOUND'
                  ? 'its owner is not a workflow of this namespace (another namespace, past retention, or a cut tag)'
                  : `its owner is ${entry.ownerStatus.toLowerCase()}`,
            });
          continue;
        }
        if (tags.length > 0) {
          result.kept.push({ ...entry, ownerStatus: 'NOT_ROUNDHOUSE', reason: 'tagged by something other than Roundhouse' });
          continue;
        }
        const graceMinutes = input.untaggedGraceMinutes ?? Math.max(90, input.graceSeconds / 60);
        const age = ageMinutes(resource);
        // Nothing but Roundhouse creates resources on the embedded emulator: an untagged one there is an orphan.
        const reapUntagged = input.reapUntagged ?? abilitiesOf(spec.kind).embedded;
        if (reapUntagged && age !== undefined && age >= graceMinutes)
          await reap(provider, {
            ...entry,
            reason: `untagged, no round records it, ${age.toFixed(0)} min old (rule: ≥ ${graceMinutes} min)`,
          });
        else
          result.kept.push({
            ...entry,
            reason: reapUntagged
              ? `untagged and no round records it; ${age === undefined ? 'no creation time' : `${age.toFixed(0)} min old`} (reaped at ${graceMinutes} min)`
              : 'untagged and no round records it (reported only: reapUntagged is off)',
          });
      } catch (err) {
        result.unchecked.push({ provider: label, resourceId: resource.id, error: errorText(err) });
      }
    }
  }
  return result;
}

export function createReaperActivities(deps: ActivityDeps) {
  return {
    async reapOrphans(input: ReaperInput): Promise<ReaperResult> {
      return atBoundary(async () => {
        const context = Context.current();
        const result = await reapOrphans(deps, context.client, input, {
          taskQueue: context.info.taskQueue,
          onResource: () => context.heartbeat(),
        });
        for (const entry of result.reaped) {
          log.warn('reaped an orphaned trainer', { ...entry });
          if (entry.action === 'deactivated') recordResource('reaped', { provider: entry.provider.split('@')[0]! });
        }
        for (const miss of result.unchecked) log.warn('the reaper could not check', { ...miss });
        return result;
      });
    },

    /** The deployment's campaign schedules: a run skipped because the last one still runs is told (`schedule.skipped`). */
    async noticeSkippedRuns(input: { taskQueue?: string }): Promise<string[]> {
      const context = Context.current();
      const started = await noticeSkippedRuns(context.client, input.taskQueue ?? context.info.taskQueue);
      for (const key of started) log.warn('a scheduled run was skipped: the last one still runs', { key });
      return started;
    },
  };
}

interface RoundRecord {
  workflowId: string;
  status: string;
  trainers: RegisteredTrainer[];
}

/**
 * The deployment's rounds and sweeps (its task queue: the reaper runs beside the rounds it looks after) that are open (running
 * or paused), or closed within the lookback, with the trainers their memo lists.
 */
async function roundRecords(client: Client, taskQueue: string, lookbackHours: number): Promise<RoundRecord[]> {
  const since = new Date(Date.now() - lookbackHours * 3_600_000).toISOString();
  // Open rounds by `CloseTime IS NULL`, not `ExecutionStatus = 'Running'`: a paused round (Temporal's PAUSED) is open too.
  // A sweep holds the trainers its arms share: its memo lists them as a round's does.
  const query = `(WorkflowType = 'roundWorkflow' OR WorkflowType = 'sweepWorkflow') AND TaskQueue = '${taskQueue.replace(/'/g, "''")}' AND (CloseTime IS NULL OR CloseTime > '${since}')`;
  const out: RoundRecord[] = [];
  for await (const w of client.workflow.list({ query })) {
    const trainers = registeredTrainers(w.memo);
    if (trainers.length) out.push({ workflowId: w.workflowId, status: w.status.name, trainers });
  }
  return out;
}

function trainerKey(t: Pick<RegisteredTrainer, 'kind' | 'baseUrl' | 'resourceId'>): string {
  return `${endpointOf(t)}#${t.resourceId}`;
}

function isActive(resource: TrainerResource): boolean {
  return resource.state === 'provisioning' || resource.state === 'ready';
}

/** Minutes since the provider created it, or undefined when it does not say (never taken as old). */
function ageMinutes(resource: TrainerResource): number | undefined {
  const created = Date.parse(resource.createdAt);
  return Number.isFinite(created) ? (Date.now() - created) / 60_000 : undefined;
}

function errorText(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).slice(0, 300);
}

async function workflowStatus(client: Client, workflowId: string): Promise<string> {
  try {
    return (await client.workflow.getHandle(workflowId).describe()).status.name;
  } catch (err) {
    // Only a workflow the server does not know is "not found"; any other error leaves the resource unchecked.
    if (err instanceof WorkflowNotFoundError) return 'NOT_FOUND';
    throw err;
  }
}

export type ReaperActivities = ReturnType<typeof createReaperActivities>;
