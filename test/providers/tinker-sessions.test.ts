import { request } from 'undici';
import { ledger, startTestEmulator, testTinkerKey, type RunningEmulator } from '../helpers/emulator';
import { TinkerProvider } from '../../providers/tinker/client';
import type { Datum } from '../../providers/types';

// Tinker ends a session whose client stopped heartbeating, and its models with it. The provider heartbeats every
// session it uses; a session nobody heartbeats expires, and the provider then reads it as failed and its model as lost.

const MODEL = 'roundhouse/tiny-chat';
const datum: Datum = { modelInput: [10, 11, 12, 40], targetTokens: [11, 12, 40, 41], weights: [0, 0, 1, 1] };
let emulator: RunningEmulator;

beforeAll(async () => {
  // Generous against the emulator's own pauses (a model's creation holds its event loop for a moment) and a loaded
  // machine: at 1.5 s a heartbeated session expired once in a full CI run beside other jobs.
  emulator = await startTestEmulator({ tinkerSessionTtlMs: 3_000 });
});

afterAll(async () => {
  await emulator.close();
});

const provider = (apiKey: string, heartbeatMs: number) =>
  new TinkerProvider({ baseUrl: emulator.url, apiKey, heartbeatMs, initialRetryDelayMs: 5, maxRetryDelayMs: 50 });

test('a session the provider heartbeats outlives the service’s expiry many times over; once its heartbeats stop, it expires with its model', async () => {
  const key = testTinkerKey();
  const beating = provider(key, 100);
  const resource = await beating.provision({ model: MODEL, ownerTag: 'beating' });
  const session = await beating.openSession({ resourceId: resource.id, loraRank: 8 });
  await new Promise((r) => setTimeout(r, 7_500)); // 2.5 expiry periods
  expect(await beating.getResource(resource.id)).toMatchObject({ state: 'ready', providerStatus: 'active' });
  await beating.awaitOperation(await beating.submitForwardBackward(session.id, 'alive/fb', [datum]));
  expect((await ledger(emulator)).active).toContain(session.id);

  // A worker that dies stops heartbeating (close() stops the timers): the service expires the session.
  await beating.close();
  await new Promise((r) => setTimeout(r, 4_500));
  const observer = provider(key, 60_000);
  expect(await observer.getResource(resource.id)).toMatchObject({ state: 'failed', providerStatus: 'failed' });
  expect((await ledger(emulator)).active).not.toContain(session.id);
  expect(await observer.getSession(session.id)).toMatchObject({ state: 'failed' });
  // Finishing it anyway (the round's cleanup, or the reaper) is harmless.
  await expect(observer.deactivate(resource.id)).resolves.toMatchObject({ id: resource.id });
  await observer.close();
});

test('checkpoints can be deleted (what retention uses): gone from the run’s listing, not loadable, and deleting again is fine', async () => {
  const tinker = provider(testTinkerKey(), 60_000);
  const resource = await tinker.provision({ model: MODEL, ownerTag: 'deletes' });
  const session = await tinker.openSession({ resourceId: resource.id, loraRank: 8 });
  await tinker.awaitOperation(await tinker.submitForwardBackward(session.id, 'del/fb', [datum]));
  await tinker.awaitOperation(await tinker.submitOptimStep(session.id, 'del/opt', { learningRate: 0.01 }));
  const kept = await tinker.awaitOperation(await tinker.submitTrainingCheckpoint(session.id, 'del/keep'));
  const dropped = await tinker.awaitOperation(await tinker.submitTrainingCheckpoint(session.id, 'del/drop'));
  const sampler = await tinker.awaitOperation(await tinker.submitSamplerWeights(session.id, 'del/sampler'));
  expect((await tinker.getSession(session.id)).trainingCheckpointIds).toEqual([kept.checkpointId, dropped.checkpointId]);

  await tinker.deleteCheckpoint(dropped.checkpointId);
  await tinker.deleteCheckpoint(sampler.checkpointId);
  expect((await tinker.getSession(session.id)).trainingCheckpointIds).toEqual([kept.checkpointId]);
  expect((await ledger(emulator)).checkpoints.filter((c) => c.resourceId === session.id)).toHaveLength(1);
  await expect(
    tinker.openSession({ resourceId: resource.id, loraRank: 8, fromCheckpoint: { id: dropped.checkpointId, loadOptimizer: true } }),
  ).rejects.toMatchObject({ status: 404 });
  await expect(tinker.deleteCheckpoint(dropped.checkpointId)).resolves.toBeUndefined();
  const resumed = await tinker.openSession({
    resourceId: resource.id,
    loraRank: 8,
    fromCheckpoint: { id: kept.checkpointId, loadOptimizer: true },
  });
  expect(resumed.step).toBe(1);
  await tinker.deactivate(resource.id);
  await tinker.close();
});

test('a checkpoint named before names kept to [A-Za-z0-9_-] (a campaign’s `.` in it) is still parsed and deleted', async () => {
  const apiKey = testTinkerKey();
  const tinker = provider(apiKey, 100); // heartbeated: this emulator expires a silent session in 3 s
  const resource = await tinker.provision({ model: MODEL, ownerTag: 'legacy-names' });
  const session = await tinker.openSession({ resourceId: resource.id, loraRank: 8 });
  // Saved as an earlier Roundhouse named it (the model's next seq is 1: nothing was sent to it yet).
  const saved = await request(`${emulator.url}/api/v1/save_weights`, {
    method: 'POST',
    headers: { 'x-api-key': apiKey, 'content-type': 'application/json' },
    body: JSON.stringify({ model_id: session.id, path: 'tickets-v1.2-ab12cd34-st0', seq_id: 1, type: 'save_weights' }),
  });
  expect(saved.statusCode).toBe(200);
  await saved.body.dump();
  const path = `tinker://${session.id}/weights/tickets-v1.2-ab12cd34-st0`;
  for (let i = 0; i < 100 && !(await tinker.getSession(session.id)).trainingCheckpointIds.includes(path); i++)
    await new Promise((r) => setTimeout(r, 20));
  expect((await tinker.getSession(session.id)).trainingCheckpointIds).toEqual([path]);
  await tinker.deleteCheckpoint(path);
  expect((await tinker.getSession(session.id)).trainingCheckpointIds).toEqual([]);
  await tinker.deactivate(resource.id);
  await tinker.close();
});
