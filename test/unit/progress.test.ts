import { renderProgress } from '../../cli/progress';
import type { CampaignProgress } from '../../workflows/campaign-contract';
import type { RoundProgress } from '../../workflows/round-contract';

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

test('the live line shows the loss, and the reward of a GRPO round or the margin of a DPO round', () => {
  expect(renderProgress(progress({}))).toMatch(/5\/20 {2}loss 1\.250 {2}GPU-min 0\.50/);
  expect(renderProgress(progress({ latestReward: 0.25 }))).toMatch(/loss 1\.250 {2}reward 0\.250 {2}GPU-min/);
  expect(renderProgress(progress({ latestMargin: 1.5 }))).toMatch(/loss 1\.250 {2}margin 1\.500 {2}GPU-min/);
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
