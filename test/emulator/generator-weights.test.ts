import { startTestEmulator, togetherProvider, type RunningEmulator } from '../helpers/emulator';

let emulator: RunningEmulator;
beforeAll(async () => {
  emulator = await startTestEmulator();
});
afterAll(async () => {
  await emulator.close();
});

test('generator replicas serve the policy of the last weights-sync: sampling before a sync sees the old weights', async () => {
  const provider = togetherProvider(emulator);
  const resource = await provider.provision({ model: 'roundhouse/tiny-chat', ownerTag: 'sync' });
  const session = await provider.openSession({ resourceId: resource.id, loraRank: 8 });
  const prompt = [11, 12, 13];
  const data = [{ modelInput: [11, 12, 13, 41], targetTokens: [12, 13, 41, 42], weights: [0, 0, 1, 1] }];
  const logprobs = async (tag: string) => {
    const [r] = await provider.awaitOperation(
      await provider.submitSample(session.id, tag, [[...prompt, 41, 42]], { maxTokens: 1, temperature: 0 }, { promptLogprobs: true }),
    );
    return { lp: r!.promptLogprobs!.slice(-2), version: r!.policyVersion };
  };
  const before = await logprobs('before');
  expect(before.version).toBe(0);
  for (let step = 1; step <= 5; step++) {
    await provider.awaitOperation(await provider.submitForwardBackward(session.id, `fb${step}`, data));
    await provider.awaitOperation(await provider.submitOptimStep(session.id, `opt${step}`, { learningRate: 0.01 }));
  }
  // Trained five steps, not synced: the generators still serve version 0.
  const unsynced = await logprobs('unsynced');
  expect(unsynced).toEqual(before);
  expect(await provider.syncWeights(session.id, 'sync-1')).toBe(5);
  const synced = await logprobs('synced');
  expect(synced.version).toBe(5);
  expect(synced.lp[0]! + synced.lp[1]!).toBeGreaterThan(before.lp[0]! + before.lp[1]!);
  await provider.deactivate(resource.id);
  await provider.close();
});
