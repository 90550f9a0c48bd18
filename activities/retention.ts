import type { Client } from '@temporalio/client';
import { joinLocation } from '../config/artifacts';
import { checkpointRefsOf, retentionPlan, type KeepReason, type RetentionRule } from '../config/retention';
import type { TrainingProvider } from '../providers/types';
import { campaignCheckpoints, type CheckpointEntry } from './checkpoints';
import { readJson, writeJsonAtomic } from './files';

/**
 * Checkpoint retention (`retention: { keepBest, keepLast }`): after each round, a campaign keeps the final checkpoints
 * of its best k and last n rounds and deletes the rest at the provider, where the provider has a delete call — never
 * one that an open workflow (its memo) or a schedule (its campaign's `rounds.startFrom`) starts from, nor the one the
 * campaign's next round continues from. What was kept, why, and what was deleted is written to `retention.json`.
 */
export interface RetentionReport {
  rule: RetentionRule;
  kept: (CheckpointEntry & { reasons: KeepReason[]; referenced_by?: string[] })[];
  /** Expendable by the rule: deleted at the provider, or listed here when it has no delete call. */
  expendable: (CheckpointEntry & { deleted: boolean })[];
  /** Whether the provider has a checkpoint delete call (Together's and Baseten's APIs have none). */
  provider_deletes: boolean;
  note?: string;
}

/** Checkpoints that open workflows (by their memo) and schedules (by their campaign spec) start from, with who. */
export async function referencedCheckpoints(client: Client, limit = 10_000): Promise<Map<string, string[]>> {
  const refs = new Map<string, string[]>();
  const add = (id: string | undefined, by: string) => {
    if (id) refs.set(id, [...(refs.get(id) ?? []), by]);
  };
  let seen = 0;
  for await (const w of client.workflow.list({ query: 'CloseTime IS NULL' })) {
    for (const id of checkpointRefsOf(w.memo)) add(id, `workflow ${w.workflowId}`);
    if (++seen >= limit) break;
  }
  for await (const s of client.schedule.list()) {
    const described = await client.schedule.getHandle(s.scheduleId).describe();
    if (described.action.type !== 'startWorkflow') continue;
    const input = described.action.args?.[0] as { spec?: { rounds?: { startFrom?: { checkpointId?: string } } } } | undefined;
    add(input?.spec?.rounds?.startFrom?.checkpointId, `schedule ${s.scheduleId}`);
    if (++seen >= limit) break;
  }
  return refs;
}

/** Plans retention for a campaign's checkpoints now, deletes the expendable where the provider can, and records it. */
export async function applyRetention(options: {
  campaignDir: string;
  rule: RetentionRule;
  client: Client;
  /** Checkpoints the campaign itself still needs (its `rounds.startFrom`, what its next round continues from). */
  own: (string | undefined)[];
  provider?: TrainingProvider;
  /** Plan and record only. */
  dryRun?: boolean;
}): Promise<RetentionReport> {
  const { checkpoints } = await campaignCheckpoints(options.campaignDir);
  const referencedBy = await referencedCheckpoints(options.client);
  for (const id of options.own) if (id) referencedBy.set(id, [...(referencedBy.get(id) ?? []), 'this campaign']);
  const plan = retentionPlan(checkpoints, options.rule, new Set(referencedBy.keys()));
  const file = joinLocation(options.campaignDir, 'retention.json');
  const before = await readJson<RetentionReport>(file);
  const deletedBefore = new Set((before?.expendable ?? []).filter((c) => c.deleted).map((c) => c.checkpoint_id));
  const deletes = options.provider?.deleteCheckpoint?.bind(options.provider);
  const expendable: RetentionReport['expendable'] = [];
  for (const c of plan.expendable) {
    let deleted = deletedBefore.has(c.checkpoint_id);
    if (!deleted && deletes && !options.dryRun) {
      await deletes(c.checkpoint_id);
      deleted = true;
    }
    expendable.push({ ...c, deleted });
  }
  const report: RetentionReport = {
    rule: options.rule,
    kept: plan.keep.map((c) => (referencedBy.has(c.checkpoint_id) ? { ...c, referenced_by: referencedBy.get(c.checkpoint_id) } : c)),
    expendable,
    provider_deletes: Boolean(deletes),
    ...(deletes
      ? {}
      : {
          note: `${options.provider?.kind ?? 'the provider'} has no checkpoint delete call: the expendable checkpoints are listed, not deleted`,
        }),
  };
  if (!options.dryRun) await writeJsonAtomic(file, report);
  return report;
}
