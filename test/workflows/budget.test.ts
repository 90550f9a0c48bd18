import path from 'node:path';
import type { CampaignInput, CampaignResult } from '../../workflows/campaign/contract';
import { RoundReportSchema } from '../../config/io/round-report';
import { campaignWorkflow } from '../../workflows';
import { renderProgress } from '../../cli/progress';
import { ticketCampaignSpec } from '../helpers/campaign';
import { ledger } from '../helpers/emulator';
import { arithmeticRoundInput, roundTestEnvironment } from '../helpers/round';
import { readArtifact, testReportDir } from '../helpers/artifacts';
import { uniqueTaskQueue } from '../helpers/temporal';

// `budget.maxUsd` (docs/design/budget.md): a round stops before its spend crosses the budget, and the emulator's
// ledger (what the provider bills) never shows more than the budget. The emulator bills at test prices, so a dollar
// goes in seconds: GPU time at $72 per GPU-hour (2 cents a second), tokens at $100 per million.
const TOKENS = { prefill: 100, sample: 100, train: 100 };
const { env, runRound, withWorker } = roundTestEnvironment(
  { prices: { gpuHour: 72, tokens: TOKENS }, operationLatencyMs: 150 },
  { ...process.env, TINKER_API_KEY: 'tml-budget-key' },
);

async function runCampaign(label: string, yaml: string, tinker = false): Promise<{ result: CampaignResult; campaignId: string }> {
  const taskQueue = uniqueTaskQueue(`budget-${label}`);
  const { spec, dir } = ticketCampaignSpec({ baseUrl: env.emulator.url, trainRows: 200, evalRows: 5, yaml });
  if (tinker) {
    spec.provider = { ...spec.provider, kind: 'tinker', baseUrl: env.emulator.url };
    spec.budget.prices = { tokens: TOKENS }; // negotiated rates (refused in the text while the provider is local)
  }
  const campaignId = `budget-${label}-${taskQueue}`;
  const input: CampaignInput = { campaignId, spec, reportRoot: testReportDir(path.join(dir, 'campaigns')) };
  const result: CampaignResult = await withWorker(taskQueue, () =>
    env.temporal.client.workflow.execute(campaignWorkflow, { taskQueue, workflowId: campaignId, args: [input] }),
  );
  return { result, campaignId };
}

/**
 * What the emulator billed a round (its resources' GPU time, its Tinker models' tokens): what the round released (its
 * report's `deactivated_ids`: a Together resource; a Tinker session, whose models are `<session>:train:<n>`).
 */
async function billed(reportPath: string): Promise<{ usd: number; active: number }> {
  const report = RoundReportSchema.parse(await readArtifact(reportPath));
  const l = await ledger(env.emulator);
  const ours = (id: string) => report.deactivated_ids.some((d) => id === d || id.startsWith(`${d}:`));
  const usd =
    l.resources.filter((r) => ours(r.id)).reduce((a, r) => a + r.usd, 0) +
    l.sessions.filter((s) => ours(s.resourceId)).reduce((a, s) => a + s.usd, 0);
  return { usd, active: l.active.filter(ours).length };
}

test('Tinker (tokens): the round stops before its spend crosses maxUsd; the ledger bills no more; the report settles it', async () => {
  const maxUsd = 0.5;
  const { result } = await runCampaign('tinker', `rounds: { max: 2 }\nbudget: { maxUsd: ${maxUsd} }`, true);
  expect(result.status).toBe('stopped');
  expect(result.stopReason).toMatch(/dollar budget reached in round 1/);
  const round = result.rounds[0]!;
  expect(round.status).toBe('stopped');
  expect(round.stepsApplied).toBeGreaterThan(0);
  expect(round.stepsApplied).toBeLessThan(round.totalSteps);
  expect(round.trainingCheckpointId).toBeDefined(); // progress kept
  const bill = await billed(round.reportPath);
  expect(bill.usd).toBeGreaterThan(0);
  expect(bill.usd).toBeLessThanOrEqual(maxUsd);
  expect(bill.active).toBe(0);
  const report = RoundReportSchema.parse(await readArtifact(round.reportPath));
  expect(report.budget).toMatchObject({ max_usd: maxUsd, billing: 'tokens', price_source: 'spec', usd_per_million_tokens: TOKENS });
  expect(report.budget!.spent_usd).toBeCloseTo(bill.usd, 6); // settled from the tokens processed: what the service billed
  expect(report.budget!.estimated_usd).toBeGreaterThanOrEqual(report.budget!.spent_usd); // samples admitted at their bound
  expect(renderProgress(result)).toMatch(/spend \$0\.\d{4} of \$0\.50 budget/);
  process.stderr.write(
    `[budget tinker] ${round.stepsApplied}/${round.totalSteps} steps; spent $${report.budget!.spent_usd.toFixed(4)} (ledger $${bill.usd.toFixed(4)}) of $${maxUsd}; estimated $${report.budget!.estimated_usd.toFixed(4)}\n`,
  );
}, 180_000);

