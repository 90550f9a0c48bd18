import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { HttpClient } from '../../providers/http';
import { TINKER_DEFAULT_BASE_URL, TinkerProvider } from '../../providers/tinker/client';
import type { Datum } from '../../providers/types';
import { ledger, setFaults, startTestEmulator, type RunningEmulator } from '../helpers/emulator';

// The Tinker client against a self-hosted Tinker-API server: the emulator's `skyrl` flavour, SkyRL 0.4.0's server as
// scripts/conformance/skyrl/FINDINGS.md captured it. Each case is one item of issue #30, over real HTTP.

const MODEL = 'roundhouse/tiny-chat';
const TTL_MS = 2_500; // the server's session timeout (SkyRL's default: 300 s); 12 heartbeats wide, so a loaded machine keeps it
const batch: Datum[] = [
  { modelInput: [10, 11, 12, 40], targetTokens: [11, 12, 40, 41], weights: [0, 0, 1, 1] },
  { modelInput: [20, 21, 50], targetTokens: [21, 50, 51], weights: [0, 1, 2] },
];

let emulator: RunningEmulator;

beforeAll(async () => {
  emulator = await startTestEmulator({ tinkerFlavor: 'skyrl', tinkerSessionTtlMs: TTL_MS });
});

afterAll(async () => {
  await emulator.close();
});

afterEach(async () => {
  await setFaults(emulator, {});
});

/** A worker's client; SkyRL never checks the key (it is not a `tml-` one), the emulator keeps callers apart by it. */
const provider = (apiKey = `self-hosted-${randomUUID()}`) =>
  new TinkerProvider({ baseUrl: emulator.url, apiKey, heartbeatMs: 200, initialRetryDelayMs: 5, maxRetryDelayMs: 50 });

async function trainedModel(tinker: TinkerProvider, steps = 1) {
  const resource = await tinker.provision({ model: MODEL, ownerTag: 'self-hosted' });
  await tinker.waitReady(resource.id);
  const session = await tinker.openSession({ resourceId: resource.id, loraRank: 8, seed: 3 });
  for (let step = 1; step <= steps; step++) {
    await tinker.awaitOperation(await tinker.submitForwardBackward(session.id, `fb/${step}`, batch));
    await tinker.awaitOperation(await tinker.submitOptimStep(session.id, `opt/${step}`, { learningRate: 0.02 }));
  }
  return { resource, session };
}

const active = async () => (await ledger(emulator)).active;
const entry = async (modelId: string) => (await ledger(emulator)).sessions.find((s) => s.id === modelId)!;

test('#30.1–2: with no session routes a trainer is provisioned and held, its model trains under the id the server gave it (loss computed), and its release unloads it', async () => {
  const tinker = provider();
  const { resource, session } = await trainedModel(tinker, 0);
  expect(resource.id).toMatch(/^session_[0-9a-f]{8}$/);
  expect(session.id).toMatch(/^model_[0-9a-f]{8}$/); // the server's id, not `<session>:train:0`
  const fb = await tinker.awaitOperation(await tinker.submitForwardBackward(session.id, 'fb', batch, { returnLogprobs: true }));
  // No loss:sum in the result: the loss is the sum of its elementwise losses, −Σ w·logprob.
  const weighted = fb.logprobs!.flatMap((row, i) => row.map((lp, k) => batch[i]!.weights[k]! * lp));
  expect(fb.loss).toBeGreaterThan(0);
  expect(fb.loss).toBeCloseTo(-weighted.reduce((a, b) => a + b, 0), 4);
  expect(await tinker.awaitOperation(await tinker.submitOptimStep(session.id, 'opt', { learningRate: 0.02 }))).toEqual({ step: 1 });
  expect(await entry(session.id)).toMatchObject({ optimizerSteps: 1, step: 1 });
  expect((await tinker.listOwnedResources({ activeOnly: true })).map((r) => r.id)).toEqual([resource.id]);
  expect((await tinker.listSessions(resource.id)).map((s) => s.id)).toEqual([session.id]);

  await new Promise((r) => setTimeout(r, 1.5 * TTL_MS)); // heartbeated: the server keeps it past its timeout
  expect(await tinker.getSession(session.id)).toMatchObject({ state: 'running', step: 1 });
  expect(await active()).toContain(session.id);

  expect(await tinker.deactivate(resource.id)).toMatchObject({ state: 'stopped' }); // no finish route: its models unloaded
  expect(await active()).not.toContain(session.id);
  expect(await tinker.getResource(resource.id)).toMatchObject({ state: 'stopped' });
  await tinker.close();
});

