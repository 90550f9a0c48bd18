import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { joinLocation, putContentAddressed, readJson, storeFor } from '../../config/io/artifacts';
import { campaignWorkflow, roundWorkflow } from '../../workflows';
import type { CampaignInput } from '../../workflows/campaign/contract';
import type { RoundInput, RoundResult } from '../../workflows/round/contract';
import { rewriteCampaignReport } from '../../workers/report';
import { ticketCampaignSpec } from '../helpers/campaign';
import { ledger } from '../helpers/emulator';
import { arithmeticRoundInput, roundTestEnvironment, ticketRoundInput } from '../helpers/round';
import { startS3Server, type RunningS3 } from '../helpers/s3-server';
import { uniqueTaskQueue } from '../helpers/temporal';

// The artifact store on a real S3-compatible server (moto's, a separate process on loopback): rounds read their data
// from it and write everything there (step records, samples, reference logprobs, evaluations, reports); nothing of a
// round is left on the worker's disk.
const { env, withWorker } = roundTestEnvironment({ provisioningDelayMs: 50 });
const bin = path.resolve(__dirname, '../../bin/roundhouse.js');
let s3: RunningS3;
let bucket: string;

beforeAll(async () => {
  s3 = await startS3Server();
  Object.assign(process.env, s3.env); // the workers' S3 client reads the usual AWS environment
  bucket = await s3.bucket(`roundhouse-${Date.now()}`);
}, 300_000);

afterAll(async () => {
  await s3?.close();
});

/** The round's input with its data uploaded (content-addressed) and its report directory in the bucket. */
async function inS3(input: RoundInput, label: string): Promise<RoundInput> {
  const upload = async (file: string) => (await putContentAddressed(bucket, 'data', fs.readFileSync(file), '.jsonl')).location;
  return {
    ...input,
    data: { train: await upload(input.data.train), eval: await upload(input.data.eval) },
    reportDir: joinLocation(bucket, 'campaigns', label),
  };
}

async function runRound(input: RoundInput): Promise<RoundResult> {
  const taskQueue = uniqueTaskQueue('s3-round');
  return withWorker(taskQueue, () =>
    env.temporal.client.workflow.execute(roundWorkflow, { taskQueue, workflowId: `round-${taskQueue}`, args: [input] }),
  );
}

test('an SFT round reads its data from S3 and writes its step records and report there', async () => {
  const input = await inS3(ticketRoundInput({ baseUrl: env.emulator.url, campaignId: 's3-sft', trainRows: 24, evalRows: 4 }), 's3-sft');
  const result = await runRound(input);
  expect(result).toMatchObject({ status: 'completed', stepsApplied: result.totalSteps });
  expect(result.reportPath.startsWith(`${bucket}/campaigns/s3-sft/`)).toBe(true);
  const report = await readJson<{ steps: { step: number }[]; evaluations: unknown[] }>(result.reportPath);
  expect(report!.steps.map((s) => s.step)).toEqual(Array.from({ length: result.totalSteps }, (_v, i) => i + 1));
  expect(report!.evaluations).toHaveLength(4);
  const objects = await storeFor(bucket).list(joinLocation(bucket, 'campaigns', 's3-sft'));
  expect(objects.some((o) => /\/round-1\.steps\/steps-\d+\.json$/.test(o) || /steps-\d+\.json$/.test(o))).toBe(true);
  expect((await ledger(env.emulator)).active).toEqual([]);
});

test('a DPO round keeps its reference logprobs in S3, and a GRPO round its per-step samples', async () => {
  const dpoLocal = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId: 's3-dpo',
    tickets: true,
    yaml: `training: { epochs: 1, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64, segmentSteps: 4 }
sampling: { maxTokens: 3 }
round: { kind: dpo, dpo: { beta: 0.5 } }`,
  });
  const grpoLocal = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId: 's3-grpo',
    yaml: `training: { epochs: 1, batchSize: 10, learningRate: 0.002, loraRank: 8, maxSeqLen: 64, segmentSteps: 2 }
sampling: { maxTokens: 3, temperature: 1 }
round: { kind: grpo, grpo: { groupSize: 4, reward: { kind: numeric } } }`,
  });
  const dpo = await inS3(dpoLocal, 's3-dpo');
  const grpo = await inS3(grpoLocal, 's3-grpo');
  const d = await runRound(dpo);
  const g = await runRound(grpo);
  expect(d).toMatchObject({ status: 'completed', stepsApplied: d.totalSteps });
  expect(g).toMatchObject({ status: 'completed', stepsApplied: g.totalSteps });
  const dpoObjects = await storeFor(bucket).list(joinLocation(bucket, 'campaigns', 's3-dpo'));
  expect(dpoObjects.filter((o) => o.endsWith('reference-logprobs.json'))).toHaveLength(1);
  const grpoObjects = await storeFor(bucket).list(joinLocation(bucket, 'campaigns', 's3-grpo'));
  expect(grpoObjects.filter((o) => /\.samples\/s\d{7}\.json$/.test(o))).toHaveLength(g.totalSteps);
  // Nothing of either round on the worker's disk: no report directory beside the (uploaded) data.
  for (const local of [dpoLocal, grpoLocal]) expect(fs.existsSync(local.reportDir)).toBe(false);
});