test('Tinker GRPO: each sampling request is admitted at its bound (n × maxTokens) before it is sent; the round stops inside the budget', async () => {
  const taskQueue = uniqueTaskQueue('budget-grpo');
  const input = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId: `budget-grpo-${taskQueue}`,
    limit: 10,
    yaml: `training: { epochs: 1, batchSize: 8, learningRate: 0.002, loraRank: 8, maxSeqLen: 64, segmentSteps: 4 }
sampling: { maxTokens: 3, temperature: 1 }
round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: numeric }, loss: { type: importance_sampling } } }`,
  });
  input.spec.provider = { ...input.spec.provider, kind: 'tinker', baseUrl: env.emulator.url };
  const maxUsd = 0.5;
  input.budget = { maxUsd, prices: { tokens: TOKENS } };
  const result = await runRound(input, taskQueue);
  expect(result.status).toBe('stopped');
  expect(result.stopReason).toBe('dollar budget reached');
  expect(result.stepsApplied).toBeGreaterThan(0);
  expect(result.stepsApplied).toBeLessThan(result.totalSteps);
  const bill = await billed(result.reportPath);
  expect(bill.usd).toBeGreaterThan(0);
  expect(bill.usd).toBeLessThanOrEqual(maxUsd);
  expect(bill.active).toBe(0);
  expect(result.budget!.spentUsd).toBeCloseTo(bill.usd, 6);
  // Samples generate at most maxTokens: the bound they were admitted on is at least what they generated.
  expect(result.tokens!.sample).toBeGreaterThan(0);
  expect(result.tokens!.sampleBound).toBeGreaterThanOrEqual(result.tokens!.sample);
  expect(result.budget!.estimatedUsd).toBeGreaterThanOrEqual(result.budget!.spentUsd);
  process.stderr.write(
    `[budget grpo] ${result.stepsApplied}/${result.totalSteps} steps; spent $${result.budget!.spentUsd.toFixed(4)} (ledger $${bill.usd.toFixed(4)}) of $${maxUsd}; admitted at $${result.budget!.estimatedUsd.toFixed(4)}\n`,
  );
}, 180_000);

test('GPU time: the budget watch stops training with room to checkpoint and release; the ledger bills no more than maxUsd', async () => {
  const maxUsd = 0.3;
  const { result } = await runCampaign('gpu', `rounds: { max: 2 }\nbudget: { maxUsd: ${maxUsd} }`);
  expect(result.status).toBe('stopped');
  expect(result.stopReason).toMatch(/dollar budget reached in round 1/);
  const round = result.rounds[0]!;
  expect(round.stepsApplied).toBeGreaterThan(0);
  expect(round.stepsApplied).toBeLessThan(round.totalSteps);
  expect(round.trainingCheckpointId).toBeDefined();
  const bill = await billed(round.reportPath);
  expect(bill.usd).toBeGreaterThan(0);
  expect(bill.usd).toBeLessThanOrEqual(maxUsd);
  expect(bill.active).toBe(0);
  const report = RoundReportSchema.parse(await readArtifact(round.reportPath));
  // Priced by the emulator's estimate-cost quote ($72 per GPU-hour, one GPU), settled from the time held.
  expect(report.budget).toMatchObject({ max_usd: maxUsd, billing: 'gpu-time', price_source: 'quote', usd_per_hour: 72 });
  expect(Math.abs(report.budget!.spent_usd - bill.usd)).toBeLessThan(0.02); // within a second of the provider's READY time
  process.stderr.write(
    `[budget gpu] ${round.stepsApplied}/${round.totalSteps} steps; spent $${report.budget!.spent_usd.toFixed(4)} (ledger $${bill.usd.toFixed(4)}) of $${maxUsd}; estimated $${report.budget!.estimated_usd.toFixed(4)}\n`,
  );
}, 180_000);

