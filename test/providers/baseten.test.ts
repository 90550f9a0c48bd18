import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ownerOf } from '../../emulator/engine';
import { BASETEN_RUN_DEFAULTS } from '../../providers/baseten/control';
import { BasetenProvider } from '../../providers/baseten/client';
import { SAMPLER_CONCURRENCY } from '../../providers/baseten/sampling';
import { fromLoopsLogprobs, toLoopsDatum } from '../../providers/baseten/wire';
import { startCaptureProxy } from '../helpers/capture-proxy';
import { basetenProvider, ledger, raw, setFaults, startTestEmulator, testApiKey, type RunningEmulator } from '../helpers/emulator';

/** What only the Baseten provider does (the shared behaviour is in contract.test.ts). */

const MODEL = 'roundhouse/tiny-chat';
let emulator: RunningEmulator;

beforeAll(async () => {
  emulator = await startTestEmulator({ basetenPollHoldMs: 2_000 });
});

afterAll(async () => {
  await emulator.close();
});

afterEach(async () => {
  await setFaults(emulator, {});
});

async function ownLedger(apiKey: string) {
  const l = await ledger(emulator);
  const resources = l.resources.filter((r) => r.owner === ownerOf(apiKey));
  return { resources, active: l.active.filter((id) => resources.some((r) => r.id === id)) };
}

test('a lost answer to a run create is reconciled by listing the runs of its session: exactly one run, later deactivated, none left active', async () => {
  const apiKey = testApiKey();
  const provider = basetenProvider(emulator, apiKey);
  await setFaults(emulator, { rules: [{ kind: 'lose-response', method: 'POST', path: '/v1/loops/trainers$', max: 1 }] });

  const run = await provider.provision({ model: MODEL, ownerTag: 'wf-round-7', generatorReplicas: 0 });

  const { json } = await raw(emulator, 'GET', `/v1/loops/runs/${run.id}`, { apiKey, scheme: 'Api-Key' });
  const sessionRuns = (await raw(emulator, 'GET', '/v1/loops/runs', { apiKey, scheme: 'Api-Key' })).json.runs.filter(
    (r: any) => r.session_id === json.run.session_id,
  );
  expect(sessionRuns.map((r: any) => [r.id, r.name])).toEqual([[run.id, 'wf-round-7']]);
  expect((await ownLedger(apiKey)).resources).toEqual([
    expect.objectContaining({ id: run.id, ownerTag: 'wf-round-7', dialect: 'baseten' }),
  ]);

  await provider.waitReady(run.id, { pollIntervalMs: 10 });
  await provider.deactivate(run.id);
  const after = await ownLedger(apiKey);
  expect(after.resources).toHaveLength(1);
  expect(after.active).toEqual([]);
  await provider.close();
});

test('the owner tag travels as the run name: listing owned resources returns it', async () => {
  const provider = basetenProvider(emulator);
  const run = await provider.provision({ model: MODEL, ownerTag: 'campaign-a/round-2' });
  expect(await provider.listOwnedResources({ activeOnly: true })).toEqual([
    expect.objectContaining({ id: run.id, ownerTag: 'campaign-a/round-2', model: MODEL }),
  ]);
  await provider.deactivate(run.id);
  await provider.close();
});

test('deactivating a run releases every run of its Loops session', async () => {
  const apiKey = testApiKey();
  const provider = basetenProvider(emulator, apiKey);
  const first = await provider.provision({ model: MODEL, ownerTag: 'wf-dup' });
  const sessionId = (await raw(emulator, 'GET', `/v1/loops/runs/${first.id}`, { apiKey })).json.run.session_id;
  // A second run in the same session (another base model, so it does not replace the first).
  const second = await raw(emulator, 'POST', '/v1/loops/trainers', {
    apiKey,
    body: { session_id: sessionId, base_model: 'Qwen/Qwen3-8B', name: 'wf-dup' },
  });
  expect(second.status).toBe(200);

  await provider.deactivate(first.id);

  for (const id of [first.id, second.json.run.id]) {
    expect((await raw(emulator, 'GET', `/v1/loops/runs/${id}`, { apiKey })).json.run.status.name).toBe('INACTIVE');
  }
  expect((await ownLedger(apiKey)).active).toEqual([]);
  await provider.close();
});