test('a campaign writes campaign.json, each round and the next training set to S3; `roundhouse report` rebuilds report.html from there', async () => {
  const { spec } = ticketCampaignSpec({
    baseUrl: env.emulator.url,
    trainRows: 30,
    evalRows: 6,
    yaml: 'rounds: { max: 2, nextData: { policy: mistakes } }',
  });
  const upload = async (file: string) => (await putContentAddressed(bucket, 'data', fs.readFileSync(file), '.jsonl')).location;
  spec.data = { ...spec.data, train: await upload(spec.data.train), eval: await upload(spec.data.eval) };
  const taskQueue = uniqueTaskQueue('s3-campaign');
  const campaignId = `s3-campaign-${taskQueue}`;
  const reportRoot = joinLocation(bucket, 'campaigns');
  const result = await withWorker(taskQueue, () =>
    env.temporal.client.workflow.execute(campaignWorkflow, {
      taskQueue,
      workflowId: campaignId,
      args: [{ campaignId, spec, reportRoot } satisfies CampaignInput],
    }),
  );
  expect(result.rounds.map((r) => r.status)).toEqual(['completed', 'completed']);
  const dir = joinLocation(reportRoot, campaignId);
  const objects = (await storeFor(dir).list(dir)).map((o) => o.slice(dir.length + 1));
  expect(objects).toEqual(
    expect.arrayContaining(['campaign.json', 'report.html', 'summary.md', 'round-1.json', 'round-2.json', 'round-2.train.jsonl']),
  );
  const written = await rewriteCampaignReport(campaignId, dir, { temporalUiUrl: 'http://127.0.0.1:8233', namespace: 'default' });
  expect(written.html).toBe(`${dir}/report.html`);
  const html = (await storeFor(written.html).read(written.html))!.toString('utf8');
  expect(html).toContain(campaignId);
});

test('`roundhouse run` with ROUNDHOUSE_ARTIFACTS=s3://… stages the data there: the spec files deleted right after, the campaign completes, and `roundhouse report` from another directory renders it from S3', async () => {
  const { dir } = ticketCampaignSpec({ baseUrl: env.emulator.url, trainRows: 20, evalRows: 4, yaml: 'rounds: { max: 1 }' });
  const taskQueue = uniqueTaskQueue('s3-cli');
  const campaignId = `s3-cli-${taskQueue}`;
  const cliEnv = {
    ...process.env,
    ...s3.env,
    TEMPORAL_ADDRESS: process.env.TEMPORAL_ADDRESS!,
    ROUNDHOUSE_TASK_QUEUE: taskQueue,
    ROUNDHOUSE_STATE_DIR: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-s3-cli-')),
    ROUNDHOUSE_ARTIFACTS: joinLocation(bucket, 'team'),
    ROUNDHOUSE_LOG_LEVEL: 'warn',
  };
  const cli = (args: string[], cwd: string) => {
    const run = spawnSync(process.execPath, [bin, ...args], { env: cliEnv, cwd, encoding: 'utf8', timeout: 120_000 });
    return { code: run.status, stdout: run.stdout, stderr: run.stderr };
  };
  await withWorker(taskQueue, async () => {
    const started = cli(['run', path.join(dir, 'campaign.yaml'), '--id', campaignId], dir);
    expect(started).toMatchObject({ code: 0, stderr: '' });
    fs.rmSync(dir, { recursive: true, force: true }); // the data is gone from the machine that ran `run`
    const result = await env.temporal.client.workflow.getHandle(campaignId).result();
    expect(result.rounds.map((r: { status: string }) => r.status)).toEqual(['completed']);
    const staged = await storeFor(bucket).list(joinLocation(bucket, 'team', 'data'));
    expect(staged.filter((o) => /\/sha256-[0-9a-f]{64}\.jsonl$/.test(o))).toHaveLength(2);
  });
  const elsewhere = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-s3-elsewhere-'));
  const report = cli(['report', campaignId], elsewhere);
  expect(report.code).toBe(0);
  const html = report.stdout.split('\n')[0]!;
  expect(html).toBe(`${bucket}/team/campaigns/${campaignId}/report.html`);
  expect((await storeFor(html).read(html))!.toString('utf8')).toContain(campaignId);
  expect(fs.readdirSync(elsewhere)).toEqual([]);
});

test('create() writes only where nothing is yet, on S3 and on disk alike: of two racing writers one wins, and the object is its', async () => {
  const local = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-create-'));
  for (const root of [bucket, local]) {
    const location = joinLocation(root, 'lines', 'race', 'champions', '000001.json');
    const store = storeFor(location);
    // Eight at once: moto's own server let two of three win under load (test/helpers/s3_server.py makes it atomic, as S3 is).
    const writers = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'];
    const won = await Promise.all(writers.map((who) => store.create(location, who)));
    expect(won.filter(Boolean)).toHaveLength(1);
    const winner = writers[won.indexOf(true)]!;
    expect((await store.read(location))!.toString()).toBe(winner);
    expect(await store.create(location, 'late')).toBe(false);
    expect((await store.read(location))!.toString()).toBe(winner);
    expect(await store.list(joinLocation(root, 'lines', 'race'))).toEqual([location]); // no partial file left behind
  }
});
