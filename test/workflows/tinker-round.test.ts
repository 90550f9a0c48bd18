import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SpecError, parseCampaignSpec } from '../../config/io/spec';
import type { RoundResult } from '../../workflows/round/contract';
import type { CampaignInput, CampaignResult } from '../../workflows/campaign/contract';
import { campaignWorkflow } from '../../workflows';
import { renderProgress } from '../../cli/progress';
import { ticketCampaignSpec } from '../helpers/campaign';
import { firedFaults, ledger, setFaults } from '../helpers/emulator';
import { arithmeticRoundInput, roundTestEnvironment } from '../helpers/round';
import { testReportDir } from '../helpers/artifacts';
import { uniqueTaskQueue } from '../helpers/temporal';

// A Tinker round is billed by tokens: it holds no GPU (0 GPU-minutes), its activities count the tokens they had
// processed, and its cost is those tokens at the spec's prices. The count must agree with what the service counted.
const { env, runRound, withWorker } = roundTestEnvironment({}, { ...process.env, TINKER_API_KEY: 'tml-round-key' });

const PRICES = { prefill: 0.13, sample: 0.4, train: 0.4 }; // USD per million tokens, Tinker's list price for Qwen3-8B (Jan 2026)

const KIND_YAML = {
  sft: `training: { epochs: 2, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64, segmentSteps: 4 }
sampling: { maxTokens: 3 }`,
  grpo: `training: { epochs: 1, batchSize: 8, learningRate: 0.002, loraRank: 8, maxSeqLen: 64, segmentSteps: 4 }
sampling: { maxTokens: 3, temperature: 1 }
round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: numeric }, loss: { type: importance_sampling } } }`,
  dpo: `training: { epochs: 1, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64, segmentSteps: 4 }
sampling: { maxTokens: 3 }
round: { kind: dpo, dpo: { beta: 0.5 } }`,
};

test.each(['sft', 'grpo', 'dpo'] as const)(
  'a %s round on Tinker: no GPU-minutes, its tokens counted as the service counted them, priced by the spec',
  async (kind) => {
    const taskQueue = uniqueTaskQueue(`tinker-${kind}`);
    const input = arithmeticRoundInput({
      baseUrl: env.emulator.url,
      campaignId: `tinker-${kind}-${taskQueue}`,
      limit: 8,
      tickets: kind === 'dpo',
      yaml: KIND_YAML[kind],
      evaluation: kind === 'sft' ? '{ scorer: numeric, every: 4, sampleEvery: 1 }' : undefined,
    });
    input.spec.provider = { ...input.spec.provider, kind: 'tinker', baseUrl: env.emulator.url, tokenPrices: PRICES };
    const result: RoundResult = await runRound(input, taskQueue);
    expect(result).toMatchObject({ status: 'completed', kind, gpuMinutes: 0 });
    expect(result.stepsApplied).toBe(result.totalSteps);

    const report = JSON.parse(fs.readFileSync(result.reportPath, 'utf8'));
    const l = await ledger(env.emulator);
    const sessionId = report.deactivated_ids[0] as string;
    const models = l.sessions.filter((s) => s.id.startsWith(`${sessionId}:train:`));
    const service = models.reduce(
      (a, s) => ({ prefill: a.prefill + s.tokens.prefill, sample: a.sample + s.tokens.sample, train: a.train + s.tokens.train }),
      { prefill: 0, sample: 0, train: 0 },
    );
    expect(result.tokens).toEqual(service);
    expect(service.train).toBeGreaterThan(0);
    expect(service.prefill).toBeGreaterThan(0);
    if (kind !== 'dpo') expect(service.sample).toBeGreaterThan(0);
    const cost = (service.prefill * PRICES.prefill + service.sample * PRICES.sample + service.train * PRICES.train) / 1e6;
    expect(result.costUsd).toBeCloseTo(cost, 12);
    expect(report).toMatchObject({ billing: 'tokens', tokens: service, gpu_minutes: 0 });
    expect(report.estimated_cost_usd).toBeCloseTo(cost, 12);
    expect(l.active).toEqual([]);
    expect(models.every((s) => l.resources.find((r) => r.id === s.id)?.gpuSeconds === 0)).toBe(true);
    process.stderr.write(
      `[tinker ${kind}] ${result.totalSteps} steps: ${service.train} train, ${service.prefill} prefill, ${service.sample} sample tokens → $${cost.toFixed(6)}\n`,
    );
  },
);