test('#30.2: a create_model whose answer was lost makes a second model (SkyRL does not deduplicate); the one nobody can name goes with the session’s expiry after its release', async () => {
  const tinker = provider();
  const resource = await tinker.provision({ model: MODEL, ownerTag: 'lost-create' });
  await tinker.waitReady(resource.id);
  const before = new Set(await active());
  await setFaults(emulator, { rules: [{ kind: 'lose-response', method: 'POST', path: '/api/v1/create_model$', max: 1 }] });
  const session = await tinker.openSession({ resourceId: resource.id, loraRank: 8 });
  const made = (await active()).filter((id) => !before.has(id));
  expect(made).toHaveLength(2);
  const leaked = made.find((id) => id !== session.id)!;
  await tinker.deactivate(resource.id);
  expect(await active()).not.toContain(session.id); // unloaded at once
  expect(await active()).toContain(leaked); // until the server's timeout passes with no heartbeat
  const released = Date.now();
  while ((await active()).includes(leaked) && Date.now() - released < 3 * TTL_MS) await new Promise((r) => setTimeout(r, 50));
  expect(await active()).not.toContain(leaked);
  expect(Date.now() - released).toBeGreaterThanOrEqual(TTL_MS - 250); // the last heartbeat was at most one interval before
  await tinker.close();
});

test('#30.2: a worker that dies without releasing its session: the server expires it, with its model (the session was heartbeated at once: SkyRL never expires one that never was)', async () => {
  const dying = new TinkerProvider({ baseUrl: emulator.url, apiKey: `self-hosted-${randomUUID()}`, heartbeatMs: 60_000 });
  const resource = await dying.provision({ model: MODEL, ownerTag: 'dies' });
  await dying.waitReady(resource.id);
  const session = await dying.openSession({ resourceId: resource.id, loraRank: 8 });
  expect(await active()).toContain(session.id);
  await dying.close(); // its timers stop, as a killed worker's do; nothing is released
  const died = Date.now();
  while ((await active()).includes(session.id) && Date.now() - died < 3 * TTL_MS) await new Promise((r) => setTimeout(r, 50));
  expect(await active()).not.toContain(session.id);
});