test('a budget below the cheapest round is refused before anything is provisioned, and says why', async () => {
  const { result, campaignId } = await runCampaign('refused', 'rounds: { max: 2 }\nbudget: { maxUsd: 0.01 }');
  expect(result.status).toBe('failed');
  const round = result.rounds[0]!;
  expect(round.errorType).toBe('InvalidInput');
  expect(round.errorMessage).toMatch(
    /budget\.maxUsd: \$0\.01 left is below the cheapest round of roundhouse\/tiny-chat \(\$0\.0200: the least billed, 1 s at \$72\.00\/h\); nothing was provisioned/,
  );
  const l = await ledger(env.emulator);
  expect(l.resources.filter((r) => r.ownerTag?.includes(campaignId))).toEqual([]);
}, 120_000);

test('a packed sweep: its shared trainer is billed once, and when its spend reaches maxUsd every arm stops; the ledger bills no more', async () => {
  const maxUsd = 0.3;
  const { result } = await runCampaign(
    'sweep',
    `rounds: { max: 2 }
budget: { maxUsd: ${maxUsd} }
sweep:
  over: { training.learningRate: [0.0005, 0.002, 0.008, 0.03] }
  select: { metric: eval_loss, rungs: 2, eta: 2 }`,
  );
  expect(result.status).toBe('stopped');
  expect(result.stopReason).toMatch(/dollar budget reached in round 1/);
  const sweep = result.rounds[0]!.sweep!;
  expect(sweep.trainers).toHaveLength(1);
  // Halved to one arm at the rungs; the budget stopped that one, which keeps its weights and wins.
  const winner = sweep.arms.find((a) => a.arm === sweep.winner!.arm)!;
  expect(winner).toMatchObject({ status: 'stopped' });
  expect(winner.stoppedAtRung).toBeUndefined();
  expect(winner.step).toBeLessThan(40);
  const l = await ledger(env.emulator);
  const shared = l.resources.find((r) => r.id === sweep.trainers![0]!.resourceId)!;
  expect(shared.usd).toBeGreaterThan(0);
  expect(shared.usd).toBeLessThanOrEqual(maxUsd);
  expect(l.active).not.toContain(shared.id);
  expect(result.rounds[0]!.costUsd).toBeCloseTo(shared.usd, 2); // the sweep's settled spend: the trainer's time
  process.stderr.write(
    `[budget sweep] winner arm ${winner.arm} at step ${winner.step}; shared trainer $${shared.usd.toFixed(4)} (settled $${result.rounds[0]!.costUsd!.toFixed(4)}) of $${maxUsd}\n`,
  );
}, 180_000);

test('a sweep whose budget is below the cheapest round is refused before any trainer is provisioned', async () => {
  const before = (await ledger(env.emulator)).resources.length;
  const { result } = await runCampaign(
    'sweep-refused',
    `budget: { maxUsd: 0.01 }
sweep:
  over: { training.learningRate: [0.0005, 0.002] }
  select: { metric: eval_loss, rungs: 2 }`,
  );
  expect(result.status).toBe('failed');
  expect(result.rounds[0]).toMatchObject({ status: 'failed', errorType: 'InvalidInput' });
  expect(result.rounds[0]!.errorMessage).toMatch(/budget\.maxUsd: \$0\.01 left is below the cheapest round/);
  expect((await ledger(env.emulator)).resources).toHaveLength(before);
}, 120_000);