test('listings that come in pages are followed to the end: every run is listed, and a session released whole', async () => {
  const apiKey = testApiKey();
  const provider = basetenProvider(emulator, apiKey);
  await setFaults(emulator, { listPageSize: 2 });
  const first = await provider.provision({ model: MODEL, ownerTag: 'wf-paged' });
  const sessionId = (await raw(emulator, 'GET', `/v1/loops/runs/${first.id}`, { apiKey })).json.run.session_id;
  const others = [];
  for (const model of ['Qwen/Qwen3-8B', 'Qwen/Qwen3-4B-Instruct-2507', 'meta-llama/Llama-3.1-8B-Instruct']) {
    const created = await raw(emulator, 'POST', '/v1/loops/trainers', {
      apiKey,
      body: { session_id: sessionId, base_model: model, name: 'wf-paged' },
    });
    expect(created.status).toBe(200);
    others.push(created.json.run.id as string);
  }
  const page = await raw(emulator, 'GET', '/v1/loops/runs', { apiKey });
  expect(page.json.runs).toHaveLength(2);
  expect(page.json.next_page_token).toBe(2);

  expect((await provider.listOwnedResources({ activeOnly: true })).map((r) => r.id).sort()).toEqual([first.id, ...others].sort());
  await provider.deactivate(others[2]!); // the newest: the session's other runs are on the second page
  expect((await ownLedger(apiKey)).active).toEqual([]);
  await provider.close();
});

test("a resent sampler create the service applied twice leaves no sampler billing: the run's release stops the duplicate too", async () => {
  const apiKey = testApiKey();
  const provider = basetenProvider(emulator, apiKey);
  const run = await provider.provision({ model: MODEL, ownerTag: 'wf-sampler-dup', generatorReplicas: 0 });
  await provider.waitReady(run.id, { pollIntervalMs: 10 });
  const session = await provider.openSession({ resourceId: run.id, loraRank: 8, seed: 7 });
  // The paired sampler's create loses its answer and is sent again; the service applies both.
  await setFaults(emulator, {
    rules: [
      { kind: 'lose-response', method: 'POST', path: '/v1/loops/samplers$', max: 1 },
      { kind: 'duplicate-create', max: 1 },
    ],
  });
  const samples = await provider.awaitOperation(
    await provider.submitSample(session.id, 'dup/sample', [[1, 2, 3]], { maxTokens: 2, temperature: 0 }),
  );
  expect(samples).toHaveLength(1);
  const stray = await provider.listStrayResources();
  expect(stray).toEqual([
    expect.objectContaining({ ownerTag: 'wf-sampler-dup', state: 'ready', providerStatus: 'SAMPLER/ACTIVE', model: MODEL }),
  ]);
  expect((await ownLedger(apiKey)).active.sort()).toEqual([run.id, stray[0]!.id].sort());

  await provider.deactivate(run.id);
  expect((await ownLedger(apiKey)).active).toEqual([]);
  expect(await provider.listStrayResources()).toEqual([]);
  await provider.close();
});

test("the run is created with the round's seed, max_seq_len and lora_rank, and the documented scale-down default of 900 s; the spec's run settings as given", async () => {
  const apiKey = testApiKey();
  const provider = basetenProvider(emulator, apiKey);
  const created = async (id: string) => (await raw(emulator, 'GET', `/v1/loops/runs/${id}`, { apiKey, scheme: 'Api-Key' })).json.run;

  // tiny-chat takes at most 2048 tokens: a longer training.maxSeqLen is sent as the model's maximum.
  const plain = await provider.provision({ model: MODEL, ownerTag: 'wf-fields', trainer: { seed: 17, maxSeqLen: 4096, loraRank: 8 } });
  expect(await created(plain.id)).toMatchObject({
    seed: 17,
    max_seq_len: 2048,
    lora_rank: 8,
    scale_down_delay_seconds: 900,
    availability_model: 'dedicated',
    replicas: 1,
  });

  const spot = await provider.provision({
    model: MODEL,
    ownerTag: 'wf-fields-spot',
    trainer: { seed: 3, maxSeqLen: 512, loraRank: 16 },
    baseten: { availabilityModel: 'spot', replicas: 2, scaleDownDelaySeconds: 120 },
  });
  expect(await created(spot.id)).toMatchObject({
    seed: 3,
    max_seq_len: 512,
    lora_rank: 16,
    scale_down_delay_seconds: 120,
    availability_model: 'spot',
    replicas: 2,
  });
  await provider.deactivate(plain.id);
  await provider.deactivate(spot.id);
  await provider.close();
});