test('the spec says what Tinker cannot do, naming the field, before anything is created', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-tinker-spec-'));
  const base = `name: t
provider: { kind: tinker, model: Qwen/Qwen3-8B }
data: { train: train.jsonl, eval: eval.jsonl }
training: { epochs: 1, batchSize: 8, learningRate: 0.001, loraRank: 8, maxSeqLen: 64 }
evaluation: { scorer: numeric }
`;
  const parse = (extra: string) => parseCampaignSpec(base + extra, path.join(dir, 'campaign.yaml'));
  expect(() => parse('sampling: { maxTokens: 3 }')).not.toThrow();
  expect(() =>
    parse(
      'sampling: { maxTokens: 3, temperature: 1 }\nround: { kind: grpo, grpo: { groupSize: 4, reward: { kind: numeric }, loss: { type: grpo } } }',
    ),
  ).toThrow(/round\.grpo\.loss\.type: Tinker has no grpo loss/);
  expect(() => parse('sampling: { maxTokens: 3 }\ntracking: { wandb: { project: p } }')).toThrow(
    /tracking\.wandb: is not available on Tinker/,
  );
  expect(() => parse('sampling: { maxTokens: 3 }\nround: { kind: dpo, dpo: { beta: 0.1 } }')).not.toThrow(); // DPO runs as the SDK's custom loss
  const wrongBiller = `name: t
provider: { kind: together, model: Qwen/Qwen3-8B, tokenPrices: { prefill: 1, sample: 1, train: 1 } }
data: { train: train.jsonl, eval: eval.jsonl }
training: { epochs: 1, batchSize: 8, learningRate: 0.001, loraRank: 8, maxSeqLen: 64 }
evaluation: { scorer: numeric }
sampling: { maxTokens: 3 }
`;
  expect(() => parseCampaignSpec(wrongBiller, path.join(dir, 'campaign.yaml'))).toThrow(SpecError);
  expect(() => parseCampaignSpec(wrongBiller, path.join(dir, 'campaign.yaml'))).toThrow(
    /provider\.tokenPrices: is for a provider that bills tokens/,
  );
});

test('a Tinker campaign: `status` shows its tokens and their cost, and the campaign sums its rounds', async () => {
  const taskQueue = uniqueTaskQueue('tinker-campaign');
  const { spec, dir } = ticketCampaignSpec({ baseUrl: env.emulator.url, trainRows: 24, evalRows: 6, yaml: 'rounds: { max: 2 }' });
  spec.provider = { ...spec.provider, kind: 'tinker', baseUrl: env.emulator.url, tokenPrices: PRICES };
  const campaignId = `tinker-campaign-${taskQueue}`;
  const input: CampaignInput = { campaignId, spec, reportRoot: testReportDir(path.join(dir, 'campaigns')) };
  const result: CampaignResult = await withWorker(taskQueue, () =>
    env.temporal.client.workflow.execute(campaignWorkflow, { taskQueue, workflowId: campaignId, args: [input] }),
  );
  expect(result.rounds.map((r) => r.status)).toEqual(['completed', 'completed']);
  expect(result.gpuMinutes).toBe(0);
  const train = result.rounds.reduce((a, r) => a + r.tokens!.train, 0);
  const prefill = result.rounds.reduce((a, r) => a + r.tokens!.prefill, 0);
  const sample = result.rounds.reduce((a, r) => a + r.tokens!.sample, 0);
  expect(train).toBeGreaterThan(0);
  expect(result.costUsd).toBeCloseTo((prefill * PRICES.prefill + sample * PRICES.sample + train * PRICES.train) / 1e6, 12);
  const text = renderProgress(result);
  expect(text).toContain(
    `tokens ${train.toLocaleString('en-US')} train, ${prefill.toLocaleString('en-US')} prefill, ${sample.toLocaleString('en-US')} sample`,
  );
  expect(text).toContain(`est. cost $${result.costUsd!.toFixed(2)}`);
});

test('a model the service fails to create (it could not place it) is created again: the round completes', async () => {
  const taskQueue = uniqueTaskQueue('tinker-unplaced');
  const input = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId: `tinker-unplaced-${taskQueue}`,
    limit: 8,
    yaml: KIND_YAML.sft,
  });
  input.spec.provider = { ...input.spec.provider, kind: 'tinker', baseUrl: env.emulator.url };
  await setFaults(env.emulator, { rules: [{ kind: 'capacity-timeout', durationMs: 200, max: 1 }] });
  try {
    const result: RoundResult = await runRound(input, taskQueue);
    expect(result).toMatchObject({ status: 'completed', kind: 'sft' });
    expect(result.stepsApplied).toBe(result.totalSteps);
    const fired = await firedFaults(env.emulator);
    expect(fired.summary).toContain('capacity-timeout=1');
    const l = await ledger(env.emulator);
    const report = JSON.parse(fs.readFileSync(result.reportPath, 'utf8'));
    const models = l.resources.filter((r) => r.id.startsWith(`${report.deactivated_ids[0]}:train:`));
    expect(models.map((m) => m.error)).toEqual(['CAPACITY_WAIT_TIMEOUT', null]); // the first never placed, the second trained
    expect(l.sessions.find((s) => s.id === report.session_id)!.step).toBe(result.totalSteps);
  } finally {
    await setFaults(env.emulator, {});
  }
});
