import { renderProgress } from '../../cli/progress';
import type { CampaignProgress } from '../../workflows/campaign/contract';
import type { RoundProgress } from '../../workflows/round/contract';

const progress = (current: Partial<RoundProgress>): CampaignProgress => ({
  campaignId: 'c1',
  status: 'running',
  rounds: [],
  currentRound: { campaignId: 'c1', round: 1, phase: 'training', step: 5, totalSteps: 20, gpuMinutes: 0.5, latestLoss: 1.25, ...current },
  limits: { maxRounds: 1 },
  gpuMinutes: 0.5,
  wallMinutes: 1,
  summaryPath: '/tmp/c1/campaign.json',
});

test('the live line shows the loss, and the reward of a GRPO round, the margin of a DPO round or the metrics of a custom one', () => {
  expect(renderProgress(progress({}))).toMatch(/5\/20 {2}loss 1\.250 {2}GPU-min 0\.50/);
  expect(renderProgress(progress({ latestReward: 0.25 }))).toMatch(/loss 1\.250 {2}reward 0\.250 {2}GPU-min/);
  expect(renderProgress(progress({ latestMargin: 1.5 }))).toMatch(/loss 1\.250 {2}margin 1\.500 {2}GPU-min/);
  // A custom round: the first three of its loss function's metrics, by name.
  const metrics = { preference_accuracy: 0.75, margin: 1.5, tokens: 40, more: 1 };
  expect(renderProgress(progress({ latestMetrics: metrics }))).toMatch(
    /loss 1\.250 {2}preference_accuracy 0\.750 {2}margin 1\.500 {2}tokens 40\.000 {2}GPU-min/,
  );
});

test("status names the code sandbox the latest round's Python worker runs, or why it refuses one", () => {
  const round = (n: number, sandbox?: string) => ({
    round: n,
    workflowId: `c1-r${n}`,
    status: 'completed' as const,
    stepsApplied: 1,
    totalSteps: 1,
    gpuMinutes: 0.1,
    reportPath: `/tmp/c1/round-${n}.json`,
    train: { path: '/tmp/train.jsonl' },
    ...(sandbox ? { sandbox } : {}),
  });
  const withRounds = (...rounds: ReturnType<typeof round>[]) => renderProgress({ ...progress({}), rounds });
  expect(withRounds(round(1, 'namespaces'), round(2, 'bubblewrap'))).toMatch(/\n {2}Python code sandbox: bubblewrap\n/);
  expect(withRounds(round(1, 'refused: no mode that contains a program runs here'))).toMatch(
    /Python code sandbox: refused: no mode that contains a program runs here/,
  );
  expect(withRounds(round(1))).not.toMatch(/sandbox/);
});

test('a round that recovered from provider failures says how often and what the latest was', () => {
  const text = renderProgress(
    progress({
      recoveries: 2,
      lastRecovery: 'TrainerLost (SESSION_NOT_ACTIVE) in training at step 14: resumed from step 12 on a new trainer',
    }),
  );
  expect(text).toMatch(
    /recovered 2× from provider failures; latest: TrainerLost \(SESSION_NOT_ACTIVE\) in training at step 14: resumed from step 12/,
  );
  expect(renderProgress(progress({}))).not.toMatch(/recovered/);
});

test('a round evaluating during training shows its eval-loss curve and the latest points (with the metric where sampled)', () => {
  const text = renderProgress(
    progress({
      evaluations: [
        { step: 10, loss: 2 },
        { step: 20, loss: 1.5, metric: 0.4 },
        { step: 30, loss: 1 },
        { step: 40, loss: 1.25, metric: 0.55 },
      ],
    }),
  );
  expect(text).toMatch(/eval loss █▅▁▃ {2}2\.000@10 {2}1\.500@20 \(40%\) {2}1\.000@30 {2}1\.250@40 \(55%\)/);
  expect(renderProgress(progress({}))).not.toMatch(/eval loss [▁-█]/);
});

