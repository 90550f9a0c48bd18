import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { joinLocation } from '../../config/io/artifacts';
import {
  parseRoundReport,
  readRoundReport,
  RoundReportError,
  type RoundReport,
  type RoundReportFields,
} from '../../config/io/round-report';
import { roundFiles, stepsFolder } from '../../config/rules/round-files';
import { createRoundActivities } from '../../activities/round';
import { createPromotionActivities } from '../../activities/promotion';
import { listCampaignCheckpoints, rewriteCampaignReport } from '../../workers/report';
import type { PromotionDecision, PromotionJudgeInput } from '../../workflows/campaign/promotion-contract';

/**
 * Every reader of round-N.json on reports written by earlier versions (test/fixtures/round-reports: the report inputs
 * of recorded histories, with the evaluations and steps the report activity merged in then) and on one the current
 * report activity writes.
 */
const FIXTURES = path.join(__dirname, '..', 'fixtures', 'round-reports');
const OLD = {
  /** The first reports: no kind, rewards, margins, pool, cost or stop reason. */
  'v1-sft.json': { kind: 'sft', status: 'completed', cost: '–' },
  /** Recoveries, rolling checkpoints and capacity waits; no checkpoint records, tokens, billing or test. */
  'v15-sft-recoveries.json': { kind: 'sft', status: 'completed', cost: '$0.00' },
  /** DPO with evaluations during training and an early stop; no checkpoint records. */
  'v16-dpo-early-stop.json': { kind: 'dpo', status: 'completed', cost: '$0.01' },
} as const;
const oldReport = (name: string) => JSON.parse(fs.readFileSync(path.join(FIXTURES, name), 'utf8')) as Record<string, unknown>;

/** What the round workflow hands the report activity today: every field (a GRPO round with a test set). */
function currentFields(campaignId: string, dir: string): RoundReportFields {
  return {
    campaign_id: campaignId,
    round: 2,
    name: 'tickets',
    workflow_id: `${campaignId}-round-2`,
    run_id: 'run-2',
    provider: 'local',
    base_model: 'roundhouse/tiny-chat',
    resource_id: 'mr-2',
    session_id: 'sess-2',
    train_path: `${dir}/train.jsonl`,
    eval_path: `${dir}/eval.jsonl`,
    train_sha256: 'a'.repeat(64),
    eval_sha256: 'b'.repeat(64),
    started_from_checkpoint: 'ckpt-train-prev',
    baseline_loss: 2.5,
    trained_loss: 1.25,
    kind: 'grpo',
    loss_unit: 'mean cross-entropy per trained (answer) token of the eval set, in nats',
    first_reward: 0.2,
    latest_reward: 0.6,
    baseline_preference_accuracy: null,
    baseline_margin: null,
    trained_margin: null,
    accuracy: 0.75,
    pass_at_k: { k: 4, value: 0.9 },
    loss_metrics: null,
    pool_accuracy: null,
    test_path: `${dir}/test.jsonl`,
    test: { accuracy: 0.7, rows: 10, sha256: 'c'.repeat(64), evaluations_path: roundFiles(dir, 2).testEvaluations },
    training_checkpoint_id: 'ckpt-train-r2',
    sampler_checkpoint_id: 'ckpt-infer-r2',
    steps_applied: 4,
    steps_planned: 4,
    gpu_minutes: 0.5,
    tokens: { prefill: 100, sample: 50, train: 200 },
    billing: 'gpu-time',
    estimated_cost_usd: 0.02,
    budget: null,
    status: 'completed',
    stop_reason: null,
    error_type: null,
    error_message: null,
    cleanup_status: 'deactivated',
    sandbox: null,
    recoveries: [],
    evaluation_curve: [{ step: 2, loss: 1.5, metric: 0.5, checkpoint_id: 'ckpt-train-r2-s2' }],
    early_stop: null,
    rolling_checkpoints: [{ checkpoint_id: 'ckpt-train-r2-s2', step: 2, lineage: 0 }],
    capacity_waits: [],
    deactivated_ids: ['mr-2'],
  };
}

