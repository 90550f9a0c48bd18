import { joinLocation, readJson } from '../config/io/artifacts';
import { readRoundReport, type CheckpointEntry, type RoundReportFields } from '../config/io/round-report';

/**
 * Checkpoints as records: every checkpoint a round saved — rolling training checkpoints during training, the final
 * training checkpoint (what the next round continues from) and the sampler checkpoint — with its step, its provider
 * id and, for the final ones, the round's evaluation figures. Written into the round report (`checkpoints`), read
 * back by `roundhouse checkpoints` and the campaign summary (the best one).
 */
export type { CheckpointEntry };

/** What of a round report its checkpoints come from. */
type ReportFields = Pick<
  RoundReportFields,
  | 'round'
  | 'steps_applied'
  | 'accuracy'
  | 'trained_loss'
  | 'training_checkpoint_id'
  | 'sampler_checkpoint_id'
  | 'rolling_checkpoints'
  | 'evaluation_curve'
  | 'early_stop'
  | 'test'
>;

/**
 * A round report's checkpoints, rolling ones first, in step order. Also called on the report a round started by an
 * earlier version hands the report activity, which lacks the fields added since (hence the `??`).
 */
export function roundCheckpoints(report: ReportFields): CheckpointEntry[] {
  const round = report.round ?? 1;
  // A round stopped early finished from its best evaluated weights: its final checkpoints are that step's.
  const step = report.early_stop?.best_step ?? report.steps_applied ?? 0;
  const evaluated = {
    metric: report.accuracy ?? null,
    eval_loss: report.trained_loss ?? null,
    ...(report.test ? { test_metric: report.test.accuracy } : {}),
  };
  const out: CheckpointEntry[] = [];
  for (const c of report.rolling_checkpoints ?? []) {
    if (c.checkpoint_id === report.training_checkpoint_id) continue; // listed as the final one below
    // A checkpoint saved where an evaluation during training measured the weights carries its figures.
    const measured = report.evaluation_curve?.find((p) => p.step === c.step && (p.lineage ?? 0) === (c.lineage ?? 0));
    out.push({
      round,
      kind: 'training',
      checkpoint_id: c.checkpoint_id,
      step: c.step,
      ...(c.lineage ? { lineage: c.lineage } : {}),
      final: false,
      ...(measured ? { metric: measured.metric, eval_loss: measured.loss } : {}),
    });
  }
  out.sort((a, b) => a.step - b.step);
  if (report.training_checkpoint_id)
    out.push({ round, kind: 'training', checkpoint_id: report.training_checkpoint_id, step, final: true, ...evaluated });
  if (report.sampler_checkpoint_id)
    out.push({ round, kind: 'sampler', checkpoint_id: report.sampler_checkpoint_id, step, final: true, ...evaluated });
  return out;
}

/**
 * The campaign's best checkpoint: the final training checkpoint of the round with the highest metric (ties: the
 * lower eval loss, then the later round).
 */
export function bestCheckpoint(checkpoints: CheckpointEntry[]): CheckpointEntry | undefined {
  const candidates = checkpoints.filter((c) => c.final && c.kind === 'training' && typeof c.metric === 'number');
  return candidates.reduce<CheckpointEntry | undefined>((best, c) => {
    if (!best) return c;
    if (c.metric! !== best.metric!) return c.metric! > best.metric! ? c : best;
    const [cl, bl] = [c.eval_loss ?? Infinity, best.eval_loss ?? Infinity];
    if (cl !== bl) return cl < bl ? c : best;
    return c.round > best.round ? c : best;
  }, undefined);
}

/** Every checkpoint of a campaign, from its summary and round reports in the artifact store. */
export async function campaignCheckpoints(campaignDir: string): Promise<{ checkpoints: CheckpointEntry[]; best?: CheckpointEntry }> {
  const summaryFile = joinLocation(campaignDir, 'campaign.json');
  const summary = await readJson<{ rounds: { reportPath: string }[] }>(summaryFile);
  if (!summary) throw new Error(`${summaryFile}: no campaign summary (has a round finished yet?)`);
  const checkpoints: CheckpointEntry[] = [];
  for (const r of summary.rounds) {
    const report = await readRoundReport(r.reportPath);
    if (report) checkpoints.push(...(report.checkpoints ?? roundCheckpoints(report)));
  }
  return { checkpoints, best: bestCheckpoint(checkpoints) };
}
