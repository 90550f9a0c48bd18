import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { writeCampaignReports } from '../../activities/report';
import type { RoundSummary, StageProgress } from '../../workflows/campaign/contract';
import { roundReportOf, writeCampaignSummary } from '../helpers/round-report';

// summary.md and report.html of a staged campaign (SFT, then DPO), written from campaign.json and the round reports
// as the campaign leaves them: a Stages section with the facts `status` shows; a campaign without stages has none.

const OPTIONS = { temporalUiUrl: 'http://ui.test', namespace: 'default' };

/** A campaign directory with campaign.json and a round report per round, as a campaign writes them. */
function campaignDir(stages?: StageProgress[]): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-stage-report-'));
  const kinds = ['sft', 'dpo'] as const;
  const rounds: RoundSummary[] = kinds.map((kind, i) => ({
    round: i + 1,
    workflowId: `c1-round-${i + 1}`,
    status: 'completed',
    ...(stages ? { stage: i + 1, kind } : {}),
    accuracy: [0.62, 0.8][i],
    stepsApplied: 4,
    totalSteps: 4,
    gpuMinutes: 0.1,
    reportPath: path.join(dir, `round-${i + 1}.json`),
    trainingCheckpointId: `ckpt-${kind}-final`,
    train: { path: 'train.jsonl' },
  }));
  for (const r of rounds) {
    const report = roundReportOf({
      campaign_id: 'c1',
      round: r.round,
      kind: r.kind ?? 'sft',
      accuracy: r.accuracy!,
      training_checkpoint_id: r.trainingCheckpointId!,
    });
    fs.writeFileSync(r.reportPath, JSON.stringify(report));
  }
  writeCampaignSummary(dir, rounds, stages ? { stages } : {});
  return dir;
}

const STAGES: StageProgress[] = [
  {
    stage: 1,
    name: 'sft',
    kind: 'sft',
    firstRound: 1,
    endedBy: 'rounds.max (1) reached',
    gate: { metric: 'accuracy', value: 0.62, bound: '≥ 0.6', passed: true },
    passedOn: 'ckpt-sft-final',
    rounds: 1,
    headline: { metric: 'accuracy', value: 0.62 },
  },
  {
    stage: 2,
    name: 'prefer',
    kind: 'dpo',
    firstRound: 2,
    startedFrom: 'ckpt-sft-final',
    loadOptimizer: false,
    endedBy: 'rounds.max (1) reached',
    passedOn: 'ckpt-dpo-final',
    rounds: 1,
    headline: { metric: 'preferenceAccuracy', value: 0.8 },
  },
];

test('summary.md and report.html of a staged campaign list its stages: kind, rounds, headline metric, gate, checkpoints', async () => {
  const dir = campaignDir(STAGES);
  const { html, markdown } = await writeCampaignReports(dir, OPTIONS);
  const md = fs.readFileSync(markdown, 'utf8').split('\n');
  expect(md).toContain('| stage | kind | rounds | metric | gate | ended | started from | passed on |');
  expect(md).toContain(
    '| 1 sft | sft | round 1 | accuracy 62.0% | passed (accuracy 0.620, needed ≥ 0.6) | rounds.max (1) reached | the base model | `ckpt-sft-final` |',
  );
  expect(md).toContain(
    '| 2 prefer | dpo | round 2 | preference accuracy 80.0% | – | rounds.max (1) reached | `ckpt-sft-final` (weights) | `ckpt-dpo-final` |',
  );
  // The rounds table follows, as for any campaign.
  expect(md.indexOf('#### Rounds')).toBeGreaterThan(md.indexOf('#### Stages'));
  expect(md.filter((l) => /^\| [12] \| completed/.test(l))).toHaveLength(2);

  const page = fs.readFileSync(html, 'utf8');
  expect(page).toContain('<h2>Stages</h2>');
  expect(page).toContain(
    '<tr><td>2 prefer</td><td>dpo</td><td>round 2</td><td>preference accuracy 80.0%</td><td>–</td><td>rounds.max (1) reached</td>' +
      '<td><code>ckpt-sft-final</code> (weights)</td><td><code>ckpt-dpo-final</code></td></tr>',
  );
  expect(page).toContain('<td>passed (accuracy 0.620, needed ≥ 0.6)</td>');
});

test('summary.md and report.html of a campaign without stages have no stages section', async () => {
  const { html, markdown } = await writeCampaignReports(campaignDir(), OPTIONS);
  const md = fs.readFileSync(markdown, 'utf8');
  expect(md).not.toMatch(/stage/i);
  expect(md.split('\n')[2]).toBe('| round | status | accuracy | eval loss (baseline → trained) | steps | GPU-min | est. cost |');
  expect(fs.readFileSync(html, 'utf8')).not.toContain('Stages');
});