/** A two-stage campaign (SFT, then GRPO) in its second stage's first round; `stages` as the campaign records them. */
const staged = (): CampaignProgress => ({
  ...progress({ round: 2 }),
  rounds: [
    {
      round: 1,
      workflowId: 'c1-round-1',
      status: 'completed',
      stage: 1,
      kind: 'sft',
      accuracy: 0.62,
      baselineLoss: 9.5,
      trainedLoss: 1.2,
      stepsApplied: 20,
      totalSteps: 20,
      gpuMinutes: 0.4,
      reportPath: '/tmp/c1/round-1.json',
      trainingCheckpointId: 'ckpt-sft-final',
      train: { path: 'train.jsonl' },
    },
  ],
  stages: [
    {
      stage: 1,
      name: 'warmup',
      kind: 'sft',
      firstRound: 1,
      endedBy: 'rounds.max (1) reached',
      gate: { metric: 'evalLoss', value: 1.2, bound: '≤ 2', passed: true },
      passedOn: 'ckpt-sft-final',
      rounds: 1,
      headline: { metric: 'accuracy', value: 0.62 },
    },
    {
      stage: 2,
      name: 'rl',
      kind: 'grpo',
      firstRound: 2,
      startedFrom: 'ckpt-sft-final',
      loadOptimizer: false,
      rounds: 1,
      headline: { metric: 'meanReward', value: 0.4125 },
    },
  ],
  limits: { maxRounds: 2 },
});

test('a staged campaign shows each stage: kind, rounds, its headline metric, the gate verdict, where it started and what it passed on', () => {
  const lines = renderProgress(staged()).split('\n');
  expect(lines).toContain(
    '  stage 1 warmup (sft): round 1, accuracy 62.0%; gate passed (evalLoss 1.200, needed ≤ 2); rounds.max (1) reached',
  );
  expect(lines).toContain('          from the base model, passed on ckpt-sft-final');
  expect(lines).toContain('  stage 2 rl (grpo): round 2, mean reward 0.412');
  expect(lines).toContain('          from ckpt-sft-final (weights)');
  // Each round line names its stage and kind, the running one too.
  expect(lines.find((l) => /^ {6}1 {2}/.test(l))).toMatch(/^ {6}1 {2}1 sft {4}completed {3}62\.0%/);
  expect(lines.find((l) => /^ {6}2 {2}/.test(l))).toMatch(/^ {6}2 {2}2 grpo {3}training {3}\[/);
  expect(lines).toContain('  round  stage    status     accuracy  eval loss (base → trained)  steps      GPU-min');
});

test('a DPO stage shows preference accuracy; a missed gate says so; stage 2 loading the optimizer state says that', () => {
  const p = staged();
  p.stages![1] = {
    ...p.stages![1]!,
    kind: 'dpo',
    loadOptimizer: true,
    gate: { metric: 'preferenceAccuracy', value: 0.55, bound: '≥ 0.8', passed: false },
    endedBy: 'rounds.max (1) reached',
    passedOn: 'ckpt-dpo-final',
    headline: { metric: 'preferenceAccuracy', value: 0.55 },
  };
  const text = renderProgress(p);
  expect(text).toContain(
    '  stage 2 rl (dpo): round 2, preference accuracy 55.0%; gate missed (preferenceAccuracy 0.550, needed ≥ 0.8); rounds.max (1) reached',
  );
  expect(text).toContain('          from ckpt-sft-final (weights and optimizer state), passed on ckpt-dpo-final');
});

test('a campaign without stages has no stage lines or column', () => {
  const text = renderProgress(progress({}));
  expect(text).not.toMatch(/stage/);
  expect(text).toContain('  round  status     accuracy  eval loss (base → trained)  steps      GPU-min');
  expect(text).toMatch(/^ {6}1 {2}training {3}\[/m);
});