test("a run to reuse that is not the team's, or is of another base model, is refused naming provider.baseten.reuseFromRunId before anything is created; a good one is reused", async () => {
  const apiKey = testApiKey();
  const provider = basetenProvider(emulator, apiKey);
  const other = await provider.provision({ model: 'Qwen/Qwen3-8B', ownerTag: 'wf-other-model' });
  const before = (await ownLedger(apiKey)).resources.length;
  const reusing = (reuseFromRunId: string) =>
    provider.provision({ model: MODEL, ownerTag: 'wf-reuse', baseten: { ...BASETEN_RUN_DEFAULTS, reuseFromRunId } });
  await expect(reusing('nosuchrun')).rejects.toMatchObject({
    errorClass: 'non-retryable',
    message: expect.stringMatching(/^provider\.baseten\.reuseFromRunId: run nosuchrun is not a run of this team/),
  });
  await expect(reusing(other.id)).rejects.toMatchObject({
    errorClass: 'non-retryable',
    message: expect.stringMatching(/provider\.baseten\.reuseFromRunId: .* is a run of Qwen\/Qwen3-8B, not roundhouse\/tiny-chat/),
  });
  expect((await ownLedger(apiKey)).resources).toHaveLength(before);

  const warm = await provider.provision({ model: MODEL, ownerTag: 'wf-warm' });
  const reused = await reusing(warm.id);
  expect((await raw(emulator, 'GET', `/v1/loops/runs/${reused.id}`, { apiKey, scheme: 'Api-Key' })).json.run.reused_from_run_id).toBe(
    warm.id,
  );
  for (const id of [other.id, warm.id, reused.id]) await provider.deactivate(id);
  await provider.close();
});

test('a hundred prompts in one sample request reach the sampler a bounded number at a time, and every one is answered', async () => {
  const proxy = await startCaptureProxy(emulator.url);
  const provider = new BasetenProvider({ baseUrl: proxy.url, apiKey: testApiKey(), pollIntervalMs: 5, maxPollIntervalMs: 50 });
  try {
    const run = await provider.provision({ model: MODEL, ownerTag: 'wf-sample-bound', generatorReplicas: 0 });
    await provider.waitReady(run.id, { pollIntervalMs: 10 });
    const session = await provider.openSession({ resourceId: run.id, loraRank: 8, seed: 7 });
    const prompts = Array.from({ length: 100 }, (_v, i) => [1 + (i % 7), 2, 3]);

    const samples = await provider.awaitOperation(
      await provider.submitSample(session.id, 'bound/sample', prompts, { maxTokens: 2, temperature: 0 }, { numSamples: 2 }),
    );

    expect(samples).toHaveLength(100);
    expect(samples.every((s) => s.sequences.length === 2)).toBe(true);
    const sent = proxy.requests.filter((r) => r.method === 'POST' && /\/sample$/.test(r.path));
    expect(sent).toHaveLength(100);
    const peak = Math.max(...sent.map((r) => r.openOnArrival));
    console.log(`sampler requests open at once: at most ${peak} (bound ${SAMPLER_CONCURRENCY})`);
    expect(peak).toBeLessThanOrEqual(SAMPLER_CONCURRENCY);
    expect(peak).toBeGreaterThan(1); // still concurrent, not one by one
    await provider.deactivate(run.id);
  } finally {
    await provider.close();
    await proxy.close();
  }
});

test('a run idle past its scale-down delay stops billing and reads as stopped, its session as expired', async () => {
  const provider = basetenProvider(emulator);
  const run = await provider.provision({
    model: MODEL,
    ownerTag: 'wf-idle',
    baseten: { ...BASETEN_RUN_DEFAULTS, scaleDownDelaySeconds: 1 },
  });
  await provider.waitReady(run.id, { pollIntervalMs: 10 });
  await new Promise((r) => setTimeout(r, 1_300));
  expect(await provider.getResource(run.id)).toMatchObject({ state: 'stopped', providerStatus: 'INACTIVE/SCALED_TO_ZERO' });
  expect(await provider.getSession(run.id)).toMatchObject({ state: 'expired' });
  const billed = (await ledger(emulator)).resources.find((r) => r.id === run.id)!.gpuSeconds;
  expect(billed).toBeGreaterThanOrEqual(1); // at least the delay
  await new Promise((r) => setTimeout(r, 200));
  expect((await ledger(emulator)).resources.find((r) => r.id === run.id)!.gpuSeconds).toBe(billed); // and no more
  await provider.close();
});

