import { ProviderError } from '../../providers/errors';
import { lossBody } from '../../providers/together/mapping';
import { raw, startTestEmulator, testApiKey, togetherProvider, type RunningEmulator } from '../helpers/emulator';

/** What only Together's dialect has (the shared behaviour is in contract.test.ts). */

let emulator: RunningEmulator;

beforeAll(async () => {
  emulator = await startTestEmulator();
});

afterAll(async () => {
  await emulator.close();
});

/** One GRPO datum: a 3-token prompt and a 2-token completion with its sampler logprobs and advantages. */
const datum = {
  modelInput: [10, 11, 12, 13, 40],
  targetTokens: [11, 12, 13, 40, 41],
  weights: [0, 0, 0, 1, 1],
  logprobs: [0, 0, 0, -1, -1],
  advantages: [0, 0, 0, 1, 1],
};

/** A ready tiny-chat resource and a session on it. */
async function grpoSession(provider: ReturnType<typeof togetherProvider>, ownerTag: string) {
  const resource = await provider.provision({ model: 'roundhouse/tiny-chat', ownerTag });
  await provider.waitReady(resource.id, { pollIntervalMs: 20 });
  const session = await provider.openSession({ resourceId: resource.id, loraRank: 8, seed: 7 });
  return { resource, session };
}

test('Together quotes an hourly price for a resource before it is created', async () => {
  const provider = togetherProvider(emulator);
  const quote = await provider.estimateCost('Qwen/Qwen3-8B');
  expect(quote.currency).toBe('USD');
  expect(quote.pricePerHour).toBeGreaterThan(0);
  await provider.close();
});

test('GRPO with beta > 0 and no reference logprobs is refused as non-retryable', async () => {
  const provider = togetherProvider(emulator);
  const { resource, session } = await grpoSession(provider, 'test-grpo');
  const refused = provider.submitForwardBackward(session.id, 'grpo/fb', [datum], { loss: { type: 'grpo', beta: 0.1 } });
  await expect(refused).rejects.toBeInstanceOf(ProviderError);
  await expect(refused).rejects.toMatchObject({ errorClass: 'non-retryable' });
  await provider.deactivate(resource.id);
  await provider.close();
});

test('a GRPO step sent before agg_type was always sent, resent under its key after a deploy, answers its original operation', async () => {
  const apiKey = testApiKey();
  const provider = togetherProvider(emulator, apiKey);
  const { resource, session } = await grpoSession(provider, 'test-grpo-legacy');
  // What the worker of before sent: the GRPO loss without agg_type.
  const legacyParams = { ...(lossBody({ type: 'grpo' }, [datum]).loss.grpo_params as Record<string, unknown>) };
  delete legacyParams.agg_type;
  const legacyBody = { ...lossBody({ type: 'grpo' }, [datum]), loss: { type: 'LOSS_TYPE_GRPO', grpo_params: legacyParams } };
  const sent = await raw(emulator, 'POST', `/v1/rl/training-sessions/${session.id}/operations/forward-backward`, {
    apiKey,
    body: legacyBody,
    idempotencyKey: 'grpo/legacy-step',
  });
  expect(sent.status).toBe(200);

  // Today's worker resends the step with agg_type: the key is refused with that body, and answered with the one it had.
  const handle = await provider.submitForwardBackward(session.id, 'grpo/legacy-step', [datum], {
    loss: { type: 'grpo', aggregation: 'token_mean' },
  });
  expect(handle.operationId).toBe(sent.json.id);
  // Another loss under that key is still refused.
  await expect(provider.submitForwardBackward(session.id, 'grpo/legacy-step', [datum], { loss: { type: 'ppo' } })).rejects.toMatchObject({
    providerCode: 'IDEMPOTENCY_KEY_REUSED',
  });
  await provider.deactivate(resource.id);
  await provider.close();
});
