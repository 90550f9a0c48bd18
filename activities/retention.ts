import { ScheduleNotFoundError, type Client } from '@temporalio/client';
import { joinLocation } from '../config/io/artifacts';
import { checkpointRefsOf, retentionPlan, type KeepReason, type RetentionRule } from '../config/rules/retention';
import type { TrainingProvider } from '../providers/types';
import { campaignCheckpoints, type CheckpointEntry } from './checkpoints';
import { readJson, writeJsonAtomic } from './files';

/**
 * Checkpoint retention (`retention: { keepBest, keepLast }`): after each round, a campaign keeps the final checkpoints
 * of its best k and last n rounds and deletes the rest at the provider, where the provider has a delete call — never
 * one that an open workflow (its memo) or a schedule (its campaign's `rounds.startFrom`) starts from, nor the one the
 * campaign's next round continues from. What was kept, why, and what was deleted is written to `retention.json`.
 *
 * It fails closed: a reference scan that was truncated, failed, or does not list the workflow running the pass
 * (visibility behind) deletes nothing, and each delete waits for a fresh scan that still finds nothing starting from
 * that checkpoint.
 */
export interface RetentionReport {
  rule: RetentionRule;
  kept: (CheckpointEntry & { reasons: KeepReason[]; referenced_by?: string[] })[];
  /** Expendable by the rule: deleted at the provider, or listed here when it has no delete call. */
  expendable: (CheckpointEntry & { deleted: boolean })[];
  /** Whether the provider has a checkpoint delete call (Together's and Baseten's APIs have none). */
  provider_deletes: boolean;
  note?: string;
  /** What the pass's first reference scan read. */
  scan: { workflows: number; schedules: number };
  /** Why this pass deleted nothing, or stopped deleting: a scan that was truncated, failed or is behind. */
  held?: string;
}

/** An open workflow a reference scan must list — the campaign running the pass: one that does not is behind. */
export interface OpenWitness {
  workflowId: string;
  runId: string;
}

export interface ReferenceScanOptions {
  /** None known (an activity outside a workflow): the scan cannot show it is current, and vouches for nothing. */
  witness: OpenWitness | undefined;
  /** Past these counts the scan stops and reports itself truncated (defaults: 20,000 workflows, 1,000 schedules). */
  maxWorkflows?: number;
  maxSchedules?: number;
  /** Visibility page size (the server's default when unset). */
  pageSize?: number;
}

export interface ReferenceScan {
  /** Checkpoint id → who starts from it (`workflow <id>`, `schedule <id>`). */
  referencedBy: Map<string, string[]>;
  workflows: number;
  schedules: number;
  /** Why the scan cannot vouch that nothing else starts from a checkpoint: then nothing may be deleted. */
  incomplete?: string;
}

/**
 * Checkpoints that open workflows (by their memo) and schedules (by their campaign spec) start from, with who. Both
 * listings are paged through, each to its own bound; schedules are read whatever the workflows' count.
 */
export async function referencedCheckpoints(client: Client, options: ReferenceScanOptions): Promise<ReferenceScan> {
  const { witness, maxWorkflows = 20_000, maxSchedules = 1_000, pageSize } = options;
  const scan: ReferenceScan = { referencedBy: new Map(), workflows: 0, schedules: 0 };
  const add = (id: string | undefined, by: string) => {
    if (id) scan.referencedBy.set(id, [...(scan.referencedBy.get(id) ?? []), by]);
  };
  const problems: string[] = [];
  try {
    let witnessed = false;
    let truncated = false;
    for await (const w of client.workflow.list({ query: 'CloseTime IS NULL', pageSize })) {
      if (scan.workflows === maxWorkflows) {
        truncated = true;
        break;
      }
      scan.workflows++;
      if (w.workflowId === witness?.workflowId && w.runId === witness.runId) witnessed = true;
      for (const id of checkpointRefsOf(w.memo)) add(id, `workflow ${w.workflowId}`);
    }
    if (truncated) problems.push(`the workflow scan was truncated at ${maxWorkflows} open workflows`);
    else if (!witness) problems.push('no workflow known to be open to check visibility against');
    else if (!witnessed)
      problems.push(
        `visibility is behind: open workflow ${witness.workflowId} (run ${witness.runId}), which runs this pass, is not listed`,
      );
  } catch (err) {
    problems.push(`open workflows could not be listed: ${messageOf(err)}`);
  }
  try {
    for await (const s of client.schedule.list({ pageSize })) {
      if (scan.schedules === maxSchedules) {
        problems.push(`the schedule scan was truncated at ${maxSchedules} schedules`);
        break;
      }
      scan.schedules++;
      add(await scheduledStartFrom(client, s.scheduleId), `schedule ${s.scheduleId}`);
    }
  } catch (err) {
    problems.push(`schedules could not be read: ${messageOf(err)}`);
  }
  return problems.length ? { ...scan, incomplete: problems.join('; ') } : scan;
}

