import { ProviderError } from '../../providers/errors';
import { startTestEmulator, togetherProvider, type RunningEmulator } from '../helpers/emulator';

/** What only Together's dialect has (the shared behaviour is in contract.test.ts). */

let emulator: RunningEmulator;

beforeAll(async () => {
  emulator = await startTestEmulator();
});

afterAll(async () => {
  await emulator.close();
});

test('Together quotes an hourly price for a resource before it is created', async () => {
  const provider = togetherProvider(emulator);
  const quote = await provider.estimateCost('Qwen/Qwen3-8B');
  expect(quote.currency).toBe('USD');
  expect(quote.pricePerHour).toBeGreaterThan(0);
  await provider.close();
});

test('GRPO with beta > 0 and no reference logprobs is refused as non-retryable', async () => {
  const provider = togetherProvider(emulator);
  const resource = await provider.provision({ model: 'roundhouse/tiny-chat', ownerTag: 'test-grpo' });
  await provider.waitReady(resource.id, { pollIntervalMs: 20 });
  const session = await provider.openSession({ resourceId: resource.id, loraRank: 8, seed: 7 });
  const datum = {
    modelInput: [10, 11, 12, 13, 40],
    targetTokens: [11, 12, 13, 40, 41],
    weights: [0, 0, 0, 1, 1],
    logprobs: [0, 0, 0, -1, -1],
    advantages: [0, 0, 0, 1, 1],
  };
  const refused = provider.submitForwardBackward(session.id, 'grpo/fb', [datum], { loss: { type: 'grpo', beta: 0.1 } });
  await expect(refused).rejects.toBeInstanceOf(ProviderError);
  await expect(refused).rejects.toMatchObject({ errorClass: 'non-retryable' });
  await provider.deactivate(resource.id);
  await provider.close();
});