test('#30.3: failures keep the server’s reason and are classified: capacity retryable, a bad rank not, a lost model reopened; FastAPI 422 lists read; a 409 is not retried', async () => {
  const apiKey = `self-hosted-${randomUUID()}`;
  const tinker = provider(apiKey);
  const resource = await tinker.provision({ model: MODEL, ownerTag: 'failures' });
  await tinker.waitReady(resource.id);
  await setFaults(emulator, { rules: [{ kind: 'capacity-timeout', durationMs: 20, max: 1 }] });
  await expect(tinker.openSession({ resourceId: resource.id, loraRank: 8 })).rejects.toMatchObject({
    code: 'MODEL_NOT_CREATED',
    errorClass: 'retryable',
    providerCode: 'RESOURCE_EXHAUSTED',
    message: expect.stringContaining('Maximum number of LoRA adapters (32) reached'),
  });
  await expect(tinker.openSession({ resourceId: resource.id, loraRank: 64 })).rejects.toMatchObject({
    errorClass: 'non-retryable',
    status: 400,
    message: expect.stringContaining('LoRA rank 64 must be between 1 and 32'),
  });

  const session = await tinker.openSession({ resourceId: resource.id, loraRank: 8 });
  await setFaults(emulator, { rules: [{ kind: 'session-expire', operation: 'optim-step', max: 1 }] });
  await tinker.awaitOperation(await tinker.submitForwardBackward(session.id, 'fb', batch));
  await expect(tinker.awaitOperation(await tinker.submitOptimStep(session.id, 'opt', { learningRate: 0.01 }))).rejects.toMatchObject({
    errorClass: 'needs-reconcile',
    providerCode: 'SESSION_NOT_ACTIVE',
    message: expect.stringContaining(`Model ${session.id} not loaded`),
  });
  // The server cannot say whether the session expired with it: the round takes a new one.
  expect(await tinker.getResource(resource.id)).toMatchObject({ state: 'failed' });
  await tinker.deactivate(resource.id);

  const http = new HttpClient({ baseUrl: emulator.url, apiKey, authHeader: 'x-api-key', initialRetryDelayMs: 5 });
  const save = (path: string) =>
    http.request({
      method: 'POST',
      path: '/api/v1/save_weights',
      body: { model_id: session.id, path },
      schema: z.unknown(),
      replaySafe: true,
    });
  await expect(save('tickets-v1.2')).rejects.toMatchObject({
    status: 422,
    message: expect.stringContaining("body.path: String should match pattern '^[a-zA-Z0-9_-]+$' (got 'tickets-v1.2')"),
  });
  const other = await trainedModel(tinker, 0);
  const saveOther = (path: string) =>
    http.request({
      method: 'POST',
      path: '/api/v1/save_weights',
      body: { model_id: other.session.id, path },
      schema: z.unknown(),
      replaySafe: true,
    });
  await saveOther('taken');
  await expect(saveOther('taken')).rejects.toMatchObject({
    status: 409,
    errorClass: 'non-retryable', // conclusive, answered at once (not after five retries)
    message: expect.stringContaining(`Checkpoint 'taken' already exists for model '${other.session.id}'`),
  });
  await http.close();
  await tinker.deactivate(other.resource.id);
  await tinker.close();
});

test('#30.4: checkpoint names from a dotted campaign are taken; a sampler path answered short is kept in the listing’s form; deletes take either form; prompt logprobs line up', async () => {
  const tinker = provider();
  const { resource, session } = await trainedModel(tinker);
  const training = await tinker.awaitOperation(await tinker.submitTrainingCheckpoint(session.id, 'tickets-v1.2/round-1/step-1/ckpt'));
  expect(training).toMatchObject({
    step: 1,
    checkpointId: expect.stringMatching(new RegExp(`^tinker://${session.id}/weights/[A-Za-z0-9_-]+-st1$`)),
  });
  const sampler = await tinker.awaitOperation(await tinker.submitSamplerWeights(session.id, 'tickets-v1.2/round-1/sampler'));
  expect(sampler.checkpointId).toMatch(new RegExp(`^tinker://${session.id}/sampler_weights/[A-Za-z0-9_-]+-st1$`));
  const prompt = [10, 11, 12, 13, 14];
  const [result] = await tinker.awaitOperation(
    await tinker.submitSample(session.id, 'sample', [prompt], { maxTokens: 2, temperature: 0 }, { promptLogprobs: true }),
  );
  expect(result!.promptLogprobs).toHaveLength(prompt.length); // SkyRL answers one short: padded where none precedes
  expect(result!.promptLogprobs![0]).toBe(0);

  const names = async () => (await ledger(emulator)).checkpoints.filter((c) => c.resourceId === session.id).map((c) => c.name);
  expect(await names()).toHaveLength(2);
  await tinker.deleteCheckpoint(sampler.checkpointId.replace('/sampler_weights/', '/')); // SkyRL's short form, as answered
  await tinker.deleteCheckpoint(training.checkpointId);
  await tinker.deleteCheckpoint(training.checkpointId); // gone already: fine
  expect(await names()).toEqual([]);
  await tinker.deactivate(resource.id);
  await tinker.close();
});