test('a neutral datum goes on the wire in Baseten convention: whole sequence in, caller-shifted targets, -100 where nothing trains', () => {
  const datum = { modelInput: [10, 11, 12, 40], targetTokens: [11, 12, 40, 41], weights: [0, 0, 1, 1] };
  expect(toLoopsDatum(datum, 0)).toEqual({
    model_input: { chunks: [{ type: 'encoded_text', tokens: [10, 11, 12, 40, 41] }] },
    loss_fn_inputs: { target_tokens: { data: [-100, -100, 40, 41, -100], dtype: 'int64', shape: [5] } },
    routed_experts_ref: null,
  });
  // Weights other than 0/1 travel as a weights tensor.
  expect(toLoopsDatum({ ...datum, weights: [0, 0, 0.5, 1] }, 0).loss_fn_inputs).toMatchObject({ weights: { data: [0, 0, 0.5, 1, 0] } });
  // Logprobs come back one per position (masked = null) and are re-aligned: last position dropped, null → 0.
  expect(fromLoopsLogprobs([null, null, -0.5, -0.25, null])).toEqual([0, 0, -0.5, -0.25]);
});

test('an emulator restarted on the same state folder keeps runs, their trainers and finished operations (results rendered alike)', async () => {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-baseten-state-'));
  const apiKey = testApiKey();
  const data = [{ modelInput: [1, 2, 3], targetTokens: [2, 3, 4], weights: [0, 1, 1] }];
  const first = await startTestEmulator({ stateDir });
  const p1 = basetenProvider(first, apiKey);
  const run = await p1.provision({ model: MODEL, ownerTag: 'persist' });
  await p1.waitReady(run.id, { pollIntervalMs: 10 });
  const session = await p1.openSession({ resourceId: run.id, loraRank: 4 });
  const fb = await p1.awaitOperation(await p1.submitForwardBackward(session.id, 'p/fb', data));
  await p1.awaitOperation(await p1.submitOptimStep(session.id, 'p/opt', { learningRate: 0.01 }));
  const ckpt = await p1.awaitOperation(await p1.submitTrainingCheckpoint(session.id, 'p/ckpt'));
  await p1.close();
  await first.close();

  const second = await startTestEmulator({ stateDir });
  try {
    const p2 = basetenProvider(second, apiKey);
    expect(await p2.getResource(run.id)).toMatchObject({ state: 'ready', ownerTag: 'persist' });
    expect(await p2.getSession(session.id)).toMatchObject({ state: 'running', step: 1, trainingCheckpointIds: [ckpt.checkpointId] });
    // Keyed operations are still known, and their results read as before (a loss that is a sum).
    expect(await p2.awaitOperation(await p2.submitForwardBackward(session.id, 'p/fb', data))).toEqual(fb);
    expect(await p2.awaitOperation(await p2.submitOptimStep(session.id, 'p/opt', { learningRate: 0.01 }))).toEqual({ step: 1 });
    expect(
      await p2.openSession({ resourceId: run.id, loraRank: 4, fromCheckpoint: { id: ckpt.checkpointId, loadOptimizer: true } }),
    ).toMatchObject({ step: 1 });
    await p2.deactivate(run.id);
    expect((await ledger(second)).active).toEqual([]);
    await p2.close();
  } finally {
    await second.close();
    fs.rmSync(stateDir, { recursive: true, force: true });
  }
});

test('GRPO is refused as UNSUPPORTED (non-retryable) before anything is sent: Baseten Loops has no GRPO loss', async () => {
  const provider = basetenProvider(emulator);
  const datum = { modelInput: [10, 11, 40], targetTokens: [11, 40, 41], weights: [0, 1, 1], logprobs: [0, -1, -1], advantages: [0, 1, 1] };
  await expect(provider.submitForwardBackward('run-unused', 'grpo/fb', [datum], { loss: { type: 'grpo' } })).rejects.toMatchObject({
    code: 'UNSUPPORTED',
    errorClass: 'non-retryable',
  });
  await provider.close();
});
