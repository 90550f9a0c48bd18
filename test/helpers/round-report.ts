import fs from 'node:fs';
import path from 'node:path';
import { RoundReportSchema, type RoundReport } from '../../config/io/round-report';
import type { CampaignProgress, RoundSummary } from '../../workflows/campaign/contract';

/**
 * A round report as the report activity writes it: a completed SFT round of the tiny chat model (no evaluations, no
 * step records), with `fields` set over it.
 */
export function roundReportOf(fields: Partial<RoundReport> & { campaign_id: string; round: number }): RoundReport {
  const name = `${fields.campaign_id}-round-${fields.round}`;
  return RoundReportSchema.parse({
    name,
    workflow_id: name,
    run_id: 'run-1',
    provider: 'local',
    base_model: 'roundhouse/tiny-chat',
    resource_id: null,
    session_id: null,
    train_path: 'train.jsonl',
    eval_path: 'eval.jsonl',
    train_sha256: 'ab'.repeat(32),
    eval_sha256: 'cd'.repeat(32),
    started_from_checkpoint: null,
    baseline_loss: 2,
    trained_loss: 1,
    loss_unit: 'sum',
    accuracy: null,
    training_checkpoint_id: null,
    sampler_checkpoint_id: null,
    steps_applied: 4,
    steps_planned: 4,
    gpu_minutes: 0.1,
    estimated_cost_usd: null,
    status: 'completed',
    error_type: null,
    error_message: null,
    cleanup_status: 'deactivated',
    deactivated_ids: [],
    evaluations: [],
    steps: [],
    ...fields,
  });
}

/** campaign.json of a completed two-round campaign in `dir`, as the campaign leaves it (`extra`: stages and the like). */
export function writeCampaignSummary(dir: string, rounds: RoundSummary[], extra: Partial<CampaignProgress> = {}): void {
  const summary: CampaignProgress = {
    campaignId: 'c1',
    status: 'completed',
    rounds,
    ...extra,
    limits: { maxRounds: 2 },
    gpuMinutes: 0.2,
    wallMinutes: 1,
    summaryPath: path.join(dir, 'campaign.json'),
  };
  fs.writeFileSync(summary.summaryPath, JSON.stringify(summary));
}
