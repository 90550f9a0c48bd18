import { createHash, randomBytes } from 'node:crypto';
import { Client } from '@temporalio/client';
import type { Payload } from '@temporalio/common';
import { joinLocation, storeFor } from '../../config/io/artifacts';
import { parseEncryptionKeys } from '../../config/io/worker-env';
import { dataConverterFor } from '../../workers/encryption';
import { startS3Server } from '../helpers/s3-server';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { RoundInput, RoundResult } from '../../workflows/round/contract';
import type { CampaignInput, CampaignResult } from '../../workflows/campaign/contract';
import { campaignWorkflow, pythonCallWorkflow, roundWorkflow } from '../../workflows';
import type { PythonCallInput } from '../../workflows/python/contract';
import { pythonCallOf } from '../../config/rules/python-calls';
import { ticketCampaignSpec } from '../helpers/campaign';
import { ledger } from '../helpers/emulator';
import { testReportDir } from '../helpers/artifacts';
import { startPythonWorker, type PythonWorker } from '../helpers/python-worker';
import { arithmeticRoundInput, roundTestEnvironment } from '../helpers/round';
import { uniqueTaskQueue } from '../helpers/temporal';

// The user's functions in Python (test/python/functions.py) on real `python -m roundhouse worker` processes, called
// by rounds on the TypeScript worker through the shared dev server; the providers are the emulator's dialects.
const { env, runRound, withWorker } = roundTestEnvironment(
  {},
  { ...process.env, TOGETHER_API_KEY: 'tg-python-key', TINKER_API_KEY: 'tml-python-key' },
);

const report = (r: RoundResult) => JSON.parse(fs.readFileSync(r.reportPath, 'utf8'));
const workers: PythonWorker[] = [];
afterEach(async () => {
  for (const w of workers.splice(0)) await w.stop();
});

function callsLog(): string {
  return path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rh-py-calls-')), 'calls.jsonl');
}

/** The sample keys of the logged calls of one kind (the functions log each call they complete). */
function calls(file: string, kind: string): { key: string; pid: number }[] {
  if (!fs.existsSync(file)) return [];
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { kind: string; key: string; pid: number })
    .filter((c) => c.kind === kind);
}

async function pythonWorker(taskQueue: string, extra: Record<string, string> = {}): Promise<PythonWorker> {
  const worker = await startPythonWorker({ address: env.temporal.settings.address!, taskQueue, env: extra });
  workers.push(worker);
  return worker;
}

type Kind = 'together' | 'tinker';

/** A GRPO round rewarded by a Python function: 5 steps of 4 prompts × 4 samples (20 training sums), or with `limit: 8`
 * 13 steps (51 sums, the last step of 3 prompts). */
function grpoInput(kind: Kind, campaignId: string, reward: string, extra = '', limit = 5): RoundInput {
  const input = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId,
    limit,
    yaml: `training: { epochs: 1, batchSize: 4, learningRate: 0.002, loraRank: 8, maxSeqLen: 64, segmentSteps: 4 }
sampling: { maxTokens: 3, temperature: 1 }
round: { kind: grpo, grpo: { groupSize: 4, loss: { type: importance_sampling }, reward: { kind: python, name: ${reward}, taskQueue: ${campaignId}-py, heartbeatTimeoutSeconds: 3, retry: { maxAttempts: 4, initialIntervalSeconds: 0.2 }${extra} } } }`,
  });
  input.spec.provider = { ...input.spec.provider, kind, baseUrl: env.emulator.url };
  return input;
}

interface Samples {
  groups: { line: number; completions: { text: string; reward: number | null }[] }[];
}