/** The checkpoint a schedule's campaign starts from (none for a schedule deleted since it was listed). */
async function scheduledStartFrom(client: Client, scheduleId: string): Promise<string | undefined> {
  try {
    const described = await client.schedule.getHandle(scheduleId).describe();
    if (described.action.type !== 'startWorkflow') return undefined;
    const input = described.action.args?.[0] as { spec?: { rounds?: { startFrom?: { checkpointId?: string } } } } | undefined;
    return input?.spec?.rounds?.startFrom?.checkpointId;
  } catch (err) {
    if (err instanceof ScheduleNotFoundError) return undefined;
    throw err;
  }
}

const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** Plans retention for a campaign's checkpoints now, deletes the expendable where the provider can, and records it. */
export async function applyRetention(options: {
  campaignDir: string;
  rule: RetentionRule;
  client: Client;
  /** The open workflow running the pass (the campaign): every scan must list it. */
  witness: OpenWitness | undefined;
  /** Scan bounds and page size (the defaults unless set). */
  scan?: Omit<ReferenceScanOptions, 'witness'>;
  /** Checkpoints the campaign itself still needs (its `rounds.startFrom`, what its next round continues from). */
  own: (string | undefined)[];
  provider?: TrainingProvider;
  /** Plan and record only. */
  dryRun?: boolean;
}): Promise<RetentionReport> {
  const { checkpoints } = await campaignCheckpoints(options.campaignDir);
  const scanOptions = { ...options.scan, witness: options.witness };
  const first = await referencedCheckpoints(options.client, scanOptions);
  const referencedBy = first.referencedBy;
  for (const id of options.own) if (id) referencedBy.set(id, [...(referencedBy.get(id) ?? []), 'this campaign']);
  const plan = retentionPlan(checkpoints, options.rule, new Set(referencedBy.keys()));
  const file = joinLocation(options.campaignDir, 'retention.json');
  const before = await readJson<RetentionReport>(file);
  const deletedBefore = new Set((before?.expendable ?? []).filter((c) => c.deleted).map((c) => c.checkpoint_id));
  const deletes = options.provider?.deleteCheckpoint?.bind(options.provider);
  const kept: RetentionReport['kept'] = plan.keep.map((c) =>
    referencedBy.has(c.checkpoint_id) ? { ...c, referenced_by: referencedBy.get(c.checkpoint_id) } : c,
  );
  const expendable: RetentionReport['expendable'] = [];
  let held = first.incomplete && `nothing deleted: ${first.incomplete}`;
  for (const c of plan.expendable) {
    let deleted = deletedBefore.has(c.checkpoint_id);
    if (!deleted && deletes && !options.dryRun && !held) {
      // Something may have started from it since the first scan: a fresh one, right before the delete, decides.
      const now = await referencedCheckpoints(options.client, scanOptions);
      const by = now.referencedBy.get(c.checkpoint_id);
      if (now.incomplete) held = `deleting stopped before ${c.checkpoint_id}: ${now.incomplete}`;
      else if (by) {
        kept.push({ ...c, reasons: ['referenced'], referenced_by: by });
        continue;
      } else {
        await deletes(c.checkpoint_id);
        deleted = true;
      }
    }
    expendable.push({ ...c, deleted });
  }
  const report: RetentionReport = {
    rule: options.rule,
    kept,
    expendable,
    provider_deletes: Boolean(deletes),
    ...(deletes
      ? {}
      : {
          note: `${options.provider?.kind ?? 'the provider'} has no checkpoint delete call: the expendable checkpoints are listed, not deleted`,
        }),
    scan: { workflows: first.workflows, schedules: first.schedules },
    ...(held ? { held } : {}),
  };
  if (!options.dryRun) await writeJsonAtomic(file, report);
  return report;
}