/** Round 2 as the current report activity writes it, with its evaluations file and step records. */
async function writeCurrentReport(campaignId: string, dir: string): Promise<string> {
  const files = roundFiles(dir, 2);
  fs.writeFileSync(
    files.evaluations,
    JSON.stringify([
      { line: 1, prompt: 'My invoice is wrong', expected: 'billing', completion: 'billing', match: true },
      { line: 2, prompt: 'The app crashes on start', expected: 'bug', completion: 'bug', match: true },
    ]),
  );
  fs.mkdirSync(files.steps);
  const steps = [1, 2, 3, 4].map((step) => ({ step, loss: 4 - step / 2, tokens: 10, lossPerToken: 0.4 - step / 20, meanReward: step / 5 }));
  fs.writeFileSync(stepsFolder.records(files.steps, 1, 0, joinLocation), JSON.stringify(steps));
  const activities = createRoundActivities({ providerFor: () => Promise.reject(new Error('the report needs no provider')) });
  return new MockActivityEnvironment().run(activities.writeRoundReport, {
    path: files.report,
    report: currentFields(campaignId, dir),
    evaluationsPath: files.evaluations,
    stepsDir: files.steps,
  });
}

/** A campaign whose round 1 is `round1` (an old report, or a malformed one) and round 2 the current writer's. */
async function campaignWith(round1: unknown): Promise<{ dir: string; campaignId: string }> {
  const campaignId = 'readers';
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-report-readers-'));
  fs.writeFileSync(roundFiles(dir, 1).report, typeof round1 === 'string' ? round1 : JSON.stringify(round1, null, 2));
  await writeCurrentReport(campaignId, dir);
  const rounds = [1, 2].map((round) => ({ round, reportPath: roundFiles(dir, round).report }));
  fs.writeFileSync(joinLocation(dir, 'campaign.json'), JSON.stringify({ campaignId, status: 'completed', gpuMinutes: 1, rounds }));
  return { dir, campaignId };
}

const UI = { temporalUiUrl: 'http://ui', namespace: 'default' };

describe('the round report schema', () => {
  test.each(Object.keys(OLD))('an old report (%s) parses, the fields added since filled in', (name) => {
    const raw = oldReport(name);
    const report = parseRoundReport(name, raw);
    expect(report.kind).toBe(OLD[name as keyof typeof OLD].kind);
    for (const added of ['pass_at_k', 'test', 'test_path', 'tokens', 'sandbox', 'loss_metrics'] as const) expect(report[added]).toBeNull();
    expect(report.checkpoints).toBeUndefined();
    expect(report.billing).toBeUndefined();
    expect(report.evaluations).toHaveLength(2);
    expect(report.steps.length).toBe(raw.steps_applied);
  });

  test('the first reports had no cost, stop reason, recoveries or curve: null and empty lists', () => {
    const report = parseRoundReport('v1', oldReport('v1-sft.json'));
    expect([report.estimated_cost_usd, report.stop_reason, report.first_reward, report.pool_accuracy, report.early_stop]).toEqual([
      null,
      null,
      null,
      null,
      null,
    ]);
    expect([report.recoveries, report.evaluation_curve, report.rolling_checkpoints, report.capacity_waits]).toEqual([[], [], [], []]);
  });

  test('the current writer’s report parses back to the fields it was given, with checkpoints, evaluations and steps', async () => {
    const { dir, campaignId } = await campaignWith(oldReport('v1-sft.json'));
    const report = (await readRoundReport(roundFiles(dir, 2).report))!;
    expect(report).toMatchObject(currentFields(campaignId, dir));
    expect(report.checkpoints!.map((c) => [c.kind, c.checkpoint_id, c.step, c.final])).toEqual([
      ['training', 'ckpt-train-r2-s2', 2, false],
      ['training', 'ckpt-train-r2', 4, true],
      ['sampler', 'ckpt-infer-r2', 4, true],
    ]);
    expect(report.evaluations.map((e) => e.match)).toEqual([true, true]);
    expect(report.steps.map((s) => s.meanReward)).toEqual([0.2, 0.4, 0.6, 0.8]);
  });
});

