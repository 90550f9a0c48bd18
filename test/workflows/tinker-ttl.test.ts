import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseCampaignSpec } from '../../config/io/spec';
import { roundSpecOf, type RoundResult } from '../../workflows/round/contract';
import { ledger } from '../helpers/emulator';
import { arithmeticRoundInput, roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// Tinker's checkpoints live until their TTL (`ttl_seconds`, 1 hour to 10 years; none: never expire). A round saves
// every checkpoint with the campaign's `retention.ttl` (#44).
const API_KEY = 'tml-ttl-key';
const { env, runRound } = roundTestEnvironment({}, { ...process.env, TINKER_API_KEY: API_KEY });

test("every checkpoint a Tinker round saves (training state, sampler weights, the evaluation's weight syncs) carries the spec's retention.ttl", async () => {
  const taskQueue = uniqueTaskQueue('tinker-ttl');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-tinker-ttl-'));
  const campaignId = `tinker-ttl-${taskQueue}`;
  const input = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId,
    dir,
    limit: 8,
    yaml: `training: { epochs: 2, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64, segmentSteps: 4, checkpointEvery: { steps: 2 } }
sampling: { maxTokens: 3 }`,
    evaluation: '{ scorer: numeric, every: 4, sampleEvery: 1 }',
  });
  // The same spec on Tinker with a two-hour TTL, parsed and cut to the round's part as a campaign does.
  const file = path.join(dir, `campaign-${campaignId.replace(/[^A-Za-z0-9]/g, '-')}.yaml`);
  const yaml = fs
    .readFileSync(file, 'utf8')
    .replace(/provider: \{ kind: local, /, 'provider: { kind: tinker, ')
    .concat('\nretention: { ttl: 2h }\n');
  input.spec = roundSpecOf(parseCampaignSpec(yaml, file));
  expect(input.spec.retention).toEqual({ ttl: 7200 });

  const result: RoundResult = await runRound(input, taskQueue);
  expect(result).toMatchObject({ status: 'completed', stepsApplied: result.totalSteps });

  const report = JSON.parse(fs.readFileSync(result.reportPath, 'utf8'));
  const models = (await ledger(env.emulator)).resources.filter((r) => r.id.startsWith(`${report.deactivated_ids[0]}:train:`));
  const checkpoints = (
    await Promise.all(
      models.map(async (m) => {
        const res = await fetch(`${env.emulator.url}/api/v1/training_runs/${encodeURIComponent(m.id)}/checkpoints`, {
          headers: { 'x-api-key': API_KEY },
        });
        return ((await res.json()) as { checkpoints: { checkpoint_id: string; time: string; expires_at: string | null }[] }).checkpoints;
      }),
    )
  ).flat();
  const kinds = new Set(checkpoints.map((c) => c.checkpoint_id.split('/')[0]));
  expect(kinds).toEqual(new Set(['weights', 'sampler_weights']));
  for (const c of checkpoints)
    expect({ id: c.checkpoint_id, ttlMs: Date.parse(c.expires_at ?? '') - Date.parse(c.time) }).toEqual({
      id: c.checkpoint_id,
      ttlMs: 7_200_000,
    });
});