test('#30.5: a model from a checkpoint is created and loaded as its first request, with the step and optimizer state; the server is remembered as wanting it so', async () => {
  const tinker = provider();
  // Counts the requests to these routes (a rule that never fires still counts what it sees).
  const routes = ['load_weights', 'create_model', 'weights_info'];
  await setFaults(emulator, {
    rules: routes.map((route) => ({ kind: 'delay', method: 'POST', path: `/api/v1/${route}$`, rate: 0, max: 1000, delayMs: 0 })),
  });
  const requests = async () => {
    const { fired } = (await (await fetch(`${emulator.url}/_emulator/faults`)).json()) as { fired: { seen: number }[] };
    return Object.fromEntries(routes.map((route, i) => [route, fired[i]!.seen]));
  };
  const { resource, session } = await trainedModel(tinker, 3);
  const ckpt = await tinker.awaitOperation(await tinker.submitTrainingCheckpoint(session.id, 'resume/ckpt'));
  await tinker.awaitOperation(await tinker.submitForwardBackward(session.id, 'fb/4', batch));
  await tinker.awaitOperation(await tinker.submitOptimStep(session.id, 'opt/4', { learningRate: 0.02 }));
  const probe = async (id: string, key: string) =>
    (await tinker.awaitOperation(await tinker.submitForwardBackward(id, key, batch, { forwardOnly: true }))).loss;
  const original = await probe(session.id, 'probe');
  await tinker.closeSession(session.id);

  const resumed = await tinker.openSession({
    resourceId: resource.id,
    loraRank: 8,
    fromCheckpoint: { id: ckpt.checkpointId, loadOptimizer: true },
  });
  expect(resumed).toMatchObject({ state: 'running', step: 3 });
  // A load addressed to the session (refused, 422); the checkpoint's rank, a create, and the load as its first request.
  expect(await requests()).toEqual({ load_weights: 2, create_model: 2, weights_info: 1 });
  await tinker.awaitOperation(await tinker.submitForwardBackward(resumed.id, 'resumed/fb/4', batch));
  expect(await tinker.awaitOperation(await tinker.submitOptimStep(resumed.id, 'resumed/opt/4', { learningRate: 0.02 }))).toEqual({
    step: 4,
  });
  expect(await probe(resumed.id, 'resumed/probe')).toBeCloseTo(original, 4); // Adam's moments came with it
  expect(await entry(resumed.id)).toMatchObject({ step: 4, resumedFromCheckpoint: expect.any(String) });

  const weightsOnly = await tinker.openSession({
    resourceId: resource.id,
    loraRank: 8,
    fromCheckpoint: { id: ckpt.checkpointId, loadOptimizer: false },
  });
  expect(weightsOnly.step).toBe(0);
  expect(await requests()).toEqual({ load_weights: 3, create_model: 3, weights_info: 2 }); // straight to the way that works
  await tinker.deactivate(resource.id);
  expect(await active()).not.toContain(resumed.id);
  expect(await active()).not.toContain(weightsOnly.id);
  await tinker.close();
});

test('a save whose answer was lost: the resend’s 409 means it exists, found in the listing; saved once', async () => {
  const tinker = provider();
  const { resource, session } = await trainedModel(tinker);
  await setFaults(emulator, { rules: [{ kind: 'lose-response', method: 'POST', path: '/api/v1/save_weights$', max: 1 }] });
  const saved = await tinker.awaitOperation(await tinker.submitTrainingCheckpoint(session.id, 'lost/ckpt'));
  expect(saved).toMatchObject({ step: 1, checkpointId: expect.stringContaining(`tinker://${session.id}/weights/`) });
  expect(
    (await ledger(emulator)).checkpoints.filter((c) => c.resourceId === session.id).map((c) => `tinker://${session.id}/weights/${c.name}`),
  ).toEqual([saved.checkpointId]);
  await tinker.deactivate(resource.id);
  await tinker.close();
});

test('keys: a self-hosted server takes whatever key it was given; the hosted service still wants tml-', () => {
  expect(() => new TinkerProvider({ baseUrl: emulator.url, apiKey: 'skyrl-anything' })).not.toThrow();
  expect(() => new TinkerProvider({ baseUrl: TINKER_DEFAULT_BASE_URL, apiKey: 'skyrl-anything' })).toThrow(/starts with 'tml-'/);
});