describe.each(Object.keys(OLD))('every reader on an old report (%s) beside a current one', (name) => {
  const expected = OLD[name as keyof typeof OLD];

  test('`roundhouse report`: summary.md and report.html list both rounds', async () => {
    const { dir, campaignId } = await campaignWith(oldReport(name));
    const written = await rewriteCampaignReport(campaignId, dir, UI);
    const md = fs.readFileSync(written.markdown, 'utf8');
    const row = (round: number) => md.split('\n').find((l) => l.startsWith(`| ${round} |`));
    expect(row(1)).toMatch(new RegExp(`^\\| 1 \\| ${expected.status} \\| .* \\| ${expected.cost.replace('$', '\\$')} \\|$`));
    expect(row(2)).toBe('| 2 | completed | 75.0% (pass@4 90.0%) | 70.0% | 2.500 → 1.250 | 4/4 | 0.50 | $0.02 |');
    const html = fs.readFileSync(written.html, 'utf8');
    expect(html).toContain(`${campaignId}-round-2`);
    expect(html).toContain(String(oldReport(name).workflow_id));
  });

  test('`roundhouse checkpoints`: the old round’s derived from its fields, the current round’s as recorded', async () => {
    const { dir, campaignId } = await campaignWith(oldReport(name));
    const raw = oldReport(name);
    const { checkpoints, best } = await listCampaignCheckpoints(campaignId, dir);
    const finals = checkpoints.filter((c) => c.final).map((c) => [c.round, c.kind, c.checkpoint_id, c.metric]);
    expect(finals).toEqual([
      [raw.round, 'training', raw.training_checkpoint_id, raw.accuracy],
      [raw.round, 'sampler', raw.sampler_checkpoint_id, raw.accuracy],
      [2, 'training', 'ckpt-train-r2', 0.75],
      [2, 'sampler', 'ckpt-infer-r2', 0.75],
    ]);
    expect(best?.checkpoint_id).toBe('ckpt-train-r2');
  });

  test('promotion reads the old round’s eval figures', async () => {
    const { dir, campaignId } = await campaignWith(oldReport(name));
    const raw = oldReport(name);
    const input: PromotionJudgeInput = {
      decisionId: 'd1',
      line: 'tickets',
      rule: { on: 'eval', minGain: 0 },
      reportRoot: dir,
      challenger: { checkpointId: String(raw.training_checkpoint_id), campaignId, round: 1, reportPath: roundFiles(dir, 1).report },
      measure: { baseModel: String(raw.base_model), scorer: {}, sampling: {} },
    };
    const judge = createPromotionActivities().judgePromotion;
    const decision = await new MockActivityEnvironment().run<[PromotionJudgeInput], PromotionDecision, typeof judge>(judge, input);
    expect(decision.challenger.figures).toMatchObject({ on: 'eval', accuracy: raw.accuracy, rows: 2, sha256: raw.eval_sha256 });
  });
});

describe('a malformed report', () => {
  const broken = (change: (r: Record<string, unknown>) => void) => {
    const r = oldReport('v16-dpo-early-stop.json');
    change(r);
    return r;
  };

  test('a field of the wrong type: the error names the file and the field', async () => {
    const { dir, campaignId } = await campaignWith(broken((r) => (r.steps_applied = '28')));
    const file = roundFiles(dir, 1).report;
    const failure = listCampaignCheckpoints(campaignId, dir);
    await expect(failure).rejects.toThrow(RoundReportError);
    await expect(failure).rejects.toThrow(new RegExp(`^${file}: steps_applied: `));
    await expect(rewriteCampaignReport(campaignId, dir, UI)).rejects.toMatchObject({ file, field: 'steps_applied' });
  });

  test('a missing field inside a list: the error names its place', async () => {
    const { dir, campaignId } = await campaignWith(broken((r) => delete (r.evaluation_curve as { step?: number }[])[1]!.step));
    await expect(rewriteCampaignReport(campaignId, dir, UI)).rejects.toMatchObject({
      code: 'ROUND_REPORT_INVALID',
      file: roundFiles(dir, 1).report,
      field: 'evaluation_curve[1].step',
    });
  });

  test('a required field missing, or a file that is not JSON', async () => {
    const noRound = await campaignWith(broken((r) => delete r.round));
    await expect(listCampaignCheckpoints(noRound.campaignId, noRound.dir)).rejects.toMatchObject({ field: 'round' });
    const truncated = await campaignWith('{"campaign_id": "readers", "round": 1,');
    await expect(listCampaignCheckpoints(truncated.campaignId, truncated.dir)).rejects.toThrow(
      new RegExp(`^${roundFiles(truncated.dir, 1).report}: not JSON`),
    );
  });

  test('a report with recoveries and capacity waits: read as they were written', async () => {
    const { dir } = await campaignWith(oldReport('v15-sft-recoveries.json'));
    const report: RoundReport = (await readRoundReport(roundFiles(dir, 1).report))!;
    expect(report.recoveries.map((r) => [r.error_type, r.lineage])).toEqual([
      ['OperationFailed', 1],
      ['TrainerLost', 2],
    ]);
    expect(report.capacity_waits).toHaveLength(1);
  });
});
