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