/** Every step's samples as the round trained on them (the samples files), in step order. */
function samplesOf(result: RoundResult): Samples[] {
  const dir = result.reportPath.replace(/\.json$/, '.samples');
  return fs
    .readdirSync(dir)
    .filter((f) => /^s\d+\.json$/.test(f))
    .sort()
    .map((f) => JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')) as Samples);
}

/** Every payload of a workflow's history, decoded as the client decodes it (its codecs, then its payload converter). */
async function decodedPayloads(client: Client, workflowId: string): Promise<unknown[]> {
  const history = await client.workflow.getHandle(workflowId).fetchHistory();
  const payloads: Payload[] = [];
  const walk = (node: unknown): void => {
    if (!node || typeof node !== 'object' || node instanceof Uint8Array) return;
    if ('data' in node && 'metadata' in node) payloads.push(node as Payload);
    else for (const v of Object.values(node)) walk(v);
  };
  walk(history);
  const { payloadCodecs, payloadConverter } = client.workflow.options.loadedDataConverter;
  let decoded = payloads;
  for (const codec of [...payloadCodecs].reverse()) decoded = await codec.decode(decoded);
  return decoded.map((p) => payloadConverter.fromPayload(p));
}

/** The strings inside decoded values, at any depth. */
function stringsIn(node: unknown, out: string[] = []): string[] {
  if (typeof node === 'string') out.push(node);
  else if (node && typeof node === 'object') for (const v of Object.values(node)) stringsIn(v, out);
  return out;
}

const sampleCount = (samples: Samples[]) => samples.reduce((a, s) => a + s.groups.reduce((b, g) => b + g.completions.length, 0), 0);

test.each(['together', 'tinker'] as const)(
  'a GRPO round on %s scored by a Python reward: each sample scored once, the rewards trained on are the recorded ones, nothing active',
  async (kind) => {
    const taskQueue = uniqueTaskQueue(`py-grpo-${kind}`);
    const input = grpoInput(kind, `py-${taskQueue}`, 'digits_reward');
    const log = callsLog();
    await pythonWorker(`${input.campaignId}-py`, { ROUNDHOUSE_TEST_CALLS: log });
    const result = await runRound(input, taskQueue);
    expect(result).toMatchObject({ status: 'completed', kind: 'grpo', stepsApplied: result.totalSteps });

    const samples = samplesOf(result);
    expect(samples).toHaveLength(result.totalSteps!);
    const keys = calls(log, 'reward').map((c) => c.key);
    expect(keys).toHaveLength(sampleCount(samples));
    expect(new Set(keys).size).toBe(keys.length);
    // Each reward trained on is the one recorded for its (step, prompt, sample), as the function computed it.
    const records = result.reportPath.replace(/\.json$/, '.rewards');
    samples.forEach((s, step) =>
      s.groups.forEach((g, p) =>
        g.completions.forEach((c, j) => {
          const record = JSON.parse(fs.readFileSync(path.join(records, `s${String(step).padStart(7, '0')}`, `p${p}-c${j}.json`), 'utf8'));
          expect(record).toMatchObject({ function: 'digits_reward', value: c.reward, context: { step: step + 1, line: g.line } });
        }),
      ),
    );
    // Completions reach Python by store reference: every payload of every call's history, decoded, holds the batch's
    // location and none of the completions that batch holds.
    for (let step = 0; step < result.totalSteps!; step++) {
      const strings = stringsIn(await decodedPayloads(env.temporal.client, `python:${input.campaignId}/r1/s${step}/rewards`));
      const batch = strings.find((s) => s.endsWith(`s${String(step).padStart(7, '0')}.json`));
      expect(batch).toBeDefined();
      const texts = (JSON.parse(fs.readFileSync(batch!, 'utf8')) as { items: { completion: string }[] }).items.map((i) => i.completion);
      expect(texts.sort()).toEqual(samples[step]!.groups.flatMap((g) => g.completions.map((c) => c.text)).sort());
      const leaked = texts.filter((t) => t.trim() !== '' && strings.some((s) => s === t || (t.length >= 3 && s.includes(t))));
      expect({ step, leaked }).toEqual({ step, leaked: [] });
    }
    expect((await ledger(env.emulator)).active).toEqual([]);
    const steps = report(result).steps as { meanReward: number }[];
    process.stderr.write(`[python ${kind}] ${steps.length} steps; mean reward ${steps.map((s) => s.meanReward.toFixed(2)).join(' ')}\n`);
  },
);

test('long batches heartbeat: a batch three times the heartbeat timeout completes on its first attempt', async () => {
  const taskQueue = uniqueTaskQueue('py-long-batch');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-py-long-'));
  const items = path.join(dir, 'items.json');
  // 9 samples one at a time, 1 s each: 9 s of scoring under a 3 s heartbeat timeout.
  const batch = Array.from({ length: 9 }, (_, i) => ({
    key: `s0000000/p0-c${i}`,
    completion: `${i}`,
    answer: '1',
    prompt: '0+1',
    row: {},
    context: { step: 1 },
  }));
  fs.writeFileSync(items, JSON.stringify({ items: batch }));
  await pythonWorker(`${taskQueue}-py`, { ROUNDHOUSE_TEST_REWARD_DELAY: '1' });
  const call: PythonCallInput = {
    call: pythonCallOf({ name: 'digits_reward', taskQueue: `${taskQueue}-py`, heartbeatTimeoutSeconds: 3 }),
    role: 'reward',
    activity: 'roundhouse.rewards',
    request: { function: 'digits_reward', items, records: path.join(dir, 'records'), concurrency: 1 },
  };
  call.call.retry.maxAttempts = 1; // a heartbeat timeout fails the call instead of retrying it
  const workflowId = `py-long-${taskQueue}`;
  const started = Date.now();
  const result = await withWorker(taskQueue, () =>
    env.temporal.client.workflow.execute(pythonCallWorkflow, { taskQueue, workflowId, args: [call] }),
  );
  expect(Date.now() - started).toBeGreaterThan(9_000);
  expect(result).toMatchObject({ computed: 9, reused: 0 });
  const events = (await env.temporal.client.workflow.getHandle(workflowId).fetchHistory()).events!;
  expect(events.filter((e) => e.activityTaskStartedEventAttributes).map((e) => e.activityTaskStartedEventAttributes!.attempt)).toEqual([1]);
  expect(events.some((e) => e.activityTaskTimedOutEventAttributes)).toBe(false);
});

test('the Python worker SIGKILLed mid-batch: the retry on another Python worker computes only what was not recorded', async () => {
  const taskQueue = uniqueTaskQueue('py-kill');
  const input = grpoInput('together', `py-${taskQueue}`, 'digits_reward', ', concurrency: 2', 8);
  const log = callsLog();
  const slow = { ROUNDHOUSE_TEST_CALLS: log, ROUNDHOUSE_TEST_REWARD_DELAY: '0.1' };
  const first = await pythonWorker(`${input.campaignId}-py`, slow);
  const round = withWorker(taskQueue, () =>
    env.temporal.client.workflow.execute(roundWorkflow, { taskQueue, workflowId: `round-${input.campaignId}`, args: [input] }),
  );
  // Kill it in the middle of a step's batch (16 samples, 2 at a time): 8 calls into the third step.
  for (const deadline = Date.now() + 60_000; calls(log, 'reward').length < 40;) {
    if (Date.now() > deadline) throw new Error(`only ${calls(log, 'reward').length} rewards in 60 s`);
    await new Promise((r) => setTimeout(r, 20));
  }
  await first.kill();
  const before = calls(log, 'reward').length;
  expect(before % 16).not.toBe(0); // mid-batch
  await pythonWorker(`${input.campaignId}-py`, slow);
  const result = await round;
  expect(result).toMatchObject({ status: 'completed', stepsApplied: result.totalSteps });

  const logged = calls(log, 'reward');
  const keys = logged.map((c) => c.key);
  // Scored twice only what the kill caught between its reward returning and its record being written: at most the
  // calls in flight (concurrency 2), first on the killed worker, then on the other.
  const twice = [...new Set(keys.filter((k, i) => keys.indexOf(k) !== i))];
  expect(twice.length).toBeLessThanOrEqual(2);
  for (const k of twice) expect(logged.filter((c) => c.key === k).map((c) => c.pid === first.pid)).toEqual([true, false]);
  expect(new Set(keys).size).toBe(sampleCount(samplesOf(result)));
  expect(new Set(logged.map((c) => c.pid)).size).toBe(2);
  expect(logged.filter((c) => c.pid === first.pid)).toHaveLength(before);
  expect((await ledger(env.emulator)).active).toEqual([]);
  process.stderr.write(
    `[python kill] killed after ${before} rewards; ${keys.length - before} computed by the second worker, ${twice.length} of them again (in flight at the kill)\n`,
  );
});

test('a judge that fails its first calls is retried, never scored 0; past the retry limit the round fails RewardFailed with nothing active', async () => {
  const flakyQueue = uniqueTaskQueue('py-flaky');
  const flaky = grpoInput('tinker', `py-${flakyQueue}`, 'flaky_judge');
  const log = callsLog();
  await pythonWorker(`${flaky.campaignId}-py`, { ROUNDHOUSE_TEST_CALLS: log, ROUNDHOUSE_TEST_FAIL_FIRST: '3' });
  const result = await runRound(flaky, flakyQueue);
  expect(result.status).toBe('completed');
  expect(calls(log, 'judge-failure')).toHaveLength(3);
  const samples = samplesOf(result);
  const rewards = samples.flatMap((s) => s.groups.flatMap((g) => g.completions.map((c) => c.reward)));
  expect(rewards.every((r) => r === 1 || r === 2)).toBe(true); // flaky_judge's only answers: no 0 stands in for a failure
  expect(calls(log, 'reward')).toHaveLength(rewards.length);

  const brokenQueue = uniqueTaskQueue('py-broken');
  const broken = grpoInput('tinker', `py-${brokenQueue}`, 'broken_judge');
  broken.spec.round!.grpo!.reward = {
    ...broken.spec.round!.grpo!.reward,
    retry: {
      ...(
        broken.spec.round!.grpo!.reward as {
          retry: { maxAttempts: number; initialIntervalSeconds: number; maxIntervalSeconds: number; backoff: number };
        }
      ).retry,
      maxAttempts: 3,
    },
  } as never;
  const brokenLog = callsLog();
  await pythonWorker(`${broken.campaignId}-py`, { ROUNDHOUSE_TEST_CALLS: brokenLog });
  const failure = await runRound(broken, brokenQueue).catch((err: Error & { cause?: { details?: RoundResult[] } }) => err);
  expect(failure).toBeInstanceOf(Error);
  const failed = (failure as { cause?: { details?: RoundResult[] } }).cause?.details?.[0];
  expect(failed).toMatchObject({ status: 'failed', errorType: 'RewardFailed', stepsApplied: 0 });
  expect(failed!.errorMessage).toMatch(
    /reward 'broken_judge' failed on step 1, prompt \d, sample \d, line \d+: ConnectionError: judge endpoint refused/,
  );
  expect(failed!.errorMessage).toMatch(/after 3 attempts/);
  // Three attempts at the first step's batch, each scoring nothing.
  expect(calls(brokenLog, 'judge-failure').length).toBe(3 * 16);
  expect((await ledger(env.emulator)).active).toEqual([]);
});

test('a reward may say a sample is unscorable: it leaves its group, and the step records count it', async () => {
  const taskQueue = uniqueTaskQueue('py-unscorable');
  const input = grpoInput('together', `py-${taskQueue}`, 'picky_reward');
  await pythonWorker(`${input.campaignId}-py`);
  const result = await runRound(input, taskQueue);
  expect(result.status).toBe('completed');
  const steps = report(result).steps as { step: number; meanReward: number; unscorable?: number }[];
  const samples = samplesOf(result);
  samples.forEach((s, i) => {
    const all = s.groups.flatMap((g) => g.completions);
    const unscorable = all.filter((c) => c.reward === null);
    expect(unscorable.every((c) => c.text.length % 2 === 0)).toBe(true);
    expect(steps[i]!.unscorable ?? 0).toBe(unscorable.length);
    const scored = all.filter((c) => c.reward !== null).map((c) => c.reward!);
    if (scored.length) expect(steps[i]!.meanReward).toBeCloseTo(scored.reduce((a, r) => a + r, 0) / scored.length, 10);
  });
  expect(steps.reduce((a, s) => a + (s.unscorable ?? 0), 0)).toBeGreaterThan(0);
});

test('before provisioning, the round asks the Python worker: a missing function, a wrong signature, or no worker at all ends it with nothing created', async () => {
  const resourcesBefore = (await ledger(env.emulator)).resources.length;
  const outcome = async (input: RoundInput, taskQueue: string) =>
    (await runRound(input, taskQueue).catch((err: { cause?: { details?: RoundResult[] } }) => err.cause?.details?.[0])) as RoundResult;

  const q1 = uniqueTaskQueue('py-missing');
  const missing = grpoInput('together', `py-${q1}`, 'no_such_reward');
  await pythonWorker(`${missing.campaignId}-py`);
  expect(await outcome(missing, q1)).toMatchObject({
    status: 'failed',
    errorType: 'InvalidInput',
    errorMessage: expect.stringMatching(
      /round\.grpo\.reward\.name: no reward named 'no_such_reward' is registered \(registered: .*digits_reward/,
    ),
  });

  const q2 = uniqueTaskQueue('py-signature');
  const wrong = grpoInput('together', `py-${q2}`, 'two_args');
  await pythonWorker(`${wrong.campaignId}-py`);
  expect(await outcome(wrong, q2)).toMatchObject({
    status: 'failed',
    errorType: 'InvalidInput',
    errorMessage: expect.stringMatching(
      /round\.grpo\.reward\.name: two_args\(completion: str, answer: str\) -> float cannot take \(completion, answer, prompt, row\)/,
    ),
  });

  const q3 = uniqueTaskQueue('py-none');
  const nobody = grpoInput('together', `py-${q3}`, 'digits_reward', ', workerWaitSeconds: 2');
  const started = Date.now();
  expect(await outcome(nobody, q3)).toMatchObject({
    status: 'failed',
    errorType: 'PythonWorkerUnavailable',
    errorMessage: expect.stringMatching(/round\.grpo\.reward: no Python worker polled task queue '.*-py' within 2 s/),
  });
  expect(Date.now() - started).toBeLessThan(15_000);
  expect((await ledger(env.emulator)).resources.length).toBe(resourcesBefore);
});

test("a Python scorer drives evaluation and the campaign's target; a Python data policy picks round 2's rows, recorded with their sha256", async () => {
  const taskQueue = uniqueTaskQueue('py-campaign');
  const pythonQueue = `${taskQueue}-py`;
  const log = callsLog();
  // The weakest mode, asked for by name: what its describe says must reach the round's report and status.
  await pythonWorker(pythonQueue, { ROUNDHOUSE_TEST_CALLS: log, ROUNDHOUSE_SANDBOX: 'rlimits-unsafe' });
  const python = `{ kind: python, name: has_answer_digit, taskQueue: ${pythonQueue} }`;
  const { spec, dir } = ticketCampaignSpec({
    baseUrl: env.emulator.url,
    trainRows: 24,
    evalRows: 6,
    evaluation: `{ scorer: ${python} }`,
    yaml: `rounds: { max: 2, nextData: { policy: python, name: every_other_row, taskQueue: ${pythonQueue} } }`,
  });
  const campaignId = `py-campaign-${taskQueue}`;
  const input: CampaignInput = { campaignId, spec, reportRoot: testReportDir(path.join(dir, 'campaigns')) };
  const result: CampaignResult = await withWorker(taskQueue, () =>
    env.temporal.client.workflow.execute(campaignWorkflow, { taskQueue, workflowId: campaignId, args: [input] }),
  );
  expect(result.rounds.map((r) => r.status)).toEqual(['completed', 'completed']);
  const [r1, r2] = result.rounds;
  // The Python worker's sandbox mode, in the round's summary (what status shows) and its report.
  expect(result.rounds.map((r) => r.sandbox)).toEqual(['rlimits-unsafe', 'rlimits-unsafe']);
  expect(JSON.parse(fs.readFileSync(r1!.reportPath, 'utf8')).sandbox).toBe('rlimits-unsafe');
  // The round's accuracy is the Python scorer's mean score over its evaluations.
  const evaluations = JSON.parse(fs.readFileSync(r1!.reportPath!.replace(/\.json$/, '.evaluations.json'), 'utf8')) as {
    completion: string;
    expected: string;
    score: number;
    match: boolean;
  }[];
  const hasDigit = (e: { completion: string; expected: string }) =>
    [...e.expected].some((c) => /[A-Za-z0-9]/.test(c) && e.completion.includes(c));
  expect(evaluations.map((e) => e.score)).toEqual(evaluations.map((e) => (hasDigit(e) ? 1 : 0)));
  expect(r1!.accuracy).toBeCloseTo(evaluations.filter(hasDigit).length / evaluations.length, 10);
  // Round 2 trained on pool rows 1, 3, 5, … as the policy chose them, each carrying its round-1 result.
  const pool = fs
    .readFileSync(spec.data.train, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  const chosen = fs
    .readFileSync(r2!.train.path, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  expect(chosen.map((r) => Object.fromEntries(Object.entries(r).filter(([k]) => k !== 'last_match')))).toEqual(
    pool.filter((_r, i) => i % 2 === 0),
  );
  expect(chosen.every((r) => typeof r.last_match === 'boolean')).toBe(true);
  expect(r2!.train.sha256).toBe(createHash('sha256').update(fs.readFileSync(r2!.train.path)).digest('hex'));
  expect(r2!.train.rows).toBe(chosen.length);
  expect(calls(log, 'policy')).toHaveLength(1);

  // The target is the Python scorer's figure: a target round 1 meets ends the campaign there.
  const targetQueue = uniqueTaskQueue('py-target');
  const { spec: targetSpec, dir: targetDir } = ticketCampaignSpec({
    baseUrl: env.emulator.url,
    trainRows: 24,
    evalRows: 6,
    evaluation: `{ scorer: { kind: python, name: has_answer_digit, taskQueue: ${pythonQueue} } }`,
    yaml: `rounds: { max: 3, target: { metric: accuracy, atLeast: ${Math.min(r1!.accuracy!, 1)} } }`,
  });
  const targetId = `py-target-${targetQueue}`;
  const target: CampaignResult = await withWorker(targetQueue, () =>
    env.temporal.client.workflow.execute(campaignWorkflow, {
      taskQueue: targetQueue,
      workflowId: targetId,
      args: [{ campaignId: targetId, spec: targetSpec, reportRoot: testReportDir(path.join(targetDir, 'campaigns')) }],
    }),
  );
  expect(target.rounds).toHaveLength(1);
  expect(target.stopReason).toMatch(/target/);
  expect((await ledger(env.emulator)).active).toEqual([]);
});

test('with evaluation.sampling n 3 a Python scorer scores each answer once; pass@1 is the mean score, pass@3 the rows with a right answer', async () => {
  const taskQueue = uniqueTaskQueue('py-passk');
  const pythonQueue = `${taskQueue}-py`;
  const log = callsLog();
  await pythonWorker(pythonQueue, { ROUNDHOUSE_TEST_CALLS: log });
  const input = arithmeticRoundInput({
    baseUrl: env.emulator.url,
    campaignId: `py-passk-${taskQueue}`,
    limit: 8,
    yaml: `training: { epochs: 1, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64 }
sampling: { maxTokens: 3 }`,
    evaluation: `{ scorer: { kind: python, name: has_answer_digit, taskQueue: ${pythonQueue} }, sampling: { n: 3, temperature: 1 } }`,
  });

  const result = await runRound(input, taskQueue);

  expect(result.status).toBe('completed');
  const evaluations = JSON.parse(fs.readFileSync(result.evaluationsPath!, 'utf8')) as {
    line: number;
    expected: string;
    samples: { completion: string; score: number; match: boolean }[];
    correct: number;
  }[];
  const hasDigit = (completion: string, expected: string) => [...expected].some((c) => /[A-Za-z0-9]/.test(c) && completion.includes(c));
  const scores = evaluations.flatMap((e) => e.samples.map((a) => a.score));
  expect(scores).toEqual(evaluations.flatMap((e) => e.samples.map((a) => (hasDigit(a.completion, e.expected) ? 1 : 0))));
  // One call per answer, each under its own key (row and sample).
  const keys = calls(log, 'scorer').map((c) => c.key);
  expect(keys).toHaveLength(3 * evaluations.length);
  expect(new Set(keys)).toEqual(new Set(evaluations.flatMap((e) => [0, 1, 2].map((j) => `sample/l${e.line}/s${j}`))));
  expect(result.accuracy).toBeCloseTo(scores.reduce((a, x) => a + x, 0) / scores.length, 12);
  expect(result.passAtK).toEqual({ k: 3, value: expect.closeTo(evaluations.filter((e) => e.correct > 0).length / evaluations.length, 12) });
});

test('with encrypted payloads and an S3 artifact store, the Python worker decodes the calls and reads and records in the same bucket', async () => {
  const keys = `k1=${randomBytes(32).toString('base64')}`;
  const dataConverter = dataConverterFor({ encryption: parseEncryptionKeys(keys, 'ROUNDHOUSE_ENCRYPTION_KEYS') })!;
  const s3 = await startS3Server();
  try {
    Object.assign(process.env, s3.env); // the TypeScript worker's S3 client reads the usual AWS environment
    const bucket = await s3.bucket(`roundhouse-py-${Date.now()}`);
    const taskQueue = uniqueTaskQueue('py-sealed');
    const input = grpoInput('together', `py-${taskQueue}`, 'digits_reward');
    input.reportDir = joinLocation(bucket, 'campaigns', input.campaignId);
    const log = callsLog();
    await pythonWorker(`${input.campaignId}-py`, { ...s3.env, ROUNDHOUSE_ENCRYPTION_KEYS: keys, ROUNDHOUSE_TEST_CALLS: log });
    const client = new Client({ connection: env.temporal.client.connection, namespace: env.temporal.settings.namespace, dataConverter });
    const result = await withWorker(
      taskQueue,
      () => client.workflow.execute(roundWorkflow, { taskQueue, workflowId: `round-${input.campaignId}`, args: [input] }),
      { dataConverter },
    );
    expect(result).toMatchObject({ status: 'completed', stepsApplied: result.totalSteps });
    // The call's input reached Temporal sealed, and the Python worker opened it (it scored every sample).
    const history = await env.temporal.client.workflow.getHandle(`python:${input.campaignId}/r1/s0/rewards`).fetchHistory();
    const scheduled = history.events!.find((e) => e.activityTaskScheduledEventAttributes)!.activityTaskScheduledEventAttributes!;
    expect(Buffer.from(scheduled.input!.payloads![0]!.metadata!.encoding!).toString()).toBe('binary/encrypted');
    // Opened with the deployment's codec, the call's payloads name the batch and hold none of its completions.
    const strings = stringsIn(await decodedPayloads(client, `python:${input.campaignId}/r1/s0/rewards`));
    const batch = strings.find((s) => s.endsWith('s0000000.json'));
    expect(batch).toBeDefined();
    const texts = (JSON.parse((await storeFor(batch!).read(batch!))!.toString('utf8')) as { items: { completion: string }[] }).items.map(
      (i) => i.completion,
    );
    expect(texts.length).toBeGreaterThan(0);
    expect(texts.filter((t) => t.trim() !== '' && strings.some((s) => s === t || (t.length >= 3 && s.includes(t))))).toEqual([]);
    const records = await storeFor(bucket).list(result.reportPath.replace(/\.json$/, '.rewards'));
    const perSample = records.filter((r) => /\/s\d+\/p\d+-c\d+\.json$/.test(r));
    expect(perSample.length).toBe(calls(log, 'reward').length);
    expect(perSample.length).toBeGreaterThan((result.totalSteps! - 1) * 16);
  } finally {
    await s3.close();
  }
});
