import { Context, log } from '@temporalio/activity';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { ProviderSpec } from '../config/spec';
import type { TrainerResource } from '../providers/types';
import type { ActivityDeps } from './deps';
import { atBoundary } from './failures';
import { recordResource } from './metrics';
import { ownerOfTag } from '../config/owner-tag';

export interface ReaperInput {
  providers: Pick<ProviderSpec, 'kind' | 'baseUrl' | 'model'>[];
  /**
   * An untagged resource younger than this is left alone, so one being provisioned (its owner not yet known) is
   * never reaped. A tagged one is reaped as soon as its owner is closed: nothing else will release it.
   */
  graceSeconds: number;
  /** Report what would be reaped without deactivating anything. */
  dryRun?: boolean;
  /**
   * Also reap resources with no Roundhouse tag (a Together resource whose session was never opened). Safe on a
   * provider account only Roundhouse uses; the default is to do so for the local emulator only.
   */
  reapUntagged?: boolean;
}

export interface ReapedResource {
  provider: string;
  resourceId: string;
  owner?: string;
  ownerStatus: string;
  action: 'deactivated' | 'would-deactivate' | 'kept';
}

export interface ReaperResult {
  checked: number;
  reaped: ReapedResource[];
  kept: ReapedResource[];
}

/**
 * Lists every active resource at each provider, finds its owning workflow from its tag (the resource's own tag, or
 * the display name of its sessions), and deactivates it when the owner is closed, or when it has no owner and is
 * older than the grace period. Termination and timeouts run no workflow code; this is what cleans up after them.
 */
export async function reapOrphans(
  deps: ActivityDeps,
  client: Client,
  input: ReaperInput,
  onResource: () => void = () => {},
): Promise<ReaperResult> {
  const result: ReaperResult = { checked: 0, reaped: [], kept: [] };
  for (const spec of input.providers) {
    const provider = await deps.providerFor({ generatorReplicas: 1, inactiveTimeoutSeconds: 1800, ...spec } as ProviderSpec);
    const label = `${spec.kind}${spec.baseUrl ? `@${spec.baseUrl}` : ''}`;
    for (const resource of await provider.listOwnedResources({ activeOnly: true })) {
      result.checked += 1;
      onResource();
      const tags = [resource.ownerTag, ...(await provider.listSessions(resource.id)).map((s) => s.displayName)];
      const owner = tags.map(ownerOfTag).find((o) => o !== undefined);
      const untagged = tags.every((t) => t === undefined);
      const ownerStatus = owner ? await workflowStatus(client, owner) : untagged ? 'UNKNOWN' : 'NOT_ROUNDHOUSE';
      const entry: ReapedResource = { provider: label, resourceId: resource.id, owner, ownerStatus, action: 'kept' };
      const reapUntagged = input.reapUntagged ?? spec.kind === 'local';
      const orphan = owner ? ownerStatus !== 'RUNNING' : untagged && reapUntagged;
      if (!orphan || (!owner && ageSeconds(resource) < input.graceSeconds)) {
        result.kept.push(entry);
        continue;
      }
      if (!input.dryRun) await provider.deactivate(resource.id);
      entry.action = input.dryRun ? 'would-deactivate' : 'deactivated';
      result.reaped.push(entry);
    }
  }
  return result;
}

export function createReaperActivities(deps: ActivityDeps) {
  return {
    async reapOrphans(input: ReaperInput): Promise<ReaperResult> {
      return atBoundary(async () => {
        const result = await reapOrphans(deps, Context.current().client, input, () => Context.current().heartbeat());
        for (const entry of result.reaped) {
          log.warn('reaped an orphaned trainer', { ...entry });
          if (entry.action === 'deactivated') recordResource('reaped', { provider: entry.provider.split('@')[0]! });
        }
        return result;
      });
    },
  };
}

function ageSeconds(resource: TrainerResource): number {
  const created = Date.parse(resource.createdAt);
  return Number.isFinite(created) ? (Date.now() - created) / 1000 : Infinity;
}

async function workflowStatus(client: Client, workflowId: string): Promise<string> {
  try {
    return (await client.workflow.getHandle(workflowId).describe()).status.name;
  } catch (err) {
    // Only a workflow the server does not know is gone; any other error is retried, never taken as "closed".
    if (err instanceof WorkflowNotFoundError) return 'NOT_FOUND';
    throw err;
  }
}

export type ReaperActivities = ReturnType<typeof createReaperActivities>;
